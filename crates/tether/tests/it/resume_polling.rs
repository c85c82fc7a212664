//! Server-initiated close (SEP-1699 "polling", MCP 2025-11-25): a handler's
//! `RequestContext::close_connection` and `ServerConfig::poll_after` end a connection after a
//! `retry` field without ending its stream; the client's resume after `retry` continues it to
//! the result. Real sockets, raw reader. docs/PROTOCOL.md rule numbers (T…) per test.

use std::time::Duration;

use crate::support::resume::{
    Call, V11, assert_exact_count, messages, read_messages, read_priming, split_id,
};
use crate::support::server::TestServer;
use serde_json::{Value, json};
use tether::server::ServerConfig;
use tether_testkit::raw::{RawClient, SseItem, Transcript};

const V03: &str = "2025-03-26";

/// The connection ended (the body is complete) with a `retry` field as its last item, right
/// after an event with an id (T73, T74). Returns the retry and that id.
fn assert_closed_with_retry(t: &Transcript) -> (u64, String) {
    assert!(t.complete, "the server ended the connection: {:?}", t.items);
    let items: Vec<&SseItem> = t
        .items
        .iter()
        .filter(|item| !matches!(item, SseItem::Comment(_)))
        .collect();
    let [.., SseItem::Event(event), SseItem::Retry(retry)] = items.as_slice() else {
        panic!("expected an event, then retry, then the end: {:?}", t.items);
    };
    assert!(!event.id.is_empty(), "an event with an id before the close");
    assert!(
        t.body.ends_with(format!("retry: {retry}\n\n").as_bytes()),
        "the retry field is the last thing on the wire: {:?}",
        String::from_utf8_lossy(&t.body)
    );
    (*retry, event.id.clone())
}

/// T73, T74, T75: the handler closes its request's connection after 3 of 6 events: the POST
/// response ends with `retry` after the 3rd event (no result); the handler keeps running and
/// its later events are stored; the resume after `retry` gets them and the result.
#[tokio::test]
async fn close_connection_ends_with_retry_and_the_resume_continues_to_the_result() {
    let server = TestServer::start(ServerConfig::default()).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("gated", json!({"n": 6}), "poll").await;
    server.release(3);
    let mut all = read_messages(&mut post, 3).await;
    assert!(
        server
            .context()
            .close_connection(Some(Duration::from_millis(40)))
    );
    let t = post.read_to_end().await.unwrap();
    let (retry, last) = assert_closed_with_retry(&t);
    assert_eq!(retry, 40);
    assert_eq!(last, all[2].0, "nothing after the 3rd event");
    assert_eq!(messages(&t).len(), 3);

    // The handler goes on while no connection is open (T75).
    server.release(4);
    server.wait_complete(&client, stream).await;
    tokio::time::sleep(Duration::from_millis(retry)).await;
    let t = client
        .resume(&last)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert!(t.complete);
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, 6);
}

/// T73: closing a resume connection that has not written anything yet first sends an event
/// with an id — a priming event carrying the id the client resumed from — then `retry`
/// (the configured one when the handler gives none). Resuming from it continues the stream.
#[tokio::test]
async fn close_connection_on_a_quiet_resume_sends_an_id_first() {
    let mut config = ServerConfig::default();
    config.retry = Duration::from_millis(30);
    let server = TestServer::start(config).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("gated", json!({"n": 3}), "quiet").await;
    server.release(1);
    let mut all = read_messages(&mut post, 1).await;
    drop(post);

    let resumed = client.resume(&all[0].0).await.unwrap();
    assert_eq!(resumed.status(), 200);
    // The resume is registered before its head is sent: the close reaches it.
    assert!(server.context().close_connection(None));
    let t = resumed.read_to_end().await.unwrap();
    let (retry, last) = assert_closed_with_retry_after_priming(&t);
    assert_eq!(retry, 30, "the configured retry");
    assert_eq!(last, all[0].0, "the id the client already had");

    server.release(3);
    let t = client
        .resume(&last)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, 3);
}

/// A close of a connection that sent nothing: a priming event (id, `retry`, empty data), and
/// the end. Returns the retry and the id.
fn assert_closed_with_retry_after_priming(t: &Transcript) -> (u64, String) {
    assert!(t.complete, "ended: {:?}", t.items);
    let [SseItem::Retry(retry), SseItem::Event(event)] = t.items.as_slice() else {
        panic!("expected a priming event alone: {:?}", t.items);
    };
    assert_eq!(event.data, "");
    assert_eq!(event.retry, Some(*retry));
    (*retry, event.id.clone())
}

