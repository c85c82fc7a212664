//! The chaos runner: many concurrent `count` calls against `tether serve` through the
//! [fault proxy](crate::proxy), with faults of every kind drawn from a seed, each call's
//! delivered sequence checked against the only correct answers.
//!
//! For every call of `count {n}` the application must see progress 1..n, each once and in
//! order, then the result `counted n` (docs/DESIGN.md#property-1); or, when the call failed with a
//! typed error, a gap-free prefix 1..k (property 2: no silent gap). Half of the workers call
//! through tether's client library ([`tether::client::Client::call_tool`]), which resumes on
//! its own; the other half use the [raw reader](crate::raw), which does its own GET +
//! `Last-Event-ID` resumes here, so that a server bug cannot hide behind the client's
//! deduplication. Task workers ([`ChaosConfig::task_workers`]) call through tether's client
//! pinned to 2026-07-28, so each call runs as a task read with `tasks/stream`; every task they
//! learned of must end in a terminal status `tasks/get` shows ([`Report::tasks_lost`]).
//!
//! The proxy draws, per connection, one of cut, reset, stall and truncate at a byte (or
//! event) offset spread over a typical stream, and slows some connections; a background task
//! refuses one new connection every few dozen, and some of the raw reader's resumes. A fault
//! is drawn when a connection is accepted, so a kept-alive connection of tether's client
//! that drew none carries call after call untouched: long runs that want faults on every
//! connection set [`ChaosConfig::fault_probability`] to 1.
//!
//! Latency is measured from the moment a reader notices a loss (at once for cuts, resets and
//! truncations; after the idle timeout for stalls) to the first message after it.
//!
//! Server-side faults ([`ChaosConfig::server_kills`]): with [`Store::Sqlite`] the runner
//! SIGKILLs `tether serve` and restarts it on the same port and database while calls are in
//! flight; with [`Store::Redis`] it runs two nodes on one private `redis-server` (each behind
//! its own proxy; the raw reader POSTs and resumes on either node) and alternately SIGKILLs
//! node A (a new node takes its port once A's lease has run out) and restarts
//! `redis-server` (append-only file, `appendfsync always`) after a brief outage. New calls
//! wait while a kill is under way (a POST to a dead server is not what is under test); calls
//! in flight resume, or end with the server's `server_restarted` error when their handler
//! died with its process.
//!
//! Counted apart: a fault that lands before a POST's first event id (in its response head or
//! its priming event, or a refused POST connection) leaves nothing to resume from. tether's
//! client sends such a request again (the server re-attaches it to its stream, so it does not
//! run twice) and the call goes on; the raw reader does not, and its call fails with a typed
//! error ([`Report::failed_before_stream`]), as does a tether-client call whose sends all
//! failed within the budget.
//!
//! It owns the workload, the checks and the report; the faults are the proxy's, the process
//! handling the launcher's. The three kinds of worker are modules of their own: `client`
//! (through tether's client), `raw` (the raw reader and its own resumes) and `task` (tasks). Exact replay of a run needs more than the seed (the interleaving
//! of concurrent connections decides which connection gets which draw), but the seed fixes
//! every draw, every call's parameters and the refusal and kill schedule.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tether::proto::backoff::{RandomSource, SplitMix64};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::launcher::{ServerProcess, ServerSpec, tether_bin};
use crate::proxy::{
    ByteFault, Counters, FaultKind, FaultPlan, FaultProxy, ProxyConfig, SlowFault, TruncateFault,
    parse_seed,
};
use crate::redis::{RedisOptions, RedisServer};

mod client;
mod raw;
mod task;

use client::client_worker;
use raw::raw_worker;
use task::task_worker;

/// A fresh random seed, for runs that were given none (the proxy's).
pub use crate::proxy::random_seed;

/// The environment variable that fixes the seed of a chaos run (decimal or `0x` hex).
pub const SEED_ENV: &str = "CHAOS_SEED";

/// The `data.reason` of the JSON-RPC error a restarted server sends for a request whose
/// handler died with the old process.
pub use tether::server::SERVER_RESTARTED_REASON;

/// Bytes of one `count` progress event on the wire (SSE frame plus chunk framing), roughly:
/// what the default fault offsets are scaled by.
const EVENT_BYTES: u64 = 160;

/// Failure descriptions kept in the report; later ones are only counted.
const MAX_FAILURE_NOTES: usize = 20;

/// Attempts to set a worker's session up before the run gives up: setup goes through the
/// faulty proxy too, and is not a call.
const SETUP_ATTEMPTS: u32 = 50;

/// The raw reader's reconnect policy, like the client's below: a first step of the server's
/// `retry`, doubling to this cap.
const RAW_BACKOFF_CAP: Duration = Duration::from_millis(500);

/// Failed reconnect attempts in a row (without a new event in between) after which a call
/// gives up, for both readers; with the cap above, about 25 s: more than a server restart.
const RECONNECT_ATTEMPTS: u32 = 60;

