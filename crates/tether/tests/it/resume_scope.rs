//! Which events a `Last-Event-ID` can reach, and which ids are refused: only its own stream,
//! only to its own session; malformed, unknown, foreign and expired ids get the
//! 400 of docs/CONTRACTS.md#last-event-id-row with `data.reason`, never a 200 with a silent gap;
//! priming events follow the session's negotiated version. Real sockets, raw reader.
//! docs/PROTOCOL.md rule numbers (T…) per test.

use std::time::Duration;

use crate::support::resume::{
    V11, assert_exact_count, assert_resume_refused, messages, read_messages, read_priming, split_id,
};
use crate::support::server::TestServer;
use serde_json::json;
use tether::server::ServerConfig;
use tether::store::StoreLimits;
use tether_testkit::raw::{RawClient, SseItem, Transcript};

const V03: &str = "2025-03-26";

async fn resume(client: &RawClient, id: &str) -> Transcript {
    client
        .resume(id)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap()
}

/// T67, T68, T77: session B presenting session A's event ids — of A's POST stream (live and
/// completed) and of A's standalone stream — gets 400 `unknown` and nothing of A's; A's own
/// resume with the same id works (positive control).
#[tokio::test]
async fn another_sessions_event_id_is_unknown_and_reveals_nothing() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut a = server.session(V11).await;
    let b = server.session(V11).await;
    let secret = json!("secret-of-session-a");

    let mut get = a.open_get_stream().await.unwrap();
    let standalone = get.next_event().await.unwrap().unwrap().id;
    let (id, mut post) = a
        .call_tool("gated", json!({"n": 4}), Some(secret.clone()))
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    server.release(2);
    let before = read_messages(&mut post, 2).await;
    drop(post);

    let check_b = |t: &Transcript| {
        assert_resume_refused(t, "unknown");
        let body = String::from_utf8_lossy(&t.body);
        assert!(!body.contains("secret"), "nothing of A's: {body}");
        assert!(!body.contains(&stream.to_string()), "{body}");
        assert!(!body.contains(a.session_id().unwrap()), "{body}");
    };
    for id in [
        format!("{stream}:0"),
        before[1].0.clone(),
        standalone.clone(),
    ] {
        check_b(&resume(&b, &id).await);
    }
    // Completed, too.
    server.release(3);
    server.wait_complete(&a, stream).await;
    check_b(&resume(&b, &before[1].0).await);

    // Positive control: A's resume with the same id gets the rest.
    let t = resume(&a, &before[1].0).await;
    assert_eq!(t.status, 200);
    let mut all = before;
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &secret, 4);
    drop(get);
}

/// T67: in one session with two POST streams and the standalone stream, each stream's id
/// replays that stream only.
#[tokio::test]
async fn another_streams_id_of_the_same_session_replays_only_that_stream() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    let standalone = get.next_event().await.unwrap().unwrap().id;

    let (id_a, post_a) = client
        .call_tool("count", json!({"n": 5}), Some(json!("a")))
        .await
        .unwrap();
    let (id_b, post_b) = client
        .call_tool("count", json!({"n": 7}), Some(json!("b")))
        .await
        .unwrap();
    let a = messages(&post_a.read_to_end().await.unwrap());
    let b = messages(&post_b.read_to_end().await.unwrap());
    let (stream_a, _) = split_id(&a[0].0);
    let (stream_b, _) = split_id(&b[0].0);
    assert_ne!(stream_a, stream_b);
    let (_, announce) = client
        .call_tool("announce", json!({"text": "hello"}), None)
        .await
        .unwrap();
    announce.read_to_end().await.unwrap();
    let announced = read_messages(&mut get, 1).await;
    assert_eq!(announced[0].1["method"], "notifications/test/announce");
    drop(get);

    let t = resume(&client, &format!("{stream_a}:0")).await;
    assert_exact_count(&messages(&t), stream_a, id_a, &json!("a"), 5);
    let t = resume(&client, &b[2].0).await;
    assert_eq!(messages(&t), b[3..].to_vec(), "only b's, after b's 3rd");
    let mut all_b = b[..3].to_vec();
    all_b.extend(messages(&t));
    assert_exact_count(&all_b, stream_b, id_b, &json!("b"), 7);

    let mut standalone_resume = client.resume(&standalone).await.unwrap();
    assert_eq!(standalone_resume.status(), 200);
    let got = read_messages(&mut standalone_resume, 1).await;
    assert_eq!(got, announced, "the standalone stream's own message");
    let more = standalone_resume
        .next_item_within(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(more.is_none(), "nothing else: {more:?}");
}

