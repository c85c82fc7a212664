//! The Redis backend: events and sessions in one Redis, shared by every node that opens it
//! with the same key prefix, and surviving a restart of any of them.
//!
//! It owns the key layout, the Lua scripts that make each check-and-write atomic across nodes
//! (`scripts.rs` over `prelude.lua`), retention, caps and tombstones with exactly the
//! semantics of [`MemoryEventStore`] and the SQLite store, and the cross-node wake-ups of
//! [`EventStore::wait_for_more`] (`wake.rs`: one pub/sub subscriber per store). It does not
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
//!   (oldest first, bounded by [`StoreLimits::max_tombstones`]).
//! - `Pdue`: sessions by the completion time of their oldest completed stream, for the
//!   background retention sweep of sessions nobody touches.
//! - `Po:<node>`: the incomplete Request streams each node is responsible for (created, or
//!   claimed as orphans; the stream's `node` field names the same node), for
//!   [`EventStore::orphaned_streams`].
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
//! [`EventStore::orphaned_streams`] reports two kinds of stream:
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
//! [`StoreError::Completed`]. That is the price of answering a dead node's clients at all;
//! the lease sets how long a stall it tolerates.
//!
//! [`MemoryEventStore`]: super::MemoryEventStore

mod relay;
mod scripts;
mod tasks;

pub use tasks::RedisTaskStore;
mod wake;

use crate::lock as guard;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tether_proto::version::ProtocolVersion;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use self::relay::RedisRelay;
use self::relay::RelayState;
use self::wake::{Listener, RECHECK, Watchers};
use super::StoreLimits;
use super::pipeline::{CompletionReply, Lane, Pipeline, Queued};
use super::{
    EventStore, OrphanedStream, ReadBatch, SessionRecord, SessionStore, SessionUsage, StoreError,
    StoreFailure, StoredEvent, StreamKind, StreamOwner,
};
use super::{chunk, frame};

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
    /// node left incomplete are reported by [`EventStore::orphaned_streams`] to a store
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
    /// [`StoreError::Unavailable`] rather than hang while Redis is unreachable. Default
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
const SWEEP_LIMIT: usize = 256;

/// Longest time between two background retention sweeps (a tenth of the retention when that
/// is shorter), so idle sessions' finished streams do not outlive retention by much.
const MAX_SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// Shortest [`RedisStoreConfig::node_lease`]: a heartbeat every third of it must still be
/// a few round trips apart.
const MIN_NODE_LEASE: Duration = Duration::from_millis(100);

/// Orphaned streams of dead nodes one [`EventStore::orphaned_streams`] call claims at most, so
/// the claim never holds Redis for long; the next call claims more. (Named in the doc of
/// `orphaned_streams`.)
const CLAIM_LIMIT: usize = 256;

/// Most streams whose next seq a store remembers for appends; past it the memory is
/// cleared (a forgotten seq costs one extra round trip on the next append).
const SEQ_CACHE_LIMIT: usize = 65_536;

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
        relay::channel(&config.key_prefix, &config.node_id),
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

/// Routes what the subscriber hears: stream ids on the wake channel to the local waiters,
/// the rest (this node's relay channel) to the relay.
struct Heard {
    wake_channel: String,
    watchers: Arc<Watchers>,
    relay: Arc<RelayState>,
}

impl Listener for Heard {
    fn message(&self, channel: &str, payload: &[u8]) {
        if channel != self.wake_channel {
            self.relay.heard(payload);
            return;
        }
        let stream = std::str::from_utf8(payload)
            .ok()
            .and_then(|id| StreamId::parse(id).ok());
        if let Some(stream) = stream {
            self.watchers.wake(stream);
        }
    }

    fn gap(&self) {
        // Every waiter re-checks its stream; lost relay answers are left to their timeouts.
        self.watchers.wake_all();
    }
}

/// Runs the retention sweep every tenth of the retention (at most [`MAX_SWEEP_PERIOD`])
/// until the store is dropped.
/// What the pipeline hands to [`commit_loop`].
enum Commit {
    /// A pipelined append.
    Append(Queued),
    /// A completion, after the appends queued before it.
    Complete {
        stream: StreamId,
        lane: Arc<Lane>,
        reply: CompletionReply,
    },
}

/// How long a waiter woken for an event its node's lane has not yet heard committed waits for
/// the commit's reply before reading from Redis (see `Inner::wait_is_over`).
const REPLY_GRACE: Duration = Duration::from_millis(20);

/// Most pipelined appends sent in one script call.
const MAX_APPENDS_PER_CALL: usize = 1024;

/// Most frame bytes sent in one script call.
const MAX_BYTES_PER_CALL: usize = 4 * 1024 * 1024;

