//! `examples/rmcp_server.rs`, run as a user runs it: an rmcp `#[tool_router]` server served
//! through tether. Through the fault proxy with cuts, its `count` delivers every progress
//! event once, in order, then `counted n`: in the 2025 era (a session resumed with
//! `Last-Event-ID`) and in the 2026-07-28 era (the call runs as a task, its events read again
//! with `tasks/stream`), on the memory and SQLite stores. SIGKILLed and restarted on SQLite,
//! the call that was running is answered with the `server_restarted` error and the session
//! goes on with a new rmcp service. An rmcp client over tether's transport gets every event
//! once through cuts, from tether and from rmcp's own server.

use std::time::Duration;

use serde_json::json;
use tether::client::{Client, ClientConfig, ProtocolChoice, ToolCall, ToolCallItem};
use tether::proto::jsonrpc::Response;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

use crate::support::client::fast_config;
use crate::support::example;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn config(protocol: ProtocolChoice) -> ClientConfig {
    let mut config = fast_config(Duration::from_millis(20));
    config.protocol = protocol;
    config
}

/// The address of an example's `http://HOST:PORT/mcp`, for the fault proxy.
fn addr_of(url: &str) -> std::net::SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_rmcp_example_streams_count_once_through_cuts_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("rmcp.db").display());
    for store in ["memory", sqlite.as_str()] {
        let (_example, url) =
            example::start("rmcp_server", &["--bind", "127.0.0.1:0", "--store", store]);
        let addr = addr_of(&url);
        let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
        let proxy = FaultProxy::start(addr, plan).await.unwrap();
        for protocol in [ProtocolChoice::Legacy, ProtocolChoice::Auto] {
            tokio::time::timeout(TEST_TIMEOUT, async {
                let client = Client::connect(&proxy.url_for("/mcp"), config(protocol))
                    .await
                    .unwrap();
                assert_eq!(client.is_modern(), protocol == ProtocolChoice::Auto);
                let call = client
                    .call_tool("count", json!({"n": 150, "interval_ms": 2}))
                    .await
                    .unwrap();
                let task = call.task_id().map(str::to_owned);
                let (progress, text, task) = read_count(call, task).await;
                assert_eq!(
                    progress,
                    (1..=150).collect::<Vec<_>>(),
                    "{store} {protocol:?}: {}",
                    proxy.report()
                );
                assert_eq!(text.as_deref(), Some("counted 150"), "{store} {protocol:?}");
                if protocol == ProtocolChoice::Auto {
                    assert!(task.is_some(), "ran as a task");
                }
            })
            .await
            .unwrap();
        }
        assert!(proxy.counters().cuts >= 2, "{}", proxy.report());
        // Straight to the server, with no faults.
        let client = Client::connect(&url, config(ProtocolChoice::Legacy))
            .await
            .unwrap();
        let call = client
            .call_tool("count", json!({"n": 3, "interval_ms": 0}))
            .await
            .unwrap();
        let (progress, text, _) = read_count(call, None).await;
        assert_eq!(
            (progress, text.as_deref()),
            (vec![1, 2, 3], Some("counted 3"))
        );
    }
}

/// `--eras legacy` keeps an `auto` client in a 2025 session (its stream resumes through cuts);
/// `--eras modern` serves the same client in 2026-07-28 and refuses a session.
#[tokio::test]
async fn the_rmcp_example_serves_the_eras_it_is_given() {
    for (eras, modern) in [("legacy", false), ("modern", true)] {
        let (_example, url) = example::start(
            "rmcp_server",
            &["--bind", "127.0.0.1:0", "--store", "memory", "--eras", eras],
        );
        let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
        let proxy = FaultProxy::start(addr_of(&url), plan).await.unwrap();
        tokio::time::timeout(TEST_TIMEOUT, async {
            let client = Client::connect(&proxy.url_for("/mcp"), config(ProtocolChoice::Auto))
                .await
                .unwrap();
            assert_eq!(client.is_modern(), modern, "--eras {eras}");
            let call = client
                .call_tool("count", json!({"n": 100, "interval_ms": 2}))
                .await
                .unwrap();
            let (progress, text, _) = read_count(call, None).await;
            assert_eq!(
                progress,
                (1..=100).collect::<Vec<_>>(),
                "--eras {eras}: {}",
                proxy.report()
            );
            assert_eq!(text.as_deref(), Some("counted 100"), "--eras {eras}");
        })
        .await
        .unwrap();
        assert!(
            proxy.counters().cuts >= 1,
            "--eras {eras}: {}",
            proxy.report()
        );
        let legacy = Client::connect(&url, config(ProtocolChoice::Legacy)).await;
        assert_eq!(
            legacy.is_ok(),
            !modern,
            "--eras {eras}: a session is {}",
            if modern { "refused" } else { "served" }
        );
    }
}

