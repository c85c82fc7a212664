//! The behaviour suite every [`EventStore`] and [`SessionStore`] backend passes, written once.
//!
//! Each check is a public async function that takes a factory for fresh stores and panics when
//! the backend breaks a documented invariant (the numbered list in [`crate::store`]). The
//! factory is given the [`Caps`] the check needs, so the eviction checks can ask for tight
//! ones; a durable backend's factory opens a new, empty store each call (a temporary database,
//! a fresh key prefix). Durable backends also pass the durability checks (reopen loses
//! nothing acknowledged, forgets nothing removed, and reports the orphaned Request streams),
//! given an opener that reopens one location. Run them all with [`run_all`], or one `#[tokio::test]` per check with
//! [`store_suite!`](crate::store_suite), which names failures by check.
//!
//! This module owns what "correct" means for a store; it does not own retention timing, which
//! backends configure and test against their own clocks.
//!
//! Checks that wait only ever wait with a timeout, so a broken wake-up fails the check rather
//! than hanging it, and they pass under paused tokio time as well as real time.

use std::sync::Arc;
use std::time::Duration;

use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tether_proto::version::ProtocolVersion;
use tokio::time::timeout;

use super::error::StoreError;
use super::event_store::{
    EventStore, ReadBatch, SessionUsage, StoredEvent, StreamKind, StreamOwner,
};
use super::session_store::{SessionRecord, SessionStore};
use super::tasks::{TaskChange, TaskRecord, TaskStatus, TaskStore};

/// Per-session caps a check asks its store factory for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Most events one session retains.
    pub max_events_per_session: usize,
    /// Most bytes of frames one session retains.
    pub max_bytes_per_session: usize,
    /// Most streams one session holds.
    pub max_streams_per_session: usize,
}

impl Caps {
    /// Caps the checks that are not about caps never reach (they hold a few hundred small
    /// events per session at most).
    pub const ROOMY: Self = Self {
        max_events_per_session: 100_000,
        max_bytes_per_session: 64 * 1024 * 1024,
        max_streams_per_session: 1024,
    };
}

/// How long a check waits for something that should happen at once before failing.
const PROMPT: Duration = Duration::from_secs(5);

/// How long a check lets a waiter run to show that it is still waiting.
const SETTLE: Duration = Duration::from_millis(20);

/// The `retry` the checks create streams with.
const RETRY: Duration = Duration::from_millis(1000);

// The one list of checks: `run_all` and `store_suite!` both expand it.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_checks {
    ($mode:ident $new_events:expr, $new_sessions:expr) => {
        $crate::__store_suite_expand! {
            $mode ($new_events, $new_sessions)
            events: [
                append_then_read_in_order,
                read_after_every_cursor,
                priming_event_is_seq_zero_with_retry,
                messages_that_are_not_one_line_are_refused,
                wait_returns_at_once_when_already_satisfied,
                wait_wakes_on_append,
                wait_wakes_after_an_abandoned_wait,
                wait_wakes_on_complete,
                wait_wakes_on_remove_session,
                concurrent_appends_keep_seqs_gap_free,
                flush_makes_every_append_readable,
                reads_are_scoped_to_the_owner,
                unknown_streams_are_reported,
                append_after_complete_fails,
                remove_session_forgets_its_streams,
                event_cap_evicts_completed_streams_first,
                event_cap_evicts_oldest_live_events,
                byte_cap_evicts_oldest_and_refuses_oversized_events,
                stream_cap_evicts_completed_then_refuses,
                usage_counts_streams_events_and_bytes,
            ]
            sessions: [
                sessions_insert_get_remove_count,
                sessions_touch_postpones_idle_expiry,
            ]
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __store_suite_expand {
    (run ($new_events:expr, $new_sessions:expr)
        events: [$($event_check:ident),* $(,)?]
        sessions: [$($session_check:ident),* $(,)?]) => {
        $( $crate::store::suite::$event_check($new_events).await; )*
        $( $crate::store::suite::$session_check($new_sessions).await; )*
    };
    (durable_tests ($new_opener:expr) [$($check:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let open = $new_opener();
                $crate::store::suite::$check(&open).await;
            }
        )*
    };
    (tests ($new_events:expr, $new_sessions:expr)
        events: [$($event_check:ident),* $(,)?]
        sessions: [$($session_check:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $event_check() {
                $crate::store::suite::$event_check(&$new_events).await;
            }
        )*
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $session_check() {
                $crate::store::suite::$session_check(&$new_sessions).await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per check of [`store::suite`](crate::store::suite), named
/// after the check, for the backend the two factories make. The calling crate needs `tokio`
/// (with `macros` and `rt-multi-thread`) among its dev-dependencies.
///
/// ```ignore
/// async fn new_events(caps: Caps) -> Arc<dyn EventStore> { /* a fresh, empty store */ }
/// async fn new_sessions() -> Arc<dyn SessionStore> { /* a fresh, empty store */ }
/// tether::store_suite!(new_events, new_sessions);
/// ```
///
/// A backend that outlives its process adds the durability checks, given a function that
/// makes an opener for a new, empty location (a temporary file, a fresh key prefix); each
/// call of the opener opens that same location again:
///
/// ```ignore
/// fn new_opener() -> impl AsyncFn() -> suite::Stores { /* opens one location */ }
/// tether::store_suite!(durable new_opener);
/// ```
#[macro_export]
macro_rules! store_suite {
    (durable $new_opener:expr $(,)?) => {
        $crate::__store_suite_expand!(durable_tests ($new_opener) [
            reopen_loses_nothing_acknowledged,
            reopen_reports_orphaned_request_streams_once,
            reopen_keeps_removals,
            reopen_keeps_the_sealing_key,
        ]);
    };
    ($new_events:expr, $new_sessions:expr $(,)?) => {
        $crate::__store_suite_checks!(tests $new_events, $new_sessions);
    };
}

/// Runs every check in turn against fresh stores from the factories; panics at the first
/// failure.
pub async fn run_all<E, S>(new_events: &E, new_sessions: &S)
where
    E: AsyncFn(Caps) -> Arc<dyn EventStore>,
    S: AsyncFn() -> Arc<dyn SessionStore>,
{
    crate::__store_suite_checks!(run new_events, new_sessions);
}

/// Runs every durability check in turn, each on a new location from `new_opener`; panics at
/// the first failure.
pub async fn run_durable<N, O>(new_opener: N)
where
    N: Fn() -> O,
    O: AsyncFn() -> Stores,
{
    reopen_loses_nothing_acknowledged(&new_opener()).await;
    reopen_reports_orphaned_request_streams_once(&new_opener()).await;
    reopen_keeps_removals(&new_opener()).await;
    reopen_keeps_the_sealing_key(&new_opener()).await;
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn owner(principal: &str, session: &SessionId) -> StreamOwner {
    StreamOwner {
        principal: Arc::from(principal),
        session: session.clone(),
    }
}

fn fresh_owner() -> StreamOwner {
    owner(
        super::event_store::ANONYMOUS_PRINCIPAL,
        &SessionId::generate(),
    )
}

/// A compact JSON-RPC notification, as the server would append it.
fn message(tag: &str, n: usize) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"{tag}","progress":{n}}}}}"#
    )
    .into_bytes()
}

/// The frame every backend stores for message `json` at `id`.
fn message_frame(id: EventId, json: &[u8]) -> Vec<u8> {
    let mut frame = format!("event: message\nid: {id}\ndata: ").into_bytes();
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    frame
}

async fn create(events: &dyn EventStore, owner: &StreamOwner) -> StreamId {
    events
        .create_stream(owner, StreamKind::Request, RETRY, &[])
        .await
        .expect("create_stream")
}

/// Appends and waits until the event is durable (readable): what "acknowledged" means for a
/// store whose appends are pipelined.
async fn append(events: &dyn EventStore, stream: StreamId, json: &[u8]) -> EventId {
    let id = events.append(stream, json).await.expect("append");
    events.flush(stream).await.expect("flush");
    id
}

async fn read_after(
    events: &dyn EventStore,
    owner: &StreamOwner,
    stream: StreamId,
    after: u64,
) -> Result<ReadBatch, StoreError> {
    events.read_after(owner, stream, after, usize::MAX).await
}

async fn read_all(
    events: &dyn EventStore,
    owner: &StreamOwner,
    stream: StreamId,
) -> Result<ReadBatch, StoreError> {
    events.read_from_start(owner, stream, usize::MAX).await
}

fn seqs(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|event| event.id.seq).collect()
}

