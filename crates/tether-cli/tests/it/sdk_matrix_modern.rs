//! The SDK matrix in the 2026-07-28 era, every peer pinned by `scripts/peers.sh`
//! (a missing peer fails the test, it never skips):
//!
//! - tether's client, with its default `ProtocolChoice::Auto`, against the TypeScript SDK v2
//!   server (`interop/ts/server-2026.mjs`) in each of its eras: 2025 sessions only, 2026-07-28
//!   only, and both on one endpoint. Auto must pick the era in which a call survives a cut:
//!   the legacy era wherever the server has sessions (there the call runs through a fault
//!   proxy that cuts its stream, and every progress event still arrives once, in order), the
//!   modern era where it has none (no cut: a cut call cannot be resumed there).
//! - The TypeScript SDK v2 client (`interop/ts/client-2026.mjs`) pinned to 2026-07-28 and in
//!   its `auto` mode against `tether serve` and against the gateway (`tether serve --
//!   <the Python SDK's stdio server>`).
//! - The Python SDK 2.3.0 client in its 2026-07-28 mode (`interop/python/client_2026.py`)
//!   against `tether serve`.
//! - tether's client against rmcp 3.11 (`interop/rmcp`): pinned to 2026-07-28 against its
//!   stateless server, and with `auto` against its session server (which lists the 2025
//!   versions, so the legacy era, with a session).
//!
//! Each direction calls `count` and asserts what its user sees: progress 1..=N once each, in
//! order, then `counted N`, in the era the test expects.

use std::time::Duration;

use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, ProtocolChoice};
use tether::proto::jsonrpc::{Message, Response};
use tether::proto::version::ProtocolVersion;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec};
use tether_testkit::peers::{self, PeerCommand};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

/// Progress notifications per call.
const N: u64 = 40;

/// Bound on a peer client's run or the tether client's conversation.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// What tether's client saw of one `count` call.
struct Seen {
    modern: bool,
    session: Option<String>,
    progress: Vec<u64>,
    result: String,
}

/// Connects to `url` with the default configuration (`auto`) and calls `count` to N with a
/// progress token, 10 ms apart.
async fn tether_count(url: &str) -> anyhow::Result<Seen> {
    tether_count_with(url, ProtocolChoice::Auto).await
}

/// [`tether_count`] speaking as `protocol` says.
async fn tether_count_with(url: &str, protocol: ProtocolChoice) -> anyhow::Result<Seen> {
    let mut config = ClientConfig::default();
    config.protocol = protocol;
    config.reconnect.backoff.base = Duration::from_millis(50);
    config.reconnect.backoff.cap = Duration::from_millis(500);
    let client = Client::connect(url, config).await?;
    let params = json!({
        "name": "count",
        "arguments": {"n": N, "interval_ms": 10},
        "_meta": {"progressToken": "p"},
    });
    let mut stream = client.request("tools/call", Some(params)).await?;
    let mut progress = Vec::new();
    let mut result = String::new();
    while let Some(message) = stream.next().await {
        match message? {
            Message::Notification(n) if n.method == "notifications/progress" => {
                let params = n.params.unwrap_or_default();
                // rmcp writes progress as a float (`1.0`).
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let value = params["progress"].as_f64().map_or(u64::MAX, |p| p as u64);
                progress.push(value);
            }
            Message::Response(Response::Result(answer)) => {
                result = answer.result["content"][0]["text"]
                    .as_str()
                    .map_or_else(|| answer.result.to_string(), str::to_owned);
            }
            Message::Response(Response::Error(error)) => {
                anyhow::bail!("count failed: {:?}", error.error);
            }
            _ => {}
        }
    }
    let modern = client.is_modern();
    let session = client.session_id();
    client.close().await?;
    Ok(Seen {
        modern,
        session,
        progress,
        result,
    })
}

async fn ts_v2_server(era: &str) -> ServerProcess {
    peers::ts_server_2026(era)
        .expect("the TypeScript SDK v2 server (scripts/peers.sh)")
        .args(["--retry-ms", "100"])
        .start()
        .await
        .expect("start the TypeScript SDK v2 server")
}