/// Longest outage either reader sits through before giving up.
const RECONNECT_ELAPSED: Duration = Duration::from_secs(30);

/// Which store `tether serve` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Store {
    /// `--store memory`: no restarts (they would lose everything by design).
    Memory,
    /// `--store sqlite:<data dir>/chaos.db`, killed and restarted during the run.
    Sqlite,
    /// Two nodes on a private `redis-server`; a node is killed and Redis restarted.
    Redis,
}

impl Store {
    /// The name used on the command line and in the report.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Redis => "redis",
        }
    }
}

impl std::str::FromStr for Store {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Self::Memory),
            "sqlite" => Ok(Self::Sqlite),
            "redis" => Ok(Self::Redis),
            other => bail!("unknown store {other:?} (memory, sqlite or redis)"),
        }
    }
}

/// What to run. [`ChaosConfig::new`] gives a bounded run of a few hundred calls.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChaosConfig {
    /// Calls in total.
    pub calls: u64,
    /// Workers, each with its own session, running one call at a time; even workers use
    /// tether's client, odd ones the raw reader.
    pub concurrency: usize,
    /// Workers besides those, each a client pinned to 2026-07-28 whose calls run as tasks
    /// read with `tasks/stream` (the `task` module).
    pub task_workers: usize,
    /// The seed of every draw.
    pub seed: u64,
    /// The store of `tether serve`.
    pub store: Store,
    /// `tether serve --retry-ms`: the first reconnect wait of both readers.
    pub retry_ms: u64,
    /// Each call's `n` is drawn uniformly from `min_events..=max_events`.
    pub min_events: u64,
    /// See `min_events`.
    pub max_events: u64,
    /// Each call's `interval_ms` is drawn uniformly from `0..=max_interval_ms`.
    pub max_interval_ms: u64,
    /// A call running longer than this is hung (a violation).
    pub call_deadline: Duration,
    /// No bytes for this long on a stream means it is dead (how stalls are detected).
    pub idle_timeout: Duration,
    /// The chance that a connection gets an ending fault (one of cut, reset, stall and
    /// truncate, drawn uniformly).
    pub fault_probability: f64,
    /// The chance that a connection is slowed.
    pub slow_probability: f64,
    /// The mean server→client bytes before an ending fault (offsets are spread over
    /// `0..2×`); `None`: 30 % of a mean stream, so that most calls see several faults.
    pub fault_offset_bytes: Option<u64>,
    /// One new connection is refused every `refuse_every/2..=3×refuse_every/2` connections,
    /// whoever opens it (0: never).
    pub refuse_every: u64,
    /// The chance that the raw reader's resume connection is refused: the proxy is told to
    /// refuse the next connection just before the reader opens it (another connection may
    /// take the refusal; that is a refusal too). A refused POST cannot be resumed, so
    /// refusals aimed at resumes keep them counting without failing calls.
    pub refuse_resume_probability: f64,
    /// Server-side faults spread over the run: SQLite, SIGKILL + restart of the server;
    /// Redis, alternately a node killed and replaced, and `redis-server` restarted. None with
    /// the memory store (a restart loses everything by design).
    pub server_kills: u32,
    /// The `tether` binary; `None`: this workspace's ([`tether_bin`]), or the one next to
    /// the running program.
    pub tether_bin: Option<PathBuf>,
    /// Print progress lines to stderr.
    pub verbose: bool,
}

impl ChaosConfig {
    /// A bounded run: 400 calls of 50..=300 events, 12 workers and 4 task workers, `retry`
    /// 20 ms.
    #[must_use]
    pub fn new(store: Store, seed: u64) -> Self {
        Self {
            calls: 400,
            concurrency: 12,
            task_workers: 4,
            seed,
            store,
            retry_ms: 20,
            min_events: 50,
            max_events: 300,
            max_interval_ms: 2,
            call_deadline: Duration::from_secs(60),
            idle_timeout: Duration::from_millis(1500),
            fault_probability: 0.6,
            slow_probability: 0.12,
            fault_offset_bytes: None,
            refuse_every: 80,
            refuse_resume_probability: 0.25,
            server_kills: match store {
                Store::Memory => 0,
                Store::Sqlite => 1,
                Store::Redis => 2,
            },
            tether_bin: None,
            verbose: false,
        }
    }

    fn mean_offset(&self) -> u64 {
        self.fault_offset_bytes
            .unwrap_or((self.min_events + self.max_events) / 2 * EVENT_BYTES * 3 / 10)
            .max(1)
    }

    /// The proxy's plan for this run.
    #[must_use]
    pub fn plan(&self) -> FaultPlan {
        let offset = self.mean_offset();
        let byte = |p: f64| {
            ByteFault::after(offset)
                .with_jitter(offset)
                .with_probability(p)
        };
        let events = (offset / EVENT_BYTES).max(1);
        let p = self.fault_probability.clamp(0.0, 1.0);
        FaultPlan::pass_through()
            .with_cut(byte(p))
            .with_reset(byte(p))
            .with_stall(byte(p), Some(self.idle_timeout * 2))
            .with_truncate(
                TruncateFault::after_events(events)
                    .with_jitter(events)
                    .with_probability(p),
            )
            .with_slow(
                SlowFault::rate(256 * 1024).with_probability(self.slow_probability.clamp(0.0, 1.0)),
            )
    }
}

