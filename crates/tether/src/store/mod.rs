//! Event and session stores: the single source of truth for everything a server sends.
//!
//! The server never writes a JSON-RPC message to a connection directly: it appends the message
//! to its stream in the [`EventStore`], and one writer loop per connection reads the stream
//! after its cursor and writes what it finds. First delivery and resume are the same loop, so
//! there is no replay-to-live hand-off to get wrong (docs/DESIGN.md#data-flow).
//!
//! This module owns the two traits, their shared types and the invariants every backend must
//! keep; [`Stores`] opens a backend as the bundle a server runs on, with one [`StoreLimits`];
//! [`memory`] is the in-process backend, `sqlite` and `redis` (features) the durable ones. It
//! does not own HTTP, SSE connections or the
//! routing of messages to streams (that is the server's).
//!
//! # Invariants of an [`EventStore`]
//!
//! 1. A stream's events have sequence numbers 0, 1, 2, … with no gap; seq 0 is the stream's
//!    priming event (empty data, the server's `retry`), stored when the stream is created.
//! 2. Persist, then send: a reader sees an event only once it is durable (committed, for a
//!    durable backend), and [`wait_for_more`](EventStore::wait_for_more) wakes only then.
//!    [`append`](EventStore::append) may return as soon as the event is queued, in order,
//!    for commit (durable backends pipeline their commits: `store/pipeline.rs`);
//!    [`flush`](EventStore::flush) returns once every event appended to the stream so far
//!    is durable, and [`complete`](EventStore::complete) once the completion and everything
//!    before it are. A commit that fails is reported to the stream's next append, flush or
//!    complete with [`StoreError::Unavailable`].
//! 3. [`read_after`](EventStore::read_after) returns events of exactly one stream, in order,
//!    starting at `after + 1`, and only to the stream's owner: a stream that exists but is
//!    owned by another principal or session is reported as [`StoreError::UnknownStream`], so
//!    no answer reveals that it exists (docs/CONTRACTS.md#last-event-id-row).
//! 4. Events a reader may still ask for are never dropped silently: if `after + 1` is no
//!    longer stored (evicted by a cap, or the stream's retention ran out), the read fails with
//!    [`StoreError::Expired`].
//! 5. [`wait_for_more`](EventStore::wait_for_more) is race-free: it returns at once if the
//!    stream already has an event after `after`, or is complete, or is gone.
//! 6. Retained data per session is bounded by the store's configured caps; when an append
//!    would exceed them the store evicts the session's oldest events (completed streams first)
//!    and readers that still needed them get `Expired`.

#[cfg(any(feature = "sqlite", feature = "redis"))]
mod chunk;
mod frame;
mod limits;
pub mod memory;
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) mod pipeline;
#[cfg(feature = "redis")]
pub mod redis;
pub mod relay;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod stores;
#[cfg(any(test, feature = "testing"))]
pub mod suite;
pub mod tasks;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;

#[cfg(feature = "redis")]
pub use self::redis::{
    RedisEventStore, RedisOpenError, RedisRelay, RedisSessionStore, RedisStoreConfig,
    RedisTaskStore,
};
pub use limits::StoreLimits;
pub use memory::{MemoryEventStore, MemorySessionStore};
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub use pipeline::{QUEUED_BYTES as PIPELINE_QUEUED_BYTES, WINDOW as PIPELINE_WINDOW};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    Durability, SqliteEventStore, SqliteOpenError, SqliteSessionStore, SqliteStoreConfig,
    SqliteTaskStore,
};
pub(crate) use stores::StartTasks;
pub use stores::Stores;
pub use tasks::{MemoryTaskStore, TaskChange, TaskRecord, TaskStatus, TaskStore};

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

