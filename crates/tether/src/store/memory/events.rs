//! [`MemoryEventStore`]: stream logs of pre-encoded SSE frames, held per session.
//!
//! This module owns the in-memory layout of streams, the per-session caps and their eviction
//! order, retention of completed streams, and tombstones for removed streams. It does not own
//! what a frame means to a client or when the server writes it.
//!
//! Layout: a shard per session (one mutex) holds the session's streams; each stream is a
//! `VecDeque` of frames indexed by `seq - first_seq`, so append is amortized O(1) and a seek
//! by seq is O(1). Two store-wide maps (sessions, stream index) are locked only for look-ups
//! and inserts. Locks are always taken in the order sessions → shard → tombstones → index,
//! and never across an `.await`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::fifo::FifoMap;
use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::event_store::{
    EventStore, OrphanedStream, ReadBatch, SessionUsage, StoredEvent, StreamKind, StreamOwner,
};
use crate::store::frame;
use crate::store::limits::StoreLimits;
use crate::store::map::FastMap;

/// The in-process [`EventStore`]: fast, bounded, and gone with the process.
///
/// Frames are encoded once, at append; reads hand out clones of the stored [`Bytes`] (a
/// reference-count increment each). Completed streams stay readable for
/// [`StoreLimits::retention`]; expired ones are removed lazily whenever their session is
/// read, gets a new stream or is asked for its usage (not on appends, the hot path), and by
/// [`sweep_expired`](Self::sweep_expired) or the task [`spawn_sweeper`](Self::spawn_sweeper)
/// starts, for sessions nobody reads. A session's own
/// bookkeeping (a few hundred bytes) lives until [`EventStore::remove_session`].
pub struct MemoryEventStore {
    shared: Arc<Shared>,
}

impl MemoryEventStore {
    /// A store with these bounds (caps below 1 act as 1).
    #[must_use]
    pub fn new(config: StoreLimits) -> Self {
        let config = config.normalized();
        Self {
            shared: Arc::new(Shared {
                tombstones: Mutex::new(FifoMap::new(config.max_tombstones)),
                config,
                sessions: Mutex::default(),
                index: Mutex::default(),
            }),
        }
    }

    /// The bounds this store enforces.
    #[must_use]
    pub fn config(&self) -> &StoreLimits {
        &self.shared.config
    }

    /// Removes, in every session, the completed streams whose retention had run out at `now`
    /// (each leaves a tombstone), and returns how many were removed.
    ///
    /// Sessions that are read or written expire their streams on the way; this is for the
    /// sessions nobody touches any more. Cost: one lock per session.
    pub fn sweep_expired(&self, now: Instant) -> usize {
        let shards: Vec<Arc<Shard>> = guard(&self.shared.sessions).values().cloned().collect();
        shards
            .iter()
            .map(|shard| self.shared.lock_at(shard, now).removed.len())
            .sum()
    }

    /// Spawns a task that calls [`sweep_expired`](Self::sweep_expired) every `period` (a tenth
    /// of the retention is plenty). The task holds only a weak reference and ends once the
    /// store is dropped; abort the handle to stop it earlier.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or if `period` is zero.
    pub fn spawn_sweeper(&self, period: Duration) -> JoinHandle<()> {
        let shared = Arc::downgrade(&self.shared);
        let mut ticks = tokio::time::interval(period);
        // A sweep that ran late needs no catching up: one sweep removes all that expired.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                Self { shared }.sweep_expired(Instant::now());
            }
        })
    }
}

impl Default for MemoryEventStore {
    fn default() -> Self {
        Self::new(StoreLimits::default())
    }
}

