//! The SQLite backend: events and sessions in one database file, surviving a restart.
//!
//! It owns the schema, the single writer thread with its group commit, the read-only
//! connection pool, retention and compaction of the file, and the in-process wake-ups of
//! [`EventStore::wait_for_more`]. It does not share streams between processes: the watch
//! channels that wake waiters live in this process, so two servers on one file would not wake
//! each other's readers (sharing streams between nodes is the Redis backend's job). A file is
//! open in one store at a time, enforced with an exclusive lock on `<file>.lock` held while
//! the store is open ([`SqliteOpenError::InUse`]): the writer thread keeps counters in memory
//! that a second writer on the same file would invalidate.
//!
//! Request streams record the ids of the requests they answer. Those still incomplete when
//! the file is opened were left by a process that died mid-request; the store reports them
//! once through [`EventStore::orphaned_streams`], so the server can answer them.
//!
//! # Layout
//!
//! - `chunks(stream, first_seq, last_seq, frames)`, primary key `(stream, first_seq)` (the
//!   index every read uses): the SSE frames, encoded once at append exactly as
//!   [`MemoryEventStore`] encodes them, many consecutive events of one stream per row (see
//!   `store/chunk.rs`). A file written before chunks (one `events` row per event) is converted
//!   when it is opened.
//! - `streams(stream, principal, session, kind, first_seq, completed_at, requests)`: owner
//!   and state of each stream; `first_seq` is the oldest seq still stored (or the next seq
//!   when none is); `requests` the JSON array of the request ids a Request stream answers.
//! - `tombstones(stream, principal, session)`: streams removed by retention or by a cap, so a
//!   reader hears `Expired` rather than `UnknownStream`; bounded by `max_tombstones`.
//! - `sessions(id, version, principal, standalone, last_seen)`: the [`SessionStore`] records.
//!
//! # Writes: one thread, group commit
//!
//! Every write (append, create, complete, removal, session changes) is a command sent to one
//! writer thread owning the read-write connection. The thread takes every command waiting,
//! applies them all in one transaction, commits, wakes waiters, and only then answers each
//! caller. An append to a stream this store created is pipelined (`store/pipeline.rs`): it
//! returns once queued, and its lane's watermark moves after the commit; other appends
//! return only once their transaction committed. Either way many appends share one commit,
//! so throughput does not fall to one sync per event, and nothing is readable before it is
//! committed.
//! The thread keeps a mirror of each stream's and session's counters, so appends and cap
//! checks need no reads. Between batches (and when idle) it deletes completed streams past
//! retention, a bounded number at a time, leaving tombstones, then returns a bounded number
//! of free pages to the file system (`auto_vacuum = INCREMENTAL`, set when the file is
//! created). Copying the WAL back into the file (a checkpoint, and its syncs) is a second
//! thread's job, woken after every few MiB committed, so no commit waits for one.
//!
//! # Reads
//!
//! A live reader of a stream this store created is answered from the stream's committed
//! tail (`store/pipeline.rs`) when the tail holds its cursor and nothing before the cursor
//! was evicted. Other reads run on `spawn_blocking` with read-only connections from a pool of
//! `MAX_READERS` (8), at most that many at once; WAL lets them run beside the writer. A read
//! checks retention itself, so a stream past retention reads as `Expired` even before the
//! writer has deleted it. Session records are answered from the writer's in-memory copy of
//! what it committed (this process is the file's only writer).
//!
//! # Where the code is
//!
//! `schema` opens the file (lock, settings, tables, conversion, the checkpoint thread),
//! `reads` reads ranges of a stream on read-only connections, `writer` is the writer thread;
//! this module holds the configuration, the two store handles and their trait methods.
//!
//! [`MemoryEventStore`]: super::MemoryEventStore

use crate::lock as guard;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::Connection;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tokio::sync::{oneshot, watch};

use super::StoreLimits;
use super::frame;
use super::memory::FastMap;
use super::pipeline::Pipeline;
use super::{
    EventStore, OrphanedStream, ReadBatch, SessionRecord, SessionStore, SessionUsage, StoreError,
    StoreFailure, StoredEvent, StreamKind, StreamOwner,
};

mod reads;
mod schema;
mod tasks;
mod writer;

use reads::read;
use schema::{Checkpointer, lock_store, open_reader, open_writer};
pub use tasks::SqliteTaskStore;
use writer::{Command, Progress, Started, Writer};

/// How SQLite syncs commits to disk (`PRAGMA synchronous`, always in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL`: a commit survives a crash of the process (the WAL is written
    /// before append returns), but the last transactions before a power loss or OS crash may
    /// be lost; the database itself stays consistent. Syncs only at checkpoints: fast.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is synced to disk before append returns, so it
    /// survives power loss too. One sync per group commit (not per event).
    Full,
}

