//! Pipelined durable appends: the front half that a durable backend puts before its commits,
//! so that a handler's emit returns once its event is queued rather than once it is committed.
//!
//! A backend that commits in batches (SQLite's writer thread, Redis's pipelined scripts) opens
//! a [`Lane`] per stream it created. An append takes the lane's next seq, builds the frame for
//! it, and hands it to the backend's committer in the same step, so the committer sees each
//! stream's events in seq order; then it returns. The committer reports back per lane:
//! [`Lane::committed`] once the event is durable (SQLite's commit returned, Redis replied),
//! [`Lane::fail`] when the commit failed. Readers never see anything this module holds: they
//! read the backend, which has only what was committed, and they are woken by the backend
//! after the commit. So "persist, then send" holds with the commit moved off the emitter's
//! path.
//!
//! It owns the two bounds that keep memory bounded while emits run ahead of commits: a window
//! of [`WINDOW`] uncommitted events per stream and a budget of [`QUEUED_BYTES`] of queued
//! frames per store; an append waits (backpressure) while either is full. It does not own
//! the commits, the readers or their wake-ups.
//!
//! # The committed tail
//!
//! A committer that reports through [`report_committed`] also leaves each lane the frames it
//! just committed: the lane keeps the newest of them ([`TAIL_EVENTS`], [`TAIL_BYTES`]), and
//! [`Lane::read_tail`] serves a live reader from there instead of the backend, the same
//! bytes the backend would return. Only committed frames enter it, so "persist, then send"
//! is unchanged; the backend decides when a tail read is allowed (its caps may have evicted
//! what the tail still holds).
//!
//! # Failures
//!
//! A failed commit poisons the lanes of the streams it touched: the committer drops whatever
//! else is queued on them (none of it was ever readable), and the next append, flush or
//! complete of each such stream returns the error (the same [`StoreError`] an unpipelined
//! append would have returned) and removes the lane. From then on that stream's appends take
//! the backend's unpipelined path, whose answers come after the commit. The error means: the
//! events appended to this stream since the last successful answer may be lost; the caller
//! that must not lose one (a request's final response) follows it with
//! [`EventStore::flush`](super::event_store::EventStore::flush) and appends again on an error.

// Each durable backend uses part of this module: the lane queue is SQLite's, the direct
// hand-off and demotion Redis's; both keep committed tails.
#![cfg_attr(not(all(feature = "sqlite", feature = "redis")), allow(dead_code))]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::collections::VecDeque;

use bytes::Bytes;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tokio::sync::{Notify, Semaphore, oneshot};

use super::error::StoreError;
use super::event_store::{StoredEvent, StreamOwner};
use super::frame;
use super::map::FastMap;
use crate::lock as guard;

/// Most events of one stream queued but not yet committed. Large enough that a committer
/// taking everything queued commits thousands of events at once while the emitter fills the
/// next batch; small enough that an emitter never runs far ahead of what a crash would keep.
pub const WINDOW: u64 = 8192;

/// Most bytes of frames queued but not yet committed, over all streams of one store: the
/// bound on memory held for commits, whatever the number of streams.
pub const QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// Most committed events one lane keeps for its live readers.
pub(crate) const TAIL_EVENTS: usize = 64 * 1024;

/// Bytes of committed frames a lane may always keep, whatever the others hold: the last few
/// events of a stream, so a reader that keeps up never reads the backend.
pub(crate) const TAIL_BYTES: usize = 16 * 1024;

/// Most bytes of committed frames all lanes of one store keep beyond [`TAIL_BYTES`] each: a
/// fast stream's backlog, while its reader catches up, is served from memory. A lane that
/// appends while the store is over it drops its own oldest frames first.
pub(crate) const TAIL_BUDGET: usize = 32 * 1024 * 1024;

/// The pipelines of one store: its open lanes and its byte budget.
pub(crate) struct Pipeline {
    lanes: Mutex<FastMap<StreamId, Arc<Lane>>>,
    budget: Arc<Semaphore>,
    /// Bytes in all lanes' committed tails.
    tails: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("lanes", &guard(&self.lanes).len())
            .field("budget", &self.budget.available_permits())
            .finish()
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self {
            lanes: Mutex::default(),
            budget: Arc::new(Semaphore::new(QUEUED_BYTES)),
            tails: Arc::default(),
        }
    }
}

