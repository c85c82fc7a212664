#!/usr/bin/env bash
# Runs the same `tether bench` scenarios against tether and its peers in one run, on this
# machine, and prints tether/peer ratios (docs/PERFORMANCE.md holds a run's output). Not part
# of the test command.
#
#   scripts/bench-peers.sh            # all targets
#   N=20000 C=20 scripts/bench-peers.sh
#   BEFORE=/tmp/before/target/release/tether scripts/bench-peers.sh   # before/after
#
# Targets, each on 127.0.0.1 with the same `count` tool (n progress notifications, then the
# text result `counted n`):
#   sqlite   `tether serve --store sqlite:FILE` (the default store, FILE in a temporary
#            directory, default durability), release build, session and event caps raised
#   sqlite_full  the same with `--durability full` (throughput only)
#   memory   the same with `--store memory`
#   redis    the same with `--store redis://127.0.0.1:PORT`, on a private `redis-server`
#            started by this script (no persistence, a free port)
#   gateway  `tether serve --store sqlite:FILE -- python3 count_child.py`: the gateway in front
#            of a minimal stdio server (target/peers/gateway-count, source below) that writes
#            `count`'s progress lines as fast as Python can
#   rmcp     the official Rust SDK, crates.io rmcp =3.11.0: interop/rmcp's `rmcp-peer --era
#            legacy` (built by scripts/peers.sh), its default session manager
#   ts       interop/ts/server.mjs, @modelcontextprotocol/sdk 1.32.2 with its event store
#   python   interop/python/server.py, mcp 2.3.0 with its event store
#   raw      a raw ceiling: a minimal hyper server writing tether-shaped SSE frames encoded in
#            64 KiB batches (target/peers/raw-ceiling, sources below); throughput, and the
#            round trips' ceiling (`count {n: 0}` answered with a preformatted JSON result)
#   rmcp_on_rmcp, rmcp_on_tether_memory, rmcp_on_tether_sqlite  one rmcp server's code
#            (crates/tether/examples/rmcp_server.rs, `#[tool_router]`) on rmcp's own
#            StreamableHttpService (`--transport rmcp`, in memory) and through tether's
#            `RmcpHandler` on the memory and SQLite stores (SKIP="rmcp_example" leaves them out)
# Scenarios: throughput (N events, RUNS runs, median) and fanout (C sessions, FANOUT_N events
# each unpaced, then 20 paced events 50 ms apart) against every target; then tether alone,
# per store: resume (100 000 stored), fanout with BIG_C sessions, idle (IDLE sessions, on a
# fresh server); `tether bench store` (memory, SQLite, Redis in process) with 50 streams and
# with one; and two nodes on the redis target's database (fanout on one node, then on both at
# once, with the cores redis-server and each node used and how busy the whole machine was).
# Then 2026-07-28 round trips (`tether bench roundtrip`, 1 and 50 clients, RT_SECONDS each)
# against each tether store, rmcp's stateless server (`rmcp_modern`: interop/rmcp,
# `--era modern`, built by scripts/peers.sh) and the raw ceiling; and `tether bench tasks` on each tether store and
# on rmcp's task server (`rmcp_tasks`: interop/rmcp `--era modern --tasks`). Last, the cut
# cost of each era (scripts/bench-cuts.sh: `tether call count` through the same cuts, `auto`
# against `legacy`; SKIP="cuts" leaves it out).
# Environment: N (50000), RUNS (3), C (50), FANOUT_N (200), BIG_C (1000), IDLE (1000), RT_SECONDS (3),
# SKIP (space-separated targets to leave out), BEFORE (an older `tether` binary: served as
# the target `before` with the store BEFORE_STORE (sqlite, memory or redis; default sqlite)
# and the same flags, measured in the same run by the same scenarios as tether, and printed
# as after/before ratios against the same store (and its gateway as `before_gateway`); build
# one with `git worktree add
# /tmp/before <commit> && (cd /tmp/before && cargo build --release -p tether-cli --bin
# tether)`).
# Output: a table on stdout; each scenario's JSON under target/peers/bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-50000}
RUNS=${RUNS:-3}
C=${C:-50}
FANOUT_N=${FANOUT_N:-200}
RT_SECONDS=${RT_SECONDS:-3}
BIG_C=${BIG_C:-1000}
IDLE=${IDLE:-1000}
SKIP=${SKIP:-}
BEFORE=${BEFORE:-}
BEFORE_STORE=${BEFORE_STORE:-sqlite}

