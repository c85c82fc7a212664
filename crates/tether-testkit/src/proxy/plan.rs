//! What faults the proxy injects ([`FaultPlan`]) and the seeded draw that decides, per
//! connection, which of them that connection gets ([`Decider`]).
//!
//! It owns the plan's shape, its validation, the fault budgets (`max`) and the order of random
//! draws, which is what makes a seed replay the same faults. It does not own sockets, clocks or
//! counters: the forwarder carries out an [`Assignment`] and reports back whether it fired.

use std::time::Duration;

use tether_proto::backoff::{RandomSource, SplitMix64};

use super::{FaultKind, ProxyError};

/// A fault that fires once a connection has sent a number of bytes to the client: a cut, a
/// reset or a stall.
#[derive(Debug, Clone, PartialEq)]
pub struct ByteFault {
    /// Server→client bytes the client receives before the fault.
    pub after_bytes: u64,
    /// Each connection's offset is drawn uniformly from `after_bytes ± jitter` (floored at 0).
    pub jitter: u64,
    /// The chance that a connection drawn for this fault gets it, in `0.0..=1.0`.
    pub probability: f64,
    /// At most this many injections in total (per plan); then connections pass untouched.
    pub max: Option<u32>,
}

impl ByteFault {
    /// Fires on every connection after exactly `bytes` bytes, with no limit.
    #[must_use]
    pub const fn after(bytes: u64) -> Self {
        Self {
            after_bytes: bytes,
            jitter: 0,
            probability: 1.0,
            max: None,
        }
    }

    /// Spreads the offset over `after_bytes ± jitter`.
    #[must_use]
    pub const fn with_jitter(mut self, jitter: u64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Applies the fault to a connection with this probability.
    #[must_use]
    pub const fn with_probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// Injects the fault at most `max` times.
    #[must_use]
    pub const fn at_most(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }
}

/// Slows the server→client direction of a connection to a byte rate.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowFault {
    /// The rate, in bytes per second; at least 1.
    pub bytes_per_sec: u64,
    /// The chance that a connection is slowed, in `0.0..=1.0`.
    pub probability: f64,
    /// At most this many connections slowed in total (per plan).
    pub max: Option<u32>,
}

impl SlowFault {
    /// Slows every connection to `bytes_per_sec`.
    #[must_use]
    pub const fn rate(bytes_per_sec: u64) -> Self {
        Self {
            bytes_per_sec,
            probability: 1.0,
            max: None,
        }
    }

    /// Slows a connection with this probability.
    #[must_use]
    pub const fn with_probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// Slows at most `max` connections.
    #[must_use]
    pub const fn at_most(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }
}

/// Cuts a connection inside an SSE event, so that the client holds a partial event it must
/// discard.
///
/// After `after_events` complete events (blocks with a field, ended by a blank line; comment
/// blocks such as keep-alives do not count), the client gets the next event up to the middle
/// of its first `data` line (or all but its blank line if it has none), then a clean close.
/// Works on bare SSE and on HTTP/1.1 responses (only `text/event-stream` bodies are read; the
/// count runs on across keep-alive responses).
#[derive(Debug, Clone, PartialEq)]
pub struct TruncateFault {
    /// Complete events the client receives before the partial one.
    pub after_events: u64,
    /// Each connection's count is drawn from `after_events ± jitter` (floored at 0).
    pub jitter: u64,
    /// The chance that a connection drawn for truncation gets it, in `0.0..=1.0`.
    pub probability: f64,
    /// At most this many truncations in total (per plan).
    pub max: Option<u32>,
}

impl TruncateFault {
    /// Truncates every connection after `events` complete events.
    #[must_use]
    pub const fn after_events(events: u64) -> Self {
        Self {
            after_events: events,
            jitter: 0,
            probability: 1.0,
            max: None,
        }
    }

    /// Spreads the event count over `after_events ± jitter`.
    #[must_use]
    pub const fn with_jitter(mut self, jitter: u64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Truncates a connection with this probability.
    #[must_use]
    pub const fn with_probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// Truncates at most `max` connections.
    #[must_use]
    pub const fn at_most(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }
}

/// The faults the proxy injects into new connections. The default passes everything through.
///
/// Per connection, in accept order and with the proxy's seeded generator:
/// 1. if `slow` is set (and its budget lasts), one draw decides whether the connection is slowed;
/// 2. among `cut`, `reset`, `stall` and `truncate` (in that order) that are set and have budget
///    left, one draw picks a kind uniformly, one draw applies its probability, and one draw
///    places its offset within the jitter.
///
/// So a connection gets at most one of the four ending faults, and may also be slow. Refusals
/// are not part of the plan: they are switched on at run time ([`super::FaultProxy::refuse_for`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    /// Close both sides cleanly (FIN) once the client has received the offset's bytes.
    pub cut: Option<ByteFault>,
    /// Abort the client socket (RST, `SO_LINGER` 0) once the client has received the offset's
    /// bytes.
    pub reset: Option<ByteFault>,
    /// Stop forwarding both ways, sockets left open, once the client has received the
    /// offset's bytes.
    pub stall: Option<ByteFault>,
    /// How long a stalled connection is held before the proxy closes it (FIN); `None` holds it
    /// until the proxy shuts down. Bytes never resume either way.
    pub stall_for: Option<Duration>,
    /// Pace server→client bytes.
    pub slow: Option<SlowFault>,
    /// Cut in the middle of an SSE event.
    pub truncate: Option<TruncateFault>,
}

