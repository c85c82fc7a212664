//! `count` end to end over raw HTTP: progress 1..n in order then the result, on POST SSE and
//! in JSON mode; many sessions with concurrent requests, each stream getting exactly its own
//! events; a disconnect that does not cancel. docs/PROTOCOL.md rule numbers (T…) per test.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::server::{TestServer, assert_count_stream, messages};
use serde_json::{Value, json};
use tether::server::ServerConfig;

const V11: &str = "2025-11-25";

/// T8, T9, T13, T100: `count` on a POST SSE stream delivers progress 1..n with the request's
/// token, in order, then `counted n`, and the response ends.
#[tokio::test]
async fn count_delivers_progress_in_order_then_the_result_over_sse() {
    let server = TestServer::start(ServerConfig::default()).await;
    for version in ["2025-03-26", "2025-06-18", V11] {
        let mut client = server.session(version).await;
        let token = json!(format!("tok-{version}"));
        let (id, response) = client
            .call_tool("count", json!({"n": 200}), Some(token.clone()))
            .await
            .unwrap();
        assert!(response.is_event_stream());
        let t = response.read_to_end().await.unwrap();
        assert!(t.complete);
        assert_count_stream(&t, id, &token, 200);
        let primed = t.events().next().is_some_and(|e| e.data.is_empty());
        assert_eq!(primed, version == V11, "priming only for 2025-11-25 (T72)");
    }
}

/// docs/CONTRACTS.md#demo-count: without a progress token, n `notifications/message` at level info
/// (filtered by `logging/setLevel`).
#[tokio::test]
async fn count_without_token_logs_and_respects_the_log_level() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (id, response) = client
        .call_tool("count", json!({"n": 3}), None)
        .await
        .unwrap();
    let all = messages(&response.read_to_end().await.unwrap());
    assert_eq!(all.len(), 4);
    for (i, message) in all[..3].iter().enumerate() {
        assert_eq!(message["method"], "notifications/message");
        assert_eq!(message["params"]["level"], "info");
        assert_eq!(message["params"]["logger"], "count");
        assert_eq!(
            message["params"]["data"],
            json!({"index": i + 1, "total": 3})
        );
    }
    assert_eq!(all[3]["id"], id);

    let (_, response) = client
        .post_request("logging/setLevel", json!({"level": "warning"}))
        .await
        .unwrap();
    response.read_to_end().await.unwrap();
    let (_, response) = client
        .call_tool("count", json!({"n": 3}), None)
        .await
        .unwrap();
    let all = messages(&response.read_to_end().await.unwrap());
    assert_eq!(all.len(), 1, "info messages filtered: {all:?}");
}

/// T7, T28: in JSON-response mode `count`'s result is the JSON body, and its progress goes to
/// the standalone GET stream, in order.
#[tokio::test]
async fn count_in_json_mode_puts_progress_on_the_standalone_stream() {
    let mut config = ServerConfig::default();
    config.json_response = true;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    let (id, response) = client
        .call_tool("count", json!({"n": 50}), Some(json!(7)))
        .await
        .unwrap();
    let t = response.read_to_end().await.unwrap();
    assert!(!t.is_event_stream());
    let body = t.json().unwrap();
    assert_eq!(body["id"], id);
    assert_eq!(body["result"]["content"][0]["text"], "counted 50");
    let mut progress = Vec::new();
    while progress.len() < 50 {
        let event = get.next_event().await.unwrap().unwrap();
        if event.data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(message["method"], "notifications/progress");
        assert_eq!(message["params"]["progressToken"], 7);
        progress.push(message["params"]["progress"].as_u64().unwrap());
    }
    assert_eq!(progress, (1..=50).collect::<Vec<_>>());
}

/// T31, T32, T64, T67: 20 sessions, each with a GET stream and 3 concurrent `count` calls:
/// every POST stream carries exactly its own progress (by token) and response, the GET
/// streams carry none of it, and event ids never repeat within a session.
#[tokio::test]
async fn many_sessions_and_concurrent_requests_each_stream_gets_only_its_own() {
    const SESSIONS: usize = 20;
    const PER_SESSION: usize = 3;
    let server = TestServer::start(ServerConfig::default()).await;
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let mut client = server.session(V11).await;
        tasks.push(tokio::spawn(async move {
            let mut get = client.open_get_stream().await.unwrap();
            let mut calls = Vec::new();
            for r in 0..PER_SESSION {
                let n = 20 + (s * PER_SESSION + r) as u64 % 17;
                let token = json!(format!("s{s}-r{r}"));
                let (id, response) = client
                    .call_tool(
                        "count",
                        json!({"n": n, "interval_ms": 1}),
                        Some(token.clone()),
                    )
                    .await
                    .unwrap();
                calls.push((id, token, n, response));
            }
            let mut ids = HashSet::new();
            for (id, token, n, response) in calls {
                let t = response.read_to_end().await.unwrap();
                assert_count_stream(&t, id, &token, n);
                for event_id in t.event_ids() {
                    assert!(ids.insert(event_id.to_owned()), "duplicate id {event_id}");
                }
            }
            // The GET stream saw its priming event and nothing else.
            let quiet = get
                .next_item_within(Duration::from_millis(100))
                .await
                .unwrap();
            let t = get.transcript();
            assert!(
                messages(t).is_empty(),
                "nothing on the GET stream: {:?} {quiet:?}",
                t.items
            );
            let _ = client.delete_session().await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        server.observed.counts_finished.load(Ordering::SeqCst),
        SESSIONS * PER_SESSION
    );
}

/// T15, T70: dropping a POST's connection is not cancellation: the handler runs to the end
/// and, resuming with the last event id, the client gets the rest and the result, once.
#[tokio::test]
async fn disconnect_is_not_cancellation() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let token = json!("cut");
    let (id, mut response) = client
        .call_tool(
            "count",
            json!({"n": 30, "interval_ms": 10}),
            Some(token.clone()),
        )
        .await
        .unwrap();
    let seen = response.read_events(6).await.unwrap(); // priming + 5 progress
    let last = seen.last().unwrap().id.clone();
    drop(response);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = client
        .resume(&last)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    let rest = messages(&t);
    assert_eq!(rest.len(), 26, "progress 6..=30 and the result: {rest:?}");
    for (i, message) in rest[..25].iter().enumerate() {
        assert_eq!(message["params"]["progress"], json!(i + 6));
        assert_eq!(message["params"]["progressToken"], token);
    }
    assert_eq!(rest[25]["id"], id);
    assert_eq!(rest[25]["result"]["content"][0]["text"], "counted 30");
    assert_eq!(server.observed.counts_finished.load(Ordering::SeqCst), 1);
}