peers=target/peers
out=$peers/bench-results
rm -rf "$out"
mkdir -p "$out"

scripts/peers.sh >/dev/null
cargo build --release -p tether-cli
tether=target/release/tether
# One rmcp server's code (crates/tether/examples/rmcp_server.rs) served by tether and by rmcp.
if [[ " ${SKIP:-} " != *" rmcp_example "* ]]; then
  cargo build --release -p tether --all-features --example rmcp_server
fi
rmcp_example=target/release/examples/rmcp_server

# Writes $2 (stdin) to $1 only when it differs, so cargo does not rebuild an unchanged peer.
put() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  mkdir -p "$(dirname "$1")"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

put $peers/raw-ceiling/Cargo.toml <<'RUST_EOF'
# The raw ceiling for scripts/bench-peers.sh: a minimal hyper server that answers the MCP
# handshake and streams `count` as SSE frames shaped like tether's, encoded in 64 KiB batches
# with no store, no JSON serializer and no per-event allocation. Not an MCP server otherwise.
[package]
name = "raw-ceiling"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
bytes = "1"
http-body-util = "0.1"
hyper = { version = "1", features = ["server", "http1"] }
hyper-util = { version = "0.1", features = ["tokio"] }
serde_json = "1"
tokio = { version = "1", features = ["full"] }
tokio-stream = "0.1"

[profile.release]
debug = "line-tables-only"
RUST_EOF
put $peers/raw-ceiling/src/main.rs <<'RUST_EOF'
//! Usage: raw-ceiling --bind 127.0.0.1:0; prints `peer: serving http://ADDR/mcp`.
//! POST initialize: JSON result with `Mcp-Session-Id`; `server/discover`: a 2026-07-28 JSON
//! result; a notification: 202; tools/call `count {n}`: `text/event-stream` with a priming
//! event, n progress frames and the result, each `event: message` with an id
//! `<22 chars>:<seq>`, as tether frames them; `count {n: 0}` (the round trips): the result
//! alone, as JSON.

use std::convert::Infallible;
use std::io::Write as _;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

const STREAM: &str = "AAAAAAAAAAAAAAAAAAAAAA";
const BATCH: usize = 64 * 1024;

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, ct: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", ct)
        .header("mcp-session-id", "raw")
        .body(Full::new(body.into()).boxed())
        .unwrap()
}

async fn handle(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let message: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let method = message["method"].as_str().unwrap_or_default();
    if method == "initialize" {
        return Ok(full(
            StatusCode::OK,
            "application/json",
            r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw-ceiling","version":"0"}}}"#,
        ));
    }
    if method == "server/discover" {
        return Ok(full(
            StatusCode::OK,
            "application/json",
            r#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"raw-ceiling","version":"0"}}}"#,
        ));
    }
    if method != "tools/call" {
        return Ok(full(StatusCode::ACCEPTED, "text/plain", ""));
    }
    let n = message["params"]["arguments"]["n"].as_u64().unwrap_or(0);
    let id = message["id"].to_string();
    if n == 0 {
        // The round-trip ceiling: the answer alone, as JSON, formatted without a serializer.
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"counted 0"}}]}}}}"#
        );
        return Ok(full(StatusCode::OK, "application/json", body));
    }
    let token = message["params"]["_meta"]["progressToken"].to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(BATCH + 512);
        let mut line = Vec::with_capacity(256);
        write!(line, "id: {STREAM}:0\nretry: 1000\ndata:\n\n").unwrap();
        buf.extend_from_slice(&line);
        for i in 1..=n {
            line.clear();
            write!(
                line,
                "event: message\nid: {STREAM}:{i}\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{token},\"progress\":{i},\"total\":{n}}}}}\n\n"
            )
            .unwrap();
            buf.extend_from_slice(&line);
            if buf.len() >= BATCH {
                if tx.send(Ok(Frame::data(buf.split().freeze()))).await.is_err() {
                    return;
                }
            }
        }
        line.clear();
        write!(
            line,
            "event: message\nid: {STREAM}:{}\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"counted {n}\"}}]}}}}\n\n",
            n + 1
        )
        .unwrap();
        buf.extend_from_slice(&line);
        let _ = tx.send(Ok(Frame::data(buf.split().freeze()))).await;
    });
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(body.boxed())
        .unwrap())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bind = args
        .iter()
        .position(|a| a == "--bind")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&bind).await.expect("bind");
    println!("peer: serving http://{}/mcp", listener.local_addr().expect("addr"));
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                .await;
        });
    }
}
RUST_EOF
put $peers/gateway-count/count_child.py <<'PY_EOF'
"""A minimal stdio MCP server with `count {n}` for scripts/bench-peers.sh:
n progress lines for the call's progressToken, written in large blocks, then `counted n`."""
import json
import sys