/// The seed of a run: `CHAOS_SEED` when set (decimal or `0x` hex), else `default`.
///
/// # Errors
///
/// When `CHAOS_SEED` is set but not a number: a mistyped replay must not become another run.
pub fn seed_from_env(default: u64) -> anyhow::Result<u64> {
    match std::env::var(SEED_ENV) {
        Ok(v) if !v.trim().is_empty() => {
            parse_seed(&v).with_context(|| format!("invalid {SEED_ENV} {v:?}"))
        }
        _ => Ok(default),
    }
}

/// What a run saw. Printed with `Display`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The store's name.
    pub store: String,
    /// Calls made.
    pub calls: u64,
    /// Of which through tether's client.
    pub client_calls: u64,
    /// Of which through the raw reader.
    pub raw_calls: u64,
    /// Of which as 2026-07-28 tasks.
    pub task_calls: u64,
    /// Tasks whose id a task call learned (its `CreateTaskResult` arrived).
    pub tasks_created: u64,
    /// Of which `tasks/get` showed in a terminal status matching what the call delivered.
    pub tasks_terminal: u64,
    /// Of those, completed.
    pub tasks_completed: u64,
    /// Failed (`server_restarted`, a store outage).
    pub tasks_failed: u64,
    /// Cancelled.
    pub tasks_cancelled: u64,
    /// Tasks `tasks/get` no longer knew, still running past the deadline, or whose status
    /// contradicted the call's outcome: violations.
    pub tasks_lost: u64,
    /// Calls that delivered 1..n and `counted n`.
    pub completed: u64,
    /// Calls that failed with a typed error after their stream existed (a gap-free prefix).
    pub failed_typed: u64,
    /// Calls that failed before their stream had an event id (nothing to resume from).
    pub failed_before_stream: u64,
    /// Calls whose handler or session died with a killed server: answered with the
    /// `server_restarted` error, or (a node's sessions end with it) failed with the client's
    /// `SessionExpired`; each after a gap-free prefix.
    pub failed_server_restarted: u64,
    /// Calls answered with an internal error because their events could not be stored while
    /// the store (Redis) was down; each after a gap-free prefix.
    pub failed_store_outage: u64,
    /// Calls that failed in a way that is not a typed error (protocol errors): violations.
    pub failed_untyped: u64,
    /// Calls that ran past the per-call deadline: violations.
    pub hung: u64,
    /// Progress events delivered to the application.
    pub events: u64,
    /// What the proxy did.
    pub faults: Counters,
    /// SIGKILL + restart cycles of the server.
    pub server_kills: u64,
    /// Reconnect attempts (the client's `Reconnecting` events, the raw reader's GETs).
    pub reconnects: u64,
    /// Progress values never delivered below the highest one delivered (or below n for a
    /// completed call).
    pub lost: u64,
    /// Progress values delivered twice.
    pub duplicated: u64,
    /// Progress values delivered after a higher one, or out of range.
    pub reordered: u64,
    /// Completed calls whose result was not `counted n`.
    pub bad_results: u64,
    /// Resume latencies measured: from a stream's loss being noticed to its first resumed
    /// message reaching the application.
    pub latency_samples: u64,
    /// The median of those latencies.
    pub resume_p50: Option<Duration>,
    /// The 99th percentile.
    pub resume_p99: Option<Duration>,
    /// Wall time.
    pub elapsed: Duration,
    /// The first failures and violations, described.
    pub notes: Vec<String>,
    /// The proxy's seed, counters and first faults (for replaying a failure).
    pub fault_log: String,
}