/// Asserts that `wait_for_more(stream, after)` returns promptly, and that it reports the
/// stream as fine or as gone (backends may say either for a gone stream).
async fn assert_wait_returns(events: &dyn EventStore, stream: StreamId, after: u64, why: &str) {
    let result = timeout(PROMPT, events.wait_for_more(stream, after))
        .await
        .unwrap_or_else(|_| panic!("wait_for_more did not return: {why}"));
    assert!(
        matches!(result, Ok(()) | Err(StoreError::UnknownStream)),
        "wait_for_more returned {result:?}: {why}"
    );
}

/// Starts `wait_for_more(stream, after)` on a task and shows that it is still waiting.
async fn start_waiter(
    events: &Arc<dyn EventStore>,
    stream: StreamId,
    after: u64,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let waiter = tokio::spawn({
        let events = Arc::clone(events);
        async move { events.wait_for_more(stream, after).await }
    });
    tokio::time::sleep(SETTLE).await;
    assert!(
        !waiter.is_finished(),
        "wait_for_more returned with nothing after {after}"
    );
    waiter
}

async fn assert_waiter_returns(
    waiter: tokio::task::JoinHandle<Result<(), StoreError>>,
    allow_gone: bool,
    why: &str,
) {
    let result = timeout(PROMPT, waiter)
        .await
        .unwrap_or_else(|_| panic!("wait_for_more was not woken: {why}"))
        .expect("waiter task panicked");
    let ok = matches!(result, Ok(())) || (allow_gone && result == Err(StoreError::UnknownStream));
    assert!(ok, "wait_for_more returned {result:?}: {why}");
}

// ---------------------------------------------------------------------------------------------
// Event store checks

/// Appends get seqs 1, 2, 3, … and read back in order, as the exact frames the server sends.
pub async fn append_then_read_in_order<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    let messages: Vec<Vec<u8>> = (0..5).map(|n| message("order", n)).collect();
    for (n, json) in messages.iter().enumerate() {
        let id = append(&*events, stream, json).await;
        assert_eq!(id, EventId::new(stream, n as u64 + 1), "append's id");
    }
    let batch = read_after(&*events, &owner, stream, 0).await.expect("read");
    assert!(!batch.complete, "a live stream is not complete");
    assert_eq!(seqs(&batch.events), [1, 2, 3, 4, 5]);
    for (event, json) in batch.events.iter().zip(&messages) {
        assert!(!event.is_priming());
        assert_eq!(event.id.stream, stream);
        assert_eq!(event.message(), &json[..], "message of {}", event.id);
        assert_eq!(
            &event.frame[..],
            &message_frame(event.id, json)[..],
            "frame of {}",
            event.id
        );
    }
}

/// `read_after(n)` returns exactly seqs n+1.. for every cursor, empty past the end, honours
/// `limit`, and says `complete` only once the batch reaches the end of a completed stream.
pub async fn read_after_every_cursor<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    const LAST: u64 = 6;
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    for n in 1..=LAST {
        append(&*events, stream, &message("cursor", n as usize)).await;
    }
    for complete in [false, true] {
        if complete {
            events.complete(stream).await.expect("complete");
        }
        for after in 0..=LAST + 2 {
            let batch = read_after(&*events, &owner, stream, after)
                .await
                .expect("read");
            let expected: Vec<u64> = (after + 1..=LAST).collect();
            assert_eq!(seqs(&batch.events), expected, "after {after}");
            assert_eq!(batch.complete, complete, "complete flag after {after}");

            let limited = events
                .read_after(&owner, stream, after, 2)
                .await
                .expect("read with limit");
            let expected: Vec<u64> = (after + 1..=LAST).take(2).collect();
            assert_eq!(seqs(&limited.events), expected, "after {after}, limit 2");
            let reaches_end = after + 2 >= LAST;
            assert_eq!(
                limited.complete,
                complete && reaches_end,
                "complete flag after {after}, limit 2"
            );
        }
        let batch = read_after(&*events, &owner, stream, u64::MAX)
            .await
            .expect("read past any seq");
        assert!(batch.events.is_empty(), "nothing after u64::MAX");
    }
}

/// Seq 0 is the priming event: empty message, and a frame with the id, the stream's `retry`
/// and empty data. `read_from_start` returns it first; `read_after(0)` starts after it.
pub async fn priming_event_is_seq_zero_with_retry<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = events
        .create_stream(
            &owner,
            StreamKind::Standalone,
            Duration::from_millis(1500),
            &[],
        )
        .await
        .expect("create_stream");
    let batch = read_all(&*events, &owner, stream).await.expect("read");
    assert_eq!(
        seqs(&batch.events),
        [0],
        "a new stream holds its priming event"
    );
    let priming = &batch.events[0];
    assert!(priming.is_priming());
    assert!(priming.message().is_empty(), "priming message is empty");
    assert_eq!(
        &priming.frame[..],
        format!("id: {stream}:0\nretry: 1500\ndata: \n\n").as_bytes()
    );
    let after_priming = read_after(&*events, &owner, stream, 0).await.expect("read");
    assert!(
        after_priming.events.is_empty(),
        "nothing after the priming event yet"
    );

    append(&*events, stream, &message("priming", 1)).await;
    let limited = events
        .read_from_start(&owner, stream, 1)
        .await
        .expect("read with limit");
    assert_eq!(seqs(&limited.events), [0]);
    let batch = read_all(&*events, &owner, stream).await.expect("read");
    assert_eq!(seqs(&batch.events), [0, 1]);
}

