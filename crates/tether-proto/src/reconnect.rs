//! The per-stream reconnect state machine: when to reconnect a server→client SSE stream, with
//! which `Last-Event-ID`, and when to stop.
//!
//! One [`Reconnect`] per server stream (each POST's SSE response, the standalone GET stream),
//! and, in the 2026-07-28 era, per request the client may send again ([`Reconnect::request`]:
//! a `tasks/stream` read resumed after its last seq, a request safe to repeat, a listen
//! stream, a POST refused for now), so both eras wait by the same rules.
//! It owns the stream's cursor (the last event id the application took), the server's `retry`
//! for this stream (docs/PROTOCOL.md#open-4: `retry` is per stream), the count of consecutive
//! failed attempts and the budget, and the rule that at most one connection attempt is
//! outstanding at a time (docs/DESIGN.md#property-6). It is sans-IO in the quinn-proto style: the
//! driver feeds what happened through `on_*` methods, passing `now`, and asks what to do next
//! with [`Reconnect::poll`]; the timing arithmetic lives in [`crate::backoff`].
//!
//! It does not own I/O, sleeping, SSE decoding (`tether-sse`), deduplication of replayed
//! events, delivery to the application, or the session: a 404 is reported as
//! [`GiveUpReason::SessionExpired`] and re-initializing is the client's job.
//!
//! # Losses, failures and progress
//!
//! - A **loss** is a live stream ending before it is finished: a network error, a timeout, the
//!   idle deadline passing, or a clean end of the body. The spec gives no wire signal telling
//!   "connection closed" from "stream terminated" (docs/PROTOCOL.md#open-2), so a clean close of a
//!   POST stream before its final response is a loss (T85), and so is any close of the standalone
//!   GET stream.
//! - A **failed attempt** is a connect that failed (network error, timeout, 429/5xx), or a
//!   connection that ended without the stream making progress on it.
//! - **Progress** is a new non-empty event id, an event carrying a message (not a priming
//!   event), or a connection that stayed alive (bytes, keep-alive comments included) for
//!   [`ReconnectConfig::stable_after`]. Progress resets the failure count and the budget
//!   clock; a mere successful connect does not, so a server that accepts and closes at once
//!   runs the budget out instead of keeping the client busy forever.
//!
//! The first reconnect after a loss waits exactly the server's `retry` (T81), else the first
//! backoff step; each failed attempt after that waits `max(retry, jittered backoff)`, with
//! `Retry-After` as a floor (docs/CONTRACTS.md#client-reconnect-timing).

use std::time::{Duration, Instant};

use crate::backoff::{BackoffConfig, Budget, DEFAULT_CAP, RandomSource, SplitMix64};

/// Default [`ReconnectConfig::idle_timeout`]: 60 s, the `tether call` default.
///
/// Four of the server's default 15 s keep-alive intervals: one lost keep-alive is not a dead
/// connection, four in a row almost certainly is (a half-open TCP connection never errors on
/// its own). Well under the 300 s after which the Python client and undici give up.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default [`ReconnectConfig::stable_after`]: the backoff cap, 30 s.
///
/// A connection that stayed alive at least as long as the longest backoff step cannot make the
/// client reconnect more often than backoff would allow anyway, so treating its end as a fresh
/// loss (not another failure) costs nothing, while a quiet stream that a server or proxy
/// closes every few minutes (SEP-1699 polling, load-balancer connection limits) is never given
/// up on.
pub const DEFAULT_STABLE_AFTER: Duration = DEFAULT_CAP;

/// How one stream reconnects. `Default` gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ReconnectConfig {
    /// Backoff between failed attempts.
    pub backoff: BackoffConfig,
    /// When to give up on a run of failed attempts.
    pub budget: Budget,
    /// No bytes at all (not even keep-alive comments) for this long on a live stream or an
    /// outstanding attempt means the connection is dead; see [`Reconnect::idle_deadline`].
    /// `Duration::MAX` disables the deadline.
    pub idle_timeout: Duration,
    /// A connection on which bytes kept arriving for this long counts as progress.
    pub stable_after: Duration,
}

