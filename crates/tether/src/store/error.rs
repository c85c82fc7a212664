//! Why a store operation failed: [`StoreError`], which the server maps to a status in one
//! place, and [`StoreFailure`], the backend's own error kept whole beneath it.

use std::sync::Arc;

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
    #[error("store unavailable")]
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
