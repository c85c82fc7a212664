//! What both halves of a SQLite store share ([`Inner`]): the writer thread's command channel,
//! the read-only connections and their permits, what the writer publishes, the append
//! pipeline, the sealing key and the file's lock; and the reads and commands both stores send
//! through them.

use crate::lock as guard;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tether_proto::ids::StreamId;
use tokio::sync::oneshot;

use crate::store::error::StoreError;
use crate::store::event_store::{OrphanedStream, StoredEvent, StreamOwner};
use crate::store::pipeline::Pipeline;

use super::config::{MAX_READERS, SqliteStoreConfig};
use super::schema::open_reader;
use super::values::{unavailable, unavailable_because};
use super::writer::{Command, Shared};

/// State of a store open in this process, shared by its two halves.
pub(super) struct Inner {
    pub(super) config: SqliteStoreConfig,
    pub(super) tx: Mutex<Option<mpsc::Sender<Command>>>,
    pub(super) thread: Mutex<Option<JoinHandle<()>>>,
    pub(super) readers: Mutex<Vec<Connection>>,
    /// One permit per read at once ([`MAX_READERS`]).
    pub(super) reading: Arc<tokio::sync::Semaphore>,
    pub(super) shared: Arc<Shared>,
    /// The Request streams that were incomplete when the store opened, until asked for.
    pub(super) orphans: Mutex<Vec<OrphanedStream>>,
    /// The append pipelines of the streams created since the store opened.
    pub(super) pipeline: Pipeline,
    /// The file's sealing key ([`SessionStore::sealing_key`]), read when it opened.
    pub(super) sealing_key: [u8; 32],
    /// Held while the store is open (dropped after the writer thread is joined).
    pub(super) _lock: std::fs::File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the writer after the commands already sent; joining it
        // means a reopen of the same file sees everything acknowledged.
        drop(guard(&self.tx).take());
        if let Some(thread) = guard(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Inner {
    /// A live read from the stream's committed tail (`store/pipeline.rs`), when the tail
    /// holds seq `from` on and nothing before `from` was evicted; `None` sends the read to
    /// the database. A stream with a lane is neither complete nor removed (completing or
    /// removing it drops the lane first), so a tail read never misses either.
    pub(super) fn read_tail(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        from: u64,
        limit: usize,
    ) -> Option<Vec<StoredEvent>> {
        let lane = self.pipeline.lane(stream)?;
        let first_seq = guard(&self.shared.progress)
            .get(&stream)
            .map(|progress| progress.borrow().first_seq)?;
        if from < first_seq {
            return None;
        }
        lane.read_tail(owner, from, limit)
    }

    /// Sends a command to the writer and waits for its answer (after commit).
    pub(super) async fn write<T: Send + 'static>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(make(reply))?;
        answer
            .await
            .map_err(|_| unavailable_because("writer thread stopped"))?
    }

    /// Hands a command to the writer without waiting.
    pub(super) fn send(&self, command: Command) -> Result<(), StoreError> {
        let tx = guard(&self.tx);
        let tx = tx
            .as_ref()
            .ok_or_else(|| unavailable_because("store closed"))?;
        tx.send(command)
            .map_err(|_| unavailable_because("writer thread stopped"))
    }

    /// Runs `f` on a pooled read-only connection on the blocking pool.
    pub(super) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Connection, &SqliteStoreConfig) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(self);
        let permit = Arc::clone(&self.reading)
            .acquire_owned()
            .await
            .map_err(|_| unavailable_because("store closed"))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let pooled = guard(&inner.readers).pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => open_reader(&inner.config.path).map_err(unavailable)?,
            };
            let result = f(&mut conn, &inner.config);
            let mut readers = guard(&inner.readers);
            if readers.len() < MAX_READERS {
                readers.push(conn);
            }
            result
        })
        .await
        .map_err(unavailable)?
    }
}