impl FaultPlan {
    /// No faults: every byte passes, as fast as the peers go.
    #[must_use]
    pub fn pass_through() -> Self {
        Self::default()
    }

    /// Cuts every connection after `bytes` bytes.
    #[must_use]
    pub fn cut_after(bytes: u64) -> Self {
        Self::default().with_cut(ByteFault::after(bytes))
    }

    /// Adds a cut.
    #[must_use]
    pub fn with_cut(mut self, fault: ByteFault) -> Self {
        self.cut = Some(fault);
        self
    }

    /// Adds a reset.
    #[must_use]
    pub fn with_reset(mut self, fault: ByteFault) -> Self {
        self.reset = Some(fault);
        self
    }

    /// Adds a stall, held for `hold` (or until shutdown if `None`).
    #[must_use]
    pub fn with_stall(mut self, fault: ByteFault, hold: Option<Duration>) -> Self {
        self.stall = Some(fault);
        self.stall_for = hold;
        self
    }

    /// Adds slowness.
    #[must_use]
    pub fn with_slow(mut self, fault: SlowFault) -> Self {
        self.slow = Some(fault);
        self
    }

    /// Adds truncation inside an SSE event.
    #[must_use]
    pub fn with_truncate(mut self, fault: TruncateFault) -> Self {
        self.truncate = Some(fault);
        self
    }

    /// Checks probabilities and rates.
    ///
    /// # Errors
    ///
    /// [`ProxyError::InvalidPlan`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ProxyError> {
        let probabilities = [
            ("cut", self.cut.as_ref().map(|f| f.probability)),
            ("reset", self.reset.as_ref().map(|f| f.probability)),
            ("stall", self.stall.as_ref().map(|f| f.probability)),
            ("slow", self.slow.as_ref().map(|f| f.probability)),
            ("truncate", self.truncate.as_ref().map(|f| f.probability)),
        ];
        for (name, p) in probabilities {
            if let Some(p) = p
                && !(0.0..=1.0).contains(&p)
            {
                return Err(ProxyError::InvalidPlan(format!(
                    "{name} probability {p} is not within 0..=1"
                )));
            }
        }
        if self.slow.as_ref().is_some_and(|s| s.bytes_per_sec == 0) {
            return Err(ProxyError::InvalidPlan(
                "slow rate must be at least 1 byte/s".into(),
            ));
        }
        Ok(())
    }
}

/// The fault that ends a connection, with its resolved offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    Cut { at: u64 },
    Reset { at: u64 },
    Stall { at: u64, hold: Option<Duration> },
    Truncate { after_events: u64 },
}

impl Ending {
    pub(super) fn kind(self) -> FaultKind {
        match self {
            Self::Cut { .. } => FaultKind::Cut,
            Self::Reset { .. } => FaultKind::Reset,
            Self::Stall { .. } => FaultKind::Stall,
            Self::Truncate { .. } => FaultKind::Truncate,
        }
    }
}

/// What one connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Assignment {
    /// Server→client rate in bytes/s.
    pub(super) slow: Option<u64>,
    pub(super) ending: Option<Ending>,
    /// The plan generation the budget was reserved from (see [`Decider::release`]).
    pub(super) generation: u64,
}

/// The plan in force, its remaining budgets and the seeded generator.
#[derive(Debug)]
pub(super) struct Decider {
    plan: FaultPlan,
    rng: SplitMix64,
    /// Bumped by every new plan, so that a reservation made under an old plan is not returned
    /// to the new plan's budget.
    generation: u64,
    /// Remaining injections per kind, `None` for unlimited; indexed by [`budget_index`].
    remaining: [Option<u32>; 5],
}

fn budget_index(kind: FaultKind) -> usize {
    match kind {
        FaultKind::Cut => 0,
        FaultKind::Reset => 1,
        FaultKind::Stall => 2,
        FaultKind::Slow => 3,
        // Refusals have no budget; they are never drawn.
        FaultKind::Truncate | FaultKind::Refuse => 4,
    }
}

/// A uniform draw in `[0, 1)` from the top 53 bits.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// `base ± jitter`, uniformly, floored at 0.
fn jittered(rng: &mut SplitMix64, base: u64, jitter: u64) -> u64 {
    let draw = rng.next_u64();
    if jitter == 0 {
        return base;
    }
    let span = jitter.saturating_mul(2).saturating_add(1);
    base.saturating_add(draw % span).saturating_sub(jitter)
}

