//! `tether bench`: a load generator for MCP Streamable HTTP servers with the `count` tool of
//! docs/CONTRACTS.md#demo-count (tether's demo, the SDK peers in `interop/`), and the measurements
//! behind `docs/PERFORMANCE.md`.
//!
//! The bench is a process of its own that reaches the server by URL (`--url`), or starts
//! `tether serve --bind 127.0.0.1:0 --store memory` beside itself (`--spawn`, the default
//! without `--url`; `--store` picks another store). Scenarios:
//!
//! - `throughput`: one `count` stream, n events, no interval: events/s end to end.
//! - `fanout`: C concurrent sessions, each streaming: aggregate events/s (and how busy the
//!   whole machine was meanwhile), then event latency percentiles on paced streams (the
//!   method is in [`scenarios::fanout`]).
//! - `resume`: a stream with K stored events, cut and resumed: time to the first replayed
//!   event, replay events/s next to first-delivery events/s.
//! - `idle`: S idle sessions, then one open GET stream each: the server's RSS per session
//!   and per stream.
//! - `store`: append and replay events/s per event-store backend, in process.
//! - `roundtrip`: 2026-07-28 `tools/call` round trips per second (stateless `count` calls,
//!   no session), with 1 and with 50 concurrent clients by default.
//! - `tasks`: the tasks extension's costs: task creation latency (p50/p99), `tasks/get`
//!   calls/s with C pollers, and `tasks/stream` events/s, live and replayed.
//! - `chaos ARGS…`: runs the `tether-chaos` binary.
//!
//! A result counts only when every event arrived: each stream is checked for progress
//! 1..n in order and the final `counted n`, and any gap fails the run (exit 1). Output is a
//! table, or one JSON object with `--json`.

mod mcp;
mod scenarios;
mod spawn;
mod store;
mod tasks;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

/// Arguments of `tether bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// One `count` stream of n events, no interval: events/s end to end.
    Throughput(ThroughputArgs),
    /// C concurrent sessions streaming: aggregate events/s and p50/p99 event latency.
    Fanout(FanoutArgs),
    /// A stream with K stored events, cut: time to first replayed event, replay events/s.
    Resume(ResumeArgs),
    /// S idle sessions and open GET streams: server RSS per session and per stream.
    Idle(IdleArgs),
    /// Event-store append and replay throughput per backend, in process.
    Store(StoreArgs),
    /// 2026-07-28 `tools/call` round trips per second, with each number of concurrent clients.
    Roundtrip(RoundtripArgs),
    /// Tasks: creation latency, `tasks/get` calls/s, `tasks/stream` events/s.
    Tasks(TasksArgs),
    /// Run the `tether-chaos` fault-injection binary with these arguments.
    Chaos(ChaosArgs),
}

/// Events per second over `elapsed`.
#[allow(clippy::cast_precision_loss)] // event counts are far below 2^52
pub(crate) fn per_second(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64()
}

/// The median of `values` (the upper one of an even count); `values` is not empty.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Which server a scenario measures, and how results are printed.
#[derive(Debug, Args)]
struct Target {
    /// The MCP endpoint of a running server with the `count` tool.
    #[arg(long, value_name = "URL", conflicts_with = "spawn")]
    url: Option<String>,
    /// Start `tether serve --bind 127.0.0.1:0 --store STORE` for the run (the default
    /// without --url).
    #[arg(long)]
    spawn: bool,
    /// The spawned server's `--store` (`memory`, `sqlite:PATH`, `redis://HOST:PORT[/DB]`).
    #[arg(
        long,
        value_name = "STORE",
        default_value = "memory",
        conflicts_with = "url"
    )]
    store: String,
    /// Send `Authorization: Bearer <the file's first line>` on every request, to measure a
    /// protected server (`--url` only: a spawned server is not protected).
    #[arg(long, value_name = "FILE", requires = "url")]
    bearer_token_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    output: Output,
}

