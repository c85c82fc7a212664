//! The Redis [`EventStore`]: [`RedisEventStore`], each operation one script call or a queued
//! append of the shared [`Inner`](super::backend::Inner).

use crate::lock as guard;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;

use crate::store::error::StoreError;
use crate::store::event_store::{
    EventStore, OrphanedStream, ReadBatch, SessionUsage, StreamKind, StreamOwner,
};
use crate::store::{chunk, frame};

use super::backend::{Commit, Inner};
use super::config::{CLAIM_LIMIT, RedisStoreConfig};
use super::relay::RedisRelay;
use super::reply::{orphans_in, unavailable, unexpected};
use super::wake::RECHECK;

/// The Redis [`EventStore`]. Cheap to share behind an `Arc`; dropping the last handle (this
/// and its [`RedisSessionStore`](super::RedisSessionStore)) stops its subscriber and sweeper tasks.
pub struct RedisEventStore {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for RedisEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisEventStore")
            .field("config", &self.inner.config)
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
    /// with other nodes ([`Stores::redis`](crate::store::stores::Stores::redis) puts it in the
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
