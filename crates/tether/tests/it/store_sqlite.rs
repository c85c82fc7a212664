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
use tether::store::suite::{Caps, Stores};
use tether::store::{
    EventStore, PIPELINE_WINDOW, SessionRecord, SessionStore, StoreError, StreamKind, StreamOwner,
};

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
    let (events, _sessions) = sqlite::open({
        let mut config = config_in(temp_dir().path());
        config.limits.max_events_per_session = caps.max_events_per_session;
        config.limits.max_bytes_per_session = caps.max_bytes_per_session;
        config.limits.max_streams_per_session = caps.max_streams_per_session;
        config
    })
    .expect("open");
    Arc::new(events)
}

async fn new_sessions() -> Arc<dyn SessionStore> {
    let (_events, sessions) = sqlite::open(config_in(temp_dir().path())).expect("open");
    Arc::new(sessions)
}

tether::store_suite!(new_events, new_sessions);

/// Opens one new temporary database, again on each call.
fn new_opener() -> impl AsyncFn() -> Stores {
    let dir = temp_dir();
    async move || {
        let (events, sessions) = sqlite::open(config_in(dir.path())).expect("open");
        (
            Arc::new(events) as Arc<dyn EventStore>,
            Arc::new(sessions) as Arc<dyn SessionStore>,
        )
    }
}

tether::store_suite!(durable new_opener);

async fn new_tasks() -> Arc<dyn tether::store::TaskStore> {
    let (_events, sessions) = sqlite::open(config_in(temp_dir().path())).expect("open");
    Arc::new(sessions.task_store().expect("the tasks"))
}

tether::task_store_suite!(new_tasks);

/// Opens one new temporary database's task store, again on each call (the previous one
/// dropped first: one process opens a file at a time).
fn new_task_opener() -> impl AsyncFn() -> Arc<dyn tether::store::TaskStore> {
    let dir = temp_dir();
    async move || {
        let (_events, sessions) = sqlite::open(config_in(dir.path())).expect("open");
        Arc::new(sessions.task_store().expect("the tasks")) as Arc<dyn tether::store::TaskStore>
    }
}

tether::task_store_suite!(durable new_task_opener);

#[tokio::test]
async fn a_store_open_in_this_process_cannot_be_opened_twice() {
    let dir = TempDir::new().unwrap();
    let _open = sqlite::open(config_in(dir.path())).unwrap();
    match sqlite::open(config_in(dir.path())) {
        Err(SqliteOpenError::InUse { path }) => assert_eq!(path, dir.path().join("tether.db")),
        other => panic!("expected InUse, got {other:?}"),
    }
}

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
async fn concurrent_appends_are_gap_free_and_group_committed() {
    const TASKS: usize = 64;
    const APPENDS: usize = 200;
    let dir = TempDir::new().unwrap();
    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let events = Arc::new(events);
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
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
    events.flush(stream).await.unwrap();
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
    let (events, _sessions) = sqlite::open({
        let mut config = config_in(dir.path());
        config.durability = Durability::Full;
        config
    })
    .unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    events.append(stream, b"{}").await.unwrap();
    events.flush(stream).await.unwrap();
    let batch = events.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1);
}