/// Commits what the pipeline queued: everything waiting, in order, as one APPEND_MANY call
/// (one round trip for many appends of many streams), completions after the appends before
/// them. One call at a time, so each stream's frames reach Redis in seq order.
async fn commit_loop(
    inner: std::sync::Weak<Inner>,
    mut queued: tokio::sync::mpsc::UnboundedReceiver<Commit>,
) {
    let mut appends: Vec<Queued> = Vec::new();
    while let Some(first) = queued.recv().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut next = Some(first);
        let mut bytes = 0;
        while let Some(commit) = next.take() {
            match commit {
                // Frames queued behind a failed commit are dropped (store/pipeline.rs).
                Commit::Append(append) if append.lane.failure().is_some() => {}
                Commit::Append(append) if append.lane.is_demoted() => {
                    inner.append_many(std::mem::take(&mut appends)).await;
                    bytes = 0;
                    inner.append_demoted(&append).await;
                }
                Commit::Append(append) => {
                    bytes += append.frame.len();
                    appends.push(append);
                    if appends.len() >= MAX_APPENDS_PER_CALL || bytes >= MAX_BYTES_PER_CALL {
                        inner.append_many(std::mem::take(&mut appends)).await;
                        bytes = 0;
                    }
                }
                Commit::Complete {
                    stream,
                    lane,
                    reply,
                } => {
                    inner.append_many(std::mem::take(&mut appends)).await;
                    bytes = 0;
                    let result = match lane.failure() {
                        Some(failure) => Err(failure),
                        None => inner.complete_now(stream).await,
                    };
                    let _ = reply.send(result);
                }
            }
            next = queued.try_recv().ok();
        }
        inner.append_many(std::mem::take(&mut appends)).await;
    }
}

async fn sweep_loop(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let period = inner.upgrade().map_or(MAX_SWEEP_PERIOD, |inner| {
        (inner.config.limits.retention / 10).clamp(Duration::from_millis(10), MAX_SWEEP_PERIOD)
    });
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let limit = SWEEP_LIMIT.to_string();
        if let Err(error) = inner.run(&inner.scripts.sweep, &[&limit]).await {
            tracing::debug!(%error, "redis store: retention sweep failed");
        }
    }
}

/// Renews this node's lease every third of it until the store is dropped. The key is left to
/// expire, not deleted, when the store closes: a crashed node cannot delete it either, and
/// the other nodes treat both alike.
async fn heartbeat_loop(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let Some(period) = inner.upgrade().map(|inner| inner.config.node_lease / 3) else {
        return;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let renewed = inner
            .run(
                &inner.scripts.heartbeat,
                &[&inner.config.node_id, &inner.lease_ms()],
            )
            .await;
        if let Err(error) = renewed {
            // Two failures in a row are still within the lease; past it, other nodes answer
            // this node's running requests as orphans.
            tracing::warn!(%error, node = %inner.config.node_id, "redis store: heartbeat failed");
        }
    }
}

/// A backend error as the store reports it, its source kept.
fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(StoreFailure::new(error))
}

/// A failure without an error value, as the store reports it.
fn unavailable_because(reason: impl Into<String>) -> StoreError {
    StoreError::Unavailable(StoreFailure::msg(reason))
}

/// The scripts, hashed once.
struct Scripts {
    create: redis::Script,
    append: redis::Script,
    append_many: redis::Script,
    complete: redis::Script,
    read: redis::Script,
    remove_session: redis::Script,
    usage: redis::Script,
    sweep: redis::Script,
    node_open: redis::Script,
    heartbeat: redis::Script,
    claim_orphans: redis::Script,
    session_home: redis::Script,
    session_insert: redis::Script,
    session_touch: redis::Script,
    session_remove: redis::Script,
    session_expire_idle: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            create: redis::Script::new(scripts::CREATE),
            append: redis::Script::new(scripts::APPEND),
            append_many: redis::Script::new(scripts::APPEND_MANY),
            complete: redis::Script::new(scripts::COMPLETE),
            read: redis::Script::new(scripts::READ),
            remove_session: redis::Script::new(scripts::REMOVE_SESSION),
            usage: redis::Script::new(scripts::USAGE),
            sweep: redis::Script::new(scripts::SWEEP),
            node_open: redis::Script::new(scripts::NODE_OPEN),
            heartbeat: redis::Script::new(scripts::HEARTBEAT),
            claim_orphans: redis::Script::new(scripts::CLAIM_ORPHANS),
            session_home: redis::Script::new(scripts::SESSION_HOME),
            session_insert: redis::Script::new(scripts::SESSION_INSERT),
            session_touch: redis::Script::new(scripts::SESSION_TOUCH),
            session_remove: redis::Script::new(scripts::SESSION_REMOVE),
            session_expire_idle: redis::Script::new(scripts::SESSION_EXPIRE_IDLE),
        }
    }
}