/// SEP-1699 is a 2025-11-25 feature: for a session that negotiated 2025-03-26, and in
/// JSON-response mode (no stream of the request's own), `close_connection` does nothing and
/// says so; the stream runs to its result on one connection.
#[tokio::test]
async fn close_connection_is_declined_for_older_sessions_and_json_answers() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V03).await;
    let token = json!("old");
    let (id, mut post) = client
        .call_tool("gated", json!({"n": 2}), Some(token.clone()))
        .await
        .unwrap();
    server.release(1);
    let first = read_messages(&mut post, 1).await;
    assert!(!server.context().close_connection(None));
    server.release(2);
    let t = post.read_to_end().await.unwrap();
    assert!(t.retries().is_empty(), "no retry: {:?}", t.items);
    // The transcript holds everything read on the connection, the first message included.
    let all = messages(&t);
    assert_eq!(all[0], first[0]);
    let (stream, _) = split_id(&all[0].0);
    assert_exact_count(&all, stream, id, &token, 2);

    let mut config = ServerConfig::default();

    config.json_response = true;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    get.next_event().await.unwrap();
    // A JSON answer's head comes with its body, when the call is done.
    let call = tokio::spawn(async move {
        let (_, post) = client
            .call_tool("gated", json!({"n": 1}), Some(json!(1)))
            .await
            .unwrap();
        post.read_to_end().await.unwrap()
    });
    server.release(1);
    let progress = read_messages(&mut get, 1).await;
    assert_eq!(progress[0].1["method"], "notifications/progress");
    assert!(
        !server.context().close_connection(None),
        "the GET stream is not the request's"
    );
    server.release(1);
    let body = call.await.unwrap().json().unwrap();
    assert_eq!(body["result"]["content"][0]["text"], "counted 1");
    let more = get
        .next_item_within(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(more.is_none(), "the GET stream stays open: {more:?}");
}

/// Follows a stream across server-initiated closes: reads each connection to its end and
/// resumes from the last id after `retry`, until the final response to `id` arrives. Returns
/// every message in order and the number of connections.
async fn follow(client: &RawClient, first: Transcript, id: i64) -> (Vec<(String, Value)>, usize) {
    let mut all = messages(&first);
    let mut t = first;
    let mut connections = 1;
    while !all.last().is_some_and(|(_, m)| m["id"] == json!(id)) {
        let (retry, last) = assert_closed_with_retry(&t);
        assert!(connections < 100, "no end in sight");
        tokio::time::sleep(Duration::from_millis(retry)).await;
        t = client
            .resume(&last)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_eq!(t.status, 200);
        all.extend(messages(&t));
        connections += 1;
    }
    assert!(t.complete, "the last connection ends with the stream");
    (all, connections)
}

/// T73–T75, `ServerConfig::poll_after`: a `count` of 40 events 20 ms apart on a server that
/// closes connections after 250 ms: its POST connection and then each resume are closed with
/// `retry` after an id'd event; following them, the client gets every event once, in order.
#[tokio::test]
async fn poll_after_closes_long_connections_and_resume_continues() {
    let mut config = ServerConfig::default();
    config.poll_after = Some(Duration::from_millis(250));
    config.retry = Duration::from_millis(20);
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let token = json!("polled");
    let started = tokio::time::Instant::now();
    let (id, mut post) = client
        .call_tool(
            "count",
            json!({"n": 40, "interval_ms": 20}),
            Some(token.clone()),
        )
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    let t = post.read_to_end().await.unwrap();
    let (retry, _) = assert_closed_with_retry(&t);
    assert_eq!(retry, 20);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed after poll_after, not before"
    );
    let (all, connections) = follow(&client, t, id).await;
    assert!(connections >= 3, "closed repeatedly: {connections}");
    assert_exact_count(&all, stream, id, &token, 40);
}

/// `poll_after` closes the standalone GET stream too (after its priming event, with
/// `retry`); a resume from that id gets what was announced meanwhile. A 2025-03-26 session's
/// GET stream is left open.
#[tokio::test]
async fn poll_after_closes_get_streams_of_polling_sessions_only() {
    let mut config = ServerConfig::default();
    config.poll_after = Some(Duration::from_millis(200));
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let t = client
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    let (retry, last) = assert_closed_with_retry(&t);
    assert_eq!(retry, 1000, "the default retry");
    let (_, announce) = client
        .call_tool("announce", json!({"text": "meanwhile"}), None)
        .await
        .unwrap();
    announce.read_to_end().await.unwrap();
    let mut resumed = client.resume(&last).await.unwrap();
    let got = read_messages(&mut resumed, 1).await;
    assert_eq!(got[0].1["params"]["text"], "meanwhile");

    let old = server.session(V03).await;
    let mut get = old.open_get_stream().await.unwrap();
    let item = get
        .next_item_within(Duration::from_millis(500))
        .await
        .unwrap();
    assert!(
        item.is_none(),
        "a 2025-03-26 GET stream stays open: {item:?}"
    );
}