impl Default for ReconnectConfig {
    fn default() -> Self {
        Self {
            backoff: BackoffConfig::default(),
            budget: Budget::default(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            stable_after: DEFAULT_STABLE_AFTER,
        }
    }
}

/// Which kind of server stream a machine drives; they end and resume differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// The SSE response to a POST. Finished once its final response has been taken (T85);
    /// resumed by GET with an event id seen on it (T80); before any id arrived, its request
    /// is sent again only where the caller allowed it
    /// ([`Reconnect::resend_before_first_id`]).
    Post,
    /// The standalone GET stream. Never finished by the server (T27: it carries no
    /// responses); reopened without `Last-Event-ID` if no id was ever seen.
    Standalone,
}

/// What the SSE decoder produced, reported with [`Reconnect::on_event`] once the application
/// has taken the message (docs/DESIGN.md#property-5: process, then commit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Event<'a> {
    /// The event's `id` field: `None` if it had none (the cursor stays, T113), `Some("")` if
    /// the server sent an empty `id` (the cursor is cleared, so the next connect sends no
    /// `Last-Event-ID`: T87, T112), otherwise the new cursor. Opaque text.
    pub id: Option<&'a str>,
    /// The `retry` field, if the event (or a block without data) carried one.
    pub retry: Option<Duration>,
    /// The event carried a JSON-RPC message; `false` for a priming event (empty data, T84) and
    /// for an id or `retry` change that dispatched no event.
    pub message: bool,
    /// The message completed a POST stream: it was the final response (for a batch, the last
    /// one outstanding). Ignored on the standalone stream, which carries no responses (T27).
    pub is_final: bool,
}

impl<'a> Event<'a> {
    /// An event carrying a message, with its id if it had one.
    #[must_use]
    pub const fn message(id: Option<&'a str>) -> Self {
        Self {
            id,
            retry: None,
            message: true,
            is_final: false,
        }
    }

    /// A priming event (an id and empty data, T71/T84), or an id change that dispatched no
    /// event: it moves the cursor but carries no message.
    #[must_use]
    pub const fn priming(id: &'a str) -> Self {
        Self {
            id: Some(id),
            retry: None,
            message: false,
            is_final: false,
        }
    }

    /// The same event, also carrying a `retry` field.
    #[must_use]
    pub const fn with_retry(mut self, retry: Duration) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The same event, marked as the POST stream's final response.
    #[must_use]
    pub const fn final_response(mut self) -> Self {
        self.is_final = true;
        self
    }
}

/// Why a connection attempt failed or a live stream ended (docs/DESIGN.md#client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Connect error, connection reset, read error.
    Network,
    /// The driver's own timeout on an attempt (connect, response headers).
    Timeout,
    /// No bytes, not even keep-alive comments, until [`Reconnect::idle_deadline`]: half-open.
    Idle,
    /// The response body ended cleanly. Not the end of the stream unless its final response
    /// was seen (docs/PROTOCOL.md#open-2, T85).
    CleanClose,
    /// The attempt was answered with this status instead of `200 text/event-stream`.
    ///
    /// 429 and 5xx back off (`retry_after`, from [`crate::backoff::parse_retry_after`], is a
    /// floor for the next wait); 204 stops the stream (WHATWG); 404 is
    /// [`GiveUpReason::SessionExpired`]; 405 is [`GiveUpReason::NotResumable`] (T88);
    /// anything else, a 200 with the wrong content type included (T117), is
    /// [`GiveUpReason::Fatal`].
    Status {
        /// The HTTP status code.
        code: u16,
        /// The parsed `Retry-After` header, if any.
        retry_after: Option<Duration>,
    },
}

/// Why a stream will not be reconnected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// 404: the session is gone. The client re-initializes and fails in-flight requests.
    #[error("session expired")]
    SessionExpired,
    /// The stream cannot be resumed: the server answered the resume GET with 405 (T88), or a
    /// POST stream was lost before any event id was seen on it, so there is nothing to resume
    /// from. This is what the Python and TypeScript clients do too; re-POSTing instead could
    /// run a non-idempotent request twice, unless the server is known to answer a request
    /// sent again with its first stream ([`Reconnect::resend_before_first_id`]).
    #[error("stream not resumable")]
    NotResumable,
    /// The server refused the stream with a status that retrying cannot fix.
    #[error("server refused the stream with status {status}")]
    Fatal {
        /// The HTTP status code.
        status: u16,
    },
    /// Too many consecutive failed attempts, or the outage lasted too long
    /// ([`crate::backoff::Budget`]).
    #[error("reconnect budget exhausted after {attempts} failed attempts over {elapsed:?}")]
    BudgetExhausted {
        /// Consecutive failed attempts since the stream last made progress.
        attempts: u32,
        /// Time since the outage began.
        elapsed: Duration,
    },
}