/// State of an open store, shared by its two halves and its background tasks.
struct Inner {
    config: RedisStoreConfig,
    conn: ConnectionManager,
    scripts: Scripts,
    watchers: Arc<Watchers>,
    relay: Arc<RelayState>,
    /// The next seq this store expects each stream to take (see "Appends" in the module
    /// docs); a guess, corrected by the append script.
    next_seqs: Mutex<HashMap<StreamId, u64>>,
    /// The Request streams an earlier process of this node left incomplete, found at open,
    /// until asked for.
    orphans: Mutex<Vec<OrphanedStream>>,
    /// The append pipelines of the streams this store created.
    pipeline: Pipeline,
    /// What the pipeline hands to [`commit_loop`], in order.
    commits: tokio::sync::mpsc::UnboundedSender<Commit>,
    /// Stops the subscriber, the heartbeat and the sweeper when the store is dropped.
    _stop: DropGuard,
}

impl Inner {
    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.config.key_prefix)
    }

    fn lease_ms(&self) -> String {
        u64::try_from(self.config.node_lease.as_millis())
            .unwrap_or(u64::MAX)
            .to_string()
    }

    /// Runs a script with the common arguments and then `args`; the reply's first element is
    /// its status, the rest is returned.
    async fn run(
        &self,
        script: &redis::Script,
        args: &[&(dyn AsRef<[u8]> + Sync)],
    ) -> Result<Reply, StoreError> {
        let config = &self.config;
        let mut invocation = script.prepare_invoke();
        invocation
            .arg(&config.key_prefix)
            .arg(u64::try_from(config.limits.retention.as_millis()).unwrap_or(u64::MAX))
            .arg(config.limits.max_events_per_session)
            .arg(config.limits.max_bytes_per_session)
            .arg(config.limits.max_streams_per_session)
            .arg(config.limits.max_tombstones);
        for arg in args {
            invocation.arg(arg.as_ref());
        }
        let mut conn = self.conn.clone();
        let value: Value = self
            .bounded(invocation.invoke_async(&mut conn))
            .await?
            .map_err(unavailable)?;
        Reply::parse(value)
    }

    /// Runs a plain command.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.bounded(cmd.query_async(&mut conn))
            .await?
            .map_err(unavailable)
    }

    /// `future` within the command timeout, else `Unavailable`.
    async fn bounded<T>(&self, future: impl Future<Output = T>) -> Result<T, StoreError> {
        tokio::time::timeout(self.config.command_timeout, future)
            .await
            .map_err(|_| {
                unavailable_because(format!(
                    "redis did not answer within {:?}",
                    self.config.command_timeout
                ))
            })
    }

    /// Hands `commit` to the commit loop.
    fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        self.commits
            .send(commit)
            .map_err(|_| unavailable_because("store closed"))
    }

    /// Stores pipelined appends in one script call and reports each stream's outcome to its
    /// lane.
    async fn append_many(&self, mut appends: Vec<Queued>) {
        if appends.is_empty() {
            return;
        }
        // Each stream's appends together, in seq order: one run per stream, cut into chunks
        // of consecutive seqs.
        let cuts = chunk::cut(&mut appends, |append| {
            (append.id.stream, append.id.seq, append.frame.len())
        });
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(6 * cuts.len());
        for cut in cuts {
            let frames = &appends[cut.range.clone()];
            let mut encoded =
                Vec::with_capacity(frames.iter().map(|a| chunk::encoded_len(&a.frame)).sum());
            let (mut lens, mut bytes) = (String::new(), 0);
            for append in frames {
                chunk::push(&mut encoded, &append.frame);
                if !lens.is_empty() {
                    lens.push(',');
                }
                lens.push_str(itoa::Buffer::new().format(append.frame.len()));
                bytes += append.frame.len();
            }
            args.push(cut.stream.as_str().as_bytes().to_vec());
            args.push(cut.first.to_string().into_bytes());
            args.push(frames.len().to_string().into_bytes());
            args.push(bytes.to_string().into_bytes());
            args.push(lens.into_bytes());
            args.push(encoded);
        }
        let args: Vec<&(dyn AsRef<[u8]> + Sync)> = args
            .iter()
            .map(|arg| arg as &(dyn AsRef<[u8]> + Sync))
            .collect();
        let reply = self.run(&self.scripts.append_many, &args).await;
        let mut values = match reply {
            Ok(reply) if reply.status == "ok" => reply.values.into_iter(),
            Ok(reply) => {
                let error = unexpected(&reply.status);
                appends.iter().for_each(|append| append.lane.fail(&error));
                return;
            }
            Err(error) => {
                appends.iter().for_each(|append| append.lane.fail(&error));
                return;
            }
        };
        // The evicted streams first: their lanes' tails lose those events before any reader
        // can be woken by this commit, and this commit's own frames join a tail only from
        // its stream's first kept seq on.
        let evicted = values
            .next()
            .map(|list| self.forget_evicted(&list))
            .unwrap_or_default();
        // One reply triple per stream's run, in order.
        let runs: Vec<Value> = values.collect();
        let mut runs = runs.chunks(3);
        let mut at = 0;
        while at < appends.len() {
            let lane = Arc::clone(&appends[at].lane);
            let stream = appends[at].id.stream;
            let start = at;
            let end = appends[at..]
                .iter()
                .position(|append| append.id.stream != stream)
                .map_or(appends.len(), |len| at + len);
            at = end;
            let Some([_, Value::BulkString(status), Value::Int(next)]) = runs.next() else {
                lane.fail(&unexpected("append_many reply"));
                continue;
            };
            let status = std::str::from_utf8(status).unwrap_or("?");
            if status == "seq" {
                // Another node stored this seq: nothing of the run was stored. Store it, and
                // whatever the lane queues after it, one by one at the next free seqs.
                lane.demote();
                for append in &appends[start..end] {
                    self.append_demoted(append).await;
                }
                continue;
            }
            let next = u64::try_from(*next).unwrap_or(0);
            if status == "ok" {
                let from = evicted
                    .iter()
                    .find(|(evicted, _)| *evicted == stream)
                    .map_or(0, |&(_, first)| first);
                lane.remember_appends(&mut appends[start..end], from);
            }
            if next > 0 {
                lane.committed(next - 1);
                self.remember_next_seq(stream, next);
                self.watchers.wake(stream);
            }
            if status != "ok" {
                self.forget_seq(stream);
                lane.fail(&append_refused(status));
            }
        }
    }

    /// Drops from the committed tails what a script's reply says it evicted (a flat list of
    /// stream id and first seq kept, see `scripts.rs`), and returns the pairs it read.
    fn forget_evicted(&self, list: &Value) -> Vec<(StreamId, u64)> {
        let Value::Array(list) = list else {
            return Vec::new();
        };
        let mut evicted = Vec::with_capacity(list.len() / 2);
        for pair in list.chunks(2) {
            let [Value::BulkString(id), Value::Int(first)] = pair else {
                continue;
            };
            let (Some(stream), Ok(first)) = (
                std::str::from_utf8(id)
                    .ok()
                    .and_then(|id| StreamId::parse(id).ok()),
                u64::try_from(*first),
            ) else {
                continue;
            };
            if let Some(lane) = self.pipeline.lane(stream) {
                lane.forget_before(first);
            }
            evicted.push((stream, first));
        }
        evicted
    }

    /// Stores the message of a demoted lane's frame at the stream's next seq, and reports it.
    async fn append_demoted(&self, append: &Queued) {
        let event = StoredEvent::new(append.id, append.frame.clone(), None);
        // The frame was built from a validated message.
        let message = std::str::from_utf8(event.message()).unwrap_or_default();
        match self.append_unpipelined(append.id.stream, message).await {
            Ok(_) => append.lane.committed(append.id.seq),
            Err(error) => append.lane.fail(&error),
        }
    }

    /// Appends one message at the stream's next seq, in one script call per attempt (see
    /// "Appends" in the module docs), and returns its id once Redis stored it.
    async fn append_unpipelined(
        &self,
        stream: StreamId,
        message: &str,
    ) -> Result<EventId, StoreError> {
        let mut seq = guard(&self.next_seqs).get(&stream).copied().unwrap_or(1);
        loop {
            let id = EventId::new(stream, seq);
            let built = frame::message_frame(id, message);
            let mut one = Vec::with_capacity(chunk::encoded_len(&built));
            chunk::push(&mut one, &built);
            let reply = self
                .run(
                    &self.scripts.append,
                    &[&stream.as_str(), &seq.to_string(), &one],
                )
                .await?;
            match reply.status.as_str() {
                "ok" => {
                    if let Some(list) = reply.values.first() {
                        self.forget_evicted(list);
                    }
                    self.remember_next_seq(stream, seq + 1);
                    self.watchers.wake(stream);
                    return Ok(id);
                }
                // Another writer stored this seq first: build the frame for the right one.
                "seq" => {
                    seq = u64::try_from(reply.int(0)?).map_err(unavailable)?;
                }
                status => {
                    self.forget_seq(stream);
                    return Err(append_refused(status));
                }
            }
        }
    }

    /// Completes `stream` now (after whatever the caller made sure was stored before).
    async fn complete_now(&self, stream: StreamId) -> Result<(), StoreError> {
        let reply = self
            .run(&self.scripts.complete, &[&stream.as_str()])
            .await?;
        self.forget_seq(stream);
        match reply.status.as_str() {
            "ok" => {
                self.watchers.wake(stream);
                Ok(())
            }
            "unknown" => Err(StoreError::UnknownStream),
            other => Err(unexpected(other)),
        }
    }

    fn remember_next_seq(&self, stream: StreamId, next: u64) {
        let mut seqs = guard(&self.next_seqs);
        if seqs.len() >= SEQ_CACHE_LIMIT && !seqs.contains_key(&stream) {
            seqs.clear();
        }
        seqs.insert(stream, next);
    }

    fn forget_seq(&self, stream: StreamId) {
        guard(&self.next_seqs).remove(&stream);
    }

    /// Reads `stream` from seq `from` on (`None`: past any seq): from the committed tail of
    /// the stream's lane when it has events from `from` on, else from Redis.
    ///
    /// Only this node's lanes have tails, holding what this node committed, so a reader on
    /// the node that writes its stream (the usual case) costs Redis nothing while it keeps
    /// up, not even to learn that nothing more is there. What this node cannot see itself
    /// (another writer's events, a completion or removal by another node) reaches the
    /// lane through [`wait_is_over`](Self::wait_is_over), and the tail then sends the
    /// reader to Redis.
    async fn read(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        from: Option<u64>,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        if let Some(events) =
            from.and_then(|from| self.pipeline.lane(stream)?.read_tail(owner, from, limit))
        {
            return Ok(ReadBatch {
                events,
                complete: false,
            });
        }
        let from_arg = from.map(|seq| seq.to_string()).unwrap_or_default();
        // One more event than asked for tells whether the batch reaches the end.
        let count = limit.min(i64::MAX as usize - 1) + 1;
        let reply = self
            .run(
                &self.scripts.read,
                &[
                    &stream.as_str(),
                    &&*owner.principal,
                    &owner.session.as_str(),
                    &from_arg,
                    &count.to_string(),
                ],
            )
            .await?;
        match reply.status.as_str() {
            "ok" => {}
            "expired" => return Err(StoreError::Expired),
            "unknown" => return Err(StoreError::UnknownStream),
            other => return Err(unexpected(other)),
        }
        let complete = reply.int(0)? == 1;
        let entries = match reply.values.into_iter().nth(1) {
            Some(Value::Array(entries)) => entries,
            _ => Vec::new(),
        };
        let from = from.unwrap_or(u64::MAX);
        let mut events = Vec::with_capacity(limit.min(chunk::MAX_EVENTS));
        for entry in entries {
            push_entry(stream, entry, from, &mut events)?;
            if events.len() > limit {
                break;
            }
        }
        let more = events.len() > limit;
        events.truncate(limit);
        Ok(ReadBatch {
            events,
            complete: complete && !more,
        })
    }

    /// Whether a waiter on `stream` after `after` can stop: an event after it, completion,
    /// or the stream gone.
    async fn wait_is_over(&self, stream: StreamId, after: u64) -> Result<bool, StoreError> {
        // This node's own commits need no round trip.
        let lane = self.pipeline.lane(stream);
        if lane
            .as_ref()
            .and_then(|lane| lane.committed_next())
            .is_some_and(|next| next > after.saturating_add(1))
        {
            return Ok(true);
        }
        let (done, next): (Option<String>, Option<u64>) = self
            .query(
                redis::cmd("HMGET")
                    .arg(self.key("s", stream.as_str()))
                    .arg("done")
                    .arg("next"),
            )
            .await?;
        let seen = match (done, next) {
            (Some(done), _) if done == "1" => u64::MAX,
            (Some(_), Some(next)) if next > after.saturating_add(1) => next,
            (Some(_), Some(_)) => return Ok(false),
            // Gone.
            _ => u64::MAX,
        };
        if let Some(lane) = lane {
            lane.saw_backend_at(seen);
            if seen != u64::MAX {
                // Redis holds an event the lane has not heard committed: nearly always this
                // node's own commit, whose wake-up (published by the script) overtook the
                // script's reply. Waiting the moment that takes lets the read that follows
                // come from the tail; another writer's event is read from Redis after it.
                let _ = tokio::time::timeout(REPLY_GRACE, lane.wait_committed(seen)).await;
            }
        }
        Ok(true)
    }
}