/// A message that is empty, spans lines or is not UTF-8 is refused, not stored.
pub async fn messages_that_are_not_one_line_are_refused<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    for bad in [
        &b""[..],
        b"{\"a\":\n1}",
        b"{\"a\":\r1}",
        b"{\"a\":\r\n1}",
        b"\xff{}",
    ] {
        let result = events.append(stream, bad).await;
        assert!(
            matches!(result, Err(StoreError::InvalidMessage(_))),
            "append({:?}) returned {result:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let batch = read_all(&*events, &owner, stream).await.expect("read");
    assert_eq!(seqs(&batch.events), [0], "nothing stored");
    let id = append(&*events, stream, b"{}").await;
    assert_eq!(id.seq, 1, "refused messages used no seq");
}

/// `wait_for_more` returns at once when an event after the cursor is already stored, when the
/// stream is complete, and when the stream is unknown (invariant 5).
pub async fn wait_returns_at_once_when_already_satisfied<
    E: AsyncFn(Caps) -> Arc<dyn EventStore>,
>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    // The priming event is seq 0, so even a fresh stream has something after "before 0"; a
    // writer that waits before reading from start never blocks.
    append(&*events, stream, &message("ready", 1)).await;
    append(&*events, stream, &message("ready", 2)).await;
    assert_wait_returns(&*events, stream, 0, "events 1 and 2 are stored").await;
    assert_wait_returns(&*events, stream, 1, "event 2 is stored").await;
    events.complete(stream).await.expect("complete");
    assert_wait_returns(&*events, stream, 2, "the stream is complete").await;
    assert_wait_returns(&*events, stream, 50, "the stream is complete").await;
    assert_wait_returns(&*events, StreamId::generate(), 0, "the stream is unknown").await;
}

/// A waiter at the end of the stream wakes when an event is appended.
pub async fn wait_wakes_on_append<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    let waiter = start_waiter(&events, stream, 0).await;
    append(&*events, stream, &message("wake", 1)).await;
    assert_waiter_returns(waiter, false, "an event was appended").await;

    // And again from the new end: the watch state of one wake-up must not satisfy the next.
    let waiter = start_waiter(&events, stream, 1).await;
    append(&*events, stream, &message("wake", 2)).await;
    assert_waiter_returns(waiter, false, "a second event was appended").await;
}

/// A wait given up before anything arrived (its future dropped, as a writer's is when its
/// client goes away) leaves no trace: the next waiter is woken by the next append.
pub async fn wait_wakes_after_an_abandoned_wait<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    let abandoned = start_waiter(&events, stream, 0).await;
    abandoned.abort();
    assert!(abandoned.await.is_err_and(|error| error.is_cancelled()));
    let waiter = start_waiter(&events, stream, 0).await;
    append(&*events, stream, &message("after-abandon", 1)).await;
    assert_waiter_returns(
        waiter,
        false,
        "an event was appended after an abandoned wait",
    )
    .await;

    // Two waiters on one stream (a replaced connection's writer still waiting beside the new
    // one) are both woken.
    let first = start_waiter(&events, stream, 1).await;
    let second = start_waiter(&events, stream, 1).await;
    append(&*events, stream, &message("after-abandon", 2)).await;
    assert_waiter_returns(first, false, "first of two waiters").await;
    assert_waiter_returns(second, false, "second of two waiters").await;
}

/// A waiter at the end of the stream wakes when the stream completes.
pub async fn wait_wakes_on_complete<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    append(&*events, stream, &message("complete", 1)).await;
    let waiter = start_waiter(&events, stream, 1).await;
    events.complete(stream).await.expect("complete");
    assert_waiter_returns(waiter, false, "the stream completed").await;
    let batch = read_after(&*events, &owner, stream, 1).await.expect("read");
    assert!(batch.events.is_empty() && batch.complete);
}

/// A waiter wakes when its stream's session is removed, and reads then say `UnknownStream`.
pub async fn wait_wakes_on_remove_session<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = events
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .expect("create_stream");
    let waiter = start_waiter(&events, stream, 0).await;
    events
        .remove_session(&owner.session)
        .await
        .expect("remove_session");
    assert_waiter_returns(waiter, true, "the session was removed").await;
    let read = read_after(&*events, &owner, stream, 0).await;
    assert_eq!(read, Err(StoreError::UnknownStream));
}

/// Many tasks appending to many streams at once: every stream's seqs stay 1..=n with no gap
/// or duplicate, and each task's messages keep its order.
pub async fn concurrent_appends_keep_seqs_gap_free<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    const STREAMS: usize = 6;
    const TASKS_PER_STREAM: usize = 4;
    const APPENDS_PER_TASK: usize = 50;
    let events = new_events(Caps::ROOMY).await;
    // Two sessions, so streams share a session's caps and lock as well as not.
    let owners = [fresh_owner(), fresh_owner()];
    let mut streams = Vec::new();
    for n in 0..STREAMS {
        let owner = owners[n % owners.len()].clone();
        let stream = create(&*events, &owner).await;
        streams.push((owner, stream));
    }
    let mut tasks = Vec::new();
    for (_, stream) in &streams {
        for task in 0..TASKS_PER_STREAM {
            let events = Arc::clone(&events);
            let stream = *stream;
            tasks.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for n in 0..APPENDS_PER_TASK {
                    // Not flushed: the appends of all tasks are in the pipeline at once.
                    let id = events
                        .append(stream, &message(&format!("t{task}"), n))
                        .await
                        .expect("append");
                    assert_eq!(id.stream, stream);
                    seqs.push(id.seq);
                    // Interleave with the other tasks, also on a single-threaded runtime.
                    tokio::task::yield_now().await;
                }
                seqs
            }));
        }
    }
    for task in tasks {
        let seqs = timeout(PROMPT * 6, task)
            .await
            .expect("appends finish")
            .expect("append task panicked");
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "one task's appends got increasing seqs"
        );
    }
    let total = (TASKS_PER_STREAM * APPENDS_PER_TASK) as u64;
    for (owner, stream) in &streams {
        timeout(PROMPT, events.flush(*stream))
            .await
            .expect("flush returns")
            .expect("flush");
        let batch = read_after(&*events, owner, *stream, 0).await.expect("read");
        let expected: Vec<u64> = (1..=total).collect();
        assert_eq!(
            seqs(&batch.events),
            expected,
            "stream {stream}: no gap or duplicate"
        );
        for task in 0..TASKS_PER_STREAM {
            let tag = format!("t{task}");
            let needle = format!(r#""progressToken":"{tag}""#);
            let mine: Vec<&[u8]> = batch
                .events
                .iter()
                .map(|event| event.message())
                .filter(|json| json.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .collect();
            let expected: Vec<Vec<u8>> = (0..APPENDS_PER_TASK).map(|n| message(&tag, n)).collect();
            assert_eq!(mine, expected, "stream {stream}: task {task}'s order");
        }
    }
}

/// Appends that were not waited for are all readable, in order, once `flush` returns; a
/// waiter is woken by them; `complete` after unflushed appends ends the stream after them;
/// `flush` of a stream with nothing pending, unknown or completed returns at once.
pub async fn flush_makes_every_append_readable<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    const N: usize = 2000;
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    let waiter = start_waiter(&events, stream, 0).await;
    for n in 0..N {
        let id = events
            .append(stream, &message("flush", n))
            .await
            .expect("append");
        assert_eq!(id.seq, n as u64 + 1, "seqs are handed out in append order");
    }
    timeout(PROMPT, events.flush(stream))
        .await
        .expect("flush returns")
        .expect("flush");
    assert_waiter_returns(waiter, false, "pipelined appends wake a waiter").await;
    let batch = read_after(&*events, &owner, stream, 0).await.expect("read");
    assert_eq!(seqs(&batch.events), (1..=N as u64).collect::<Vec<_>>());
    assert!(!batch.complete);
    let expected: Vec<Vec<u8>> = (0..N).map(|n| message("flush", n)).collect();
    let got: Vec<Vec<u8>> = batch.events.iter().map(|e| e.message().to_vec()).collect();
    assert!(got == expected, "every message once, in order");

    let done = create(&*events, &owner).await;
    for n in 0..10 {
        events
            .append(done, &message("done", n))
            .await
            .expect("append");
    }
    events.complete(done).await.expect("complete");
    let batch = read_after(&*events, &owner, done, 0).await.expect("read");
    assert_eq!(seqs(&batch.events), (1..=10).collect::<Vec<_>>());
    assert!(
        batch.complete,
        "completion comes after the appends before it"
    );

    for stream in [stream, done, StreamId::generate()] {
        timeout(PROMPT, events.flush(stream))
            .await
            .expect("flush returns at once")
            .expect("nothing to report");
    }
}

