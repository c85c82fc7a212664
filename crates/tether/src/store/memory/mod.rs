//! The in-process backend: events and sessions held in this process's memory.
//!
//! It owns the memory layout (per-stream logs of pre-encoded frames, indexed by seq), the
//! per-session caps and eviction order, retention after completion, and the tombstones that
//! let a reader of an expired stream hear `Expired` rather than `UnknownStream`. It does not
//! survive a restart or share streams between nodes; the SQLite and Redis backends do that
//! behind the same traits.
//!
//! Locking: one `std::sync::Mutex` per session holds that session's streams, so sessions never
//! wait for each other except on short map look-ups, and caps (which are per session) are
//! enforced under one lock. No lock is held across an `.await`: a waiter registers under the
//! session lock and awaits a `tokio::sync::Notify` of its stream, which an append wakes only
//! when someone registered since the last wake-up.

mod events;
mod sessions;

use crate::lock as guard;
use std::collections::HashMap;
use std::time::Duration;

pub use events::MemoryEventStore;
pub use sessions::MemorySessionStore;

/// The maps of this backend, looked up on every append and read. Keys are ids the server
/// generated (a client can only look up, never insert, one of its choosing), so the
/// default hasher's protection against chosen collisions buys nothing for its cost; foldhash
/// keeps a per-map random seed all the same.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Bounds and retention of a [`MemoryEventStore`]. Every field has a named default; see each
/// constant for why that value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// How long a completed stream's events stay readable, so a client that lost its
    /// connection before the final response can still resume and get it.
    pub retention: Duration,
    /// Most events (priming events included) one session retains across all its streams.
    /// Values below 1 act as 1.
    pub max_events_per_session: usize,
    /// Most bytes of stored frames one session retains across all its streams. A single event
    /// whose frame is larger is refused ([`StoreError::EventTooLarge`]). Values below 1 act
    /// as 1.
    ///
    /// [`StoreError::EventTooLarge`]: super::StoreError::EventTooLarge
    pub max_bytes_per_session: usize,
    /// Most streams (live or retained after completion) one session holds. When a new stream
    /// would exceed it, the session's oldest completed stream is evicted; only when every
    /// stream is live does creation fail ([`StoreError::TooManyStreams`]). Values below 1 act
    /// as 1.
    ///
    /// [`StoreError::TooManyStreams`]: super::StoreError::TooManyStreams
    pub max_streams_per_session: usize,
    /// How many removed (expired or evicted) stream ids the store remembers, store-wide, so
    /// that reading one reports `Expired` rather than `UnknownStream`. The oldest are
    /// forgotten first; 0 remembers none.
    pub max_tombstones: usize,
}

impl MemoryStoreConfig {
    /// Default [`retention`](Self::retention): 5 minutes, the window the resumability issue
    /// pins. Long enough to ride out a Wi-Fi hand-over, a laptop lid or a proxy reconnect;
    /// short enough that a busy session's finished requests do not pile up.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(5 * 60);

    /// Default [`max_events_per_session`](Self::max_events_per_session): 100 000. A tool
    /// streaming progress at 1 000 notifications a second keeps the last 100 s of them, and
    /// the bookkeeping (about 40 bytes an event beside its frame) stays near 4 MiB.
    pub const DEFAULT_MAX_EVENTS_PER_SESSION: usize = 100_000;

    /// Default [`max_bytes_per_session`](Self::max_bytes_per_session): 64 MiB. Room for a few
    /// large tool results (base64 images and files run to megabytes) plus their progress
    /// stream, while a thousand sessions at the cap still fit a server's memory; the server's
    /// session limit bounds the total.
    pub const DEFAULT_MAX_BYTES_PER_SESSION: usize = 64 * 1024 * 1024;

    /// Default [`max_streams_per_session`](Self::max_streams_per_session): 1 024. Far above
    /// the requests any real client keeps in flight at once (completed streams make room for
    /// new ones), while a stream's fixed overhead (a few hundred bytes) stays under 1 MiB a
    /// session.
    pub const DEFAULT_MAX_STREAMS_PER_SESSION: usize = 1024;

    /// Default [`max_tombstones`](Self::max_tombstones): 65 536, about 8 MiB. At 100 streams
    /// expiring a second that is 10 minutes of memory, longer than any client's reconnect
    /// backoff, so a late resume still learns its events expired.
    pub const DEFAULT_MAX_TOMBSTONES: usize = 65_536;
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            retention: Self::DEFAULT_RETENTION,
            max_events_per_session: Self::DEFAULT_MAX_EVENTS_PER_SESSION,
            max_bytes_per_session: Self::DEFAULT_MAX_BYTES_PER_SESSION,
            max_streams_per_session: Self::DEFAULT_MAX_STREAMS_PER_SESSION,
            max_tombstones: Self::DEFAULT_MAX_TOMBSTONES,
        }
    }
}
