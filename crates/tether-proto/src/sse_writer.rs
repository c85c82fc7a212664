//! The server's SSE writer decisions: what one connection of a stream writes, and when it ends.
//!
//! One [`SseWriter`] per SSE response (a POST's stream, the standalone GET stream, a resume
//! after `Last-Event-ID`). The server's writer loop reads the stream from its event store and
//! feeds what happened in — batches read, close signals, a replaced connection, a failed read —
//! with `now`; [`SseWriter::step`] says what to do next: write a frame, read after a cursor,
//! wait, or end. The machine makes every protocol decision of the connection:
//!
//! - **Priming** (2025-11-25 only, T71, T72): a stream read from its start carries its stored
//!   priming event; a fresh connection to a stream that earlier connections already read is
//!   primed with the id of the last event they delivered; older versions never see an event
//!   with empty data.
//! - **Completion** (T9): the batch that reaches a complete stream's last event is the
//!   connection's last chunk.
//! - **Closing before the end** (SEP-1699 "polling", T73–T75): on shutdown, on a handler's
//!   request or after `poll_after` (sessions that negotiated 2025-11-25 only), one last read
//!   goes out, then a `retry` field, then the end; and never before an event with an id went
//!   out on the connection (a connection that has written none sends a priming event with the
//!   id the client resumed from, carrying the `retry`).
//! - **Reconnection advice** (2026-07-28): a response of the modern era, which has no priming
//!   event, opens with a bare `retry` field, so a client that reconnects (a task stream read
//!   again, a request sent again) waits what the server asks.
//! - **Keep-alive**: a comment after every `keepalive` of silence; zero turns them off.
//!
//! It owns no I/O, clock, store or encoding: frames are described ([`Frame`]) and the driver
//! encodes them with `tether-sse`.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use crate::ids::{EventId, StreamId};
use crate::version::ProtocolVersion;

/// How a writer paces its connection. `Default` is no keep-alive, no polling and a one-second
/// `retry`; the server passes its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterConfig {
    /// The `retry` sent with priming events and before closing a connection.
    pub retry: Duration,
    /// Keep-alive comment interval on a quiet stream; zero turns keep-alives off.
    pub keepalive: Duration,
    /// Close the connection (after a `retry`) once it has been open this long, for sessions
    /// whose version defines polling; `None`: stay open until the stream ends.
    pub poll_after: Option<Duration>,
}

impl WriterConfig {
    /// A configuration with these three values.
    #[must_use]
    pub const fn new(retry: Duration, keepalive: Duration, poll_after: Option<Duration>) -> Self {
        Self {
            retry,
            keepalive,
            poll_after,
        }
    }
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::ZERO, None)
    }
}

/// Where a connection starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new connection to a stream. `cursor` is the last seq earlier connections delivered;
    /// 0 for a stream nobody has read, which is then read from its start (its stored priming
    /// event included).
    Fresh {
        /// The last seq already delivered.
        cursor: u64,
    },
    /// A resume after `Last-Event-ID` = `<stream>:<cursor>`.
    Resume {
        /// The seq the client last saw.
        cursor: u64,
    },
}

/// Why a connection is to close before its stream ends. The order is the precedence: a
/// shutdown outranks a handler's request, which outranks the polling timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Close {
    /// The connection has been open for `poll_after`.
    Poll,
    /// A handler asked for it, with this `retry` (`None`: the configured one).
    Requested(Option<Duration>),
    /// The server is shutting down.
    Shutdown,
}

impl Close {
    /// Precedence rank: higher wins.
    const fn rank(self) -> u8 {
        match self {
            Self::Poll => 0,
            Self::Requested(_) => 1,
            Self::Shutdown => 2,
        }
    }
}

