//! The process side of a bench: the server it measures (`--spawn` starts `tether serve`
//! from the directory of the running executable), that server's memory, and the bench's own
//! open-file limit.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The line `tether serve` prints once listening (docs/CONTRACTS.md#tether-serve), before the URL.
const READY_PREFIX: &str = "tether: serving ";

/// How long a spawned server may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Raises this process's open-file soft limit to its hard limit: each open stream is a socket,
/// and `idle` and `fanout` hold thousands. A spawned server inherits the raised limit.
/// Returns the new soft limit.
pub(crate) fn raise_open_file_limit() -> u64 {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 0,
    }
}

/// A binary that sits next to the running executable, else on `PATH`.
pub(crate) fn sibling_binary(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.is_file());
    beside.or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|path| path.is_file())
        })
    })
}

/// A `tether serve --bind 127.0.0.1:0 --store STORE` started for one bench run, stopped
/// (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub(crate) struct SpawnedServer {
    child: Child,
    url: String,
}

impl SpawnedServer {
    /// Starts the server from the running executable's directory and waits for its ready line.
    pub(crate) fn start(store: &str) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding the running executable")?;
        let tether = exe
            .parent()
            .map(|dir| dir.join("tether"))
            .filter(|path| path.is_file())
            .unwrap_or(exe);
        Self::start_binary(&tether, store)
    }

    fn start_binary(tether: &Path, store: &str) -> anyhow::Result<Self> {
        let mut child = Command::new(tether)
            .args(["serve", "--bind", "127.0.0.1:0", "--store", store])
            // Room for what the scenarios ask of it: `idle` with 10 000 sessions and streams,
            // `resume` with 100 000 stored events (the defaults would refuse both).
            .args([
                "--max-sessions",
                "20000",
                "--max-events-per-session",
                "200000",
                // `tasks` makes a task per creation, each held for its TTL.
                "--max-tasks-per-principal",
                "1000000",
            ])
            // Per-request logs would measure the logger.
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", tether.display()))?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading the server's ready line")?;
        let Some(url) = line.trim().strip_prefix(READY_PREFIX) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not print its ready line (got {line:?})",
                tether.display()
            );
        };
        Ok(Self {
            url: url.to_owned(),
            child,
        })
    }

    /// The MCP endpoint's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = std::time::Instant::now() + STOP_GRACE;
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU time process `pid` has used so far, user and system (`utime` + `stime` of
/// `/proc/<pid>/stat`, in clock ticks of 1/100 s: USER_HZ is 100 on Linux).
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields follow the command name, which is in parentheses and may hold spaces: utime and
    // stime are the 14th and 15th fields, the 12th and 13th after the name.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("no command name in /proc/<pid>/stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let tick = |at: usize| -> anyhow::Result<f64> {
        let ticks: u64 = fields
            .get(at)
            .and_then(|field| field.parse().ok())
            .context("no utime/stime in /proc/<pid>/stat")?;
        #[allow(clippy::cast_precision_loss)] // ticks of a benchmark run are far below 2^52
        Ok(ticks as f64 / USER_HZ)
    };
    Ok(tick(11)? + tick(12)?)
}

/// The whole machine's CPU time so far, from the first line of `/proc/stat`, as `(busy,
/// total)` clock ticks summed over every core: busy is user, nice, system and interrupt
/// time; total adds idle, iowait and steal. Two readings give how busy the machine was
/// between them, every process included.
pub(crate) fn machine_cpu_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .context("no cpu line in /proc/stat")?
        .split_whitespace()
        .map(|field| field.parse().context("a field of /proc/stat's cpu line"))
        .collect::<anyhow::Result<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = fields[..] else {
        anyhow::bail!("/proc/stat's cpu line has {} fields, not 8", fields.len());
    };
    let busy = user + nice + system + irq + softirq;
    Ok((busy, busy + idle + iowait + steal))
}

/// How busy the whole machine was between two [`machine_cpu_ticks`] readings: 0 idle, 1
/// every core busy.
#[allow(clippy::cast_precision_loss)] // ticks of a benchmark run are far below 2^52
pub(crate) fn machine_busy(before: (u64, u64), after: (u64, u64)) -> f64 {
    let busy = after.0.saturating_sub(before.0);
    let total = after.1.saturating_sub(before.1).max(1);
    busy as f64 / total as f64
}

/// The resident set size of process `pid` in bytes (`VmRSS` of `/proc/<pid>/status`).
pub(crate) fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .context("no VmRSS in /proc/<pid>/status")?;
    Ok(kib * 1024)
}
