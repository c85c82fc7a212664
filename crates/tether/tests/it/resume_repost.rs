//! A request sent again: the same id and content POSTed a second time, as a client does when
//! it lost the first POST before any event id reached it (it has nothing to resume with).
//! The server answers with the request's first stream from its start instead of running the
//! request twice, while it runs, after it completed, and with an explicit error once the
//! stream's retention ran out; the same id with other content is still refused.

use std::time::Duration;

use crate::support::resume::{
    V11, assert_exact_count, messages, read_messages, read_priming, split_id,
};
use crate::support::server::TestServer;
use serde_json::{Value, json};
use tether::server::ServerConfig;
use tether::store::StoreLimits;
use tether_testkit::raw::RawClient;

/// Events per call.
const N: u64 = 8;

/// A `gated` call with an id of the test's choosing, so that it can be sent again.
fn gated_call(client: &mut RawClient, n: u64, token: &str) -> (i64, Value) {
    let id = client.next_request_id();
    let message = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "gated", "arguments": {"n": n}, "_meta": {"progressToken": token}},
    });
    (id, message)
}

#[tokio::test]
async fn a_request_sent_again_while_it_runs_gets_its_first_stream_from_the_start() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (id, call) = gated_call(&mut client, N, "again");

    let mut first = client.post(&call).await.unwrap();
    assert_eq!(first.status(), 200);
    let stream = read_priming(&mut first).await;
    // The client loses this connection before an event with a message arrives; the tool goes
    // on meanwhile.
    drop(first);
    server.release(3);
    server.wait_stored(&client, stream, 3).await;

    let mut again = client.post(&call).await.unwrap();
    assert_eq!(again.status(), 200);
    assert!(again.is_event_stream());
    assert_eq!(
        read_priming(&mut again).await,
        stream,
        "the request's own stream, not a second run's"
    );
    // What was stored while the client was away comes first, then the rest live.
    read_messages(&mut again, 3).await;
    server.release(N + 1 - 3);
    let t = again.read_to_end().await.unwrap();
    assert!(t.complete, "the stream ends after the final response");
    // The transcript holds every event of the response, those read above included.
    assert_exact_count(&messages(&t), stream, id, &json!("again"), N);
}

#[tokio::test]
async fn a_request_sent_again_after_it_completed_is_replayed_not_run() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (id, call) = gated_call(&mut client, N, "done");
    let mut first = client.post(&call).await.unwrap();
    let stream = read_priming(&mut first).await;
    drop(first);
    server.release(N + 1);
    server.wait_complete(&client, stream).await;

    let mut again = client.post(&call).await.unwrap();
    assert_eq!(read_priming(&mut again).await, stream);
    let t = again.read_to_end().await.unwrap();
    assert!(t.complete);
    assert_exact_count(&messages(&t), stream, id, &json!("done"), N);
    // Nothing was left waiting for permits: a second run would still be parked at its first
    // event, holding an in-flight slot; a new call with the next id runs at once.
    let (next_id, next) = gated_call(&mut client, 1, "next");
    let mut post = client.post(&next).await.unwrap();
    let next_stream = read_priming(&mut post).await;
    assert_ne!(next_stream, stream);
    server.release(2);
    let t = post.read_to_end().await.unwrap();
    assert_exact_count(&messages(&t), next_stream, next_id, &json!("next"), 1);
}

#[tokio::test]
async fn the_same_id_with_other_content_is_refused_while_the_first_runs() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (id, call) = gated_call(&mut client, N, "first");
    let mut first = client.post(&call).await.unwrap();
    let stream = read_priming(&mut first).await;

    let mut other = call.clone();
    other["params"]["arguments"]["n"] = json!(N + 1);
    let refused = client.post(&other).await.unwrap();
    assert_eq!(refused.status(), 200);
    let t = refused.read_to_end().await.unwrap();
    let answers = messages(&t);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let (event_id, answer) = &answers[0];
    assert_ne!(
        split_id(event_id).0,
        stream,
        "not the first request's stream"
    );
    assert_eq!(answer["id"], json!(id));
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");

    // The first call is unaffected.
    server.release(N + 1);
    let t = first.read_to_end().await.unwrap();
    assert_exact_count(&messages(&t), stream, id, &json!("first"), N);
}

#[tokio::test]
async fn a_request_sent_again_after_its_answer_expired_gets_an_error_saying_so() {
    let store = {
        let mut config = StoreLimits::default();
        config.retention = Duration::from_millis(50);
        config
    };
    let server = TestServer::start_with_store(ServerConfig::default(), store).await;
    let mut client = server.session(V11).await;
    let (id, call) = gated_call(&mut client, 1, "expired");
    let mut first = client.post(&call).await.unwrap();
    let stream = read_priming(&mut first).await;
    drop(first);
    server.release(2);
    server.wait_complete(&client, stream).await;
    tokio::time::sleep(Duration::from_millis(120)).await;

    let again = client.post(&call).await.unwrap();
    assert_eq!(again.status(), 200);
    let t = again.read_to_end().await.unwrap();
    let answers = messages(&t);
    assert_eq!(
        answers.len(),
        1,
        "only the error, no second run: {answers:?}"
    );
    let (event_id, answer) = &answers[0];
    assert_ne!(split_id(event_id).0, stream);
    assert_eq!(answer["id"], json!(id));
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "answer_expired",
        "{answer}"
    );
}
