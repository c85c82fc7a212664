//! The client against real peers: the Python SDK server and the TypeScript SDK server from
//! `interop/` (installed by `scripts/peers.sh`; a missing peer fails the test, it never
//! skips), each with its event store on, reached through the test kit's fault proxy that cuts
//! every connection a few KB in. `count`'s progress must reach the application once each, in
//! order, and the result must arrive.
//!
//! What the client guarantees is no duplicates and no reordering of what the server sent;
//! whether every progress notification arrives also depends on the peer's event store
//! replaying everything after the cursor. The assertions check the full sequence 1..=n, so a
//! peer that loses events fails the test with the gap and the proxy's fault log in the
//! message.
//!
//! The SDK matrix (`crates/tether-cli/tests/it/sdk_matrix.rs`) runs the whole conversation with
//! the same peers (`tools/list`, a call cut mid-event, DELETE and the 404 after it); this
//! file keeps the harsher cut pattern: byte offsets anywhere, two calls per session.

use std::time::Duration;

use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, MessageStream};
use tether::proto::jsonrpc::{Message, Response};
use tether_testkit::launcher::ServerSpec;
use tether_testkit::peers;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

/// Bounds every test: a client (or peer) that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Progress notifications per call: enough for a dozen cuts at 3–5 KB per connection.
const N: u64 = 300;

fn client_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.reconnect.backoff.base = Duration::from_millis(50);
    config.reconnect.backoff.cap = Duration::from_millis(500);
    config
}

fn count_params(n: u64, interval_ms: u64, token: &str) -> Option<Value> {
    Some(json!({
        "name": "count",
        "arguments": {"n": n, "interval_ms": interval_ms},
        "_meta": {"progressToken": token},
    }))
}

/// What one call delivered to the application.
#[derive(Debug, Default)]
struct Delivered {
    progress: Vec<u64>,
    result: Option<String>,
    other: Vec<String>,
}

async fn collect(mut stream: MessageStream) -> Delivered {
    let mut out = Delivered::default();
    while let Some(item) = stream.next().await {
        match item.expect("the stream fails") {
            Message::Notification(note) if note.method == "notifications/progress" => {
                let params = note.params.unwrap_or_default();
                out.progress.push(params["progress"].as_u64().unwrap_or(0));
            }
            Message::Response(Response::Result(r)) => {
                assert!(out.result.is_none(), "two results");
                out.result = Some(
                    r.result["content"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
            other => out.other.push(format!("{other:?}")),
        }
    }
    out
}

/// Gaps (missing values) and duplicates/reorders in a progress sequence expected to be 1..=n.
fn defects(progress: &[u64], n: u64) -> (Vec<u64>, Vec<(usize, u64)>) {
    let missing = (1..=n).filter(|p| !progress.contains(p)).collect();
    let out_of_order = progress
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] <= w[0])
        .map(|(i, w)| (i + 1, w[1]))
        .collect();
    (missing, out_of_order)
}

/// Starts `spec`, puts a proxy cutting every connection after 3–5 KB in front of it, runs
/// two `count` calls in one session (distinct request ids, fresh progress tokens) and checks
/// each.
async fn count_through_cuts(spec: ServerSpec, peer: &str) {
    let mut server = spec.args(["--retry-ms", "100"]).start().await.unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(4000).with_jitter(1000));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let outcome = tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&url, client_config()).await.unwrap();
        let mut calls = Vec::new();
        for token in ["a", "b"] {
            let stream = client
                .request("tools/call", count_params(N, 1, token))
                .await
                .unwrap();
            calls.push(collect(stream).await);
        }
        client.close().await.unwrap();
        calls
    })
    .await;
    let logs = server.logs();
    server.terminate().await.unwrap();
    let calls = outcome.unwrap_or_else(|_| {
        panic!(
            "{peer}: timed out; proxy: {}\nserver logs:\n{logs}",
            proxy.report()
        )
    });
    let counters = proxy.counters();
    eprintln!("{peer}: {}", proxy.report());
    assert!(counters.cuts >= 4, "{peer}: too few cuts: {counters:?}");
    for (i, call) in calls.iter().enumerate() {
        let (missing, out_of_order) = defects(&call.progress, N);
        // Our guarantee first: nothing twice, nothing out of order.
        assert!(
            out_of_order.is_empty(),
            "{peer} call {i}: duplicated or reordered progress at (index, value) \
             {out_of_order:?}; proxy: {}",
            proxy.report()
        );
        assert!(
            missing.is_empty(),
            "{peer} call {i}: progress lost by the peer: {missing:?} ({} delivered); proxy: {}",
            call.progress.len(),
            proxy.report()
        );
        assert_eq!(
            call.result.as_deref(),
            Some(format!("counted {N}").as_str()),
            "{peer} call {i}: no result; other messages: {:?}; proxy: {}",
            call.other,
            proxy.report()
        );
        assert!(call.other.is_empty(), "{peer}: {:?}", call.other);
    }
}

#[tokio::test]
async fn python_sdk_server_count_through_cuts_arrives_once_in_order() {
    count_through_cuts(peers::python_server().unwrap(), "python").await;
}

#[tokio::test]
async fn typescript_sdk_server_count_through_cuts_arrives_once_in_order() {
    count_through_cuts(peers::ts_server().unwrap(), "typescript").await;
}