#[derive(Debug, Args)]
struct Output {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ThroughputArgs {
    #[command(flatten)]
    target: Target,
    /// Events per stream.
    #[arg(long, default_value_t = 100_000)]
    n: u64,
    /// Timed runs (each in a fresh session); the rate reported is their median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// The server's process id, when it was not spawned by the bench: its CPU time per event
    /// is reported too.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
}

#[derive(Debug, Args)]
struct FanoutArgs {
    #[command(flatten)]
    target: Target,
    /// Concurrent sessions, each with one streaming call.
    #[arg(long, short = 'c', default_value_t = 100)]
    sessions: u64,
    /// Events per stream in the unpaced (aggregate events/s) phase.
    #[arg(long, default_value_t = 1000)]
    n: u64,
    /// Events per stream in the paced (latency) phase.
    #[arg(long, default_value_t = 20)]
    latency_events: u64,
    /// `interval_ms` of the paced phase.
    #[arg(long, default_value_t = 50)]
    interval_ms: u64,
    /// Processes (the server's, or a store's such as `redis-server`) whose CPU use while the
    /// unpaced streams ran is reported too, in cores; repeatable.
    #[arg(long, value_name = "PID")]
    pid: Vec<u32>,
}

#[derive(Debug, Args)]
struct ResumeArgs {
    #[command(flatten)]
    target: Target,
    /// Events stored in the stream before it is resumed (the 100 000; a spawned
    /// server's per-session cap is raised so that nothing is evicted; a server given by
    /// `--url` needs `--max-events-per-session` above this).
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Resumes timed to their first replayed event.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    samples: u64,
    /// Full replays timed; the rate reported is their median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
}

#[derive(Debug, Args)]
struct IdleArgs {
    #[command(flatten)]
    target: Target,
    /// Idle sessions, each then holding one open GET stream.
    #[arg(long, short = 's', default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    sessions: u64,
    /// The server's process id, for its RSS, when it was not spawned by the bench.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
}

#[derive(Debug, Args)]
struct StoreArgs {
    /// Events appended, then replayed, per backend.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Concurrent appending tasks (one stream each), so that batching backends (SQLite's
    /// group commit, Redis's pipelining) show.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    tasks: u64,
    /// Also measure the Redis store at this URL (`redis://HOST:PORT[/DB]`; keys under a
    /// fresh prefix, removed afterwards).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Timed runs per measurement; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    #[command(flatten)]
    output: Output,
}

#[derive(Debug, Args)]
struct RoundtripArgs {
    #[command(flatten)]
    target: Target,
    /// Concurrent clients, comma-separated: each count is measured in turn.
    #[arg(long, short = 'c', value_delimiter = ',', default_value = "1,50",
          value_parser = clap::value_parser!(u64).range(1..))]
    clients: Vec<u64>,
    /// Seconds each count of clients calls for (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Progress events per call (`count {n}`); 0 makes each call a bare round trip.
    #[arg(long, default_value_t = 0)]
    n: u64,
    /// The server's process id, when it was not spawned by the bench: its CPU time per call
    /// is reported too (with one client, the bench client's own work is most of a round trip).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// The name of the `count` tool (behind a federating gateway, `<upstream>_count`).
    #[arg(long, value_name = "NAME", default_value = "count")]
    tool: String,
}

#[derive(Debug, Args)]
struct TasksArgs {
    #[command(flatten)]
    target: Target,
    /// Tasks created one after another, each timed to its `CreateTaskResult`.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    creations: u64,
    /// Concurrent `tasks/get` pollers.
    #[arg(long, short = 'c', default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    clients: u64,
    /// Seconds the pollers poll for (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Events of the task whose stream is read.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    events: u64,
    /// Streams read (each live, then replayed); the medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
}

#[derive(Debug, Args)]
// `--help` goes to `tether-chaos` too (`tether bench help chaos` shows this command's).
#[command(disable_help_flag = true)]
struct ChaosArgs {
    /// Arguments for `tether-chaos`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// One scenario's result: named measurements in the order printed.
#[derive(Debug)]
pub(crate) struct Report {
    scenario: &'static str,
    target: String,
    metrics: Vec<(String, Value, &'static str)>,
}

impl Report {
    pub(crate) fn new(scenario: &'static str, target: impl Into<String>) -> Self {
        Self {
            scenario,
            target: target.into(),
            metrics: Vec::new(),
        }
    }

    /// Adds a measurement: `name` is its JSON key, `unit` is shown in the table.
    pub(crate) fn add(
        &mut self,
        name: impl Into<String>,
        value: impl Into<Value>,
        unit: &'static str,
    ) {
        self.metrics.push((name.into(), value.into(), unit));
    }

    fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("scenario".into(), self.scenario.into());
        object.insert("target".into(), self.target.clone().into());
        object.insert("ok".into(), true.into());
        for (name, value, _) in &self.metrics {
            object.insert(name.clone(), value.clone());
        }
        Value::Object(object)
    }

    fn print_table(&self) {
        println!("{} against {}", self.scenario, self.target);
        let width = self
            .metrics
            .iter()
            .map(|(n, ..)| n.len())
            .max()
            .unwrap_or(0);
        for (name, value, unit) in &self.metrics {
            let shown = match value {
                Value::Number(number) if number.is_f64() => {
                    let v = number.as_f64().unwrap_or_default();
                    if v.abs() >= 100.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.3}")
                    }
                }
                other => other.to_string(),
            };
            println!("  {name:<width$}  {shown:>14} {unit}");
        }
    }
}