out = sys.stdout
for line in sys.stdin:
    message = json.loads(line)
    method, id_ = message.get("method"), message.get("id")
    if id_ is None or method is None:
        continue
    params = message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "count-child", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "count", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        n = int((params.get("arguments") or {}).get("n", 0))
        token = json.dumps((params.get("_meta") or {}).get("progressToken"))
        head = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":' % token
        tail = ',"total":%d}}\n' % n
        for start in range(1, n + 1, 4096):
            out.write("".join(head + str(i) + tail for i in range(start, min(start + 4096, n + 1))))
        result = {"content": [{"type": "text", "text": "counted %d" % n}]}
    else:
        result = {}
    out.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}) + "\n")
    out.flush()
PY_EOF
for peer in raw-ceiling; do
  (cd $peers/$peer && CARGO_TARGET_DIR="$PWD/target" cargo build --release --quiet)
done

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# start NAME CMD ARGS…: starts a server, waits for its `… serving URL` line, sets URL_<NAME>.
start() {
  local name=$1
  shift
  RUST_LOG=warn "$@" >"$out/$name.stdout" 2>"$out/$name.stderr" &
  pids+=($!)
  printf -v "PID_$name" '%s' "$!"
  for _ in $(seq 200); do
    if grep -q 'serving http' "$out/$name.stdout" 2>/dev/null; then
      printf -v "URL_$name" '%s' "$(grep -m1 -o 'http://[^ ]*' "$out/$name.stdout")"
      return
    fi
    sleep 0.1
  done
  echo "bench-peers: $name did not start; see $out/$name.stderr" >&2
  exit 1
}

targets=()
want() { [[ " $SKIP " != *" $1 "* ]]; }

scratch=$(mktemp -d)
cleanup_scratch() { cleanup; rm -rf "$scratch"; }
trap cleanup_scratch EXIT

# A private redis-server for the redis target and the store scenario: no persistence, a port
# nobody else uses. Its pid joins the others, so it stops with them.
redis_url=
if want redis; then
  redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$scratch" >"$out/redis-server.log" 2>&1 &
  pids+=($!)
  redis_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null; then break; fi
    sleep 0.05
  done
  redis_url=redis://127.0.0.1:$redis_port
fi

# store_flag STORE NAME: sets `flag` to the `--store` value for a tether target: each target
# its own SQLite file, or its own Redis database, so no two servers share a log.
redis_db=0
store_flag() {
  case $1 in
    memory) flag=memory ;;
    sqlite) flag="sqlite:$scratch/$2.db" ;;
    redis) redis_db=$((redis_db + 1)); flag="$redis_url/$redis_db" ;;
  esac
}

# Room for the tether-only scenarios: resume stores 100 000 events in one session, idle may
# hold more sessions than the default 1 024.
tether_flags=(serve --bind 127.0.0.1:0 --max-sessions 20000 --max-events-per-session 200000)
stores=()
for store in sqlite memory redis; do
  if want "$store"; then
    store_flag "$store" "$store"
    [ "$store" = redis ] && redis_flag=$flag
    start "$store" $tether "${tether_flags[@]}" --store "$flag"
    targets+=("$store")
    stores+=("$store")
  fi