/// Only the stream's owner reads it: another session, another principal, or both get
/// `UnknownStream`, exactly as for a stream that never existed (invariant 3).
pub async fn reads_are_scoped_to_the_owner<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let mine = SessionId::generate();
    let theirs = SessionId::generate();
    let alice = owner("alice", &mine);
    let stream = create(&*events, &alice).await;
    append(&*events, stream, &message("scoped", 1)).await;
    // The other session exists in the store too, with a stream of its own.
    let bob_elsewhere = owner("bob", &theirs);
    let their_stream = create(&*events, &bob_elsewhere).await;

    for stranger in [
        owner("alice", &theirs),
        owner("bob", &mine),
        bob_elsewhere.clone(),
        owner(super::event_store::ANONYMOUS_PRINCIPAL, &mine),
    ] {
        for after in [0, 1, 2] {
            let read = read_after(&*events, &stranger, stream, after).await;
            assert_eq!(
                read,
                Err(StoreError::UnknownStream),
                "{stranger:?} after {after}"
            );
        }
        let read = read_all(&*events, &stranger, stream).await;
        assert_eq!(
            read,
            Err(StoreError::UnknownStream),
            "{stranger:?} from start"
        );
    }
    let batch = read_all(&*events, &alice, stream)
        .await
        .expect("owner reads");
    assert_eq!(seqs(&batch.events), [0, 1]);
    let read = read_after(&*events, &alice, their_stream, 0).await;
    assert_eq!(
        read,
        Err(StoreError::UnknownStream),
        "alice reads bob's stream"
    );
}

/// A stream id the store never issued is `UnknownStream` for every operation.
pub async fn unknown_streams_are_reported<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    // The session exists; the stream does not.
    create(&*events, &owner).await;
    let unknown = StreamId::generate();
    assert_eq!(
        read_after(&*events, &owner, unknown, 0).await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        read_all(&*events, &owner, unknown).await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.append(unknown, b"{}").await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.complete(unknown).await,
        Err(StoreError::UnknownStream)
    );
    assert_wait_returns(&*events, unknown, 0, "the stream is unknown").await;
}

/// Appending to a completed stream fails with `Completed`; its events stay readable.
pub async fn append_after_complete_fails<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(new_events: &E) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    append(&*events, stream, &message("done", 1)).await;
    events.complete(stream).await.expect("complete");
    assert_eq!(
        events.append(stream, &message("done", 2)).await,
        Err(StoreError::Completed)
    );
    let batch = read_after(&*events, &owner, stream, 0).await.expect("read");
    assert_eq!(seqs(&batch.events), [1]);
    assert!(batch.complete);
}

/// `remove_session` drops the session's streams (reads and appends then say
/// `UnknownStream`, usage is zero) and nothing of other sessions.
pub async fn remove_session_forgets_its_streams<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let gone = fresh_owner();
    let kept = fresh_owner();
    let live = create(&*events, &gone).await;
    let done = create(&*events, &gone).await;
    append(&*events, done, &message("gone", 1)).await;
    events.complete(done).await.expect("complete");
    let other = create(&*events, &kept).await;
    append(&*events, other, &message("kept", 1)).await;

    events.remove_session(&gone.session).await.expect("remove");
    for stream in [live, done] {
        assert_eq!(
            read_after(&*events, &gone, stream, 0).await,
            Err(StoreError::UnknownStream)
        );
        assert_eq!(
            read_all(&*events, &gone, stream).await,
            Err(StoreError::UnknownStream)
        );
    }
    assert_eq!(
        events.append(live, b"{}").await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.usage(&gone.session).await.expect("usage"),
        SessionUsage::default()
    );
    let batch = read_after(&*events, &kept, other, 0)
        .await
        .expect("other session");
    assert_eq!(seqs(&batch.events), [1]);
    events
        .remove_session(&SessionId::generate())
        .await
        .expect("removing an unknown session is fine");
}

/// Over the event cap, whole completed streams go first, the one completed longest ago first;
/// reading one then says `Expired` to its owner (never a silent gap) and `UnknownStream` to
/// anyone else.
pub async fn event_cap_evicts_completed_streams_first<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps {
        max_events_per_session: 10,
        ..Caps::ROOMY
    })
    .await;
    let owner = fresh_owner();
    // Created first, completed last.
    let a = create(&*events, &owner).await;
    append(&*events, a, &message("a", 1)).await;
    append(&*events, a, &message("a", 2)).await;
    let b = create(&*events, &owner).await;
    append(&*events, b, &message("b", 1)).await;
    append(&*events, b, &message("b", 2)).await;
    let live = create(&*events, &owner).await;
    append(&*events, live, &message("live", 1)).await;
    events.complete(b).await.expect("complete b");
    events.complete(a).await.expect("complete a");
    append(&*events, live, &message("live", 2)).await;
    append(&*events, live, &message("live", 3)).await;
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!(
        (usage.streams, usage.events),
        (3, 10),
        "at the cap, nothing evicted"
    );

    // One over: b (completed first) goes whole.
    append(&*events, live, &message("live", 4)).await;
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!((usage.streams, usage.events), (2, 8), "b evicted");
    assert_eq!(
        read_after(&*events, &owner, b, 0).await,
        Err(StoreError::Expired)
    );
    assert_eq!(
        read_all(&*events, &owner, b).await,
        Err(StoreError::Expired)
    );
    let stranger = fresh_owner();
    assert_eq!(
        read_after(&*events, &stranger, b, 0).await,
        Err(StoreError::UnknownStream),
        "an evicted stream is no one else's business either"
    );
    let batch = read_all(&*events, &owner, a).await.expect("a is intact");
    assert_eq!(seqs(&batch.events), [0, 1, 2]);
    assert!(batch.complete);

    // Then a.
    for n in 5..=7 {
        append(&*events, live, &message("live", n)).await;
    }
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!((usage.streams, usage.events), (1, 8), "a evicted");
    assert_eq!(
        read_after(&*events, &owner, a, 1).await,
        Err(StoreError::Expired)
    );
    let batch = read_all(&*events, &owner, live)
        .await
        .expect("live is intact");
    assert_eq!(seqs(&batch.events), (0..=7).collect::<Vec<u64>>());
}

