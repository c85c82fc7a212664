#!/usr/bin/env bash
# What a cut costs in each era: the same `tether call ... count` through the fault proxy's
# same cut schedule, with `--protocol auto` (2026-07-28, the call run as a task and followed
# by `tasks/stream`) and `--protocol legacy` (a 2025 session resumed with Last-Event-ID), in
# alternating rounds against one `tether serve --retry-ms 100` (both eras, the SQLite store in
# a temporary directory). Not part of the test command; scripts/bench-peers.sh runs it too.
#
#   scripts/bench-cuts.sh
#   ROUNDS=5 CUT=3000 CUT_N=600 CUT_INTERVAL_MS=2 scripts/bench-cuts.sh
#
# Each call gets a proxy of its own (`tether-fault-proxy --cut-after-bytes CUT`: every
# connection is closed after CUT server->client bytes), so its counters are the call's alone.
# Per mode it prints the median whole-call seconds, the reconnects `tether call` reported,
# the connections the proxy cut, and the server->client bytes per event, then the ratio of
# auto's seconds to legacy's (target <= 1.5x). A call counts only when its `--json` output
# is progress 1..N exactly once, in order, then `counted N`; any other output fails the run.
# Output: a table on stdout; the rounds' JSON in target/peers/bench-results/cuts.json.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
CUT=${CUT:-3000}
CUT_N=${CUT_N:-600}
CUT_INTERVAL_MS=${CUT_INTERVAL_MS:-2}
RETRY_MS=${RETRY_MS:-100}

out=target/peers/bench-results
mkdir -p "$out"
cargo build --release --quiet -p tether-cli --bin tether -p tether-testkit --bin tether-fault-proxy
tether=target/release/tether
proxy=target/release/tether-fault-proxy

bench=bench-cuts
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

"$tether" serve --bind 127.0.0.1:0 --store "sqlite:$scratch/tether.db" --retry-ms "$RETRY_MS" \
  >"$scratch/serve.out" 2>"$scratch/serve.err" &
pids+=($!)
url=$(ready_line "$scratch/serve.out" "tether: serving http://")
upstream=${url%%/*}

# One call through a fresh proxy: writes the call's stdout, stderr, seconds and the proxy's
# counters under $scratch/$1.
one_call() {
  local name=$1 mode=$2
  local dir=$scratch/$name
  mkdir -p "$dir"
  # The proxy stops when its stdin closes: a fifo held open by a sleeper until it is killed.
  mkfifo "$dir/stdin"
  sleep 3600 >"$dir/stdin" &
  local holder=$!
  "$proxy" --upstream "$upstream" --cut-after-bytes "$CUT" <"$dir/stdin" \
    >"$dir/proxy.out" 2>"$dir/proxy.err" &
  local proxy_pid=$!
  local addr
  addr=$(ready_line "$dir/proxy.out" "listening on ")
  local start end status=0
  start=$(date +%s.%N)
  "$tether" call "http://$addr/mcp" count --protocol "$mode" --json \
    --args "{\"n\":$CUT_N,\"interval_ms\":$CUT_INTERVAL_MS}" \
    >"$dir/call.out" 2>"$dir/call.err" || status=$?
  end=$(date +%s.%N)
  kill "$holder"
  wait "$proxy_pid" || true
  echo "$status $start $end" >"$dir/times"
}

for round in $(seq 1 "$ROUNDS"); do
  # Alternating which goes first, so the machine's drift falls on both alike.
  if ((round % 2)); then order="legacy auto"; else order="auto legacy"; fi
  for mode in $order; do
    one_call "$mode-$round" "$mode"
  done
done

python3 - "$scratch" "$ROUNDS" "$CUT_N" "$CUT" "$out/cuts.json" <<'EOF'
import json, statistics, sys
scratch, rounds, n, cut, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def check(lines, name):
    """Progress 1..n exactly once, in order, then `counted n`."""
    messages = [json.loads(line) for line in lines if line.strip()]
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    if progress != list(range(1, n + 1)):
        missing = sorted(set(range(1, n + 1)) - set(progress))[:5]
        sys.exit(f"bench-cuts: {name}: {len(progress)} progress events, not 1..{n} once each (missing {missing})")
    last = messages[-1]
    text = last.get("result", {}).get("content", [{}])[0].get("text")
    if text != f"counted {n}":
        sys.exit(f"bench-cuts: {name}: the call ended with {json.dumps(last)[:200]}")

results = {"auto": [], "legacy": []}
for mode in results:
    for r in range(1, rounds + 1):
        d = f"{scratch}/{mode}-{r}"
        status, start, end = open(f"{d}/times").read().split()
        if status != "0":
            sys.exit(f"bench-cuts: {mode} round {r}: tether call exited {status}:\n{open(d + '/call.err').read()[-2000:]}")
        check(open(f"{d}/call.out").read().splitlines(), f"{mode} round {r}")
        counters = json.loads(open(f"{d}/proxy.out").read().strip().splitlines()[-1])
        reconnects = sum("reconnecting" in line for line in open(f"{d}/call.err"))
        results[mode].append({
            "seconds": float(end) - float(start),
            "reconnects": reconnects,
            "cuts": counters["cuts"],
            "bytes_per_event": counters["bytes_to_client"] / n,
        })

summary = {}
print(f"cut cost: count n={n} through cuts every {cut} bytes, {rounds} alternating rounds (medians)")
print(f"{'mode':8} {'seconds':>8} {'reconnects':>11} {'cuts':>6} {'bytes/event':>12}")
for mode, runs in results.items():
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    summary[mode] = med
    print(f"{mode:8} {med['seconds']:8.2f} {med['reconnects']:11.0f} {med['cuts']:6.0f} {med['bytes_per_event']:12.1f}")
ratio = summary["auto"]["seconds"] / summary["legacy"]["seconds"]
print(f"cut cost auto/legacy: {ratio:.2f}x the whole-call time (target <= 1.5x)")
json.dump({"n": n, "cut_after_bytes": cut, "rounds": results, "median": summary,
           "auto_over_legacy_seconds": ratio}, open(path, "w"), indent=1)
EOF
