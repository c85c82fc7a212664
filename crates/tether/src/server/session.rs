//! The live, in-process side of a session: what exists only while this node serves it.
//!
//! The [`SessionRecord`] (id, negotiated version, principal, standalone stream) lives in the
//! [`SessionStore`](crate::store::SessionStore) and the session's events in the
//! [`EventStore`]; this module owns what cannot be stored: the requests in flight and their
//! cancellation tokens, the server→client requests awaiting a client's answer, the open SSE
//! connections per stream (so that a second connection replaces the first, and a handler can
//! ask the one carrying its request's stream to close, SEP-1699), the log level set by
//! `logging/setLevel`, and the token that ends all of it when the session is deleted or
//! expires. A [`SessionRuntime`] is rebuilt from its record on first use, so a node that did
//! not create a session (or restarted) can still serve it. It does not own HTTP or the wire
//! format.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tether_proto::ids::{EventId, StreamId};
use tether_proto::jsonrpc::{ErrorObject, INTERNAL_ERROR, Message, RequestId, Response};
use tether_proto::version::ProtocolVersion;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::fifo::FifoMap;
use crate::lock;
use crate::store::{EventStore, SessionRecord, StoreError, StreamOwner};
use tether_proto::logging::LogLevel;

/// One session's runtime state on this node.
pub(crate) struct SessionRuntime {
    record: SessionRecord,
    owner: StreamOwner,
    events: Arc<dyn EventStore>,
    /// Largest message this session may send as one event (lowered once a 2026-07-28
    /// request's runtime becomes a task's: [`limit_event_bytes`](Self::limit_event_bytes)).
    max_event_bytes: AtomicUsize,
    log_level: AtomicU8,
    /// Cancelled when the session ends (DELETE, idle expiry): every request token and every
    /// connection token is a child of it.
    closed: CancellationToken,
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    /// Each recent request's content fingerprint and the stream answering it
    /// ([`stream_of_request`](Self::stream_of_request)).
    recent: Mutex<FifoMap<RequestId, (u64, StreamId)>>,
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Response>>>,
    connections: Mutex<HashMap<StreamId, Connection>>,
    next_outgoing_id: AtomicI64,
    next_generation: AtomicU64,
    /// The highest seq of the standalone stream handed to a connection: a fresh GET (without
    /// `Last-Event-ID`) continues after it, so a reconnecting client neither loses messages
    /// stored while no GET was open nor gets the ones already written again.
    standalone_cursor: AtomicU64,
    /// When this node took the session up, for `mcp.server.session.duration`.
    opened: std::time::Instant,
}

/// How many recent requests a session remembers the streams of: the store's default stream cap
/// per session, since a request whose stream the store dropped cannot be re-attached anyway.
const RECENT_REQUESTS: usize = 1024;

struct InFlight {
    generation: u64,
    token: CancellationToken,
}

struct Connection {
    generation: u64,
    token: CancellationToken,
    close: Arc<CloseRequest>,
}