/// docs/CONTRACTS.md#last-event-id-row: ids that are not tether's shape are 400 `malformed`;
/// well-formed ids of no stream, or with a seq this stream never issued, are `unknown`. The
/// session works on afterwards.
#[tokio::test]
async fn unusable_ids_are_refused_with_their_reason() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (_, mut post) = client
        .call_tool("gated", json!({"n": 3}), Some(json!(1)))
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    server.release(1);
    read_messages(&mut post, 1).await;

    for id in [
        "garbage".to_owned(),
        "42".to_owned(),
        format!("{stream}"),
        format!("{stream}:"),
        format!("{stream}:01"),
        format!("{stream}:-1"),
        format!("{stream}:1:2"),
        format!("{stream}:18446744073709551616"),
        format!("_{stream}:1"),
        "streamId_123".to_owned(),
        format!("{stream}:1é"),
    ] {
        assert_resume_refused(&resume(&client, &id).await, "malformed");
    }
    for id in [
        "AAAAAAAAAAAAAAAAAAAAAA:1".to_owned(),
        // Seqs this (live) stream never issued: waiting for them would be a silent gap.
        format!("{stream}:2"),
        format!("{stream}:99"),
        format!("{stream}:18446744073709551615"),
    ] {
        assert_resume_refused(&resume(&client, &id).await, "unknown");
    }
    // The last issued seq is fine (nothing to replay yet, the stream goes on).
    let mut ok = client.resume(&format!("{stream}:1")).await.unwrap();
    assert_eq!(ok.status(), 200);
    server.release(3);
    let rest = read_messages(&mut ok, 3).await;
    assert_eq!(
        rest.last().unwrap().1["result"]["content"][0]["text"],
        "counted 3"
    );
    drop(post);
    // The completed stream: a seq past its end is never issued either.
    assert_resume_refused(&resume(&client, &format!("{stream}:5")).await, "unknown");
    let (id, response) = client
        .call_tool("echo", json!({"text": "still here"}), None)
        .await
        .unwrap();
    let t = response.read_to_end().await.unwrap();
    assert_eq!(messages(&t)[0].1["id"], id);
}

/// docs/CONTRACTS.md#last-event-id-row: a completed stream stays resumable for the
/// store's retention, then its id is 400 `expired` for its own session (no silent gap) — and still
/// `unknown` for another session, which must not learn that it existed.
#[tokio::test]
async fn resume_after_retention_expired_is_400_expired() {
    let store = {
        let mut config = StoreLimits::default();
        config.retention = Duration::from_millis(200);
        config
    };
    let server = TestServer::start_with_store(ServerConfig::default(), store).await;
    let mut client = server.session(V11).await;
    let other = server.session(V11).await;
    let token = json!("ttl");
    let (id, mut post) = client
        .call_tool("count", json!({"n": 3}), Some(token.clone()))
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    let before = read_messages(&mut post, 1).await;
    drop(post);
    server.wait_complete(&client, stream).await;

    // Within the retention: the rest and the result.
    let t = resume(&client, &before[0].0).await;
    let mut all = before.clone();
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, 3);

    tokio::time::sleep(Duration::from_millis(300)).await;
    let swept = server.events.sweep_expired(tokio::time::Instant::now());
    assert!(swept >= 1, "the stream's retention ran out");
    assert_resume_refused(&resume(&client, &before[0].0).await, "expired");
    assert_resume_refused(&resume(&other, &before[0].0).await, "unknown");
}