impl fmt::Debug for MemoryEventStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryEventStore")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl EventStore for MemoryEventStore {
    async fn create_stream(
        &self,
        owner: &StreamOwner,
        // Both kinds are stored alike: a standalone stream is one the server never completes.
        _kind: StreamKind,
        retry: Duration,
        // Nothing here outlives the process, so nothing can be orphaned: no need to keep them.
        _requests: &[RequestId],
    ) -> Result<StreamId, StoreError> {
        let shared = &*self.shared;
        let stream = StreamId::generate();
        let priming = Slot::priming(stream, retry);
        let len = priming.frame.len();
        if len > shared.config.max_bytes_per_session {
            return Err(StoreError::EventTooLarge);
        }

        // Holding the sessions map until the shard is locked serializes this with
        // `remove_session`: the stream lands either in a shard that removal then empties, or
        // in a fresh one; never in a shard already removed, where it would leak.
        let mut sessions = guard(&shared.sessions);
        let shard = Arc::clone(
            sessions
                .entry(owner.session.clone())
                .or_insert_with(|| Arc::new(Shard::new(owner.session.clone()))),
        );
        let mut locked = shared.lock(&shard);
        drop(sessions);

        // Completed streams make room for new ones; only live streams count against the cap
        // in the end, so a busy session is not refused for what it already finished.
        while locked.state.streams.len() >= shared.config.max_streams_per_session {
            if !locked.evict_oldest_completed() {
                return Err(StoreError::TooManyStreams);
            }
        }
        let state = &mut *locked.state;
        state.streams.insert(
            stream,
            StreamLog::new(Arc::clone(&owner.principal), priming),
        );
        state.usage.streams += 1;
        state.usage.events += 1;
        state.usage.bytes += len;
        state.appended.push_back((stream, EventId::PRIMING_SEQ));
        locked.evict_to_caps();
        guard(&shared.index).insert(stream, Arc::clone(&shard));
        Ok(stream)
    }

    async fn append(&self, stream: StreamId, message: &[u8]) -> Result<EventId, StoreError> {
        let message = frame::validate(message)?;
        let shared = &*self.shared;
        let Some(shard) = shared.shard_of(stream) else {
            return Err(shared.gone_for_writer(stream));
        };
        // No expiry here: appends are the hot path, and a clock read per event costs more than
        // the rest of the lock's work. Reads, new streams and the sweeper expire streams; the
        // caps bound the session meanwhile.
        let mut locked = shared.lock_unexpired(&shard);
        let Some(log) = locked.state.streams.get_mut(&stream) else {
            drop(locked);
            return Err(shared.gone_for_writer(stream));
        };
        if log.complete {
            return Err(StoreError::Completed);
        }
        // Encoded under the session's lock because the frame carries the seq; only this
        // session's operations wait for it.
        let id = EventId::new(stream, log.next_seq());
        let slot = log.message_slot(id, message);
        let len = slot.frame.len();
        if len > shared.config.max_bytes_per_session {
            return Err(StoreError::EventTooLarge);
        }
        log.push(slot);
        let state = &mut *locked.state;
        state.usage.events += 1;
        state.usage.bytes += len;
        state.appended.push_back((stream, id.seq));
        // The new event is the session's newest and fits the caps alone, so eviction stops
        // before reaching it.
        locked.evict_to_caps();
        Ok(id)
    }

    async fn complete(&self, stream: StreamId) -> Result<(), StoreError> {
        let shared = &*self.shared;
        let Some(shard) = shared.shard_of(stream) else {
            return shared.gone_for_completion(stream);
        };
        let now = Instant::now();
        let mut locked = shared.lock_at(&shard, now);
        let Some(log) = locked.state.streams.get_mut(&stream) else {
            drop(locked);
            return shared.gone_for_completion(stream);
        };
        // Idempotent: completing twice is not an error, and must not restart retention.
        if !log.complete {
            log.complete = true;
            log.wake_waiters();
            locked.state.completed.push_back((now, stream));
        }
        Ok(())
    }

    async fn read_after(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        after: u64,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        // `after == u64::MAX` has nothing after it: an empty batch, as for any cursor past the
        // end.
        self.shared.read(owner, stream, after.checked_add(1), limit)
    }

    async fn read_from_start(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.shared
            .read(owner, stream, Some(EventId::PRIMING_SEQ), limit)
    }

    /// Also returns `Ok(())` at once for a stream that is unknown or already gone: the wait is
    /// over either way, and the next read says why.
    async fn wait_for_more(&self, stream: StreamId, after: u64) -> Result<(), StoreError> {
        let Some(shard) = self.shared.shard_of(stream) else {
            return Ok(());
        };
        // Registered under the session lock, after checking: every append or completion after
        // the check sees `waiting` and wakes this `Notified`, which receives wake-ups from the
        // moment it is created, so nothing stored between the check and the `.await` is
        // missed. Dropping this future mid-wait loses nothing (cancel-safe); the stream's next
        // append then wakes nobody, which costs nothing.
        let wake;
        let woken = {
            let mut state = guard(&shard.state);
            let Some(log) = state.streams.get_mut(&stream) else {
                return Ok(());
            };
            if log.complete || log.last_seq() > after {
                return Ok(());
            }
            log.waiting = true;
            wake = Arc::clone(&log.wake);
            wake.notified()
        };
        // Woken by an append or the completion (both satisfy the wait), or by the log being
        // dropped (stream removed, session gone: the next read says which).
        woken.await;
        Ok(())
    }

    async fn remove_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let shared = &*self.shared;
        let Some(shard) = guard(&shared.sessions).remove(session) else {
            return Ok(());
        };
        let removed = {
            let mut state = guard(&shard.state);
            let removed = std::mem::take(&mut *state);
            let mut index = guard(&shared.index);
            for stream in removed.streams.keys() {
                index.remove(stream);
            }
            removed
        };
        // Dropping the logs wakes every wait on them (`StreamLog`'s `Drop`). Done
        // after the locks are released, since it may free a lot of memory.
        drop(removed);
        Ok(())
    }

    async fn usage(&self, session: &SessionId) -> Result<SessionUsage, StoreError> {
        let shared = &*self.shared;
        let Some(shard) = guard(&shared.sessions).get(session).cloned() else {
            return Ok(SessionUsage::default());
        };
        // Through `lock`, so streams past their retention are not counted.
        let usage = shared.lock(&shard).state.usage;
        Ok(usage)
    }

    async fn orphaned_streams(&self) -> Result<Vec<OrphanedStream>, StoreError> {
        // Its streams die with the process that could have completed them.
        Ok(Vec::new())
    }
}

