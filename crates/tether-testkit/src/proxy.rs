//! A loopback TCP proxy that injects faults between a client and a server, under a seed, and
//! counts exactly what it did, so that a resume test can prove it saw the disconnects it claims
//! to survive.
//!
//! [`FaultProxy::start`] listens on `127.0.0.1:0` and forwards each connection to one upstream
//! address. Per connection it may cut (FIN), reset (RST), stall (stop forwarding, sockets left
//! open), slow the server→client direction, or truncate inside an SSE event; at run time it can
//! refuse new connections for a while. Which connection gets which fault, and at which offset,
//! comes from a [`FaultPlan`] and a seeded generator; the seed comes from `TETHER_TEST_SEED`
//! when set, is printed to stderr at start, and [`FaultProxy::fault_log`] records every
//! injection with its byte offset, so a failing run can be replayed.
//!
//! It owns the bytes in flight and nothing above them: it does not speak HTTP except to find
//! SSE event boundaries for truncation (`scan`), never rewrites a byte, and never talks to a
//! non-loopback address (both addresses are checked; anything else is an error). Every task it
//! starts stops on [`FaultProxy::shutdown`] or drop, and every buffer is bounded.
//!
//! Counters are updated before the client can observe the end of its connection (the FIN or
//! RST, or the stall), so a test that has seen its connection end can assert on them at once.

mod conn;
mod plan;
mod scan;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tether_proto::backoff::{RandomSource, SplitMix64};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};

pub use plan::{ByteFault, FaultPlan, SlowFault, TruncateFault};

use plan::{Assignment, Decider};

/// The environment variable that fixes the seed of every fault proxy in a test run.
pub const SEED_ENV: &str = "TETHER_TEST_SEED";

/// The size of each forwarding buffer (one per direction per connection): enough for a burst
/// of SSE frames per read, small enough that a thousand connections stay in a few tens of MiB.
const READ_BUF: usize = 16 * 1024;

/// The most server→client bytes held back while looking for the middle of an SSE line to cut.
/// A longer line is cut in the middle of what is held, so a giant line cannot grow the buffer.
const HOLD_LIMIT: usize = 64 * 1024;

/// How long the proxy waits to connect upstream before resetting the client; a loopback server
/// that does not accept in this time is not coming.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a clean close waits for the client to close its side, reading and discarding what
/// it sends: closing a socket with unread input sends RST instead of FIN, which would turn a
/// cut into a reset.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// The longest fault log kept; later entries are counted but dropped, so a long soak with
/// faults on every connection does not grow memory without bound.
const MAX_FAULT_LOG: usize = 100_000;

/// How long the accept loop pauses after an accept error (such as running out of file
/// descriptors) before trying again, so it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// How long [`FaultProxy::shutdown`] waits for the accept loop and connections to stop.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The kind of an injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// Both sides closed cleanly (FIN) after the offset.
    Cut,
    /// The client socket aborted (RST) after the offset.
    Reset,
    /// Forwarding stopped both ways after the offset, sockets left open.
    Stall,
    /// Server→client bytes paced to a rate.
    Slow,
    /// Cut inside an SSE event.
    Truncate,
    /// A new connection accepted and reset at once.
    Refuse,
}

impl FaultKind {
    /// Every kind, in declaration order (for reports and for tests that want each one seen).
    pub const ALL: [Self; 6] = [
        Self::Cut,
        Self::Reset,
        Self::Stall,
        Self::Slow,
        Self::Truncate,
        Self::Refuse,
    ];