/// A request that one connection close without ending its stream (SEP-1699 polling): set by
/// [`SessionRuntime::request_close`], acted on by the connection's writer loop.
#[derive(Debug, Default)]
pub(crate) struct CloseRequest {
    /// Cancelled when the close is requested.
    token: CancellationToken,
    /// The `retry` to send before closing; `None`: the server's configured one.
    retry: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for SessionRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRuntime")
            .field("record", &self.record)
            .field("closed", &self.closed.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl SessionRuntime {
    /// The runtime of a session, from its stored record.
    pub(crate) fn new(
        record: SessionRecord,
        events: Arc<dyn EventStore>,
        max_event_bytes: usize,
    ) -> Arc<Self> {
        let owner = StreamOwner {
            principal: record.principal.clone(),
            session: record.id.clone(),
        };
        Arc::new(Self {
            record,
            owner,
            events,
            max_event_bytes: AtomicUsize::new(max_event_bytes),
            log_level: AtomicU8::new(LogLevel::DEFAULT as u8),
            closed: CancellationToken::new(),
            in_flight: Mutex::new(HashMap::new()),
            recent: Mutex::new(FifoMap::new(RECENT_REQUESTS)),
            pending: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            next_outgoing_id: AtomicI64::new(1),
            next_generation: AtomicU64::new(1),
            standalone_cursor: AtomicU64::new(EventId::PRIMING_SEQ),
            opened: std::time::Instant::now(),
        })
    }

    pub(crate) fn record(&self) -> &SessionRecord {
        &self.record
    }

    pub(crate) fn owner(&self) -> &StreamOwner {
        &self.owner
    }

    pub(crate) fn version(&self) -> ProtocolVersion {
        self.record.version
    }

    pub(crate) fn standalone(&self) -> StreamId {
        self.record.standalone
    }

    pub(crate) fn events(&self) -> &Arc<dyn EventStore> {
        &self.events
    }

    pub(crate) fn log_level(&self) -> LogLevel {
        LogLevel::from_index(self.log_level.load(Ordering::Relaxed)).unwrap_or(LogLevel::DEFAULT)
    }

    pub(crate) fn set_log_level(&self, level: LogLevel) {
        self.log_level.store(level as u8, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// How long this node has held the session.
    pub(crate) fn age(&self) -> Duration {
        self.opened.elapsed()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Appends one message to `stream` (persist, then send: a writer loop picks it up).
    /// A message over the session's event size limit is refused with
    /// [`StoreError::EventTooLarge`].
    pub(crate) async fn append(
        &self,
        stream: StreamId,
        message: &Message,
    ) -> Result<EventId, StoreError> {
        self.append_bytes(stream, &message.to_vec()).await
    }

    /// [`append`](Self::append) of a message already serialized.
    pub(crate) async fn append_bytes(
        &self,
        stream: StreamId,
        bytes: &[u8],
    ) -> Result<EventId, StoreError> {
        let limit = self.max_event_bytes();
        if bytes.len() > limit {
            tracing::warn!(session = %self.record.id, bytes = bytes.len(), limit, "message over the event size limit");
            return Err(StoreError::EventTooLarge);
        }
        let id = self.events.append(stream, bytes).await?;
        tracing::trace!(session = %self.record.id, stream = %stream, seq = id.seq, "appended");
        Ok(id)
    }

    /// `response` serialized (once) for its stream, or, when it is over the event size limit,
    /// a JSON-RPC error in its place (-32603, `data.reason` `"too_large"`): the client learns
    /// that its request was answered and why it cannot have the answer, instead of waiting
    /// for one that never comes.
    pub(crate) fn response_bytes(&self, response: &Response) -> Vec<u8> {
        let bytes = response.to_vec();
        if bytes.len() <= self.max_event_bytes() {
            return bytes;
        }
        self.too_large(response, bytes.len()).to_vec()
    }

    /// [`response_bytes`](Self::response_bytes) for a JSON answer, which needs the response
    /// itself.
    pub(crate) fn fit(&self, response: Response) -> Response {
        let size = response.to_vec().len();
        if size <= self.max_event_bytes() {
            return response;
        }
        self.too_large(&response, size)
    }

    fn too_large(&self, response: &Response, size: usize) -> Response {
        let error = ErrorObject::new(INTERNAL_ERROR, "response too large to send").with_data(
            serde_json::json!({"reason": "too_large", "bytes": size, "limit": self.max_event_bytes()}),
        );
        Response::error(response.id().cloned(), error)
    }

    /// The largest message this session may send as one event.
    fn max_event_bytes(&self) -> usize {
        self.max_event_bytes.load(Ordering::Relaxed)
    }

    /// Lowers the largest event this runtime accepts to `limit` (a task's events have a limit
    /// of their own); never raises it.
    pub(crate) fn limit_event_bytes(&self, limit: usize) {
        self.max_event_bytes.fetch_min(limit, Ordering::Relaxed);
    }

    /// Ends the session on this node: cancels its requests (their handlers see
    /// `cancelled()`), fails the server→client requests awaiting an answer, and closes its
    /// connections.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        lock(&self.pending).clear();
        lock(&self.in_flight).clear();
    }

    /// Whether anything is running or connected, which keeps the session from idling out.
    pub(crate) fn is_busy(&self) -> bool {
        !lock(&self.in_flight).is_empty() || !lock(&self.connections).is_empty()
    }

    fn generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    // -----------------------------------------------------------------------------------------
    // Requests in flight

    /// Reserves an in-flight slot for each id, all or none: `None` when that would exceed
    /// `max` in-flight requests. Inside `Some`, an id already in flight in this session gets
    /// `Err(())` (MCP: request ids are never reused within a session).
    pub(crate) fn reserve(
        self: &Arc<Self>,
        ids: &[RequestId],
        max: usize,
    ) -> Option<Vec<Result<InFlightSlot, ()>>> {
        let mut in_flight = lock(&self.in_flight);
        if in_flight.len().saturating_add(ids.len()) > max {
            return None;
        }
        let mut slots = Vec::with_capacity(ids.len());
        for id in ids {
            if in_flight.contains_key(id) {
                slots.push(Err(()));
                continue;
            }
            let generation = self.generation();
            let token = self.closed.child_token();
            in_flight.insert(
                id.clone(),
                InFlight {
                    generation,
                    token: token.clone(),
                },
            );
            slots.push(Ok(InFlightSlot {
                runtime: Arc::clone(self),
                id: id.clone(),
                generation,
                token,
            }));
        }
        Some(slots)
    }

    /// Records that `stream` answers the request `id`, whose content hashes to `fingerprint`.
    pub(crate) fn remember_request(&self, id: &RequestId, fingerprint: u64, stream: StreamId) {
        lock(&self.recent).insert(id.clone(), (fingerprint, stream));
    }

    /// The stream answering (or that answered) the request `id`, if it is recent and was sent
    /// with the same content: a client that lost a POST before any event id reached it can
    /// send the same request again and be given that stream, from its start, instead of
    /// running the request twice.
    pub(crate) fn stream_of_request(&self, id: &RequestId, fingerprint: u64) -> Option<StreamId> {
        lock(&self.recent)
            .get(id)
            .filter(|(known, _)| *known == fingerprint)
            .map(|&(_, stream)| stream)
    }

    /// `notifications/cancelled`: cancels the request `id` if it is in flight; unknown and
    /// finished ids are ignored (T99).
    pub(crate) fn cancel_request(&self, id: &RequestId) -> bool {
        let removed = lock(&self.in_flight).remove(id);
        removed.map(|entry| entry.token.cancel()).is_some()
    }

    // -----------------------------------------------------------------------------------------
    // Server→client requests

    /// The id of the next server→client request. Integers counting from 1 per session; the
    /// client's ids are another namespace (JSON-RPC ids are per direction).
    pub(crate) fn next_request_id(&self) -> RequestId {
        RequestId::from(self.next_outgoing_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers a server→client request before it is sent, so an instant answer is not
    /// missed. The guard unregisters it when the waiter gives up.
    pub(crate) fn expect_response(
        self: &Arc<Self>,
        id: RequestId,
    ) -> (PendingGuard, oneshot::Receiver<Response>) {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        let guard = PendingGuard {
            runtime: Arc::clone(self),
            id,
        };
        (guard, rx)
    }

    /// A response the client POSTed: hands it to the waiting server→client request. Responses
    /// nobody waits for (late, unknown, id-less) are dropped.
    pub(crate) fn deliver_response(&self, response: Response) -> bool {
        let Some(id) = response.id() else {
            return false;
        };
        let waiter = lock(&self.pending).remove(id);
        waiter.is_some_and(|tx| tx.send(response).is_ok())
    }

    // -----------------------------------------------------------------------------------------
    // Connections

    /// Registers a new connection writing `stream`, closing the previous one if any
    /// (docs/CONTRACTS.md#second-get: a second GET for a stream with a live connection replaces
    /// it).
    pub(crate) fn connect(self: &Arc<Self>, stream: StreamId) -> ConnectionGuard {
        let generation = self.generation();
        let token = self.closed.child_token();
        let close = Arc::new(CloseRequest::default());
        let previous = lock(&self.connections).insert(
            stream,
            Connection {
                generation,
                token: token.clone(),
                close: Arc::clone(&close),
            },
        );
        if let Some(previous) = previous {
            tracing::debug!(session = %self.record.id, stream = %stream, "connection replaced");
            previous.token.cancel();
        }
        ConnectionGuard {
            runtime: Arc::clone(self),
            stream,
            generation,
            token,
            close,
        }
    }

    /// Asks the connection currently writing `stream`, if any, to close after a `retry` field
    /// without ending the stream (SEP-1699 polling). Returns whether a connection was open.
    pub(crate) fn request_close(&self, stream: StreamId, retry: Option<Duration>) -> bool {
        let connections = lock(&self.connections);
        let Some(connection) = connections.get(&stream) else {
            return false;
        };
        *lock(&connection.close.retry) = retry;
        connection.close.token.cancel();
        true
    }

    pub(crate) fn standalone_cursor(&self) -> u64 {
        self.standalone_cursor.load(Ordering::Acquire)
    }

    pub(crate) fn advance_standalone_cursor(&self, seq: u64) {
        self.standalone_cursor.fetch_max(seq, Ordering::AcqRel);
    }
}

/// A reserved in-flight request; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct InFlightSlot {
    runtime: Arc<SessionRuntime>,
    id: RequestId,
    generation: u64,
    token: CancellationToken,
}

impl InFlightSlot {
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.runtime.in_flight);
        // Only our own entry: the id may have been cancelled and reused since.
        if in_flight
            .get(&self.id)
            .is_some_and(|entry| entry.generation == self.generation)
        {
            in_flight.remove(&self.id);
        }
    }
}

/// Unregisters a server→client request when its waiter is dropped.
#[derive(Debug)]
pub(crate) struct PendingGuard {
    runtime: Arc<SessionRuntime>,
    id: RequestId,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        lock(&self.runtime.pending).remove(&self.id);
    }
}

/// One open connection writing a stream; dropping it (the body ended or the client left)
/// unregisters it.
#[derive(Debug)]
pub(crate) struct ConnectionGuard {
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    generation: u64,
    token: CancellationToken,
    close: Arc<CloseRequest>,
}

impl ConnectionGuard {
    /// Cancelled when the connection is replaced or the session ends.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Cancelled when a handler asks this connection to close (SEP-1699 polling).
    pub(crate) fn close_requested(&self) -> &CancellationToken {
        &self.close.token
    }

    /// The `retry` the close request asked for (`None`: the configured one).
    pub(crate) fn close_retry(&self) -> Option<Duration> {
        *lock(&self.close.retry)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut connections = lock(&self.runtime.connections);
        if connections
            .get(&self.stream)
            .is_some_and(|c| c.generation == self.generation)
        {
            connections.remove(&self.stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryEventStore;
    use tether_proto::ids::SessionId;

    fn runtime(max_event_bytes: usize) -> Arc<SessionRuntime> {
        let record = SessionRecord {
            id: SessionId::generate(),
            version: ProtocolVersion::V2025_11_25,
            principal: Arc::from("alice"),
            standalone: StreamId::generate(),
            client: None,
        };
        SessionRuntime::new(
            record,
            Arc::new(MemoryEventStore::default()),
            max_event_bytes,
        )
    }

    fn ids(ids: &[i64]) -> Vec<RequestId> {
        ids.iter().copied().map(RequestId::from).collect()
    }

    #[test]
    fn slots_are_reserved_all_or_none_and_an_id_in_flight_is_refused() {
        let session = runtime(1024);
        assert!(
            session.reserve(&ids(&[1, 2, 3]), 2).is_none(),
            "three do not fit in two"
        );
        assert!(!session.is_busy(), "a refused reservation holds nothing");
        let slots = session.reserve(&ids(&[1, 2]), 2).expect("two fit");
        assert!(slots.iter().all(Result::is_ok));
        assert!(session.is_busy());
        assert!(
            session.reserve(&ids(&[3]), 2).is_none(),
            "the session is full"
        );
        drop(slots);
        assert!(!session.is_busy(), "dropping the slots frees them");
        let first = session.reserve(&ids(&[7]), 4).expect("room");
        let again = session.reserve(&ids(&[7]), 4).expect("room");
        assert!(first[0].is_ok());
        assert!(
            again[0].is_err(),
            "an id already in flight is not run twice"
        );
    }

    #[test]
    fn cancelling_a_request_fires_its_token_once_and_frees_the_id() {
        let session = runtime(1024);
        let slots = session.reserve(&ids(&[5]), 4).expect("room");
        let slot = slots.into_iter().next().unwrap().expect("a slot");
        assert!(session.cancel_request(&RequestId::from(5_i64)));
        assert!(slot.token().is_cancelled());
        assert!(
            !session.cancel_request(&RequestId::from(5_i64)),
            "already gone"
        );
        // The id may be used again at once; the old slot's drop must not free the new one.
        let reused = session.reserve(&ids(&[5]), 4).expect("room");
        drop(slot);
        assert!(session.is_busy(), "the reused id is still in flight");
        drop(reused);
        assert!(!session.is_busy());
    }

    #[test]
    fn a_request_sent_again_finds_its_stream_only_with_the_same_content() {
        let session = runtime(1024);
        let stream = StreamId::generate();
        session.remember_request(&RequestId::from(1_i64), 42, stream);
        assert_eq!(
            session.stream_of_request(&RequestId::from(1_i64), 42),
            Some(stream)
        );
        assert_eq!(session.stream_of_request(&RequestId::from(1_i64), 43), None);
        assert_eq!(session.stream_of_request(&RequestId::from(2_i64), 42), None);
    }

    #[test]
    fn a_second_connection_replaces_the_first_and_close_requests_reach_the_current_one() {
        let session = runtime(1024);
        let stream = StreamId::generate();
        let first = session.connect(stream);
        let second = session.connect(stream);
        assert!(
            first.token().is_cancelled(),
            "the older connection is told to end"
        );
        assert!(!second.token().is_cancelled());
        let retry = Some(Duration::from_millis(250));
        assert!(session.request_close(stream, retry));
        assert!(second.close_requested().is_cancelled());
        assert_eq!(second.close_retry(), retry);
        // The replaced connection ending must not unregister its successor.
        drop(first);
        assert!(session.is_busy());
        drop(second);
        assert!(!session.is_busy());
        assert!(
            !session.request_close(stream, None),
            "no connection is open"
        );
    }

    #[tokio::test]
    async fn a_client_answer_reaches_the_waiting_request_and_closing_fails_the_rest() {
        let session = runtime(1024);
        let id = session.next_request_id();
        let (_guard, answer) = session.expect_response(id.clone());
        let response = Response::success(id, serde_json::json!({"ok": true}));
        assert!(session.deliver_response(response.clone()));
        assert_eq!(answer.await.expect("delivered"), response);
        assert!(
            !session.deliver_response(response),
            "a second answer to the same id is dropped"
        );
        let other = session.next_request_id();
        let (_guard, waiting) = session.expect_response(other);
        let slots = session.reserve(&ids(&[9]), 4).expect("room");
        session.close();
        assert!(
            waiting.await.is_err(),
            "closing the session fails what waits"
        );
        assert!(slots[0].as_ref().unwrap().token().is_cancelled());
        assert!(session.is_closed());
    }

    #[test]
    fn an_answer_too_large_for_one_event_becomes_an_error_saying_so() {
        let session = runtime(64);
        let big = Response::success(
            RequestId::from(1_i64),
            serde_json::json!({"text": "x".repeat(100)}),
        );
        let bytes = session.response_bytes(&big);
        let sent: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(sent["id"], 1);
        assert_eq!(sent["error"]["code"], INTERNAL_ERROR);
        assert_eq!(sent["error"]["data"]["reason"], "too_large");
        assert_eq!(sent["error"]["data"]["limit"], 64);
        let small = Response::success(RequestId::from(2_i64), serde_json::json!({}));
        assert_eq!(session.response_bytes(&small), small.to_vec());
    }

    #[test]
    fn the_standalone_cursor_only_moves_forward() {
        let session = runtime(1024);
        session.advance_standalone_cursor(5);
        session.advance_standalone_cursor(3);
        assert_eq!(session.standalone_cursor(), 5);
        session.set_log_level(LogLevel::Warning);
        assert_eq!(session.log_level(), LogLevel::Warning);
    }
}