/// Reads a `count` call to its end: the progress values (rmcp sends them as floats), the
/// result's text, and the task it ran as (seen once the call named one).
async fn read_count(
    mut call: ToolCall,
    mut task: Option<String>,
) -> (Vec<u64>, Option<String>, Option<String>) {
    let mut progress = Vec::new();
    let mut text = None;
    while let Some(item) = call.next().await {
        task = task.or_else(|| call.task_id().map(str::to_owned));
        match item.unwrap() {
            ToolCallItem::Progress { progress: p, .. } => progress.push(p as u64),
            ToolCallItem::Response(Response::Result(result)) => {
                text = result.result["content"][0]["text"]
                    .as_str()
                    .map(str::to_owned);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (progress, text, task)
}

#[tokio::test]
async fn a_sigkill_restart_on_sqlite_answers_the_running_call_and_the_session_goes_on() {
    use tether::client::ClientEvent;
    use tether_testkit::launcher::ServerSpec;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("rmcp.db").display());
    let mut server = ServerSpec::new(example::binary("rmcp_server"))
        .args(["--store", &sqlite])
        .start()
        .await
        .unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(server.url(), config(ProtocolChoice::Legacy))
            .await
            .unwrap();
        let session = client.session_id().unwrap();
        let mut events = client.events();
        let mut call = client
            .call_tool("count", json!({"n": 100_000, "interval_ms": 10}))
            .await
            .unwrap();
        for expected in 1..=3 {
            let item = call.next().await.unwrap().unwrap();
            assert!(
                matches!(item, ToolCallItem::Progress { progress, .. } if progress as u64 == expected),
                "{item:?}"
            );
        }
        server.kill().await.unwrap();
        server.restart().await.unwrap();
        let answer = loop {
            match call.next().await.unwrap().unwrap() {
                ToolCallItem::Progress { .. } => {}
                ToolCallItem::Response(response) => break response,
                other => panic!("{other:?}"),
            }
        };
        let Response::Error(error) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(error.error.data.unwrap()["reason"], "server_restarted");

        let call = client
            .call_tool("count", json!({"n": 3, "interval_ms": 0}))
            .await
            .unwrap();
        let (progress, text, _) = read_count(call, None).await;
        assert_eq!((progress, text.as_deref()), (vec![1, 2, 3], Some("counted 3")));
        assert_eq!(client.session_id().as_deref(), Some(session.as_str()));
        while let Some(event) = events.try_recv() {
            assert!(
                !matches!(
                    event,
                    ClientEvent::SessionExpired { .. } | ClientEvent::Reinitialized { .. }
                ),
                "the session went on: {event:?}"
            );
        }
    })
    .await
    .unwrap();
}

/// An rmcp client collecting each progress notification it is handed.
struct ProgressCollector(tokio::sync::mpsc::UnboundedSender<f64>);

impl rmcp::ClientHandler for ProgressCollector {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(params.progress);
    }
}

/// An rmcp client (rmcp's own client API) over `tether::rmcp::TetherTransport`, through the
/// fault proxy: against the example served by tether, with cuts, in the 2025 era and in the
/// 2026-07-28 era (where the call runs as a task), and against the same server on rmcp's own
/// transport, every progress notification arrives once, in order, then the result. rmcp's
/// own server gets no cuts: its resumed stream stalls after a cut (measured with this test:
/// the call never finishes), which no client can make up for.
#[tokio::test]
async fn an_rmcp_client_over_tethers_transport_gets_every_event_once_through_cuts() {
    use rmcp::ServiceExt as _;
    use rmcp::model::CallToolRequestParams;
    use tether::rmcp::TetherTransport;
    let servers = [
        (&["--store", "memory"][..], ProtocolChoice::Legacy, true),
        (
            &["--store", "memory"][..],
            ProtocolChoice::Version(tether::proto::version::ProtocolVersion::MODERN),
            true,
        ),
        (&["--transport", "rmcp"][..], ProtocolChoice::Legacy, false),
    ];
    for (args, protocol, cuts) in servers {
        let mut argv = vec!["--bind", "127.0.0.1:0"];
        argv.extend_from_slice(args);
        let (_example, url) = example::start("rmcp_server", &argv);
        let addr = addr_of(&url);
        let plan = if cuts {
            FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500))
        } else {
            FaultPlan::pass_through()
        };
        let proxy = FaultProxy::start(addr, plan).await.unwrap();
        let what = format!("{args:?} {protocol:?}");
        tokio::time::timeout(TEST_TIMEOUT, async {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let transport = TetherTransport::new(&proxy.url_for("/mcp"), config(protocol));
            let client = ProgressCollector(tx).serve(transport).await.unwrap();
            let mut arguments = serde_json::Map::new();
            arguments.insert("n".into(), json!(150));
            arguments.insert("interval_ms".into(), json!(2));
            let result = client
                .peer()
                .call_tool(CallToolRequestParams::new("count").with_arguments(arguments))
                .await
                .unwrap();
            let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
            assert_eq!(text, "counted 150", "{what}");
            let mut progress = Vec::new();
            while let Ok(p) = rx.try_recv() {
                progress.push(p as u64);
            }
            assert_eq!(
                progress,
                (1..=150).collect::<Vec<_>>(),
                "{what}: {}",
                proxy.report()
            );
            client.cancel().await.unwrap();
        })
        .await
        .unwrap_or_else(|_| panic!("{what} timed out: {}", proxy.report()));
        assert!(
            !cuts || proxy.counters().cuts >= 1,
            "{what}: {}",
            proxy.report()
        );
    }
}