/// A script's reply: its status and the values after it.
struct Reply {
    status: String,
    values: Vec<Value>,
}

impl Reply {
    fn parse(value: Value) -> Result<Self, StoreError> {
        let Value::Array(mut values) = value else {
            return Err(unexpected("not an array"));
        };
        if values.is_empty() {
            return Err(unexpected("empty reply"));
        }
        let status = match values.remove(0) {
            Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Value::SimpleString(text) => text,
            _ => return Err(unexpected("no status")),
        };
        Ok(Self { status, values })
    }

    fn int(&self, at: usize) -> Result<i64, StoreError> {
        match self.values.get(at) {
            Some(Value::Int(n)) => Ok(*n),
            _ => Err(unexpected("missing integer")),
        }
    }
}

/// The orphans of a NODE_OPEN or CLAIM_ORPHANS reply: `<stream> <principal> <session>
/// <request ids>` of each, flat.
fn orphans_in(reply: Reply) -> Result<Vec<OrphanedStream>, StoreError> {
    if reply.status != "ok" {
        return Err(unexpected(&reply.status));
    }
    let Some(Value::Array(fields)) = reply.values.into_iter().next() else {
        return Err(unexpected("no orphan list"));
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        _ => None,
    };
    let mut orphans = Vec::with_capacity(fields.len() / 4);
    for entry in fields.chunks(4) {
        let [stream, principal, session, requests] = entry else {
            return Err(unexpected("orphan entry"));
        };
        let stream = text(stream)
            .and_then(|id| StreamId::parse(&id).ok())
            .ok_or_else(|| unexpected("orphan stream id"))?;
        let session = text(session)
            .and_then(|id| SessionId::parse(&id).ok())
            .ok_or_else(|| unexpected("orphan session id"))?;
        let principal = text(principal).ok_or_else(|| unexpected("orphan principal"))?;
        orphans.push(OrphanedStream {
            owner: StreamOwner {
                principal: Arc::from(principal),
                session,
            },
            stream,
            // Written by this module from `RequestId`s: unreadable only if someone edited the
            // key, and then there is nobody to name.
            requests: text(requests)
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default(),
        });
    }
    Ok(orphans)
}