/// A frame the machine decides on beside the stored events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// An event with `id`, empty data and `retry` (milliseconds).
    Priming {
        /// The id.
        id: EventId,
        /// The `retry` field, in milliseconds.
        retry_ms: u64,
    },
    /// A `retry` field alone (milliseconds): the first frame of a modern-era response, or the
    /// last of a connection closed before its stream ends.
    Retry {
        /// The `retry` field, in milliseconds.
        retry_ms: u64,
    },
    /// A keep-alive comment.
    KeepAlive,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Write this frame alone, then ask again.
    Write(Frame),
    /// Read the stream after seq `after` (from its start, seq 0 included, when `from_start`),
    /// and pass the result to [`SseWriter::on_batch`] (or [`SseWriter::on_store_failed`]).
    Read {
        /// Read from the stream's first event, priming event included.
        from_start: bool,
        /// The last seq written; the read starts at `after + 1`.
        after: u64,
    },
    /// Wait for an append to the stream ([`SseWriter::on_more`]), a close signal
    /// ([`SseWriter::on_close`], [`SseWriter::on_replaced`]) or `deadline` (then ask again).
    Wait {
        /// When to ask again without a signal (keep-alive, polling); `None`: only on a signal.
        deadline: Option<Instant>,
    },
    /// End the response.
    End,
}

/// One batch read from the store, as the machine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The seqs of the events read, first to last, if any were.
    pub seqs: Option<RangeInclusive<u64>>,
    /// The stream is complete and the batch reaches its last event.
    pub complete: bool,
}

/// What to write for a batch: its events (without the first when `skip_first`), then `tail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPlan {
    /// Leave out the batch's first event: the stored priming event, for a version that is
    /// never primed.
    pub skip_first: bool,
    /// A frame after the events: the `retry` of a connection closing before its stream ends.
    pub tail: Option<Frame>,
    /// This chunk is the connection's last: [`SseWriter::step`] says [`Step::End`] next.
    pub last: bool,
}

/// What the machine expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A read.
    Read,
    /// Waiting for an append, a signal, or the next keep-alive.
    Drained { keepalive_at: Option<Instant> },
    /// Nothing more goes out.
    Ended,
}

/// One connection's writer decisions. See the module docs.
#[derive(Debug, Clone)]
pub struct SseWriter {
    stream: StreamId,
    cursor: u64,
    /// A priming event to write before anything else (a fresh connection to a stream that
    /// earlier connections read).
    prime_first: bool,
    /// The next read is the stream's first: from its start, its stored priming event included.
    from_start: bool,
    /// The session's version primes streams (and so keeps seq 0 in replays).
    primes: bool,
    /// A bare `retry` field is still to open the connection (the modern era's advice).
    advise_retry: bool,
    keepalive: Duration,
    retry_ms: u64,
    poll_deadline: Option<Instant>,
    /// An event with an id went out on this connection (T73: closing early only after that).
    sent_id: bool,
    close: Option<Close>,
    phase: Phase,
}

impl SseWriter {
    /// A connection to `stream`, opened at `now` by a session that negotiated `version`.
    #[must_use]
    pub fn new(
        stream: StreamId,
        start: Start,
        version: ProtocolVersion,
        config: WriterConfig,
        now: Instant,
    ) -> Self {
        let primes = version.sends_priming_events();
        let (cursor, prime_first, from_start) = match start {
            Start::Fresh { cursor: 0 } => (0, false, true),
            // Still a new SSE stream to the client, so it is primed (T71), with the id of the
            // last event delivered, which is where a resume must start.
            Start::Fresh { cursor } => (cursor, primes, false),
            Start::Resume { cursor } => (cursor, false, false),
        };
        Self {
            stream,
            cursor,
            prime_first,
            from_start,
            primes,
            advise_retry: version.opens_streams_with_retry(),
            keepalive: config.keepalive,
            retry_ms: millis(config.retry),
            poll_deadline: config
                .poll_after
                .filter(|_| version.allows_polling())
                .map(|after| now + after),
            sent_id: false,
            close: None,
            phase: Phase::Read,
        }
    }

