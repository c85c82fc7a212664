//! Opening a SQLite store's file: the lock that keeps it to one process, the writer
//! connection's settings and schema (creating the tables, converting a file written before
//! chunks), the read-only connections, and the checkpoint thread that copies the WAL back
//! into the file so that no commit waits for it.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use super::config::{Durability, SqliteOpenError, SqliteStoreConfig};
use crate::lock as guard;
use crate::store::chunk;

/// Takes the store's lock file (`<path>.lock`), held for as long as the store is open.
pub(super) fn lock_store(path: &Path) -> Result<std::fs::File, SqliteOpenError> {
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
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(LOCK_RETRY);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SqliteOpenError::InUse {
                    path: path.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(SqliteOpenError::Lock {
                    path: lock_path,
                    source,
                });
            }
        }
    }
}

/// How long an open waits for the lock file before reporting the store in use. The lock is
/// the open file's (`flock`), so a child process forked while this process held it keeps it
/// until that child execs: a store closed and opened again at once, in a process that starts
/// other processes, can find its own lock held for that moment. A real second owner still
/// gets `InUse`, this much later.
const LOCK_WAIT: Duration = Duration::from_millis(250);

/// Pause between two tries while waiting for the lock file.
const LOCK_RETRY: Duration = Duration::from_millis(5);

pub(super) fn open_writer(config: &SqliteStoreConfig) -> rusqlite::Result<Connection> {
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
             packing INTEGER NOT NULL DEFAULT 0,
             PRIMARY KEY (stream, first_seq)
         );
         CREATE TABLE IF NOT EXISTS tombstones (
             stream TEXT PRIMARY KEY NOT NULL,
             principal TEXT NOT NULL,
             session TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS tombstones_by_session ON tombstones (session);
         CREATE TABLE IF NOT EXISTS tasks (
             id TEXT PRIMARY KEY NOT NULL,
             record TEXT NOT NULL
         );
         CREATE TABLE IF NOT EXISTS sessions (
             id TEXT PRIMARY KEY NOT NULL,
             version TEXT NOT NULL,
             principal TEXT NOT NULL,
             standalone TEXT NOT NULL,
             last_seen INTEGER NOT NULL,
             client TEXT
         );"
    ))?;
    // Sessions keep their client's handshake (none for sessions of an older file); chunks say
    // how they are packed (an older file's are plain).
    add_column_if_missing(&conn, "sessions", "client", "TEXT")?;
    add_column_if_missing(&conn, "chunks", "packing", "INTEGER NOT NULL DEFAULT 0")?;
    convert_events_table(&conn)?;
    Ok(conn)
}

/// The file's sealing key: made by the first open (SQLite's own CSPRNG, `randomblob`) and read
/// by every later one.
pub(super) fn sealing_key(conn: &Connection) -> rusqlite::Result<[u8; 32]> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS secrets (
             name TEXT PRIMARY KEY NOT NULL,
             value BLOB NOT NULL
         );
         INSERT OR IGNORE INTO secrets (name, value) VALUES ('sealing_key', randomblob(32));",
    )?;
    let value: Vec<u8> = conn.query_row(
        "SELECT value FROM secrets WHERE name = 'sealing_key'",
        [],
        |row| row.get(0),
    )?;
    value.try_into().map_err(|value: Vec<u8>| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Blob,
            format!("sealing key of {} bytes, not 32", value.len()).into(),
        )
    })
}

/// Adds `column` (`definition` as in `ALTER TABLE ... ADD COLUMN`) to `table` of a file
/// written before the column existed; rows already there take the column's default.
fn add_column_if_missing(
    conn: &Connection,
    table: &str,
    column: &str,
    definition: &str,
) -> rusqlite::Result<()> {
    let present: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
        params![table, column],
        |row| row.get(0),
    )?;
    if !present {
        conn.execute_batch(&format!(
            "ALTER TABLE {table} ADD COLUMN {column} {definition}"
        ))?;
    }
    Ok(())
}

