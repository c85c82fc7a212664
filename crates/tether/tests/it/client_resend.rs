//! A call whose POST is lost before any event id reached the client: nothing identifies its
//! stream, so there is nothing to resume. Against a tether server, which answers a request
//! sent again with the stream already answering it, the client sends the request again and
//! the call completes, every event once, the tool run once (the server's own count of stored
//! events says so). Real sockets through the test kit's fault proxy.

use crate::support::client::{count_params, fast_config, start_demo_server};

use std::time::Duration;

use serde_json::json;
use tether::client::{Client, ClientEvent, MessageStream};
use tether::proto::jsonrpc::{Message, Response};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy, TruncateFault};
use tether_testkit::raw::{self, metric_samples};

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Events per call.
const N: u64 = 40;

/// `tether_events_appended_total` of the server at `addr`.
async fn events_appended(addr: std::net::SocketAddr) -> f64 {
    let t = raw::get(&format!("http://{addr}/metrics")).await.unwrap();
    metric_samples(&String::from_utf8(t.body).unwrap())["tether_events_appended_total"]
}

/// Progress 1..n once each, in order, then `counted n`.
async fn assert_count(mut stream: MessageStream, n: u64) {
    let mut progress = Vec::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item.expect("the call fails") {
            Message::Notification(note) => {
                assert!(result.is_none(), "a notification after the result");
                progress.push(note.params.expect("progress params")["progress"].clone());
            }
            Message::Response(Response::Result(response)) => {
                assert!(result.replace(response.result).is_none(), "two results");
            }
            other => panic!("unexpected message {other:?}"),
        }
    }
    let expected: Vec<_> = (1..=n).map(|i| json!(i)).collect();
    assert_eq!(progress, expected, "gap, duplicate or reorder");
    assert_eq!(
        result.expect("no result")["content"][0]["text"],
        format!("counted {n}")
    );
}

/// Runs `count` through a proxy whose next connection after `initialize` gets `plan`, and
/// checks the call and that the server stored its events once.
async fn call_with_first_post_lost(plan: FaultPlan) {
    let server = start_demo_server().await;
    let proxy = FaultProxy::start(server.addr, FaultPlan::pass_through())
        .await
        .unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(
            &proxy.url_for("/mcp"),
            fast_config(Duration::from_millis(20)),
        )
        .await
        .unwrap();
        let mut events = client.events();
        let before = events_appended(server.addr).await;
        proxy.set_plan(plan).unwrap();
        // The plan applies to connections accepted from now on: close the pooled one (and the
        // standalone stream's, which reconnects after the server's 50 ms `retry`), so that the
        // POST opens the next.
        proxy.cut_open_connections();
        tokio::time::sleep(Duration::from_millis(15)).await;
        let forced = proxy.counters();
        let stream = client
            .request("tools/call", count_params(N, 1))
            .await
            .expect("a POST lost before any answer is sent again, not failed");
        assert_count(stream, N).await;
        let counters = proxy.counters();
        let faults = |c: &tether_testkit::proxy::Counters| c.cuts + c.resets + c.truncations;
        assert_eq!(
            faults(&counters) - faults(&forced),
            1,
            "the fault happened once: {counters:?}"
        );
        // The tool ran once: its stream's priming event, n progress events and the result.
        let stored = events_appended(server.addr).await - before;
        assert_eq!(stored, (N + 2) as f64, "events stored for one run of count");
        // The client said it reconnected without a cursor, i.e. sent the request again.
        let mut resent = false;
        while let Some(event) = events.try_recv() {
            if let ClientEvent::Reconnecting {
                last_event_id: None,
                request_id: Some(_),
                ..
            } = event
            {
                resent = true;
            }
        }
        assert!(resent, "no reconnect without a cursor was reported");
        client.close().await.unwrap();
    })
    .await
    .unwrap_or_else(|_| panic!("timed out; proxy: {}", proxy.report()));
}

#[tokio::test]
async fn a_post_cut_inside_its_response_head_is_sent_again_and_completes_once() {
    call_with_first_post_lost(FaultPlan::pass_through().with_cut(ByteFault::after(40).at_most(1)))
        .await;
}

#[tokio::test]
async fn a_post_reset_inside_its_response_head_is_sent_again_and_completes_once() {
    call_with_first_post_lost(
        FaultPlan::pass_through().with_reset(ByteFault::after(40).at_most(1)),
    )
    .await;
}

#[tokio::test]
async fn a_post_stream_truncated_inside_its_priming_event_is_sent_again_and_completes_once() {
    call_with_first_post_lost(
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(0).at_most(1)),
    )
    .await;
}