/// What the driver should do next; returned by [`Reconnect::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Action {
    /// Nothing until `until`; then poll again.
    Wait {
        /// When to poll again.
        until: Instant,
    },
    /// Open the stream now: GET, with `Last-Event-ID: last_event_id` when it is `Some`
    /// (T80, T86, T87); for a POST stream without a cursor (only with
    /// [`Reconnect::resend_before_first_id`]), POST its request again. The attempt is
    /// outstanding from this moment until the driver reports [`Reconnect::on_connected`] or
    /// [`Reconnect::on_failure`].
    Connect {
        /// The cursor; `None` only if no id was ever seen (or the server cleared it).
        last_event_id: Option<String>,
    },
    /// An attempt is outstanding: wait for its outcome (bounded by
    /// [`Reconnect::idle_deadline`]). Never followed by another `Connect` until it is reported.
    Connecting,
    /// Connected: read the stream, reporting events, bytes and its end; report
    /// [`Failure::Idle`] if [`Reconnect::idle_deadline`] passes first.
    Streaming,
    /// The stream is finished: its final response was taken, the server answered 204, or the
    /// caller completed it. Final.
    Done,
    /// The stream will not be reconnected. Final.
    GiveUp(GiveUpReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Waiting { until: Instant },
    Connecting,
    Streaming { since: Instant },
    Done,
    GaveUp(GiveUpReason),
}

/// The reconnect state machine of one server stream. See the [module docs](self).
///
/// Inputs: [`on_connected`](Self::on_connected), [`on_event`](Self::on_event),
/// [`on_bytes`](Self::on_bytes), [`on_failure`](Self::on_failure),
/// [`on_complete`](Self::on_complete). Output: [`poll`](Self::poll), plus
/// [`idle_deadline`](Self::idle_deadline) while connecting or connected. Inputs that do not
/// fit the current state (a failure report while waiting, anything after the machine finished)
/// are stale reports from a connection the machine already gave up on: they are ignored,
/// except that an event's id, `retry` and final flag are always recorded, since the
/// application did take that event. Nothing here panics.
///
/// # Example
///
/// A driver is a short loop; here with virtual time instead of sleeping and a scripted server
/// instead of HTTP. A POST stream gets its priming event (with `retry: 500`), is cut, and is
/// resumed with `Last-Event-ID` after exactly 500 ms; the resumed stream brings the result.
///
/// ```
/// use std::time::{Duration, Instant};
/// use tether_proto::backoff::SplitMix64;
/// use tether_proto::reconnect::{Action, Event, Failure, Reconnect, ReconnectConfig};
///
/// let t0 = Instant::now();
/// let mut now = t0;
/// // The POST was answered 200 text/event-stream.
/// let mut stream = Reconnect::post_stream(ReconnectConfig::default(), SplitMix64::new(1), now);
/// stream.on_event(now, Event::priming("s:0").with_retry(Duration::from_millis(500)));
/// now += Duration::from_millis(20);
/// stream.on_failure(now, Failure::Network); // the Wi-Fi dropped
///
/// let outcome = loop {
///     match stream.poll(now) {
///         Action::Wait { until } => now = until, // sleep_until(until).await
///         Action::Connect { last_event_id } => {
///             assert_eq!(now, t0 + Duration::from_millis(520));
///             assert_eq!(last_event_id.as_deref(), Some("s:0"));
///             // GET with `Last-Event-ID: s:0`; the server answers 200.
///             stream.on_connected(now);
///         }
///         Action::Streaming => {
///             // Read the next item before `stream.idle_deadline()`, hand the message to the
///             // application, then report it. The replay carries the final response.
///             stream.on_event(now, Event::message(Some("s:1")).final_response());
///         }
///         Action::Connecting => unreachable!("this driver reports every attempt at once"),
///         Action::Done => break Ok(()),
///         Action::GiveUp(reason) => break Err(reason),
///     }
/// };
/// assert_eq!(outcome, Ok(()));
/// assert_eq!(stream.cursor(), Some("s:1"));
/// ```
#[derive(Debug, Clone)]
pub struct Reconnect<R = SplitMix64> {
    config: ReconnectConfig,
    rng: R,
    kind: StreamKind,
    state: State,
    /// The last event id the application took; what `Last-Event-ID` carries (T79: per stream).
    cursor: Option<String>,
    /// The server's last `retry` on this stream. Kept across reconnects, like WHATWG's
    /// reconnection time, and honoured whatever protocol version was negotiated.
    retry: Option<Duration>,
    /// What stands in for `retry` until the server sends one ([`Self::with_fallback_retry`]).
    fallback_retry: Option<Duration>,
    /// Consecutive failed attempts since the last progress.
    failures: u32,
    /// When the current outage began; `None` while the stream has made progress since its
    /// last loss. The budget's elapsed time counts from here.
    outage_start: Option<Instant>,
    /// When bytes last arrived on the current connection, or when the attempt started.
    last_bytes: Instant,
    /// A POST stream lost before any id is reconnected by sending its request again.
    resend: bool,
}

