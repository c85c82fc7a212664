#!/usr/bin/env bash
# What federation costs a call (docs/GATEWAY.md, docs/PERFORMANCE.md#gateway): `tether bench
# roundtrip` (2026-07-28 `count {n: 0}` round trips) against the upstream directly (`tether
# serve`, memory store), a gateway with that one remote upstream (`--config`, one `url`
# upstream: the call is `demo_count`), and a federating gateway with the same upstream beside
# two stdio ones (the Python SDK server and server-everything), all started side by side and
# kept up for the whole run, measured in alternating rounds so that the machine's drift falls
# on all alike. Not part of the test command; needs scripts/peers.sh to have run.
#
#   scripts/bench-gateway.sh
#   ROUNDS=5 SECONDS_PER=5 CLIENTS=1,50 scripts/bench-gateway.sh
#
# Prints the median of the rounds for each target and its ratio to the upstream directly, and
# the gateways' CPU per call. Output: a table on stdout; the rounds' JSON in
# target/peers/bench-results/gateway.json.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
SECONDS_PER=${SECONDS_PER:-3}
CLIENTS=${CLIENTS:-1,50}

out=target/peers/bench-results
mkdir -p "$out"
python=target/peers/py/bin/python
node=target/peers/node/node_modules/node/bin/node
everything=target/peers/node/node_modules/.bin/mcp-server-everything
[ -x "$python" ] && [ -x "$node" ] || { echo "bench-gateway: run scripts/peers.sh first" >&2; exit 1; }
cargo build --release --quiet -p tether-cli --bin tether
tether=target/release/tether

bench=bench-gateway
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

declare -A url pid tool
start() {
  local name=$1
  shift
  "$tether" serve --bind 127.0.0.1:0 --store memory "$@" \
    >"$scratch/$name.out" 2>"$scratch/$name.err" &
  pid[$name]=$!
  pids+=($!)
  url[$name]=http://$(ready_line "$scratch/$name.out" "tether: serving http://")
}
start direct
tool[direct]=count

cat >"$scratch/single.toml" <<TOML
[[upstream]]
name = "demo"
url = "${url[direct]}"
TOML
cat "$scratch/single.toml" >"$scratch/federated.toml"
cat >>"$scratch/federated.toml" <<TOML

[[upstream]]
name = "py"
command = ["$PWD/$python", "$PWD/interop/python/server.py", "--stdio"]

[[upstream]]
name = "ts"
command = ["$PWD/$node", "$PWD/$everything", "stdio"]
TOML
start single --config "$scratch/single.toml"
start federated --config "$scratch/federated.toml"
tool[single]=demo_count
tool[federated]=demo_count

targets=(direct single federated)
for round in $(seq 1 "$ROUNDS"); do
  # Each round starts with the next target, so none always runs first.
  shift=$(((round - 1) % ${#targets[@]}))
  order=("${targets[@]:shift}" "${targets[@]:0:shift}")
  for name in "${order[@]}"; do
    "$tether" bench roundtrip -c "$CLIENTS" --seconds "$SECONDS_PER" --url "${url[$name]}" \
      --tool "${tool[$name]}" --pid "${pid[$name]}" --json >"$scratch/roundtrip-$name-$round.json"
  done
done

python3 - "$scratch" "$ROUNDS" "$CLIENTS" "$out/gateway.json" <<'PY'
import json, statistics, sys
scratch, rounds, clients, path = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
targets = ("direct", "single", "federated")

def load(name):
    report = json.load(open(f"{scratch}/{name}.json"))
    if report.get("ok") is False:
        sys.exit(f"bench-gateway: {name}: {report.get('error')}")
    return report

rounds_json = {t: [load(f"roundtrip-{t}-{r}") for r in range(1, rounds + 1)] for t in targets}
medians = {t: {k: statistics.median(run[k] for run in runs)
               for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
           for t, runs in rounds_json.items()}
print(f"{'metric':34} {'direct':>10} {'1 upstream':>11} {'ratio':>7} {'federated':>10} {'ratio':>7}")
for c in clients:
    for key in (f"clients_{c}_calls_per_sec", f"clients_{c}_latency_p50_ms"):
        d, s, f = (medians[t][key] for t in targets)
        print(f"{key:34} {d:10.2f} {s:11.2f} {s / d:6.3f}x {f:10.2f} {f / d:6.3f}x")
    key = f"clients_{c}_server_cpu_us_per_call"
    d, s, f = (medians[t][key] for t in targets)
    print(f"{key:34} {d:10.1f} {s:11.1f} {'':7} {f:10.1f}  (the gateway's own; the upstream's is beside it)")
json.dump({"rounds": rounds_json, "medians": medians}, open(path, "w"), indent=2)
print(f"(medians of {rounds} rounds; every round in {path})")
PY