    /// The lower-case name used in logs and JSON.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cut => "cut",
            Self::Reset => "reset",
            Self::Stall => "stall",
            Self::Slow => "slow",
            Self::Truncate => "truncate",
            Self::Refuse => "refuse",
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultEvent {
    /// The connection, numbered from 1 in accept order (refused connections included).
    pub conn: u64,
    /// What was injected.
    pub kind: FaultKind,
    /// Server→client bytes the client had received when the fault took effect (0 for slow and
    /// refuse, which act from the start, and for cuts asked for by
    /// [`FaultProxy::cut_open_connections`], which happen at no planned offset).
    pub at_byte: u64,
    /// For [`FaultKind::Slow`] the rate in bytes/s; for [`FaultKind::Truncate`] the complete
    /// events before the partial one; otherwise 0.
    pub detail: u64,
}

impl fmt::Display for FaultEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let conn = self.conn;
        match self.kind {
            FaultKind::Slow => write!(f, "conn {conn}: slow to {} B/s", self.detail),
            FaultKind::Refuse => write!(f, "conn {conn}: refused"),
            FaultKind::Truncate => write!(
                f,
                "conn {conn}: truncate after {} events at byte {}",
                self.detail, self.at_byte
            ),
            kind => write!(f, "conn {conn}: {} at byte {}", kind.name(), self.at_byte),
        }
    }
}

/// A snapshot of what the proxy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Connections accepted and forwarded (refused ones are not included).
    pub accepted: u64,
    /// Connections refused (accepted and reset at once).
    pub refused: u64,
    /// Connections reset because the upstream could not be reached.
    pub upstream_failures: u64,
    /// Connections being forwarded (or held by a stall) right now.
    pub active: u64,
    /// Cuts injected.
    pub cuts: u64,
    /// Resets injected.
    pub resets: u64,
    /// Stalls injected.
    pub stalls: u64,
    /// Connections slowed.
    pub slowed: u64,
    /// Truncations injected.
    pub truncations: u64,
    /// Bytes written to the upstream.
    pub bytes_to_server: u64,
    /// Bytes written to clients.
    pub bytes_to_client: u64,
}

impl Counters {
    /// How many faults of `kind` were injected.
    #[must_use]
    pub const fn injected(&self, kind: FaultKind) -> u64 {
        match kind {
            FaultKind::Cut => self.cuts,
            FaultKind::Reset => self.resets,
            FaultKind::Stall => self.stalls,
            FaultKind::Slow => self.slowed,
            FaultKind::Truncate => self.truncations,
            FaultKind::Refuse => self.refused,
        }
    }

    /// Every counter with its JSON name, in a fixed order.
    #[must_use]
    pub const fn fields(&self) -> [(&'static str, u64); 11] {
        [
            ("accepted", self.accepted),
            ("refused", self.refused),
            ("upstream_failures", self.upstream_failures),
            ("active", self.active),
            ("cuts", self.cuts),
            ("resets", self.resets),
            ("stalls", self.stalls),
            ("slowed", self.slowed),
            ("truncations", self.truncations),
            ("bytes_to_server", self.bytes_to_server),
            ("bytes_to_client", self.bytes_to_client),
        ]
    }

    /// The counters as one JSON object.
    #[must_use]
    pub fn to_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}

/// Why the proxy could not start or take a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// An address is not loopback; the proxy never sends traffic anywhere else.
    #[error("{role} address {addr} is not loopback; the fault proxy only uses loopback addresses")]
    NotLoopback {
        /// `listen` or `upstream`.
        role: &'static str,
        /// The address given.
        addr: SocketAddr,
    },
    /// A probability or rate in the plan is out of range.
    #[error("invalid fault plan: {0}")]
    InvalidPlan(String),
    /// `TETHER_TEST_SEED` is set but is not a number.
    #[error("invalid {SEED_ENV} {0:?}: expected an unsigned integer")]
    InvalidSeed(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address given.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: io::Error,
    },
}

/// How to start a [`FaultProxy`].
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where to listen; default `127.0.0.1:0`. Must be loopback.
    pub listen: SocketAddr,
    /// Where to forward; must be loopback.
    pub upstream: SocketAddr,
    /// The initial plan; default pass-through.
    pub plan: FaultPlan,
    /// The seed; `None` takes `TETHER_TEST_SEED`, or a random one ([`test_seed`]).
    pub seed: Option<u64>,
}