impl<R: RandomSource> Reconnect<R> {
    /// A machine for a POST whose response is an SSE stream, connected at `now`.
    #[must_use]
    pub fn post_stream(config: ReconnectConfig, rng: R, now: Instant) -> Self {
        Self::with_state(
            config,
            rng,
            StreamKind::Post,
            State::Streaming { since: now },
            None,
            None,
            now,
        )
    }

    /// A machine for the standalone GET stream, not yet open: the first poll says
    /// `Connect { last_event_id: None }`.
    #[must_use]
    pub fn standalone(config: ReconnectConfig, rng: R, now: Instant) -> Self {
        Self::with_state(
            config,
            rng,
            StreamKind::Standalone,
            State::Waiting { until: now },
            None,
            Some(now),
            now,
        )
    }

    /// A machine for a request not yet sent that may be sent again after a loss: a
    /// 2026-07-28 request, a `tasks/stream` read, a listen stream, a POST refused for now
    /// (429, 503). The first poll says `Connect { last_event_id: None }`; after a loss the
    /// request goes out again ([`resend_before_first_id`](Self::resend_before_first_id)),
    /// with the cursor if an event id was reported meanwhile (a task stream's last seq).
    ///
    /// Both eras share the timing rules: the first attempt after a loss waits exactly the
    /// server's `retry` (else the [fallback](Self::with_fallback_retry), else the first
    /// backoff step), and the backoff grows only over attempts that made no progress.
    #[must_use]
    pub fn request(config: ReconnectConfig, rng: R, now: Instant) -> Self {
        Self::with_state(
            config,
            rng,
            StreamKind::Post,
            State::Waiting { until: now },
            None,
            Some(now),
            now,
        )
        .resend_before_first_id()
    }

    /// The wait to use in place of the server's `retry` while the server has sent none: a
    /// task's `pollIntervalMs`, which is the server's advice on how often to come back for
    /// that task. A `retry` the server sends takes precedence.
    #[must_use]
    pub fn with_fallback_retry(mut self, wait: Duration) -> Self {
        self.fallback_retry = Some(wait);
        self
    }

    /// A machine resuming a stream from a persisted cursor (a resumption token, e.g. after the
    /// process restarted): the first poll says `Connect` with that id. An empty id means there
    /// is nothing to resume from (T87): a POST stream then gives up as not resumable and the
    /// standalone stream opens afresh.
    #[must_use]
    pub fn resume(
        kind: StreamKind,
        last_event_id: &str,
        config: ReconnectConfig,
        rng: R,
        now: Instant,
    ) -> Self {
        let cursor = (!last_event_id.is_empty()).then(|| last_event_id.to_owned());
        Self::with_state(
            config,
            rng,
            kind,
            State::Waiting { until: now },
            cursor,
            Some(now),
            now,
        )
    }

    fn with_state(
        config: ReconnectConfig,
        rng: R,
        kind: StreamKind,
        state: State,
        cursor: Option<String>,
        outage_start: Option<Instant>,
        now: Instant,
    ) -> Self {
        Self {
            config,
            rng,
            kind,
            state,
            cursor,
            retry: None,
            fallback_retry: None,
            failures: 0,
            outage_start,
            last_bytes: now,
            resend: false,
        }
    }

