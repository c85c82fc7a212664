//! The SQLite backend: the shared behaviour suite on a fresh temporary database per check,
//! then what only a durable store does (reopen, group commit, typed open errors, retention on
//! the wall clock).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tether::proto::ids::{SessionId, StreamId};
use tether::proto::version::ProtocolVersion;
use tether::store::sqlite::{self, Durability, SqliteOpenError, SqliteStoreConfig};
use tether::store::suite::Caps;
use tether::store::{EventStore, SessionRecord, SessionStore, StoreError, StreamKind, StreamOwner};

/// The default configuration, on a database file in `dir`.
fn config_in(dir: &Path) -> SqliteStoreConfig {
    SqliteStoreConfig::new(dir.join("tether.db"))
}

/// Keeps each check's temporary directory alive as long as its store: leaked on purpose
/// (tests are short-lived processes, and the directory must outlive the `Arc`).
fn temp_dir() -> &'static TempDir {
    Box::leak(Box::new(TempDir::new().expect("temp dir")))
}

async fn new_events(caps: Caps) -> Arc<dyn EventStore> {
    let (events, _sessions) = sqlite::open(SqliteStoreConfig {
        max_events_per_session: caps.max_events_per_session,
        max_bytes_per_session: caps.max_bytes_per_session,
        max_streams_per_session: caps.max_streams_per_session,
        ..config_in(temp_dir().path())
    })
    .expect("open");
    Arc::new(events)
}

async fn new_sessions() -> Arc<dyn SessionStore> {
    let (_events, sessions) = sqlite::open(config_in(temp_dir().path())).expect("open");
    Arc::new(sessions)
}

tether::store_suite!(new_events, new_sessions);

const RETRY: Duration = Duration::from_secs(1);

fn owner() -> StreamOwner {
    StreamOwner {
        principal: Arc::from("default"),
        session: SessionId::generate(),
    }
}

