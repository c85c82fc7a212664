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
//! [`MemoryEventStore`]: super::MemoryEventStore

use crate::lock as guard;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tether_proto::version::ProtocolVersion;
use tokio::sync::{oneshot, watch};

use super::StoreLimits;
use super::memory::FastMap;
use super::pipeline::{self, CompletionReply, Lane, Pipeline, Queued};
use super::{
    EventStore, OrphanedStream, ReadBatch, SessionRecord, SessionStore, SessionUsage, StoreError,
    StoreFailure, StoredEvent, StreamKind, StreamOwner,
};
use super::{chunk, frame};

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
    let conn = open_writer(&config).map_err(fail)?;
    let shared = Arc::new(Shared {
        progress: Mutex::default(),
        records: Mutex::default(),
        transactions: AtomicU64::new(0),
    });
    let mut writer = Writer {
        conn,
        config: config.clone(),
        shared: Arc::clone(&shared),
        streams: FastMap::default(),
        sessions: FastMap::default(),
        touched: Vec::new(),
        record_changes: Vec::new(),
        orphans: Vec::new(),
        pending: Vec::new(),
        inserted: 0,
        chunk: Vec::new(),
        batch_started: 0,
        checkpointer: Checkpointer::start(&config.path)?,
    };
    writer.reload().map_err(fail)?;
    writer.publish_all();
    let orphans = std::mem::take(&mut writer.orphans);
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("tether-sqlite-writer".into())
        .spawn(move || writer.run(&rx))?;
    let inner = Arc::new(Inner {
        config,
        tx: Mutex::new(Some(tx)),
        thread: Mutex::new(Some(thread)),
        readers: Mutex::default(),
        reading: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
        shared,
        orphans: Mutex::new(orphans),
        pipeline: Pipeline::default(),
        _lock: lock,
    });
    Ok((
        SqliteEventStore {
            inner: Arc::clone(&inner),
        },
        SqliteSessionStore { inner },
    ))
}

/// Takes the store's lock file (`<path>.lock`), held for as long as the store is open.
fn lock_store(path: &Path) -> Result<std::fs::File, SqliteOpenError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|source| SqliteOpenError::Lock {
            path: lock_path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(SqliteOpenError::InUse {
            path: path.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(SqliteOpenError::Lock {
            path: lock_path,
            source,
        }),
    }
}

fn open_writer(config: &SqliteStoreConfig) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        &config.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    // Room for every statement the writer prepares, so none is prepared again per batch.
    conn.set_prepared_statement_cache_capacity(64);
    // The first statement that reads the file: a file that is not a database fails here.
    // `auto_vacuum` takes effect only on a new file, before WAL mode writes its header.
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    let synchronous = match config.durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    // Checkpoints run on their own thread (`Checkpointer`), not inside the writer's commits;
    // the page cache holds a large batch's pages, so a transaction does not spill mid-way.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous};
         PRAGMA wal_autocheckpoint = 0;
         PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};
         PRAGMA cache_size = -{WRITER_CACHE_KIB};
         CREATE TABLE IF NOT EXISTS streams (
             stream TEXT PRIMARY KEY NOT NULL,
             principal TEXT NOT NULL,
             session TEXT NOT NULL,
             kind INTEGER NOT NULL,
             first_seq INTEGER NOT NULL,
             completed_at INTEGER,
             requests TEXT NOT NULL DEFAULT '[]'
         );
         CREATE INDEX IF NOT EXISTS streams_by_session ON streams (session);
         CREATE TABLE IF NOT EXISTS chunks (
             stream TEXT NOT NULL,
             first_seq INTEGER NOT NULL,
             last_seq INTEGER NOT NULL,
             frames BLOB NOT NULL,
             PRIMARY KEY (stream, first_seq)
         );
         CREATE TABLE IF NOT EXISTS tombstones (
             stream TEXT PRIMARY KEY NOT NULL,
             principal TEXT NOT NULL,
             session TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS tombstones_by_session ON tombstones (session);
         CREATE TABLE IF NOT EXISTS sessions (
             id TEXT PRIMARY KEY NOT NULL,
             version TEXT NOT NULL,
             principal TEXT NOT NULL,
             standalone TEXT NOT NULL,
             last_seen INTEGER NOT NULL
         );"
    ))?;
    convert_events_table(&conn)?;
    Ok(conn)
}

/// Converts a file written before chunks: each row of its `events(stream, seq, frame)`
/// table becomes a chunk of one event, in the order they were appended, and the table goes.
/// One transaction: a crash leaves the file as it was, converted at the next open.
fn convert_events_table(conn: &Connection) -> rusqlite::Result<()> {
    let old: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events')",
        [],
        |row| row.get(0),
    )?;
    if !old {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let converted = (|| {
        let mut read = conn.prepare("SELECT stream, seq, frame FROM events ORDER BY rowid")?;
        let mut write = conn.prepare(
            "INSERT INTO chunks (stream, first_seq, last_seq, frames) VALUES (?1, ?2, ?2, ?3)",
        )?;
        let mut rows = read.query([])?;
        let mut encoded = Vec::new();
        while let Some(row) = rows.next()? {
            let stream: String = row.get(0)?;
            let seq: i64 = row.get(1)?;
            encoded.clear();
            chunk::push(&mut encoded, row.get_ref(2)?.as_blob()?);
            write.execute(params![stream, seq, encoded])?;
        }
        drop(rows);
        conn.execute_batch("DROP TABLE events; COMMIT")
    })();
    if converted.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    converted
}