#[tokio::test]
async fn sdk_matrix_tether_client_auto_to_typescript_v2_server_with_sessions() {
    for era in ["legacy", "both"] {
        let server = ts_v2_server(era).await;
        let plan = FaultPlan::pass_through().with_cut(ByteFault::after(2500).with_jitter(1000));
        let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
        let seen = tokio::time::timeout(RUN_TIMEOUT, tether_count(&proxy.url_for("/mcp")))
            .await
            .expect("the call finishes in time")
            .unwrap_or_else(|e| panic!("--era {era}: {e}\nproxy: {}", proxy.report()));
        let context = format!("--era {era}; proxy: {}", proxy.report());
        assert!(
            !seen.modern,
            "sessions on offer: the legacy era ({context})"
        );
        assert_eq!(seen.progress, (1..=N).collect::<Vec<_>>(), "{context}");
        assert_eq!(seen.result, format!("counted {N}"), "{context}");
        assert!(proxy.counters().cuts >= 1, "no cut was injected: {context}");
    }
}

#[tokio::test]
async fn sdk_matrix_tether_client_auto_to_typescript_v2_server_2026_only() {
    let server = ts_v2_server("modern").await;
    let seen = tokio::time::timeout(RUN_TIMEOUT, tether_count(server.url()))
        .await
        .expect("the call finishes in time")
        .unwrap();
    assert!(seen.modern, "no sessions: the 2026-07-28 era");
    assert_eq!(seen.progress, (1..=N).collect::<Vec<_>>());
    assert_eq!(seen.result, format!("counted {N}"));
}

/// Runs a peer client and parses its JSON lines; asserts it connected at `version` and saw
/// the whole `count`.
async fn run_peer_client(command: PeerCommand, version: &str, context: &str) {
    let output = command.run(RUN_TIMEOUT).await.expect("the client ran");
    let context = format!("{context}\n{command}\n{}\n{}", output.stdout, output.stderr);
    assert!(output.status.success(), "{context}");
    let lines: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("{line}\n{context}")))
        .collect();
    let event = |name: &'static str| lines.iter().filter(move |line| line["event"] == name);
    let connected = event("connected").next().expect(&context);
    assert_eq!(connected["protocolVersion"], version, "{context}");
    let progress: Vec<u64> = event("progress")
        .map(|line| line["progress"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, (1..=N).collect::<Vec<_>>(), "{context}");
    let result = event("result").next().expect(&context);
    assert_eq!(result["text"], format!("counted {N}"), "{context}");
}

async fn tether_serve() -> ServerProcess {
    ServerSpec::tether_serve()
        .expect("the tether binary")
        .args(["--store", "memory"])
        .start()
        .await
        .expect("start tether serve")
}

/// `tether serve -- <the Python SDK's stdio server>`.
async fn gateway() -> ServerProcess {
    let (program, args) = peers::python_stdio_server().unwrap().into_parts();
    ServerSpec::tether_serve()
        .expect("the tether binary")
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--"])
        .arg(program.display().to_string())
        .args(args)
        .start()
        .await
        .expect("start the gateway")
}

#[tokio::test]
async fn sdk_matrix_typescript_v2_client_pinned_and_auto_to_tether_serve_and_the_gateway() {
    for (target, server) in [
        ("tether serve", tether_serve().await),
        ("gateway", gateway().await),
    ] {
        let pinned = peers::ts_client_2026(server.url(), N)
            .unwrap()
            .with_args(["--interval-ms", "5"]);
        run_peer_client(pinned, "2026-07-28", &format!("{target}, pinned")).await;
        // The SDK's auto mode prefers 2026-07-28 whenever server/discover offers it.
        let auto = peers::ts_client_2026(server.url(), N).unwrap().with_args([
            "--interval-ms",
            "5",
            "--auto",
        ]);
        run_peer_client(auto, "2026-07-28", &format!("{target}, auto")).await;
    }
}

