//! The client against the tether server through the test kit's fault proxy: `count`'s
//! progress 1..n and its result arrive exactly once, in order, whatever the proxy does to the
//! connections (cuts, resets, truncation inside an event, stalls), and every fault the test
//! claims to survive is asserted in the proxy's counters. Real sockets, no mocks.

use crate::support::client::{count_params, fast_config, start_demo_server};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tether::client::{Client, ClientConfig, Error, MessageStream, ResumptionToken};
use tether::proto::backoff::Budget;
use tether::proto::jsonrpc::{Message, Response};
use tether_testkit::proxy::{ByteFault, Counters, FaultPlan, FaultProxy, TruncateFault};

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads a `count` stream to its end and checks it: progress 1..n exactly once each, in
/// order, then `counted n`, then nothing.
async fn assert_count(mut stream: MessageStream, n: u64) {
    let mut expected = 1;
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item.expect("the stream fails") {
            Message::Notification(note) => {
                assert!(result.is_none(), "a notification after the result");
                assert_eq!(note.method, "notifications/progress");
                let params = note.params.expect("progress params");
                assert_eq!(
                    params["progress"],
                    json!(expected),
                    "gap, duplicate or reorder"
                );
                assert_eq!(params["progressToken"], "p");
                expected += 1;
            }
            Message::Response(Response::Result(response)) => {
                assert!(result.is_none(), "two results");
                result = Some(response.result);
            }
            other => panic!("unexpected message {other:?}"),
        }
    }
    assert_eq!(expected, n + 1, "progress events missing at the end");
    let result = result.expect("no result");
    assert_eq!(result["content"][0]["text"], format!("counted {n}"));
}

async fn run_count_through(plan: FaultPlan, n: u64, config: ClientConfig) -> Counters {
    let server = start_demo_server().await;
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&url, config).await.unwrap();
        let stream = client
            .request("tools/call", count_params(n, 0))
            .await
            .unwrap();
        assert_count(stream, n).await;
        client.close().await.unwrap();
    })
    .await
    .unwrap_or_else(|_| panic!("timed out; proxy: {}", proxy.report()));
    proxy.counters()
}

/// Every connection, the resumed ones included, is cut (FIN) after 1.5–4.5 KB: the POST
/// stream and then a chain of replays (the tool has finished long before), each cut in turn.
#[tokio::test]
async fn count_arrives_once_in_order_across_repeated_cuts_during_replay() {
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let counters = run_count_through(plan, 400, fast_config(Duration::from_millis(50))).await;
    assert!(
        counters.cuts >= 3,
        "too few cuts to prove anything: {counters:?}"
    );
}

/// Every connection ends in a fault drawn per connection from cuts, resets and truncations
/// at offsets spread over the stream (2–9 KB, or 4–30 events). Not earlier: the POST shares
/// its connection with `initialize` (2 events, about 1 KB), and a POST cut before its priming
/// event has arrived has no id to resume from: the client sends it again, which
/// `client_resend.rs` covers.
#[tokio::test]
async fn count_arrives_once_in_order_with_mixed_faults_anywhere_in_the_stream() {
    let plan = FaultPlan::pass_through()
        .with_cut(ByteFault::after(5500).with_jitter(3500))
        .with_reset(ByteFault::after(5500).with_jitter(3500))
        .with_truncate(TruncateFault::after_events(17).with_jitter(13));
    let counters = run_count_through(plan, 1500, fast_config(Duration::from_millis(50))).await;
    let faults = counters.cuts + counters.resets + counters.truncations;
    assert!(faults >= 5, "{counters:?}");
}

/// RST instead of FIN: the client sees a connection error, not a clean end.
#[tokio::test]
async fn count_arrives_once_in_order_across_resets() {
    let plan = FaultPlan::pass_through().with_reset(ByteFault::after(3000).with_jitter(1500));
    let counters = run_count_through(plan, 300, fast_config(Duration::from_millis(50))).await;
    assert!(counters.resets > 0, "{counters:?}");
}