impl ProxyConfig {
    /// Listen on `127.0.0.1:0`, forward to `upstream`, no faults, seed from the environment.
    #[must_use]
    pub fn new(upstream: SocketAddr) -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            upstream,
            plan: FaultPlan::default(),
            seed: None,
        }
    }
}

/// The seed for this test run: `TETHER_TEST_SEED` (decimal, or hex with `0x`) when set and not
/// empty, otherwise a fresh random one.
///
/// # Errors
///
/// [`ProxyError::InvalidSeed`] if the variable is set but unparsable: a mistyped replay seed
/// must not quietly become a random run.
pub fn test_seed() -> Result<u64, ProxyError> {
    match std::env::var(SEED_ENV) {
        Ok(v) if !v.trim().is_empty() => parse_seed(&v).ok_or(ProxyError::InvalidSeed(v)),
        _ => Ok(random_seed()),
    }
}

/// Parses a seed written in decimal or as `0x` hex.
#[must_use]
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// A fresh random seed, for runs that were given none: from OS entropy, else the clock.
#[must_use]
pub fn random_seed() -> u64 {
    match SplitMix64::from_os_entropy() {
        Ok(mut rng) => rng.next_u64(),
        // No OS entropy: the clock is random enough to vary a test seed.
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            SplitMix64::new(nanos ^ u64::from(std::process::id())).next_u64()
        }
    }
}