done
if [ -n "$BEFORE" ]; then
  store_flag "$BEFORE_STORE" before
  start before "$BEFORE" "${tether_flags[@]}" --store "$flag"
  targets+=(before)
fi
if want gateway; then
  child=(-- python3 "$peers/gateway-count/count_child.py")
  store_flag sqlite gateway
  start gateway $tether "${tether_flags[@]}" --store "$flag" "${child[@]}"
  targets+=(gateway)
  if [ -n "$BEFORE" ]; then
    store_flag sqlite before_gateway
    start before_gateway "$BEFORE" "${tether_flags[@]}" --store "$flag" "${child[@]}"
    targets+=(before_gateway)
  fi
fi
want rmcp && start rmcp target/peers/rmcp-target/release/rmcp-peer --era legacy --bind 127.0.0.1:0 && targets+=(rmcp)
want ts && start ts $peers/node/node_modules/node/bin/node interop/ts/server.mjs --bind 127.0.0.1:0 && targets+=(ts)
want python && start python $peers/py/bin/python interop/python/server.py --bind 127.0.0.1:0 && targets+=(python)
want raw && start raw $peers/raw-ceiling/target/release/raw-ceiling --bind 127.0.0.1:0 && targets+=(raw)
if want rmcp_example; then
  start rmcp_on_rmcp $rmcp_example --transport rmcp --bind 127.0.0.1:0 && targets+=(rmcp_on_rmcp)
  start rmcp_on_tether_memory $rmcp_example --store memory --bind 127.0.0.1:0 && targets+=(rmcp_on_tether_memory)
  start rmcp_on_tether_sqlite $rmcp_example --store "sqlite:$scratch/rmcp-example.db" --bind 127.0.0.1:0 && targets+=(rmcp_on_tether_sqlite)
fi

# bench NAME SCENARIO ARGS…: one scenario, JSON kept; a failure is recorded, not fatal.
bench() {
  local name=$1 scenario=$2
  shift 2
  echo "bench-peers: $scenario against $name" >&2
  $tether bench "$scenario" "$@" --json >"$out/$name-$scenario.json" ||
    echo "bench-peers: $scenario against $name failed" >&2
}

for name in "${targets[@]}"; do
  url_var=URL_$name pid_var=PID_$name
  bench "$name" throughput --url "${!url_var}" --n "$N" --runs "$RUNS" --pid "${!pid_var}"
  if [ "$name" != raw ]; then
    bench "$name" fanout --url "${!url_var}" -c "$C" --n "$FANOUT_N"
  fi
done

# 2026-07-28 round trips: stateless `tools/call` (`count {n: 0}`) from 1 and from 50 clients,
# against each tether store, rmcp's stateless server (interop/rmcp, `--era modern`) and the
# raw ceiling (a server that does no work: what this machine and this client allow).
if want rmcp; then
  start rmcp_modern target/peers/rmcp-target/release/rmcp-peer --era modern --bind 127.0.0.1:0
fi
for name in sqlite memory redis rmcp_modern raw; do
  url_var=URL_$name
  if [ -n "${!url_var:-}" ]; then
    pid_var=PID_$name
    bench "$name" roundtrip --url "${!url_var}" -c 1,50 --seconds "$RT_SECONDS" --pid "${!pid_var}"
  fi
done
# Tasks (creation latency, tasks/get calls/s, tasks/stream events/s) on each tether store and
# on rmcp's in-memory task server (interop/rmcp `--era modern --tasks`; no task streams).
if want rmcp; then
  start rmcp_tasks target/peers/rmcp-target/release/rmcp-peer --era modern --tasks --bind 127.0.0.1:0
fi
for name in sqlite memory redis rmcp_tasks; do
  url_var=URL_$name
  if [ -n "${!url_var:-}" ]; then
    bench "$name" tasks --url "${!url_var}" -c "$C" --seconds "$RT_SECONDS"
  fi