/// Where and how a SQLite store keeps its data. The bounds are the [`StoreLimits`] every store
/// shares.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteStoreConfig {
    /// The database file; created if missing.
    pub path: PathBuf,
    /// What the store retains and for how long (see [`StoreLimits`]). Retention is measured on the wall clock, so it runs on across restarts.
    pub limits: StoreLimits,
    /// How commits reach the disk; see [`Durability`].
    pub durability: Durability,
}

impl SqliteStoreConfig {
    /// The default [`StoreLimits`], with `synchronous = NORMAL`, at `path`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            limits: StoreLimits::default(),
            durability: Durability::Normal,
        }
    }
}

/// Why a SQLite store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteOpenError {
    /// The file exists but is not a SQLite database (or is encrypted or corrupt).
    #[error("{} is not a SQLite database", path.display())]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },
    /// SQLite refused to open the file or set it up.
    #[error("cannot open SQLite store {}: {source}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// Another process has the store open: two writers would hand out the same sequence
    /// numbers, so a store belongs to one process at a time.
    #[error("SQLite store {} is in use by another process", path.display())]
    InUse {
        /// The database file.
        path: PathBuf,
    },
    /// The file's tasks could not be read (a record that is not a task's).
    #[error("cannot read the tasks of SQLite store {}: {source}", path.display())]
    Tasks {
        /// The database file.
        path: PathBuf,
        /// What went wrong.
        source: StoreError,
    },
    /// The lock file next to the database could not be created.
    #[error("cannot create the lock file {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The writer or checkpoint thread could not be started.
    #[error("cannot start the SQLite store's threads: {0}")]
    Thread(#[from] std::io::Error),
}

/// Opens (creating if needed) the database at `config.path` and returns its event store and
/// session store, which share the file and the writer thread.
///
/// # Errors
///
/// [`SqliteOpenError::NotADatabase`] for a file that is not a database; other errors when
/// SQLite cannot open or set up the file.
pub fn open(
    config: SqliteStoreConfig,
) -> Result<(SqliteEventStore, SqliteSessionStore), SqliteOpenError> {
    let mut config = config;
    config.limits = config.limits.normalized();
    let path = config.path.clone();
    let fail = |source: rusqlite::Error| match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            SqliteOpenError::NotADatabase { path: path.clone() }
        }
        _ => SqliteOpenError::Sqlite {
            path: path.clone(),
            source,
        },
    };
    let lock = lock_store(&config.path)?;
    let mut conn = open_writer(&config).map_err(fail)?;
    let sealing_key = schema::sealing_key(&conn).map_err(fail)?;
    let shared = Arc::new(Shared {
        progress: Mutex::default(),
        records: Mutex::default(),
        transactions: AtomicU64::new(0),
    });
    let checkpointer = Checkpointer::start(&config.path, &mut conn)?;
    let started = Writer::spawn(conn, config.clone(), Arc::clone(&shared), checkpointer).map_err(
        |error| match error {
            Started::Sql(source) => fail(source),
            Started::Thread(error) => SqliteOpenError::Thread(error),
        },
    )?;
    let (tx, thread, orphans) = (started.tx, started.thread, started.orphans);
    let inner = Arc::new(Inner {
        config,
        tx: Mutex::new(Some(tx)),
        thread: Mutex::new(Some(thread)),
        readers: Mutex::default(),
        reading: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
        shared,
        orphans: Mutex::new(orphans),
        pipeline: Pipeline::default(),
        sealing_key,
        _lock: lock,
    });
    Ok((
        SqliteEventStore {
            inner: Arc::clone(&inner),
        },
        SqliteSessionStore { inner },
    ))
}

/// Milliseconds since the Unix epoch: retention and idle expiry survive restarts.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A backend error as the store reports it, its source kept.
fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(StoreFailure::new(error))
}

/// A failure without an error value, as the store reports it.
fn unavailable_because(reason: impl Into<String>) -> StoreError {
    StoreError::Unavailable(StoreFailure::msg(reason))
}

/// `streams.kind` of a Request stream.
const REQUEST_KIND: i64 = 0;

/// `streams.kind` of a standalone stream.
const STANDALONE_KIND: i64 = 1;

/// Most read-only connections, and reads at once: a burst of readers waits for a connection
/// rather than opening (and preparing statements on) one each.
const MAX_READERS: usize = 8;

/// Most commands applied in one transaction.
const MAX_BATCH: usize = 4096;

/// Most free pages (4 KiB each) returned to the file system per sweep.
const VACUUM_PAGES: usize = 1024;

/// Most expired streams deleted between two batches, so appends never wait long for it.
const SWEEP_LIMIT: usize = 256;

/// State of a store open in this process, shared by its two halves.
struct Inner {
    config: SqliteStoreConfig,
    tx: Mutex<Option<mpsc::Sender<Command>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    /// One permit per read at once ([`MAX_READERS`]).
    reading: Arc<tokio::sync::Semaphore>,
    shared: Arc<Shared>,
    /// The Request streams that were incomplete when the store opened, until asked for.
    orphans: Mutex<Vec<OrphanedStream>>,
    /// The append pipelines of the streams created since the store opened.
    pipeline: Pipeline,
    /// The file's sealing key ([`SessionStore::sealing_key`]), read when it opened.
    sealing_key: [u8; 32],
    /// Held while the store is open (dropped after the writer thread is joined).
    _lock: std::fs::File,
}