    /// What to do next, at `now`.
    pub fn step(&mut self, now: Instant) -> Step {
        if self.advise_retry {
            self.advise_retry = false;
            return Step::Write(Frame::Retry {
                retry_ms: self.retry_ms,
            });
        }
        if self.prime_first {
            self.prime_first = false;
            self.sent_id = true;
            return Step::Write(Frame::Priming {
                id: EventId::new(self.stream, self.cursor),
                retry_ms: self.retry_ms,
            });
        }
        if self.poll_deadline.is_some_and(|deadline| now >= deadline) {
            self.poll_deadline = None;
            self.on_close(Close::Poll);
        }
        match self.phase {
            Phase::Ended => Step::End,
            Phase::Read => Step::Read {
                from_start: self.from_start,
                after: self.cursor,
            },
            Phase::Drained { keepalive_at } => {
                if keepalive_at.is_some_and(|at| now >= at) {
                    // After a comment the loop reads again, like after any wake-up.
                    self.phase = Phase::Read;
                    return Step::Write(Frame::KeepAlive);
                }
                let deadline = match (keepalive_at, self.poll_deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Step::Wait { deadline }
            }
        }
    }

    /// A batch was read (after [`Step::Read`]): what of it to write. `now` starts the
    /// keep-alive interval when the stream turns out to be drained.
    pub fn on_batch(&mut self, batch: &Batch, now: Instant) -> BatchPlan {
        self.from_start = false;
        let mut skip_first = false;
        if let Some(seqs) = &batch.seqs {
            skip_first = *seqs.start() == EventId::PRIMING_SEQ && !self.primes;
            self.cursor = *seqs.end();
            // Something goes out unless the batch is only the priming event being left out.
            if !(skip_first && seqs.end() == seqs.start()) {
                self.sent_id = true;
            }
        }
        let mut tail = None;
        let last = if batch.complete {
            true
        } else if let Some(close) = self.close {
            tail = Some(self.close_frame(close));
            true
        } else {
            false
        };
        self.phase = if last {
            Phase::Ended
        } else if batch.seqs.is_some() {
            Phase::Read
        } else {
            Phase::Drained {
                keepalive_at: (!self.keepalive.is_zero()).then(|| now + self.keepalive),
            }
        };
        BatchPlan {
            skip_first,
            tail,
            last,
        }
    }

    /// The stream has more after the cursor (or completed): read again.
    pub fn on_more(&mut self) {
        if matches!(self.phase, Phase::Drained { .. }) {
            self.phase = Phase::Read;
        }
    }

    /// The connection is to close before its stream ends: after one more read, with `retry`.
    pub fn on_close(&mut self, close: Close) {
        if self
            .close
            .is_none_or(|current| close.rank() > current.rank())
        {
            self.close = Some(close);
        }
        self.on_more();
    }

    /// The connection was replaced by a newer one for the same stream, or its session ended:
    /// nothing more to say on it.
    pub fn on_replaced(&mut self) {
        self.phase = Phase::Ended;
    }

    /// The store cannot continue the stream (its events expired, the stream is gone): the
    /// connection ends, and a client that resumes learns why from the refusal.
    pub fn on_store_failed(&mut self) {
        self.phase = Phase::Ended;
    }

    /// The last seq written (or delivered before this connection).
    #[must_use]
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The stream.
    #[must_use]
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Whether the connection is closing before its stream ends, and why.
    #[must_use]
    pub fn closing(&self) -> Option<Close> {
        self.close
    }

    /// The last frame of a connection closed before its stream ends: a `retry` tells the
    /// client when to come back; a connection that wrote no id yet first gets one (T73).
    fn close_frame(&self, close: Close) -> Frame {
        let retry_ms = match close {
            Close::Requested(Some(retry)) => millis(retry),
            _ => self.retry_ms,
        };
        if !self.sent_id && self.primes {
            Frame::Priming {
                id: EventId::new(self.stream, self.cursor),
                retry_ms,
            }
        } else {
            Frame::Retry { retry_ms }
        }
    }
}

/// A duration as SSE `retry` milliseconds (saturating).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLLING: ProtocolVersion = ProtocolVersion::V2025_11_25;
    const OLD: ProtocolVersion = ProtocolVersion::V2025_06_18;