/// The error of an append script's refusal status.
fn append_refused(status: &str) -> StoreError {
    match status {
        "completed" => StoreError::Completed,
        "unknown" => StoreError::UnknownStream,
        "too_large" => StoreError::EventTooLarge,
        other => unexpected(other),
    }
}

fn unexpected(what: &str) -> StoreError {
    unavailable_because(format!("unexpected reply from a tether script: {what}"))
}

/// Adds the events of one XRANGE entry of `stream` from seq `from` on to `events`: a chunk
/// (`[id, ["n", count, "c", chunk]]`) or, as written before chunks, one frame
/// (`[id, ["f", frame]]`).
fn push_entry(
    stream: StreamId,
    entry: Value,
    from: u64,
    events: &mut Vec<StoredEvent>,
) -> Result<(), StoreError> {
    let Value::Array(parts) = entry else {
        return Err(unexpected("stream entry"));
    };
    let mut parts = parts.into_iter();
    let (Some(Value::BulkString(id)), Some(Value::Array(fields))) = (parts.next(), parts.next())
    else {
        return Err(unexpected("stream entry"));
    };
    let first = std::str::from_utf8(&id)
        .ok()
        .and_then(|id| id.strip_prefix("1-"))
        .and_then(|seq| seq.parse::<u64>().ok())
        .ok_or_else(|| unexpected("stream entry id"))?;
    let mut fields = fields.into_iter();
    let (Some(Value::BulkString(name)), value) = (fields.next(), fields.next()) else {
        return Err(unexpected("stream entry fields"));
    };
    match (name.as_slice(), value) {
        (b"f", Some(Value::BulkString(frame))) => {
            if first >= from {
                events.push(StoredEvent::new(
                    EventId::new(stream, first),
                    Bytes::from(frame),
                    None,
                ));
            }
        }
        (b"n", Some(_)) => {
            let (Some(Value::BulkString(name)), Some(Value::BulkString(blob))) =
                (fields.next(), fields.next())
            else {
                return Err(unexpected("stream entry chunk"));
            };
            if name != b"c" {
                return Err(unexpected("stream entry chunk"));
            }
            for (seq, frame) in (first..).zip(chunk::frames(Bytes::from(blob))) {
                let frame = frame.map_err(unavailable)?;
                if seq >= from {
                    events.push(StoredEvent::new(EventId::new(stream, seq), frame, None));
                }
            }
        }
        _ => return Err(unexpected("stream entry fields")),
    }
    Ok(())
}

