//! `tether-fault-proxy`: the fault proxy of `tether_testkit::proxy` as a process, for scripts
//! and peers that are not Rust tests.
//!
//! It parses flags into a `ProxyConfig`, prints `tether-fault-proxy: listening on ADDR` on
//! stdout once it accepts, and runs until SIGINT, SIGTERM or (unless `--ignore-stdin`) stdin
//! reaches EOF, so a parent that dies takes it along. It then prints the fault log to stderr
//! and the seed and counters as one JSON line to stdout. Everything it does is a library call.
//!
//! Exit codes: 0 after a normal stop, 1 if the proxy could not start (non-loopback address,
//! bind failure, bad `TETHER_TEST_SEED`), 2 for a usage error.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use tether_testkit::proxy::{
    ByteFault, FaultPlan, FaultProxy, ProxyConfig, SlowFault, TruncateFault, parse_seed,
};
use tokio::sync::oneshot;

const USAGE: &str = "\
usage: tether-fault-proxy --upstream ADDR [options]

  --listen ADDR                 listen address (loopback only; default 127.0.0.1:0)
  --upstream ADDR               where to forward (loopback only; required)
  --seed N                      seed of the fault draws (default: $TETHER_TEST_SEED, else random)

  --cut-after-bytes N           close both sides (FIN) after N server->client bytes
  --reset-after-bytes N         reset the client (RST) after N bytes
  --stall-after-bytes N         stop forwarding after N bytes, sockets left open
  --stall-for-ms MS             close a stalled connection after MS (default: never)
  --truncate-after-events K     cut in the middle of the SSE event after K complete ones
  --slow-bytes-per-sec R        pace server->client bytes to R bytes/s
    for KIND in cut, reset, stall, truncate, slow:
  --KIND-jitter J               spread the offset over N +- J (not for slow)
  --KIND-probability P          apply to a connection with probability P (default 1)
  --max-KINDs N                 inject at most N times (--max-slow for slow)

  --refuse-for-ms MS            refuse new connections for MS after start
  --refuse-next N               refuse the next N connections
  --ignore-stdin                do not stop when stdin closes
  -h, --help                    this text
";

/// A fault kind's flags, collected before they are known to be consistent.
#[derive(Default)]
struct KindFlags {
    base: Option<u64>,
    jitter: Option<u64>,
    probability: Option<f64>,
    max: Option<u32>,
}

impl KindFlags {
    fn byte_fault(&self, name: &str) -> anyhow::Result<Option<ByteFault>> {
        let Some(base) = self.base else {
            self.no_modifiers(name)?;
            return Ok(None);
        };
        let mut fault = ByteFault::after(base).with_jitter(self.jitter.unwrap_or(0));
        fault.probability = self.probability.unwrap_or(1.0);
        fault.max = self.max;
        Ok(Some(fault))
    }

    fn no_modifiers(&self, name: &str) -> anyhow::Result<()> {
        if self.jitter.is_some() || self.probability.is_some() || self.max.is_some() {
            bail!("--{name}-* modifiers need the {name} fault itself");
        }
        Ok(())
    }
}

struct Args {
    config: ProxyConfig,
    refuse_for: Option<Duration>,
    refuse_next: u64,
    watch_stdin: bool,
}

