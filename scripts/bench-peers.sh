#!/usr/bin/env bash
# Runs the same `tether bench` scenarios against tether and its peers in one run, on this
# machine, and prints tether/peer ratios (docs/PERFORMANCE.md holds a run's output). Not part
# of the test command.
#
#   scripts/bench-peers.sh            # all targets
#   N=20000 C=20 scripts/bench-peers.sh
#   BEFORE=/tmp/before/target/release/tether scripts/bench-peers.sh   # before/after
#
# Targets, each on 127.0.0.1 with the `count` tool of CONTRACTS.md:
#   tether   `tether serve --store memory` (release build, session and event caps raised)
#   rmcp     the official Rust SDK, crates.io rmcp =3.11.0, built outside the workspace under
#            target/peers/rmcp-bench (sources below), its default session manager
#   ts       interop/ts/server.mjs, @modelcontextprotocol/sdk 1.32.2 with its event store
#   python   interop/python/server.py, mcp 2.3.0 with its event store
#   raw      a raw ceiling: a minimal hyper server writing tether-shaped SSE frames encoded in
#            64 KiB batches (target/peers/raw-ceiling, sources below); throughput only
# Scenarios: throughput (N events, RUNS runs, median) and fanout (C sessions, FANOUT_N events
# each unpaced, then 20 paced events 50 ms apart) against every target; then tether alone:
# resume (100 000 stored), idle (IDLE sessions), fanout with BIG_C sessions, store.
# Environment: N (50000), RUNS (3), C (50), FANOUT_N (200), BIG_C (1000), IDLE (1000),
# SKIP (space-separated targets to leave out), BEFORE (an older `tether` binary: served as
# the target `before` with the same flags, measured in the same run by the same scenarios as
# tether, and printed as after/before ratios; build one with `git worktree add /tmp/before
# <commit> && (cd /tmp/before && cargo build --release -p tether-cli --bin tether)`).
# Output: a table on stdout; each scenario's JSON under target/peers/bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-50000}
RUNS=${RUNS:-3}
C=${C:-50}
FANOUT_N=${FANOUT_N:-200}
BIG_C=${BIG_C:-1000}
IDLE=${IDLE:-1000}
SKIP=${SKIP:-}
BEFORE=${BEFORE:-}

peers=target/peers
out=$peers/bench-results
rm -rf "$out"
mkdir -p "$out"

scripts/peers.sh >/dev/null
cargo build --release -p tether-cli
tether=target/release/tether

# Writes $2 (stdin) to $1 only when it differs, so cargo does not rebuild an unchanged peer.
put() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  mkdir -p "$(dirname "$1")"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

put $peers/rmcp-bench/Cargo.toml <<'RUST_EOF'
# An rmcp (official Rust SDK) Streamable HTTP server with the `count` tool of tether's
# CONTRACTS.md, for scripts/bench-peers.sh. Built outside the tether workspace.
[package]
name = "rmcp-bench"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
rmcp = { version = "=3.11.0", default-features = false, features = ["server", "transport-streamable-http-server"] }
axum = { version = "0.8", default-features = false, features = ["http1", "tokio"] }
tokio = { version = "1", features = ["full"] }
serde_json = "1"

[profile.release]
debug = "line-tables-only"
RUST_EOF
put $peers/rmcp-bench/src/main.rs <<'RUST_EOF'
//! rmcp 3.11.0 serving `count {n, interval_ms}` (CONTRACTS.md) over Streamable HTTP with its
//! default session manager (sessions on, `retry` priming, its in-memory resumption).
//! Usage: rmcp-bench --bind 127.0.0.1:0; prints `peer: serving http://ADDR/mcp`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};

#[derive(Clone)]
struct Count;

impl ServerHandler for Count {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "interval_ms": {"type": "integer"}},
            "required": ["n"],
        });
        let serde_json::Value::Object(schema) = schema else { unreachable!() };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "count",
            "Counts to n with progress",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let n = args.get("n").and_then(serde_json::Value::as_u64).unwrap_or(0);
        let interval = args.get("interval_ms").and_then(serde_json::Value::as_u64).unwrap_or(0);
        let token = context.meta.get_progress_token();
        for i in 1..=n {
            if let Some(token) = &token {
                let mut param = ProgressNotificationParam::new(token.clone(), i as f64);
                param.total = Some(n as f64);
                let _ = context.peer.notify_progress(param).await;
            }
            if interval > 0 {
                tokio::time::sleep(Duration::from_millis(interval)).await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("counted {n}"))]).into())
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bind = args
        .iter()
        .position(|a| a == "--bind")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let config = StreamableHttpServerConfig::default().with_sse_retry(Some(Duration::from_millis(500)));
    let service = StreamableHttpService::new(
        || Ok(Count),
        LocalSessionManager::default().into(),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(&bind).await.expect("bind");
    println!("peer: serving http://{}/mcp", listener.local_addr().expect("addr"));
    axum::serve(listener, router).await.expect("serve");
}
RUST_EOF
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
//! POST initialize: JSON result with `Mcp-Session-Id`; a notification: 202; tools/call
//! `count {n}`: `text/event-stream` with a priming event, n progress frames and the result,
//! each `event: message` with an id `<22 chars>:<seq>`, as tether frames them.

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