/// One stream's pipeline: the next seq to hand out, the durable watermark, and whether a
/// commit failed.
pub(crate) struct Lane {
    stream: StreamId,
    session: SessionId,
    principal: Arc<str>,
    /// The next seq to hand out, and whether the stream was completed through this lane.
    /// Appends hand their frame to the committer under this lock, so the committer receives
    /// one stream's events in seq order.
    state: Mutex<LaneState>,
    /// Every seq below this is committed.
    durable: AtomicU64,
    /// A commit failed; the lane is dead (see the module docs). Set after `failure`, and
    /// read on every append so that the lock is taken only once something failed.
    poisoned: AtomicBool,
    /// Another writer appended to the stream: the committer stores this lane's frames one by
    /// one at whatever seq is next (see [`Lane::demote`]).
    demoted: AtomicBool,
    /// The backend was seen holding events below this seq (`u64::MAX`: it said the stream
    /// ended or is gone), perhaps some this lane has not heard committed (see
    /// [`Lane::saw_backend_at`]).
    backend_next: AtomicU64,
    failure: Mutex<Option<StoreError>>,
    /// Woken when `durable` moves or the lane is poisoned or demoted.
    moved: Notify,
    budget: Arc<Semaphore>,
    /// The newest committed frames, oldest first (see "The committed tail").
    tail: Mutex<Tail>,
    /// The store's count of bytes in all tails.
    tails: Arc<AtomicUsize>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        let bytes = guard(&self.tail).bytes;
        self.tails.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Tail {
    /// Seq, frame and where its message starts.
    frames: VecDeque<(u64, Bytes, usize)>,
    bytes: usize,
}

impl Tail {
    /// Drops the oldest frame, returning its length (`None`: the tail is empty).
    fn drop_oldest(&mut self) -> Option<usize> {
        let (_, old, _) = self.frames.pop_front()?;
        self.bytes -= old.len();
        Some(old.len())
    }
}

struct LaneState {
    next_seq: u64,
    complete: bool,
    /// Where the lane's frames are written.
    pages: frame::FramePages,
    /// Frames handed over through [`Pipeline::append_to_lane`], in seq order, until the
    /// committer takes them.
    queued: Vec<Queued>,
}

/// Where the committer answers a completion handed to it by [`Pipeline::complete`].
pub(crate) type CompletionReply = oneshot::Sender<Result<(), StoreError>>;

/// A queued frame the committer must store on [`Lane`]'s stream.
pub(crate) struct Queued {
    /// The lane; the committer reports to it.
    pub lane: Arc<Lane>,
    /// The event's id (its seq is the lane's, in order).
    pub id: EventId,
    /// The complete SSE frame.
    pub frame: Bytes,
    /// Where the message starts in `frame`.
    message_at: usize,
    /// Bytes of the store's budget this frame holds.
    reserved: usize,
}

impl Drop for Queued {
    /// Gives the frame's bytes back to the store's budget, once the committer has committed
    /// or dropped it.
    fn drop(&mut self) {
        self.lane.budget.add_permits(self.reserved);
    }
}

impl Pipeline {
    /// Opens (and returns) the lane of a stream of `owner` just created, whose next seq is
    /// `next_seq`.
    pub(crate) fn open(&self, stream: StreamId, owner: &StreamOwner, next_seq: u64) -> Arc<Lane> {
        let lane = Arc::new(Lane {
            stream,
            session: owner.session.clone(),
            principal: Arc::clone(&owner.principal),
            state: Mutex::new(LaneState {
                next_seq,
                complete: false,
                pages: frame::FramePages::default(),
                queued: Vec::new(),
            }),
            durable: AtomicU64::new(next_seq),
            poisoned: AtomicBool::new(false),
            demoted: AtomicBool::new(false),
            backend_next: AtomicU64::new(0),
            failure: Mutex::new(None),
            moved: Notify::new(),
            budget: Arc::clone(&self.budget),
            tail: Mutex::default(),
            tails: Arc::clone(&self.tails),
        });
        guard(&self.lanes).insert(stream, Arc::clone(&lane));
        lane
    }