impl Decider {
    pub(super) fn new(plan: FaultPlan, seed: u64) -> Self {
        let mut decider = Self {
            plan: FaultPlan::default(),
            rng: SplitMix64::new(seed),
            generation: 0,
            remaining: [None; 5],
        };
        decider.set_plan(plan);
        decider
    }

    pub(super) fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// Replaces the plan and its budgets; the generator runs on (it is not reseeded).
    pub(super) fn set_plan(&mut self, plan: FaultPlan) {
        self.generation += 1;
        self.remaining = [
            plan.cut.as_ref().and_then(|f| f.max),
            plan.reset.as_ref().and_then(|f| f.max),
            plan.stall.as_ref().and_then(|f| f.max),
            plan.slow.as_ref().and_then(|f| f.max),
            plan.truncate.as_ref().and_then(|f| f.max),
        ];
        self.plan = plan;
    }

    fn has_budget(&self, kind: FaultKind) -> bool {
        self.remaining[budget_index(kind)] != Some(0)
    }

    fn reserve(&mut self, kind: FaultKind) {
        if let Some(n) = &mut self.remaining[budget_index(kind)] {
            *n -= 1;
        }
    }

    /// Gives back the budget of a fault that was assigned but never fired (the connection
    /// ended first), so that `max` counts injections, not assignments.
    pub(super) fn release(&mut self, kind: FaultKind, generation: u64) {
        if generation == self.generation
            && let Some(n) = &mut self.remaining[budget_index(kind)]
        {
            *n += 1;
        }
    }

    /// Draws the faults of the next connection (see [`FaultPlan`] for the order of draws).
    pub(super) fn assign(&mut self) -> Assignment {
        let mut out = Assignment {
            generation: self.generation,
            ..Assignment::default()
        };
        if let Some(slow) = &self.plan.slow {
            let (rate, p) = (slow.bytes_per_sec, slow.probability);
            let hit = unit(&mut self.rng) < p;
            if hit && self.has_budget(FaultKind::Slow) {
                self.reserve(FaultKind::Slow);
                out.slow = Some(rate);
            }
        }
        let candidates: Vec<FaultKind> = [
            (FaultKind::Cut, self.plan.cut.is_some()),
            (FaultKind::Reset, self.plan.reset.is_some()),
            (FaultKind::Stall, self.plan.stall.is_some()),
            (FaultKind::Truncate, self.plan.truncate.is_some()),
        ]
        .into_iter()
        .filter(|&(kind, set)| set && self.has_budget(kind))
        .map(|(kind, _)| kind)
        .collect();
        if candidates.is_empty() {
            return out;
        }
        let kind = candidates[(self.rng.next_u64() % candidates.len() as u64) as usize];
        let roll = unit(&mut self.rng);
        let (probability, base, jitter) = match kind {
            FaultKind::Cut | FaultKind::Reset | FaultKind::Stall => {
                let f = match kind {
                    FaultKind::Cut => &self.plan.cut,
                    FaultKind::Reset => &self.plan.reset,
                    _ => &self.plan.stall,
                };
                let f = f.as_ref().expect("candidate kinds are set");
                (f.probability, f.after_bytes, f.jitter)
            }
            _ => {
                let f = self
                    .plan
                    .truncate
                    .as_ref()
                    .expect("candidate kinds are set");
                (f.probability, f.after_events, f.jitter)
            }
        };
        // Drawn even on a miss, so that one connection's outcome does not shift the draws of
        // the next.
        let at = jittered(&mut self.rng, base, jitter);
        if roll >= probability {
            return out;
        }
        self.reserve(kind);
        out.ending = Some(match kind {
            FaultKind::Cut => Ending::Cut { at },
            FaultKind::Reset => Ending::Reset { at },
            FaultKind::Stall => Ending::Stall {
                at,
                hold: self.plan.stall_for,
            },
            _ => Ending::Truncate { after_events: at },
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_assignments() {
        let plan = FaultPlan::default()
            .with_cut(
                ByteFault::after(1000)
                    .with_jitter(100)
                    .with_probability(0.5),
            )
            .with_reset(ByteFault::after(10))
            .with_slow(SlowFault::rate(100).with_probability(0.3));
        let draw = |seed| {
            let mut d = Decider::new(plan.clone(), seed);
            (0..50).map(|_| d.assign()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn budget_counts_injections_not_assignments() {
        let mut d = Decider::new(
            FaultPlan::default().with_cut(ByteFault::after(5).at_most(1)),
            1,
        );
        let first = d.assign();
        assert!(first.ending.is_some());
        assert_eq!(d.assign().ending, None);
        d.release(FaultKind::Cut, first.generation);
        assert!(d.assign().ending.is_some());
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut rng = SplitMix64::new(3);
        for _ in 0..1000 {
            let v = jittered(&mut rng, 100, 10);
            assert!((90..=110).contains(&v), "{v}");
            assert!(jittered(&mut rng, 3, 10) <= 13);
        }
    }
}