done

# tether_only NAME BINARY STORE: resume, big fanout and idle (on a fresh server, so its RSS
# is that of an unused process) against one tether build and store.
tether_only() {
  local name=$1 binary=$2 store=$3 url_var=URL_$1
  bench "$name" resume --url "${!url_var}"
  bench "$name-big" fanout --url "${!url_var}" -c "$BIG_C" --n "$FANOUT_N"
  store_flag "$store" "${name}_idle"
  start "${name}_idle" "$binary" "${tether_flags[@]}" --store "$flag"
  local idle_url=URL_${name}_idle idle_pid=PID_${name}_idle
  bench "$name" idle --url "${!idle_url}" --pid "${!idle_pid}" -s "$IDLE"
  kill "${!idle_pid}" 2>/dev/null || true
}
for store in "${stores[@]}"; do
  tether_only "$store" $tether "$store"
done
if [ -n "$BEFORE" ]; then
  tether_only before "$BEFORE" "$BEFORE_STORE"
fi
if [ ${#stores[@]} -gt 0 ]; then
  bench tether store ${redis_url:+--redis "$redis_url/15"}
  bench tether-one store --tasks 1 ${redis_url:+--redis "$redis_url/14"}
fi
# The default store with `--durability full` (a sync per commit), throughput only.
if want sqlite; then
  store_flag sqlite sqlite_full
  start sqlite_full $tether "${tether_flags[@]}" --store "$flag" --durability full
  bench sqlite_full throughput --url "$URL_sqlite_full" --n "$N" --runs "$RUNS" --pid "$PID_sqlite_full"
fi
# Two nodes on one Redis: fanout with 2C sessions (10 × FANOUT_N events each) on one node,
# then C sessions on each of two nodes at once (a second `tether serve` on the redis target's
# database).
if want redis; then
  start redis_b $tether "${tether_flags[@]}" --store "$redis_flag" --node-id bench-b
  # Each fanout also reports, over its unpaced streams, how busy the whole machine was and
  # the cores redis-server and the node used.
  bench redis-one-node fanout --url "$URL_redis" -c $((2 * C)) --n $((10 * FANOUT_N)) \
    --pid "$redis_pid" --pid "$PID_redis"
  bench redis-node-a fanout --url "$URL_redis" -c "$C" --n $((10 * FANOUT_N)) \
    --pid "$redis_pid" --pid "$PID_redis" &
  node_a=$!
  bench redis-node-b fanout --url "$URL_redis_b" -c "$C" --n $((10 * FANOUT_N)) \
    --pid "$redis_pid" --pid "$PID_redis_b"
  wait "$node_a" || true
  echo "{\"redis\": $redis_pid, \"a\": $PID_redis, \"b\": $PID_redis_b}" >"$out/redis-pids.json"

fi

python3 - "$out" "$N" "$C" "$BIG_C" "$BEFORE" "$BEFORE_STORE" <<'PY_EOF'
import json, os, pathlib, sys
out, n, c, big_c, before, before_store = pathlib.Path(sys.argv[1]), *sys.argv[2:7]
def load(name, scenario):
    p = out / f"{name}-{scenario}.json"
    try:
        return json.loads(p.read_text())
    except Exception:
        return None
def rate(name, scenario="throughput", key="events_per_sec"):
    r = load(name, scenario)
    return r[key] if r and r.get("ok") and r.get(key) else None
stores = ["sqlite", "memory", "redis"]
names = ["sqlite", "sqlite_full", "memory", "redis"] + (["before"] if before else []) + ["gateway"] + (["before_gateway"] if before else []) + ["rmcp", "ts", "python", "raw", "rmcp_on_rmcp", "rmcp_on_tether_memory", "rmcp_on_tether_sqlite"]
heading = {"sqlite": "tether sqlite (default)", "sqlite_full": "tether sqlite, durability full", "memory": "tether memory", "redis": "tether redis",
           "before": f"before ({before_store})", "gateway": "tether gateway (sqlite)",
           "before_gateway": "before gateway (sqlite)",
           "rmcp_on_rmcp": "rmcp example on rmcp's transport", "rmcp_on_tether_memory": "rmcp example on tether (memory)",
           "rmcp_on_tether_sqlite": "rmcp example on tether (sqlite)"}
rows = [
    ("throughput", "events_per_sec", f"throughput events/s (n={n}, median)"),
    ("throughput", "server_cpu_us_per_event", "server CPU µs per event (throughput runs)"),
    ("fanout", "aggregate_events_per_sec", f"fanout aggregate events/s (C={c})"),
    ("fanout", "latency_p50_ms", f"fanout p50 latency ms (C={c}, paced)"),
    ("fanout", "latency_p99_ms", f"fanout p99 latency ms (C={c}, paced)"),
]
print()
print("| measure | " + " | ".join(heading.get(name, name) for name in names) + " |")
print("|---|" + "---|" * len(names))
for scenario, key, label in rows:
    cells = []
    for name in names:
        r = load(name, scenario)
        if r is None:
            cells.append("-")
        elif not r.get("ok"):
            cells.append("failed")
        else:
            v = r.get(key)
            cells.append("-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.2f}")
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
# Each ratio with the target it answers (docs/PERFORMANCE.md).
for a, b, target in [("sqlite", "memory", "0.5x"), ("sqlite", "rmcp", "3x"), ("redis", "rmcp", "2x"),
                     ("memory", "python", "20x"), ("memory", "ts", "5x"), ("memory", "rmcp", "2x"),
                     ("memory", "raw", "0.5x"),
                     ("rmcp_on_tether_memory", "rmcp_on_rmcp", "3x"), ("rmcp_on_tether_sqlite", "rmcp_on_rmcp", "3x")]:
    if rate(a) and rate(b):
        print(f"throughput {a}/{b}: {rate(a) / rate(b):.2f}x (target >= {target})")
for name in names:
    if name != "memory" and rate(name, key="server_cpu_us_per_event") and rate("memory", key="server_cpu_us_per_event"):
        print(f"server CPU per event {name}/memory: {rate(name, key='server_cpu_us_per_event') / rate('memory', key='server_cpu_us_per_event'):.2f}x")
print()
for clients in (1, 50):
    key = f"clients_{clients}_calls_per_sec"
    cells = [f"{name} {rate(name, 'roundtrip', key):,.0f}" for name in ["sqlite", "memory", "redis", "rmcp_modern", "raw"] if rate(name, "roundtrip", key)]
    print(f"roundtrip calls/s, {clients} client(s): " + ", ".join(cells))
    if rate("raw", "roundtrip", key) and rate("rmcp_modern", "roundtrip", key):
        print(f"roundtrip raw/rmcp, {clients} client(s): {rate('raw', 'roundtrip', key) / rate('rmcp_modern', 'roundtrip', key):.2f}x (the ceiling: no server makes more here)")
    for name in ["sqlite", "memory", "redis"]:
        if rate(name, "roundtrip", key) and rate("rmcp_modern", "roundtrip", key):
            print(f"roundtrip {name}/rmcp, {clients} client(s): {rate(name, 'roundtrip', key) / rate('rmcp_modern', 'roundtrip', key):.2f}x (target >= 2x)")
        if rate(name, "roundtrip", key) and rate("raw", "roundtrip", key):
            print(f"roundtrip {name}/raw, {clients} client(s): {rate(name, 'roundtrip', key) / rate('raw', 'roundtrip', key):.2f}x")
        cpu = f"clients_{clients}_server_cpu_us_per_call"
        if rate(name, "roundtrip", cpu) and rate("rmcp_modern", "roundtrip", cpu):
            print(f"roundtrip server CPU per call rmcp/{name}, {clients} client(s): {rate('rmcp_modern', 'roundtrip', cpu) / rate(name, 'roundtrip', cpu):.2f}x")
print()
for name in ["sqlite", "memory", "redis", "rmcp_tasks"]:
    r = load(name, "tasks")
    if r and r.get("ok"):
        stream = f"tasks/stream {r['stream_live_events_per_sec']:,.0f} events/s live, {r['stream_replay_events_per_sec']:,.0f} replayed" if r.get("stream_offered") else "no task streams"
        print(f"tasks on {name}: create p50 {r['create_p50_ms']:.2f} ms, p99 {r['create_p99_ms']:.2f} ms; tasks/get {r['gets_per_sec']:,.0f} calls/s ({r['get_clients']} pollers); {stream}")
for name in ["sqlite", "memory", "redis"]:
    if rate(name, "tasks", "gets_per_sec") and rate("rmcp_tasks", "tasks", "gets_per_sec"):
        print(f"tasks/get {name}/rmcp: {rate(name, 'tasks', 'gets_per_sec') / rate('rmcp_tasks', 'tasks', 'gets_per_sec'):.2f}x; create p50 rmcp/{name}: {rate('rmcp_tasks', 'tasks', 'create_p50_ms') / rate(name, 'tasks', 'create_p50_ms'):.2f}x")
print()
if before:
    print(f"before = {before}, store {before_store}")
    for scenario, key in [("throughput", "events_per_sec"), ("fanout", "aggregate_events_per_sec")]:
        for a, b in [(before_store, "before"), ("gateway", "before_gateway")]:
            if rate(a, scenario, key) and rate(b, scenario, key):
                print(f"{scenario} {a}/{b}: {rate(a, scenario, key) / rate(b, scenario, key):.2f}x")
    print()
singles = []
for name in stores + (["before"] if before else []):
    singles += [(name, "resume"), (f"{name}-big", "fanout"), (name, "idle")]
singles += [("tether", "store"), ("tether-one", "store")]
one = rate("redis-one-node", "fanout", "aggregate_events_per_sec")
a = rate("redis-node-a", "fanout", "aggregate_events_per_sec")
b = rate("redis-node-b", "fanout", "aggregate_events_per_sec")
if one and a and b:
    print(f"two redis nodes: one node {one:,.0f} events/s (C={2 * int(c)}), two nodes {a:,.0f} + {b:,.0f} = {a + b:,.0f} (C={c} each): {(a + b) / one:.2f}x (target >= 1.6x)")
    try:
        pid = json.loads((out / "redis-pids.json").read_text())
        one_r, a_r = load("redis-one-node", "fanout"), load("redis-node-a", "fanout")
        b_r = load("redis-node-b", "fanout")
        cores = lambda r, who: r[f"pid_{pid[who]}_cores"]
        print(f"while the streams ran, one node: machine {one_r['machine_busy']:.0%} busy (all {os.cpu_count()} cores: nodes, bench clients, redis-server), node {cores(one_r, 'a'):.2f} cores, redis-server {cores(one_r, 'redis'):.2f}")
        print(f"while the streams ran, two nodes: machine {a_r['machine_busy']:.0%} and {b_r['machine_busy']:.0%} busy (each bench's window), nodes {cores(a_r, 'a'):.2f} + {cores(b_r, 'b'):.2f} cores, redis-server {cores(a_r, 'redis'):.2f}")
    except Exception as error:
        print(f"two redis nodes: no CPU readings ({error})")
    print()
for name, scenario in singles:
    r = load(name, scenario)
    if r is None:
        continue
    who = name.removesuffix("-big")
    label = f"{who} {scenario}" + (f" C={big_c}" if name.endswith("-big") else "")
    if name == "tether-one":
        label = "tether store, one stream"
    if not r.get("ok"):
        print(f"{label}: FAILED: {r.get('error')}")
        continue
    skip = {"scenario", "target", "ok"}
    fields = ", ".join(
        f"{k} {v:,.3f}" if isinstance(v, float) and v < 100 else f"{k} {v:,.0f}"
        for k, v in r.items() if k not in skip
    )
    print(f"{label}: {fields}")
PY_EOF

# What a cut costs in each era: scripts/bench-cuts.sh (its own server and proxies; SKIP="cuts"
# leaves it out).
if want cuts; then
  echo
  scripts/bench-cuts.sh
fi
