#!/usr/bin/env bash
# What OpenTelemetry export costs `tether serve` (docs/TELEMETRY.md#cost): `tether bench
# roundtrip` (2026-07-28 `tools/call` round trips, each a server span) and `tether bench
# throughput` against three servers started side by side and kept up for the whole run, in
# alternating rounds so that the machine's drift falls on all alike: export off, traces
# sampled at 10 % (`traceidratio` 0.1) and at 100 % (`always_on`), both exporting over
# OTLP/HTTP protobuf to the receiver of the tests (interop/otel/receiver.py). Not part of the
# test command; needs scripts/peers.sh to have run.
#
#   scripts/bench-otel.sh
#   ROUNDS=5 SECONDS_PER=5 CLIENTS=1,50 RECEIVER=hang scripts/bench-otel.sh
#
# RECEIVER=ok (default), hang (accepts and never answers) or error (fails every export).
# Prints the median of the rounds for each server and its ratio to "off" (target >= 0.9x at
# 10 %), and the server CPU per call. Output: a table on stdout; the rounds' JSON in
# target/peers/bench-results/otel.json.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
SECONDS_PER=${SECONDS_PER:-3}
CLIENTS=${CLIENTS:-1,50}
EVENTS=${EVENTS:-100000}
RECEIVER=${RECEIVER:-ok}

out=target/peers/bench-results
mkdir -p "$out"
python=target/peers/py/bin/python
[ -x "$python" ] || { echo "bench-otel: run scripts/peers.sh first" >&2; exit 1; }
cargo build --release --quiet -p tether-cli --bin tether
tether=target/release/tether

bench=bench-otel
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

"$python" interop/otel/receiver.py "$scratch/received.jsonl" --mode "$RECEIVER" \
  >"$scratch/receiver.out" 2>"$scratch/receiver.err" &
pids+=($!)
endpoint=$(ready_line "$scratch/receiver.out" "receiver: http=")
endpoint=${endpoint%% *}

declare -A url pid
start() {
  local name=$1
  shift
  env "$@" "$tether" serve --bind 127.0.0.1:0 --store memory \
    >"$scratch/$name.out" 2>"$scratch/$name.err" &
  pid[$name]=$!
  pids+=($!)
  url[$name]=http://$(ready_line "$scratch/$name.out" "tether: serving http://")
}
otel=(OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)
start off
start sampled_10 "${otel[@]}" OTEL_SERVICE_NAME=sampled-10 OTEL_TRACES_SAMPLER=traceidratio \
  OTEL_TRACES_SAMPLER_ARG=0.1
start sampled_100 "${otel[@]}" OTEL_SERVICE_NAME=sampled-100 OTEL_TRACES_SAMPLER=always_on

servers=(off sampled_10 sampled_100)
for round in $(seq 1 "$ROUNDS"); do
  # Each round starts with the next server, so none always runs first.
  shift=$(((round - 1) % ${#servers[@]}))
  order=("${servers[@]:shift}" "${servers[@]:0:shift}")
  for name in "${order[@]}"; do
    "$tether" bench roundtrip -c "$CLIENTS" --seconds "$SECONDS_PER" --url "${url[$name]}" \
      --pid "${pid[$name]}" --json >"$scratch/roundtrip-$name-$round.json"
    "$tether" bench throughput --n "$EVENTS" --runs 1 --url "${url[$name]}" \
      --pid "${pid[$name]}" --json >"$scratch/throughput-$name-$round.json"
  done
done

spans=$(grep -c '"signal": "span"' "$scratch/received.jsonl" 2>/dev/null || true)
echo "receiver ($RECEIVER) got ${spans:-0} spans"
for name in sampled_10 sampled_100; do
  dropped=$(curl -s "${url[$name]%/mcp}/metrics" | sed -n 's/^tether_telemetry_spans_dropped_total //p')
  echo "$name: tether_telemetry_spans_dropped_total ${dropped:-?}"
done

python3 - "$scratch" "$ROUNDS" "$CLIENTS" "$out/otel.json" <<'EOF'
import json, statistics, sys
scratch, rounds, clients, path = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
servers = ("off", "sampled_10", "sampled_100")

def load(name):
    report = json.load(open(f"{scratch}/{name}.json"))
    if report.get("ok") is False:
        sys.exit(f"bench-otel: {name}: {report.get('error')}")
    return report

rounds_json, medians = {}, {}
for which in servers:
    runs = [dict(load(f"roundtrip-{which}-{r}"), **load(f"throughput-{which}-{r}"))
            for r in range(1, rounds + 1)]
    rounds_json[which] = runs
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    medians[which] = {k: statistics.median(run[k] for run in runs) for k in keys}

rates = [f"clients_{c}_calls_per_sec" for c in clients] + ["events_per_sec"]
cpu = [f"clients_{c}_server_cpu_us_per_call" for c in clients]
print(f"{'metric':34} {'off':>10} {'10 %':>10} {'ratio':>7} {'100 %':>10} {'ratio':>7}")
for key in rates:
    o, a, b = (medians[w].get(key) for w in servers)
    print(f"{key:34} {o:10.1f} {a:10.1f} {a / o:6.3f}x {b:10.1f} {b / o:6.3f}x")
for key in cpu:
    o, a, b = (medians[w].get(key) for w in servers)
    print(f"{key:34} {o:10.1f} {a:10.1f} {a - o:+6.1f}us {b:10.1f} {b - o:+6.1f}us")
json.dump({"rounds": rounds_json, "medians": medians}, open(path, "w"), indent=2)
print(f"(medians of {rounds} rounds; every round in {path})")
EOF