/// Bytes of WAL the writer commits (estimated from what it inserts) before it asks the
/// checkpointer to copy the WAL back into the database file: SQLite's own auto-checkpoint
/// threshold (1000 pages).
const CHECKPOINT_AFTER_BYTES: u64 = 4 * 1024 * 1024;

/// The size the WAL file is truncated to after a checkpoint let it restart.
const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// The writer connection's page cache, in KiB.
const WRITER_CACHE_KIB: u64 = 16 * 1024;

/// Copies the WAL back into the database file on a thread of its own, so the writer's commits
/// never wait for a checkpoint or its syncs. PASSIVE checkpoints run beside the writer and
/// the readers without taking a lock they wait on.
struct Checkpointer {
    signal: Arc<(Mutex<CheckpointState>, std::sync::Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct CheckpointState {
    /// WAL bytes committed since the last checkpoint began (an estimate).
    committed: u64,
    stop: bool,
}

impl Checkpointer {
    fn start(path: &Path) -> std::io::Result<Self> {
        let signal: Arc<(Mutex<CheckpointState>, std::sync::Condvar)> = Arc::default();
        let shared = Arc::clone(&signal);
        let path = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("tether-sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&path, &shared))?;
        Ok(Self {
            signal,
            thread: Some(thread),
        })
    }

    /// Counts `bytes` committed to the WAL; wakes the checkpointer past the threshold.
    fn committed(&self, bytes: u64) {
        let (state, wake) = &*self.signal;
        let mut state = guard(state);
        state.committed += bytes;
        if state.committed >= CHECKPOINT_AFTER_BYTES {
            wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (state, wake) = &*self.signal;
        guard(state).stop = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn checkpoint_loop(path: &Path, signal: &(Mutex<CheckpointState>, std::sync::Condvar)) {
    let conn = match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(error) => {
            tracing::error!(%error, "sqlite store: no checkpoint connection; the WAL will grow until the store closes");
            return;
        }
    };
    let (state, wake) = signal;
    loop {
        {
            let mut state = guard(state);
            while !state.stop && state.committed < CHECKPOINT_AFTER_BYTES {
                state = wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if state.stop {
                return;
            }
            state.committed = 0;
        }
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(%error, "sqlite store: checkpoint failed; retried after the next commits");
        }
    }
}

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
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
}

/// A stored frame as an event: the message is the `data` line's value.
fn stored_event(id: EventId, frame: Bytes) -> StoredEvent {
    StoredEvent::new(id, frame, None)
}

/// One read, in one read transaction so the stream row and its events agree.
fn read(
    conn: &mut Connection,
    config: &SqliteStoreConfig,
    owner: &StreamOwner,
    stream: StreamId,
    from: Option<u64>,
    limit: usize,
) -> Result<ReadBatch, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    let row = tx
        .prepare_cached(
            "SELECT principal, session, first_seq, completed_at FROM streams WHERE stream = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([stream.as_str()], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                    ))
                })
                .optional()
        })
        .map_err(unavailable)?;
    let Some((principal, session, first_seq, completed_at)) = row else {
        // Gone: a tombstone of this owner says it expired.
        let tombstone = tx
            .prepare_cached("SELECT principal, session FROM tombstones WHERE stream = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([stream.as_str()], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                    })
                    .optional()
            })
            .map_err(unavailable)?;
        return Err(match tombstone {
            Some((p, s)) if *p == *owner.principal && s == owner.session.as_str() => {
                StoreError::Expired
            }
            _ => StoreError::UnknownStream,
        });
    };
    if session != owner.session.as_str() || *principal != *owner.principal {
        return Err(StoreError::UnknownStream);
    }
    if completed_at.is_some_and(|at| now_ms().saturating_sub(at) >= ms(config.limits.retention)) {
        return Err(StoreError::Expired);
    }
    let complete = completed_at.is_some();
    let Some(from) = from else {
        return Ok(ReadBatch {
            events: Vec::new(),
            complete,
        });
    };
    let first_seq = u64::try_from(first_seq).unwrap_or(0);
    if from < first_seq {
        return Err(StoreError::Expired);
    }
    // From the chunk holding `from` (the last one starting at or before it) on, until one
    // more event than asked for tells whether the batch reaches the end.
    let mut events = Vec::new();
    let mut more = false;
    {
        let mut statement = tx
            .prepare_cached(
                "SELECT first_seq, frames FROM chunks WHERE stream = ?1 AND first_seq >= coalesce(
                     (SELECT max(first_seq) FROM chunks WHERE stream = ?1 AND first_seq <= ?2), ?2)
                 ORDER BY first_seq",
            )
            .map_err(unavailable)?;
        let mut rows = statement
            .query(params![
                stream.as_str(),
                i64::try_from(from).unwrap_or(i64::MAX)
            ])
            .map_err(unavailable)?;
        'rows: while let Some(row) = rows.next().map_err(unavailable)? {
            let first: i64 = row.get(0).map_err(unavailable)?;
            let first = u64::try_from(first).unwrap_or(0);
            let blob = row
                .get_ref(1)
                .and_then(|value| Ok(value.as_blob()?))
                .map_err(unavailable)?;
            for (seq, frame) in (first..).zip(chunk::frames(Bytes::copy_from_slice(blob))) {
                let frame = frame.map_err(unavailable)?;
                if seq < from {
                    continue;
                }
                if events.len() == limit {
                    more = true;
                    break 'rows;
                }
                events.push(stored_event(EventId::new(stream, seq), frame));
            }
        }
    }
    drop(tx);
    Ok(ReadBatch {
        events,
        complete: complete && !more,
    })
}

