//! The Redis backend: events and sessions in one Redis, shared by every node that opens it
//! with the same key prefix, and surviving a restart of any of them.
//!
//! It owns the key layout, the Lua scripts that make each check-and-write atomic across nodes
//! (`scripts.rs` over `prelude.lua`), retention, caps and tombstones with exactly the
//! semantics of [`MemoryEventStore`] and the SQLite store, and the cross-node wake-ups of
//! [`EventStore::wait_for_more`](crate::store::EventStore::wait_for_more) (`wake.rs`: one pub/sub subscriber per store). It does not
//! own Redis's own durability (configure `appendonly` for that) or Redis Cluster: scripts
//! reach keys they derive from the prefix, which needs one Redis (a primary, with replicas
//! if wanted). Redis must not evict these keys on its own (`maxmemory-policy noeviction`,
//! the default): the per-session caps bound what each session keeps, and a key evicted
//! behind the store's back would be a silent gap.
//!
//! # Keys (each starts with [`RedisStoreConfig::key_prefix`], written `P` here)
//!
//! - `Ps:<stream>`: hash of a stream's owner (`p`, `sess`), `kind` (`r`equest or
//!   `s`tandalone), `req` (the JSON array of request ids), `node` (the node responsible
//!   for it: its creator, or the node that claimed it as an orphan), `done` and `at`
//!   (completion, ms on Redis's clock), `first` (oldest seq stored), `next` (next seq), `ev`
//!   and `by` (events and frame bytes stored).
//! - `Pe:<stream>`: a Redis Stream of the SSE frames in chunks (`store/chunk.rs`): entry id
//!   `1-<first seq>`, fields `n` (its event count) and `c` (the chunk); an entry written
//!   before chunks holds one frame in field `f`. Frames are built by `store/frame.rs`,
//!   exactly as the other backends build them; the frames of one stream appended in one
//!   script call share chunks, so Redis stores an entry per chunk, not per event.
//! - `Pu:<session>` (usage counters), `Pss:<session>` (its streams), `Pc:<session>`
//!   (completed streams, oldest completion first), `Pa:<session>` (`<stream> <first seq>
//!   <last seq> <frame lengths>` per chunk in append order, for evicting the oldest live
//!   event), `Pts:<session>` (its tombstones).
//! - `Ptomb` (stream → `<session> <principal>` of removed streams) and `Ptomb_order`
//!   (oldest first, bounded by [`StoreLimits::max_tombstones`](crate::store::StoreLimits::max_tombstones)).
//! - `Pdue`: sessions by the completion time of their oldest completed stream, for the
//!   background retention sweep of sessions nobody touches.
//! - `Po:<node>`: the incomplete Request streams each node is responsible for (created, or
//!   claimed as orphans; the stream's `node` field names the same node), for
//!   [`EventStore::orphaned_streams`](crate::store::EventStore::orphaned_streams).
//! - `Pnode:<node>`: a node's heartbeat, a key that expires after
//!   [`RedisStoreConfig::node_lease`]; `Pnodes`: the set of nodes that may hold open
//!   streams (every node with a lease or a non-empty `Po:<node>`).
//! - `Psess:<id>` (session records), `Pseen` (sessions by last activity, ms) and
//!   `Pps:<principal>` (the ids of a principal's sessions, for its session limit).
//! - Channel `Pwake`: the id of every stream that changed.
//!
//! # Appends
//!
//! A frame carries its seq, and frames are built in Rust, so an append builds the frame for
//! the seq it expects (the last one it saw for that stream, plus one) and the script stores
//! it only if that is still the stream's next seq; otherwise it answers the right seq and the
//! append builds the frame again. One writer per stream (the usual case) needs one round
//! trip; concurrent writers on several nodes stay gap-free and retry at most once per event
//! another writer stored in between.
//!
//! # Orphans
//!
//! Every Request stream is some node's responsibility: the node that created it, until it
//! completes. An open store holds a lease for its [`RedisStoreConfig::node_id`]: a heartbeat
//! key that expires after [`RedisStoreConfig::node_lease`], renewed every third of it by a
//! background task. Dropping the store stops the renewal but leaves the key to expire, since
//! a crashed node cannot delete it either; the other nodes treat both alike.
//!
//! [`EventStore::orphaned_streams`](crate::store::EventStore::orphaned_streams) reports two kinds of stream:
//!
//! - What an earlier process under this node id left incomplete, collected when the store
//!   opens (in the same script that takes the lease, so no other node can claim them
//!   meanwhile), reported by the first call: a restarted node answers what it left.
//! - The incomplete Request streams of every other node whose lease has lapsed, claimed by
//!   one script per call. Redis runs it atomically, so when several live nodes ask at once
//!   each orphan goes to exactly one of them. A claimed stream moves to the claimer's
//!   `Po:<node>` and names the claimer as its node: completing it clears it there, and if
//!   the claimer dies before answering it, a third node claims it after the claimer's lease.
//!   The dead node is forgotten once its set is empty.
//!
//! A live node's streams are never reported, except that a node cut off from Redis (or
//! stalled) for longer than its lease is taken for dead: its running requests are then
//! answered with errors by another node, and its own later appends to them fail with
//! [`StoreError::Completed`](crate::store::StoreError::Completed). That is the price of answering a dead node's clients at all;
//! the lease sets how long a stall it tolerates.
//!
//! [`MemoryEventStore`]: super::memory::MemoryEventStore

