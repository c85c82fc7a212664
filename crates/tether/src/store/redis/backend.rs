//! What both halves of a Redis store share ([`Inner`]): the connection, the hashed scripts,
//! the wake-up watchers, the relay channel's state, the append pipeline and the queue of
//! commits, and every Redis call the stores make through them (module docs of `store::redis`
//! for the keys and the scripts' rules).

use crate::lock as guard;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;
use tether_proto::ids::{EventId, StreamId};
use tokio_util::sync::DropGuard;

use crate::store::error::StoreError;
use crate::store::event_store::{OrphanedStream, ReadBatch, StoredEvent, StreamOwner};
use crate::store::pipeline::{CompletionReply, Lane, Pipeline, Queued};
use crate::store::{chunk, frame};

use super::config::{RedisStoreConfig, SEQ_CACHE_LIMIT};
use super::relay_channel::RelayState;
use super::reply::{
    Reply, append_refused, push_entry, unavailable, unavailable_because, unexpected,
};
use super::scripts;
use super::wake::Watchers;

/// What the pipeline hands to [`commit_loop`].
pub(super) enum Commit {
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
pub(super) const REPLY_GRACE: Duration = Duration::from_millis(20);

/// The scripts, hashed once.
pub(super) struct Scripts {
    pub(super) create: redis::Script,
    pub(super) append: redis::Script,
    pub(super) append_many: redis::Script,
    pub(super) complete: redis::Script,
    pub(super) read: redis::Script,
    pub(super) remove_session: redis::Script,
    pub(super) usage: redis::Script,
    pub(super) sweep: redis::Script,
    pub(super) node_open: redis::Script,
    pub(super) heartbeat: redis::Script,
    pub(super) claim_orphans: redis::Script,
    pub(super) session_home: redis::Script,
    pub(super) session_insert: redis::Script,
    pub(super) session_touch: redis::Script,
    pub(super) session_remove: redis::Script,
    pub(super) session_expire_idle: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
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
pub(super) struct Inner {
    pub(super) config: RedisStoreConfig,
    pub(super) conn: ConnectionManager,
    pub(super) scripts: Scripts,
    pub(super) watchers: Arc<Watchers>,
    pub(super) relay: Arc<RelayState>,
    /// The next seq this store expects each stream to take (see "Appends" in the module
    /// docs); a guess, corrected by the append script.
    pub(super) next_seqs: Mutex<HashMap<StreamId, u64>>,
    /// The Request streams an earlier process of this node left incomplete, found at open,
    /// until asked for.
    pub(super) orphans: Mutex<Vec<OrphanedStream>>,
    /// The append pipelines of the streams this store created.
    pub(super) pipeline: Pipeline,
    /// What the pipeline hands to [`commit_loop`], in order.
    pub(super) commits: tokio::sync::mpsc::UnboundedSender<Commit>,
    /// Stops the subscriber, the heartbeat and the sweeper when the store is dropped.
    pub(super) _stop: DropGuard,
}

impl Inner {
    pub(super) fn key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.config.key_prefix)
    }

    pub(super) fn lease_ms(&self) -> String {
        u64::try_from(self.config.node_lease.as_millis())
            .unwrap_or(u64::MAX)
            .to_string()
    }

    /// Runs a script with the common arguments and then `args`; the reply's first element is
    /// its status, the rest is returned.
    pub(super) async fn run(
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
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        self.bounded(cmd.query_async(&mut conn))
            .await?
            .map_err(unavailable)
    }

    /// `future` within the command timeout, else `Unavailable`.
    pub(super) async fn bounded<T>(
        &self,
        future: impl Future<Output = T>,
    ) -> Result<T, StoreError> {
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
    pub(super) fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        self.commits
            .send(commit)
            .map_err(|_| unavailable_because("store closed"))
    }

    /// Stores pipelined appends in one script call and reports each stream's outcome to its
    /// lane.
    pub(super) async fn append_many(&self, mut appends: Vec<Queued>) {
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
    pub(super) fn forget_evicted(&self, list: &Value) -> Vec<(StreamId, u64)> {
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
    pub(super) async fn append_demoted(&self, append: &Queued) {
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
    pub(super) async fn append_unpipelined(
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
    pub(super) async fn complete_now(&self, stream: StreamId) -> Result<(), StoreError> {
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

    pub(super) fn remember_next_seq(&self, stream: StreamId, next: u64) {
        let mut seqs = guard(&self.next_seqs);
        if seqs.len() >= SEQ_CACHE_LIMIT && !seqs.contains_key(&stream) {
            seqs.clear();
        }
        seqs.insert(stream, next);
    }

    pub(super) fn forget_seq(&self, stream: StreamId) {
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
    pub(super) async fn read(
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
    pub(super) async fn wait_is_over(
        &self,
        stream: StreamId,
        after: u64,
    ) -> Result<bool, StoreError> {
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