    fn stream() -> StreamId {
        StreamId::generate()
    }

    fn config() -> WriterConfig {
        WriterConfig::new(
            Duration::from_millis(1000),
            Duration::from_secs(15),
            Some(Duration::from_secs(60)),
        )
    }

    fn batch(seqs: Option<RangeInclusive<u64>>, complete: bool) -> Batch {
        Batch { seqs, complete }
    }

    #[test]
    fn a_new_stream_is_read_from_its_start_and_ends_with_its_last_event() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Fresh { cursor: 0 }, POLLING, config(), t0);
        assert_eq!(
            writer.step(t0),
            Step::Read {
                from_start: true,
                after: 0
            }
        );
        let plan = writer.on_batch(&batch(Some(0..=3), false), t0);
        assert_eq!(
            plan,
            BatchPlan {
                skip_first: false,
                tail: None,
                last: false
            }
        );
        assert_eq!(
            writer.step(t0),
            Step::Read {
                from_start: false,
                after: 3
            }
        );
        let plan = writer.on_batch(&batch(Some(4..=4), true), t0);
        assert!(plan.last && plan.tail.is_none(), "{plan:?}");
        assert_eq!(writer.step(t0), Step::End);
        assert_eq!(writer.cursor(), 4);
    }

    #[test]
    fn versions_before_polling_never_see_the_stored_priming_event() {
        let t0 = Instant::now();
        let mut writer = SseWriter::new(stream(), Start::Fresh { cursor: 0 }, OLD, config(), t0);
        writer.step(t0);
        let plan = writer.on_batch(&batch(Some(0..=2), false), t0);
        assert!(plan.skip_first);
        // A batch of the priming event alone writes nothing.
        let mut writer = SseWriter::new(stream(), Start::Fresh { cursor: 0 }, OLD, config(), t0);
        writer.step(t0);
        let plan = writer.on_batch(&batch(Some(0..=0), false), t0);
        assert!(plan.skip_first);
        // Nothing went out, yet an older version is closed with a bare retry: never primed.
        writer.on_close(Close::Shutdown);
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert!(
            matches!(plan.tail, Some(Frame::Retry { .. })),
            "older versions get no priming"
        );
    }

    #[test]
    fn a_fresh_connection_after_earlier_ones_is_primed_with_the_last_delivered_id() {
        let t0 = Instant::now();
        let s = stream();
        let mut writer = SseWriter::new(s, Start::Fresh { cursor: 7 }, POLLING, config(), t0);
        assert_eq!(
            writer.step(t0),
            Step::Write(Frame::Priming {
                id: EventId::new(s, 7),
                retry_ms: 1000
            })
        );
        assert_eq!(
            writer.step(t0),
            Step::Read {
                from_start: false,
                after: 7
            }
        );
        // The same connection to an older version's session is not primed.
        let mut writer = SseWriter::new(s, Start::Fresh { cursor: 7 }, OLD, config(), t0);
        assert!(matches!(writer.step(t0), Step::Read { after: 7, .. }));
    }

    #[test]
    fn a_resume_reads_after_the_cursor_without_priming() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Resume { cursor: 5 }, POLLING, config(), t0);
        assert_eq!(
            writer.step(t0),
            Step::Read {
                from_start: false,
                after: 5
            }
        );
    }

    #[test]
    fn a_drained_stream_waits_and_sends_keepalives_at_the_interval() {
        let t0 = Instant::now();
        let keepalive = Duration::from_secs(15);
        let mut writer = SseWriter::new(
            stream(),
            Start::Resume { cursor: 1 },
            OLD,
            WriterConfig::new(Duration::from_secs(1), keepalive, None),
            t0,
        );
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert_eq!(
            plan,
            BatchPlan {
                skip_first: false,
                tail: None,
                last: false
            }
        );
        assert_eq!(
            writer.step(t0),
            Step::Wait {
                deadline: Some(t0 + keepalive)
            }
        );
        // Woken early by nothing: still waiting, same deadline.
        assert_eq!(
            writer.step(t0 + Duration::from_secs(3)),
            Step::Wait {
                deadline: Some(t0 + keepalive)
            }
        );
        let t1 = t0 + keepalive;
        assert_eq!(writer.step(t1), Step::Write(Frame::KeepAlive));
        // A read follows every comment; the interval restarts from that read.
        assert!(matches!(writer.step(t1), Step::Read { after: 1, .. }));
        writer.on_batch(&batch(None, false), t1);
        assert_eq!(
            writer.step(t1),
            Step::Wait {
                deadline: Some(t1 + keepalive)
            }
        );
    }

    #[test]
    fn zero_keepalive_waits_without_a_deadline() {
        let t0 = Instant::now();
        let mut writer = SseWriter::new(
            stream(),
            Start::Resume { cursor: 1 },
            POLLING,
            WriterConfig::new(Duration::from_secs(1), Duration::ZERO, None),
            t0,
        );
        writer.step(t0);
        writer.on_batch(&batch(None, false), t0);
        assert_eq!(
            writer.step(t0 + Duration::from_secs(3600)),
            Step::Wait { deadline: None }
        );
    }

    #[test]
    fn an_append_wakes_a_drained_writer_to_read() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Resume { cursor: 2 }, POLLING, config(), t0);
        writer.step(t0);
        writer.on_batch(&batch(None, false), t0);
        assert!(matches!(writer.step(t0), Step::Wait { .. }));
        writer.on_more();
        assert!(matches!(writer.step(t0), Step::Read { after: 2, .. }));
    }

    #[test]
    fn polling_closes_after_one_last_read_with_retry() {
        let t0 = Instant::now();
        let poll = Duration::from_secs(60);
        let mut writer =
            SseWriter::new(stream(), Start::Fresh { cursor: 0 }, POLLING, config(), t0);
        writer.step(t0);
        writer.on_batch(&batch(Some(0..=1), false), t0);
        writer.step(t0);
        writer.on_batch(&batch(None, false), t0);
        // The wait ends at whichever comes first: the keep-alive (15 s) here.
        assert_eq!(
            writer.step(t0),
            Step::Wait {
                deadline: Some(t0 + Duration::from_secs(15))
            }
        );
        let t1 = t0 + poll;
        assert!(matches!(writer.step(t1), Step::Read { after: 1, .. }));
        assert_eq!(writer.closing(), Some(Close::Poll));
        let plan = writer.on_batch(&batch(Some(2..=3), false), t1);
        assert!(!plan.skip_first);
        assert_eq!(plan.tail, Some(Frame::Retry { retry_ms: 1000 }));
        assert!(plan.last);
        assert_eq!(writer.step(t1), Step::End);
    }

    #[test]
    fn older_versions_are_never_asked_to_poll() {
        let t0 = Instant::now();
        let mut writer = SseWriter::new(stream(), Start::Resume { cursor: 1 }, OLD, config(), t0);
        let late = t0 + Duration::from_secs(3600);
        writer.step(late);
        assert_eq!(writer.closing(), None);
        let plan = writer.on_batch(&batch(None, false), late);
        assert!(!plan.last);
    }

    #[test]
    fn a_close_never_comes_before_an_id_on_the_connection() {
        let t0 = Instant::now();
        let s = stream();
        let mut writer = SseWriter::new(s, Start::Resume { cursor: 4 }, POLLING, config(), t0);
        writer.on_close(Close::Shutdown);
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert_eq!(
            plan.tail,
            Some(Frame::Priming {
                id: EventId::new(s, 4),
                retry_ms: 1000
            }),
            "a resume that wrote nothing closes with the id it resumed from"
        );
        assert!(plan.last);
        // Once an event went out, the close is a bare retry.
        let mut writer = SseWriter::new(s, Start::Resume { cursor: 4 }, POLLING, config(), t0);
        writer.step(t0);
        writer.on_batch(&batch(Some(5..=5), false), t0);
        writer.on_close(Close::Shutdown);
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert_eq!(plan.tail, Some(Frame::Retry { retry_ms: 1000 }));
    }

    #[test]
    fn a_requested_close_carries_its_own_retry_and_shutdown_outranks_it() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Fresh { cursor: 0 }, POLLING, config(), t0);
        writer.step(t0);
        writer.on_batch(&batch(Some(0..=0), false), t0);
        writer.on_close(Close::Requested(Some(Duration::from_millis(250))));
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert_eq!(plan.tail, Some(Frame::Retry { retry_ms: 250 }));

        let mut writer =
            SseWriter::new(stream(), Start::Fresh { cursor: 0 }, POLLING, config(), t0);
        writer.on_close(Close::Shutdown);
        writer.on_close(Close::Requested(Some(Duration::from_millis(250))));
        assert_eq!(writer.closing(), Some(Close::Shutdown));
        writer.step(t0);
        let plan = writer.on_batch(&batch(Some(0..=0), false), t0);
        assert_eq!(plan.tail, Some(Frame::Retry { retry_ms: 1000 }));
    }

    #[test]
    fn a_completing_batch_ends_without_retry_even_while_closing() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Resume { cursor: 1 }, POLLING, config(), t0);
        writer.on_close(Close::Shutdown);
        writer.step(t0);
        let plan = writer.on_batch(&batch(Some(2..=2), true), t0);
        assert_eq!(plan.tail, None);
        assert!(plan.last);
        assert_eq!(writer.step(t0), Step::End);
    }

    #[test]
    fn a_replaced_connection_or_a_failed_read_ends_at_once() {
        let t0 = Instant::now();
        let mut writer =
            SseWriter::new(stream(), Start::Resume { cursor: 1 }, POLLING, config(), t0);
        writer.on_replaced();
        assert_eq!(writer.step(t0), Step::End);
        let mut writer =
            SseWriter::new(stream(), Start::Resume { cursor: 1 }, POLLING, config(), t0);
        writer.step(t0);
        writer.on_store_failed();
        assert_eq!(writer.step(t0), Step::End);
        // A close signal after the end changes nothing.
        writer.on_close(Close::Shutdown);
        assert_eq!(writer.step(t0), Step::End);
    }

    #[test]
    fn older_versions_close_with_a_bare_retry() {
        let t0 = Instant::now();
        let mut writer = SseWriter::new(stream(), Start::Resume { cursor: 3 }, OLD, config(), t0);
        writer.on_close(Close::Shutdown);
        writer.step(t0);
        let plan = writer.on_batch(&batch(None, false), t0);
        assert_eq!(plan.tail, Some(Frame::Retry { retry_ms: 1000 }));
    }

    /// The modern era has no priming event, so its responses open with the server's `retry`
    /// alone; the stored priming event is still left out, and nothing else changes.
    #[test]
    fn a_modern_response_opens_with_a_bare_retry_then_reads_its_stream() {
        let t0 = Instant::now();
        let modern = ProtocolVersion::MODERN;
        let mut writer = SseWriter::new(stream(), Start::Fresh { cursor: 0 }, modern, config(), t0);
        assert_eq!(
            writer.step(t0),
            Step::Write(Frame::Retry { retry_ms: 1000 })
        );
        assert_eq!(
            writer.step(t0),
            Step::Read {
                from_start: true,
                after: 0
            }
        );
        let plan = writer.on_batch(&batch(Some(0..=2), true), t0);
        assert!(
            plan.skip_first && plan.last && plan.tail.is_none(),
            "{plan:?}"
        );
        assert_eq!(writer.step(t0), Step::End);
        // Legacy versions never get the bare opening: their priming event carries `retry`.
        for version in ProtocolVersion::LEGACY {
            let mut writer =
                SseWriter::new(stream(), Start::Fresh { cursor: 0 }, version, config(), t0);
            assert!(
                matches!(writer.step(t0), Step::Read { .. }),
                "{version} opens with a read"
            );
        }
    }
}
