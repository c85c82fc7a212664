//! Model-based tests of the two halves of "exactly once, in order" (docs/DESIGN.md#property-1):
//!
//! - the server's stream, as the [`EventStore`] keeps it (memory and SQLite): seeded random
//!   interleavings of create, append, complete, read-with-cut-and-resume (a reader takes a
//!   batch after its cursor, keeps a prefix of it, loses the rest to a cut and resumes from
//!   the last event it kept), expiry (retention running out, paused time), removal of a
//!   session, and, for SQLite, a restart (drop and reopen; the orphaned streams are answered
//!   and completed, as the server does). Every read must return exactly the model's events
//!   after the cursor, or the model's explicit error: never a gap, never a silent empty batch.
//! - the client's sans-IO reconnect logic ([`Reconnect`]) driven end to end against a model
//!   server stream: the connection is cut at random points (mid-event included), some resumes
//!   fail (network, 503 with `Retry-After`), the server replays either after the cursor
//!   (tether) or from the cursor's own event (some peers), `retry` changes, and the stream
//!   ends with its final response or with an explicit refusal of the cursor (expired). What
//!   the application receives is checked against the server's sequence. The machine's own
//!   rules (waits, budgets, one attempt at a time) are covered by
//!   `tether-proto/tests/it/reconnect.rs` and not repeated here.
//!
//! The sequences come from a seeded generator (`CHAOS_MODEL_SEED` replays one seed; the
//! failing seed is printed), and a failing sequence is shrunk by dropping operations one at a
//! time while it still fails, so the report names a short sequence.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tether::proto::backoff::{RandomSource, SplitMix64};
use tether::proto::ids::{SessionId, StreamId};
use tether::proto::jsonrpc::RequestId;
use tether::proto::reconnect::{Action, Event, Failure, GiveUpReason, Reconnect, ReconnectConfig};
use tether::store::sqlite::{self, SqliteStoreConfig};
use tether::store::{
    ANONYMOUS_PRINCIPAL, EventStore, MemoryEventStore, StoreError, StoreLimits, StreamKind,
    StreamOwner,
};

/// Seeds run per backend when no seed is given.
const MEMORY_SEEDS: u64 = 300;
const SQLITE_SEEDS: u64 = 30;
const RECONNECT_SEEDS: u64 = 2000;

/// Operations per generated sequence.
const OPS: usize = 80;

/// The memory store's retention in these tests; an expiry advances paused time past it.
const RETENTION: Duration = Duration::from_secs(60);

/// The priming event's `retry`.
const RETRY: Duration = Duration::from_millis(100);

fn seeds(default: u64) -> Vec<u64> {
    match std::env::var("CHAOS_MODEL_SEED") {
        Ok(seed) if !seed.trim().is_empty() => vec![seed.trim().parse().expect("a u64 seed")],
        _ => (0..default).collect(),
    }
}