/// State shared by a store and its sweeper task.
struct Shared {
    config: StoreLimits,
    /// Each session's shard. Also what makes a session "alive" for tombstones: a tombstone of
    /// a removed session reads as `UnknownStream`, like the rest of that session.
    sessions: Mutex<FastMap<SessionId, Arc<Shard>>>,
    /// The shard holding each stream, for the operations addressed by stream id alone.
    index: Mutex<FastMap<StreamId, Arc<Shard>>>,
    /// Ids of removed streams and their owners, the oldest removals forgotten first.
    tombstones: Mutex<FifoMap<StreamId, StreamOwner>>,
}

impl Shared {
    fn shard_of(&self, stream: StreamId) -> Option<Arc<Shard>> {
        guard(&self.index).get(&stream).cloned()
    }

    /// Locks `shard` and first removes its streams past retention. The clock is read only if
    /// one of them completed.
    fn lock<'a>(&'a self, shard: &'a Shard) -> Locked<'a> {
        self.lock_when(shard, Instant::now)
    }

    /// [`lock`](Self::lock), with retention measured at `now`.
    fn lock_at<'a>(&'a self, shard: &'a Shard, now: Instant) -> Locked<'a> {
        self.lock_when(shard, || now)
    }

    fn lock_when<'a>(&'a self, shard: &'a Shard, now: impl FnOnce() -> Instant) -> Locked<'a> {
        let mut locked = self.lock_unexpired(shard);
        locked.expire(now);
        locked
    }

    /// Locks `shard` as it is, streams past retention included.
    fn lock_unexpired<'a>(&'a self, shard: &'a Shard) -> Locked<'a> {
        Locked {
            shared: self,
            shard,
            state: guard(&shard.state),
            removed: Vec::new(),
        }
    }

    /// Reads `stream` from seq `from` on (`None`: past any seq).
    fn read(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        from: Option<u64>,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        let Some(shard) = self.shard_of(stream) else {
            return Err(self.gone_for_reader(owner, stream));
        };
        // MCP 2025-11-25 transports: a server MUST NOT replay another stream's messages, and
        // a foreign stream must look like no stream at all (docs/CONTRACTS.md#last-event-id-row).
        if shard.session != owner.session {
            return Err(StoreError::UnknownStream);
        }
        let locked = self.lock(&shard);
        let Some(log) = locked.state.streams.get(&stream) else {
            drop(locked);
            return Err(self.gone_for_reader(owner, stream));
        };
        if log.principal != owner.principal {
            return Err(StoreError::UnknownStream);
        }
        log.read(stream, from, limit)
    }

    /// Why a reader cannot find `stream`: `Expired` if it was removed after completion and
    /// belongs to `owner`, whose session is still alive; otherwise `UnknownStream`.
    fn gone_for_reader(&self, owner: &StreamOwner, stream: StreamId) -> StoreError {
        let tombstone = guard(&self.tombstones).get(&stream).cloned();
        match tombstone {
            Some(was) if was == *owner && self.session_alive(&was.session) => StoreError::Expired,
            _ => StoreError::UnknownStream,
        }
    }

    /// Why a writer cannot find `stream`: only completed streams are ever removed alone, so a
    /// tombstone means it was complete.
    fn gone_for_writer(&self, stream: StreamId) -> StoreError {
        if self.tombstoned(stream) {
            StoreError::Completed
        } else {
            StoreError::UnknownStream
        }
    }

    /// Completing a removed stream: it was complete already, which is fine.
    fn gone_for_completion(&self, stream: StreamId) -> Result<(), StoreError> {
        if self.tombstoned(stream) {
            Ok(())
        } else {
            Err(StoreError::UnknownStream)
        }
    }

