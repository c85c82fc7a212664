//! How the SQLite store writes its values: times as milliseconds, stream kinds as integers,
//! and a SQLite failure as the [`StoreError`] the store reports.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::error::{StoreError, StoreFailure};

/// Milliseconds since the Unix epoch: retention and idle expiry survive restarts.
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(super) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A backend error as the store reports it, its source kept.
pub(super) fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(StoreFailure::new(error))
}

/// A failure without an error value, as the store reports it.
pub(super) fn unavailable_because(reason: impl Into<String>) -> StoreError {
    StoreError::Unavailable(StoreFailure::msg(reason))
}

/// `streams.kind` of a Request stream.
pub(super) const REQUEST_KIND: i64 = 0;

/// `streams.kind` of a standalone stream.
pub(super) const STANDALONE_KIND: i64 = 1;
