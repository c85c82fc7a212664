#!/usr/bin/env bash
# What checking JWT access tokens costs: `tether bench roundtrip` and `tether bench throughput`
# against two `tether serve` processes started side by side, one open and one protected by
# `--oauth-issuer` (oauth2-mock-server from scripts/peers.sh on loopback, RS256 keys, a
# required scope), in alternating rounds so that the machine's drift falls on both alike.
# The protected one's token comes from the authorization server for its resource. Not part of
# the test command; needs scripts/peers.sh to have run.
#
#   scripts/bench-oauth.sh
#   ROUNDS=5 SECONDS_PER=5 CLIENTS=1,50 scripts/bench-oauth.sh
#
# Per metric it prints the median of the rounds for each server and the ratio protected/open
# (target >= 0.9x for the call rates), and the server CPU per call each spent: the difference
# is what validation costs per request. Output: a table on stdout; the rounds' JSON in
# target/peers/bench-results/oauth.json.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
SECONDS_PER=${SECONDS_PER:-3}
CLIENTS=${CLIENTS:-1,50}
EVENTS=${EVENTS:-100000}

out=target/peers/bench-results
mkdir -p "$out"
node=target/peers/node/node_modules/node/bin/node
[ -x "$node" ] || { echo "bench-oauth: run scripts/peers.sh first" >&2; exit 1; }
cargo build --release --quiet -p tether-cli --bin tether
tether=target/release/tether

bench=bench-oauth
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

"$node" interop/oauth/mock-as.mjs --bind 127.0.0.1:0 >"$scratch/as.out" 2>"$scratch/as.err" &
pids+=($!)
issuer=http://$(ready_line "$scratch/as.out" "as: serving http://")

"$tether" serve --bind 127.0.0.1:0 --store memory >"$scratch/open.out" 2>"$scratch/open.err" &
open_pid=$!
pids+=("$open_pid")
"$tether" serve --bind 127.0.0.1:0 --store memory --oauth-issuer "$issuer" --oauth-scope mcp \
  >"$scratch/protected.out" 2>"$scratch/protected.err" &
protected_pid=$!
pids+=("$protected_pid")
open_url=http://$(ready_line "$scratch/open.out" "tether: serving http://")
protected_url=http://$(ready_line "$scratch/protected.out" "tether: serving http://")

python3 - "$issuer" "$protected_url" "$scratch/token" <<'EOF'
import json, sys, urllib.parse, urllib.request
issuer, resource, path = sys.argv[1:]
form = urllib.parse.urlencode({"grant_type": "client_credentials", "resource": resource, "scope": "mcp"})
with urllib.request.urlopen(f"{issuer}/token", form.encode()) as answer:
    open(path, "w").write(json.load(answer)["access_token"])
EOF

# One scenario against one server: its JSON under $scratch/$name.json.
measure() {
  local name=$1 which=$2
  shift 2
  local url pid auth=()
  if [ "$which" = open ]; then
    url=$open_url pid=$open_pid
  else
    url=$protected_url pid=$protected_pid auth=(--bearer-token-file "$scratch/token")
  fi
  "$tether" bench "$@" --url "$url" --pid "$pid" "${auth[@]}" --json >"$scratch/$name.json"
}

for round in $(seq 1 "$ROUNDS"); do
  if ((round % 2)); then order="open protected"; else order="protected open"; fi
  for which in $order; do
    measure "roundtrip-$which-$round" "$which" roundtrip -c "$CLIENTS" --seconds "$SECONDS_PER"
    measure "throughput-$which-$round" "$which" throughput --n "$EVENTS" --runs 1
  done
done

python3 - "$scratch" "$ROUNDS" "$CLIENTS" "$out/oauth.json" <<'EOF'
import json, statistics, sys
scratch, rounds, clients, path = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]

def load(name):
    report = json.load(open(f"{scratch}/{name}.json"))
    if report.get("ok") is False:
        sys.exit(f"bench-oauth: {name}: {report.get('error')}")
    return report

rounds_json = {}
medians = {}
for which in ("open", "protected"):
    runs = [dict(load(f"roundtrip-{which}-{r}"), **load(f"throughput-{which}-{r}")) for r in range(1, rounds + 1)]
    rounds_json[which] = runs
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    medians[which] = {k: statistics.median(run[k] for run in runs) for k in keys}

rows = [f"clients_{c}_calls_per_sec" for c in clients] + ["events_per_sec"]
cpu = [f"clients_{c}_server_cpu_us_per_call" for c in clients]
print(f"{'metric':34} {'open':>12} {'protected':>12} {'ratio':>8}")
for key in rows:
    o, p = medians["open"].get(key), medians["protected"].get(key)
    print(f"{key:34} {o:12.1f} {p:12.1f} {p / o:7.3f}x")
for key in cpu:
    o, p = medians["open"].get(key), medians["protected"].get(key)
    print(f"{key:34} {o:12.1f} {p:12.1f} {p - o:+7.1f}us")
json.dump({"rounds": rounds_json, "medians": medians}, open(path, "w"), indent=2)
print(f"(medians of {rounds} rounds; every round in {path})")
EOF
