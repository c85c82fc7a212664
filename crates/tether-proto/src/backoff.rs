//! How long a client waits before reconnecting a stream, and when it stops trying.
//!
//! This module owns the timing arithmetic of docs/CONTRACTS.md#client-reconnect-timing: capped
//! exponential backoff with full jitter ([`BackoffConfig`]), the server's `retry` honoured
//! exactly on the first reconnect after a loss and as a floor afterwards
//! ([`BackoffConfig::delay`]), `Retry-After` as a floor ([`parse_retry_after`]), and the limit
//! on a run of failures ([`Budget`]). Randomness is injected through [`RandomSource`];
//! [`SplitMix64`] is a small seeded generator for tests and for callers that seed it once from
//! the OS ([`SplitMix64::from_os_entropy`]). Every function here is pure in its inputs.
//!
//! It does not own any state about a stream (what counts as a loss, a failure or progress, the
//! cursor, which attempt is outstanding): that is [`crate::reconnect`]. It never reads a clock
//! or sleeps.

use std::time::Duration;

/// A source of uniformly distributed 64-bit values, used only to jitter backoff delays.
///
/// Injected rather than global so that tests replay exactly and the crate never touches a
/// process-wide RNG. Any `FnMut() -> u64` closure is a source, so a test can pin the jitter
/// (`|| u64::MAX` gives the largest delay, `|| 0` the smallest).
pub trait RandomSource {
    /// The next value; every value in `0..=u64::MAX` should be equally likely.
    fn next_u64(&mut self) -> u64;
}

impl<F: FnMut() -> u64> RandomSource for F {
    fn next_u64(&mut self) -> u64 {
        self()
    }
}

/// The splitmix64 generator (Steele, Lea and Flood, 2014): tiny, fast, deterministic.
///
/// Good enough for jitter, whose only job is to spread clients apart; not for anything secret.
/// Seed it from a test constant or once from the OS with [`SplitMix64::from_os_entropy`].
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the operating system's CSPRNG.
    ///
    /// Clients should use this so that many clients that lost the same server do not draw the
    /// same jitter and reconnect in lockstep (the point of jitter).
    ///
    /// # Errors
    ///
    /// [`EntropyUnavailable`] if the OS has no usable random source.
    pub fn from_os_entropy() -> Result<Self, EntropyUnavailable> {
        getrandom::u64()
            .map(Self::new)
            .map_err(|_| EntropyUnavailable)
    }
}