/// `Ok(None)` means `--help`.
fn parse_args(mut args: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    fn value<T: FromStr>(flag: &str, v: Option<String>) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let v = v.with_context(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|e| anyhow::anyhow!("{flag} {v:?}: {e}"))
    }

    let mut listen: SocketAddr = "127.0.0.1:0".parse().expect("valid literal");
    let mut upstream = None;
    let mut seed = None;
    let [mut cut, mut reset, mut stall, mut truncate, mut slow] =
        std::array::from_fn(|_| KindFlags::default());
    let mut stall_for = None;
    let mut refuse_for = None;
    let mut refuse_next = 0;
    let mut watch_stdin = true;

    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg, None),
        };
        let mut next = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => listen = value(&flag, next())?,
            "--upstream" => upstream = Some(value(&flag, next())?),
            "--seed" => {
                let v: String = value(&flag, next())?;
                seed = Some(parse_seed(&v).with_context(|| format!("--seed {v:?}"))?);
            }
            "--cut-after-bytes" => cut.base = Some(value(&flag, next())?),
            "--reset-after-bytes" => reset.base = Some(value(&flag, next())?),
            "--stall-after-bytes" => stall.base = Some(value(&flag, next())?),
            "--truncate-after-events" => truncate.base = Some(value(&flag, next())?),
            "--slow-bytes-per-sec" => slow.base = Some(value(&flag, next())?),
            "--stall-for-ms" => {
                stall_for = Some(Duration::from_millis(value(&flag, next())?));
            }
            "--refuse-for-ms" => {
                refuse_for = Some(Duration::from_millis(value(&flag, next())?));
            }
            "--refuse-next" => refuse_next = value(&flag, next())?,
            "--ignore-stdin" => watch_stdin = false,
            other => {
                let kinds = [
                    ("cut", &mut cut),
                    ("reset", &mut reset),
                    ("stall", &mut stall),
                    ("truncate", &mut truncate),
                    ("slow", &mut slow),
                ];
                let mut matched = false;
                for (name, kind) in kinds {
                    let max_flag = if name == "slow" {
                        "--max-slow".to_owned()
                    } else {
                        format!("--max-{name}s")
                    };
                    if other == format!("--{name}-jitter") && name != "slow" {
                        kind.jitter = Some(value(&flag, next())?);
                    } else if other == format!("--{name}-probability") {
                        kind.probability = Some(value(&flag, next())?);
                    } else if other == max_flag {
                        kind.max = Some(value(&flag, next())?);
                    } else {
                        continue;
                    }
                    matched = true;
                    break;
                }
                if !matched {
                    bail!("unknown flag {other:?}");
                }
            }
        }
    }

    let upstream = upstream.context("--upstream is required")?;
    if stall_for.is_some() && stall.base.is_none() {
        bail!("--stall-for-ms needs --stall-after-bytes");
    }
    let plan = FaultPlan {
        cut: cut.byte_fault("cut")?,
        reset: reset.byte_fault("reset")?,
        stall: stall.byte_fault("stall")?,
        stall_for,
        truncate: truncate.byte_fault("truncate")?.map(|f| TruncateFault {
            after_events: f.after_bytes,
            jitter: f.jitter,
            probability: f.probability,
            max: f.max,
        }),
        slow: slow.byte_fault("slow")?.map(|f| SlowFault {
            bytes_per_sec: f.after_bytes,
            probability: f.probability,
            max: f.max,
        }),
    };
    plan.validate()?;
    Ok(Some(Args {
        config: ProxyConfig {
            listen,
            upstream,
            plan,
            seed,
        },
        refuse_for,
        refuse_next,
        watch_stdin,
    }))
}

/// Resolves on SIGINT, SIGTERM or, when watched, stdin EOF.
async fn stop_requested(watch_stdin: bool) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let stdin_eof = async {
        if !watch_stdin {
            return std::future::pending().await;
        }
        let (eof_tx, eof_rx) = oneshot::channel::<()>();
        // A plain thread, not tokio's blocking pool: a read blocked on stdin must not hold up
        // the runtime's shutdown when a signal ends the process.
        std::thread::spawn(move || {
            let mut sink = [0u8; 1024];
            let mut stdin = std::io::stdin().lock();
            while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
            let _ = eof_tx.send(());
        });
        let _ = eof_rx.await;
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
        () = stdin_eof => {}
    }
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let proxy = FaultProxy::start_with(args.config)
        .await
        .context("starting the fault proxy")?;
    if let Some(window) = args.refuse_for {
        proxy.refuse_for(window);
    }
    if args.refuse_next > 0 {
        proxy.refuse_next(args.refuse_next);
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "tether-fault-proxy: listening on {}", proxy.addr())?;
        out.flush()?;
    }
    stop_requested(args.watch_stdin).await?;

    let seed = proxy.seed();
    let log = proxy.fault_log();
    let counters = proxy.shutdown().await;
    for event in &log {
        eprintln!("tether-fault-proxy: {event}");
    }
    let mut json = serde_json::Map::new();
    json.insert("seed".into(), seed.into());
    for (name, value) in counters.fields() {
        json.insert(name.into(), value.into());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::Value::Object(json))?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tether-fault-proxy: {e:#}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tether-fault-proxy: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tether-fault-proxy: {e:#}");
            ExitCode::from(1)
        }
    }
}