    fn tombstoned(&self, stream: StreamId) -> bool {
        let session = guard(&self.tombstones)
            .get(&stream)
            .map(|owner| owner.session.clone());
        session.is_some_and(|session| self.session_alive(&session))
    }

    fn session_alive(&self, session: &SessionId) -> bool {
        guard(&self.sessions).contains_key(session)
    }
}

/// One session's streams, behind the session's lock.
struct Shard {
    session: SessionId,
    state: Mutex<SessionState>,
}

impl Shard {
    fn new(session: SessionId) -> Self {
        Self {
            session,
            state: Mutex::default(),
        }
    }
}

#[derive(Default)]
struct SessionState {
    streams: FastMap<StreamId, StreamLog>,
    /// Kept equal to the sums over `streams`, so reading it and checking caps is O(1).
    usage: SessionUsage,
    /// The completed streams, oldest completion first: retention expires them from the front
    /// (retention is the same for all), and cap eviction takes whole streams from the front.
    completed: VecDeque<(Instant, StreamId)>,
    /// `(stream, seq)` of the session's events in append order, for evicting the oldest live
    /// event in O(1). Entries of events removed otherwise (whole completed streams) are stale
    /// and skipped; [`compact`](Self::compact) bounds how many there are.
    appended: VecDeque<(StreamId, u64)>,
}

impl SessionState {
    /// Evicts the session's oldest event still stored; false if there is none.
    ///
    /// Called only once no completed stream is left, so every stored event met here belongs to
    /// a live stream.
    fn evict_oldest_live_event(&mut self) -> bool {
        while let Some((stream, seq)) = self.appended.pop_front() {
            let Some(log) = self.streams.get_mut(&stream) else {
                continue;
            };
            // Within a stream, events leave from the front in seq order, so a valid entry is
            // the stream's first stored event; an older seq was removed with its stream.
            if seq != log.first_seq {
                debug_assert!(seq < log.first_seq, "eviction order broken");
                continue;
            }
            let Some(slot) = log.slots.pop_front() else {
                continue;
            };
            log.first_seq += 1;
            log.bytes -= slot.frame.len();
            self.usage.events -= 1;
            self.usage.bytes -= slot.frame.len();
            return true;
        }
        false
    }

    /// Drops stale `appended` entries once they outnumber the live ones: O(1) amortized per
    /// removed event, and the queue stays O(retained events).
    fn compact(&mut self) {
        if self.appended.len() <= 2 * self.usage.events + 64 {
            return;
        }
        let streams = &self.streams;
        self.appended
            .retain(|(stream, seq)| streams.get(stream).is_some_and(|log| *seq >= log.first_seq));
    }
}

/// A locked session. Streams removed while it is held are tombstoned and unindexed when it is
/// dropped, still under the session's lock, so no reader sees a stream missing from its shard
/// without a tombstone to explain it.
struct Locked<'a> {
    shared: &'a Shared,
    shard: &'a Shard,
    state: MutexGuard<'a, SessionState>,
    /// Streams removed whole (expired or evicted), with their principals.
    removed: Vec<(StreamId, Arc<str>)>,
}

impl Locked<'_> {
    fn expire(&mut self, now: impl FnOnce() -> Instant) {
        if self.state.completed.is_empty() {
            return;
        }
        let now = now();
        let retention = self.shared.config.retention;
        while let Some(&(completed_at, stream)) = self.state.completed.front() {
            if now.saturating_duration_since(completed_at) < retention {
                break;
            }
            self.state.completed.pop_front();
            self.remove_stream(stream);
        }
    }

    /// Evicts the session's stream completed longest ago; false if none is complete.
    fn evict_oldest_completed(&mut self) -> bool {
        let Some((_, stream)) = self.state.completed.pop_front() else {
            return false;
        };
        self.remove_stream(stream);
        true
    }

    /// Evicts until the session is within its caps: whole completed streams first, oldest
    /// completion first, then the oldest events of live streams.
    fn evict_to_caps(&mut self) {
        let config = &self.shared.config;
        while self.state.usage.events > config.max_events_per_session
            || self.state.usage.bytes > config.max_bytes_per_session
        {
            if !self.evict_oldest_completed() && !self.state.evict_oldest_live_event() {
                break;
            }
        }
    }

    fn remove_stream(&mut self, stream: StreamId) {
        let state = &mut *self.state;
        if let Some(log) = state.streams.remove(&stream) {
            state.usage.streams -= 1;
            state.usage.events -= log.slots.len();
            state.usage.bytes -= log.bytes;
            self.removed.push((stream, Arc::clone(&log.principal)));
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if self.removed.is_empty() {
            return;
        }
        self.state.compact();
        // Tombstone before unindexing: a reader that misses the index then finds the
        // tombstone.
        {
            let mut tombstones = guard(&self.shared.tombstones);
            for (stream, principal) in &self.removed {
                let owner = StreamOwner {
                    principal: Arc::clone(principal),
                    session: self.shard.session.clone(),
                };
                tombstones.insert(*stream, owner);
            }
        }
        let mut index = guard(&self.shared.index);
        for (stream, _) in &self.removed {
            index.remove(stream);
        }
    }
}

