//! How a Redis store is configured ([`RedisStoreConfig`]), why opening one fails
//! ([`RedisOpenError`]), and the bounds of its background work.

use std::time::Duration;

use crate::store::limits::StoreLimits;

/// Where and how a Redis store keeps its data. The bounds are the [`StoreLimits`] every store
/// shares.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStoreConfig {
    /// The server, as `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Put before every key and the wake-up channel, so several deployments (or tests) share
    /// one Redis without seeing each other. Default [`DEFAULT_KEY_PREFIX`](Self::DEFAULT_KEY_PREFIX).
    pub key_prefix: String,
    /// This node's name, recorded with each Request stream it creates and held, while the
    /// store is open, under a lease ([`node_lease`](Self::node_lease)). The Request streams a
    /// node left incomplete are reported by [`EventStore::orphaned_streams`](crate::store::EventStore::orphaned_streams) to a store
    /// opened again under the same name, or, once the node's lease has lapsed, to exactly one
    /// of the other nodes sharing the prefix. Stable across restarts of one node, and
    /// different for every node sharing the prefix: two live nodes with one name would take
    /// each other's running requests for orphans at every restart. Non-empty, without
    /// whitespace. Default [`DEFAULT_NODE_ID`](Self::DEFAULT_NODE_ID).
    pub node_id: String,
    /// How long a node counts as alive after its last heartbeat. An open store renews its
    /// node's lease every third of this; once a node has not renewed it for this long (it
    /// died, or lost Redis for that long), the other nodes take its incomplete Request
    /// streams for orphans and answer them. Shorter answers a dead node's clients sooner;
    /// longer tolerates longer stalls. Every node sharing a prefix should use the same value.
    /// Raised to 100 ms at least. Default [`DEFAULT_NODE_LEASE`](Self::DEFAULT_NODE_LEASE).
    pub node_lease: Duration,
    /// What the store retains and for how long (see [`StoreLimits`]). Retention is measured on Redis's clock, so all nodes agree; the tombstones are shared by all nodes using the prefix.
    pub limits: StoreLimits,
    /// Longest wait for connecting and for any one command; past it the operation fails with
    /// [`StoreError::Unavailable`](crate::store::StoreError::Unavailable) rather than hang while Redis is unreachable. Default
    /// [`DEFAULT_COMMAND_TIMEOUT`](Self::DEFAULT_COMMAND_TIMEOUT).
    pub command_timeout: Duration,
}

impl RedisStoreConfig {
    /// Default [`key_prefix`](Self::key_prefix).
    pub const DEFAULT_KEY_PREFIX: &'static str = "tether:";

    /// Default [`node_id`](Self::node_id): right for a single node, which finds its own
    /// orphans after a restart; give every node of a multi-node deployment its own.
    pub const DEFAULT_NODE_ID: &'static str = "default";

    /// Default [`node_lease`](Self::node_lease): 15 s, three heartbeat periods of 5 s. Two
    /// heartbeats in a row may fail (each waits up to the default command timeout, 5 s)
    /// before a live node loses its lease, while a dead node's clients hear an answer
    /// within about 15 s plus the server's orphan sweep instead of never.
    pub const DEFAULT_NODE_LEASE: Duration = Duration::from_secs(15);

    /// Default [`command_timeout`](Self::command_timeout): 5 s. A healthy Redis answers in
    /// well under a millisecond, and even a large removal script in milliseconds; 5 s only
    /// ends waits on a Redis that is gone, soon enough for a client's request to fail cleanly
    /// instead of timing out upstream.
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

    /// The default [`StoreLimits`] and the constants above, at `url`.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            node_id: Self::DEFAULT_NODE_ID.to_owned(),
            node_lease: Self::DEFAULT_NODE_LEASE,
            limits: StoreLimits::default(),
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
        }
    }
}

/// Why a Redis store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisOpenError {
    /// The URL is not a Redis URL.
    #[error("invalid redis url {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Redis could not be reached (or refused the connection, or did not answer in time).
    #[error("cannot connect to redis at {url}: {reason}")]
    Connect {
        /// The URL given.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The node id is empty or holds whitespace, which the key layout cannot carry.
    #[error("invalid node id {0:?}: it must be non-empty, without whitespace")]
    InvalidNodeId(String),
}

/// Sessions whose expired streams one sweep removes at most, so a sweep never holds Redis
/// for long; the next sweep goes on.
pub(super) const SWEEP_LIMIT: usize = 256;

/// Longest time between two background retention sweeps (a tenth of the retention when that
/// is shorter), so idle sessions' finished streams do not outlive retention by much.
pub(super) const MAX_SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// Shortest [`RedisStoreConfig::node_lease`]: a heartbeat every third of it must still be
/// a few round trips apart.
pub(super) const MIN_NODE_LEASE: Duration = Duration::from_millis(100);

/// Orphaned streams of dead nodes one [`EventStore::orphaned_streams`](crate::store::EventStore::orphaned_streams) call claims at most, so
/// the claim never holds Redis for long; the next call claims more. (Named in the doc of
/// `orphaned_streams`.)
pub(super) const CLAIM_LIMIT: usize = 256;

/// Most streams whose next seq a store remembers for appends; past it the memory is
/// cleared (a forgotten seq costs one extra round trip on the next append).
pub(super) const SEQ_CACHE_LIMIT: usize = 65_536;
