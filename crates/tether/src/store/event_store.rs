//! The event log's contract: the [`EventStore`] trait every backend implements (its
//! invariants are the `store` module's docs) and the records it trades in: who owns a stream,
//! what it carries, a stored event, a read batch, a session's usage, an orphaned stream.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;

use super::error::StoreError;
use super::frame;

/// The principal of requests made without authentication.
pub const ANONYMOUS_PRINCIPAL: &str = "default";

/// Who owns a stream. Replay is keyed by owner and stream, so knowing another session's event
/// id gives nothing (docs/DESIGN.md#property-3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamOwner {
    /// The authenticated principal ([`ANONYMOUS_PRINCIPAL`] without authentication).
    pub principal: Arc<str>,
    /// The session the stream belongs to.
    pub session: SessionId,
}

/// What a stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// The SSE response to one POSTed request: ends after the request's final response.
    Request,
    /// The session's standalone stream, opened by GET: never completes while the session lives.
    Standalone,
}

/// One stored event: its id and its SSE frame, encoded once at append so that replays do not
/// re-serialize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event's id (`<stream>:<seq>`).
    pub id: EventId,
    /// The complete SSE frame: `event: message`, `id`, `data` and the blank line; for the
    /// priming event (seq 0), `id`, `retry` and an empty `data`.
    pub frame: Bytes,
    /// Where the message starts in `frame`. An offset rather than a second `Bytes`: every
    /// read hands out events, and most readers (the writers) want only the frame.
    message_at: usize,
}

impl StoredEvent {
    /// An event read from a store; `frame` was built by `store::frame`. `message_at` is where
    /// its `data` value starts, when the store knows it; else it is found in the frame.
    pub(crate) fn new(id: EventId, frame: Bytes, message_at: Option<usize>) -> Self {
        let message_at = message_at.unwrap_or_else(|| frame::message_start(&frame));
        Self {
            id,
            frame,
            message_at,
        }
    }

    /// The JSON-RPC message (a view of `frame`, no copy); empty for the priming event.
    #[must_use]
    pub fn message(&self) -> &[u8] {
        let end = self.frame.len().saturating_sub(2);
        &self.frame[self.message_at.min(end)..end]
    }

    /// Whether this is the stream's priming event (seq 0, empty data).
    #[must_use]
    pub fn is_priming(&self) -> bool {
        self.id.seq == EventId::PRIMING_SEQ
    }
}

/// A Request stream whose producer is gone: the process running its requests' handlers died
/// before completing it (see [`EventStore::orphaned_streams`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanedStream {
    /// Who owns the stream.
    pub owner: StreamOwner,
    /// The stream.
    pub stream: StreamId,
    /// The ids of the requests the stream was created to answer (some may already have their
    /// response stored).
    pub requests: Vec<RequestId>,
}

/// What [`EventStore::read_after`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadBatch {
    /// The events after the cursor, in order (possibly none).
    pub events: Vec<StoredEvent>,
    /// The stream is complete and `events` reaches its last event: a writer can end the
    /// response after writing them.
    pub complete: bool,
}

/// What one session retains, for the accounting that keeps memory bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionUsage {
    /// Streams held (live or retained after completion).
    pub streams: usize,
    /// Events held, priming events included.
    pub events: usize,
    /// Bytes of stored frames.
    pub bytes: usize,
}

/// The event log behind every server→client stream. See the module docs for the invariants
/// every implementation keeps; the behaviour suite checks them.
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Creates a stream owned by `owner` and stores its priming event (seq 0) carrying
    /// `retry`. Returns the new stream's id (128 random bits).
    ///
    /// `requests` are the ids of the requests whose responses the stream will carry (empty
    /// for the standalone stream). A durable store keeps them with the stream, so that after
    /// a crash the requests left unanswered can be named ([`orphaned_streams`]).
    ///
    /// [`orphaned_streams`]: EventStore::orphaned_streams
    async fn create_stream(
        &self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: Duration,
        requests: &[RequestId],
    ) -> Result<StreamId, StoreError>;

    /// Appends one JSON-RPC message (compact JSON, no line breaks) to `stream` and returns
    /// the id it is stored under. A durable store may return once the event is queued for
    /// commit, in order, waiting only while the stream's window of uncommitted events or the
    /// store's queue is full; readers see the event once it is committed (invariant 2).
    ///
    /// # Errors
    ///
    /// Besides this message's own refusal, [`StoreError::Unavailable`] when an earlier
    /// append to the stream failed to commit (its events since the last successful answer
    /// may be lost).
    async fn append(&self, stream: StreamId, message: &[u8]) -> Result<EventId, StoreError>;

    /// Waits until every event appended to `stream` so far is durable, and reports a commit
    /// failure of any of them. A caller that must not lose an event (a request's final
    /// response) flushes after appending it and appends again on
    /// [`StoreError::Unavailable`]. Stores whose appends are durable when they return answer
    /// at once, which is the default.
    async fn flush(&self, stream: StreamId) -> Result<(), StoreError> {
        let _ = stream;
        Ok(())
    }

    /// Marks `stream` complete: no more appends; readers that reach the end stop. Its events
    /// stay readable for the store's retention window. Returns once the completion and every
    /// event before it are durable.
    async fn complete(&self, stream: StreamId) -> Result<(), StoreError>;

    /// Reads up to `limit` events of `stream` with seq > `after`, for `owner` only.
    async fn read_after(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        after: u64,
        limit: usize,
    ) -> Result<ReadBatch, StoreError>;

    /// Reads up to `limit` events of `stream` from its first event on (seq 0, the priming
    /// event, while it is retained), for `owner` only: what a connection writes first on a
    /// stream nobody has read yet. `read_after` cannot express this cursor, since seq 0 is
    /// itself an event; errors are as for `read_after` from "before seq 0".
    async fn read_from_start(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        limit: usize,
    ) -> Result<ReadBatch, StoreError>;

    /// Waits until `stream` has an event with seq > `after`, is complete, or is gone.
    /// Cancel-safe: dropping the future loses nothing.
    async fn wait_for_more(&self, stream: StreamId, after: u64) -> Result<(), StoreError>;

    /// Drops everything of `session` (DELETE, expiry). Later reads report `UnknownStream`.
    async fn remove_session(&self, session: &SessionId) -> Result<(), StoreError>;

    /// What `session` currently retains.
    async fn usage(&self, session: &SessionId) -> Result<SessionUsage, StoreError>;

    /// The Request streams whose producer is gone, each reported once (to one caller, even
    /// when several nodes share the store), with the request ids given to
    /// [`create_stream`](EventStore::create_stream). Nothing will ever complete them (their
    /// handlers died with their process), so the server answers their unanswered requests
    /// with errors and completes them: a resuming client gets an answer instead of waiting
    /// forever. The server asks before serving and then periodically.
    ///
    /// A store that does not outlive its process has none; a store open in one process
    /// reports what an earlier process left incomplete when it opened; a store shared by
    /// nodes also reports, once its lease has run out, what a node that died left open.
    async fn orphaned_streams(&self) -> Result<Vec<OrphanedStream>, StoreError>;
}
