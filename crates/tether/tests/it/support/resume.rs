//! What the `resume_*` tests share: reading, cutting and checking `count`-shaped streams with
//! the test kit's raw reader (which neither deduplicates nor reconnects, so every duplicate or
//! gap a server produced is visible). Their server is [`super::server::TestServer`], whose
//! handler adds `gated {n}` (a `count` whose every step waits for a permit the test releases)
//! and `announce {text}` (a notification on the session's standalone stream) to the demo's
//! `count` and `echo`.

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether::proto::ids::{EventId, SessionId, StreamId};
use tether::store::{ANONYMOUS_PRINCIPAL, StreamOwner};
use tether_testkit::raw::{RawClient, RawResponse, SseEvent, Transcript};

/// How long a test waits for the server to store something before failing.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The protocol version that gets priming events and server-initiated closes.
pub(crate) const V11: &str = "2025-11-25";

/// A tool call in flight, as [`TestServer::call`](super::server::TestServer::call) opened it.
pub(crate) struct Call {
    /// The session's client.
    pub(crate) client: RawClient,
    /// The request id.
    pub(crate) id: i64,
    /// The POST's SSE response, read past the priming event.
    pub(crate) post: RawResponse,
    /// The request's stream.
    pub(crate) stream: StreamId,
    /// The progress token.
    pub(crate) token: Value,
}

/// The store owner of `client`'s session (no authentication: the anonymous principal).
pub(crate) fn owner(client: &RawClient) -> StreamOwner {
    StreamOwner {
        principal: Arc::from(ANONYMOUS_PRINCIPAL),
        session: SessionId::parse(client.session_id().unwrap()).unwrap(),
    }
}

/// `(stream, seq)` of one of tether's event ids.
pub(crate) fn split_id(id: &str) -> (StreamId, u64) {
    let id = EventId::from_str(id).unwrap_or_else(|e| panic!("event id {id:?}: {e}"));
    (id.stream, id.seq)
}

/// The JSON-RPC messages of a transcript with their event ids (priming events skipped).
pub(crate) fn messages(t: &Transcript) -> Vec<(String, Value)> {
    t.messages().unwrap()
}

/// Reads `k` message events (events with data), skipping nothing else: a priming event among
/// them fails the test, since it would mean a duplicate id or a primed resume.
pub(crate) async fn read_messages(response: &mut RawResponse, k: u64) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    while (out.len() as u64) < k {
        let event: SseEvent = response
            .next_event()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended after {} of {k} messages", out.len()));
        let message = event
            .json()
            .unwrap()
            .unwrap_or_else(|| panic!("unexpected empty-data event {event:?}"));
        out.push((event.id, message));
    }
    out
}

/// Reads the priming event of a new 2025-11-25 stream and returns its stream.
pub(crate) async fn read_priming(response: &mut RawResponse) -> StreamId {
    let event = response.next_event().await.unwrap().expect("priming event");
    assert_eq!(
        event.data, "",
        "the first event is the priming event: {event:?}"
    );
    let (stream, seq) = split_id(&event.id);
    assert_eq!(seq, 0, "the priming event is seq 0");
    stream
}

/// Asserts that `all` is exactly what `count`/`gated` with `n` emits on `stream` for the
/// request `id` with progress token `token`: progress 1..=n as seq 1..=n, then `counted n`
/// as seq n + 1 — contiguous, in order, once each.
pub(crate) fn assert_exact_count(
    all: &[(String, Value)],
    stream: StreamId,
    id: i64,
    token: &Value,
    n: u64,
) {
    let seqs: Vec<u64> = all
        .iter()
        .map(|(event_id, _)| {
            let (s, seq) = split_id(event_id);
            assert_eq!(s, stream, "an event of another stream: {event_id}");
            seq
        })
        .collect();
    assert_eq!(
        seqs,
        (1..=n + 1).collect::<Vec<_>>(),
        "contiguous seqs 1..={}, once each",
        n + 1
    );
    for (i, (_, message)) in all.iter().enumerate() {
        let i = i as u64 + 1;
        if i <= n {
            assert_eq!(message["method"], "notifications/progress", "{message}");
            assert_eq!(message["params"]["progressToken"], *token, "{message}");
            assert_eq!(message["params"]["progress"], json!(i), "{message}");
            assert_eq!(message["params"]["total"], json!(n), "{message}");
        } else {
            assert_eq!(message["id"], json!(id), "the final response: {message}");
            assert_eq!(
                message["result"]["content"][0]["text"],
                format!("counted {n}"),
                "{message}"
            );
        }
    }
}

/// Asserts a resume refusal: 400, JSON-RPC -32000, `data.reason` = `reason`, `id` null.
pub(crate) fn assert_resume_refused(t: &Transcript, reason: &str) -> Value {
    let body = String::from_utf8_lossy(&t.body);
    assert_eq!(t.status, 400, "status; body {body}");
    assert!(!t.is_event_stream(), "a refusal is not a stream");
    let value = t.json().unwrap();
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert_eq!(value["id"], Value::Null, "{value}");
    assert_eq!(value["error"]["code"], json!(-32000), "{value}");
    assert_eq!(value["error"]["data"]["reason"], reason, "{value}");
    value
}