impl Report {
    /// Completed calls as a share of all calls.
    #[must_use]
    pub fn completed_share(&self) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        self.completed as f64 / self.calls as f64
    }

    /// Completed calls as a share of the calls not answered `server_restarted` (which no
    /// server can complete: their handler died) nor failed by a store outage (their events
    /// could not be stored).
    #[must_use]
    pub fn completed_share_excluding_restarts(&self) -> f64 {
        let calls = self
            .calls
            .saturating_sub(self.failed_server_restarted + self.failed_store_outage);
        if calls == 0 {
            return 0.0;
        }
        self.completed as f64 / calls as f64
    }

    /// Broken promises: lost, duplicated, reordered, hung, bad results, untyped failures,
    /// lost tasks.
    #[must_use]
    pub fn violations(&self) -> u64 {
        self.tasks_lost
            + self.lost
            + self.duplicated
            + self.reordered
            + self.hung
            + self.bad_results
            + self.failed_untyped
    }

    /// How many faults of `kind` the proxy injected.
    #[must_use]
    pub fn injected(&self, kind: FaultKind) -> u64 {
        self.faults.injected(kind)
    }

    /// Faults of every kind together.
    #[must_use]
    pub fn total_faults(&self) -> u64 {
        FaultKind::ALL.iter().map(|k| self.injected(*k)).sum()
    }
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.1} ms", d.as_secs_f64() * 1e3),
    )
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "chaos report: store {}, seed {} (replay with {SEED_ENV}={}), {:.1} s",
            self.store,
            self.seed,
            self.seed,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  calls {} (client {}, raw {}, task {}), completed {} ({:.2} %; {:.2} % excluding restart and outage orphans)",
            self.calls,
            self.client_calls,
            self.raw_calls,
            self.task_calls,
            self.completed,
            self.completed_share() * 100.0,
            self.completed_share_excluding_restarts() * 100.0
        )?;
        writeln!(
            f,
            "  failed typed {}, before stream {}, server_restarted {}, store outage {}, untyped {}, hung {}",
            self.failed_typed,
            self.failed_before_stream,
            self.failed_server_restarted,
            self.failed_store_outage,
            self.failed_untyped,
            self.hung
        )?;
        writeln!(
            f,
            "  tasks created {}, terminal in tasks/get {} (completed {}, failed {}, cancelled {}), lost {}",
            self.tasks_created,
            self.tasks_terminal,
            self.tasks_completed,
            self.tasks_failed,
            self.tasks_cancelled,
            self.tasks_lost
        )?;
        writeln!(
            f,
            "  events {}, reconnects {}, server kills {}",
            self.events, self.reconnects, self.server_kills
        )?;
        let faults: Vec<String> = FaultKind::ALL
            .iter()
            .map(|k| format!("{} {}", k.name(), self.injected(*k)))
            .collect();
        writeln!(
            f,
            "  faults {} ({}), connections {}",
            self.total_faults(),
            faults.join(", "),
            self.faults.accepted + self.faults.refused
        )?;
        writeln!(
            f,
            "  lost {}, duplicated {}, reordered {}, bad results {}",
            self.lost, self.duplicated, self.reordered, self.bad_results
        )?;
        write!(
            f,
            "  fault → first resumed event: p50 {}, p99 {} ({} samples)",
            ms(self.resume_p50),
            ms(self.resume_p99),
            self.latency_samples
        )?;
        for note in &self.notes {
            write!(f, "\n  note: {note}")?;
        }
        Ok(())
    }
}

/// How one call ended.
#[derive(Debug)]
enum Outcome {
    Completed,
    BeforeStream(String),
    ServerRestarted,
    /// The handler's events could not be stored (the store was down) and it answered with
    /// an internal error saying so.
    StoreOutage,
    Typed(String),
    Untyped(String),
}

/// What one call delivered, checked as it arrives.
#[derive(Debug)]
struct Tracker {
    n: u64,
    seen: Vec<bool>,
    max: u64,
    events: u64,
    duplicated: u64,
    reordered: u64,
}

impl Tracker {
    fn new(n: u64) -> Self {
        Self {
            n,
            seen: vec![false; usize::try_from(n).unwrap_or(0) + 1],
            max: 0,
            events: 0,
            duplicated: 0,
            reordered: 0,
        }
    }

    fn progress(&mut self, value: u64) {
        self.events += 1;
        if value == 0 || value > self.n {
            self.reordered += 1;
            return;
        }
        let slot = &mut self.seen[value as usize];
        if *slot {
            self.duplicated += 1;
            return;
        }
        *slot = true;
        if value < self.max {
            self.reordered += 1;
        }
        self.max = self.max.max(value);
    }

    /// Values missing below what must have been delivered.
    fn lost(&self, completed: bool) -> u64 {
        let upto = if completed { self.n } else { self.max };
        (1..=upto).filter(|v| !self.seen[*v as usize]).count() as u64
    }
}

/// Counters shared by the workers.
#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    client_calls: AtomicU64,
    raw_calls: AtomicU64,
    task_calls: AtomicU64,
    tasks_created: AtomicU64,
    tasks_terminal: AtomicU64,
    tasks_completed: AtomicU64,
    tasks_failed: AtomicU64,
    tasks_cancelled: AtomicU64,
    tasks_lost: AtomicU64,
    completed: AtomicU64,
    failed_typed: AtomicU64,
    failed_before_stream: AtomicU64,
    failed_server_restarted: AtomicU64,
    failed_store_outage: AtomicU64,
    failed_untyped: AtomicU64,
    hung: AtomicU64,
    events: AtomicU64,
    reconnects: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    bad_results: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
    notes: Mutex<(Vec<String>, u64)>,
}

impl Tally {
    fn note(&self, text: String, verbose: bool) {
        if verbose {
            eprintln!("chaos: {text}");
        }
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        if notes.0.len() < MAX_FAILURE_NOTES {
            notes.0.push(text);
        } else {
            notes.1 += 1;
        }
    }