    /// The open lane of `stream`, if it has one (streams created by this store while it was
    /// open and not yet completed or failed).
    pub(crate) fn lane(&self, stream: StreamId) -> Option<Arc<Lane>> {
        guard(&self.lanes).get(&stream).cloned()
    }

    /// Forgets the lanes of `session`'s streams (the session was removed: nothing of it is
    /// readable any more, and later appends are the backend's to refuse).
    pub(crate) fn remove_session(&self, session: &SessionId) {
        guard(&self.lanes).retain(|_, lane| lane.session != *session);
    }

    /// Queues `message` on `stream`'s lane: waits while the lane's window or the store's byte
    /// budget is full, then takes the next seq, builds the frame and passes it to `send`
    /// (which hands it to the committer and must not block, or fails when the committer is
    /// gone), and returns the event's id. The event is readable once the committer reports it
    /// committed. `None` for a stream without a lane: the backend appends it its own way.
    ///
    /// `max_frame` is the largest frame the store keeps (its per-session byte cap): a larger
    /// one is refused here, as the committer would.
    ///
    /// # Errors
    ///
    /// [`StoreError::EventTooLarge`] over `max_frame`, [`StoreError::Completed`] after
    /// [`complete`](Self::complete), and a commit failure of an earlier append (see the
    /// module docs).
    pub(crate) async fn append(
        &self,
        stream: StreamId,
        message: &str,
        max_frame: usize,
        send: impl FnOnce(Queued) -> Result<(), StoreError>,
    ) -> Option<Result<EventId, StoreError>> {
        let lane = self.lane(stream)?;
        Some(
            self.append_on(&lane, message, max_frame, |_, queued| send(queued))
                .await,
        )
    }

    /// As [`append`](Self::append), but the frame waits in the lane's own queue, and `wake`
    /// (which must not block) hands the committer the lane only when that queue was empty:
    /// a fast stream costs the committer one message per batch it takes
    /// ([`Lane::take_queued`]), not one per event.
    pub(crate) async fn append_to_lane(
        &self,
        stream: StreamId,
        message: &str,
        max_frame: usize,
        wake: impl FnOnce(Arc<Lane>) -> Result<(), StoreError>,
    ) -> Option<Result<EventId, StoreError>> {
        let lane = self.lane(stream)?;
        let handoff = |state: &mut LaneState, queued: Queued| {
            let first = state.queued.is_empty();
            let lane = first.then(|| Arc::clone(&queued.lane));
            state.queued.push(queued);
            match lane {
                Some(lane) => wake(lane).inspect_err(|_| {
                    state.queued.pop();
                }),
                None => Ok(()),
            }
        };
        Some(self.append_on(&lane, message, max_frame, handoff).await)
    }

    async fn append_on(
        &self,
        lane: &Arc<Lane>,
        message: &str,
        max_frame: usize,
        send: impl FnOnce(&mut LaneState, Queued) -> Result<(), StoreError>,
    ) -> Result<EventId, StoreError> {
        // Reserved at the frame's longest; the unused rest is given back once it is built.
        let size = frame::message_frame_capacity(message);
        let budget = u32::try_from(size.min(QUEUED_BYTES)).unwrap_or(u32::MAX);
        let permit = match Arc::clone(&self.budget).try_acquire_many_owned(budget) {
            Ok(permit) => permit,
            Err(_) => Arc::clone(&self.budget)
                .acquire_many_owned(budget)
                .await
                .map_err(|_| StoreError::Unavailable("store closed".into()))?,
        };
        // Both are used once, by the check that succeeds.
        let (mut permit, mut send) = (Some(permit), Some(send));
        lane.wait_until(|| {
            if let Err(failure) = self.take_failure(lane) {
                return Some(Err(failure));
            }
            let mut state = guard(&lane.state);
            if state.complete {
                return Some(Err(StoreError::Completed));
            }
            if state.next_seq - lane.durable.load(Ordering::Acquire) >= WINDOW {
                return None;
            }
            let id = EventId::new(lane.stream, state.next_seq);
            let frame = state.pages.message_frame(id, message);
            let message_at = frame::message_at(&frame, message);
            if frame.len() > max_frame {
                return Some(Err(StoreError::EventTooLarge));
            }
            let reserved = frame.len().min(budget as usize);
            permit
                .take()
                .expect("used by the one check that succeeds")
                .forget();
            lane.budget.add_permits(budget as usize - reserved);
            let queued = Queued {
                lane: Arc::clone(lane),
                id,
                frame,
                message_at,
                reserved,
            };
            let send = send.take().expect("used by the one check that succeeds");
            Some(send(&mut state, queued).map(|()| {
                state.next_seq += 1;
                id
            }))
        })
        .await
    }