/// T115: a connection ending inside an event leaves a partial event the client must discard
/// (neither delivered nor committed); the resume brings the whole event.
#[tokio::test]
async fn truncation_mid_event_discards_the_partial_event_and_resumes() {
    let plan =
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(12).with_jitter(6));
    let counters = run_count_through(plan, 300, fast_config(Duration::from_millis(50))).await;
    assert!(counters.truncations > 0, "{counters:?}");
}

/// A half-open connection: the proxy stops forwarding without closing. No bytes (keep-alives
/// are every 15 s) for the client's 400 ms idle timeout: it gives up on the connection and
/// resumes.
#[tokio::test]
async fn stalled_stream_is_detected_by_the_idle_timeout_and_resumed() {
    let plan = FaultPlan::pass_through().with_stall(ByteFault::after(3000).at_most(2), None);
    let mut config = fast_config(Duration::from_millis(50));
    config.reconnect.idle_timeout = Duration::from_millis(400);
    let start = Instant::now();
    let counters = run_count_through(plan, 300, config).await;
    assert!(counters.stalls > 0, "{counters:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
}

/// With every reconnect refused, the pending call fails with a typed error well within the
/// budget's bounds instead of hanging.
#[tokio::test]
async fn refused_reconnects_exhaust_the_budget_and_fail_the_call() {
    let server = start_demo_server().await;
    // Every connection is cut after 4 KB, which only the POST stream reaches; once the call
    // is under way, every new connection is refused.
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(4000));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    let mut config = fast_config(Duration::from_millis(50));
    config.reconnect.budget = Budget {
        max_attempts: 3,
        max_elapsed: Duration::from_secs(10),
    };
    let client = Client::connect(&proxy.url_for("/mcp"), config)
        .await
        .unwrap();
    let mut stream = client
        .request("tools/call", count_params(2000, 2))
        .await
        .unwrap();
    proxy.refuse_for(Duration::from_secs(120));
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Some(error),
                None => return None,
            }
        }
    })
    .await
    .expect("the call hangs");
    let counters = proxy.counters();
    assert!(
        matches!(outcome, Some(Error::BudgetExhausted { attempts: 3, .. })),
        "{outcome:?}; {counters:?}"
    );
    assert!(counters.cuts >= 1 && counters.refused >= 3, "{counters:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// Process, then commit: the token callback fires only for messages the application has
/// moved past (or acked), and the last token names the result's event.
#[tokio::test]
async fn resumption_tokens_follow_commits_not_receipts() {
    let server = start_demo_server().await;
    let tokens: Arc<Mutex<Vec<ResumptionToken>>> = Arc::default();
    let seen = Arc::clone(&tokens);
    let config = {
        let mut config = fast_config(Duration::from_millis(50));
        config.on_resumption_token = Some(Arc::new(move |token: &ResumptionToken| {
            seen.lock().unwrap().push(token.clone());
        }));
        config
    };
    let url = format!("http://{}/mcp", server.addr);
    let client = Client::connect(&url, config).await.unwrap();
    let mut stream = client
        .request("tools/call", count_params(3, 0))
        .await
        .unwrap();

    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, Message::Notification(_)));
    // The priming event's id was committed on the way; progress 1 is not yet.
    let primed = tokens.lock().unwrap().len();
    assert_eq!(primed, 1, "{:?}", tokens.lock().unwrap());
    let priming = tokens.lock().unwrap()[0].clone();
    assert_eq!(priming.session_id, client.session_id());
    assert!(priming.last_event_id.ends_with(":0"), "{priming:?}");

    stream.ack();
    assert_eq!(tokens.lock().unwrap().len(), 2);
    stream.ack(); // nothing new to commit
    assert_eq!(tokens.lock().unwrap().len(), 2);
    while let Some(item) = stream.next().await {
        item.unwrap();
    }
    let all = tokens.lock().unwrap().clone();
    // priming, progress 1..3, result: each committed once, in order.
    assert_eq!(all.len(), 5, "{all:?}");
    let last = all.last().unwrap();
    assert!(last.last_event_id.ends_with(":4"), "{last:?}");
    assert_eq!(stream.resumption_token().as_ref(), Some(last));
    let json = serde_json::to_string(last).unwrap();
    let back: ResumptionToken = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, last);
}