fn progress(n: usize) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{n}}}}}"#)
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_loses_nothing_acknowledged() {
    const N: usize = 500;
    let dir = TempDir::new().unwrap();
    let owner = owner();
    let record = SessionRecord {
        id: owner.session.clone(),
        version: ProtocolVersion::LATEST,
        principal: Arc::clone(&owner.principal),
        standalone: StreamId::generate(),
    };
    let (live, done, before_live, before_done) = {
        let (events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
        sessions.insert(record.clone()).await.unwrap();
        let live = events
            .create_stream(&owner, StreamKind::Standalone, RETRY)
            .await
            .unwrap();
        let done = events
            .create_stream(&owner, StreamKind::Request, RETRY)
            .await
            .unwrap();
        for n in 0..N {
            events.append(live, &progress(n)).await.unwrap();
        }
        events
            .append(done, br#"{"id":1,"result":{}}"#)
            .await
            .unwrap();
        events.complete(done).await.unwrap();
        let before_live = events
            .read_from_start(&owner, live, usize::MAX)
            .await
            .unwrap();
        let before_done = events
            .read_from_start(&owner, done, usize::MAX)
            .await
            .unwrap();
        (live, done, before_live, before_done)
        // Both halves dropped here: the writer thread stops, the file is closed.
    };
    assert_eq!(before_live.events.len(), N + 1);

    let (events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let after_live = events
        .read_from_start(&owner, live, usize::MAX)
        .await
        .unwrap();
    assert_eq!(after_live, before_live, "identical frames after reopen");
    let after_done = events
        .read_from_start(&owner, done, usize::MAX)
        .await
        .unwrap();
    assert_eq!(after_done, before_done);
    assert!(after_done.complete, "completion survives");
    assert_eq!(sessions.get(&record.id).await.unwrap(), Some(record));
    assert_eq!(sessions.count().await.unwrap(), 1);

    // The reopened store carries on where the old one stopped.
    let id = events.append(live, &progress(N)).await.unwrap();
    assert_eq!(id.seq, N as u64 + 1);
    assert_eq!(events.append(done, b"{}").await, Err(StoreError::Completed));
    let usage = events.usage(&owner.session).await.unwrap();
    assert_eq!((usage.streams, usage.events), (2, (N + 2) + 2));
    // Waiters on streams from before the reopen are woken too.
    let events = Arc::new(events);
    let waiter = tokio::spawn({
        let events = Arc::clone(&events);
        async move { events.wait_for_more(live, id.seq).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "nothing after {} yet", id.seq);
    events.append(live, &progress(N + 1)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_gap_free_and_group_committed() {
    const TASKS: usize = 64;
    const APPENDS: usize = 200;
    let dir = TempDir::new().unwrap();
    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let events = Arc::new(events);
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY)
        .await
        .unwrap();
    let before = events.transactions();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let events = Arc::clone(&events);
            tokio::spawn(async move {
                for n in 0..APPENDS {
                    events.append(stream, &progress(n)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let transactions = events.transactions() - before;
    let total = TASKS * APPENDS;
    let batch = events
        .read_after(&owner, stream, 0, usize::MAX)
        .await
        .unwrap();
    let seqs: Vec<u64> = batch.events.iter().map(|e| e.id.seq).collect();
    assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>(), "gap-free");
    assert!(
        transactions * 10 < total as u64,
        "{transactions} transactions for {total} appends: group commit should share them"
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_typed_error() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("not.db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let error = sqlite::open(SqliteStoreConfig::new(&path)).unwrap_err();
    assert!(
        matches!(&error, SqliteOpenError::NotADatabase { path: p } if *p == path),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("not a SQLite database"),
        "{error}"
    );
}

#[tokio::test]
async fn full_durability_opens_and_stores() {
    let dir = TempDir::new().unwrap();
    let (events, _sessions) = sqlite::open(SqliteStoreConfig {
        durability: Durability::Full,
        ..config_in(dir.path())
    })
    .unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY)
        .await
        .unwrap();
    events.append(stream, b"{}").await.unwrap();
    let batch = events.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1);
}

#[test]
fn defaults_are_the_memory_stores() {
    let config = SqliteStoreConfig::new("x.db");
    let memory = tether::store::MemoryStoreConfig::default();
    assert_eq!(config.retention, memory.retention);
    assert_eq!(config.max_events_per_session, memory.max_events_per_session);
    assert_eq!(config.max_bytes_per_session, memory.max_bytes_per_session);
    assert_eq!(
        config.max_streams_per_session,
        memory.max_streams_per_session
    );
    assert_eq!(config.max_tombstones, memory.max_tombstones);
    assert_eq!(config.durability, Durability::Normal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_expires_completed_streams_with_tombstones_across_reopen() {
    let dir = TempDir::new().unwrap();
    let config = SqliteStoreConfig {
        retention: Duration::from_millis(100),
        ..config_in(dir.path())
    };
    let owner = owner();
    let stream = {
        let (events, _sessions) = sqlite::open(config.clone()).unwrap();
        let stream = events
            .create_stream(&owner, StreamKind::Request, RETRY)
            .await
            .unwrap();
        events.append(stream, b"{}").await.unwrap();
        events.complete(stream).await.unwrap();
        // No more commands reach the writer until the sweep must have run (reads do not go
        // through it): any transaction from here on is the background sweep's.
        let before = events.transactions();
        assert!(events.read_after(&owner, stream, 0, 10).await.is_ok());
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Past retention: expired at once, whether or not the sweep ran yet.
        assert_eq!(
            events.read_after(&owner, stream, 0, 10).await,
            Err(StoreError::Expired)
        );
        // The background sweep deletes it in a transaction of its own, with no command sent
        // (reads do not go through the writer), and leaves a tombstone.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            events.transactions() > before,
            "the sweep ran in the background"
        );
        let usage = events.usage(&owner.session).await.unwrap();
        assert_eq!(usage.streams, 0);
        stream
    };
    let (events, _sessions) = sqlite::open(config).unwrap();
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired),
        "the tombstone survives a reopen"
    );
    let stranger = StreamOwner {
        principal: Arc::from("mallory"),
        ..owner.clone()
    };
    assert_eq!(
        events.read_after(&stranger, stream, 0, 10).await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.append(stream, b"{}").await,
        Err(StoreError::Completed)
    );
}