/// Why a store operation failed. The server maps each to its status in one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No such stream for this owner (never existed, belongs to someone else, or its session
    /// is gone).
    #[error("unknown stream")]
    UnknownStream,
    /// The events after the cursor are no longer stored (evicted or past retention).
    #[error("events expired")]
    Expired,
    /// Appending to a stream that was already completed.
    #[error("stream already complete")]
    Completed,
    /// The session already holds its maximum number of streams.
    #[error("too many streams in this session")]
    TooManyStreams,
    /// The message cannot be stored as one SSE `data` line: it is empty, not UTF-8, or
    /// contains CR or LF (which would split it into several lines). The reason says which.
    #[error("invalid message: {0}")]
    InvalidMessage(&'static str),
    /// The event's frame alone is larger than the store's per-session byte cap, so storing it
    /// would break the bound however much else were evicted.
    #[error("event larger than the session byte cap")]
    EventTooLarge,
    /// The backend failed (I/O, connection); the failure says how, and keeps the backend's
    /// own error as its source.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] StoreFailure),
}

/// Why a backend failed: the backend's own error (a `rusqlite::Error`, a `redis::RedisError`,
/// an I/O error), kept whole so that its source chain and type survive, or a message where
/// there is no error value (a thread that stopped, a timeout). Cheap to clone; two failures
/// are equal when they say the same thing.
#[derive(Clone)]
pub struct StoreFailure(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl StoreFailure {
    /// A failure caused by `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// A failure described by `message` alone.
    pub fn msg(message: impl Into<String>) -> Self {
        Self(Arc::new(Message(message.into())))
    }

    /// The backend's error, for downcasting (for example to `rusqlite::Error`).
    #[must_use]
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

/// A failure without an error value.
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

impl std::fmt::Debug for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// The backend error's own message; its causes follow through `source`.
impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for StoreFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for StoreFailure {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for StoreFailure {}

impl From<&str> for StoreFailure {
    fn from(message: &str) -> Self {
        Self::msg(message)
    }
}

impl From<String> for StoreFailure {
    fn from(message: String) -> Self {
        Self::msg(message)
    }
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

/// A session as the server remembers it between requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id issued on the initialize response.
    pub id: SessionId,
    /// The protocol version negotiated at initialize; it decides every version-dependent
    /// behaviour for the session's lifetime (docs/CONTRACTS.md#negotiated-version).
    pub version: tether_proto::version::ProtocolVersion,
    /// The principal that created the session; requests by any other principal get 404.
    pub principal: Arc<str>,
    /// The session's standalone (GET) stream, created with the session.
    pub standalone: StreamId,
    /// What the client said of itself at `initialize`: an object with its `clientInfo` and
    /// `capabilities` as sent (docs/CONTRACTS.md#session-client). Kept so that a handler
    /// that must start a server for the session again (the rmcp adapter after a restart)
    /// can give it the client's own handshake; `None` where the client sent neither, where
    /// they did not fit in [`MAX_SESSION_CLIENT_BYTES`], for 2026-07-28 requests, and for
    /// records stored before it was kept.
    pub client: Option<Arc<serde_json::Value>>,
}

/// The most JSON a session's [`SessionRecord::client`] may take; a client that said more
/// of itself has its session served all the same, without it.
pub const MAX_SESSION_CLIENT_BYTES: usize = 16 * 1024;

/// Where sessions live: in memory, or in the durable stores, so that sessions
/// survive a restart (SQLite) or are shared by nodes (Redis).
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Stores a new session record.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError>;
    /// Looks a session up; `None` if unknown, expired or deleted.
    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;
    /// Records activity, pushing back idle expiry.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError>;
    /// Removes a session; returns whether it existed.
    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError>;
    /// Removes and returns the sessions idle for longer than `idle`.
    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError>;
    /// How many sessions are live.
    async fn count(&self) -> Result<usize, StoreError>;
    /// Live sessions of `principal` (for the per-principal session limit).
    async fn count_for(&self, principal: &str) -> Result<usize, StoreError>;

    /// The server's sealing key: 32 random bytes made once and then kept by the store, so
    /// that every node sharing it, and the same node after a restart, seals and opens the
    /// 2026-07-28 era's `requestState` with the same key (`server::mrtr`). By default a key
    /// made once per process: right for a store that lives in one process, wrong for a shared
    /// or durable one, which overrides this.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        Ok(*process_sealing_key())
    }
}

/// The key [`SessionStore::sealing_key`] defaults to: random, made on first use, the same for
/// the rest of the process.
fn process_sealing_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0; 32];
        getrandom::fill(&mut key).expect("the operating system's CSPRNG is available");
        key
    })
}