    /// Lets this POST stream, when it is lost before any event id was seen on it, be
    /// reconnected by sending its request again (`Connect { last_event_id: None }`) instead
    /// of giving up as [`GiveUpReason::NotResumable`]. Only for servers known to answer a
    /// request sent again (same id, same content) with the stream already answering it, from
    /// its start, rather than running it twice: tether's server does. Backoff, `retry` and the
    /// budget apply as for any reconnect.
    #[must_use]
    pub fn resend_before_first_id(mut self) -> Self {
        self.resend = true;
        self
    }

    /// Nothing identifies this stream to the server yet, and its request may not be sent
    /// again: a loss now is the end of it.
    fn unresumable(&self) -> bool {
        self.kind == StreamKind::Post && self.cursor.is_none() && !self.resend
    }

    /// What to do next. Call after every input and whenever a `Wait` deadline passes.
    ///
    /// Returns `Connect` at most once per attempt: the attempt counts as outstanding from that
    /// return until the driver reports its outcome, and meanwhile `poll` says `Connecting`.
    pub fn poll(&mut self, now: Instant) -> Action {
        match &self.state {
            State::Waiting { until } if now < *until => Action::Wait { until: *until },
            State::Waiting { .. } => {
                // Only reachable if the server cleared the cursor (`id:` empty) after the
                // loss was scheduled: a GET without `Last-Event-ID` would open the standalone
                // stream, not resume this POST stream.
                if self.unresumable() {
                    return self.give_up(GiveUpReason::NotResumable);
                }
                self.state = State::Connecting;
                self.last_bytes = now;
                Action::Connect {
                    last_event_id: self.cursor.clone(),
                }
            }
            State::Connecting => Action::Connecting,
            State::Streaming { .. } => Action::Streaming,
            State::Done => Action::Done,
            State::GaveUp(reason) => Action::GiveUp(reason.clone()),
        }
    }

    /// The outstanding attempt was answered `200 text/event-stream`: the stream is live.
    /// Ignored unless an attempt is outstanding.
    pub fn on_connected(&mut self, now: Instant) {
        if self.state == State::Connecting {
            self.state = State::Streaming { since: now };
            self.last_bytes = now;
        }
    }

    /// Bytes arrived that completed no event: a keep-alive comment, part of an event. Moves
    /// the idle deadline; not progress.
    pub fn on_bytes(&mut self, now: Instant) {
        if matches!(self.state, State::Connecting | State::Streaming { .. }) {
            self.last_bytes = self.last_bytes.max(now);
        }
    }

    /// The decoder produced an event (or an id or `retry` change) and the application has
    /// taken its message. Records the cursor and `retry`; a new id or a message is progress;
    /// the final response of a POST stream finishes it.
    pub fn on_event(&mut self, now: Instant, event: Event<'_>) {
        if self.is_terminal() {
            return;
        }
        if let Some(retry) = event.retry {
            self.retry = Some(retry);
        }
        let mut progress = event.message;
        match event.id {
            // T112: an explicit empty id clears the cursor. Not progress: nothing new arrived.
            Some("") => self.cursor = None,
            // A replayed or repeated id is not progress either.
            Some(id) if self.cursor.as_deref() != Some(id) => {
                self.cursor = Some(id.to_owned());
                progress = true;
            }
            Some(_) | None => {}
        }
        if event.is_final && self.kind == StreamKind::Post {
            self.state = State::Done;
            return;
        }
        // Liveness and progress belong to a live connection; an event reported in another
        // state is a late report from a connection already counted as lost.
        if matches!(self.state, State::Streaming { .. }) {
            self.last_bytes = self.last_bytes.max(now);
            if progress {
                self.made_progress();
            }
        }
    }

    /// The caller needs nothing more from this stream (all responses of a batch arrived, or
    /// it is shutting the stream down): finish without reconnecting.
    pub fn on_complete(&mut self) {
        if !self.is_terminal() {
            self.state = State::Done;
        }
    }

