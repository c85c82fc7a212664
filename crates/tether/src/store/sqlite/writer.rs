//! The writer thread: the only connection that writes. It takes every command waiting,
//! applies them in one transaction, commits, publishes what is durable (lanes' watermarks,
//! committed tails, wake-ups), and only then answers each caller; between batches it
//! enforces retention and caps and returns free pages to the file system.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, params};
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::version::ProtocolVersion;
use tokio::sync::{oneshot, watch};

use super::schema::Checkpointer;
use super::{
    MAX_BATCH, REQUEST_KIND, STANDALONE_KIND, SWEEP_LIMIT, Shared, SqliteStoreConfig, VACUUM_PAGES,
    ms, now_ms, unavailable, unavailable_because,
};
use crate::lock as guard;
use crate::store::memory::FastMap;
use crate::store::pipeline::{self, CompletionReply, Lane, Queued};
use crate::store::{
    OrphanedStream, SessionRecord, SessionUsage, StoreError, StreamKind, StreamOwner,
};
use crate::store::{chunk, frame};

pub(super) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub(super) enum Command {
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
    /// Statements of another store kept in the same file (the task store): run inside the
    /// writer's transaction; the answer it returns is told the commit's outcome.
    Run(Statements),
}

/// What a [`Command::Run`] executes: statements on the writer's connection, returning the
/// answer to hold until the commit.
pub(super) type Statements = Box<dyn FnOnce(&Connection) -> Sql<Answer> + Send>;

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
            // Its reply is dropped with it: the caller hears that the writer stopped.
            Self::Run(_) => {}
        }
    }
}

/// Tells a waiting caller its command's result, given the transaction's failure if any.
pub(super) type Respond = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// An answer held until its transaction commits (or fails, and every answer says so).
pub(super) enum Answer {
    /// A caller waiting for its command's result.
    Reply(Respond),
    /// Pipelined appends of one lane stored in this transaction, reported to it (those
    /// dropped are not among them: see [`Writer::apply_lane`]).
    Queued(Vec<Queued>),
}

pub(super) fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Answer {
    Answer::Reply(Box::new(move |failed: Option<&StoreError>| {
        let _ = reply.send(match failed {
            None => result,
            Some(error) => Err(error.clone()),
        });
    }))
}

/// What waiters watch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Progress {
    /// The oldest seq stored: a tail read before it must hear `Expired` from the database.
    pub(super) first_seq: u64,
    /// The last seq committed.
    pub(super) last_seq: u64,
    /// The stream is complete.
    pub(super) complete: bool,
}

impl Progress {
    /// Whether a waiter after `after` has something to read (or the stream ended).
    pub(super) fn satisfies(self, after: u64) -> bool {
        self.complete || self.last_seq > after
    }
}

