//! The writer thread: the only connection that writes. It takes every command waiting,
//! applies them in one transaction, commits, publishes what is durable (lanes' watermarks,
//! committed tails, wake-ups), and only then answers each caller; between batches it
//! enforces retention and caps and returns free pages to the file system. This module is the
//! loop and the commands; the writes themselves are `writes`', removals and caps
//! `retention`'s, and rebuilding the mirror from the file `reload`'s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, params};
use tether_proto::ids::{EventId, SessionId, StreamId};
use tokio::sync::{oneshot, watch};

use super::config::{MAX_BATCH, SqliteStoreConfig};
use super::schema::Checkpointer;
use super::values::{ms, now_ms, unavailable, unavailable_because};
use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::event_store::{OrphanedStream, SessionUsage, StreamKind, StreamOwner};
use crate::store::map::FastMap;
use crate::store::pipeline::{self, CompletionReply, Lane, Queued};
use crate::store::session_store::SessionRecord;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

/// What the writer thread publishes to the async side.
pub(super) struct Shared {
    /// One watch per stream the writer holds: updated after each commit, dropped with the
    /// stream (which ends every wait on it).
    pub(super) progress: Mutex<HashMap<StreamId, watch::Sender<Progress>>>,
    /// Every session record in the file, as last committed: the one writer keeps it, so
    /// looking a session up on every request needs no read.
    pub(super) records: Mutex<FastMap<SessionId, SessionRecord>>,
    /// Transactions committed.
    pub(super) transactions: AtomicU64,
}

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
    pub(super) fn refuse(self, error: &StoreError) {
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
    pub(super) session: SessionId,
    pub(super) principal: Arc<str>,
    pub(super) first_seq: u64,
    pub(super) next_seq: u64,
    pub(super) events: usize,
    pub(super) bytes: usize,
    pub(super) complete: bool,
}

impl StreamState {
    pub(super) fn progress(&self) -> Progress {
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
    pub(super) usage: SessionUsage,
    /// Completed streams, oldest completion first, with their completion times.
    pub(super) completed: VecDeque<(i64, StreamId)>,
    /// `(stream, seq, frame bytes)` in append order, for evicting the oldest live event;
    /// entries of events removed otherwise are stale and skipped.
    pub(super) appended: VecDeque<(StreamId, u64, usize)>,
}

pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) config: SqliteStoreConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) streams: FastMap<StreamId, StreamState>,
    pub(super) sessions: FastMap<SessionId, SessionState>,
    /// Streams whose progress changed in this batch (published after commit).
    pub(super) touched: Vec<StreamId>,
    /// Session records this batch stored (`Some`) or removed (`None`), applied to
    /// [`Shared::records`] after commit.
    pub(super) record_changes: Vec<(SessionId, Option<SessionRecord>)>,
    /// Incomplete Request streams found by [`Writer::reload`].
    pub(super) orphans: Vec<OrphanedStream>,
    /// Events accounted for but not yet inserted (pipelined or not): written many rows per
    /// statement ([`Writer::insert_pending`]) before any other command, eviction or commit.
    pub(super) pending: Vec<(StreamId, u64, Bytes)>,
    /// The chunk being encoded, kept between commits for its allocation.
    pub(super) chunk: Vec<u8>,
    /// The buffer a chunk is packed into ([`chunk::pack`]), kept between commits.
    pub(super) packed: Vec<u8>,
    /// When the current batch began (ms since the epoch): the time retention is checked at
    /// for the pipelined appends in it, rather than reading the clock per event.
    pub(super) batch_started: i64,
    pub(super) checkpointer: Checkpointer,
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

    pub(super) fn run(mut self, rx: &mpsc::Receiver<Command>) {
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

    pub(super) fn run_batch(&mut self, batch: Vec<Command>) {
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
    pub(super) fn transaction(&mut self, f: impl FnOnce(&mut Self) -> Sql<()>) -> Sql<()> {
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
    pub(super) fn publish_records(&mut self) {
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
    pub(super) fn publish(&mut self) {
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
    pub(super) fn publish_all(&mut self) {
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
    pub(super) fn apply(&mut self, command: Command) -> Sql<Answer> {
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
}