// ---------------------------------------------------------------------------------------------
// The writer thread

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

enum Command {
    CreateStream {
        owner: StreamOwner,
        kind: StreamKind,
        retry: Duration,
        /// The request ids, as a JSON array.
        requests: String,
        reply: Reply<StreamId>,
    },
    Append {
        stream: StreamId,
        message: String,
        reply: Reply<EventId>,
    },
    /// A lane with pipelined appends queued on it (`Pipeline::append_to_lane`): the writer
    /// takes them all; they are answered through the lane after the commit.
    Queued(Arc<Lane>),
    Complete {
        stream: StreamId,
        /// The stream's lane, for a pipelined stream: a completion after a failed commit on
        /// it is refused, so that no stream ends with a gap before its end.
        lane: Option<Arc<Lane>>,
        reply: CompletionReply,
    },
    RemoveSession {
        session: SessionId,
        reply: Reply<()>,
    },
    Usage {
        session: SessionId,
        reply: Reply<SessionUsage>,
    },
    InsertSession {
        record: SessionRecord,
        reply: Reply<()>,
    },
    Touch {
        id: SessionId,
        reply: Reply<()>,
    },
    RemoveRecord {
        id: SessionId,
        reply: Reply<bool>,
    },
    ExpireIdle {
        idle: Duration,
        reply: Reply<Vec<SessionId>>,
    },
}