/// Runs `tether bench`: 0 when the scenario completed with every event delivered, 1 when it
/// failed (the error says what went missing).
///
/// # Errors
///
/// Setup failures (the runtime, the spawned server). Scenario failures are printed and give
/// exit code 1.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Scenario::Chaos(chaos) = args.scenario {
        return run_chaos(chaos);
    }
    spawn::raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the bench runtime")?;
    let (scenario, json) = match &args.scenario {
        Scenario::Throughput(a) => ("throughput", a.target.output.json),
        Scenario::Fanout(a) => ("fanout", a.target.output.json),
        Scenario::Resume(a) => ("resume", a.target.output.json),
        Scenario::Idle(a) => ("idle", a.target.output.json),
        Scenario::Store(a) => ("store", a.output.json),
        Scenario::Roundtrip(a) => ("roundtrip", a.target.output.json),
        Scenario::Tasks(a) => ("tasks", a.target.output.json),
        Scenario::Chaos(_) => unreachable!("handled above"),
    };
    let outcome = runtime.block_on(async {
        match args.scenario {
            Scenario::Throughput(a) => {
                let server = Server::resolve(&a.target)?;
                scenarios::throughput(server.url(), a.n, a.runs, a.pid.or(server.pid())).await
            }
            Scenario::Fanout(a) => {
                let server = Server::resolve(&a.target)?;
                let pids: Vec<u32> = a.pid.iter().copied().chain(server.pid()).collect();
                scenarios::fanout(
                    server.url(),
                    a.sessions,
                    a.n,
                    a.latency_events,
                    a.interval_ms,
                    &pids,
                )
                .await
            }
            Scenario::Resume(a) => {
                let server = Server::resolve(&a.target)?;
                scenarios::resume(server.url(), a.events, a.samples, a.runs).await
            }
            Scenario::Idle(a) => {
                let server = Server::resolve(&a.target)?;
                let pid = a.pid.or(server.pid()).context(
                    "`idle` measures the server's memory: use --spawn, or --pid with --url",
                )?;
                scenarios::idle(server.url(), pid, a.sessions).await
            }
            Scenario::Store(a) => store::run(a.events, a.tasks, a.runs, a.redis.as_deref()).await,
            Scenario::Roundtrip(a) => {
                anyhow::ensure!(
                    a.seconds > 0.0 && a.seconds.is_finite(),
                    "--seconds must be a positive number"
                );
                let server = Server::resolve(&a.target)?;
                let pid = a.pid.or(server.pid());
                scenarios::roundtrip(server.url(), &a.tool, &a.clients, a.seconds, a.n, pid).await
            }
            Scenario::Tasks(a) => {
                anyhow::ensure!(
                    a.seconds > 0.0 && a.seconds.is_finite(),
                    "--seconds must be a positive number"
                );
                let server = Server::resolve(&a.target)?;
                tasks::run(
                    server.url(),
                    a.creations,
                    a.clients,
                    a.seconds,
                    a.events,
                    a.runs,
                )
                .await
            }
            Scenario::Chaos(_) => unreachable!("handled above"),
        }
    });
    match outcome {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                report.print_table();
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if json {
                let object = serde_json::json!({
                    "scenario": scenario,
                    "ok": false,
                    "error": format!("{error:#}"),
                });
                println!("{object}");
            }
            eprintln!("tether: bench {scenario} failed: {error:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The server a scenario runs against: the one at `--url`, or one spawned for the run.
enum Server {
    Remote(String),
    Spawned(spawn::SpawnedServer),
}

impl Server {
    fn resolve(target: &Target) -> anyhow::Result<Self> {
        if let Some(path) = &target.bearer_token_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--bearer-token-file {}", path.display()))?;
            let token = text.lines().next().unwrap_or_default().trim();
            anyhow::ensure!(
                !token.is_empty(),
                "--bearer-token-file {} is empty",
                path.display()
            );
            mcp::authorize_with(token)?;
        }
        match &target.url {
            Some(url) => Ok(Self::Remote(url.clone())),
            None => spawn::SpawnedServer::start(&target.store).map(Self::Spawned),
        }
    }

    fn url(&self) -> &str {
        match self {
            Self::Remote(url) => url,
            Self::Spawned(server) => server.url(),
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Self::Remote(_) => None,
            Self::Spawned(server) => Some(server.pid()),
        }
    }
}

/// Replaces this process with `tether-chaos ARGS…` (found beside the running executable,
/// else on `PATH`).
fn run_chaos(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt as _;
    let Some(chaos) = spawn::sibling_binary("tether-chaos") else {
        anyhow::bail!(
            "`tether bench chaos` needs the `tether-chaos` binary beside `tether` or on PATH; \
             build it with `cargo build --release -p tether-testkit --bin tether-chaos`"
        );
    };
    let error = std::process::Command::new(&chaos).args(&args.args).exec();
    Err(error).with_context(|| format!("running {}", chaos.display()))
}