    fn latency(&self, since: Instant) {
        let us = since.elapsed().as_micros() as u64;
        self.latencies_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(us);
    }
}

/// Everything the workers share.
struct Ctx {
    config: ChaosConfig,
    /// The proxied URL of each node.
    urls: Vec<String>,
    tally: Tally,
    next_call: AtomicU64,
    /// Calls started, which the kill schedule follows.
    started: watch::Sender<u64>,
    /// False while the server is being killed and restarted: new calls wait.
    server_up: watch::Receiver<bool>,
    retry: Duration,
    /// The proxy in front of each node, in the order of `urls`.
    proxies: Vec<Arc<FaultProxy>>,
}

/// One `count` call: its index in the run and its parameters, drawn from the seed and the
/// index.
#[derive(Debug, Clone, Copy)]
struct Call {
    index: u64,
    n: u64,
    interval: u64,
}

impl Call {
    fn draw(config: &ChaosConfig, index: u64) -> Self {
        let mut rng = SplitMix64::new(config.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let span = config.max_events.saturating_sub(config.min_events) + 1;
        let n = config.min_events + rng.next_u64() % span;
        let interval = rng.next_u64() % (config.max_interval_ms + 1);
        Self { index, n, interval }
    }

    /// The `tools/call` arguments of `count`.
    fn arguments(self) -> Value {
        json!({"n": self.n, "interval_ms": self.interval})
    }
}

/// Runs the configured chaos and returns its report. The run itself failing (the server
/// does not start, a worker cannot get a session) is an error; broken promises are in the
/// report ([`Report::violations`]).
///
/// # Errors
///
/// Setup failures, with the proxy's report where there is one.
pub async fn run(config: ChaosConfig) -> anyhow::Result<Report> {
    println!(
        "chaos: seed {} (replay with {SEED_ENV}={}), store {}, {} calls, {} workers, {} task workers",
        config.seed,
        config.seed,
        config.store.name(),
        config.calls,
        config.concurrency,
        config.task_workers
    );
    let bin = match &config.tether_bin {
        Some(path) => path.clone(),
        None => match tether_bin() {
            Ok(path) => path,
            Err(error) => {
                let sibling = std::env::current_exe()?.with_file_name("tether");
                if !sibling.is_file() {
                    return Err(error.context("no tether binary (pass --tether-bin)"));
                }
                sibling
            }
        },
    };
    // The server's data dir (its SQLite file), the same across restarts, removed at the end.
    let data_dir = tempfile::Builder::new()
        .prefix("tether-chaos-")
        .tempdir()
        .context("creating a data directory")?;
    let redis = match config.store {
        Store::Redis => Some(RedisOptions::new().persistence(true).start().await?),
        _ => None,
    };
    let store_arg = match (&config.store, &redis) {
        (Store::Sqlite, _) => format!("sqlite:{}", data_dir.path().join("chaos.db").display()),
        (Store::Redis, Some(redis)) => redis.url(),
        _ => "memory".to_owned(),
    };
    let nodes = Nodes {
        bin,
        data_dir: data_dir.path().to_owned(),
        store_arg,
        retry_ms: config.retry_ms,
    };
    let mut servers = Vec::new();
    let names: &[&str] = if redis.is_some() { &["a", "b"] } else { &[""] };
    for name in names {
        servers.push(nodes.spec(name, None).start().await?);
    }
    // The clock starts once the servers are up: building and starting them is not the run.
    let started_at = Instant::now();
    let result = run_against(config, nodes, servers, redis, started_at).await;
    drop(data_dir);
    result
}

/// How to start a `tether serve` node of this run.
struct Nodes {
    bin: PathBuf,
    data_dir: PathBuf,
    store_arg: String,
    retry_ms: u64,
}

/// A node's lease on Redis (`--node-lease-secs`): short, so that a killed node's calls are
/// answered soon by the other node.
const NODE_LEASE_SECS: u64 = 2;

impl Nodes {
    /// `tether serve` as node `name` (none: a single server), at `bind` or a free port.
    fn spec(&self, name: &str, bind: Option<std::net::SocketAddr>) -> ServerSpec {
        let mut spec = ServerSpec::new(&self.bin)
            .arg("serve")
            .env("TETHER_DATA_DIR", &self.data_dir)
            .args(["--store", &self.store_arg, "--retry-ms"])
            .arg(self.retry_ms.to_string());
        if !name.is_empty() {
            spec = spec
                .args(["--node-id", name, "--node-lease-secs"])
                .arg(NODE_LEASE_SECS.to_string());
        }
        if let Some(bind) = bind {
            spec = spec.bind_addr(bind);
        }
        spec
    }
}

async fn run_against(
    config: ChaosConfig,
    nodes: Nodes,
    servers: Vec<ServerProcess>,
    redis: Option<RedisServer>,
    started_at: Instant,
) -> anyhow::Result<Report> {
    let mut proxies = Vec::new();
    let mut urls = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let proxy = FaultProxy::start_with(ProxyConfig {
            plan: config.plan(),
            seed: Some(config.seed.wrapping_add(i as u64)),
            ..ProxyConfig::new(server.addr())
        })
        .await?;
        let path = server
            .url()
            .split_once("//")
            .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_owned()))
            .unwrap_or_else(|| "/mcp".to_owned());
        urls.push(proxy.url_for(&path));
        proxies.push(Arc::new(proxy));
    }
    let (up_tx, up_rx) = watch::channel(true);
    let (started_tx, _) = watch::channel(0u64);
    let ctx = Arc::new(Ctx {
        retry: Duration::from_millis(config.retry_ms),
        config,
        urls,
        tally: Tally::default(),
        next_call: AtomicU64::new(0),
        started: started_tx,
        server_up: up_rx,
        proxies: proxies.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let refusers: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            tokio::spawn(refuser(
                Arc::clone(proxy),
                ctx.config.seed ^ 0x5EED_0F7E_F05E ^ i as u64,
                ctx.config.refuse_every,
                stop_rx.clone(),
            ))
        })
        .collect();
    let killer = tokio::spawn(killer(
        Arc::clone(&ctx),
        nodes,
        servers,
        redis,
        up_tx,
        stop_rx,
    ));

    let mut workers = JoinSet::new();
    for worker in 0..ctx.config.concurrency.max(1) {
        let ctx = Arc::clone(&ctx);
        workers.spawn(async move {
            if worker % 2 == 0 {
                client_worker(ctx, worker).await
            } else {
                raw_worker(ctx, worker).await
            }
        });
    }
    for worker in 0..ctx.config.task_workers {
        let ctx = Arc::clone(&ctx);
        workers.spawn(task_worker(ctx, worker));
    }
    let mut setup_error = None;
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                setup_error.get_or_insert(error);
            }
            Err(panic) => {
                setup_error.get_or_insert(anyhow::anyhow!("a worker panicked: {panic}"));
            }
        }
    }
    let _ = stop_tx.send(true);
    for refuser in refusers {
        refuser.await.ok();
    }
    let (servers, redis, kills) = killer.await.context("the kill task")?;
    let fault_log: Vec<String> = proxies.iter().map(|p| p.report()).collect();
    let fault_log = fault_log.join("\n");
    let faults = proxies
        .iter()
        .map(|p| p.counters())
        .fold(Counters::default(), add_counters);
    let full_log: Vec<Vec<crate::proxy::FaultEvent>> =
        proxies.iter().map(|p| p.fault_log()).collect();
    // The last handles (in `ctx`) stop the proxies' tasks when the run's state is dropped.
    drop(proxies);
    for mut server in servers {
        if !server.is_running() {
            ctx.tally.note(
                format!("a server died during the run:\n{}", server.logs()),
                true,
            );
        } else if ctx.config.verbose {
            let logs = server.logs();
            let problems: Vec<&str> = logs
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            let skip = problems.len().saturating_sub(30);
            eprintln!("chaos: server warnings and errors (last 30):");
            for line in &problems[skip..] {
                eprintln!("  {line}");
            }
        }
        server.terminate().await.ok();
    }
    drop(redis);
    if let Some(error) = setup_error {
        return Err(error.context(format!("chaos run failed; {fault_log}")));
    }

    let t = &ctx.tally;
    let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let mut latencies = std::mem::take(
        &mut *t
            .latencies_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    latencies.sort_unstable();
    let pct = |p: f64| -> Option<Duration> {
        if latencies.is_empty() {
            return None;
        }
        let i = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        Some(Duration::from_micros(latencies[i]))
    };
    let (mut notes, more) =
        std::mem::take(&mut *t.notes.lock().unwrap_or_else(PoisonError::into_inner));
    if more > 0 {
        notes.push(format!("and {more} more"));
    }
    let report = Report {
        seed: ctx.config.seed,
        store: ctx.config.store.name().to_owned(),
        calls: get(&t.calls),
        client_calls: get(&t.client_calls),
        raw_calls: get(&t.raw_calls),
        task_calls: get(&t.task_calls),
        tasks_created: get(&t.tasks_created),
        tasks_terminal: get(&t.tasks_terminal),
        tasks_completed: get(&t.tasks_completed),
        tasks_failed: get(&t.tasks_failed),
        tasks_cancelled: get(&t.tasks_cancelled),
        tasks_lost: get(&t.tasks_lost),
        completed: get(&t.completed),
        failed_typed: get(&t.failed_typed),
        failed_before_stream: get(&t.failed_before_stream),
        failed_server_restarted: get(&t.failed_server_restarted),
        failed_store_outage: get(&t.failed_store_outage),
        failed_untyped: get(&t.failed_untyped),
        hung: get(&t.hung),
        events: get(&t.events),
        faults,
        server_kills: kills,
        reconnects: get(&t.reconnects),
        lost: get(&t.lost),
        duplicated: get(&t.duplicated),
        reordered: get(&t.reordered),
        bad_results: get(&t.bad_results),
        latency_samples: latencies.len() as u64,
        resume_p50: pct(0.50),
        resume_p99: pct(0.99),
        elapsed: started_at.elapsed(),
        notes,
        fault_log,
    };
    if report.violations() > 0 {
        println!("chaos: VIOLATIONS; {}", report.fault_log);
        // The whole fault log (the report quotes its start), one fault a line, per proxy.
        let path = std::env::temp_dir().join(format!("tether-chaos-{}.faults", report.seed));
        let mut text = String::new();
        for (proxy, log) in full_log.iter().enumerate() {
            for event in log {
                text.push_str(&format!("proxy {proxy}: {event}\n"));
            }
        }
        match std::fs::write(&path, text) {
            Ok(()) => println!("chaos: full fault log in {}", path.display()),
            Err(error) => println!("chaos: cannot write {}: {error}", path.display()),
        }
    }
    Ok(report)
}

