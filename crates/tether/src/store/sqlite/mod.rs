//! The SQLite backend: events and sessions in one database file, surviving a restart.
//!
//! It owns the schema, the single writer thread with its group commit, the read-only
//! connection pool, retention and compaction of the file, and the in-process wake-ups of
//! [`EventStore::wait_for_more`](crate::store::EventStore::wait_for_more). It does not share streams between processes: the watch
//! channels that wake waiters live in this process, so two servers on one file would not wake
//! each other's readers (sharing streams between nodes is the Redis backend's job). A file is
//! open in one store at a time, enforced with an exclusive lock on `<file>.lock` held while
//! the store is open ([`SqliteOpenError::InUse`]): the writer thread keeps counters in memory
//! that a second writer on the same file would invalidate.
//!
//! Request streams record the ids of the requests they answer. Those still incomplete when
//! the file is opened were left by a process that died mid-request; the store reports them
//! once through [`EventStore::orphaned_streams`](crate::store::EventStore::orphaned_streams), so the server can answer them.
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
//! - `sessions(id, version, principal, standalone, last_seen)`: the [`SessionStore`](crate::store::SessionStore) records.
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
//! `config` holds the configuration, `values` how values are written, `backend` what the two
//! store handles share, `events` and `sessions` the handles and their trait methods; this
//! module opens a store.
//!
//! [`MemoryEventStore`]: super::memory::MemoryEventStore

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::pipeline::Pipeline;

mod backend;
mod config;
mod events;
mod reads;
mod reload;
mod retention;
mod schema;
mod sessions;
mod tasks;
mod values;
mod writer;
mod writes;

pub use config::{Durability, SqliteOpenError, SqliteStoreConfig};
pub use events::SqliteEventStore;
pub use sessions::SqliteSessionStore;
pub use tasks::SqliteTaskStore;

use backend::Inner;
use config::MAX_READERS;
use schema::{Checkpointer, lock_store, open_writer};
use writer::{Shared, Started, Writer};

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

#[cfg(test)]
mod tests {
    use super::schema::open_reader;
    use super::*;
    use crate::store::event_store::{EventStore, StreamKind, StreamOwner};
    use std::path::Path;
    use std::time::Duration;
    use tether_proto::ids::SessionId;

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
