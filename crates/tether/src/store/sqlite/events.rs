//! The SQLite [`EventStore`]: [`SqliteEventStore`], appends pipelined to the writer thread,
//! reads from the committed tail or a read-only connection.

use crate::lock as guard;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tokio::sync::watch;

use crate::store::error::StoreError;
use crate::store::event_store::{
    EventStore, OrphanedStream, ReadBatch, SessionUsage, StreamKind, StreamOwner,
};
use crate::store::frame;

use super::backend::Inner;
use super::config::SqliteStoreConfig;
use super::reads::read;
use super::values::unavailable;
use super::writer::Command;

/// The SQLite [`EventStore`]. Cheap to share behind an `Arc`; dropping the last handle (this
/// and its [`SqliteSessionStore`](super::SqliteSessionStore)) stops the writer thread after its pending commands.
pub struct SqliteEventStore {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for SqliteEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteEventStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl SqliteEventStore {
    /// The configuration this store runs with (caps below 1 raised to 1).
    #[must_use]
    pub fn config(&self) -> &SqliteStoreConfig {
        &self.inner.config
    }

    /// How many write transactions the writer thread has committed since the store opened:
    /// with concurrent appenders, far fewer than appends (group commit).
    #[must_use]
    pub fn transactions(&self) -> u64 {
        self.inner.shared.transactions.load(Ordering::Relaxed)
    }
}

impl SqliteEventStore {
    /// Reads `stream` from seq `from` on (`None`: past any seq): from the committed tail when
    /// it can answer, else from the file.
    async fn read_from(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        from: Option<u64>,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        if let Some(events) = from.and_then(|from| self.inner.read_tail(owner, stream, from, limit))
        {
            return Ok(ReadBatch {
                events,
                complete: false,
            });
        }
        let owner = owner.clone();
        self.inner
            .read(move |conn, config| read(conn, config, &owner, stream, from, limit))
            .await
    }
}

#[async_trait]
impl EventStore for SqliteEventStore {
    async fn create_stream(
        &self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: Duration,
        requests: &[RequestId],
    ) -> Result<StreamId, StoreError> {
        let requests = serde_json::to_string(requests).map_err(unavailable)?;
        let for_writer = owner.clone();
        let stream = self
            .inner
            .write(|reply| Command::CreateStream {
                owner: for_writer,
                kind,
                retry,
                requests,
                reply,
            })
            .await?;
        // The same bytes the writer stored (committed before the lane opened), so the stream's
        // first read, from its start, is answered from the tail too.
        self.inner
            .pipeline
            .open(stream, owner, 1)
            .remember_committed(EventId::PRIMING_SEQ, frame::priming_frame(stream, retry));
        Ok(stream)
    }

    /// Pipelined for the streams this store created since it opened: returns once the event
    /// is queued for the writer, which commits whatever is queued in one transaction. Others
    /// (streams an earlier process left, or whose commit failed) wait for their commit.
    async fn append(&self, stream: StreamId, message: &[u8]) -> Result<EventId, StoreError> {
        let message = frame::validate(message)?;
        let inner = &*self.inner;
        let queued = inner
            .pipeline
            .append_to_lane(
                stream,
                message,
                inner.config.limits.max_bytes_per_session,
                |lane| inner.send(Command::Queued(lane)),
            )
            .await;
        if let Some(result) = queued {
            return result;
        }
        let message = message.to_owned();
        inner
            .write(|reply| Command::Append {
                stream,
                message,
                reply,
            })
            .await
    }

    async fn flush(&self, stream: StreamId) -> Result<(), StoreError> {
        self.inner.pipeline.flush(stream).await
    }

    async fn complete(&self, stream: StreamId) -> Result<(), StoreError> {
        let inner = &*self.inner;
        let piped = inner
            .pipeline
            .complete(stream, |lane, reply| {
                inner.send(Command::Complete {
                    stream,
                    lane: Some(lane),
                    reply,
                })
            })
            .await;
        if let Some(result) = piped {
            return result;
        }
        inner
            .write(|reply| Command::Complete {
                stream,
                lane: None,
                reply,
            })
            .await
    }

    async fn read_after(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        after: u64,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.read_from(owner, stream, after.checked_add(1), limit)
            .await
    }

    async fn read_from_start(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.read_from(owner, stream, Some(EventId::PRIMING_SEQ), limit)
            .await
    }

    /// Returns `Ok(())` at once for a stream that is unknown or gone, as the memory store does.
    async fn wait_for_more(&self, stream: StreamId, after: u64) -> Result<(), StoreError> {
        // Subscribed under the lock the writer publishes under, and `wait_for` checks the
        // current value first: nothing committed before or after this point is missed.
        let receiver = guard(&self.inner.shared.progress)
            .get(&stream)
            .map(watch::Sender::subscribe);
        let Some(mut receiver) = receiver else {
            return Ok(());
        };
        let _ = receiver
            .wait_for(|progress| progress.satisfies(after))
            .await;
        Ok(())
    }

    async fn remove_session(&self, session: &SessionId) -> Result<(), StoreError> {
        self.inner.pipeline.remove_session(session);
        let session = session.clone();
        self.inner
            .write(|reply| Command::RemoveSession { session, reply })
            .await
    }

    async fn usage(&self, session: &SessionId) -> Result<SessionUsage, StoreError> {
        let session = session.clone();
        self.inner
            .write(|reply| Command::Usage { session, reply })
            .await
    }

    async fn orphaned_streams(&self) -> Result<Vec<OrphanedStream>, StoreError> {
        Ok(std::mem::take(&mut *guard(&self.inner.orphans)))
    }
}