/// The writer's mirror of one stream.
pub(super) struct StreamState {
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
pub(super) struct SessionState {
    usage: SessionUsage,
    /// Completed streams, oldest completion first, with their completion times.
    completed: VecDeque<(i64, StreamId)>,
    /// `(stream, seq, frame bytes)` in append order, for evicting the oldest live event;
    /// entries of events removed otherwise are stale and skipped.
    appended: VecDeque<(StreamId, u64, usize)>,
}

pub(super) struct Writer {
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
    /// The chunk being encoded, kept between commits for its allocation.
    chunk: Vec<u8>,
    /// The buffer a chunk is packed into ([`chunk::pack`]), kept between commits.
    packed: Vec<u8>,
    /// When the current batch began (ms since the epoch): the time retention is checked at
    /// for the pipelined appends in it, rather than reading the clock per event.
    batch_started: i64,
    checkpointer: Checkpointer,
}

pub(super) type Sql<T> = rusqlite::Result<T>;

/// A writer thread that started, or why it did not.
pub(super) struct Running {
    /// Where commands go.
    pub(super) tx: mpsc::Sender<Command>,
    /// The thread.
    pub(super) thread: JoinHandle<()>,
    /// The Request streams an earlier process left incomplete.
    pub(super) orphans: Vec<OrphanedStream>,
}

/// Why the writer thread did not start.
pub(super) enum Started {
    /// Loading the file's state failed.
    Sql(rusqlite::Error),
    /// The thread could not be spawned.
    Thread(std::io::Error),
}

impl Writer {
    /// Loads the file's state into the writer's mirror, publishes it, and starts the thread.
    pub(super) fn spawn(
        conn: Connection,
        config: SqliteStoreConfig,
        shared: Arc<Shared>,
        checkpointer: Checkpointer,
    ) -> Result<Running, Started> {
        let mut writer = Self {
            conn,
            config,
            shared,
            streams: FastMap::default(),
            sessions: FastMap::default(),
            touched: Vec::new(),
            record_changes: Vec::new(),
            orphans: Vec::new(),
            pending: Vec::new(),
            chunk: Vec::new(),
            packed: Vec::new(),
            batch_started: 0,
            checkpointer,
        };
        writer.reload().map_err(Started::Sql)?;
        writer.publish_all();
        let orphans = std::mem::take(&mut writer.orphans);
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tether-sqlite-writer".into())
            .spawn(move || writer.run(&rx))
            .map_err(Started::Thread)?;
        Ok(Running {
            tx,
            thread,
            orphans,
        })
    }

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
                    self.checkpointer.restart_if_due(&self.conn, true);
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
            self.checkpointer.restart_if_due(&self.conn, false);
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
                self.checkpointer.committed();
                Ok(())
            }
            Err(error) => {
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
                .prepare("SELECT id, version, principal, standalone, client FROM sessions")?;
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
                let client = row
                    .get::<_, Option<String>>(4)?
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .map(Arc::new);
                records.insert(
                    id.clone(),
                    SessionRecord {
                        id,
                        version,
                        principal,
                        standalone,
                        client,
                    },
                );
            }
        }
        *guard(&self.shared.records) = records;
        // Chunks in the order they were inserted: each session's events in append order,
        // up to the order of streams within one commit.
        let mut statement = self.conn.prepare(
            "SELECT stream, first_seq, frames, packing, last_seq FROM chunks ORDER BY rowid",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(stream) = StreamId::parse(&row.get::<_, String>(0)?) else {
                continue;
            };
            let first = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            let stored = row.get_ref(2)?.as_blob()?;
            let Ok(blob) = chunk::Packing::from_code(row.get(3)?)
                .and_then(|packing| chunk::unpack(packing, stored))
            else {
                // Its seqs stay taken, so the stream's next append does not collide with it;
                // a read that reaches it fails rather than skipping it.
                let last = u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0);
                state.next_seq = state.next_seq.max(last + 1);
                tracing::error!(%stream, "sqlite store: a stored chunk is malformed; its events are left out");
                continue;
            };
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
            Command::Run(run) => run(&self.conn)?,
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
                match self.apply_lane(&lane, queued) {
                    Ok(stored) => Answer::Queued(stored),
                    Err(error) => {
                        lane.fail(&unavailable_because(error.to_string()));
                        return Err(error);
                    }
                }
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
                        "INSERT OR REPLACE INTO sessions
                             (id, version, principal, standalone, last_seen, client)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?
                    .execute(params![
                        record.id.as_str(),
                        record.version.to_string(),
                        &*record.principal,
                        record.standalone.as_str(),
                        now_ms(),
                        record.client.as_deref().map(serde_json::Value::to_string),
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
        self.add_events(&session, stream, [(id.seq, frame)])?;
        Ok(Ok(id))
    }

    /// Stores one lane's pipelined appends (`queued`, taken from it in seq order) and returns
    /// those stored. The pipeline hands out seqs in order and refuses what this would refuse,
    /// so frames that do not fit here are dropped: their lane failed earlier (the frames queued
    /// behind a failed commit), their session was removed, or, were the pipeline wrong, a seq
    /// is not the next one, which fails the lane after the frames before it. The mirror is
    /// counted once for the run, not per event: a fast stream hands over thousands at once.
    fn apply_lane(&mut self, lane: &Lane, mut queued: Vec<Queued>) -> Sql<Vec<Queued>> {
        let Some(first) = queued.first() else {
            return Ok(queued);
        };
        let stream = first.id.stream;
        let next_seq = match self.streams.get(&stream) {
            Some(state) if !state.complete && lane.failure().is_none() => state.next_seq,
            _ => return Ok(Vec::new()),
        };
        let in_order = queued
            .iter()
            .zip(next_seq..)
            .take_while(|(append, seq)| append.id.seq == *seq)
            .count();
        if in_order < queued.len() {
            let got = queued[in_order].id.seq;
            let expected = next_seq + in_order as u64;
            tracing::error!(%stream, expected, got, "sqlite store: pipelined append out of order");
            lane.fail(&unavailable_because(
                "a pipelined append arrived out of order",
            ));
            queued.truncate(in_order);
        }
        if queued.is_empty() {
            return Ok(queued);
        }
        let session = lane.session();
        self.expire(session, self.batch_started)?;
        self.add_events(
            session,
            stream,
            queued
                .iter()
                .map(|append| (append.id.seq, append.frame.clone())),
        )?;
        Ok(queued)
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
            "INSERT INTO chunks (stream, first_seq, last_seq, frames, packing)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut encoded = std::mem::take(&mut self.chunk);
        let mut packed = std::mem::take(&mut self.packed);
        for cut in cuts {
            encoded.clear();
            for (_, _, frame) in &pending[cut.range.clone()] {
                chunk::push(&mut encoded, frame);
            }
            let (packing, stored) = chunk::pack(&encoded, &mut packed);
            statement.execute(params![
                cut.stream.as_str(),
                i64::try_from(cut.first).unwrap_or(i64::MAX),
                i64::try_from(cut.last()).unwrap_or(i64::MAX),
                stored,
                packing.code(),
            ])?;
        }
        // The buffers are kept for the next commit; one very large frame does not pin memory.
        if encoded.capacity() <= 2 * chunk::MAX_BYTES {
            self.chunk = encoded;
        }
        if packed.capacity() <= 2 * chunk::MAX_BYTES {
            self.packed = packed;
        }
        Ok(())
    }

    /// Adds the next events of `stream`, a stream of `session` (seq and frame, in seq order):
    /// their rows to the pending inserts, their counts to the mirror; then evicts to the caps.
    fn add_events(
        &mut self,
        session: &SessionId,
        stream: StreamId,
        frames: impl IntoIterator<Item = (u64, Bytes)>,
    ) -> Sql<()> {
        if !self.sessions.contains_key(session) {
            self.sessions
                .insert(session.clone(), SessionState::default());
        }
        let (mut events, mut bytes) = (0, 0);
        if let Some(state) = self.sessions.get_mut(session) {
            for (seq, frame) in frames {
                events += 1;
                bytes += frame.len();
                state.appended.push_back((stream, seq, frame.len()));
                self.pending.push((stream, seq, frame));
            }
            state.usage.events += events;
            state.usage.bytes += bytes;
        }
        if let Some(state) = self.streams.get_mut(&stream) {
            state.next_seq += events as u64;
            state.events += events;
            state.bytes += bytes;
        }
        // One wake-up per stream and batch run, not per event.
        if self.touched.last() != Some(&stream) {
            self.touched.push(stream);
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