/// With no completed stream left, the cap evicts the session's oldest events across its live
/// streams; a reader whose cursor points into them gets `Expired`, one past them reads on.
pub async fn event_cap_evicts_oldest_live_events<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps {
        max_events_per_session: 6,
        ..Caps::ROOMY
    })
    .await;
    let owner = fresh_owner();
    let one = create(&*events, &owner).await; // one:0
    let two = create(&*events, &owner).await; // two:0
    append(&*events, one, &message("one", 1)).await;
    append(&*events, two, &message("two", 1)).await;
    append(&*events, one, &message("one", 2)).await;
    append(&*events, two, &message("two", 2)).await; // six events: at the cap
    append(&*events, one, &message("one", 3)).await; // evicts one:0
    append(&*events, two, &message("two", 3)).await; // evicts two:0
    append(&*events, one, &message("one", 4)).await; // evicts one:1
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!((usage.streams, usage.events), (2, 6));

    assert_eq!(
        read_all(&*events, &owner, one).await,
        Err(StoreError::Expired)
    );
    assert_eq!(
        read_after(&*events, &owner, one, 0).await,
        Err(StoreError::Expired)
    );
    let batch = read_after(&*events, &owner, one, 1)
        .await
        .expect("one after 1");
    assert_eq!(seqs(&batch.events), [2, 3, 4]);
    assert_eq!(
        read_all(&*events, &owner, two).await,
        Err(StoreError::Expired)
    );
    let batch = read_after(&*events, &owner, two, 0)
        .await
        .expect("two after 0");
    assert_eq!(seqs(&batch.events), [1, 2, 3]);
    // Eviction does not stop the streams.
    let id = append(&*events, two, &message("two", 4)).await;
    assert_eq!(id.seq, 4);
}

/// The byte cap bounds the frames' total; the oldest events go, the newest always stays, and
/// an event whose frame alone exceeds the cap is refused.
pub async fn byte_cap_evicts_oldest_and_refuses_oversized_events<
    E: AsyncFn(Caps) -> Arc<dyn EventStore>,
>(
    new_events: &E,
) {
    const CAP: usize = 1000;
    let events = new_events(Caps {
        max_bytes_per_session: CAP,
        ..Caps::ROOMY
    })
    .await;
    let owner = fresh_owner();
    let stream = create(&*events, &owner).await;
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(200)).into_bytes();
    let mut last = 0;
    for _ in 0..12 {
        last = append(&*events, stream, &big).await.seq;
        let usage = events.usage(&owner.session).await.expect("usage");
        assert!(
            usage.bytes <= CAP,
            "{} bytes retained, cap {CAP}",
            usage.bytes
        );
        let batch = read_all(&*events, &owner, stream).await;
        if let Ok(batch) = batch {
            let bytes: usize = batch.events.iter().map(|event| event.frame.len()).sum();
            assert_eq!(bytes, usage.bytes, "usage counts the frames' bytes");
        }
    }
    assert_eq!(
        read_all(&*events, &owner, stream).await,
        Err(StoreError::Expired)
    );
    assert_eq!(
        read_after(&*events, &owner, stream, 1).await,
        Err(StoreError::Expired)
    );
    let batch = read_after(&*events, &owner, stream, last - 2)
        .await
        .expect("the newest events stay");
    assert_eq!(seqs(&batch.events), [last - 1, last]);
    let usage = events.usage(&owner.session).await.expect("usage");
    let retained = read_after(
        &*events,
        &owner,
        stream,
        last - u64::try_from(usage.events).unwrap(),
    )
    .await
    .expect("exactly the retained events read back");
    let bytes: usize = retained.events.iter().map(|event| event.frame.len()).sum();
    assert_eq!(bytes, usage.bytes, "usage counts the frames' bytes");

    let huge = format!(r#"{{"pad":"{}"}}"#, "x".repeat(CAP)).into_bytes();
    assert_eq!(
        events.append(stream, &huge).await,
        Err(StoreError::EventTooLarge)
    );
    let batch = read_after(&*events, &owner, stream, last - 1)
        .await
        .expect("a refused event evicts nothing");
    assert_eq!(seqs(&batch.events), [last]);
}

/// At the stream cap a new stream evicts the oldest completed one (which then reads as
/// `Expired`); with every stream live, creation fails with `TooManyStreams`.
pub async fn stream_cap_evicts_completed_then_refuses<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps {
        max_streams_per_session: 3,
        ..Caps::ROOMY
    })
    .await;
    let owner = fresh_owner();
    let a = create(&*events, &owner).await;
    let b = create(&*events, &owner).await;
    let c = create(&*events, &owner).await;
    let full = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await;
    assert_eq!(full, Err(StoreError::TooManyStreams));
    // Other sessions have their own cap.
    create(&*events, &fresh_owner()).await;

    events.complete(b).await.expect("complete b");
    let d = create(&*events, &owner).await;
    assert_eq!(
        read_all(&*events, &owner, b).await,
        Err(StoreError::Expired)
    );
    for stream in [a, c, d] {
        read_all(&*events, &owner, stream)
            .await
            .expect("live streams stay");
    }
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!(usage.streams, 3);
    let full = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await;
    assert_eq!(full, Err(StoreError::TooManyStreams));
}

/// `usage` reports exactly the streams, events (priming included) and frame bytes a session
/// holds, and zero for an unknown session.
pub async fn usage_counts_streams_events_and_bytes<E: AsyncFn(Caps) -> Arc<dyn EventStore>>(
    new_events: &E,
) {
    let events = new_events(Caps::ROOMY).await;
    let owner = fresh_owner();
    let other = fresh_owner();
    assert_eq!(
        events.usage(&owner.session).await.expect("usage"),
        SessionUsage::default()
    );
    let frame_bytes = async |stream| -> usize {
        let batch = read_all(&*events, &owner, stream).await.expect("read");
        batch.events.iter().map(|event| event.frame.len()).sum()
    };

    let a = create(&*events, &owner).await;
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!(
        usage,
        SessionUsage {
            streams: 1,
            events: 1,
            bytes: frame_bytes(a).await
        }
    );
    for n in 1..=3 {
        append(&*events, a, &message("usage", n)).await;
    }
    let b = create(&*events, &owner).await;
    append(&*events, b, &message("usage", 4)).await;
    events.complete(a).await.expect("complete");
    create(&*events, &other).await;
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!(
        usage,
        SessionUsage {
            streams: 2,
            events: 6,
            bytes: frame_bytes(a).await + frame_bytes(b).await
        }
    );
    let usage = events.usage(&other.session).await.expect("usage");
    assert_eq!(
        (usage.streams, usage.events),
        (1, 1),
        "sessions are counted apart"
    );
    events.remove_session(&owner.session).await.expect("remove");
    assert_eq!(
        events.usage(&owner.session).await.expect("usage"),
        SessionUsage::default()
    );
}