impl RandomSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The operating system could not provide random bytes to seed [`SplitMix64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("operating system entropy unavailable")]
pub struct EntropyUnavailable;

/// Default [`BackoffConfig::base`]: 1 s.
///
/// The Python SDK client waits 1 s when the server sent no `retry`, and the TypeScript SDK's
/// first reconnection delay is 1000 ms; WHATWG asks for "a few seconds" (T82). Matching the
/// peers keeps tether no slower to recover and no more aggressive than they are.
pub const DEFAULT_BASE: Duration = Duration::from_secs(1);

/// Default [`BackoffConfig::factor`]: 1.5, the TypeScript SDK's growth factor.
///
/// Gentler than doubling: with [`DEFAULT_BASE`] the steps reach [`DEFAULT_CAP`] after nine
/// failures instead of five, so a short outage (a restart, a rolling deploy) is retried often
/// enough to be noticed quickly when it ends.
pub const DEFAULT_FACTOR: f64 = 1.5;

/// Default [`BackoffConfig::cap`]: 30 s, the TypeScript SDK's maximum reconnection delay.
///
/// Long enough that a dead server sees at most one attempt per client every 30 s; short enough
/// that a user whose server came back waits at most that long.
pub const DEFAULT_CAP: Duration = Duration::from_secs(30);

/// Exponential backoff with full jitter and a cap.
///
/// Step `n` is `min(cap, base × factor^n)`, computed with saturation (an overflowing product
/// is the cap). The jittered delay for step `n` is uniform in `[0, step(n)]` ("full jitter",
/// as in the AWS architecture blog's "Exponential Backoff and Jitter"), which spreads clients
/// that failed together across the whole window instead of bunching them at its edge.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// The first step: the wait before the first reconnect after a loss when the server sent
    /// no `retry`, and the unit the later steps grow from.
    pub base: Duration,
    /// How much each step grows over the previous one. Values below 1.0 (and NaN) are treated
    /// as 1.0, i.e. a constant step: backoff never shrinks.
    pub factor: f64,
    /// The largest step. Server-given floors (`retry`, `Retry-After`) can exceed it: the cap
    /// bounds our own growth, not what the server asked for.
    pub cap: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            base: DEFAULT_BASE,
            factor: DEFAULT_FACTOR,
            cap: DEFAULT_CAP,
        }
    }
}

impl BackoffConfig {
    /// Steps from `base`, growing by `factor`, never above `cap`.
    #[must_use]
    pub const fn new(base: Duration, factor: f64, cap: Duration) -> Self {
        Self { base, factor, cap }
    }

    /// The un-jittered step for `attempt` (0-based): `min(cap, base × factor^attempt)`.
    ///
    /// Never panics; non-decreasing in `attempt`; never above `cap`.
    #[must_use]
    pub fn step(&self, attempt: u32) -> Duration {
        // NaN fails `>=`, so it also becomes 1.0.
        let factor = if self.factor >= 1.0 { self.factor } else { 1.0 };
        let exponent = i32::try_from(attempt).unwrap_or(i32::MAX);
        let secs = self.base.as_secs_f64() * factor.powi(exponent);
        // An infinite or out-of-range product saturates to the cap; so does `base > cap`.
        match Duration::try_from_secs_f64(secs) {
            Ok(step) => step.min(self.cap),
            Err(_) => self.cap,
        }
    }

    /// A delay drawn uniformly from `[0, step(attempt)]` (full jitter).
    #[must_use]
    pub fn jittered(&self, attempt: u32, rng: &mut impl RandomSource) -> Duration {
        uniform_up_to(self.step(attempt), rng.next_u64())
    }

    /// The wait before the next connection attempt, exactly as
    /// docs/CONTRACTS.md#client-reconnect-timing pins it.
    ///
    /// - `failures == 0` (the first reconnect after a loss): exactly `retry` if the server sent
    ///   one (T81), else exactly [`step(0)`](Self::step), un-jittered. WHATWG's model is a fixed
    ///   "reconnection time" before the first retry and the peers (Python: 1 s, TypeScript:
    ///   1000 ms) do the same; jitter would only make the first, most likely successful,
    ///   reconnect later.
    /// - `failures >= 1` (the previous attempt failed): `max(retry, jittered(failures))`: the
    ///   server's `retry` stays a floor and our own backoff grows on top of it.
    /// - `retry_after` (from a 429 or 503) is a floor for the result either way.
    ///
    /// Draws from `rng` only when `failures >= 1`.
    #[must_use]
    pub fn delay(
        &self,
        failures: u32,
        retry: Option<Duration>,
        retry_after: Option<Duration>,
        rng: &mut impl RandomSource,
    ) -> Duration {
        let wait = if failures == 0 {
            retry.unwrap_or_else(|| self.step(0))
        } else {
            self.jittered(failures, rng)
                .max(retry.unwrap_or(Duration::ZERO))
        };
        wait.max(retry_after.unwrap_or(Duration::ZERO))
    }
}

/// A value uniform in `[0, max]` (inclusive) from one random `u64`.
///
/// Multiply-shift (Lemire) on nanoseconds: `r × (n + 1) / 2^64` maps the 2^64 inputs onto
/// `0..=n`, each value getting within one input of its fair share: a relative bias below
/// `(n + 1) / 2^64`, about 2^-29 for a 30 s step. No division, no rejection loop.
fn uniform_up_to(max: Duration, r: u64) -> Duration {
    // Saturate absurd caps to u64 nanoseconds (~584 years); nobody waits that long.
    let n = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    let scaled = (u128::from(r) * (u128::from(n) + 1)) >> 64;
    // `scaled <= n`, so it fits in u64.
    Duration::from_nanos(u64::try_from(scaled).unwrap_or(n))
}

/// Parse an HTTP `Retry-After` value (RFC 9110 §10.2.3) into a floor for the next wait.
///
/// Accepts `delay-seconds` (`1*DIGIT`, surrounding whitespace tolerated); a number too large
/// for `u64` saturates rather than being dropped, since the server clearly meant "a long time".
/// The `HTTP-date` form and anything malformed give `None`, i.e. no floor: this crate has no
/// wall clock to subtract the date from, and falling back to our own backoff is safe because
/// the backoff still applies. tether's server always sends `delay-seconds`.
#[must_use]
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let digits = value.trim_matches([' ', '\t']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All ASCII digits, so the only possible parse error is overflow.
    let secs = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(secs))
}

/// Default [`Budget::max_attempts`]: 20 consecutive failed attempts.
///
/// With the default backoff the un-jittered steps add up to about 400 s over 20 attempts, the
/// same order as [`DEFAULT_MAX_ELAPSED`], so normally the time limit decides. The count only
/// bites when waits are short (a small `retry`, jitter drawn near zero, a server that accepts
/// and closes at once) and stops such a loop after a bounded number of connections. The
/// peers give up after 2 failed attempts, which does not survive a server restart.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 20;

/// Default [`Budget::max_elapsed`]: 5 minutes since the outage began.
///
/// Long enough to ride out a process restart or a rolling deploy (tens of seconds to a couple
/// of minutes); short enough that a call to a server that is really gone fails with an error
/// the user sees instead of hanging. It also matches the 300 s after which the Python client
/// and undici give up on a silent stream.
pub const DEFAULT_MAX_ELAPSED: Duration = Duration::from_secs(300);

/// When to stop retrying: after too many consecutive failed attempts or too long an outage.
///
/// Both limits count from the last progress the stream made, never from a mere successful
/// connect; see [`crate::reconnect`] for what counts as progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Give up once this many consecutive attempts have failed (0: give up at the first).
    pub max_attempts: u32,
    /// Give up rather than start an attempt later than this after the outage began.
    pub max_elapsed: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_elapsed: DEFAULT_MAX_ELAPSED,
        }
    }
}

impl Budget {
    /// Whether another attempt may be made after `failures` consecutive failures, starting
    /// `elapsed` after the outage began.
    #[must_use]
    pub fn allows(&self, failures: u32, elapsed: Duration) -> bool {
        failures < self.max_attempts && elapsed <= self.max_elapsed
    }
}
