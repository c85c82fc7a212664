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
mod error;
mod event_store;
mod frame;
mod limits;
mod map;
pub mod memory;
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) mod pipeline;
#[cfg(feature = "redis")]
pub mod redis;
pub mod relay;
mod session_store;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod stores;
#[cfg(any(test, feature = "testing"))]
pub mod suite;
pub mod tasks;

#[cfg(feature = "redis")]
pub use self::redis::{
    RedisEventStore, RedisOpenError, RedisRelay, RedisSessionStore, RedisStoreConfig,
    RedisTaskStore,
};
pub use error::{StoreError, StoreFailure};
pub use event_store::{
    ANONYMOUS_PRINCIPAL, EventStore, OrphanedStream, ReadBatch, SessionUsage, StoredEvent,
    StreamKind, StreamOwner,
};
pub use limits::StoreLimits;
pub use memory::{MemoryEventStore, MemorySessionStore};
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub use pipeline::{QUEUED_BYTES as PIPELINE_QUEUED_BYTES, WINDOW as PIPELINE_WINDOW};
pub use session_store::{MAX_SESSION_CLIENT_BYTES, SessionRecord, SessionStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    Durability, SqliteEventStore, SqliteOpenError, SqliteSessionStore, SqliteStoreConfig,
    SqliteTaskStore,
};
#[cfg(feature = "server")]
pub(crate) use stores::StartTasks;
pub use stores::Stores;
pub use tasks::{MemoryTaskStore, TaskChange, TaskRecord, TaskStatus, TaskStore};