/// Draws `0..n` (n ≥ 1).
fn roll(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// Runs `check` on `ops`; on failure shrinks the sequence and panics with the seed, the
/// shortest failing sequence found and its failure.
fn check_and_shrink<O: Clone + fmt::Debug>(
    what: &str,
    seed: u64,
    ops: Vec<O>,
    check: impl Fn(&[O]) -> Result<(), String>,
) {
    let Err(first) = check(&ops) else {
        return;
    };
    let mut ops = ops;
    let mut failure = first;
    let mut i = 0;
    while i < ops.len() {
        let mut shorter = ops.clone();
        shorter.remove(i);
        match check(&shorter) {
            Err(f) => {
                ops = shorter;
                failure = f;
            }
            Ok(()) => i += 1,
        }
    }
    panic!(
        "{what}: seed {seed} fails (replay with CHAOS_MODEL_SEED={seed}); shrunk to {} ops: \
         {ops:#?}\nfailure: {failure}",
        ops.len()
    );
}

// ---------------------------------------------------------------------------------------------
// The server stream against the EventStore

#[derive(Debug, Clone)]
enum StoreOp {
    /// A new Request stream of owner `owner % 2`.
    Create { owner: u8 },
    /// Appends the next message to stream `stream % streams`.
    Append { stream: u8 },
    /// Completes the stream (after its final response, as the server does).
    Complete { stream: u8 },
    /// The stream's reader reads up to `limit` after its cursor, keeps `keep` of them and
    /// loses the rest to a cut; as the other owner when `foreign`.
    Read {
        stream: u8,
        limit: u8,
        keep: u8,
        foreign: bool,
    },
    /// A reader that never read the stream reads it from the start (priming event first).
    ReadFromStart { stream: u8, limit: u8 },
    /// Retention runs out (memory: paused time advanced past it).
    Expire,
    /// The session of owner `owner % 2` is removed (DELETE, idle expiry); the owner gets a
    /// new session.
    RemoveSession { owner: u8 },
    /// The process restarts (SQLite: drop and reopen the same file).
    Reopen,
}

fn store_ops(seed: u64, durable: bool) -> Vec<StoreOp> {
    let mut rng = SplitMix64::new(seed);
    let mut ops = vec![StoreOp::Create { owner: 0 }];
    for _ in 1..OPS {
        let small = |rng: &mut SplitMix64| roll(rng, 256) as u8;
        let op = match roll(&mut rng, 100) {
            0..8 => StoreOp::Create {
                owner: small(&mut rng),
            },
            8..48 => StoreOp::Append {
                stream: small(&mut rng),
            },
            48..54 => StoreOp::Complete {
                stream: small(&mut rng),
            },
            54..84 => StoreOp::Read {
                stream: small(&mut rng),
                limit: 1 + roll(&mut rng, 8) as u8,
                keep: small(&mut rng),
                foreign: roll(&mut rng, 10) == 0,
            },
            84..88 => StoreOp::ReadFromStart {
                stream: small(&mut rng),
                limit: 1 + roll(&mut rng, 4) as u8,
            },
            88..92 => StoreOp::RemoveSession {
                owner: small(&mut rng),
            },
            _ if durable => StoreOp::Reopen,
            _ => StoreOp::Expire,
        };
        ops.push(op);
    }
    ops
}

/// What the model knows about one stream.
#[derive(Debug)]
struct ModelStream {
    id: StreamId,
    owner: usize,
    /// Messages with seq 1, 2, …
    messages: Vec<Vec<u8>>,
    complete: bool,
    expired: bool,
    removed: bool,
    /// Its reader's cursor (the seq of the last event it kept; 0 = the priming event).
    cursor: u64,
}

struct Model {
    owners: [StreamOwner; 2],
    streams: Vec<ModelStream>,
    next_request: u64,
}

fn new_owner() -> StreamOwner {
    StreamOwner {
        principal: Arc::from(ANONYMOUS_PRINCIPAL),
        session: SessionId::generate(),
    }
}

fn message(stream: usize, index: usize) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"s":{stream},"progress":{index}}}}}"#)
        .into_bytes()
}

/// The backend under test; `reopen` is `None` for a store that does not outlive its process.
struct Backend<'a> {
    store: Arc<dyn EventStore>,
    reopen: Option<&'a dyn Fn() -> Arc<dyn EventStore>>,
}

