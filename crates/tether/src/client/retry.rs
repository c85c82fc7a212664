//! One retry policy for everything the client sends again, in both eras.
//!
//! [`Attempts`] drives a [`Reconnect`] machine (`tether-proto`) for a request rather than a
//! stream: a POST refused for now (429, 503) in a legacy session, a 2026-07-28 request (the
//! `server/discover` probe, a request safe to repeat, one whose connection was never made), a
//! listen stream reopened after a cut, and a task stream read again after the last seq it
//! delivered. So the timing of docs/CONTRACTS.md#client-reconnect-timing holds for all of them
//! exactly as for a legacy stream: the first attempt after a loss waits the server's `retry`
//! (every 2026-07-28 SSE response of tether's opens with one), else a task's `pollIntervalMs`,
//! else the first backoff step; only attempts that brought nothing grow the backoff and spend
//! the budget; `Retry-After` is a floor.
//!
//! It owns the waiting and the translation of the machine's verdict into an [`Error`]; what
//! counts as a loss, and whether a request may be sent again at all, is its caller's.

use std::time::{Duration, Instant};

use tether_proto::backoff::SplitMix64;
use tether_proto::reconnect::{Action, Event, Failure, GiveUpReason, Reconnect, ReconnectConfig};

use super::error::Error;

/// A jitter source for one machine, seeded from the operating system so that clients that
/// lost the same server do not reconnect in lockstep.
pub(super) fn rng() -> SplitMix64 {
    SplitMix64::from_os_entropy().unwrap_or_else(|_| {
        // Jitter only spreads reconnects; a clock-derived seed is good enough for that.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        SplitMix64::new(u64::from(nanos))
    })
}

/// The attempts of one request (module docs).
pub(super) struct Attempts {
    machine: Reconnect<SplitMix64>,
    /// The failure that ended the last attempt, returned when the machine stops for a reason
    /// that says less than it (a refusal it does not retry).
    last: Option<Error>,
}

impl Attempts {
    /// A request about to be sent, that may be sent again; `fallback` is waited in place of
    /// a `retry` its answers do not carry (the server's last one, a task's `pollIntervalMs`).
    pub(super) fn request(config: ReconnectConfig, fallback: Option<Duration>) -> Self {
        let mut machine = Reconnect::request(config, rng(), Instant::now());
        if let Some(fallback) = fallback {
            machine = machine.with_fallback_retry(fallback);
        }
        Self {
            machine,
            last: None,
        }
    }

    /// A task stream about to be read after `after` (`None`: from its start), with
    /// `fallback` as in [`request`](Self::request).
    pub(super) fn task_stream(
        config: ReconnectConfig,
        after: Option<u64>,
        fallback: Option<Duration>,
    ) -> Self {
        let mut attempts = Self::request(config, fallback);
        if let Some(after) = after {
            // Reported before the first attempt: the cursor it starts from.
            attempts
                .machine
                .on_event(Instant::now(), Event::priming(&after.to_string()));
        }
        attempts
    }

    /// Waits until the next attempt may start and returns the cursor it carries (a task
    /// stream's last seq), or the error that ends the attempts.
    pub(super) async fn next(&mut self) -> Result<Option<u64>, Error> {
        loop {
            match self.machine.poll(Instant::now()) {
                Action::Wait { until } => tokio::time::sleep_until(until.into()).await,
                Action::Connect { last_event_id } => {
                    return Ok(last_event_id.and_then(|id| id.parse().ok()));
                }
                // Every attempt's outcome is reported before `next` is called again; one that
                // was not is taken as lost.
                Action::Connecting | Action::Streaming => {
                    self.machine.on_failure(Instant::now(), Failure::Network);
                }
                Action::Done => return Err(self.last.take().unwrap_or(Error::Closed)),
                Action::GiveUp(GiveUpReason::BudgetExhausted { attempts, elapsed }) => {
                    return Err(Error::BudgetExhausted { attempts, elapsed });
                }
                Action::GiveUp(reason) => {
                    return Err(self
                        .last
                        .take()
                        .unwrap_or_else(|| Error::Protocol(reason.to_string())));
                }
            }
        }
    }

    /// The attempt was answered (a 200, JSON or an event stream).
    pub(super) fn connected(&mut self) {
        self.machine.on_connected(Instant::now());
    }

    /// The answer carried the server's `retry`.
    pub(super) fn retry(&mut self, retry: Duration) {
        self.machine
            .on_event(Instant::now(), Event::default().with_retry(retry));
    }

    /// Something was delivered on the answer: a message, with the seq that is now the
    /// cursor for a task stream. Progress: the next loss is waited out with `retry` again.
    pub(super) fn delivered(&mut self, seq: Option<u64>) {
        let id = seq.map(|seq| seq.to_string());
        self.machine
            .on_event(Instant::now(), Event::message(id.as_deref()));
    }

    /// The attempt failed or its answer ended before it was complete.
    pub(super) fn lost(&mut self, error: Error) {
        let failure = match error {
            Error::Timeout => Failure::Timeout,
            _ => Failure::Network,
        };
        self.last = Some(error);
        self.machine.on_failure(Instant::now(), failure);
    }

    /// The server refused the attempt for now (429, 503) without acting on it.
    pub(super) fn refused(&mut self, error: Error, status: u16, retry_after: Option<Duration>) {
        self.last = Some(error);
        self.machine.on_failure(
            Instant::now(),
            Failure::Status {
                code: status,
                retry_after,
            },
        );
    }

    /// Consecutive attempts without progress so far.
    pub(super) fn failures(&self) -> u32 {
        self.machine.failures()
    }
}
