//! `tether bench store`: append and replay events/s of each event-store backend, in process
//! (no HTTP), to tell store cost from transport cost. Memory and SQLite (a temporary file)
//! always; Redis with `--redis URL`.
//!
//! Each run appends the events from `tasks` concurrent tasks, one stream (and session) each,
//! so that SQLite's group commit and Redis's pipelining share their round trips as they do
//! under a busy server; then completes the streams and reads them back in the server
//! writer's batch size, checking every seq. Appends are timed until every stream is flushed
//! (durable), since a pipelined store's appends return once queued. The same method as the criterion bench
//! `crates/tether/benches/resume.rs` (`store/*`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::json;
use tether::proto::ids::{SessionId, StreamId};
use tether::store::{
    ANONYMOUS_PRINCIPAL, EventStore, MemoryEventStore, StoreLimits, StreamKind, StreamOwner,
};
use tokio::task::JoinSet;

use super::{Report, median, per_second};

/// Events the server's writer reads per store round trip.
const READ_BATCH: usize = 256;

/// Bytes a session may retain in the bench's stores: far above what a run appends.
const BYTE_CAP: usize = 1 << 30;

/// `events` progress notifications as the server serializes them.
fn progress_messages(events: u64) -> Vec<Vec<u8>> {
    (1..=events)
        .map(|i| {
            json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "bench", "progress": i, "total": events},
            })
            .to_string()
            .into_bytes()
        })
        .collect()
}

/// Runs the store scenario on every backend available.
pub(crate) async fn run(
    events: u64,
    tasks: u64,
    runs: u64,
    redis: Option<&str>,
) -> anyhow::Result<Report> {
    let messages = Arc::new(progress_messages(events));
    let tasks = usize::try_from(tasks).context("--tasks")?;
    let cap = usize::try_from(events).context("--events")? + 16;
    let mut report = Report::new("store", "in process");
    report.add("events", events, "per run");
    report.add("tasks", tasks, "concurrent appenders");

    let memory = MemoryEventStore::new({
        let mut config = StoreLimits::default();
        config.max_events_per_session = cap.max(StoreLimits::DEFAULT_MAX_EVENTS_PER_SESSION);
        config.max_bytes_per_session = BYTE_CAP;
        config
    });
    let (append, read) = measure(Arc::new(memory), &messages, tasks, runs)
        .await
        .context("memory store")?;
    report.add("memory_append_per_sec", append, "events/s");
    report.add("memory_read_per_sec", read, "events/s");

    let dir = tempfile::tempdir().context("a temporary directory for SQLite")?;
    let mut config = tether::store::sqlite::SqliteStoreConfig::new(dir.path().join("bench.db"));
    config.limits.max_events_per_session = config.limits.max_events_per_session.max(cap);
    config.limits.max_bytes_per_session = BYTE_CAP;
    let (sqlite, _sessions) = tether::store::sqlite::open(config).context("opening SQLite")?;
    let sqlite = Arc::new(sqlite);
    let before = sqlite.transactions();
    let (append, read) = measure(Arc::clone(&sqlite), &messages, tasks, runs)
        .await
        .context("sqlite store")?;
    report.add("sqlite_append_per_sec", append, "events/s");
    report.add("sqlite_read_per_sec", read, "events/s");
    // How well appends share commits: the pipeline's point.
    let commits = sqlite.transactions() - before;
    report.add(
        "sqlite_events_per_commit",
        (events * runs) as f64 / commits.max(1) as f64,
        "events per transaction (all runs, setup included)",
    );

    if let Some(url) = redis {
        let mut config = tether::store::redis::RedisStoreConfig::new(url);
        config.key_prefix = format!("tether-bench-{}:", SessionId::generate());
        config.limits.max_events_per_session = config.limits.max_events_per_session.max(cap);
        config.limits.max_bytes_per_session = BYTE_CAP;
        let (store, _sessions) = tether::store::redis::open(config)
            .await
            .context("opening Redis")?;
        let (append, read) = measure(Arc::new(store), &messages, tasks, runs)
            .await
            .context("redis store")?;
        report.add("redis_append_per_sec", append, "events/s");
        report.add("redis_read_per_sec", read, "events/s");
    }
    Ok(report)
}

/// Median append and read rates of `runs` runs on `store`.
async fn measure<S: EventStore + 'static>(
    store: Arc<S>,
    messages: &Arc<Vec<Vec<u8>>>,
    tasks: usize,
    runs: u64,
) -> anyhow::Result<(f64, f64)> {
    let mut appends = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..runs {
        let (append, read) = one_run(&store, messages, tasks).await?;
        let events = u64::try_from(messages.len()).unwrap_or(u64::MAX);
        appends.push(per_second(events, append));
        reads.push(per_second(events, read));
    }
    Ok((median(appends), median(reads)))
}

/// Appends `messages` from `tasks` concurrent tasks (timed), completes the streams, reads them
/// back (timed), removes the sessions.
async fn one_run<S: EventStore + 'static>(
    store: &Arc<S>,
    messages: &Arc<Vec<Vec<u8>>>,
    tasks: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let per_task = messages.len().div_ceil(tasks);
    let mut streams: Vec<(StreamOwner, StreamId)> = Vec::new();
    for _ in 0..tasks {
        let owner = StreamOwner {
            principal: Arc::from(ANONYMOUS_PRINCIPAL),
            session: SessionId::generate(),
        };
        let stream = store
            .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
            .await
            .context("create_stream")?;
        streams.push((owner, stream));
    }

    let start = Instant::now();
    let mut appenders = JoinSet::new();
    for (task, (_, stream)) in streams.iter().enumerate() {
        let (store, messages, stream) = (Arc::clone(store), Arc::clone(messages), *stream);
        appenders.spawn(async move {
            let from = (task * per_task).min(messages.len());
            let to = ((task + 1) * per_task).min(messages.len());
            for message in &messages[from..to] {
                black_box(store.append(stream, message).await?);
            }
            anyhow::Ok(())
        });
    }
    while let Some(result) = appenders.join_next().await {
        result.context("appender task")?.context("append")?;
    }
    // Timed until durable: a pipelined store's appends return once queued.
    for (_, stream) in &streams {
        store.flush(*stream).await.context("flush")?;
    }
    let append = start.elapsed();

    for (_, stream) in &streams {
        store.complete(*stream).await.context("complete")?;
    }

    let start = Instant::now();
    let mut read = 0;
    for (owner, stream) in &streams {
        let mut cursor = 0;
        loop {
            let batch = store
                .read_after(owner, *stream, cursor, READ_BATCH)
                .await
                .context("read_after")?;
            for event in &batch.events {
                ensure!(event.id.seq == cursor + 1, "seqs must be contiguous");
                cursor = event.id.seq;
                black_box(&event.frame);
            }
            read += batch.events.len();
            if batch.complete {
                break;
            }
        }
    }
    let read_time = start.elapsed();
    ensure!(
        read == messages.len(),
        "read {read} of {} events back",
        messages.len()
    );
    for (owner, _) in &streams {
        store
            .remove_session(&owner.session)
            .await
            .context("remove_session")?;
    }
    Ok((append, read_time))
}