#[tokio::test]
async fn sdk_matrix_python_v2_client_2026_to_tether_serve() {
    let server = tether_serve().await;
    let client = peers::python_client_2026(server.url(), N)
        .unwrap()
        .with_args(["--interval-ms", "5"]);
    run_peer_client(client, "2026-07-28", "tether serve").await;
}

#[tokio::test]
async fn sdk_matrix_tether_client_to_rmcp_in_each_era() {
    let stateless = peers::rmcp_server("modern")
        .expect("rmcp-peer (scripts/peers.sh)")
        .start()
        .await
        .expect("start rmcp-peer --era modern");
    let modern = ProtocolChoice::Version(ProtocolVersion::MODERN);
    let seen = tokio::time::timeout(RUN_TIMEOUT, tether_count_with(stateless.url(), modern))
        .await
        .expect("the call finishes in time")
        .unwrap();
    assert!(seen.modern && seen.session.is_none());
    assert_eq!(seen.progress, (1..=N).collect::<Vec<_>>());
    assert_eq!(seen.result, format!("counted {N}"));

    let sessions = peers::rmcp_server("legacy")
        .unwrap()
        .start()
        .await
        .expect("start rmcp-peer --era legacy");
    let seen = tokio::time::timeout(RUN_TIMEOUT, tether_count(sessions.url()))
        .await
        .expect("the call finishes in time")
        .unwrap();
    assert!(!seen.modern, "rmcp lists the 2025 versions: the legacy era");
    assert!(seen.session.is_some(), "with a session");
    assert_eq!(seen.progress, (1..=N).collect::<Vec<_>>());
    assert_eq!(seen.result, format!("counted {N}"));
}

/// rmcp 3.11's own task server (`rmcp-peer --era modern --tasks`, its in-memory
/// `TaskManager`): tether's client pinned to 2026-07-28 runs `count` as a task there too and
/// follows it by polling `tasks/get` (rmcp offers no task event streams, so no progress
/// arrives: SEP-2663 tasks carry none) to its result; a `TaskHandle` sees it completed; and
/// `tether bench tasks` drives it, reporting no stream phase.
#[tokio::test]
async fn sdk_matrix_tether_client_follows_an_rmcp_task() {
    use tether::client::TaskState;
    let server = peers::rmcp_server("modern")
        .expect("rmcp-peer (scripts/peers.sh)")
        .arg("--tasks")
        .start()
        .await
        .expect("start rmcp-peer --era modern --tasks");
    let modern = ProtocolChoice::Version(ProtocolVersion::MODERN);
    let seen = tokio::time::timeout(RUN_TIMEOUT, tether_count_with(server.url(), modern))
        .await
        .expect("the call finishes in time")
        .unwrap();
    assert!(seen.progress.is_empty(), "{:?}", seen.progress);
    assert_eq!(seen.result, format!("counted {N}"));

    tokio::time::timeout(RUN_TIMEOUT, async {
        let mut config = ClientConfig::default();
        config.protocol = modern;
        let client = Client::connect(server.url(), config).await.unwrap();
        let task = client
            .call_tool_as_task("count", json!({"n": 3, "interval_ms": 1}))
            .await
            .unwrap();
        assert!(!task.wait().await.unwrap().is_error());
        assert_eq!(task.status().await.unwrap().state, TaskState::Completed);
        assert!(matches!(
            task.events(),
            Err(tether::client::Error::TasksNotOffered { .. })
        ));
    })
    .await
    .expect("the task finishes in time");

    let tether = tether_testkit::launcher::tether_bin().unwrap();
    let output = tokio::process::Command::new(tether)
        .args(["bench", "tasks", "--url", server.url(), "--creations", "5"])
        .args(["-c", "2", "--seconds", "0.3", "--json"])
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["stream_offered"], false, "{report}");
    assert!(report["gets_per_sec"].as_f64().unwrap() > 0.0, "{report}");
}