/// One stream's retained events, `slots[i]` holding seq `first_seq + i`.
struct StreamLog {
    principal: Arc<str>,
    /// Seq of `slots[0]`; the next seq to append when `slots` is empty.
    first_seq: u64,
    slots: VecDeque<Slot>,
    /// Sum of the frames' lengths.
    bytes: usize,
    complete: bool,
    /// Wakes the waiters of [`EventStore::wait_for_more`]; shared with them, since a waiter
    /// awaits it after the session lock is released.
    wake: Arc<Notify>,
    /// Where the next frames are written (see [`frame::FramePages`]).
    pages: frame::FramePages,
    /// A waiter registered since the last wake-up. Appends wake only then: a writer busy
    /// writing what it read is not parked, and notifying it on every append of a fast
    /// producer would cost a lock and a wake-up per event for nothing (it reads them all
    /// in its next batch).
    waiting: bool,
}

impl StreamLog {
    fn new(principal: Arc<str>, priming: Slot) -> Self {
        let bytes = priming.frame.len();
        Self {
            principal,
            first_seq: EventId::PRIMING_SEQ,
            slots: VecDeque::from([priming]),
            bytes,
            complete: false,
            wake: Arc::default(),
            waiting: false,
            pages: frame::FramePages::default(),
        }
    }

    fn next_seq(&self) -> u64 {
        self.first_seq + self.slots.len() as u64
    }

    /// The seq of the newest event appended (evicted or not). Never underflows: seq 0 is
    /// stored at creation, and eviction moves `first_seq` past what it removes.
    fn last_seq(&self) -> u64 {
        self.next_seq() - 1
    }

    /// `message`'s slot, its frame written into the stream's pages.
    fn message_slot(&mut self, id: EventId, message: &str) -> Slot {
        Slot::message(self.pages.message_frame(id, message), message)
    }

    fn push(&mut self, slot: Slot) {
        self.bytes += slot.frame.len();
        self.slots.push_back(slot);
        self.wake_waiters();
    }

    /// Wakes the registered waiters, if any (under the session lock, like their registering).
    fn wake_waiters(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.wake.notify_waiters();
        }
    }

    fn read(
        &self,
        stream: StreamId,
        from: Option<u64>,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        let Some(from) = from else {
            return Ok(ReadBatch {
                events: Vec::new(),
                complete: self.complete,
            });
        };
        // Invariant 4: a cursor into evicted events is an error, never a silent gap.
        if from < self.first_seq {
            return Err(StoreError::Expired);
        }
        let len = self.slots.len();
        let start = usize::try_from(from - self.first_seq).map_or(len, |at| at.min(len));
        let end = start.saturating_add(limit).min(len);
        let events = self
            .slots
            .range(start..end)
            .zip(from..)
            .map(|(slot, seq)| slot.event(EventId::new(stream, seq)))
            .collect();
        Ok(ReadBatch {
            events,
            complete: self.complete && end == len,
        })
    }
}

impl Drop for StreamLog {
    /// A removed stream (expired, evicted, its session gone) ends its waits: the waiters read
    /// again and learn why.
    fn drop(&mut self) {
        self.wake_waiters();
    }
}

/// One stored event: its frame and where the JSON starts in it. The id is implied by the
/// slot's position, which keeps a slot at 40 bytes.
struct Slot {
    frame: Bytes,
    data_at: usize,
}

impl Slot {
    /// A message's slot, given the frame made of it.
    fn message(frame: Bytes, message: &str) -> Self {
        let data_at = frame::message_at(&frame, message);
        Self { frame, data_at }
    }

    /// The stream's priming event.
    fn priming(stream: StreamId, retry: Duration) -> Self {
        let frame = frame::priming_frame(stream, retry);
        let data_at = frame.len() - 2;
        Self { frame, data_at }
    }

    fn event(&self, id: EventId) -> StoredEvent {
        StoredEvent::new(id, self.frame.clone(), Some(self.data_at))
    }
}