#[test]
fn defaults_are_the_memory_stores() {
    let config = SqliteStoreConfig::new("x.db");
    assert_eq!(config.limits, tether::store::StoreLimits::default());
    assert_eq!(config.durability, Durability::Normal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_expires_completed_streams_with_tombstones_across_reopen() {
    let dir = TempDir::new().unwrap();
    let mut config = config_in(dir.path());
    config.limits.retention = Duration::from_millis(100);
    let owner = owner();
    let stream = {
        let (events, _sessions) = sqlite::open(config.clone()).unwrap();
        let stream = events
            .create_stream(&owner, StreamKind::Request, RETRY, &[])
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

/// The server's start-up sweep over a reopened file: a batch whose first request was answered
/// before the crash gets the restart error for the second only, after what was stored, and
/// its stream is completed; a second sweep finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_only_the_unanswered_requests_of_an_orphan() {
    use tether::proto::jsonrpc::RequestId;
    use tether::server::{OrphanReport, SERVER_RESTARTED_REASON, Server};
    use tether::store::Stores;

    let dir = TempDir::new().unwrap();
    let owner = owner();
    let stream = {
        let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
        let stream = events
            .create_stream(
                &owner,
                StreamKind::Request,
                RETRY,
                &[RequestId::from(1_i64), RequestId::from("two")],
            )
            .await
            .unwrap();
        events.append(stream, &progress(1)).await.unwrap();
        events
            .append(stream, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
            .await
            .unwrap();
        stream
    };
    let (events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let events: Arc<dyn EventStore> = Arc::new(events);
    let server = Server::builder(Arc::new(tether::demo::DemoHandler::new()))
        .stores(Stores::custom(Arc::clone(&events), Arc::new(sessions)))
        .build()
        .await
        .unwrap();
    assert_eq!(
        server.orphans_answered_at_start(),
        OrphanReport {
            streams: 1,
            requests: 1
        }
    );
    let batch = events
        .read_from_start(&owner, stream, usize::MAX)
        .await
        .unwrap();
    assert!(batch.complete, "the orphan is completed");
    let messages: Vec<serde_json::Value> = batch.events[1..]
        .iter()
        .map(|event| serde_json::from_slice(event.message()).unwrap())
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[1]["id"], 1);
    assert_eq!(messages[2]["id"], "two");
    assert_eq!(messages[2]["error"]["code"], -32603);
    assert_eq!(
        messages[2]["error"]["data"]["reason"],
        SERVER_RESTARTED_REASON
    );
    assert_eq!(
        server.answer_orphans().await.unwrap(),
        OrphanReport::default()
    );
}

/// Another process holding the database's write lock, as a held commit: the writer thread's
/// next transaction waits for it (up to SQLite's busy timeout).
struct HeldCommit(rusqlite::Connection);

impl HeldCommit {
    fn take(dir: &Path) -> Self {
        let conn = rusqlite::Connection::open(dir.join("tether.db")).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        Self(conn)
    }

    fn release(self) {
        self.0.execute_batch("ROLLBACK").unwrap();
    }
}

async fn open_with_stream(
    dir: &Path,
) -> (
    Arc<sqlite::SqliteEventStore>,
    StreamOwner,
    tether::proto::ids::StreamId,
) {
    let (events, _sessions) = sqlite::open(config_in(dir)).unwrap();
    let events = Arc::new(events);
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    (events, owner, stream)
}

async fn seqs_read(
    events: &sqlite::SqliteEventStore,
    owner: &StreamOwner,
    stream: tether::proto::ids::StreamId,
) -> Vec<u64> {
    let batch = events
        .read_from_start(owner, stream, usize::MAX)
        .await
        .unwrap();
    batch.events.iter().map(|e| e.id.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_are_pipelined_and_nothing_is_readable_before_its_commit() {
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    events.append(stream, &progress(0)).await.unwrap();
    events.flush(stream).await.unwrap();

    let held = HeldCommit::take(dir.path());
    // The appends return although nothing can commit: they are queued.
    for n in 1..=100 {
        let id = tokio::time::timeout(Duration::from_secs(2), events.append(stream, &progress(n)))
            .await
            .expect("a pipelined append returns while the commit is held")
            .unwrap();
        assert_eq!(id.seq, n as u64 + 1);
    }
    let waiter = tokio::spawn({
        let events = Arc::clone(&events);
        async move { events.wait_for_more(stream, 1).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        seqs_read(&events, &owner, stream).await,
        [0, 1],
        "a reader sees only what was committed"
    );
    assert!(
        !waiter.is_finished(),
        "no reader is woken before the commit"
    );
    let flush = tokio::spawn({
        let events = Arc::clone(&events);
        async move { events.flush(stream).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!flush.is_finished(), "flush waits for the commit");

    held.release();
    tokio::time::timeout(Duration::from_secs(5), flush)
        .await
        .expect("flush returns after the commit")
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the reader is woken by the commit")
        .unwrap()
        .unwrap();
    assert_eq!(
        seqs_read(&events, &owner, stream).await,
        (0..=101).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_window_makes_the_next_append_wait_for_a_commit() {
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    let held = HeldCommit::take(dir.path());
    for n in 0..PIPELINE_WINDOW as usize {
        events.append(stream, &progress(n)).await.unwrap();
    }
    let next = tokio::spawn({
        let events = Arc::clone(&events);
        async move { events.append(stream, &progress(usize::MAX)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !next.is_finished(),
        "the append past the window waits (backpressure)"
    );
    held.release();
    let id = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the commit opens the window")
        .unwrap()
        .unwrap();
    assert_eq!(id.seq, PIPELINE_WINDOW + 1);
    events.flush(stream).await.unwrap();
    assert_eq!(
        seqs_read(&events, &owner, stream).await.len() as u64,
        PIPELINE_WINDOW + 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_is_reported_to_the_next_caller_and_loses_nothing_readable() {
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    events.append(stream, &progress(1)).await.unwrap();
    events.flush(stream).await.unwrap();

    // Held past the writer's busy timeout (5 s): its transaction cannot begin.
    let held = HeldCommit::take(dir.path());
    events.append(stream, &progress(2)).await.unwrap();
    events.append(stream, &progress(3)).await.unwrap();
    let flushed = tokio::time::timeout(Duration::from_secs(20), events.flush(stream))
        .await
        .expect("flush returns once the commit failed");
    assert!(
        matches!(flushed, Err(StoreError::Unavailable(_))),
        "the failed commit surfaces as the same typed error as an unpipelined append's: {flushed:?}"
    );
    held.release();
    assert_eq!(
        seqs_read(&events, &owner, stream).await,
        [0, 1],
        "the lost appends were never readable"
    );
    // The stream goes on, gap-free: the next append takes the next seq that was committed.
    let id = events.append(stream, &progress(4)).await.unwrap();
    assert_eq!(id.seq, 2);
    events.flush(stream).await.unwrap();
    events.complete(stream).await.unwrap();
    let batch = events
        .read_from_start(&owner, stream, usize::MAX)
        .await
        .unwrap();
    assert!(batch.complete);
    assert_eq!(batch.events[2].message(), progress(4).as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_streams_appends_share_commits() {
    const N: usize = 20_000;
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    let before = events.transactions();
    for n in 0..N {
        events.append(stream, &progress(n)).await.unwrap();
    }
    events.complete(stream).await.unwrap();
    let transactions = events.transactions() - before;
    assert!(
        transactions * 10 < N as u64,
        "{transactions} transactions for {N} appends of one emitter: the pipeline should batch them"
    );
    assert_eq!(seqs_read(&events, &owner, stream).await.len(), N + 1);
}

/// A file written before chunks (one `events` row per event) opens with every event readable
/// in order, its usage counted, and later appends following on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_one_row_per_event_is_converted_when_opened() {
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    for n in 1..=5 {
        events.append(stream, &progress(n)).await.unwrap();
    }
    events.flush(stream).await.unwrap();
    let written = events.read_from_start(&owner, stream, 100).await.unwrap();
    let usage = events.usage(&owner.session).await.unwrap();
    drop(events);

    // The earlier layout, holding the same frames.
    let conn = rusqlite::Connection::open(dir.path().join("tether.db")).unwrap();
    conn.execute_batch(
        "DELETE FROM chunks;
         CREATE TABLE events (stream TEXT NOT NULL, seq INTEGER NOT NULL, frame BLOB NOT NULL,
                              PRIMARY KEY (stream, seq));",
    )
    .unwrap();
    for event in &written.events {
        conn.execute(
            "INSERT INTO events (stream, seq, frame) VALUES (?1, ?2, ?3)",
            rusqlite::params![stream.as_str(), event.id.seq as i64, event.frame.as_ref()],
        )
        .unwrap();
    }
    drop(conn);

    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let read = events.read_from_start(&owner, stream, 100).await.unwrap();
    assert_eq!(read.events, written.events, "the same events, in order");
    assert_eq!(events.usage(&owner.session).await.unwrap(), usage);
    let next = events.append(stream, &progress(6)).await.unwrap();
    assert_eq!(next.seq, 6);
    events.flush(stream).await.unwrap();
    drop(events);
    let conn = rusqlite::Connection::open(dir.path().join("tether.db")).unwrap();
    let old: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'events'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(old, 0, "the old table is gone");
}

/// A file written before sessions kept their client's handshake (no `client` column) opens
/// with its sessions as they were, without one; sessions stored after keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_sessions_have_no_client_column_opens_with_its_sessions() {
    let dir = TempDir::new().unwrap();
    let old = SessionRecord {
        id: SessionId::generate(),
        version: ProtocolVersion::LATEST_LEGACY,
        principal: Arc::from("alice"),
        standalone: StreamId::generate(),
        client: None,
    };
    {
        let (_events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
        sessions.insert(old.clone()).await.unwrap();
    }
    let conn = rusqlite::Connection::open(dir.path().join("tether.db")).unwrap();
    conn.execute_batch("ALTER TABLE sessions DROP COLUMN client")
        .unwrap();
    drop(conn);

    let new = SessionRecord {
        id: SessionId::generate(),
        client: Some(Arc::new(
            serde_json::json!({"clientInfo": {"name": "later"}}),
        )),
        ..old.clone()
    };
    {
        let (_events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
        assert_eq!(sessions.get(&old.id).await.unwrap(), Some(old.clone()));
        sessions.insert(new.clone()).await.unwrap();
    }
    let (_events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
    assert_eq!(sessions.get(&new.id).await.unwrap(), Some(new));
    assert_eq!(sessions.get(&old.id).await.unwrap(), Some(old));
}

/// The event cap evicts single events out of a chunk of many: what is left, and its usage,
/// are the same before and after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_part_of_a_chunk_holds_across_a_reopen() {
    const CAP: usize = 10;
    let dir = TempDir::new().unwrap();
    let capped = || {
        let mut config = config_in(dir.path());
        config.limits.max_events_per_session = CAP;
        config
    };
    let (events, sessions) = sqlite::open(capped()).unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    let before = events.transactions();
    for n in 1..=25 {
        events.append(stream, &progress(n)).await.unwrap();
    }
    events.flush(stream).await.unwrap();
    assert!(
        events.transactions() - before < 25,
        "appends shared commits, so chunks held several events"
    );
    let retained = |batch: tether::store::ReadBatch| -> Vec<u64> {
        batch.events.iter().map(|e| e.id.seq).collect()
    };
    let kept = retained(events.read_after(&owner, stream, 15, 100).await.unwrap());
    assert_eq!(kept, (16..=25).collect::<Vec<_>>());
    assert_eq!(
        events.read_after(&owner, stream, 14, 100).await,
        Err(StoreError::Expired),
        "seq 15 was evicted"
    );
    let usage = events.usage(&owner.session).await.unwrap();
    assert_eq!(usage.events, CAP);
    drop((events, sessions));

    let (events, _sessions) = sqlite::open(capped()).unwrap();
    assert_eq!(
        retained(events.read_after(&owner, stream, 15, 100).await.unwrap()),
        kept
    );
    assert_eq!(events.usage(&owner.session).await.unwrap(), usage);
    // Eviction goes on from where it stopped.
    events.append(stream, &progress(26)).await.unwrap();
    events.flush(stream).await.unwrap();
    assert_eq!(
        retained(events.read_after(&owner, stream, 16, 100).await.unwrap()),
        (17..=26).collect::<Vec<_>>()
    );
    assert_eq!(events.usage(&owner.session).await.unwrap().events, CAP);
}

/// `len` characters of base64url that LZ4 finds next to no repeats in (a xorshift sequence
/// from `seed`), so that the chunks holding them are stored at about their size.
fn incompressible(len: usize, seed: &mut u64) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..len)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            char::from(ALPHABET[(*seed >> 58) as usize])
        })
        .collect()
}

/// How many of the file's chunks are stored packed, and the bytes all its chunks take.
fn packed_chunks(db: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT coalesce(sum(packing != 0), 0), coalesce(sum(length(frames)), 0) FROM chunks",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

/// Chunks of many events are stored packed: the file holds a fraction of their frames' bytes,
/// and what a reopened store reads back (from the file: a new store has no committed tail)
/// is every frame as it was appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_of_many_events_are_stored_packed_and_read_back_unchanged() {
    const N: usize = 2_000;
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    for n in 0..N {
        events.append(stream, &progress(n)).await.unwrap();
    }
    events.flush(stream).await.unwrap();
    let written = events
        .read_from_start(&owner, stream, usize::MAX)
        .await
        .unwrap();
    assert_eq!(written.events.len(), N + 1);
    let frame_bytes: usize = written.events.iter().map(|e| e.frame.len()).sum();
    drop(events);

    let (packed, stored) = packed_chunks(&dir.path().join("tether.db"));
    assert!(packed > 0, "no chunk was packed");
    assert!(
        stored as usize * 4 < frame_bytes,
        "{frame_bytes} bytes of frames took {stored} bytes in the file"
    );

    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let read = events
        .read_from_start(&owner, stream, usize::MAX)
        .await
        .unwrap();
    assert_eq!(read.events, written.events, "the same frames, in order");
}

/// A file written before chunks were packed (no `packing` column, every chunk plain) opens
/// with its events as they were; chunks stored after it are packed beside them, and both
/// kinds read back in order after another reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_whose_chunks_have_no_packing_column_opens_with_its_events() {
    let dir = TempDir::new().unwrap();
    let (events, owner, old) = open_with_stream(dir.path()).await;
    // One commit per event: chunks of one event each, too small to pack.
    for n in 1..=5 {
        events.append(old, &progress(n)).await.unwrap();
        events.flush(old).await.unwrap();
    }
    let written = events.read_from_start(&owner, old, 100).await.unwrap();
    let usage = events.usage(&owner.session).await.unwrap();
    drop(events);
    let db = dir.path().join("tether.db");
    assert_eq!(
        packed_chunks(&db).0,
        0,
        "the small chunks are plain, as an older file's"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("ALTER TABLE chunks DROP COLUMN packing")
        .unwrap();
    drop(conn);

    let (events, sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let read = events.read_from_start(&owner, old, 100).await.unwrap();
    assert_eq!(read.events, written.events, "the same events, in order");
    assert_eq!(events.usage(&owner.session).await.unwrap(), usage);
    let new = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    for n in 1..=1_000 {
        events.append(new, &progress(n)).await.unwrap();
    }
    events.flush(new).await.unwrap();
    drop((events, sessions));
    assert!(packed_chunks(&db).0 > 0, "later chunks are packed");

    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    assert_eq!(
        events
            .read_from_start(&owner, old, 100)
            .await
            .unwrap()
            .events,
        written.events
    );
    assert_eq!(
        seqs_read(&events, &owner, new).await,
        (0..=1_000).collect::<Vec<u64>>()
    );
}

/// A chunk whose packing this version does not know (a file from a newer version, or
/// damaged) is an error to its reader, never a gap in what the reader is handed; its seqs are
/// not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_of_unknown_packing_is_an_error_not_a_gap() {
    let dir = TempDir::new().unwrap();
    let (events, owner, stream) = open_with_stream(dir.path()).await;
    for n in 1..=1_000 {
        events.append(stream, &progress(n)).await.unwrap();
    }
    events.flush(stream).await.unwrap();
    drop(events);
    let conn = rusqlite::Connection::open(dir.path().join("tether.db")).unwrap();
    let changed = conn
        .execute("UPDATE chunks SET packing = 9 WHERE first_seq > 0", [])
        .unwrap();
    assert!(changed > 0);
    drop(conn);

    let (events, _sessions) = sqlite::open(config_in(dir.path())).unwrap();
    let read = events.read_from_start(&owner, stream, usize::MAX).await;
    assert!(
        matches!(read, Err(StoreError::Unavailable(_))),
        "got {read:?}"
    );
    // The unreadable chunks' seqs stay taken: the stream goes on after them.
    let next = events.append(stream, &progress(1_001)).await.unwrap();
    assert_eq!(next.seq, 1_001);
}

/// The WAL's frame count as a checkpoint from another connection reports it (which also
/// copies it back: call it only where that does not matter).
fn wal_frames(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
        .unwrap()
}

/// A busy writer's WAL is written from its start again rather than growing with everything
/// ever appended, and a writer gone idle leaves it so that the next commit starts it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_while_a_stream_appends_and_starts_over_after_idle() {
    const EVENTS: usize = 20_000;
    let dir = TempDir::new().unwrap();
    let mut config = config_in(dir.path());
    // Retention's tenth is how long the writer waits before it counts as idle.
    config.limits.retention = Duration::from_secs(1);
    config.limits.max_events_per_session = EVENTS + 2;
    config.limits.max_bytes_per_session = usize::MAX;
    let db = config.path.clone();
    let wal = dir.path().join("tether.db-wal");
    let (events, _sessions) = sqlite::open(config).unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    const PADDING: usize = 4096;
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let mut largest_wal = 0;
    for n in 0..EVENTS {
        let padding = incompressible(PADDING, &mut seed);
        let message = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n},"data":"{padding}"}}}}"#
        );
        events.append(stream, message.as_bytes()).await.unwrap();
        if n % 500 == 499 {
            events.flush(stream).await.unwrap();
            largest_wal = largest_wal.max(std::fs::metadata(&wal).unwrap().len());
        }
    }
    // A WAL never restarted holds every byte appended and its pages' overhead; restarted
    // every 16 MiB it stays well under that, even with checkpoints delayed by a busy machine.
    let written = (EVENTS * PADDING) as u64;
    assert!(
        largest_wal < written,
        "the WAL reached {largest_wal} bytes for {written} bytes appended: it was never restarted"
    );
    assert_eq!(seqs_read(&events, &owner, stream).await.len(), EVENTS + 1);

    // Idle: the writer copies the WAL back, so one more small commit starts it over.
    tokio::time::sleep(Duration::from_millis(400)).await;
    events.append(stream, &progress(0)).await.unwrap();
    events.flush(stream).await.unwrap();
    let frames = wal_frames(&db);
    assert!(
        frames < 16,
        "{frames} frames in the WAL after an idle writer's next commit: it did not start over"
    );
}