    /// Waits until everything queued on `stream` is committed; returns a commit failure of
    /// any of it. At once for a stream without a lane.
    pub(crate) async fn flush(&self, stream: StreamId) -> Result<(), StoreError> {
        let Some(lane) = self.lane(stream) else {
            return Ok(());
        };
        lane.wait_until(|| {
            if let Err(failure) = self.take_failure(&lane) {
                return Some(Err(failure));
            }
            let next = guard(&lane.state).next_seq;
            (lane.durable.load(Ordering::Acquire) >= next).then_some(Ok(()))
        })
        .await
    }

    /// Completes `stream` through its lane: later appends are refused with
    /// [`StoreError::Completed`], `send` (called under the lane's lock, so after every queued
    /// frame) hands the lane and a reply to the committer, and the committer's answer is
    /// returned. A commit failure of an earlier append is returned instead of completing.
    /// `None` for a stream without a lane: the backend completes it its own way.
    pub(crate) async fn complete(
        &self,
        stream: StreamId,
        send: impl FnOnce(Arc<Lane>, CompletionReply) -> Result<(), StoreError>,
    ) -> Option<Result<(), StoreError>> {
        let lane = self.lane(stream)?;
        if let Err(failure) = self.take_failure(&lane) {
            return Some(Err(failure));
        }
        let (reply, answer) = oneshot::channel();
        let sent = {
            let mut state = guard(&lane.state);
            state.complete = true;
            send(Arc::clone(&lane), reply)
        };
        self.forget(&lane);
        if let Err(error) = sent {
            return Some(Err(error));
        }
        Some(
            answer
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("store closed".into()))),
        )
    }

    /// Returns the lane's failure, if a commit failed, and forgets the lane.
    fn take_failure(&self, lane: &Arc<Lane>) -> Result<(), StoreError> {
        let Some(failure) = lane.failure() else {
            return Ok(());
        };
        self.forget(lane);
        Err(failure)
    }

    fn forget(&self, lane: &Arc<Lane>) {
        let mut lanes = guard(&self.lanes);
        if lanes
            .get(&lane.stream)
            .is_some_and(|open| Arc::ptr_eq(open, lane))
        {
            lanes.remove(&lane.stream);
        }
    }
}

/// Reports committed appends, in commit order, to their lanes: each lane once per run of its
/// consecutive appends, so that a waiter wakes once per commit rather than once per event,
/// after their frames joined its committed tail. The appends come from one store's
/// committer; their bytes go back to its budget at once.
pub(crate) fn report_committed(appends: impl IntoIterator<Item = Queued>) {
    let mut run: Option<Arc<Lane>> = None;
    let mut frames: Vec<(u64, Bytes, usize)> = Vec::new();
    let mut released = 0;
    let finish = |lane: &Lane, frames: &mut Vec<(u64, Bytes, usize)>| {
        if let Some(&(last, _, _)) = frames.last() {
            lane.remember(frames.drain(..));
            lane.committed(last);
        }
    };
    for mut append in appends {
        released += std::mem::take(&mut append.reserved);
        if let Some(lane) = run.take_if(|lane| !Arc::ptr_eq(lane, &append.lane)) {
            finish(&lane, &mut frames);
        }
        run.get_or_insert_with(|| Arc::clone(&append.lane));
        frames.push((
            append.id.seq,
            std::mem::take(&mut append.frame),
            append.message_at,
        ));
    }
    if let Some(lane) = run {
        lane.budget.add_permits(released);
        finish(&lane, &mut frames);
    }
}