/// A running fault proxy. Dropping it stops every task it started.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    seed: u64,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` under `plan`, seeded by
    /// [`test_seed`].
    ///
    /// # Errors
    ///
    /// See [`FaultProxy::start_with`].
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> Result<Self, ProxyError> {
        Self::start_with(ProxyConfig {
            plan,
            ..ProxyConfig::new(upstream)
        })
        .await
    }

    /// Starts a proxy as configured and prints its seed to stderr.
    ///
    /// # Errors
    ///
    /// [`ProxyError::NotLoopback`] if either address is not loopback, `InvalidPlan`,
    /// `InvalidSeed` from the environment, or `Bind`.
    pub async fn start_with(config: ProxyConfig) -> Result<Self, ProxyError> {
        for (role, addr) in [("listen", config.listen), ("upstream", config.upstream)] {
            if !addr.ip().is_loopback() {
                return Err(ProxyError::NotLoopback { role, addr });
            }
        }
        config.plan.validate()?;
        let seed = match config.seed {
            Some(seed) => seed,
            None => test_seed()?,
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ProxyError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            addr: config.listen,
            source,
        })?;
        eprintln!("fault proxy seed: {seed} (replay with {SEED_ENV}={seed})");
        let shared = Arc::new(Shared {
            upstream: config.upstream,
            state: Mutex::new(State {
                decider: Decider::new(config.plan, seed),
                refuse_until: None,
                refuse_next: 0,
                next_conn: 0,
                log: Vec::new(),
                log_dropped: 0,
            }),
            counters: Atomics::default(),
            active: watch::Sender::new(0),
            cut_now: watch::Sender::new(0),
        });
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stopped));
        Ok(Self {
            addr,
            seed,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address clients connect to.
    #[must_use]
    pub const fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address connections are forwarded to.
    #[must_use]
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// `http://ADDR{path}`, for pointing an HTTP client through the proxy.
    #[must_use]
    pub fn url_for(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The seed of the fault draws.
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// What the proxy has done so far.
    #[must_use]
    pub fn counters(&self) -> Counters {
        self.shared.counters()
    }

    /// Every fault injected so far, in the order injected (at most 100 000 entries).
    #[must_use]
    pub fn fault_log(&self) -> Vec<FaultEvent> {
        self.shared.state().log.clone()
    }

    /// The seed, counters and fault log in one string, for assertion messages: a failing test
    /// that prints it can be replayed.
    #[must_use]
    pub fn report(&self) -> String {
        const SHOWN: usize = 50;
        let (log, dropped) = {
            let state = self.shared.state();
            (state.log.clone(), state.log_dropped)
        };
        let seed = self.seed;
        let mut out = format!(
            "fault proxy seed: {seed} (replay with {SEED_ENV}={seed}); counters: {}; faults:",
            self.counters().to_json()
        );
        for event in log.iter().take(SHOWN) {
            out.push_str(&format!(" [{event}]"));
        }
        let more = (log.len().saturating_sub(SHOWN)) as u64 + dropped;
        if more > 0 {
            out.push_str(&format!(" and {more} more"));
        }
        out
    }

    /// The plan in force.
    #[must_use]
    pub fn plan(&self) -> FaultPlan {
        self.shared.state().decider.plan().clone()
    }

    /// Replaces the plan for connections accepted from now on, with fresh budgets; the
    /// generator is not reseeded, and open connections keep the faults they were given.
    ///
    /// # Errors
    ///
    /// [`ProxyError::InvalidPlan`].
    pub fn set_plan(&self, plan: FaultPlan) -> Result<(), ProxyError> {
        plan.validate()?;
        self.shared.state().decider.set_plan(plan);
        Ok(())
    }

    /// Refuses every connection for `window` from now: each is accepted and reset at once, so
    /// the client's first read fails with a connection reset (or sees EOF).
    pub fn refuse_for(&self, window: Duration) {
        self.shared.state().refuse_until = Some(Instant::now() + window);
    }

    /// Refuses the next `n` connections, whenever they come: a refusal that does not depend on
    /// timing.
    pub fn refuse_next(&self, n: u64) {
        self.shared.state().refuse_next = n;
    }

    /// Ends any refusal window and pending refusals.
    pub fn stop_refusing(&self) {
        let mut state = self.shared.state();
        state.refuse_until = None;
        state.refuse_next = 0;
    }

    /// Cuts (FIN both ways, counted and logged as cuts) every connection open right now,
    /// whatever its plan: a cut placed by the test at a moment it chose, for example while
    /// only streams that can be resumed are open. Connections accepted later are untouched.
    pub fn cut_open_connections(&self) {
        self.shared
            .cut_now
            .send_modify(|generation| *generation += 1);
    }

    /// Waits until no connection is being forwarded; `false` if that took longer than
    /// `timeout` (a stalled connection stays open until its hold ends).
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut active = self.shared.active.subscribe();
        tokio::time::timeout(timeout, active.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }

    /// Stops accepting, closes every connection and returns the final counters.
    pub async fn shutdown(mut self) -> Counters {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(SHUTDOWN_TIMEOUT, &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
        self.counters()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// State shared by the accept loop, connection tasks and the handle.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    counters: Atomics,
    /// Connections open; a watch so that [`FaultProxy::wait_idle`] can wait without polling.
    active: watch::Sender<u64>,
    /// Bumped by [`FaultProxy::cut_open_connections`]; every open connection watches it.
    cut_now: watch::Sender<u64>,
}

/// Mutable state behind one lock, never held across an await.
#[derive(Debug)]
struct State {
    decider: Decider,
    refuse_until: Option<Instant>,
    refuse_next: u64,
    next_conn: u64,
    log: Vec<FaultEvent>,
    log_dropped: u64,
}

impl State {
    fn log(&mut self, event: FaultEvent) {
        if self.log.len() < MAX_FAULT_LOG {
            self.log.push(event);
        } else {
            self.log_dropped += 1;
        }
    }
}

#[derive(Debug, Default)]
struct Atomics {
    accepted: AtomicU64,
    refused: AtomicU64,
    upstream_failures: AtomicU64,
    cuts: AtomicU64,
    resets: AtomicU64,
    stalls: AtomicU64,
    slowed: AtomicU64,
    truncations: AtomicU64,
    bytes_to_server: AtomicU64,
    bytes_to_client: AtomicU64,
}

impl Atomics {
    fn of(&self, kind: FaultKind) -> &AtomicU64 {
        match kind {
            FaultKind::Cut => &self.cuts,
            FaultKind::Reset => &self.resets,
            FaultKind::Stall => &self.stalls,
            FaultKind::Slow => &self.slowed,
            FaultKind::Truncate => &self.truncations,
            FaultKind::Refuse => &self.refused,
        }
    }
}

/// What to do with a connection just accepted.
enum Admission {
    Refuse,
    Forward(Assignment),
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not hide the counters from the test that is failing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn counters(&self) -> Counters {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        Counters {
            accepted: get(&c.accepted),
            refused: get(&c.refused),
            upstream_failures: get(&c.upstream_failures),
            active: *self.active.borrow(),
            cuts: get(&c.cuts),
            resets: get(&c.resets),
            stalls: get(&c.stalls),
            slowed: get(&c.slowed),
            truncations: get(&c.truncations),
            bytes_to_server: get(&c.bytes_to_server),
            bytes_to_client: get(&c.bytes_to_client),
        }
    }

    /// Numbers a new connection and decides its fate, in accept order so a seed replays.
    fn admit(&self) -> (u64, Admission) {
        let mut state = self.state();
        state.next_conn += 1;
        let conn = state.next_conn;
        let in_window = state.refuse_until.is_some_and(|t| Instant::now() < t);
        if state.refuse_next > 0 || in_window {
            state.refuse_next = state.refuse_next.saturating_sub(1);
            self.counters.refused.fetch_add(1, Ordering::SeqCst);
            state.log(FaultEvent {
                conn,
                kind: FaultKind::Refuse,
                at_byte: 0,
                detail: 0,
            });
            return (conn, Admission::Refuse);
        }
        self.counters.accepted.fetch_add(1, Ordering::SeqCst);
        let assignment = state.decider.assign();
        if let Some(rate) = assignment.slow {
            self.counters.slowed.fetch_add(1, Ordering::SeqCst);
            state.log(FaultEvent {
                conn,
                kind: FaultKind::Slow,
                at_byte: 0,
                detail: rate,
            });
        }
        (conn, Admission::Forward(assignment))
    }

    /// Counts and logs a fault that took effect.
    fn record(&self, event: FaultEvent) {
        self.counters.of(event.kind).fetch_add(1, Ordering::SeqCst);
        self.state().log(event);
    }

    /// Returns the budget of a fault assigned to a connection that ended before it fired.
    fn release(&self, assignment: &Assignment) {
        if let Some(ending) = assignment.ending {
            self.state()
                .decider
                .release(ending.kind(), assignment.generation);
        }
    }

    fn add_bytes(&self, to_client: bool, n: usize) {
        let counter = if to_client {
            &self.counters.bytes_to_client
        } else {
            &self.counters.bytes_to_server
        };
        counter.fetch_add(n as u64, Ordering::SeqCst);
    }
}

/// Counts a connection as active for as long as it lives, even if its task is aborted.
struct ActiveGuard(Arc<Shared>);

impl ActiveGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.active.send_modify(|n| *n += 1);
        Self(Arc::clone(shared))
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.send_modify(|n| *n -= 1);
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) {
    // Owning the connection tasks here means that stopping or aborting this loop stops them.
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => match shared.admit() {
                    (_, Admission::Refuse) => conn::reset(client),
                    (conn, Admission::Forward(assignment)) => {
                        let guard = ActiveGuard::new(&shared);
                        tasks.spawn(conn::serve(guard, client, conn, assignment));
                    }
                },
                Err(_) => tokio::time::sleep(ACCEPT_ERROR_PAUSE).await,
            },
            // Reap finished connections so the set holds only live ones.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    tasks.shutdown().await;
}