/// The Redis [`EventStore`]. Cheap to share behind an `Arc`; dropping the last handle (this
/// and its [`RedisSessionStore`]) stops its subscriber and sweeper tasks.
pub struct RedisEventStore {
    inner: Arc<Inner>,
}

/// The Redis [`SessionStore`], sharing its event store's connection. Idle expiry is measured
/// on Redis's clock, so every node agrees on it.
pub struct RedisSessionStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisEventStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("url", &self.inner.config.url)
            .field("key_prefix", &self.inner.config.key_prefix)
            .finish_non_exhaustive()
    }
}

impl RedisEventStore {
    /// The configuration this store runs with (caps below 1 raised to 1).
    #[must_use]
    pub fn config(&self) -> &RedisStoreConfig {
        &self.inner.config
    }

    /// The node-to-node relay over this store's Redis, for a server that shares the store
    /// with other nodes ([`Stores::redis`](crate::store::Stores::redis) puts it in the
    /// bundle).
    #[must_use]
    pub fn relay(&self) -> RedisRelay {
        RedisRelay {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[async_trait]
impl EventStore for RedisEventStore {
    async fn create_stream(
        &self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: Duration,
        requests: &[RequestId],
    ) -> Result<StreamId, StoreError> {
        let inner = &*self.inner;
        // 128 random bits: a collision with a stored id is not a case to handle.
        let stream = StreamId::generate();
        let priming = frame::priming_frame(stream, retry);
        if priming.len() > inner.config.limits.max_bytes_per_session {
            return Err(StoreError::EventTooLarge);
        }
        let mut priming_chunk = Vec::with_capacity(chunk::encoded_len(&priming));
        chunk::push(&mut priming_chunk, &priming);
        let requests = serde_json::to_string(requests).map_err(unavailable)?;
        let kind = match kind {
            StreamKind::Request => "r",
            StreamKind::Standalone => "s",
        };
        let reply = inner
            .run(
                &inner.scripts.create,
                &[
                    &stream.as_str(),
                    &&*owner.principal,
                    &owner.session.as_str(),
                    &kind,
                    &requests,
                    &inner.config.node_id,
                    &priming_chunk,
                ],
            )
            .await?;
        match reply.status.as_str() {
            "ok" => {
                if let Some(list) = reply.values.first() {
                    inner.forget_evicted(list);
                }
                inner.remember_next_seq(stream, 1);
                // Redis reports commits to the lane itself, keeping its tail as it goes.
                let lane = inner.pipeline.open(stream, owner, 1);
                lane.remember_committed(EventId::PRIMING_SEQ, priming);
                Ok(stream)
            }
            "too_many" => Err(StoreError::TooManyStreams),
            other => Err(unexpected(other)),
        }
    }

    /// Pipelined for the streams this store created: returns once the event is queued; the
    /// commit loop stores everything queued in one script call. Others (streams claimed as
    /// orphans, or whose commit failed) wait for their script's answer.
    async fn append(&self, stream: StreamId, message: &[u8]) -> Result<EventId, StoreError> {
        let message = frame::validate(message)?;
        let inner = &*self.inner;
        let queued = inner
            .pipeline
            .append(
                stream,
                message,
                inner.config.limits.max_bytes_per_session,
                |queued| inner.commit(Commit::Append(queued)),
            )
            .await;
        match queued {
            Some(result) => result,
            None => inner.append_unpipelined(stream, message).await,
        }
    }

    async fn flush(&self, stream: StreamId) -> Result<(), StoreError> {
        self.inner.pipeline.flush(stream).await
    }

    async fn complete(&self, stream: StreamId) -> Result<(), StoreError> {
        let inner = &*self.inner;
        let piped = inner
            .pipeline
            .complete(stream, |lane, reply| {
                inner.commit(Commit::Complete {
                    stream,
                    lane,
                    reply,
                })
            })
            .await;
        match piped {
            Some(result) => result,
            None => inner.complete_now(stream).await,
        }
    }

    async fn read_after(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        after: u64,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        // `after == u64::MAX` has nothing after it: an empty batch, as for any cursor past the
        // end.
        self.inner
            .read(owner, stream, after.checked_add(1), limit)
            .await
    }

    async fn read_from_start(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.inner
            .read(owner, stream, Some(EventId::PRIMING_SEQ), limit)
            .await
    }

    /// Returns `Ok(())` at once for a stream that is unknown or gone, as the memory store
    /// does. Cancel-safe: dropping the future only unregisters its interest.
    async fn wait_for_more(&self, stream: StreamId, after: u64) -> Result<(), StoreError> {
        let inner = &*self.inner;
        // Registered before the check: a change stored after the check publishes a wake-up
        // this registration sees, so none is lost between the check and the wait.
        let mut registration = inner.watchers.register(stream);
        loop {
            registration.mark_seen();
            if inner.wait_is_over(stream, after).await? {
                return Ok(());
            }
            registration.changed(RECHECK).await;
        }
    }

    async fn remove_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let inner = &*self.inner;
        inner.pipeline.remove_session(session);
        let reply = inner
            .run(&inner.scripts.remove_session, &[&session.as_str()])
            .await?;
        if reply.status != "ok" {
            return Err(unexpected(&reply.status));
        }
        if let Some(Value::Array(streams)) = reply.values.first() {
            for id in streams {
                let Value::BulkString(id) = id else { continue };
                if let Some(stream) = std::str::from_utf8(id)
                    .ok()
                    .and_then(|id| StreamId::parse(id).ok())
                {
                    inner.forget_seq(stream);
                    inner.watchers.wake(stream);
                }
            }
        }
        Ok(())
    }

    async fn usage(&self, session: &SessionId) -> Result<SessionUsage, StoreError> {
        let inner = &*self.inner;
        let reply = inner
            .run(&inner.scripts.usage, &[&session.as_str()])
            .await?;
        if reply.status != "ok" {
            return Err(unexpected(&reply.status));
        }
        let count = |at| -> Result<usize, StoreError> {
            // Counters never go below zero; a negative one would be a bug, and reads as 0.
            Ok(usize::try_from(reply.int(at)?).unwrap_or(0))
        };
        Ok(SessionUsage {
            streams: count(0)?,
            events: count(1)?,
            bytes: count(2)?,
        })
    }

    /// What an earlier process of this node left open (found at open, reported by the first
    /// call), and the incomplete Request streams of other nodes whose lease has lapsed, up to
    /// 256 per call (the rest on later calls). Each is claimed by exactly one caller, however
    /// many nodes ask at once; a claimed stream becomes this node's, so if this node dies
    /// before completing it, another node claims it from this one in turn. Streams of live
    /// nodes are never reported.
    async fn orphaned_streams(&self) -> Result<Vec<OrphanedStream>, StoreError> {
        let inner = &*self.inner;
        let reply = inner
            .run(
                &inner.scripts.claim_orphans,
                &[&inner.config.node_id, &CLAIM_LIMIT.to_string()],
            )
            .await?;
        let claimed = orphans_in(reply)?;
        let mut orphans = std::mem::take(&mut *guard(&inner.orphans));
        orphans.extend(claimed);
        Ok(orphans)
    }
}

impl RedisSessionStore {
    /// The task store of the same Redis, prefix and node. Make it once per open store: the
    /// tasks this node's earlier process left unfinished are its to fail
    /// ([`TaskStore::fail_orphans`](crate::store::TaskStore::fail_orphans)).
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached.
    pub async fn task_store(&self) -> Result<RedisTaskStore, StoreError> {
        RedisTaskStore::open(Arc::clone(&self.inner)).await
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    /// Inserting an id that exists replaces its record and counts as activity.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError> {
        let inner = &*self.inner;
        let version = record.version.to_string();
        let client = record
            .client
            .as_deref()
            .map(serde_json::Value::to_string)
            .unwrap_or_default();
        inner
            .run(
                &inner.scripts.session_insert,
                &[
                    &record.id.as_str(),
                    &version,
                    &&*record.principal,
                    &record.standalone.as_str(),
                    &client.as_str(),
                ],
            )
            .await?;
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let inner = &*self.inner;
        let (version, principal, standalone, client): (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = inner
            .query(
                redis::cmd("HMGET")
                    .arg(inner.key("sess", id.as_str()))
                    .arg("v")
                    .arg("p")
                    .arg("st")
                    .arg("c"),
            )
            .await?;
        let (Some(version), Some(principal), Some(standalone)) = (version, principal, standalone)
        else {
            return Ok(None);
        };
        Ok(Some(SessionRecord {
            id: id.clone(),
            version: ProtocolVersion::parse(&version).map_err(unavailable)?,
            principal: Arc::from(principal),
            standalone: StreamId::parse(&standalone).map_err(unavailable)?,
            client: client
                .map(|text| serde_json::from_str(&text).map_err(unavailable))
                .transpose()?
                .map(Arc::new),
        }))
    }

    /// Touching an unknown session does nothing.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError> {
        let inner = &*self.inner;
        inner
            .run(&inner.scripts.session_touch, &[&id.as_str()])
            .await?;
        Ok(())
    }

    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        let reply = inner
            .run(&inner.scripts.session_remove, &[&id.as_str()])
            .await?;
        Ok(reply.int(0)? > 0)
    }

    /// Atomic across nodes: each expired session is returned by exactly one caller.
    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError> {
        let inner = &*self.inner;
        let idle_ms = u64::try_from(idle.as_millis())
            .unwrap_or(u64::MAX)
            .to_string();
        let reply = inner
            .run(&inner.scripts.session_expire_idle, &[&idle_ms])
            .await?;
        let Some(Value::Array(ids)) = reply.values.first() else {
            return Ok(Vec::new());
        };
        Ok(ids
            .iter()
            .filter_map(|id| match id {
                Value::BulkString(id) => std::str::from_utf8(id)
                    .ok()
                    .and_then(|id| SessionId::parse(id).ok()),
                _ => None,
            })
            .collect())
    }

    async fn count(&self) -> Result<usize, StoreError> {
        let inner = &*self.inner;
        let count: usize = inner
            .query(redis::cmd("ZCARD").arg(format!("{}seen", inner.config.key_prefix)))
            .await?;
        Ok(count)
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        let inner = &*self.inner;
        let count: usize = inner
            .query(redis::cmd("SCARD").arg(inner.key("ps", principal)))
            .await?;
        Ok(count)
    }

    /// One key for every node: the first node to ask makes it (`SET NX`), every node reads
    /// the one that won.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        let inner = &*self.inner;
        let key = format!("{}sealing_key", inner.config.key_prefix);
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).expect("the operating system's CSPRNG is available");
        // `OK` when this node made it, nil when another one had.
        let _made: Option<String> = inner
            .query(redis::cmd("SET").arg(&key).arg(&fresh[..]).arg("NX"))
            .await?;
        let stored: Vec<u8> = inner.query(redis::cmd("GET").arg(&key)).await?;
        stored
            .try_into()
            .map_err(|_| unavailable_because("the stored sealing key is not 32 bytes".to_owned()))
    }
}