fn full(status: StatusCode, ct: &str, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", ct)
        .header("mcp-session-id", "raw")
        .body(Full::new(Bytes::from_static(body.as_bytes())).boxed())
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
    if method != "tools/call" {
        return Ok(full(StatusCode::ACCEPTED, "text/plain", ""));
    }
    let n = message["params"]["arguments"]["n"].as_u64().unwrap_or(0);
    let id = message["id"].to_string();
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
for peer in rmcp-bench raw-ceiling; do
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
# Room for the tether-only scenarios: resume stores 100 000 events in one session, idle may
# hold more sessions than the default 1 024.
tether_flags=(serve --bind 127.0.0.1:0 --store memory --max-sessions 20000 --max-events-per-session 200000)
want tether && start tether $tether "${tether_flags[@]}" && targets+=(tether)
[ -n "$BEFORE" ] && start before "$BEFORE" "${tether_flags[@]}" && targets+=(before)
want rmcp && start rmcp $peers/rmcp-bench/target/release/rmcp-bench --bind 127.0.0.1:0 && targets+=(rmcp)
want ts && start ts $peers/node/node_modules/node/bin/node interop/ts/server.mjs --bind 127.0.0.1:0 && targets+=(ts)
want python && start python $peers/py/bin/python interop/python/server.py --bind 127.0.0.1:0 && targets+=(python)
want raw && start raw $peers/raw-ceiling/target/release/raw-ceiling --bind 127.0.0.1:0 && targets+=(raw)

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
if want tether; then
  bench tether resume --url "$URL_tether"
  bench tether-big fanout --url "$URL_tether" -c "$BIG_C" --n "$FANOUT_N"
  bench tether idle --spawn -s "$IDLE"
  bench tether store
fi
if [ -n "$BEFORE" ]; then
  bench before resume --url "$URL_before"
  bench before-big fanout --url "$URL_before" -c "$BIG_C" --n "$FANOUT_N"
  # A fresh server, as `--spawn` gives tether: RSS measured from an unused process.
  start before_idle "$BEFORE" "${tether_flags[@]}"
  bench before idle --url "$URL_before_idle" --pid "$PID_before_idle" -s "$IDLE"
fi

python3 - "$out" "$N" "$C" "$BIG_C" "$BEFORE" <<'PY_EOF'
import json, pathlib, sys
out, n, c, big_c, before = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
def load(name, scenario):
    p = out / f"{name}-{scenario}.json"
    try:
        return json.loads(p.read_text())
    except Exception:
        return None
names = ["tether"] + (["before"] if before else []) + ["rmcp", "ts", "python", "raw"]
rows = [
    ("throughput", "events_per_sec", f"throughput events/s (n={n}, median)"),
    ("throughput", "server_cpu_us_per_event", "server CPU µs per event (throughput runs)"),
    ("fanout", "aggregate_events_per_sec", f"fanout aggregate events/s (C={c})"),
    ("fanout", "latency_p50_ms", f"fanout p50 latency ms (C={c}, paced)"),
    ("fanout", "latency_p99_ms", f"fanout p99 latency ms (C={c}, paced)"),
]
print()
print("| measure | " + " | ".join(names) + " |")
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
t = load("tether", "throughput")
if t and t.get("ok"):
    for name, target in [("python", "20x"), ("ts", "5x"), ("rmcp", "2x"), ("raw", "0.5x")]:
        r = load(name, "throughput")
        if r and r.get("ok"):
            print(f"throughput tether/{name}: {t['events_per_sec'] / r['events_per_sec']:.2f}x (target >= {target})")
    for name in names[1:]:
        r = load(name, "throughput")
        if r and r.get("ok") and r.get("server_cpu_us_per_event") and t.get("server_cpu_us_per_event"):
            print(f"server CPU per event {name}/tether: {r['server_cpu_us_per_event'] / t['server_cpu_us_per_event']:.2f}x")
print()
if before:
    print(f"before = {before}")
    for scenario, key in [("throughput", "events_per_sec"), ("fanout", "aggregate_events_per_sec")]:
        a, b = load("tether", scenario), load("before", scenario)
        if a and b and a.get("ok") and b.get("ok"):
            print(f"{scenario} tether/before: {a[key] / b[key]:.2f}x")
    print()
singles = [("tether", "resume"), ("tether-big", "fanout"), ("tether", "idle"), ("tether", "store")]
if before:
    singles += [("before", "resume"), ("before-big", "fanout"), ("before", "idle")]
for name, scenario in singles:
    r = load(name, scenario)
    if r is None:
        continue
    who = name.removesuffix("-big")
    label = f"{who} {scenario}" + (f" C={big_c}" if name.endswith("-big") else "")
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