impl Command {
    /// Answers a command that was not applied with `error`.
    fn refuse(self, error: &StoreError) {
        let error = error.clone();
        match self {
            Self::Queued(lane) => {
                // Dropped after the lane failed, so none of them is ever readable.
                let queued = lane.take_queued();
                lane.fail(&error);
                drop(queued);
            }
            Self::CreateStream { reply, .. } => drop(reply.send(Err(error))),
            Self::Append { reply, .. } => drop(reply.send(Err(error))),
            Self::Complete { reply, .. }
            | Self::RemoveSession { reply, .. }
            | Self::InsertSession { reply, .. }
            | Self::Touch { reply, .. } => drop(reply.send(Err(error))),
            Self::Usage { reply, .. } => drop(reply.send(Err(error))),
            Self::RemoveRecord { reply, .. } => drop(reply.send(Err(error))),
            Self::ExpireIdle { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

/// Tells a waiting caller its command's result, given the transaction's failure if any.
type Respond = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// An answer held until its transaction commits (or fails, and every answer says so).
enum Answer {
    /// A caller waiting for its command's result.
    Reply(Respond),
    /// Pipelined appends of one lane stored in this transaction, reported to it (those
    /// dropped are not among them: see [`Writer::apply_queued`]).
    Queued(Vec<Queued>),
}

fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Answer {
    Answer::Reply(Box::new(move |failed: Option<&StoreError>| {
        let _ = reply.send(match failed {
            None => result,
            Some(error) => Err(error.clone()),
        });
    }))
}

/// What waiters watch.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// The oldest seq stored: a tail read before it must hear `Expired` from the database.
    first_seq: u64,
    last_seq: u64,
    complete: bool,
}

impl Progress {
    fn satisfies(self, after: u64) -> bool {
        self.complete || self.last_seq > after
    }
}

/// The writer's mirror of one stream.
struct StreamState {
    session: SessionId,
    principal: Arc<str>,
    first_seq: u64,
    next_seq: u64,
    events: usize,
    bytes: usize,
    complete: bool,
}

impl StreamState {
    fn progress(&self) -> Progress {
        Progress {
            first_seq: self.first_seq,
            last_seq: self.next_seq.saturating_sub(1),
            complete: self.complete,
        }
    }
}

/// The writer's mirror of one session's streams and usage.
#[derive(Default)]
struct SessionState {
    usage: SessionUsage,
    /// Completed streams, oldest completion first, with their completion times.
    completed: VecDeque<(i64, StreamId)>,
    /// `(stream, seq, frame bytes)` in append order, for evicting the oldest live event;
    /// entries of events removed otherwise are stale and skipped.
    appended: VecDeque<(StreamId, u64, usize)>,
}

struct Writer {
    conn: Connection,
    config: SqliteStoreConfig,
    shared: Arc<Shared>,
    streams: FastMap<StreamId, StreamState>,
    sessions: FastMap<SessionId, SessionState>,
    /// Streams whose progress changed in this batch (published after commit).
    touched: Vec<StreamId>,
    /// Session records this batch stored (`Some`) or removed (`None`), applied to
    /// [`Shared::records`] after commit.
    record_changes: Vec<(SessionId, Option<SessionRecord>)>,
    /// Incomplete Request streams found by [`Writer::reload`].
    orphans: Vec<OrphanedStream>,
    /// Events accounted for but not yet inserted (pipelined or not): written many rows per
    /// statement ([`Writer::insert_pending`]) before any other command, eviction or commit.
    pending: Vec<(StreamId, u64, Bytes)>,
    /// Bytes inserted in the open transaction: what the checkpointer is told it committed.
    inserted: u64,
    /// The chunk being encoded, kept between commits for its allocation.
    chunk: Vec<u8>,
    /// When the current batch began (ms since the epoch): the time retention is checked at
    /// for the pipelined appends in it, rather than reading the clock per event.
    batch_started: i64,
    checkpointer: Checkpointer,
}

type Sql<T> = rusqlite::Result<T>;

impl Writer {
    fn run(mut self, rx: &mpsc::Receiver<Command>) {
        let period = (self.config.limits.retention / 10)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut last_sweep = std::time::Instant::now();
        loop {
            let first = match rx.recv_timeout(period) {
                Ok(command) => command,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.sweep();
                    last_sweep = std::time::Instant::now();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(command) => batch.push(command),
                    Err(_) => break,
                }
            }
            self.run_batch(batch);
            if last_sweep.elapsed() >= period {
                self.sweep();
                last_sweep = std::time::Instant::now();
            }
        }
    }

    fn run_batch(&mut self, batch: Vec<Command>) {
        self.batch_started = now_ms();
        let mut answers = Vec::with_capacity(batch.len());
        let mut commands = batch.into_iter();
        let result = self.transaction(|writer| {
            for command in commands.by_ref() {
                answers.push(writer.apply(command)?);
            }
            Ok(())
        });
        let failed = result.err().map(unavailable);
        if let Some(error) = &failed {
            // Not applied: the transaction could not begin, or failed before reaching them.
            for command in commands {
                command.refuse(error);
            }
        }
        let mut committed = Vec::new();
        for answer in answers {
            match answer {
                Answer::Reply(answer) => answer(failed.as_ref()),
                Answer::Queued(queued) => match &failed {
                    Some(error) => {
                        if let Some(first) = queued.first() {
                            first.lane.fail(error);
                        }
                    }
                    None => committed.extend(queued),
                },
            }
        }
        pipeline::report_committed(committed);
    }

    /// Runs `f` in one transaction; on failure rolls back and reloads the mirror.
    fn transaction(&mut self, f: impl FnOnce(&mut Self) -> Sql<()>) -> Sql<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let result = f(self)
            .and_then(|()| self.insert_pending())
            .and_then(|()| self.conn.execute_batch("COMMIT"));
        match result {
            Ok(()) => {
                self.shared.transactions.fetch_add(1, Ordering::Relaxed);
                self.publish_records();
                self.publish();
                // A page for the commit's own bookkeeping, beside the rows.
                self.checkpointer
                    .committed(std::mem::take(&mut self.inserted) + 4096);
                Ok(())
            }
            Err(error) => {
                self.inserted = 0;
                self.record_changes.clear();
                let _ = self.conn.execute_batch("ROLLBACK");
                self.touched.clear();
                self.pending.clear();
                if let Err(reload) = self.reload() {
                    tracing::error!(%reload, "sqlite store: reloading after a failed batch");
                }
                self.publish_all();
                Err(error)
            }
        }
    }

    /// Applies the session records this batch committed to the shared copy.
    fn publish_records(&mut self) {
        if self.record_changes.is_empty() {
            return;
        }
        let mut records = guard(&self.shared.records);
        for (id, record) in self.record_changes.drain(..) {
            match record {
                Some(record) => {
                    records.insert(id, record);
                }
                None => {
                    records.remove(&id);
                }
            }
        }
    }

    /// Wakes the waiters of the streams this batch changed.
    fn publish(&mut self) {
        if self.touched.is_empty() {
            return;
        }
        let mut progress = guard(&self.shared.progress);
        for stream in self.touched.drain(..) {
            match self.streams.get(&stream) {
                Some(state) => {
                    let value = state.progress();
                    match progress.get(&stream) {
                        Some(sender) => {
                            sender.send_replace(value);
                        }
                        None => {
                            progress.insert(stream, watch::Sender::new(value));
                        }
                    }
                }
                // Dropping the sender ends every wait on it.
                None => {
                    progress.remove(&stream);
                }
            }
        }
    }

    /// Replaces every watch with the mirror's state (after open or a failed batch).
    fn publish_all(&mut self) {
        self.touched.clear();
        let mut progress = guard(&self.shared.progress);
        progress.retain(|stream, _| self.streams.contains_key(stream));
        for (stream, state) in &self.streams {
            match progress.get(stream) {
                Some(sender) => {
                    sender.send_replace(state.progress());
                }
                None => {
                    progress.insert(*stream, watch::Sender::new(state.progress()));
                }
            }
        }
    }

    /// Rebuilds the mirror from the database.
    fn reload(&mut self) -> Sql<()> {
        self.streams.clear();
        self.sessions.clear();
        self.orphans.clear();
        let mut completed = Vec::new();
        {
            let mut statement = self.conn.prepare(
                "SELECT stream, principal, session, first_seq, completed_at, kind, requests
                 FROM streams",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (Ok(stream), Ok(session)) = (
                    StreamId::parse(&row.get::<_, String>(0)?),
                    SessionId::parse(&row.get::<_, String>(2)?),
                ) else {
                    continue;
                };
                let principal: String = row.get(1)?;
                let first_seq = u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0);
                let completed_at: Option<i64> = row.get(4)?;
                let kind: i64 = row.get(5)?;
                let principal: Arc<str> = Arc::from(principal);
                if kind == REQUEST_KIND && completed_at.is_none() {
                    let requests: String = row.get(6)?;
                    self.orphans.push(OrphanedStream {
                        owner: StreamOwner {
                            principal: Arc::clone(&principal),
                            session: session.clone(),
                        },
                        stream,
                        // Written by this module from `RequestId`s: unreadable only if
                        // someone edited the file, and then there is nobody to name.
                        requests: serde_json::from_str(&requests).unwrap_or_default(),
                    });
                }
                let usage = &mut self.sessions.entry(session.clone()).or_default().usage;
                usage.streams += 1;
                if let Some(at) = completed_at {
                    completed.push((at, stream, session.clone()));
                }
                self.streams.insert(
                    stream,
                    StreamState {
                        session,
                        principal,
                        first_seq,
                        next_seq: first_seq,
                        events: 0,
                        bytes: 0,
                        complete: completed_at.is_some(),
                    },
                );
            }
        }
        completed.sort_by_key(|(at, _, _)| *at);
        for (at, stream, session) in completed {
            if let Some(state) = self.sessions.get_mut(&session) {
                state.completed.push_back((at, stream));
            }
        }
        let mut records = FastMap::default();
        {
            let mut statement = self
                .conn
                .prepare("SELECT id, version, principal, standalone FROM sessions")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let parsed = (
                    SessionId::parse(&row.get::<_, String>(0)?),
                    ProtocolVersion::parse(&row.get::<_, String>(1)?),
                    StreamId::parse(&row.get::<_, String>(3)?),
                );
                // Written by this module: unreadable only if someone edited the file.
                let (Ok(id), Ok(version), Ok(standalone)) = parsed else {
                    continue;
                };
                let principal: Arc<str> = Arc::from(row.get::<_, String>(2)?);
                records.insert(
                    id.clone(),
                    SessionRecord {
                        id,
                        version,
                        principal,
                        standalone,
                    },
                );
            }
        }
        *guard(&self.shared.records) = records;
        // Chunks in the order they were inserted: each session's events in append order,
        // up to the order of streams within one commit.
        let mut statement = self
            .conn
            .prepare("SELECT stream, first_seq, frames FROM chunks ORDER BY rowid")?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(stream) = StreamId::parse(&row.get::<_, String>(0)?) else {
                continue;
            };
            let first = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            let blob = Bytes::copy_from_slice(row.get_ref(2)?.as_blob()?);
            for (seq, frame) in (first..).zip(chunk::frames(blob)) {
                let Ok(frame) = frame else {
                    tracing::error!(%stream, "sqlite store: a stored chunk is malformed; its events after the last whole one are left out");
                    break;
                };
                // The head of a chunk whose first events were evicted.
                if seq < state.first_seq {
                    continue;
                }
                let len = frame.len();
                state.next_seq = state.next_seq.max(seq + 1);
                state.events += 1;
                state.bytes += len;
                if let Some(session) = self.sessions.get_mut(&state.session) {
                    session.usage.events += 1;
                    session.usage.bytes += len;
                    session.appended.push_back((stream, seq, len));
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, command: Command) -> Sql<Answer> {
        if !matches!(command, Command::Queued(_)) {
            // Every other command may read or remove events: they must be in the table.
            self.insert_pending()?;
        }
        Ok(match command {
            Command::CreateStream {
                owner,
                kind,
                retry,
                requests,
                reply,
            } => {
                let result = self.create_stream(&owner, kind, retry, &requests)?;
                answer(reply, result)
            }
            Command::Append {
                stream,
                message,
                reply,
            } => {
                let result = self.append(stream, &message)?;
                answer(reply, result)
            }
            Command::Queued(lane) => {
                let queued = lane.take_queued();
                let mut stored = Vec::with_capacity(queued.len());
                for append in queued {
                    match self.apply_queued(&append) {
                        Ok(true) => stored.push(append),
                        Ok(false) => {}
                        Err(error) => {
                            lane.fail(&unavailable_because(error.to_string()));
                            return Err(error);
                        }
                    }
                }
                Answer::Queued(stored)
            }
            Command::Complete {
                stream,
                lane,
                reply,
            } => {
                if let Some(failure) = lane.and_then(|lane| lane.failure()) {
                    answer(reply, Err(failure))
                } else {
                    let result = self.complete(stream)?;
                    answer(reply, result)
                }
            }
            Command::RemoveSession { session, reply } => {
                self.remove_session(&session)?;
                answer(reply, Ok(()))
            }
            Command::Usage { session, reply } => {
                self.expire(&session, now_ms())?;
                let usage = self
                    .sessions
                    .get(&session)
                    .map(|state| state.usage)
                    .unwrap_or_default();
                answer(reply, Ok(usage))
            }
            Command::InsertSession { record, reply } => {
                self.conn
                    .prepare_cached(
                        "INSERT OR REPLACE INTO sessions (id, version, principal, standalone, last_seen)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![
                        record.id.as_str(),
                        record.version.to_string(),
                        &*record.principal,
                        record.standalone.as_str(),
                        now_ms()
                    ])?;
                self.record_changes.push((record.id.clone(), Some(record)));
                answer(reply, Ok(()))
            }
            Command::Touch { id, reply } => {
                self.conn
                    .prepare_cached("UPDATE sessions SET last_seen = ?2 WHERE id = ?1")?
                    .execute(params![id.as_str(), now_ms()])?;
                answer(reply, Ok(()))
            }
            Command::RemoveRecord { id, reply } => {
                let removed = self
                    .conn
                    .prepare_cached("DELETE FROM sessions WHERE id = ?1")?
                    .execute([id.as_str()])?;
                self.record_changes.push((id, None));
                answer(reply, Ok(removed > 0))
            }
            Command::ExpireIdle { idle, reply } => {
                let cutoff = now_ms().saturating_sub(ms(idle));
                let mut expired = Vec::new();
                {
                    let mut statement = self
                        .conn
                        .prepare_cached("DELETE FROM sessions WHERE last_seen < ?1 RETURNING id")?;
                    let mut rows = statement.query([cutoff])?;
                    while let Some(row) = rows.next()? {
                        if let Ok(id) = SessionId::parse(&row.get::<_, String>(0)?) {
                            expired.push(id);
                        }
                    }
                }
                self.record_changes
                    .extend(expired.iter().map(|id| (id.clone(), None)));
                answer(reply, Ok(expired))
            }
        })
    }

    fn create_stream(
        &mut self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: Duration,
        requests: &str,
    ) -> Sql<Result<StreamId, StoreError>> {
        let stream = StreamId::generate();
        let frame = frame::priming_frame(stream, retry);
        if frame.len() > self.config.limits.max_bytes_per_session {
            return Ok(Err(StoreError::EventTooLarge));
        }
        self.expire(&owner.session, now_ms())?;
        loop {
            let streams = self
                .sessions
                .get(&owner.session)
                .map_or(0, |state| state.usage.streams);
            if streams < self.config.limits.max_streams_per_session {
                break;
            }
            if !self.evict_oldest_completed(&owner.session)? {
                return Ok(Err(StoreError::TooManyStreams));
            }
        }
        let kind = match kind {
            StreamKind::Request => REQUEST_KIND,
            StreamKind::Standalone => STANDALONE_KIND,
        };
        self.conn
            .prepare_cached(
                "INSERT INTO streams (stream, principal, session, kind, first_seq, completed_at, requests)
                 VALUES (?1, ?2, ?3, ?4, 0, NULL, ?5)",
            )?
            .execute(params![
                stream.as_str(),
                &*owner.principal,
                owner.session.as_str(),
                kind,
                requests
            ])?;
        let len = frame.len();
        self.pending.push((stream, EventId::PRIMING_SEQ, frame));
        self.streams.insert(
            stream,
            StreamState {
                session: owner.session.clone(),
                principal: Arc::clone(&owner.principal),
                first_seq: 0,
                next_seq: 1,
                events: 1,
                bytes: len,
                complete: false,
            },
        );
        let session = self.sessions.entry(owner.session.clone()).or_default();
        session.usage.streams += 1;
        session.usage.events += 1;
        session.usage.bytes += len;
        session.appended.push_back((stream, 0, len));
        self.touched.push(stream);
        self.evict_to_caps(&owner.session)?;
        Ok(Ok(stream))
    }

    fn append(&mut self, stream: StreamId, message: &str) -> Sql<Result<EventId, StoreError>> {
        let Some(session) = self.streams.get(&stream).map(|state| state.session.clone()) else {
            return self.gone_for_append(stream);
        };
        self.expire(&session, now_ms())?;
        let Some(state) = self.streams.get(&stream) else {
            return self.gone_for_append(stream);
        };
        if state.complete {
            return Ok(Err(StoreError::Completed));
        }
        let id = EventId::new(stream, state.next_seq);
        let frame = frame::message_frame(id, message);
        let len = frame.len();
        if len > self.config.limits.max_bytes_per_session {
            return Ok(Err(StoreError::EventTooLarge));
        }
        self.add_event(&session, id, frame)?;
        Ok(Ok(id))
    }

    /// Stores a pipelined append. The pipeline hands out seqs in order and refuses what this
    /// would refuse, so a frame that does not fit here is dropped: its lane failed earlier
    /// (the frames queued behind a failed commit), its session was removed, or, were the
    /// pipeline wrong, its seq is not the next one, which fails its lane.
    /// Returns whether it was stored.
    fn apply_queued(&mut self, queued: &Queued) -> Sql<bool> {
        if queued.lane.failure().is_some() {
            return Ok(false);
        }
        let stream = queued.id.stream;
        let Some(state) = self.streams.get(&stream) else {
            return Ok(false);
        };
        if state.complete {
            return Ok(false);
        }
        if state.next_seq != queued.id.seq {
            tracing::error!(%stream, expected = state.next_seq, got = queued.id.seq, "sqlite store: pipelined append out of order");
            queued.lane.fail(&unavailable_because(
                "a pipelined append arrived out of order",
            ));
            return Ok(false);
        }
        let session = queued.lane.session();
        self.expire(session, self.batch_started)?;
        self.add_event(session, queued.id, queued.frame.clone())?;
        Ok(true)
    }

    /// Inserts the events accounted for so far: each stream's consecutive events as few
    /// chunks as [`chunk::MAX_EVENTS`] and [`chunk::MAX_BYTES`] allow.
    fn insert_pending(&mut self) -> Sql<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut pending = std::mem::take(&mut self.pending);
        let cuts = chunk::cut(&mut pending, |(stream, seq, frame)| {
            (*stream, *seq, frame.len())
        });
        let mut statement = self.conn.prepare_cached(
            "INSERT INTO chunks (stream, first_seq, last_seq, frames) VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut encoded = std::mem::take(&mut self.chunk);
        let mut inserted = 0;
        for cut in cuts {
            encoded.clear();
            for (_, _, frame) in &pending[cut.range.clone()] {
                chunk::push(&mut encoded, frame);
            }
            statement.execute(params![
                cut.stream.as_str(),
                i64::try_from(cut.first).unwrap_or(i64::MAX),
                i64::try_from(cut.last()).unwrap_or(i64::MAX),
                &encoded[..]
            ])?;
            inserted += encoded.len() as u64 + 64;
        }
        self.inserted += inserted;
        // The buffer is kept for the next commit; one very large frame does not pin memory.
        if encoded.capacity() <= 2 * chunk::MAX_BYTES {
            self.chunk = encoded;
        }
        Ok(())
    }

    /// Adds the next event of a stream of `session`: its row to the pending inserts, its
    /// counts to the mirror; then evicts to the caps.
    fn add_event(&mut self, session: &SessionId, id: EventId, frame: Bytes) -> Sql<()> {
        let len = frame.len();
        self.pending.push((id.stream, id.seq, frame));
        if let Some(state) = self.streams.get_mut(&id.stream) {
            state.next_seq += 1;
            state.events += 1;
            state.bytes += len;
        }
        if !self.sessions.contains_key(session) {
            self.sessions
                .insert(session.clone(), SessionState::default());
        }
        if let Some(usage) = self.sessions.get_mut(session) {
            usage.usage.events += 1;
            usage.usage.bytes += len;
            usage.appended.push_back((id.stream, id.seq, len));
        }
        // One wake-up per stream and batch run, not per event.
        if self.touched.last() != Some(&id.stream) {
            self.touched.push(id.stream);
        }
        self.evict_to_caps(session)
    }

    fn gone_for_append(&self, stream: StreamId) -> Sql<Result<EventId, StoreError>> {
        Ok(Err(if self.tombstoned(stream)? {
            StoreError::Completed
        } else {
            StoreError::UnknownStream
        }))
    }

    fn complete(&mut self, stream: StreamId) -> Sql<Result<(), StoreError>> {
        let now = now_ms();
        let Some(state) = self.streams.get_mut(&stream) else {
            return Ok(if self.tombstoned(stream)? {
                Ok(())
            } else {
                Err(StoreError::UnknownStream)
            });
        };
        // Idempotent: completing twice must not restart retention.
        if !state.complete {
            state.complete = true;
            let session = state.session.clone();
            self.conn
                .prepare_cached("UPDATE streams SET completed_at = ?2 WHERE stream = ?1")?
                .execute(params![stream.as_str(), now])?;
            self.sessions
                .entry(session)
                .or_default()
                .completed
                .push_back((now, stream));
            self.touched.push(stream);
        }
        Ok(Ok(()))
    }

    /// Whether a stream missing from the mirror was removed after completion (a tombstone),
    /// rather than never known.
    fn tombstoned(&self, stream: StreamId) -> Sql<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM tombstones WHERE stream = ?1")?
            .exists([stream.as_str()])
    }

    fn remove_session(&mut self, session: &SessionId) -> Sql<()> {
        self.conn
            .prepare_cached(
                "DELETE FROM chunks WHERE stream IN (SELECT stream FROM streams WHERE session = ?1)",
            )?
            .execute([session.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM streams WHERE session = ?1")?
            .execute([session.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM tombstones WHERE session = ?1")?
            .execute([session.as_str()])?;
        if self.sessions.remove(session).is_some() {
            let gone: Vec<StreamId> = self
                .streams
                .iter()
                .filter(|(_, state)| state.session == *session)
                .map(|(stream, _)| *stream)
                .collect();
            for stream in gone {
                self.streams.remove(&stream);
                self.touched.push(stream);
            }
        }
        Ok(())
    }

    /// Removes `session`'s completed streams past retention at `now`.
    fn expire(&mut self, session: &SessionId, now: i64) -> Sql<()> {
        let retention = ms(self.config.limits.retention);
        loop {
            let Some(state) = self.sessions.get_mut(session) else {
                return Ok(());
            };
            let Some(&(at, stream)) = state.completed.front() else {
                return Ok(());
            };
            if now.saturating_sub(at) < retention {
                return Ok(());
            }
            state.completed.pop_front();
            self.remove_stream(stream)?;
        }
    }

    fn evict_oldest_completed(&mut self, session: &SessionId) -> Sql<bool> {
        let Some(stream) = self
            .sessions
            .get_mut(session)
            .and_then(|state| state.completed.pop_front())
            .map(|(_, stream)| stream)
        else {
            return Ok(false);
        };
        self.remove_stream(stream)?;
        Ok(true)
    }

    fn evict_to_caps(&mut self, session: &SessionId) -> Sql<()> {
        loop {
            let Some(state) = self.sessions.get(session) else {
                return Ok(());
            };
            if state.usage.events <= self.config.limits.max_events_per_session
                && state.usage.bytes <= self.config.limits.max_bytes_per_session
            {
                return Ok(());
            }
            // Eviction deletes rows: the pending ones must be there to be deleted.
            self.insert_pending()?;
            if !self.evict_oldest_completed(session)? && !self.evict_oldest_live_event(session)? {
                return Ok(());
            }
        }
    }

    fn evict_oldest_live_event(&mut self, session: &SessionId) -> Sql<bool> {
        loop {
            let Some(entry) = self
                .sessions
                .get_mut(session)
                .and_then(|state| state.appended.pop_front())
            else {
                return Ok(false);
            };
            let (stream, seq, len) = entry;
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            if seq != state.first_seq || state.events == 0 {
                continue;
            }
            state.first_seq += 1;
            state.events -= 1;
            state.bytes -= len;
            let first_seq = i64::try_from(state.first_seq).unwrap_or(i64::MAX);
            // A chunk goes once its last event does; a reader skips the evicted head of the
            // chunk that remains.
            self.conn
                .prepare_cached("DELETE FROM chunks WHERE stream = ?1 AND last_seq < ?2")?
                .execute(params![stream.as_str(), first_seq])?;
            self.conn
                .prepare_cached("UPDATE streams SET first_seq = ?2 WHERE stream = ?1")?
                .execute(params![stream.as_str(), first_seq])?;
            if let Some(state) = self.sessions.get_mut(session) {
                state.usage.events -= 1;
                state.usage.bytes -= len;
            }
            // Its new first seq is published: tail reads before it must stop.
            if self.touched.last() != Some(&stream) {
                self.touched.push(stream);
            }
            self.compact(session);
            return Ok(true);
        }
    }

    /// Drops stale `appended` entries once they outnumber the live ones.
    fn compact(&mut self, session: &SessionId) {
        let Some(state) = self.sessions.get_mut(session) else {
            return;
        };
        if state.appended.len() <= 2 * state.usage.events + 64 {
            return;
        }
        let streams = &self.streams;
        state
            .appended
            .retain(|(stream, seq, _)| streams.get(stream).is_some_and(|s| *seq >= s.first_seq));
    }

    /// Removes a whole stream (expired or evicted), leaving a tombstone.
    fn remove_stream(&mut self, stream: StreamId) -> Sql<()> {
        let Some(state) = self.streams.remove(&stream) else {
            return Ok(());
        };
        self.conn
            .prepare_cached("DELETE FROM chunks WHERE stream = ?1")?
            .execute([stream.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM streams WHERE stream = ?1")?
            .execute([stream.as_str()])?;
        if self.config.limits.max_tombstones > 0 {
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO tombstones (stream, principal, session) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    stream.as_str(),
                    &*state.principal,
                    state.session.as_str()
                ])?;
            let max = i64::try_from(self.config.limits.max_tombstones).unwrap_or(i64::MAX);
            self.conn
                .prepare_cached(
                    "DELETE FROM tombstones WHERE rowid <= (SELECT MAX(rowid) FROM tombstones) - ?1",
                )?
                .execute([max])?;
        }
        if let Some(session) = self.sessions.get_mut(&state.session) {
            session.usage.streams -= 1;
            session.usage.events -= state.events;
            session.usage.bytes -= state.bytes;
        }
        self.compact(&state.session);
        self.touched.push(stream);
        Ok(())
    }

    /// Frees up to [`VACUUM_PAGES`] pages, stepping the pragma to its end (it may free a page
    /// per step).
    fn incremental_vacuum(&self) -> Sql<()> {
        let mut statement = self
            .conn
            .prepare_cached(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))?;
        let mut rows = statement.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    }

    /// Deletes up to [`SWEEP_LIMIT`] completed streams past retention, in one transaction.
    fn sweep(&mut self) {
        let now = now_ms();
        let retention = ms(self.config.limits.retention);
        let mut due: Vec<(i64, SessionId)> = self
            .sessions
            .iter()
            .filter_map(|(session, state)| {
                let &(at, _) = state.completed.front()?;
                (now.saturating_sub(at) >= retention).then(|| (at, session.clone()))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_by_key(|(at, _)| *at);
        due.truncate(SWEEP_LIMIT);
        let result = self.transaction(|writer| {
            for (_, session) in &due {
                writer.expire(session, now)?;
            }
            Ok(())
        });
        if let Err(error) = result {
            tracing::warn!(%error, "sqlite store: retention sweep failed");
            return;
        }
        // Compaction: hand a bounded number of freed pages back to the file system, so the
        // file shrinks after a burst without a blocking full VACUUM.
        if let Err(error) = self.incremental_vacuum() {
            tracing::warn!(%error, "sqlite store: incremental vacuum failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let pad = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2000));
        for _ in 0..500 {
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