/// Events a client still needs that the per-session cap evicted are
/// reported as `expired` on resume, never skipped.
#[tokio::test]
async fn resume_past_evicted_events_is_400_expired() {
    let store = {
        let mut config = StoreLimits::default();
        config.max_events_per_session = 40;
        config
    };
    let server = TestServer::start_with_store(ServerConfig::default(), store).await;
    let mut client = server.session(V11).await;
    let (_, mut post) = client
        .call_tool("gated", json!({"n": 100}), Some(json!("cap")))
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    server.release(2);
    let before = read_messages(&mut post, 2).await;
    drop(post);
    server.release(99);
    server.wait_complete(&client, stream).await;
    assert_resume_refused(&resume(&client, &before[1].0).await, "expired");
    // The newest events are still there: a resume from within them works.
    let t = resume(&client, &format!("{stream}:95")).await;
    let rest = messages(&t);
    assert_eq!(rest.len(), 6, "96..=100 and the result: {rest:?}");
    assert_eq!(split_id(&rest[0].0).1, 96);
}

/// The first event of a stream, and whether a `retry` field came before it.
fn first_event(t: &Transcript) -> (String, String, bool) {
    let mut retry = false;
    for item in &t.items {
        match item {
            SseItem::Retry(_) => retry = true,
            SseItem::Event(event) => return (event.id.clone(), event.data.clone(), retry),
            _ => {}
        }
    }
    panic!("no event in {:?}", t.items)
}

/// T71, T72: a session that negotiated 2025-11-25 gets a priming event (id, `retry`, empty
/// data) first on every POST stream and GET stream, even when later requests carry
/// `MCP-Protocol-Version: 2025-03-26`; a session that negotiated 2025-03-26 never gets one,
/// even when later requests carry 2025-11-25 — on POST, GET and resume alike.
#[tokio::test]
async fn priming_follows_the_negotiated_version_not_the_request_header() {
    let server = TestServer::start(ServerConfig::default()).await;
    for (negotiated, header) in [(V11, V03), (V03, V11)] {
        // Later requests carry the other version's `MCP-Protocol-Version`.
        let mut client = server
            .session(negotiated)
            .await
            .with_protocol_version(header);
        let primed = negotiated == V11;

        let (_, post) = client
            .call_tool("count", json!({"n": 2}), Some(json!(1)))
            .await
            .unwrap();
        assert_eq!(post.status(), 200);
        let t = post.read_to_end().await.unwrap();
        let (id, data, retry) = first_event(&t);
        assert_eq!(
            data.is_empty(),
            primed,
            "{negotiated}: POST priming {:?}",
            t.items
        );
        assert_eq!(retry, primed, "{negotiated}: retry with the priming event");
        assert_eq!(split_id(&id).1, if primed { 0 } else { 1 });
        let ids = t.event_ids();

        let mut get = client.open_get_stream().await.unwrap();
        assert_eq!(get.status(), 200);
        let item = get
            .next_item_within(Duration::from_millis(if primed { 5_000 } else { 150 }))
            .await
            .unwrap();
        match item {
            Some(Some(SseItem::Retry(_))) => {
                assert!(primed, "{negotiated}: GET primed");
                let event = get.next_event().await.unwrap().unwrap();
                assert_eq!(event.data, "");
            }
            None => assert!(!primed, "{negotiated}: GET priming missing"),
            other => panic!("{negotiated}: unexpected {other:?}"),
        }
        drop(get);

        // A resume is not a new stream: never primed, whatever the version.
        let t = resume(&client, ids[ids.len() - 2]).await;
        let (id, data, _) = first_event(&t);
        assert!(!data.is_empty(), "{negotiated}: resume not primed");
        assert_eq!(id, ids[ids.len() - 1]);
    }
}