/// What the writer thread publishes to the async side.
struct Shared {
    /// One watch per stream the writer holds: updated after each commit, dropped with the
    /// stream (which ends every wait on it).
    progress: Mutex<HashMap<StreamId, watch::Sender<Progress>>>,
    /// Every session record in the file, as last committed: the one writer keeps it, so
    /// looking a session up on every request needs no read.
    records: Mutex<FastMap<SessionId, SessionRecord>>,
    /// Transactions committed.
    transactions: AtomicU64,
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
    fn read_tail(
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
    async fn write<T: Send + 'static>(
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
    fn send(&self, command: Command) -> Result<(), StoreError> {
        let tx = guard(&self.tx);
        let tx = tx
            .as_ref()
            .ok_or_else(|| unavailable_because("store closed"))?;
        tx.send(command)
            .map_err(|_| unavailable_because("writer thread stopped"))
    }

    /// Runs `f` on a pooled read-only connection on the blocking pool.
    async fn read<T: Send + 'static>(
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

/// The SQLite [`EventStore`]. Cheap to share behind an `Arc`; dropping the last handle (this
/// and its [`SqliteSessionStore`]) stops the writer thread after its pending commands.
pub struct SqliteEventStore {
    inner: Arc<Inner>,
}

/// The SQLite [`SessionStore`], sharing its event store's file and writer thread. Idle expiry
/// is measured on the wall clock (so it runs on across restarts), not tokio's.
pub struct SqliteSessionStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for SqliteEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteEventStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.inner.config.path)
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

impl SqliteSessionStore {
    /// The task store of the same file, its tasks loaded. Make it once per open store: the
    /// tasks left unfinished by an earlier process are its to fail
    /// ([`TaskStore::fail_orphans`](crate::store::TaskStore::fail_orphans)).
    ///
    /// # Errors
    ///
    /// When the file's tasks cannot be read.
    pub fn task_store(&self) -> Result<SqliteTaskStore, StoreError> {
        SqliteTaskStore::load(Arc::clone(&self.inner))
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    /// Inserting an id that exists replaces its record and counts as activity.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError> {
        self.inner
            .write(|reply| Command::InsertSession { record, reply })
            .await
    }

    /// From the writer's copy of the committed records: no read.
    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        Ok(guard(&self.inner.shared.records).get(id).cloned())
    }

    /// Touching an unknown session does nothing.
    /// Returns once the writer has the touch, without waiting for its commit: activity only
    /// pushes back idle expiry, which a touch lost in a crash merely brings forward, and every
    /// request touches its session, so waiting would put a commit on every request's path.
    /// The writer applies commands in order, so a later `expire_idle` sees it.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError> {
        let (reply, _answer) = oneshot::channel();
        self.inner.send(Command::Touch {
            id: id.clone(),
            reply,
        })
    }

    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError> {
        let id = id.clone();
        self.inner
            .write(|reply| Command::RemoveRecord { id, reply })
            .await
    }

    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError> {
        self.inner
            .write(|reply| Command::ExpireIdle { idle, reply })
            .await
    }

    async fn count(&self) -> Result<usize, StoreError> {
        Ok(guard(&self.inner.shared.records).len())
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        Ok(guard(&self.inner.shared.records)
            .values()
            .filter(|record| &*record.principal == principal)
            .count())
    }

    /// Made when the file was created and kept in it: the same after every restart.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        Ok(self.inner.sealing_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn pages(path: &Path) -> (i64, i64) {
        let conn = open_reader(path).unwrap();
        let count = conn
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        let free = conn
            .query_row("PRAGMA freelist_count", [], |row| row.get(0))
            .unwrap();
        (count, free)
    }

    /// Retention deletes a completed stream in the background and the incremental vacuum
    /// gives its pages back: the database shrinks with no command sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sweep_deletes_and_compacts() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("t.db");
        let (events, _sessions) = open({
            let mut config = SqliteStoreConfig::new(&path);
            config.limits.retention = Duration::from_millis(50);
            config
        })
        .unwrap();
        let owner = StreamOwner {
            principal: Arc::from("default"),
            session: SessionId::generate(),
        };
        let stream = events
            .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
            .await
            .unwrap();
        for _ in 0..500 {
            // Random hex: chunks of it are stored at about their size, not packed away.
            let mut random = [0u8; 1000];
            getrandom::fill(&mut random).unwrap();
            let hex: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
            let pad = format!(r#"{{"pad":"{hex}"}}"#);
            events.append(stream, pad.as_bytes()).await.unwrap();
        }
        events.complete(stream).await.unwrap();
        let (full, _) = pages(&path);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (after, free) = pages(&path);
        assert!(
            after * 4 < full,
            "{full} pages before, {after} after the sweep"
        );
        assert_eq!(free, 0, "free pages returned");
    }
}