fn add_counters(a: Counters, b: Counters) -> Counters {
    Counters {
        accepted: a.accepted + b.accepted,
        refused: a.refused + b.refused,
        upstream_failures: a.upstream_failures + b.upstream_failures,
        active: a.active + b.active,
        cuts: a.cuts + b.cuts,
        resets: a.resets + b.resets,
        stalls: a.stalls + b.stalls,
        slowed: a.slowed + b.slowed,
        truncations: a.truncations + b.truncations,
        bytes_to_server: a.bytes_to_server + b.bytes_to_server,
        bytes_to_client: a.bytes_to_client + b.bytes_to_client,
    }
}

/// Refuses one new connection every `every/2..=3·every/2` connections (accepted or refused),
/// a schedule drawn from `seed`.
async fn refuser(proxy: Arc<FaultProxy>, seed: u64, every: u64, mut stop: watch::Receiver<bool>) {
    if every == 0 {
        return;
    }
    let mut rng = SplitMix64::new(seed);
    let mut draw = move || every / 2 + rng.next_u64() % (every + 1);
    let mut next = draw();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        let c = proxy.counters();
        if c.accepted + c.refused >= next {
            proxy.refuse_next(1);
            next = c.accepted + c.refused + draw();
        }
    }
}

/// Server-side faults at evenly spread points of the run; returns the servers, Redis and how
/// many faults it injected.
async fn killer(
    ctx: Arc<Ctx>,
    nodes: Nodes,
    mut servers: Vec<ServerProcess>,
    mut redis: Option<RedisServer>,
    up: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) -> (Vec<ServerProcess>, Option<RedisServer>, u64) {
    let kills = match ctx.config.store {
        Store::Memory => 0,
        _ => u64::from(ctx.config.server_kills),
    };
    let mut started = ctx.started.subscribe();
    let mut done = 0;
    for k in 1..=kills {
        let at = ctx.config.calls * k / (kills + 1);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = started.wait_for(|s| *s >= at) => if r.is_err() { break },
        }
        // Let the calls just started get under way, so the fault lands mid-stream.
        tokio::time::sleep(Duration::from_millis(200)).await;
        up.send_replace(false);
        let outcome = match (&mut redis, k % 2) {
            (None, _) => servers[0]
                .restart()
                .await
                .map_err(anyhow::Error::from)
                .map(|()| "server killed and restarted"),
            (Some(_), 1) => replace_node(&nodes, &mut servers[0], k)
                .await
                .map(|()| "node a killed and replaced"),
            (Some(redis), _) => restart_redis(redis)
                .await
                .map(|()| "redis-server restarted"),
        };
        up.send_replace(true);
        match outcome {
            Ok(what) => {
                done += 1;
                if ctx.config.verbose {
                    eprintln!("chaos: {what} ({done})");
                }
            }
            Err(error) => {
                ctx.tally.note(
                    format!("server fault failed: {error:#}\n{}", servers[0].logs()),
                    true,
                );
                break;
            }
        }
    }
    (servers, redis, done)
}