// ---------------------------------------------------------------------------------------------
// Session store checks

/// A record of `principal`'s; the client's handshake is kept for all but `default`.
fn record(principal: &str) -> SessionRecord {
    SessionRecord {
        id: SessionId::generate(),
        version: ProtocolVersion::LATEST_LEGACY,
        principal: Arc::from(principal),
        standalone: StreamId::generate(),
        client: (principal != "default").then(|| Arc::new(client_of(principal))),
    }
}

/// What a client called `name` says of itself at `initialize`, with text that needs escaping.
fn client_of(name: &str) -> serde_json::Value {
    serde_json::json!({
        "clientInfo": {"name": name, "version": "1.0 \"é\"\n"},
        "capabilities": {"elicitation": {"form": {}}, "roots": {"listChanged": true}},
    })
}

/// Sessions are stored, looked up, counted (in all and per principal) and removed; `remove`
/// says whether one existed.
pub async fn sessions_insert_get_remove_count<S: AsyncFn() -> Arc<dyn SessionStore>>(
    new_sessions: &S,
) {
    let sessions = new_sessions().await;
    assert_eq!(sessions.count().await.expect("count"), 0);
    let records: Vec<SessionRecord> = ["alice", "bob", "default"].map(record).into();
    for record in &records {
        sessions.insert(record.clone()).await.expect("insert");
    }
    assert_eq!(sessions.count().await.expect("count"), 3);
    let alice_again = record("alice");
    sessions.insert(alice_again.clone()).await.expect("insert");
    assert_eq!(sessions.count_for("alice").await.expect("count_for"), 2);
    assert_eq!(sessions.count_for("bob").await.expect("count_for"), 1);
    assert_eq!(sessions.count_for("carol").await.expect("count_for"), 0);
    assert!(sessions.remove(&alice_again.id).await.expect("remove"));
    assert_eq!(sessions.count_for("alice").await.expect("count_for"), 1);
    for record in &records {
        let got = sessions.get(&record.id).await.expect("get");
        assert_eq!(got.as_ref(), Some(record));
    }
    assert_eq!(
        sessions.get(&SessionId::generate()).await.expect("get"),
        None
    );
    assert!(sessions.remove(&records[1].id).await.expect("remove"));
    assert!(!sessions.remove(&records[1].id).await.expect("remove again"));
    assert_eq!(sessions.get(&records[1].id).await.expect("get"), None);
    assert_eq!(sessions.count().await.expect("count"), 2);
    assert_eq!(sessions.count_for("bob").await.expect("count_for"), 0);
    sessions
        .touch(&records[1].id)
        .await
        .expect("touching a removed session is fine");
    assert_eq!(
        sessions.count().await.expect("count"),
        2,
        "touch creates nothing"
    );
}

/// `expire_idle` removes and returns exactly the sessions idle for longer than the limit;
/// `touch` counts as activity.
pub async fn sessions_touch_postpones_idle_expiry<S: AsyncFn() -> Arc<dyn SessionStore>>(
    new_sessions: &S,
) {
    // Generous margins: under real time the gap between `touch` and `expire_idle` must stay
    // far below IDLE on a loaded machine. Under paused time this takes no time at all.
    const IDLE: Duration = Duration::from_millis(400);
    let sessions = new_sessions().await;
    let touched = record("default");
    let idle = record("default");
    sessions.insert(touched.clone()).await.expect("insert");
    sessions.insert(idle.clone()).await.expect("insert");
    assert!(
        sessions.expire_idle(IDLE).await.expect("expire").is_empty(),
        "nothing is idle yet"
    );
    tokio::time::sleep(IDLE * 2).await;
    sessions.touch(&touched.id).await.expect("touch");
    let expired = sessions.expire_idle(IDLE).await.expect("expire");
    assert_eq!(expired, std::slice::from_ref(&idle.id));
    assert_eq!(sessions.get(&idle.id).await.expect("get"), None);
    assert_eq!(
        sessions.get(&touched.id).await.expect("get"),
        Some(touched.clone())
    );
    assert_eq!(sessions.count().await.expect("count"), 1);
    assert_eq!(
        sessions.count_for("default").await.expect("count_for"),
        1,
        "an expired session no longer counts for its principal"
    );
    assert!(
        sessions.expire_idle(IDLE).await.expect("expire").is_empty(),
        "expired sessions are gone"
    );
}

// ---------------------------------------------------------------------------------------------
// Durability checks (backends that outlive their process)

/// Both halves of a store, as a durable backend's opener returns them.
pub type Stores = (Arc<dyn EventStore>, Arc<dyn SessionStore>);