async fn run_store_ops(mut backend: Backend<'_>, ops: &[StoreOp]) -> Result<(), String> {
    let mut model = Model {
        owners: [new_owner(), new_owner()],
        streams: Vec::new(),
        next_request: 1,
    };
    for (step, op) in ops.iter().enumerate() {
        let at = |e: String| format!("op {step} {op:?}: {e}");
        let pick = |s: u8, model: &Model| -> Option<usize> {
            (!model.streams.is_empty()).then(|| usize::from(s) % model.streams.len())
        };
        let store = Arc::clone(&backend.store);
        match *op {
            StoreOp::Create { owner } => {
                let owner = usize::from(owner) % 2;
                let request = RequestId::from(model.next_request);
                model.next_request += 1;
                let id = store
                    .create_stream(&model.owners[owner], StreamKind::Request, RETRY, &[request])
                    .await
                    .map_err(|e| at(format!("create_stream: {e}")))?;
                model.streams.push(ModelStream {
                    id,
                    owner,
                    messages: Vec::new(),
                    complete: false,
                    expired: false,
                    removed: false,
                    cursor: 0,
                });
            }
            StoreOp::Append { stream } => {
                let Some(k) = pick(stream, &model) else {
                    continue;
                };
                let s = &mut model.streams[k];
                if s.removed || s.expired {
                    // What appending to a forgotten stream answers is not pinned; the
                    // server never does it.
                    continue;
                }
                let json = message(k, s.messages.len() + 1);
                let result = store.append(s.id, &json).await;
                if s.complete {
                    if result != Err(StoreError::Completed) {
                        return Err(at(format!("append after complete gave {result:?}")));
                    }
                    continue;
                }
                let id = result.map_err(|e| at(format!("append: {e}")))?;
                // Acknowledged means durable: a pipelined store's reads see it after this.
                store
                    .flush(s.id)
                    .await
                    .map_err(|e| at(format!("flush: {e}")))?;
                let expected = s.messages.len() as u64 + 1;
                if id.stream != s.id || id.seq != expected {
                    return Err(at(format!("append returned {id}, expected seq {expected}")));
                }
                s.messages.push(json);
            }
            StoreOp::Complete { stream } => {
                let Some(k) = pick(stream, &model) else {
                    continue;
                };
                let s = &mut model.streams[k];
                if s.removed || s.expired || s.complete {
                    continue;
                }
                store
                    .complete(s.id)
                    .await
                    .map_err(|e| at(format!("complete: {e}")))?;
                s.complete = true;
            }
            StoreOp::Read {
                stream,
                limit,
                keep,
                foreign,
            } => {
                let Some(k) = pick(stream, &model) else {
                    continue;
                };
                let s = &model.streams[k];
                let reader = if foreign { 1 - s.owner } else { s.owner };
                let result = store
                    .read_after(&model.owners[reader], s.id, s.cursor, usize::from(limit))
                    .await;
                let expected_error = if foreign || s.removed {
                    Some(StoreError::UnknownStream)
                } else if s.expired {
                    Some(StoreError::Expired)
                } else {
                    None
                };
                if let Some(error) = expected_error {
                    if result.as_ref().err() != Some(&error) {
                        return Err(at(format!(
                            "read after {} expected {error:?}, got {:?}",
                            s.cursor,
                            result.map(|b| b.events.len())
                        )));
                    }
                    continue;
                }
                let batch = result.map_err(|e| at(format!("read_after {}: {e}", s.cursor)))?;
                let from = s.cursor as usize + 1;
                let to = (s.cursor as usize + usize::from(limit)).min(s.messages.len());
                let got: Vec<(u64, Vec<u8>)> = batch
                    .events
                    .iter()
                    .map(|e| (e.id.seq, e.message().to_vec()))
                    .collect();
                let want: Vec<(u64, Vec<u8>)> = (from..=to)
                    .map(|seq| (seq as u64, s.messages[seq - 1].clone()))
                    .collect();
                if got != want {
                    return Err(at(format!(
                        "read after {} (limit {limit}) gave seqs {:?}, the model has {:?}",
                        s.cursor,
                        got.iter().map(|g| g.0).collect::<Vec<_>>(),
                        want.iter().map(|w| w.0).collect::<Vec<_>>()
                    )));
                }
                if batch.events.iter().any(|e| e.id.stream != s.id) {
                    return Err(at("an event of another stream".to_owned()));
                }
                let reaches_end = to == s.messages.len();
                if batch.complete != (s.complete && reaches_end) {
                    return Err(at(format!(
                        "complete flag {} (stream complete {}, batch reaches end {reaches_end})",
                        batch.complete, s.complete
                    )));
                }
                // The cut: the reader kept only a prefix; it resumes after the last one kept.
                let kept = usize::from(keep) % (got.len() + 1);
                if kept > 0 {
                    model.streams[k].cursor = got[kept - 1].0;
                }
            }
            StoreOp::ReadFromStart { stream, limit } => {
                let Some(k) = pick(stream, &model) else {
                    continue;
                };
                let s = &model.streams[k];
                let result = store
                    .read_from_start(&model.owners[s.owner], s.id, usize::from(limit))
                    .await;
                if s.removed {
                    if result.as_ref().err() != Some(&StoreError::UnknownStream) {
                        return Err(at(format!(
                            "read_from_start of a removed stream: {result:?}"
                        )));
                    }
                    continue;
                }
                if s.expired {
                    if result.as_ref().err() != Some(&StoreError::Expired) {
                        return Err(at(format!(
                            "read_from_start of an expired stream: {result:?}"
                        )));
                    }
                    continue;
                }
                let batch = result.map_err(|e| at(format!("read_from_start: {e}")))?;
                let seqs: Vec<u64> = batch.events.iter().map(|e| e.id.seq).collect();
                let want: Vec<u64> = (0..=s.messages.len() as u64)
                    .take(usize::from(limit))
                    .collect();
                if seqs != want || !batch.events[0].is_priming() {
                    return Err(at(format!("read_from_start gave {seqs:?}, want {want:?}")));
                }
            }
            StoreOp::Expire => {
                // Only the memory store runs on tokio's clock; paused in these tests.
                if backend.reopen.is_some() {
                    continue;
                }
                tokio::time::advance(RETENTION + Duration::from_millis(1)).await;
                for s in &mut model.streams {
                    if s.complete && !s.removed {
                        s.expired = true;
                    }
                }
            }
            StoreOp::RemoveSession { owner } => {
                let owner = usize::from(owner) % 2;
                store
                    .remove_session(&model.owners[owner].session)
                    .await
                    .map_err(|e| at(format!("remove_session: {e}")))?;
                for s in &mut model.streams {
                    if s.owner == owner {
                        s.removed = true;
                    }
                }
                model.owners[owner] = new_owner();
            }
            StoreOp::Reopen => {
                let Some(reopen) = backend.reopen else {
                    continue;
                };
                // Close the old store (and its lock) before opening the file again.
                drop(store);
                backend.store = Arc::new(MemoryEventStore::new(StoreLimits::default()));
                backend.store = reopen();
                let store = Arc::clone(&backend.store);
                // The server asks for orphans before serving: the request streams the dead
                // process left incomplete, each once.
                let orphans = store
                    .orphaned_streams()
                    .await
                    .map_err(|e| at(format!("orphaned_streams: {e}")))?;
                let got: BTreeSet<String> = orphans.iter().map(|o| o.stream.to_string()).collect();
                let want: BTreeSet<String> = model
                    .streams
                    .iter()
                    .filter(|s| !s.complete && !s.removed && !s.expired)
                    .map(|s| s.id.to_string())
                    .collect();
                if got != want {
                    return Err(at(format!("orphans {got:?}, the model has {want:?}")));
                }
                // ... and answers and completes them, as the server does.
                for (k, s) in model.streams.iter_mut().enumerate() {
                    if s.complete || s.removed || s.expired {
                        continue;
                    }
                    let json = message(k, s.messages.len() + 1);
                    let id = store
                        .append(s.id, &json)
                        .await
                        .map_err(|e| at(format!("answering an orphan: {e}")))?;
                    if id.seq != s.messages.len() as u64 + 1 {
                        return Err(at(format!("orphan answer stored at {id}")));
                    }
                    s.messages.push(json);
                    store
                        .complete(s.id)
                        .await
                        .map_err(|e| at(format!("completing an orphan: {e}")))?;
                    s.complete = true;
                }
            }
        }
    }
    // At the end every live reader resumes and reads to the end: exactly the rest.
    let store = &backend.store;
    for s in &model.streams {
        if s.removed || s.expired {
            continue;
        }
        let batch = store
            .read_after(&model.owners[s.owner], s.id, s.cursor, usize::MAX)
            .await
            .map_err(|e| format!("final read of {}: {e}", s.id))?;
        let seqs: Vec<u64> = batch.events.iter().map(|e| e.id.seq).collect();
        let want: Vec<u64> = (s.cursor + 1..=s.messages.len() as u64).collect();
        if seqs != want {
            return Err(format!(
                "final read after {}: {seqs:?}, want {want:?}",
                s.cursor
            ));
        }
    }
    Ok(())
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

#[test]
fn memory_store_streams_match_the_model_under_cuts_resumes_and_expiry() {
    for seed in seeds(MEMORY_SEEDS) {
        check_and_shrink("memory store", seed, store_ops(seed, false), |ops| {
            paused_runtime().block_on(async {
                let store = MemoryEventStore::new({
                    let mut config = StoreLimits::default();
                    config.retention = RETENTION;
                    config
                });
                run_store_ops(
                    Backend {
                        store: Arc::new(store),
                        reopen: None,
                    },
                    ops,
                )
                .await
            })
        });
    }
}

fn sqlite_store(path: &Path) -> Arc<dyn EventStore> {
    let (events, _sessions) = sqlite::open(SqliteStoreConfig::new(path)).expect("open");
    Arc::new(events)
}

#[test]
fn sqlite_store_streams_match_the_model_under_cuts_resumes_and_restarts() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for seed in seeds(SQLITE_SEEDS) {
        check_and_shrink("sqlite store", seed, store_ops(seed, true), |ops| {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("model.db");
            let reopen = || sqlite_store(&path);
            runtime.block_on(run_store_ops(
                Backend {
                    store: sqlite_store(&path),
                    reopen: Some(&reopen),
                },
                ops,
            ))
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The client's reconnect logic against a model server stream

#[derive(Debug, Clone, Copy)]
enum ReplayStyle {
    /// tether: events after the cursor.
    After,
    /// Some peers: the cursor's own event again, then the rest.
    Including,
}

#[derive(Debug, Clone)]
enum LinkOp {
    /// The server appends a message (the last one is the final response).
    Produce,
    /// The link delivers the next event to the client, if one is pending.
    Deliver,
    /// The link carries a new `retry` on the next event.
    Retry(u64),
    /// The connection is lost: a network error, an idle timeout or a clean close. Whatever
    /// was not delivered (including a partly received event) is gone.
    Cut(u8),
    /// The next resume attempt fails (network, or 503 with a `Retry-After` of this many ms).
    FailNextResume(Option<u64>),
    /// Retention runs out: a resume after this point is refused (400 `expired`).
    Expire,
}

fn link_ops(seed: u64) -> (ReplayStyle, u64, Vec<LinkOp>) {
    let mut rng = SplitMix64::new(seed);
    let style = if roll(&mut rng, 2) == 0 {
        ReplayStyle::After
    } else {
        ReplayStyle::Including
    };
    let total = 1 + roll(&mut rng, 30);
    let ops = (0..OPS)
        .map(|_| match roll(&mut rng, 100) {
            0..30 => LinkOp::Produce,
            30..75 => LinkOp::Deliver,
            75..78 => LinkOp::Retry(roll(&mut rng, 500)),
            78..92 => LinkOp::Cut(roll(&mut rng, 3) as u8),
            92..98 => {
                LinkOp::FailNextResume((roll(&mut rng, 2) == 0).then(|| roll(&mut rng, 2000)))
            }
            _ => LinkOp::Expire,
        })
        .collect();
    (style, total, ops)
}

/// Drives one POST stream through `ops` and then to its end, checking what the application
/// received (message seqs) against what the server sent, and how the stream ended.
fn run_link(style: ReplayStyle, total: u64, ops: &[LinkOp]) -> Result<(), String> {
    let start = std::time::Instant::now();
    let config = ReconnectConfig::default();
    let mut machine = Reconnect::post_stream(config, SplitMix64::new(7), start);
    let mut now = start;
    // Server side: events 1..=produced exist (0 is priming); the last (seq `total`) is final.
    let mut produced = 0u64;
    // The connection: `Some(next seq to send)` while one is open.
    let mut link: Option<u64> = Some(0);
    let mut pending_retry: Option<Duration> = None;
    let mut fail_next: Vec<Option<u64>> = Vec::new();
    let mut expired = false;
    // Client side: the application's sequence and the dedup set of ids.
    let mut delivered: Vec<u64> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    // Whether the priming event reached the client: before it, a lost POST stream has no id
    // to resume from (the one failure no client can avoid).
    let mut primed = false;
    let id = |seq: u64| format!("s:{seq}");

    let mut script = ops
        .iter()
        .cloned()
        .collect::<std::collections::VecDeque<_>>();
    for _ in 0..10_000 {
        // The script first, then the stream runs to its end on its own.
        let op = script.pop_front().unwrap_or(if produced < total {
            LinkOp::Produce
        } else {
            LinkOp::Deliver
        });
        match op {
            LinkOp::Produce => produced = (produced + 1).min(total),
            LinkOp::Retry(ms) => pending_retry = Some(Duration::from_millis(ms)),
            LinkOp::FailNextResume(r) => fail_next.push(r),
            LinkOp::Expire => expired = true,
            LinkOp::Cut(kind) => {
                if link.take().is_some() {
                    let failure = [Failure::Network, Failure::Idle, Failure::CleanClose]
                        [usize::from(kind) % 3];
                    machine.on_failure(now, failure);
                }
            }
            LinkOp::Deliver => {
                if let Some(next) = link
                    && next <= produced
                {
                    link = Some(next + 1);
                    // The SSE layer's event, then the client's dedup, then the machine.
                    let name = id(next);
                    let mut event = if next == 0 {
                        Event::priming("s:0")
                    } else {
                        Event::message(Some(&name))
                    };
                    if let Some(retry) = pending_retry.take() {
                        event = event.with_retry(retry);
                    }
                    if next == total {
                        event = event.final_response();
                    }
                    primed = true;
                    if next > 0 {
                        if !seen.insert(next) {
                            // A replayed duplicate: dropped, not delivered, cursor unchanged.
                            continue;
                        }
                        delivered.push(next);
                    }
                    machine.on_event(now, event);
                }
            }
        }
        // The driver: act on the machine's decision.
        loop {
            match machine.poll(now) {
                Action::Wait { until } => now = until,
                Action::Connect { last_event_id } => {
                    // The driver answers each attempt before polling again, so a connection
                    // still open here would be a second one.
                    if link.is_some() {
                        return Err("a second connection of one stream".to_owned());
                    }
                    let last = delivered.last().map_or_else(|| id(0), |s| id(*s));
                    if last_event_id.as_deref() != Some(last.as_str()) {
                        return Err(format!(
                            "resumed with {last_event_id:?}, the application last took {last}"
                        ));
                    }
                    if !fail_next.is_empty() {
                        let failure = match fail_next.remove(0) {
                            None => Failure::Network,
                            Some(ms) => Failure::Status {
                                code: 503,
                                retry_after: Some(Duration::from_millis(ms)),
                            },
                        };
                        machine.on_failure(now, failure);
                        continue;
                    }
                    if expired {
                        machine.on_failure(
                            now,
                            Failure::Status {
                                code: 400,
                                retry_after: None,
                            },
                        );
                        continue;
                    }
                    let cursor = delivered.last().copied().unwrap_or(0);
                    machine.on_connected(now);
                    link = Some(match style {
                        ReplayStyle::After => cursor + 1,
                        ReplayStyle::Including => cursor.max(1),
                    });
                }
                Action::Connecting => return Err("an attempt left outstanding".to_owned()),
                Action::Streaming => break,
                Action::Done => {
                    let want: Vec<u64> = (1..=total).collect();
                    if delivered != want {
                        return Err(format!("done with {delivered:?}, the server sent {want:?}"));
                    }
                    return Ok(());
                }
                Action::GiveUp(reason) => {
                    let prefix: Vec<u64> = (1..=delivered.len() as u64).collect();
                    if delivered != prefix {
                        return Err(format!(
                            "{reason:?} after a sequence with a gap: {delivered:?}"
                        ));
                    }
                    // Only an explicit refusal or the budget may end a resumable stream.
                    return match reason {
                        GiveUpReason::Fatal { status: 400 } if expired => Ok(()),
                        GiveUpReason::BudgetExhausted { .. } => Ok(()),
                        GiveUpReason::NotResumable if !primed => Ok(()),
                        reason => Err(format!("gave up with {reason:?}")),
                    };
                }
            }
        }
    }
    Err(format!("the stream never ended; delivered {delivered:?}"))
}

#[test]
fn reconnect_logic_delivers_the_server_sequence_exactly_once_under_random_cuts() {
    for seed in seeds(RECONNECT_SEEDS) {
        let (style, total, ops) = link_ops(seed);
        check_and_shrink(
            &format!("reconnect ({style:?}, {total} events)"),
            seed,
            ops,
            |ops| run_link(style, total, ops),
        );
    }
}