/// SIGKILLs node `server`, waits until its lease has run out (so that the other node answers
/// the calls it was running), and starts a new node with a new id on its port.
async fn replace_node(nodes: &Nodes, server: &mut ServerProcess, k: u64) -> anyhow::Result<()> {
    let addr = server.addr();
    server.kill().await?;
    tokio::time::sleep(Duration::from_secs(NODE_LEASE_SECS) + Duration::from_millis(500)).await;
    let name = format!("a{k}");
    let mut attempt = 0;
    loop {
        match nodes.spec(&name, Some(addr)).start().await {
            Ok(new) => {
                *server = new;
                return Ok(());
            }
            // The port may still be held for a moment.
            Err(_) if attempt < 20 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// SIGKILLs `redis-server` and starts it again after a brief outage.
async fn restart_redis(redis: &mut RedisServer) -> anyhow::Result<()> {
    redis.kill().await?;
    tokio::time::sleep(REDIS_OUTAGE).await;
    redis.restart().await?;
    Ok(())
}

/// How long `redis-server` stays down in a Redis restart.
const REDIS_OUTAGE: Duration = Duration::from_millis(500);

/// Takes the next call index, waiting while the server is down; `None` when all are taken.
async fn next_call(ctx: &Ctx) -> Option<u64> {
    let mut up = ctx.server_up.clone();
    let _ = up.wait_for(|u| *u).await;
    let index = ctx.next_call.fetch_add(1, Ordering::SeqCst);
    if index >= ctx.config.calls {
        return None;
    }
    ctx.started.send_modify(|s| *s += 1);
    Some(index)
}

/// A worker could not open its session: an error after [`SETUP_ATTEMPTS`] attempts, else a
/// 50 ms pause before the next one.
async fn setup_failed(
    worker: usize,
    attempts: &mut u32,
    error: impl fmt::Display,
) -> anyhow::Result<()> {
    *attempts += 1;
    if *attempts >= SETUP_ATTEMPTS {
        bail!("worker {worker}: no session after {attempts} attempts: {error:#}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// The next call a worker takes, counted in `started`, with a fresh tracker.
async fn take_call(ctx: &Ctx, started: &AtomicU64) -> Option<(Call, Tracker)> {
    let index = next_call(ctx).await?;
    started.fetch_add(1, Ordering::SeqCst);
    let call = Call::draw(&ctx.config, index);
    Some((call, Tracker::new(call.n)))
}

/// A call's outcome, or `None` if it did not end within the call deadline (it hung).
async fn within_deadline(ctx: &Ctx, call: impl Future<Output = Outcome>) -> Option<Outcome> {
    tokio::time::timeout(ctx.config.call_deadline, call)
        .await
        .ok()
}

/// Records a finished call.
fn finish(ctx: &Ctx, index: u64, kind: &str, tracker: &Tracker, outcome: Option<Outcome>) {
    let t = &ctx.tally;
    let verbose = ctx.config.verbose;
    t.calls.fetch_add(1, Ordering::SeqCst);
    t.events.fetch_add(tracker.events, Ordering::SeqCst);
    t.duplicated.fetch_add(tracker.duplicated, Ordering::SeqCst);
    t.reordered.fetch_add(tracker.reordered, Ordering::SeqCst);
    let completed = matches!(outcome, Some(Outcome::Completed));
    let lost = tracker.lost(completed);
    t.lost.fetch_add(lost, Ordering::SeqCst);
    let n = tracker.n;
    let what = format!("call {index} ({kind}, n {n})");
    if lost + tracker.duplicated + tracker.reordered > 0 {
        t.note(
            format!(
                "{what}: lost {lost}, duplicated {}, reordered {} (delivered up to {})",
                tracker.duplicated, tracker.reordered, tracker.max
            ),
            verbose,
        );
    }
    match outcome {
        Some(Outcome::Completed) => {
            t.completed.fetch_add(1, Ordering::SeqCst);
        }
        Some(Outcome::BeforeStream(why)) => {
            t.failed_before_stream.fetch_add(1, Ordering::SeqCst);
            t.note(format!("{what}: failed before its stream: {why}"), verbose);
        }
        Some(Outcome::ServerRestarted) => {
            t.failed_server_restarted.fetch_add(1, Ordering::SeqCst);
        }
        Some(Outcome::StoreOutage) => {
            t.failed_store_outage.fetch_add(1, Ordering::SeqCst);
        }
        Some(Outcome::Typed(why)) => {
            t.failed_typed.fetch_add(1, Ordering::SeqCst);
            t.note(
                format!("{what}: failed typed after {}: {why}", tracker.max),
                verbose,
            );
        }
        Some(Outcome::Untyped(why)) => {
            t.failed_untyped.fetch_add(1, Ordering::SeqCst);
            t.note(format!("{what}: UNTYPED failure: {why}"), verbose);
        }
        None => {
            t.hung.fetch_add(1, Ordering::SeqCst);
            t.note(
                format!(
                    "{what}: HUNG past {:?} after {}",
                    ctx.config.call_deadline, tracker.max
                ),
                verbose,
            );
        }
    }
}

/// Checks a final result against `counted n`.
fn check_result(ctx: &Ctx, index: u64, n: u64, result: &Value) {
    let text = &result["content"][0]["text"];
    if *text != json!(format!("counted {n}")) {
        ctx.tally.bad_results.fetch_add(1, Ordering::SeqCst);
        ctx.tally
            .note(format!("call {index}: bad result {result}"), true);
    }
}

/// Classifies a JSON-RPC error answer.
fn error_outcome(error: &Value) -> Outcome {
    if error["data"]["reason"] == json!(SERVER_RESTARTED_REASON) {
        Outcome::ServerRestarted
    } else if error["code"] == json!(tether::proto::jsonrpc::INTERNAL_ERROR)
        && error["message"]
            .as_str()
            .is_some_and(|m| m.contains("store unavailable"))
    {
        Outcome::StoreOutage
    } else {
        Outcome::Typed(format!("JSON-RPC error {error}"))
    }
}