impl Lane {
    /// Runs `check` until it answers, waiting for the lane to move (a commit or a failure)
    /// between tries. A waiter is registered only once a check came up empty (so a free
    /// window costs no lock on the `Notify`), and the check runs again after registering, so
    /// a move in between is not missed.
    async fn wait_until<T>(&self, mut check: impl FnMut() -> Option<T>) -> T {
        let mut waiting = false;
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            if waiting {
                moved.as_mut().enable();
            }
            if let Some(answer) = check() {
                return answer;
            }
            if waiting {
                moved.await;
            }
            waiting = true;
        }
    }

    /// The session that owns the lane's stream.
    pub(crate) fn session(&self) -> &SessionId {
        &self.session
    }

    /// Keeps frame `seq`, committed by the backend itself (a stream's priming event, stored
    /// with the stream), in the tail.
    pub(crate) fn remember_committed(&self, seq: u64, frame: Bytes) {
        let message_at = frame::message_start(&frame);
        self.remember(std::iter::once((seq, frame, message_at)));
    }

    /// Keeps the frames of `appends`, committed on this lane from seq `from` on (earlier ones
    /// were evicted in the same commit), in the tail: for a committer that reports its
    /// commits to the lane itself rather than through [`report_committed`]. The frames are
    /// taken out of `appends`.
    pub(crate) fn remember_appends(&self, appends: &mut [Queued], from: u64) {
        self.remember(
            appends
                .iter_mut()
                .filter(|append| append.id.seq >= from)
                .map(|append| {
                    (
                        append.id.seq,
                        std::mem::take(&mut append.frame),
                        append.message_at,
                    )
                }),
        );
    }

    /// Drops the tail's frames before seq `first`: the backend evicted them (its caps), so
    /// a reader from there must hear so from the backend.
    pub(crate) fn forget_before(&self, first: u64) {
        let mut tail = guard(&self.tail);
        let mut dropped = 0;
        while tail.frames.front().is_some_and(|&(seq, _, _)| seq < first) {
            dropped += tail.drop_oldest().unwrap_or(0);
        }
        self.tails.fetch_sub(dropped, Ordering::Relaxed);
    }

    /// The seq after the lane's last committed event, when it is the stream's own (the lane
    /// neither failed nor shares its stream with another writer): a waiter for events after
    /// a seq below it need not ask the backend.
    pub(crate) fn committed_next(&self) -> Option<u64> {
        if self.poisoned.load(Ordering::Acquire) || self.is_demoted() {
            return None;
        }
        Some(self.durable.load(Ordering::Acquire))
    }

    /// Notes that the backend holds events below `next` (`u64::MAX`: the stream ended or is
    /// gone there): until the lane's own commits reach it, the tail does not answer, and
    /// readers hear it all from the backend. For a backend where another
    /// writer can append or end a stream without this lane seeing it (Redis, across nodes).
    pub(crate) fn saw_backend_at(&self, next: u64) {
        self.backend_next.fetch_max(next, Ordering::AcqRel);
    }

    /// Waits until every seq below `next` is committed, or the lane can no longer say
    /// ([`committed_next`](Self::committed_next) is `None`).
    pub(crate) async fn wait_committed(&self, next: u64) {
        self.wait_until(|| match self.committed_next() {
            Some(committed) if committed < next => None,
            _ => Some(()),
        })
        .await;
    }

    /// The frames [`Pipeline::append_to_lane`] queued on this lane since the last call, in
    /// seq order.
    pub(crate) fn take_queued(&self) -> Vec<Queued> {
        std::mem::take(&mut guard(&self.state).queued)
    }

    /// Keeps committed frames (seq, frame, message offset; in seq order) in the tail,
    /// dropping the oldest past the bounds.
    fn remember(&self, frames: impl Iterator<Item = (u64, Bytes, usize)>) {
        let mut tail = guard(&self.tail);
        let mut added = 0;
        for (seq, frame, message_at) in frames {
            if tail
                .frames
                .back()
                .is_some_and(|&(last, _, _)| last + 1 != seq)
            {
                // Not the next seq (never, for an in-order committer): start again here.
                self.tails.fetch_sub(tail.bytes, Ordering::Relaxed);
                tail.frames.clear();
                tail.bytes = 0;
            }
            tail.bytes += frame.len();
            added += frame.len();
            tail.frames.push_back((seq, frame, message_at));
        }
        let mut all = self.tails.fetch_add(added, Ordering::Relaxed) + added;
        let mut dropped = 0;
        while tail.frames.len() > TAIL_EVENTS
            || (tail.bytes > TAIL_BYTES && all > TAIL_BUDGET && tail.frames.len() > 1)
        {
            if let Some(len) = tail.drop_oldest() {
                all -= len;
                dropped += len;
            }
        }
        self.tails.fetch_sub(dropped, Ordering::Relaxed);
    }

    /// The committed events of `owner`'s stream from seq `from` on, at most `limit`, from the
    /// tail: `None` when the tail cannot answer (it does not reach back to `from`, or is
    /// empty; the lane failed or was demoted; `owner` does not own the stream; the backend
    /// was seen holding more than the lane committed), and the backend must. An empty list means
    /// `from` is the next seq to commit.
    pub(crate) fn read_tail(
        &self,
        owner: &StreamOwner,
        from: u64,
        limit: usize,
    ) -> Option<Vec<StoredEvent>> {
        if self.poisoned.load(Ordering::Acquire)
            || self.is_demoted()
            || self.session != owner.session
            || *self.principal != *owner.principal
        {
            return None;
        }
        let tail = guard(&self.tail);
        let &(first, _, _) = tail.frames.front()?;
        let next = first + tail.frames.len() as u64;
        if from < first || from > next {
            return None;
        }
        if self.backend_next.load(Ordering::Acquire) > next {
            // The backend holds more (or an end) than this lane committed: only it can
            // answer in full.
            return None;
        }
        let skip = usize::try_from(from - first).ok()?;
        Some(
            tail.frames
                .iter()
                .skip(skip)
                .take(limit)
                .map(|(seq, frame, message_at)| {
                    StoredEvent::new(
                        EventId::new(self.stream, *seq),
                        frame.clone(),
                        Some(*message_at),
                    )
                })
                .collect(),
        )
    }

    /// Reports every seq up to and including `seq` committed (readable).
    pub(crate) fn committed(&self, seq: u64) {
        self.durable.fetch_max(seq + 1, Ordering::AcqRel);
        self.moved.notify_waiters();
    }

    /// Marks the lane as sharing its stream with another writer (a node that claimed the
    /// stream as an orphan, or a store without pipelines on another node). Its frames keep
    /// their order through the committer, which stores each at the stream's next seq (the id
    /// [`Pipeline::append`] returned is then not the one it is stored under) and reports it
    /// with [`committed`](Self::committed) under the seq the lane gave it.
    pub(crate) fn demote(&self) {
        self.demoted.store(true, Ordering::Release);
        self.moved.notify_waiters();
    }

    /// Whether [`demote`](Self::demote) was called.
    pub(crate) fn is_demoted(&self) -> bool {
        self.demoted.load(Ordering::Acquire)
    }

    /// Reports a failed commit: the lane is dead, and its next caller hears `error`.
    pub(crate) fn fail(&self, error: &StoreError) {
        // The failure is in place before the flag says so (see `failure`).
        guard(&self.failure).get_or_insert_with(|| error.clone());
        self.poisoned.store(true, Ordering::Release);
        self.moved.notify_waiters();
    }

    /// The failure of a commit on this lane, if one failed: the committer then drops the
    /// lane's other queued frames and refuses its completion.
    pub(crate) fn failure(&self) -> Option<StoreError> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        guard(&self.failure).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> StreamOwner {
        StreamOwner {
            principal: Arc::from("p"),
            session: SessionId::generate(),
        }
    }

    /// Appends `messages` to `stream`'s lane and reports them committed, as a committer
    /// would after its commit.
    async fn commit(pipeline: &Pipeline, stream: StreamId, messages: &[String]) {
        let mut queued = Vec::new();
        for message in messages {
            let sent = pipeline
                .append(stream, message, usize::MAX, |append| {
                    queued.push(append);
                    Ok(())
                })
                .await;
            sent.expect("a lane").expect("queued");
        }
        report_committed(queued);
    }

    fn message(n: usize) -> String {
        format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"n":{n}}}}}"#)
    }

    #[tokio::test]
    async fn evicted_frames_leave_the_tail_and_a_demoted_lane_knows_no_commits() {
        let pipeline = Pipeline::default();
        let (stream, owner) = (StreamId::generate(), owner());
        pipeline.open(stream, &owner, 1);
        let lane = pipeline.lane(stream).unwrap();
        assert_eq!(lane.committed_next(), Some(1), "the priming event only");
        commit(&pipeline, stream, &(1..=5).map(message).collect::<Vec<_>>()).await;
        assert_eq!(lane.committed_next(), Some(6));
        let held = pipeline.tails.load(Ordering::Relaxed);

        lane.forget_before(3);
        assert_eq!(
            lane.read_tail(&owner, 2, 10),
            None,
            "evicted: the backend says so"
        );
        let seqs: Vec<u64> = lane
            .read_tail(&owner, 3, 10)
            .unwrap()
            .iter()
            .map(|e| e.id.seq)
            .collect();
        assert_eq!(seqs, vec![3, 4, 5]);
        assert!(
            pipeline.tails.load(Ordering::Relaxed) < held,
            "the store's count of tail bytes follows"
        );
        lane.forget_before(100);
        assert_eq!(lane.read_tail(&owner, 3, 10), None, "all evicted");
        assert_eq!(pipeline.tails.load(Ordering::Relaxed), 0);

        lane.demote();
        assert_eq!(lane.committed_next(), None, "its seqs are not the stream's");
    }

    #[tokio::test]
    async fn the_tail_serves_committed_frames_to_their_owner_only() {
        let pipeline = Pipeline::default();
        let (stream, owner) = (StreamId::generate(), owner());
        pipeline.open(stream, &owner, 1);
        let lane = pipeline.lane(stream).unwrap();
        assert_eq!(lane.read_tail(&owner, 1, 10), None, "nothing committed yet");

        commit(&pipeline, stream, &(1..=5).map(message).collect::<Vec<_>>()).await;
        let events = lane.read_tail(&owner, 2, 3).unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.id.seq).collect();
        assert_eq!(seqs, vec![2, 3, 4]);
        assert_eq!(events[0].message(), message(2).as_bytes());
        assert_eq!(
            events[0].frame,
            frame::message_frame(EventId::new(stream, 2), &message(2)),
            "the bytes the backend stores"
        );
        assert_eq!(
            lane.read_tail(&owner, 6, 10),
            Some(Vec::new()),
            "the next seq"
        );
        assert_eq!(lane.read_tail(&owner, 7, 10), None, "past the next seq");
        assert_eq!(lane.read_tail(&owner, 0, 10), None, "before the tail");

        let stranger = StreamOwner {
            principal: Arc::from("q"),
            ..owner.clone()
        };
        assert_eq!(lane.read_tail(&stranger, 1, 10), None);
        let other_session = StreamOwner {
            session: SessionId::generate(),
            ..owner.clone()
        };
        assert_eq!(lane.read_tail(&other_session, 1, 10), None);

        lane.demote();
        assert_eq!(
            lane.read_tail(&owner, 1, 10),
            None,
            "a demoted lane's seqs are guesses"
        );
    }

    #[tokio::test]
    async fn a_lane_queue_wakes_its_committer_once_per_batch() {
        let pipeline = Pipeline::default();
        let (stream, owner) = (StreamId::generate(), owner());
        pipeline.open(stream, &owner, 1);
        let wakes = std::cell::Cell::new(0);
        let append = async |n| {
            pipeline
                .append_to_lane(stream, &message(n), usize::MAX, |_| {
                    wakes.set(wakes.get() + 1);
                    Ok(())
                })
                .await
                .expect("a lane")
                .expect("queued")
        };
        for n in 1..=3 {
            assert_eq!(append(n).await.seq, n as u64);
        }
        assert_eq!(wakes.get(), 1, "woken when the queue was empty only");
        let lane = pipeline.lane(stream).unwrap();
        let taken = lane.take_queued();
        let seqs: Vec<u64> = taken.iter().map(|q| q.id.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        append(4).await;
        assert_eq!(wakes.get(), 2, "an emptied queue wakes again");
        // A committer that is gone: the append fails and leaves nothing queued.
        drop(lane.take_queued());
        let refused = pipeline
            .append_to_lane(stream, &message(5), usize::MAX, |_| {
                Err(StoreError::Unavailable("closed".into()))
            })
            .await
            .expect("a lane");
        assert!(refused.is_err());
        assert!(lane.take_queued().is_empty());
        report_committed(taken);
    }

    #[tokio::test]
    async fn a_failed_lane_serves_nothing() {
        let pipeline = Pipeline::default();
        let (stream, owner) = (StreamId::generate(), owner());
        pipeline.open(stream, &owner, 1);
        let lane = pipeline.lane(stream).unwrap();
        commit(&pipeline, stream, &[message(1)]).await;
        lane.fail(&StoreError::Unavailable("disk full".into()));
        assert_eq!(lane.read_tail(&owner, 1, 10), None);
    }

    #[tokio::test]
    async fn tails_keep_the_newest_frames_within_their_bounds() {
        let pipeline = Pipeline::default();
        let (stream, owner) = (StreamId::generate(), owner());
        pipeline.open(stream, &owner, 1);
        let lane = pipeline.lane(stream).unwrap();
        let n = TAIL_EVENTS + 10;
        for chunk in (1..=n).collect::<Vec<_>>().chunks(1000) {
            let messages: Vec<String> = chunk.iter().map(|&n| message(n)).collect();
            commit(&pipeline, stream, &messages).await;
        }
        let first = (n - TAIL_EVENTS + 1) as u64;
        assert_eq!(
            lane.read_tail(&owner, first - 1, 1),
            None,
            "the oldest went"
        );
        let events = lane.read_tail(&owner, first, usize::MAX).unwrap();
        assert_eq!(events.len(), TAIL_EVENTS);
        assert_eq!(events.last().unwrap().id.seq, n as u64);
        let held: usize = events.iter().map(|e| e.frame.len()).sum();
        assert_eq!(pipeline.tails.load(Ordering::Relaxed), held);

        // Dropping the lane gives its bytes back to the store's count.
        pipeline.remove_session(&owner.session);
        drop((lane, events));
        assert_eq!(pipeline.tails.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn over_the_store_budget_a_lane_keeps_only_its_own_share() {
        let pipeline = Pipeline::default();
        let (big, small, owner) = (StreamId::generate(), StreamId::generate(), owner());
        pipeline.open(big, &owner, 1);
        pipeline.open(small, &owner, 1);
        // Large frames from one stream fill the store's budget, and no more.
        let pad = "x".repeat(60 * 1024);
        let large: Vec<String> = (0..TAIL_BUDGET / pad.len() + 8)
            .map(|n| format!(r#"{{"n":{n},"pad":"{pad}"}}"#))
            .collect();
        commit(&pipeline, big, &large).await;
        assert!(pipeline.tails.load(Ordering::Relaxed) <= TAIL_BUDGET);
        // Another stream appending past the budget keeps the store within it, and its own
        // share at least: its newest frames.
        commit(
            &pipeline,
            small,
            &(1..=2000).map(message).collect::<Vec<_>>(),
        )
        .await;
        assert!(pipeline.tails.load(Ordering::Relaxed) <= TAIL_BUDGET);
        let lane = pipeline.lane(small).unwrap();
        let tail = guard(&lane.tail);
        let frame_len = tail.frames.back().unwrap().1.len();
        assert_eq!(tail.frames.back().unwrap().0, 2000);
        // Its share, plus at most what the large stream left of the budget: less than one of
        // its frames.
        assert!(
            tail.bytes + frame_len > TAIL_BYTES && tail.bytes <= TAIL_BYTES + pad.len() + 64,
            "{} bytes kept; its share is {TAIL_BYTES}",
            tail.bytes
        );
    }
}