/// Every event and session acknowledged before the store is closed is there, byte for byte,
/// after it is reopened; completion survives; appends carry on at the next seq and wake
/// waiters on streams from before the reopen.
pub async fn reopen_loses_nothing_acknowledged<O: AsyncFn() -> Stores>(open: &O) {
    const N: usize = 300;
    let owner = fresh_owner();
    let record = SessionRecord {
        id: owner.session.clone(),
        version: ProtocolVersion::LATEST_LEGACY,
        principal: Arc::clone(&owner.principal),
        standalone: StreamId::generate(),
        client: Some(Arc::new(client_of("reopened"))),
    };
    let (live, done, before_live, before_done) = {
        let (events, sessions) = open().await;
        sessions.insert(record.clone()).await.expect("insert");
        let live = events
            .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
            .await
            .expect("create_stream");
        let done = create(&*events, &owner).await;
        // Concurrent appenders, as a server has them: each acknowledged append must survive.
        let appenders: Vec<_> = (0..4)
            .map(|task| {
                let events = Arc::clone(&events);
                tokio::spawn(async move {
                    for n in 0..N / 4 {
                        events
                            .append(live, &message("reopen", task * N + n))
                            .await
                            .expect("append");
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.await.expect("appender");
        }
        events.flush(live).await.expect("flush");
        append(&*events, done, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).await;
        events.complete(done).await.expect("complete");
        let before_live = read_all(&*events, &owner, live).await.expect("read");
        let before_done = read_all(&*events, &owner, done).await.expect("read");
        (live, done, before_live, before_done)
        // Both halves dropped here: the store is closed.
    };
    let mut stored: Vec<Vec<u8>> = before_live.events[1..]
        .iter()
        .map(|event| event.message().to_vec())
        .collect();
    let mut appended: Vec<Vec<u8>> = (0..4)
        .flat_map(|task| (0..N / 4).map(move |n| message("reopen", task * N + n)))
        .collect();
    stored.sort();
    appended.sort();
    assert!(stored == appended, "every acknowledged append stored once");

    let (events, sessions) = open().await;
    let after_live = read_all(&*events, &owner, live).await.expect("read");
    assert_eq!(after_live, before_live, "identical events after reopen");
    let after_done = read_all(&*events, &owner, done).await.expect("read");
    assert_eq!(after_done, before_done);
    assert!(after_done.complete, "completion survives");
    assert_eq!(sessions.get(&record.id).await.expect("get"), Some(record));
    assert_eq!(sessions.count().await.expect("count"), 1);
    let foreign = StreamOwner {
        principal: Arc::from("mallory"),
        session: owner.session.clone(),
    };
    assert_eq!(
        read_all(&*events, &foreign, live).await,
        Err(StoreError::UnknownStream),
        "ownership survives"
    );

    let id = append(&*events, live, &message("reopen", 9999)).await;
    assert_eq!(id.seq, N as u64 + 1, "appends carry on at the next seq");
    assert_eq!(events.append(done, b"{}").await, Err(StoreError::Completed));
    let usage = events.usage(&owner.session).await.expect("usage");
    assert_eq!((usage.streams, usage.events), (2, (N + 2) + 2));
    let waiter = start_waiter(&events, live, id.seq).await;
    append(&*events, live, &message("reopen", 10_000)).await;
    assert_waiter_returns(waiter, false, "append after reopen").await;
}

/// A Request stream left incomplete when the store closed is reported by
/// `orphaned_streams` after the reopen, once, with its owner and request ids; completed
/// streams, standalone streams and streams of removed sessions are not. A store that was
/// never closed has none.
pub async fn reopen_reports_orphaned_request_streams_once<O: AsyncFn() -> Stores>(open: &O) {
    let owner = fresh_owner();
    let gone = fresh_owner();
    let requests = [RequestId::from(7_i64), RequestId::from("seven")];
    let orphan = {
        let (events, _sessions) = open().await;
        assert_eq!(
            events.orphaned_streams().await.expect("orphans"),
            [],
            "a new store has no orphans"
        );
        events
            .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
            .await
            .expect("create_stream");
        let orphan = events
            .create_stream(&owner, StreamKind::Request, RETRY, &requests)
            .await
            .expect("create_stream");
        append(&*events, orphan, &message("orphan", 1)).await;
        let finished = events
            .create_stream(
                &owner,
                StreamKind::Request,
                RETRY,
                &[RequestId::from(8_i64)],
            )
            .await
            .expect("create_stream");
        append(
            &*events,
            finished,
            br#"{"jsonrpc":"2.0","id":8,"result":{}}"#,
        )
        .await;
        events.complete(finished).await.expect("complete");
        events
            .create_stream(&gone, StreamKind::Request, RETRY, &[RequestId::from(9_i64)])
            .await
            .expect("create_stream");
        events.remove_session(&gone.session).await.expect("remove");
        assert_eq!(
            events.orphaned_streams().await.expect("orphans"),
            [],
            "streams of this process are not orphans"
        );
        orphan
    };

    let (events, _sessions) = open().await;
    let orphans = events.orphaned_streams().await.expect("orphans");
    assert_eq!(
        orphans,
        [super::event_store::OrphanedStream {
            owner: owner.clone(),
            stream: orphan,
            requests: requests.to_vec(),
        }]
    );
    assert_eq!(
        events.orphaned_streams().await.expect("orphans"),
        [],
        "each orphan is reported once"
    );
    // What it stored stays readable, and it can still be answered and completed.
    let batch = read_all(&*events, &owner, orphan).await.expect("read");
    assert_eq!(seqs(&batch.events), [0, 1]);
    assert!(!batch.complete);
    append(
        &*events,
        orphan,
        br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"x"}}"#,
    )
    .await;
    events.complete(orphan).await.expect("complete");
    drop((events, _sessions));
    let (events, _sessions) = open().await;
    assert_eq!(
        events.orphaned_streams().await.expect("orphans"),
        [],
        "a completed orphan stays completed"
    );
}

/// A session removed before the store closed stays removed: its record and streams do not
/// come back with the reopen.
pub async fn reopen_keeps_removals<O: AsyncFn() -> Stores>(open: &O) {
    let owner = fresh_owner();
    let record = SessionRecord {
        id: owner.session.clone(),
        version: ProtocolVersion::LATEST_LEGACY,
        principal: Arc::clone(&owner.principal),
        standalone: StreamId::generate(),
        client: None,
    };
    let stream = {
        let (events, sessions) = open().await;
        sessions.insert(record.clone()).await.expect("insert");
        let stream = create(&*events, &owner).await;
        append(&*events, stream, &message("removed", 1)).await;
        events.remove_session(&owner.session).await.expect("remove");
        assert!(sessions.remove(&record.id).await.expect("remove"));
        stream
    };
    let (events, sessions) = open().await;
    assert_eq!(sessions.get(&record.id).await.expect("get"), None);
    assert_eq!(sessions.count().await.expect("count"), 0);
    assert_eq!(
        read_all(&*events, &owner, stream).await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.usage(&owner.session).await.expect("usage"),
        SessionUsage::default()
    );
}

/// The sealing key (`SessionStore::sealing_key`) is made once per location: asked twice it is
/// the same, after a reopen it is still the same (so a `requestState` sealed before a restart
/// opens after it), and another location has another one.
pub async fn reopen_keeps_the_sealing_key<O: AsyncFn() -> Stores>(open: &O) {
    let first = {
        let (_events, sessions) = open().await;
        let key = sessions.sealing_key().await.expect("a sealing key");
        assert_eq!(sessions.sealing_key().await.expect("a sealing key"), key);
        assert_ne!(key, [0; 32], "a made key, not a default");
        key
    };
    let (_events, sessions) = open().await;
    assert_eq!(
        sessions.sealing_key().await.expect("a sealing key"),
        first,
        "the key outlives the process"
    );
}

// ---------------------------------------------------------------------------------------------
// The task store's checks

/// Expands to one `#[tokio::test]` per task-store check, for the backend `new_tasks` makes (a
/// fresh, empty store each call); `durable new_opener` adds the checks of a store that
/// outlives its process (each call of the opener opens the same location again).
///
/// ```ignore
/// async fn new_tasks() -> Arc<dyn TaskStore> { /* a fresh, empty store */ }
/// tether::task_store_suite!(new_tasks);
/// fn new_opener() -> impl AsyncFn() -> Arc<dyn TaskStore> { /* opens one location */ }
/// tether::task_store_suite!(durable new_opener);
/// ```
#[macro_export]
macro_rules! task_store_suite {
    (durable $new_opener:expr $(,)?) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn tasks_reopen_keeps_tasks_and_fails_the_running_ones() {
            let open = $new_opener();
            $crate::store::suite::tasks_reopen_keeps_tasks_and_fails_the_running_ones(&open).await;
        }
    };
    ($new_tasks:expr $(,)?) => {
        $crate::__task_store_suite_tests!(
            $new_tasks,
            [
                tasks_are_readable_by_their_principal_only,
                tasks_follow_questions_answers_and_cancellation,
                tasks_wake_waiters_on_every_change,
                tasks_expire_with_their_ttl,
            ]
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __task_store_suite_tests {
    ($new_tasks:expr, [$($check:ident),* $(,)?]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                $crate::store::suite::$check(&$new_tasks).await;
            }
        )*
    };
}

fn task_of(principal: &str) -> TaskRecord {
    TaskRecord::new(
        Arc::from(principal),
        Some(Duration::from_secs(60)),
        Some(Duration::from_millis(500)),
    )
}

fn questions(keys: &[&str]) -> serde_json::Map<String, serde_json::Value> {
    keys.iter()
        .map(|key| {
            (
                (*key).to_owned(),
                serde_json::json!({"method": "elicitation/create", "params": {"message": key}}),
            )
        })
        .collect()
}

/// A created task reads back whole for its principal, and as nothing for anyone else, an
/// unknown id included; the per-principal count sees it.
pub async fn tasks_are_readable_by_their_principal_only<T: AsyncFn() -> Arc<dyn TaskStore>>(
    new_tasks: &T,
) {
    let store = new_tasks().await;
    let task = task_of("alice");
    store.create(&task).await.expect("create");
    assert_eq!(
        store.get(&task.id, "alice").await.expect("get"),
        Some(task.clone())
    );
    assert_eq!(store.get(&task.id, "bob").await.expect("get"), None);
    let unknown = tether_proto::ids::TaskId::generate();
    assert_eq!(store.get(&unknown, "alice").await.expect("get"), None);
    assert!(
        !store
            .answer(&task.id, "bob", questions(&["x"]))
            .await
            .expect("answer")
    );
    assert!(!store.cancel(&task.id, "bob").await.expect("cancel"));
    assert!(
        store
            .change(&unknown, TaskChange::cancelled())
            .await
            .expect("change")
            .is_none()
    );
    assert_eq!(store.count_for("alice").await.expect("count"), 1);
    assert_eq!(store.count_for("bob").await.expect("count"), 0);
}

/// Questions make the task `input_required`; a partial answer leaves the other pending; the
/// handler takes answers; a cancellation is recorded; a terminal task keeps its outcome.
pub async fn tasks_follow_questions_answers_and_cancellation<T: AsyncFn() -> Arc<dyn TaskStore>>(
    new_tasks: &T,
) {
    let store = new_tasks().await;
    let task = task_of("alice");
    store.create(&task).await.expect("create");
    let asked = store
        .change(&task.id, TaskChange::ask(questions(&["a", "b"])))
        .await
        .expect("change")
        .expect("the task");
    assert_eq!(asked.status, TaskStatus::InputRequired);
    assert!(asked.version > task.version);
    let mut answer = questions(&["a", "unknown"]);
    answer.insert("a".into(), serde_json::json!({"action": "accept"}));
    assert!(
        store
            .answer(&task.id, "alice", answer)
            .await
            .expect("answer")
    );
    let read = store
        .get(&task.id, "alice")
        .await
        .expect("get")
        .expect("the task");
    assert_eq!(read.status, TaskStatus::InputRequired);
    assert_eq!(read.input_requests.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(
        read.input_responses["a"],
        serde_json::json!({"action": "accept"})
    );
    let taken = store
        .change(&task.id, TaskChange::take(vec!["a".into()]))
        .await
        .expect("change")
        .expect("the task");
    assert!(taken.input_responses.is_empty());
    assert!(store.cancel(&task.id, "alice").await.expect("cancel"));
    assert!(
        store
            .get(&task.id, "alice")
            .await
            .expect("get")
            .expect("the task")
            .cancel_requested
    );
    let done = store
        .change(&task.id, TaskChange::cancelled())
        .await
        .expect("change")
        .expect("the task");
    assert_eq!(done.status, TaskStatus::Cancelled);
    let later = store
        .change(
            &task.id,
            TaskChange::completed(serde_json::json!({"content": []})),
        )
        .await
        .expect("change")
        .expect("the task");
    assert_eq!(
        later.status,
        TaskStatus::Cancelled,
        "a terminal task stays as it ended"
    );
    assert!(
        store.cancel(&task.id, "alice").await.expect("cancel"),
        "still found"
    );
}

/// A waiter after a version wakes on each kind of change, and at once when it is already
/// past.
pub async fn tasks_wake_waiters_on_every_change<T: AsyncFn() -> Arc<dyn TaskStore>>(new_tasks: &T) {
    let store = new_tasks().await;
    let task = task_of("alice");
    store.create(&task).await.expect("create");
    let mut version = task.version;
    for step in 0..3 {
        let waiter = tokio::spawn({
            let store = Arc::clone(&store);
            let id = task.id;
            async move { store.wait_for_change(&id, version).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "step {step}: nothing changed yet");
        match step {
            0 => {
                store
                    .change(&task.id, TaskChange::ask(questions(&["q"])))
                    .await
                    .expect("change");
            }
            1 => {
                store
                    .answer(&task.id, "alice", questions(&["q"]))
                    .await
                    .expect("answer");
            }
            _ => {
                store.cancel(&task.id, "alice").await.expect("cancel");
            }
        }
        timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter woke")
            .unwrap()
            .expect("wait");
        version = store
            .get(&task.id, "alice")
            .await
            .expect("get")
            .expect("the task")
            .version;
    }
    timeout(
        Duration::from_secs(1),
        store.wait_for_change(&task.id, version - 1),
    )
    .await
    .expect("already past: at once")
    .expect("wait");
}

/// A task past its TTL reads as gone, and after the sweep (or the backend's own expiry) is
/// counted no more; one without a TTL stays.
pub async fn tasks_expire_with_their_ttl<T: AsyncFn() -> Arc<dyn TaskStore>>(new_tasks: &T) {
    let store = new_tasks().await;
    let short = TaskRecord::new(Arc::from("alice"), Some(Duration::from_millis(50)), None);
    let forever = TaskRecord::new(Arc::from("alice"), None, None);
    store.create(&short).await.expect("create");
    store.create(&forever).await.expect("create");
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(store.get(&short.id, "alice").await.expect("get"), None);
    store.remove_expired().await.expect("sweep");
    assert!(
        store
            .get(&forever.id, "alice")
            .await
            .expect("get")
            .is_some()
    );
    assert_eq!(store.count_for("alice").await.expect("count"), 1);
}

/// After a reopen every task is there; the ones that were running are `failed` with
/// `server_restarted` (reported once), the ended ones unchanged.
pub async fn tasks_reopen_keeps_tasks_and_fails_the_running_ones<
    O: AsyncFn() -> Arc<dyn TaskStore>,
>(
    open: &O,
) {
    let running = task_of("alice");
    let waiting = task_of("alice");
    let done = task_of("alice");
    let done_record = {
        let store = open().await;
        for task in [&running, &waiting, &done] {
            store.create(task).await.expect("create");
        }
        store
            .change(&waiting.id, TaskChange::ask(questions(&["q"])))
            .await
            .expect("change");
        store
            .change(
                &done.id,
                TaskChange::completed(serde_json::json!({"content": []})),
            )
            .await
            .expect("change")
            .expect("the task")
    };
    let store = open().await;
    let mut failed = store.fail_orphans().await.expect("orphans");
    failed.sort();
    let mut expected = vec![running.id, waiting.id];
    expected.sort();
    assert_eq!(failed, expected);
    for id in [running.id, waiting.id] {
        let task = store.get(&id, "alice").await.expect("get").expect("kept");
        assert_eq!(task.status, TaskStatus::Failed);
        assert_eq!(
            task.error.expect("an error")["data"]["reason"],
            super::tasks::SERVER_RESTARTED
        );
    }
    assert_eq!(
        store.get(&done.id, "alice").await.expect("get"),
        Some(done_record)
    );
    assert!(
        store.fail_orphans().await.expect("orphans").is_empty(),
        "once"
    );
}
