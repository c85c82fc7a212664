//! `examples/rmcp_server.rs`, run as a user runs it: an rmcp `#[tool_router]` server served
//! through tether. Through the fault proxy with cuts, its `count` delivers every progress
//! event once, in order, then `counted n`: in the 2025 era (a session resumed with
//! `Last-Event-ID`) and in the 2026-07-28 era (the call runs as a task, its events read again
//! with `tasks/stream`), on the memory and SQLite stores.

use std::time::Duration;

use serde_json::json;
use tether::client::{Client, ClientConfig, ProtocolChoice, ToolCall, ToolCallItem};
use tether::proto::jsonrpc::Response;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

use crate::support::example;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn config(protocol: ProtocolChoice) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.protocol = protocol;
    config.reconnect.backoff.base = Duration::from_millis(20);
    config.reconnect.backoff.cap = Duration::from_millis(200);
    config
}

#[tokio::test]
async fn the_rmcp_example_streams_count_once_through_cuts_in_both_eras() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("rmcp.db").display());
    for store in ["memory", sqlite.as_str()] {
        let (_example, url) =
            example::start("rmcp_server", &["--bind", "127.0.0.1:0", "--store", store]);
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap();
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
