//! The bounds every store keeps: per-session caps on events, bytes and streams, how long
//! completed streams stay readable, and how many removed stream ids are remembered.
//!
//! One [`StoreLimits`] serves every backend, so the same flag means the same thing whichever
//! store a server runs on. Enforcing the limits is each backend's.

use std::time::Duration;

/// What a store retains, and for how long: the same bounds for every backend (memory, SQLite,
/// Redis), set once by [`Stores`](super::stores::Stores) or a backend's configuration. Every field
/// has a named default; see each constant for why that value. `#[non_exhaustive]`: start
/// from [`StoreLimits::default`] and set the fields you need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreLimits {
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
    /// [`StoreError::EventTooLarge`]: crate::store::error::StoreError::EventTooLarge
    pub max_bytes_per_session: usize,
    /// Most streams (live or retained after completion) one session holds. When a new stream
    /// would exceed it, the session's oldest completed stream is evicted; only when every
    /// stream is live does creation fail ([`StoreError::TooManyStreams`]). Values below 1 act
    /// as 1.
    ///
    /// [`StoreError::TooManyStreams`]: crate::store::error::StoreError::TooManyStreams
    pub max_streams_per_session: usize,
    /// How many removed (expired or evicted) stream ids the store remembers, store-wide, so
    /// that reading one reports `Expired` rather than `UnknownStream`. The oldest are
    /// forgotten first; 0 remembers none.
    pub max_tombstones: usize,
}

impl StoreLimits {
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

impl Default for StoreLimits {
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

impl StoreLimits {
    /// The limits as a store applies them: the per-session caps below 1 act as 1.
    pub(crate) fn normalized(&self) -> Self {
        Self {
            max_events_per_session: self.max_events_per_session.max(1),
            max_bytes_per_session: self.max_bytes_per_session.max(1),
            max_streams_per_session: self.max_streams_per_session.max(1),
            ..self.clone()
        }
    }
}
