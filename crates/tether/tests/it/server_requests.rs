//! Server→client requests and cancellation over raw HTTP: a handler's request goes out on the
//! originating POST stream, the client answers with a POST (202), the handler gets the answer;
//! `notifications/cancelled` stops a handler with no response sent. docs/PROTOCOL.md rule numbers
//! per test.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::server::{TestServer, assert_session_works, messages};
use serde_json::{Value, json};
use tether::server::{ContextError, ServerConfig};
use tether_testkit::raw::RawResponse;

const V11: &str = "2025-11-25";

/// Reads events until a JSON-RPC request arrives; returns it.
async fn next_server_request(response: &mut RawResponse) -> Value {
    loop {
        let event = response.next_event().await.unwrap().expect("stream open");
        if event.data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&event.data).unwrap();
        if message.get("method").is_some() && message.get("id").is_some() {
            return message;
        }
    }
}

/// T13, T22, T3: a server→client request travels on the originating POST stream; the client
/// answers with a POST (202) and the handler's result reflects the answer.
#[tokio::test]
async fn server_request_on_the_originating_stream_answered_by_post() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    let (id, mut response) = client
        .call_tool("ask", json!({"question": "colour?"}), None)
        .await
        .unwrap();
    let request = next_server_request(&mut response).await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "colour?"
    );
    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"role": "assistant", "content": {"type": "text", "text": "blue"}, "model": "m"}});
    let posted = client
        .post(&answer)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(posted.status, 202);
    assert!(posted.body.is_empty());
    let result = response.read_until_response(id).await.unwrap().unwrap();
    assert_eq!(result["result"]["content"][0]["text"], "client said blue");
    // Nothing of it on the standalone stream (T31).
    let _ = get
        .next_item_within(Duration::from_millis(100))
        .await
        .unwrap();
    assert!(messages(get.transcript()).is_empty());
}

/// A client's error answer reaches the handler as `ContextError::Remote`.
#[tokio::test]
async fn error_answer_reaches_the_handler() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let (id, mut response) = client
        .call_tool("ask", json!({"question": "?"}), None)
        .await
        .unwrap();
    let request = next_server_request(&mut response).await;
    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "error": {"code": -1, "message": "user declined"}});
    assert_eq!(client.post(&answer).await.unwrap().status(), 202);
    let result = response.read_until_response(id).await.unwrap().unwrap();
    assert_eq!(
        result["result"]["content"][0]["text"],
        "client refused user declined"
    );
}

/// T16, T24: `notifications/cancelled` stops the handler (its `cancelled()` fires and it can
/// emit nothing more), no response is sent, and the stream ends; the session keeps working.
#[tokio::test]
async fn cancelled_request_gets_no_response() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let started = server.observed.started_notify.notified();
    let (id, mut response) = client
        .call_tool("wait", json!({}), Some(json!("p")))
        .await
        .unwrap();
    started.await;
    let cancelled = server.observed.cancelled_notify.notified();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "test"}});
    assert_eq!(client.post(&cancel).await.unwrap().status(), 202);
    tokio::time::timeout(Duration::from_secs(5), cancelled)
        .await
        .expect("the handler saw its cancellation");
    while response.next_item().await.unwrap().is_some() {}
    let t = response.into_transcript();
    assert!(t.complete, "the stream ends");
    let all = messages(&t);
    assert_eq!(all.len(), 1, "only the progress before the cancel: {all:?}");
    assert_eq!(all[0]["method"], "notifications/progress");
    assert_eq!(server.observed.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(
        *server.observed.emit_after_cancel.lock().await,
        vec![Err(ContextError::Cancelled)]
    );
    assert_session_works(&mut client).await;
}

/// T16 in JSON mode: a cancelled request's POST ends with 202 and no JSON-RPC response.
#[tokio::test]
async fn cancelled_request_in_json_mode_gets_no_response() {
    let mut config = ServerConfig::default();
    config.json_response = true;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let started = server.observed.started_notify.notified();
    // A JSON answer's head comes with its body, so the call waits in a task of its own.
    let id = 500;
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}}});
    let caller = client.clone();
    let pending =
        tokio::spawn(async move { caller.post(&call).await.unwrap().read_to_end().await });
    started.await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id}});
    assert_eq!(client.post(&cancel).await.unwrap().status(), 202);
    let t = pending.await.unwrap().unwrap();
    assert_eq!(t.status, 202);
    assert!(t.body.is_empty());
    assert_session_works(&mut client).await;
}

/// T99: cancelling an unknown or finished request is ignored (202, nothing breaks).
#[tokio::test]
async fn cancelling_an_unknown_request_is_ignored() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for request_id in [json!(12345), json!("nope")] {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id}});
        assert_eq!(client.post(&cancel).await.unwrap().status(), 202);
    }
    assert_session_works(&mut client).await;
}

/// DELETE cancels the session's running handlers and ends their streams.
#[tokio::test]
async fn delete_cancels_running_handlers() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let started = server.observed.started_notify.notified();
    let (_, mut response) = client
        .call_tool("wait", json!({}), Some(json!(1)))
        .await
        .unwrap();
    started.await;
    let cancelled = server.observed.cancelled_notify.notified();
    assert_eq!(client.delete_session().await.unwrap().status, 200);
    tokio::time::timeout(Duration::from_secs(5), cancelled)
        .await
        .expect("the handler was cancelled");
    while response.next_item().await.unwrap().is_some() {}
    assert_eq!(
        *server.observed.emit_after_cancel.lock().await,
        vec![Err(ContextError::SessionClosed)]
    );
    client.set_session_id(None);
}
