# Shared by the bench scripts that start servers of their own (scripts/bench-cuts.sh,
# scripts/bench-oauth.sh, scripts/bench-otel.sh, scripts/bench-gateway.sh); sourced, never
# run. Gives `$scratch` (a temporary directory), the `pids` array (processes to kill on
# exit; append with `pids+=($!)`), the exit trap that kills them and removes `$scratch`, and
# `ready_line FILE PATTERN`. `$bench` names the script in messages.

scratch=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

# Waits for the first line of $1 matching $2 and prints what follows the match.
ready_line() {
  local file=$1 pattern=$2
  for _ in $(seq 1 200); do
    if grep -q "$pattern" "$file" 2>/dev/null; then
      grep -m1 "$pattern" "$file" | sed "s|.*$pattern||"
      return 0
    fi
    sleep 0.05
  done
  echo "$bench: no '$pattern' in $file" >&2
  return 1
}