mod backend;
mod background;
mod config;
mod events;
mod relay;
mod relay_channel;
mod reply;
mod scripts;
mod sessions;
mod tasks;
mod wake;

pub use config::{RedisOpenError, RedisStoreConfig};
pub use events::RedisEventStore;
pub use sessions::RedisSessionStore;
pub use tasks::RedisTaskStore;

use crate::lock as guard;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio_util::sync::CancellationToken;

use self::backend::{Inner, Scripts};
use self::background::{Heard, commit_loop, heartbeat_loop, sweep_loop};
use self::config::MIN_NODE_LEASE;
pub use self::relay::RedisRelay;
use self::relay_channel::RelayState;
use self::reply::orphans_in;
use self::wake::Watchers;
use crate::store::pipeline::Pipeline;
/// Opens a Redis store: connects, subscribes to the wake-up channel, takes this node's lease
/// and collects the Request streams an earlier process of this node left incomplete, and
/// starts the background heartbeat and retention sweep. Returns its event store and session
/// store, which share the connection.
///
/// # Errors
///
/// [`RedisOpenError::InvalidUrl`] for a URL that is not Redis's,
/// [`RedisOpenError::Connect`] when Redis cannot be reached within
/// [`RedisStoreConfig::command_timeout`], [`RedisOpenError::InvalidNodeId`].
pub async fn open(
    config: RedisStoreConfig,
) -> Result<(RedisEventStore, RedisSessionStore), RedisOpenError> {
    let mut config = config;
    config.limits = config.limits.normalized();
    config.node_lease = config.node_lease.max(MIN_NODE_LEASE);
    if config.node_id.is_empty() || config.node_id.contains(char::is_whitespace) {
        return Err(RedisOpenError::InvalidNodeId(config.node_id));
    }
    let url = config.url.clone();
    let connect_error = |reason: String| RedisOpenError::Connect {
        url: url.clone(),
        reason,
    };
    let client =
        redis::Client::open(config.url.as_str()).map_err(|error| RedisOpenError::InvalidUrl {
            url: url.clone(),
            reason: error.to_string(),
        })?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.command_timeout))
        .set_response_timeout(Some(config.command_timeout))
        // Fail fast while Redis is down: each command that finds the connection broken
        // starts one reconnection and fails; the next command tries again.
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    let conn = tokio::time::timeout(
        config.command_timeout,
        ConnectionManager::new_with_config(client.clone(), manager_config),
    )
    .await
    .map_err(|_| connect_error(format!("no answer within {:?}", config.command_timeout)))?
    .map_err(|error| connect_error(error.to_string()))?;

    let wake_channel = format!("{}wake", config.key_prefix);
    let channels = vec![
        wake_channel.clone(),
        relay_channel::channel(&config.key_prefix, &config.node_id),
    ];
    let pubsub = wake::subscribe(&client, &channels, config.command_timeout)
        .await
        .map_err(connect_error)?;
    let watchers = Arc::new(Watchers::default());
    let relay = Arc::new(RelayState::new(
        config.node_id.clone(),
        config.key_prefix.clone(),
        conn.clone(),
        config.command_timeout,
    ));
    let cancel = CancellationToken::new();
    tokio::spawn(wake::run_subscriber(
        client,
        channels,
        pubsub,
        Arc::new(Heard {
            wake_channel,
            watchers: Arc::clone(&watchers),
            relay: Arc::clone(&relay),
        }),
        config.command_timeout,
        cancel.clone(),
    ));

    let (commits, queued) = tokio::sync::mpsc::unbounded_channel();
    let inner = Arc::new(Inner {
        config,
        conn,
        scripts: Scripts::new(),
        watchers,
        relay,
        next_seqs: Mutex::default(),
        orphans: Mutex::default(),
        pipeline: Pipeline::default(),
        commits,
        _stop: cancel.clone().drop_guard(),
    });
    tokio::spawn(commit_loop(Arc::downgrade(&inner), queued));
    let reply = inner
        .run(
            &inner.scripts.node_open,
            &[&inner.config.node_id, &inner.lease_ms()],
        )
        .await
        .map_err(|error| connect_error(error.to_string()))?;
    *guard(&inner.orphans) = orphans_in(reply).map_err(|error| connect_error(error.to_string()))?;
    tokio::spawn(heartbeat_loop(Arc::downgrade(&inner), cancel.clone()));
    tokio::spawn(sweep_loop(Arc::downgrade(&inner), cancel));
    Ok((
        RedisEventStore {
            inner: Arc::clone(&inner),
        },
        RedisSessionStore { inner },
    ))
}
