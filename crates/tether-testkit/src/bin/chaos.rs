//! `tether-chaos`: the chaos runner of `tether_testkit::chaos` as a program, for long runs
//! (`tether bench chaos` executes it).
//!
//! It parses flags into a `ChaosConfig`, runs it and prints the report to stdout. Exit codes:
//! 0 when no promise was broken (nothing lost, duplicated, reordered, hung, and no untyped
//! failure), 1 when one was (the seed and the fault log are printed) or the run could not be
//! set up, 2 for a usage error.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tether_testkit::chaos::{self, ChaosConfig, Store};
use tether_testkit::proxy::parse_seed;

const USAGE: &str = "\
usage: tether-chaos [options]

  --calls N                 calls in total (default 400)
  --concurrency C           concurrent workers, half through tether's client, half raw (default 12)
  --task-workers T          workers besides those whose calls run as 2026-07-28 tasks (default 4)
  --seed S                  seed (default: $CHAOS_SEED, else random); printed at start
  --store memory|sqlite|redis
                            the server's store (default memory); sqlite: the server is killed
                            and restarted; redis: two nodes, node A killed and replaced, then
                            redis-server restarted, alternately
  --retry-ms MS             the server's retry (default 20)
  --min-events N            smallest count per call (default 50)
  --max-events N            largest count per call (default 300)
  --max-interval-ms MS      largest interval_ms per call (default 2)
  --fault-probability P     chance of an ending fault per connection (default 0.6)
  --fault-offset-bytes B    mean bytes before an ending fault (default: 30 % of a mean stream)
  --refuse-every K          refuse one connection in about K (default 80; 0: never)
  --server-kills K          server-side faults (default: sqlite 1, redis 2, memory none)
  --deadline-secs S         a call running longer is hung (default 60)
  --tether-bin PATH         the tether binary (default: this workspace's build)
  --verbose                 print every failure as it happens
  -h, --help                this text
";

/// One flag's change to the configuration, applied once the store and seed are known.
type Setter = Box<dyn FnOnce(&mut ChaosConfig)>;

fn value<T: FromStr>(args: &mut impl Iterator<Item = String>, flag: &str) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text = args
        .next()
        .with_context(|| format!("{flag} needs a value"))?;
    text.parse()
        .map_err(|e| anyhow::anyhow!("{flag} {text:?}: {e}"))
}

fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Option<ChaosConfig>> {
    let mut args = args.into_iter();
    let mut store = Store::Memory;
    let mut seed = None;
    let mut sets: Vec<Setter> = Vec::new();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--store" => store = value(&mut args, &flag)?,
            "--seed" => {
                let text: String = value(&mut args, &flag)?;
                seed = Some(parse_seed(&text).with_context(|| format!("--seed {text:?}"))?);
            }
            "--calls" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.calls = v));
            }
            "--concurrency" => {
                let v: usize = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.concurrency = v.max(1)));
            }
            "--task-workers" => {
                let v: usize = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.task_workers = v));
            }
            "--retry-ms" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.retry_ms = v));
            }
            "--min-events" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.min_events = v));
            }
            "--max-events" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.max_events = v));
            }
            "--max-interval-ms" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.max_interval_ms = v));
            }
            "--fault-probability" => {
                let v: f64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.fault_probability = v));
            }
            "--fault-offset-bytes" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.fault_offset_bytes = Some(v)));
            }
            "--refuse-every" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.refuse_every = v));
            }
            "--server-kills" => {
                let v: u32 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.server_kills = v));
            }
            "--deadline-secs" => {
                let v: u64 = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| {
                    c.call_deadline = Duration::from_secs(v);
                }));
            }
            "--tether-bin" => {
                let v: String = value(&mut args, &flag)?;
                sets.push(Box::new(move |c| c.tether_bin = Some(v.into())));
            }
            "--verbose" => sets.push(Box::new(|c| c.verbose = true)),
            other => bail!("unknown argument {other:?}"),
        }
    }
    let seed = match seed {
        Some(seed) => seed,
        None => chaos::seed_from_env(chaos::random_seed())?,
    };
    let mut config = ChaosConfig::new(store, seed);
    for set in sets {
        set(&mut config);
    }
    if config.min_events > config.max_events {
        bail!("--min-events is above --max-events");
    }
    Ok(Some(config))
}

fn main() -> ExitCode {
    let config = match parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("tether-chaos: {error:#}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tether-chaos: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(chaos::run(config)) {
        Ok(report) => {
            // On a violation the run printed the fault log already (and wrote all of it to a
            // file).
            println!("{report}");
            if report.violations() > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("tether-chaos: {error:#}");
            ExitCode::FAILURE
        }
    }
}