/// Converts a file written before chunks: each row of its `events(stream, seq, frame)`
/// table becomes a chunk of one event, in the order they were appended, and the table goes.
/// One transaction: a crash leaves the file as it was, converted at the next open.
pub(super) fn convert_events_table(conn: &Connection) -> rusqlite::Result<()> {
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

/// Bytes of WAL the writer commits (as SQLite's WAL hook counts them) before it asks the
/// checkpointer to copy the WAL back into the database file: SQLite's own auto-checkpoint
/// threshold (1000 pages).
pub(super) const CHECKPOINT_AFTER_BYTES: u64 = 4 * 1024 * 1024;

/// The size the WAL file is truncated to after a checkpoint let it restart.
pub(super) const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// The writer connection's page cache, in KiB.
pub(super) const WRITER_CACHE_KIB: u64 = 16 * 1024;

/// The WAL's size in bytes after which the writer copies the rest of the WAL back itself, so
/// that its next transaction writes the WAL from its start again.
pub(super) const RESTART_AFTER_BYTES: u64 = 16 * 1024 * 1024;

/// Copies the WAL back into the database file on a thread of its own, so the writer's commits
/// never wait for a checkpoint or its syncs. PASSIVE checkpoints run beside the writer and
/// the readers without taking a lock they wait on.
///
/// A WAL is written from its start again (restarted) only when a write transaction begins
/// while every frame in it has been copied back, which a checkpoint beside a busy writer never
/// sees: the writer has always committed more by the time it ends. Left at that, the WAL grows
/// for as long as the writer is busy, and even after it goes idle (the last frames wait for
/// the next threshold), and writing ever new file blocks costs the writer most of its time in
/// the kernel. So the writer itself, between batches, copies back what the thread has not yet
/// ([`Checkpointer::restart_if_due`]): once the WAL reaches [`RESTART_AFTER_BYTES`], and when
/// it goes idle. It is the only writer, so nothing lands in between, and its next transaction
/// restarts the WAL (unless a reader still reads an old snapshot in it, when it tries again
/// later). The WAL's size is SQLite's own count, from its WAL hook: an estimate from the rows
/// inserted misses the pages a small commit rewrites.
pub(super) struct Checkpointer {
    signal: Arc<(Mutex<CheckpointState>, std::sync::Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// Frames in the WAL after the writer's latest commit, as SQLite's WAL hook reports them
    /// (set on the writer's thread, inside its `COMMIT`).
    frames: Arc<AtomicU64>,
    /// The file's page size: the bytes of one WAL frame's page.
    page_size: u64,
    /// `frames` at the writer's previous commit.
    last_frames: u64,
    /// The writer committed since it last copied the whole WAL back.
    dirty: bool,
    /// The WAL's size in bytes at which the writer next tries
    /// [`Checkpointer::restart_if_due`].
    restart_at: u64,
}

#[derive(Default)]
pub(super) struct CheckpointState {
    /// WAL bytes committed since the last checkpoint began.
    committed: u64,
    stop: bool,
}

impl Checkpointer {
    /// Starts the checkpoint thread for the file at `path` and has the writer's connection
    /// `conn` report each commit's WAL size to it. `conn` must not change
    /// `wal_autocheckpoint` afterwards: that replaces the hook.
    pub(super) fn start(path: &Path, conn: &mut Connection) -> Result<Self, SqliteOpenError> {
        let fail = |source| SqliteOpenError::Sqlite {
            path: path.to_owned(),
            source,
        };
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .map_err(fail)?;
        let frames = Arc::new(AtomicU64::new(0));
        let reported = Arc::clone(&frames);
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: c_int| {
            reported.store(u64::try_from(pages).unwrap_or(0), Ordering::Relaxed);
            Ok(())
        }))
        .map_err(fail)?;
        let signal: Arc<(Mutex<CheckpointState>, std::sync::Condvar)> = Arc::default();
        let shared = Arc::clone(&signal);
        let owned = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("tether-sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&owned, &shared))?;
        Ok(Self {
            signal,
            thread: Some(thread),
            frames,
            page_size: u64::try_from(page_size).unwrap_or(4096),
            last_frames: 0,
            dirty: false,
            restart_at: RESTART_AFTER_BYTES,
        })
    }

    /// Takes the size of the WAL after a commit of the writer's; wakes the checkpointer once
    /// [`CHECKPOINT_AFTER_BYTES`] more were written since its last checkpoint began.
    pub(super) fn committed(&mut self) {
        let frames = self.frames.load(Ordering::Relaxed);
        let grown = if frames >= self.last_frames {
            frames - self.last_frames
        } else {
            // The commit wrote the WAL from its start again.
            self.restart_at = RESTART_AFTER_BYTES;
            frames
        };
        self.last_frames = frames;
        self.dirty = true;
        let (state, wake) = &*self.signal;
        let mut state = guard(state);
        state.committed += grown * self.page_size;
        if state.committed >= CHECKPOINT_AFTER_BYTES {
            wake.notify_one();
        }
    }

    /// Copies back, on the writer's connection `conn` between transactions, whatever of the
    /// WAL the thread has not, so that the next transaction restarts it; when the writer is
    /// `idle` and committed something since the last time, or the WAL reached
    /// [`RESTART_AFTER_BYTES`]. When that is not possible (the thread's checkpoint is running,
    /// or a reader holds an old snapshot), the writer tries again once the WAL grew by another
    /// quarter of [`RESTART_AFTER_BYTES`], or at its next idle timeout.
    pub(super) fn restart_if_due(&mut self, conn: &Connection, idle: bool) {
        let wal_bytes = self.last_frames * self.page_size;
        let due = if idle {
            self.dirty
        } else {
            wal_bytes >= self.restart_at
        };
        if !due {
            return;
        }
        let copied = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        });
        match copied {
            Ok((0, log, checkpointed)) if checkpointed >= log => {
                self.dirty = false;
                self.restart_at = RESTART_AFTER_BYTES;
            }
            Ok(_) => self.restart_at = wal_bytes + RESTART_AFTER_BYTES / 4,
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), "sqlite store: checkpoint failed; retried later");
                self.restart_at = wal_bytes + RESTART_AFTER_BYTES / 4;
            }
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

pub(super) fn checkpoint_loop(path: &Path, signal: &(Mutex<CheckpointState>, std::sync::Condvar)) {
    let conn = match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(error) => {
            tracing::error!(error = %crate::error_chain(&error), "sqlite store: no checkpoint connection; the WAL will grow until the store closes");
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
            tracing::warn!(error = %crate::error_chain(&error), "sqlite store: checkpoint failed; retried after the next commits");
        }
    }
}

pub(super) fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}