    /// The outstanding attempt failed, or the live stream ended. Ignored in other states.
    pub fn on_failure(&mut self, now: Instant, failure: Failure) {
        let since = match self.state {
            State::Connecting => None,
            State::Streaming { since } => Some(since),
            State::Waiting { .. } | State::Done | State::GaveUp(_) => return,
        };
        match failure {
            Failure::Status { code, retry_after } => match code {
                // WHATWG: 204 tells an event source to stop reconnecting.
                204 => self.state = State::Done,
                // The session is gone (T40-T42); only a new session helps.
                404 => self.state = State::GaveUp(GiveUpReason::SessionExpired),
                // T88: the server does not serve (resume) GETs.
                405 => self.state = State::GaveUp(GiveUpReason::NotResumable),
                429 | 500..=599 => self.attempt_failed(now, retry_after),
                status => self.state = State::GaveUp(GiveUpReason::Fatal { status }),
            },
            Failure::Network | Failure::Timeout | Failure::Idle | Failure::CleanClose => {
                match since {
                    None => self.attempt_failed(now, None),
                    Some(since) => self.lost(now, since),
                }
            }
        }
    }

    /// When the driver should report [`Failure::Idle`] if nothing arrives: `idle_timeout`
    /// after the last bytes (or the start of the attempt). `None` unless an attempt is
    /// outstanding or the stream is live, or if the timeout does not fit in an `Instant`.
    #[must_use]
    pub fn idle_deadline(&self) -> Option<Instant> {
        match self.state {
            State::Connecting | State::Streaming { .. } => {
                self.last_bytes.checked_add(self.config.idle_timeout)
            }
            _ => None,
        }
    }

    /// The stream's cursor: the id `Last-Event-ID` will carry; persist it in resumption tokens.
    #[must_use]
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// The server's last `retry` on this stream.
    #[must_use]
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Consecutive failed attempts since the stream last made progress.
    #[must_use]
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Which kind of stream this machine drives.
    #[must_use]
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    fn is_terminal(&self) -> bool {
        matches!(self.state, State::Done | State::GaveUp(_))
    }

    fn give_up(&mut self, reason: GiveUpReason) -> Action {
        self.state = State::GaveUp(reason.clone());
        Action::GiveUp(reason)
    }

    fn made_progress(&mut self) {
        self.failures = 0;
        self.outage_start = None;
    }

    /// A live connection ended before the stream was finished.
    fn lost(&mut self, now: Instant, since: Instant) {
        // A connection that stayed alive long enough proved the server serves us, even if the
        // stream was quiet (see `DEFAULT_STABLE_AFTER`).
        if self.last_bytes.saturating_duration_since(since) >= self.config.stable_after {
            self.made_progress();
        }
        if self.outage_start.is_none() {
            // The first loss after progress: a fresh outage, waited out with `retry` exactly.
            self.outage_start = Some(now);
        } else {
            // Connected, but the stream went nowhere: as good as a failed connect.
            self.failures = self.failures.saturating_add(1);
        }
        self.schedule(now, None);
    }

    /// An attempt failed before the stream went live.
    fn attempt_failed(&mut self, now: Instant, retry_after: Option<Duration>) {
        self.failures = self.failures.saturating_add(1);
        self.outage_start.get_or_insert(now);
        self.schedule(now, retry_after);
    }

    /// Decide the next attempt's time, or give up.
    fn schedule(&mut self, now: Instant, retry_after: Option<Duration>) {
        // T80 and the peers' behaviour: a POST stream resumes only from an id seen on it.
        if self.unresumable() {
            self.state = State::GaveUp(GiveUpReason::NotResumable);
            return;
        }
        let outage_start = *self.outage_start.get_or_insert(now);
        let wait = self.config.backoff.delay(
            self.failures,
            self.retry.or(self.fallback_retry),
            retry_after,
            &mut self.rng,
        );
        let until = now.checked_add(wait);
        // The first reconnect after a loss is always made, whatever `retry` says; after a
        // failure, give up now rather than sleep past the budget.
        let allowed = match until {
            Some(until) => {
                self.failures == 0
                    || self
                        .config
                        .budget
                        .allows(self.failures, until.saturating_duration_since(outage_start))
            }
            // A wait that does not fit in an `Instant` is a wait forever.
            None => false,
        };
        self.state = match until {
            Some(until) if allowed => State::Waiting { until },
            _ => State::GaveUp(GiveUpReason::BudgetExhausted {
                attempts: self.failures,
                elapsed: now.saturating_duration_since(outage_start),
            }),
        };
    }
}
