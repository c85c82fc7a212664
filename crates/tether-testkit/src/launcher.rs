//! Starts a server under test — `tether serve`, or one of our peer programs that follow the
//! same convention — as a child process, learns its URL from the ready line, and owns the
//! process until the test drops it.
//!
//! The convention (docs/CONTRACTS.md#tether-serve): the program takes `--bind ADDR` and, once
//! listening, prints one stdout line `<name>: serving <url>` (`tether: serving
//! http://127.0.0.1:PORT/mcp`, `peer: serving http://…`). Everything after that goes to a
//! bounded ring of recent output lines that a failing test can print ([`ServerProcess::logs`]);
//! the pipes are drained from the moment of spawn, so a chatty child never blocks on a full
//! pipe. The child runs in its own process group, and every path out of a
//! [`ServerProcess`] — [`kill`](ServerProcess::kill), [`terminate`](ServerProcess::terminate),
//! `Drop` — kills that group and reaps the child, so no test leaves a process behind.
//!
//! It also finds (and builds, once per test process) the programs cargo produces:
//! [`tether_bin`], [`cargo_bin`]. It does not speak HTTP to the server (that is `raw` and the
//! client's job) and does not know what the server serves.
//!
//! The process plumbing (`Proc`, `LogRing`) is shared with [`crate::redis`].

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long [`ServerSpec::start`] waits for the ready line unless told otherwise. A debug build
/// of `tether serve` starts in well under a second; 30 s leaves room for a loaded two-core CI
/// machine without letting a hung child stall the suite for minutes.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`ServerProcess::terminate`] waits after SIGTERM before it falls back to SIGKILL,
/// unless told otherwise. `tether serve` sends `retry` on open streams and closes them on
/// SIGTERM, which takes milliseconds; 10 s only matters when that shutdown is broken.
pub const DEFAULT_TERMINATE_TIMEOUT: Duration = Duration::from_secs(10);

/// Output lines kept per server (both streams, all restarts) for [`ServerProcess::logs`]:
/// enough to show the last requests before a failure, bounded so that a server logging at
/// `RUST_LOG=trace` for a long test cannot eat the test's memory.
pub const DEFAULT_LOG_LINES: usize = 2000;

/// Longest output line kept, in bytes; the rest of a longer line is dropped. A server that
/// logs a whole large body on one line must not defeat the ring's memory bound.
pub const MAX_LOG_LINE: usize = 8 * 1024;

/// Set this environment variable to `1` to echo every child output line to the test's stderr
/// as it arrives (`TETHER_TEST_LOG=1 cargo test …`).
pub const LOG_ECHO_ENV: &str = "TETHER_TEST_LOG";

/// Output lines quoted in a start error: the end of the output is where the reason is.
const ERROR_TAIL_LINES: usize = 20;

/// Restart attempts when the new process exits before its ready line, most likely because the
/// old port is still held (a lingering socket, or another test grabbed it for a moment).
const RESTART_ATTEMPTS: u32 = 20;

/// Pause between restart attempts, and the budget for waiting until the old port is free:
/// twenty tries 100 ms apart cover the usual short hold without hiding a real failure long.
const RESTART_RETRY_DELAY: Duration = Duration::from_millis(100);

/// How long `Drop` polls for the child to die after SIGKILL; SIGKILL cannot be ignored, so
/// this only runs out for a process stuck in uninterruptible sleep.
const DROP_REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait for the output pipes to reach end-of-file after the child exits, so that
/// an error's output tail includes the child's last words.
const DRAIN_SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the listen address goes on the child's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BindArg {
    /// Append `--bind ADDR` after the other arguments (`tether serve`, our peers).
    #[default]
    Flag,
    /// Replace `{bind}` (`HOST:PORT`), `{host}` and `{port}` in the arguments and in the
    /// values of [`ServerSpec::env`] variables, and append nothing (programs that spell the
    /// option differently, or take the port from the environment).
    Placeholders,
}

/// What to run and how: the program, its arguments, environment and limits.
///
/// The child inherits the test's environment (so `RUST_LOG` passes through) plus
/// [`env`](Self::env); its stdin is `/dev/null`.
#[derive(Debug, Clone)]
#[must_use]
pub struct ServerSpec {
    program: PathBuf,
    args: Vec<OsString>,
    bind_arg: BindArg,
    bind: SocketAddr,
    envs: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    ready_timeout: Duration,
    terminate_timeout: Duration,
    log_lines: usize,
    /// A private data directory, removed when the last clone of the spec is dropped.
    data_dir: Option<Arc<tempfile::TempDir>>,
}

impl ServerSpec {
    /// Runs `program` with `--bind 127.0.0.1:0` appended and the defaults above.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            bind_arg: BindArg::Flag,
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            envs: Vec::new(),
            current_dir: None,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            terminate_timeout: DEFAULT_TERMINATE_TIMEOUT,
            log_lines: DEFAULT_LOG_LINES,
            data_dir: None,
        }
    }

    /// `tether serve` from this workspace's build (see [`tether_bin`]); add options with
    /// [`arg`](Self::arg). Its data directory (`TETHER_DATA_DIR`, home of the default SQLite
    /// store) is a private temporary one, the same across [`ServerProcess::restart`], so
    /// tests never share a store or touch the user's.
    pub fn tether_serve() -> anyhow::Result<Self> {
        let data_dir = tempfile::Builder::new()
            .prefix("tether-data-")
            .tempdir()
            .context("creating a data directory")?;
        let mut spec = Self::new(tether_bin()?)
            .arg("serve")
            .env("TETHER_DATA_DIR", data_dir.path());
        spec.data_dir = Some(Arc::new(data_dir));
        Ok(spec)
    }

    /// The private data directory of a [`tether_serve`](Self::tether_serve) spec.
    #[must_use]
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref().map(tempfile::TempDir::path)
    }

    /// Adds one argument (before the appended `--bind ADDR`).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds several arguments (before the appended `--bind ADDR`).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Chooses where the listen address goes; default [`BindArg::Flag`].
    pub fn bind_arg(mut self, bind_arg: BindArg) -> Self {
        self.bind_arg = bind_arg;
        self
    }

    /// The address of the first start; default `127.0.0.1:0` (the child picks a free port).
    /// Restarts always use the address learned from the ready line.
    pub fn bind_addr(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// Sets an environment variable for the child, on top of the inherited environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Runs the child in `dir` instead of the test's working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// How long to wait for the ready line; default [`DEFAULT_READY_TIMEOUT`].
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// How long [`ServerProcess::terminate`] waits before SIGKILL; default
    /// [`DEFAULT_TERMINATE_TIMEOUT`].
    pub fn terminate_timeout(mut self, timeout: Duration) -> Self {
        self.terminate_timeout = timeout;
        self
    }

    /// How many output lines [`ServerProcess::logs`] keeps; default [`DEFAULT_LOG_LINES`].
    pub fn log_lines(mut self, lines: usize) -> Self {
        self.log_lines = lines.max(1);
        self
    }

    /// Starts the child and waits for its ready line; see [`ServerProcess::start`].
    pub async fn start(self) -> Result<ServerProcess, LaunchError> {
        ServerProcess::start(self).await
    }

    /// The program's file name, for messages and log prefixes.
    fn name(&self) -> String {
        self.program.file_name().map_or_else(
            || self.program.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }

    fn command(&self, bind: SocketAddr) -> Command {
        let substitute = |value: &OsStr| -> OsString {
            match (self.bind_arg, value.to_str()) {
                (BindArg::Placeholders, Some(text)) => text
                    .replace("{bind}", &bind.to_string())
                    .replace("{host}", &bind.ip().to_string())
                    .replace("{port}", &bind.port().to_string())
                    .into(),
                _ => value.to_owned(),
            }
        };
        let mut cmd = Command::new(&self.program);
        for arg in &self.args {
            cmd.arg(substitute(arg));
        }
        if self.bind_arg == BindArg::Flag {
            cmd.arg("--bind").arg(bind.to_string());
        }
        for (key, value) in &self.envs {
            cmd.env(key, substitute(value));
        }
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd
    }
}

/// Why a server could not be started, stopped or restarted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The program could not be executed at all.
    #[error("cannot run {program}")]
    Spawn {
        /// The program's file name.
        program: String,
        /// What `exec` said.
        #[source]
        source: io::Error,
    },
    /// No ready line within the timeout; the child has been killed.
    #[error("{program} printed no ready line within {waited:?}; last output:\n{tail}")]
    Timeout {
        /// The program's file name.
        program: String,
        /// The ready timeout that ran out.
        waited: Duration,
        /// The last lines of the child's stdout and stderr, one per line, stream-tagged.
        tail: String,
    },
    /// The child exited before printing its ready line.
    #[error("{program} exited ({status}) before its ready line; last output:\n{tail}")]
    Exited {
        /// The program's file name.
        program: String,
        /// How it exited.
        status: ExitStatus,
        /// The last lines of the child's stdout and stderr, one per line, stream-tagged.
        tail: String,
    },
    /// A `<name>: serving <url>` line whose URL has no usable `HOST:PORT`; the child has been
    /// killed.
    #[error("ready line {line:?} names no HOST:PORT")]
    BadReadyLine {
        /// The line as printed.
        line: String,
    },
    /// A restarted server announced a different URL than before.
    #[error("restarted server serves {got}, not {expected}")]
    UrlChanged {
        /// The URL of the first start.
        expected: String,
        /// The URL the restarted process announced.
        got: String,
    },
    /// Waiting for or signalling the child failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// A running server under test. Dropping it kills its process group and reaps it.
pub struct ServerProcess {
    spec: ServerSpec,
    proc: Proc,
    url: String,
    addr: SocketAddr,
    logs: LogRing,
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("program", &self.spec.program)
            .field("url", &self.url)
            .field("pid", &self.proc.pid)
            .finish_non_exhaustive()
    }
}

impl ServerProcess {
    /// Spawns the child (in its own process group) and returns once it printed its ready
    /// line. Fails with [`LaunchError::Exited`] as soon as the child exits, and with
    /// [`LaunchError::Timeout`] (after killing it) when no ready line came in time; both
    /// quote the end of its output.
    pub async fn start(spec: ServerSpec) -> Result<Self, LaunchError> {
        let logs = LogRing::new(spec.log_lines);
        let (proc, url, addr) = launch(&spec, spec.bind, &logs).await?;
        Ok(Self {
            spec,
            proc,
            url,
            addr,
            logs,
        })
    }

    /// The URL from the ready line, e.g. `http://127.0.0.1:40123/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `HOST:PORT` of [`url`](Self::url).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The pid of the most recently started process, also after it died (so a test can
    /// check that it is gone).
    pub fn pid(&self) -> u32 {
        self.proc.pid
    }

    /// Whether the process is still alive; reaps it if it has exited.
    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// The last output lines (of every start), each tagged `[stdout]`, `[stderr]` or
    /// `[launcher]`, for a failing test to print.
    pub fn logs(&self) -> String {
        self.logs.render(None, usize::MAX)
    }

    /// SIGKILLs the process group and reaps the child: a crash, as far as clients can tell.
    /// Returns how it exited (its earlier exit status if it was already dead).
    pub async fn kill(&mut self) -> Result<ExitStatus, LaunchError> {
        self.proc.kill().await.map_err(|source| LaunchError::Io {
            what: "killing the server",
            source,
        })
    }

    /// SIGTERMs the child and waits for it to exit, up to the terminate timeout, then
    /// SIGKILLs; anything left in its process group is killed either way. Returns how it
    /// exited (`tether serve` exits 0 on SIGTERM).
    pub async fn terminate(&mut self) -> Result<ExitStatus, LaunchError> {
        self.proc
            .terminate(self.spec.terminate_timeout)
            .await
            .map_err(|source| LaunchError::Io {
                what: "terminating the server",
                source,
            })
    }

    /// Starts the same command again (same arguments, so the same store path) on the same
    /// `HOST:PORT`, killing the current process first if it is still running (call
    /// [`terminate`](Self::terminate) first for a graceful restart). Returns once the new
    /// process printed its ready line with the same URL. If the port is still held it
    /// retries briefly.
    pub async fn restart(&mut self) -> Result<(), LaunchError> {
        if self.proc.is_running() {
            self.kill().await?;
        }
        let mut attempt = 1;
        loop {
            wait_until_bindable(self.addr).await;
            match launch(&self.spec, self.addr, &self.logs).await {
                Ok((proc, url, _)) => {
                    self.proc = proc;
                    if url != self.url {
                        return Err(LaunchError::UrlChanged {
                            expected: self.url.clone(),
                            got: url,
                        });
                    }
                    return Ok(());
                }
                Err(LaunchError::Exited { .. }) if attempt < RESTART_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(RESTART_RETRY_DELAY).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Spawns one process of `spec` listening on `bind` and waits for its ready line.
async fn launch(
    spec: &ServerSpec,
    bind: SocketAddr,
    logs: &LogRing,
) -> Result<(Proc, String, SocketAddr), LaunchError> {
    let program = spec.name();
    let (mut proc, mut stdout_lines) = Proc::spawn(&mut spec.command(bind), &program, logs)
        .map_err(|source| LaunchError::Spawn {
            program: program.clone(),
            source,
        })?;
    let deadline = tokio::time::Instant::now() + spec.ready_timeout;
    let mut stdout_open = true;
    loop {
        tokio::select! {
            // The ready line wins over a simultaneous exit only in the sense that it is
            // looked at first; a child that exits right after announcing is still caught by
            // the test's first request.
            biased;
            line = stdout_lines.recv(), if stdout_open => match line {
                Some(line) => {
                    let Some(url) = ready_url(&line) else { continue };
                    let Some(addr) = url_addr(url) else {
                        proc.kill().await.ok();
                        return Err(LaunchError::BadReadyLine { line });
                    };
                    // Dropping the receiver here tells the stdout drain to stop forwarding;
                    // it keeps filling the ring.
                    return Ok((proc, url.to_owned(), addr));
                }
                // Stdout closed without a ready line: keep waiting for the exit or timeout.
                None => stdout_open = false,
            },
            status = proc.wait() => {
                let status = status.map_err(|source| LaunchError::Io {
                    what: "waiting for the server",
                    source,
                })?;
                proc.settle().await;
                return Err(LaunchError::Exited {
                    program,
                    status,
                    tail: proc.tail(ERROR_TAIL_LINES),
                });
            }
            () = tokio::time::sleep_until(deadline) => {
                proc.kill().await.ok();
                proc.settle().await;
                return Err(LaunchError::Timeout {
                    program,
                    waited: spec.ready_timeout,
                    tail: proc.tail(ERROR_TAIL_LINES),
                });
            }
        }
    }
}

/// The URL of a ready line `<name>: serving <url>`, where `<name>` is one word.
fn ready_url(line: &str) -> Option<&str> {
    let (name, url) = line.split_once(": serving ")?;
    let url = url.trim();
    let named = !name.is_empty() && !name.contains(char::is_whitespace);
    let http = url.starts_with("http://") || url.starts_with("https://");
    (named && http).then_some(url)
}

/// The socket address of an `http(s)://HOST:PORT/…` URL; `localhost` means 127.0.0.1.
fn url_addr(url: &str) -> Option<SocketAddr> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    if let Ok(addr) = authority.parse() {
        return Some(addr);
    }
    let port = authority.strip_prefix("localhost:")?.parse().ok()?;
    Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// Waits (up to the restart budget) until `addr` can be bound again, so that a restart does
/// not spawn a server that is bound to fail. std's listener sets SO_REUSEADDR like tokio's
/// and the servers', so TIME_WAIT leftovers do not count as busy.
async fn wait_until_bindable(addr: SocketAddr) {
    for _ in 0..RESTART_ATTEMPTS {
        match std::net::TcpListener::bind(addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                tokio::time::sleep(RESTART_RETRY_DELAY).await;
            }
            _ => return,
        }
    }
}

/// Which kind of cargo target a program is, for [`cargo_bin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinKind {
    /// A `[[bin]]` target: `target/<profile>/<name>`.
    Bin,
    /// An example: `target/<profile>/examples/<name>`.
    Example,
}

/// Whether process `pid` is running: it exists and is not a zombie (a zombie has exited and
/// only waits to be reaped). For processes a test did not launch itself, such as the children
/// of a gateway; for its own, [`ServerProcess::is_running`].
#[must_use]
pub fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) STATE …`; comm may contain spaces and parentheses, so split after the
        // last `)`.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// Waits up to `timeout` until none of `pids` is alive ([`pid_alive`]); returns the ones
/// still alive at the deadline (empty: all gone).
pub async fn wait_pids_gone(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&pid| pid_alive(pid)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `tether` binary of this workspace, built for the current profile; see [`cargo_bin`].
pub fn tether_bin() -> anyhow::Result<PathBuf> {
    cargo_bin(BinKind::Bin, "tether-cli", "tether")
}

/// The path of program `name` of `package`, built in the same target directory and profile
/// as the running test.
///
/// It runs `cargo build -p PACKAGE --bin|--example NAME` once per test process even when the
/// file exists: cargo does nothing when it is up to date, and a test must never run a stale
/// build of the code it tests. Concurrent tests in one process wait for the one build; cargo's
/// own lock on the target directory serializes test processes.
pub fn cargo_bin(kind: BinKind, package: &str, name: &str) -> anyhow::Result<PathBuf> {
    type Built = Vec<((BinKind, String, String), PathBuf)>;
    static BUILT: Mutex<Built> = Mutex::new(Vec::new());

    let key = (kind, package.to_owned(), name.to_owned());
    // Held across the build on purpose: a second test asking for the same program waits
    // for it rather than starting a second cargo.
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == key) {
        return Ok(path.clone());
    }

    let layout = Layout::detect()?;
    let path = match kind {
        BinKind::Bin => layout.profile_dir.join(name),
        BinKind::Example => layout.profile_dir.join("examples").join(name),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let kind_flag = match kind {
        BinKind::Bin => "--bin",
        BinKind::Example => "--example",
    };
    let output = std::process::Command::new(&cargo)
        .current_dir(&layout.workspace_root)
        .args([
            "build",
            "--quiet",
            "-p",
            package,
            kind_flag,
            name,
            "--profile",
        ])
        .arg(&layout.profile)
        .arg("--target-dir")
        .arg(&layout.target_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} build", Path::new(&cargo).display()))?;
    if !output.status.success() {
        bail!(
            "cargo build -p {package} {kind_flag} {name} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if !path.is_file() {
        bail!(
            "cargo build -p {package} {kind_flag} {name} succeeded but {} does not exist",
            path.display()
        );
    }
    built.push((key, path.clone()));
    Ok(path)
}

/// Where cargo puts programs for the running test.
struct Layout {
    workspace_root: PathBuf,
    target_dir: PathBuf,
    /// `target/debug`, `target/release`, …
    profile_dir: PathBuf,
    /// The profile name for `--profile`: `dev` for `target/debug`.
    profile: String,
}

impl Layout {
    fn detect() -> anyhow::Result<Self> {
        let workspace_root = workspace_root()?;
        // A test binary lives in `<target>/<profile>/deps/`; the `.fingerprint` directory
        // marks the profile directory, which also covers `--target <triple>` layouts and
        // custom profiles.
        let from_exe = std::env::current_exe().ok().and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .take(3)
                .find(|dir| dir.join(".fingerprint").is_dir())
                .map(Path::to_path_buf)
        });
        let profile_dir = match from_exe {
            Some(dir) => dir,
            None => std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| workspace_root.join("target"), PathBuf::from)
                .join("debug"),
        };
        let target_dir = profile_dir
            .parent()
            .context("profile directory has no parent")?
            .to_path_buf();
        let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
            Some("debug") | None => "dev".to_owned(),
            Some(other) => other.to_owned(),
        };
        Ok(Self {
            workspace_root,
            target_dir,
            profile_dir,
            profile,
        })
    }
}

/// The directory of the workspace `Cargo.toml`, found by walking up from this crate.
fn workspace_root() -> anyhow::Result<PathBuf> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in manifest_dir.ancestors() {
        let manifest = dir.join("Cargo.toml");
        if let Ok(text) = std::fs::read_to_string(&manifest)
            && text.lines().any(|l| l.trim() == "[workspace]")
        {
            return Ok(dir.to_path_buf());
        }
    }
    bail!("no workspace Cargo.toml above {}", manifest_dir.display())
}

// ---------------------------------------------------------------------------------------------
// Process plumbing shared with `redis`.

/// Which pipe (or the launcher itself) a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
    Launcher,
}

impl Stream {
    fn tag(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::Launcher => "launcher",
        }
    }
}

struct LogLine {
    /// Which start of the server printed it (restarts count up), so an error quotes only the
    /// attempt that failed.
    generation: u32,
    stream: Stream,
    text: String,
}

struct Ring {
    lines: VecDeque<LogLine>,
    capacity: usize,
    generation: u32,
}

/// The bounded ring of recent output lines of one server, across its restarts.
#[derive(Clone)]
pub(crate) struct LogRing {
    inner: Arc<Mutex<Ring>>,
    echo: bool,
}

impl LogRing {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Ring {
                lines: VecDeque::with_capacity(capacity.min(1024)),
                capacity: capacity.max(1),
                generation: 0,
            })),
            echo: std::env::var_os(LOG_ECHO_ENV).is_some_and(|v| v == "1"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_generation(&self) -> u32 {
        let mut ring = self.lock();
        ring.generation += 1;
        ring.generation
    }

    fn push(&self, generation: u32, stream: Stream, label: &str, text: String) {
        if self.echo {
            eprintln!("[{label} {}] {text}", stream.tag());
        }
        let mut ring = self.lock();
        if ring.lines.len() == ring.capacity {
            ring.lines.pop_front();
        }
        ring.lines.push_back(LogLine {
            generation,
            stream,
            text,
        });
    }

    /// The last `max` lines (of one generation, or all), one per line, stream-tagged.
    pub(crate) fn render(&self, generation: Option<u32>, max: usize) -> String {
        let ring = self.lock();
        let selected: Vec<&LogLine> = ring
            .lines
            .iter()
            .filter(|l| generation.is_none_or(|g| l.generation == g))
            .collect();
        let skip = selected.len().saturating_sub(max);
        let mut out = String::new();
        for line in &selected[skip..] {
            out.push_str(&format!("[{}] {}\n", line.stream.tag(), line.text));
        }
        if out.is_empty() {
            out.push_str("(no output)\n");
        }
        out
    }
}

/// One child process: spawned in its own process group with its output drained into a
/// [`LogRing`], killed and reaped on every way out.
pub(crate) struct Proc {
    /// `None` once reaped.
    child: Option<Child>,
    pub(crate) pid: u32,
    status: Option<ExitStatus>,
    generation: u32,
    logs: LogRing,
    drains: Vec<JoinHandle<()>>,
}

impl Proc {
    /// Spawns `cmd` (stdin null, stdout and stderr piped, own process group). Stdout lines
    /// are also sent to the returned receiver until it is dropped.
    pub(crate) fn spawn(
        cmd: &mut Command,
        label: &str,
        logs: &LogRing,
    ) -> io::Result<(Self, mpsc::UnboundedReceiver<String>)> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that killing the group also takes the processes it started
            // (a gateway's stdio server, a shell's background job).
            .process_group(0)
            // Backstop only: `Drop` below already kills and reaps.
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pid = child.id().unwrap_or_default();
        let generation = logs.next_generation();
        let label = format!("{label}#{pid}");
        logs.push(
            generation,
            Stream::Launcher,
            &label,
            format!("started pid {pid}"),
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let mut drains = Vec::with_capacity(2);
        if let Some(stdout) = child.stdout.take() {
            drains.push(drain(
                stdout,
                Stream::Stdout,
                generation,
                label.clone(),
                logs.clone(),
                Some(tx),
            ));
        }
        if let Some(stderr) = child.stderr.take() {
            drains.push(drain(
                stderr,
                Stream::Stderr,
                generation,
                label,
                logs.clone(),
                None,
            ));
        }
        let proc = Self {
            child: Some(child),
            pid,
            status: None,
            generation,
            logs: logs.clone(),
            drains,
        };
        Ok((proc, rx))
    }

    /// Whether the child is alive; reaps it (and kills its group) if it has exited.
    pub(crate) fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.reaped(status);
                false
            }
            // Only possible if someone else reaped it; either way it is not ours to run.
            Err(_) => false,
        }
    }

    /// Waits for the child to exit and reaps it.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => {
                let status = child.wait().await?;
                self.reaped(status);
                Ok(status)
            }
            None => Ok(self.last_status()),
        }
    }

    /// SIGKILLs the process group and reaps the child.
    pub(crate) async fn kill(&mut self) -> io::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return Ok(self.last_status());
        };
        // The group first, while the leader is unreaped and so still pins the group id.
        signal_group(self.pid, Signal::SIGKILL);
        // By pid too, in case the child left our group (setsid).
        child.start_kill().ok();
        self.wait().await
    }

    /// SIGTERMs the child, waits up to `grace`, then SIGKILLs; reaps it either way.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if self.child.is_none() {
            return Ok(self.last_status());
        }
        if let Ok(raw) = i32::try_from(self.pid) {
            signal::kill(Pid::from_raw(raw), Signal::SIGTERM).ok();
        }
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(status) => status,
            Err(_elapsed) => self.kill().await,
        }
    }

    /// Waits briefly for the output pipes to close, so that [`tail`](Self::tail) holds the
    /// child's last lines. Call after the child has exited.
    pub(crate) async fn settle(&mut self) {
        let deadline = tokio::time::Instant::now() + DRAIN_SETTLE_TIMEOUT;
        for drain in &mut self.drains {
            tokio::time::timeout_at(deadline, drain).await.ok();
        }
        self.drains.clear();
    }

    /// The last `max` output lines of this process.
    pub(crate) fn tail(&self, max: usize) -> String {
        self.logs.render(Some(self.generation), max)
    }

    fn reaped(&mut self, status: ExitStatus) {
        self.child = None;
        self.status = Some(status);
        // The leader is gone; take whatever it started with it. Right after the reap the
        // group id cannot have been handed out again yet.
        signal_group(self.pid, Signal::SIGKILL);
    }

    fn last_status(&self) -> ExitStatus {
        // Every path that clears `child` sets `status` first.
        self.status.unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            signal_group(self.pid, Signal::SIGKILL);
            child.start_kill().ok();
            // Drop cannot await; poll the (non-blocking) reap instead. SIGKILL is prompt, so
            // this normally takes a millisecond or two.
            let deadline = Instant::now() + DROP_REAP_TIMEOUT;
            while let Ok(None) = child.try_wait() {
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for drain in &self.drains {
            drain.abort();
        }
    }
}

fn signal_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid)
        && raw > 0
    {
        // ESRCH (the group is already empty) is the expected outcome, not an error.
        signal::killpg(Pid::from_raw(raw), signal).ok();
    }
}

/// Copies lines from a child pipe into the ring (and, for stdout, to the ready-line waiter)
/// until end-of-file. Running from spawn on means the child never blocks on a full pipe.
fn drain<R>(
    pipe: R,
    stream: Stream,
    generation: u32,
    label: String,
    logs: LogRing,
    mut forward: Option<mpsc::UnboundedSender<String>>,
) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        while let Ok(true) = read_line_bounded(&mut reader, &mut line).await {
            let text = String::from_utf8_lossy(&line).into_owned();
            if let Some(tx) = &forward
                && tx.send(text.clone()).is_err()
            {
                forward = None;
            }
            logs.push(generation, stream, &label, text);
        }
    })
}

/// Reads one line into `line` (without its `\n` or `\r\n`), keeping at most [`MAX_LOG_LINE`]
/// bytes of it. Returns `false` at end-of-file with nothing read.
async fn read_line_bounded<R>(reader: &mut R, line: &mut Vec<u8>) -> io::Result<bool>
where
    R: AsyncBufRead + Unpin,
{
    line.clear();
    let mut read_any = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let newline = chunk.iter().position(|&b| b == b'\n');
        let content = &chunk[..newline.unwrap_or(chunk.len())];
        let room = MAX_LOG_LINE.saturating_sub(line.len());
        line.extend_from_slice(&content[..content.len().min(room)]);
        let used = newline.map_or(chunk.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_forms() {
        assert_eq!(
            ready_url("tether: serving http://127.0.0.1:8080/mcp"),
            Some("http://127.0.0.1:8080/mcp")
        );
        assert_eq!(
            ready_url("peer: serving http://127.0.0.1:9/mcp\r"),
            Some("http://127.0.0.1:9/mcp")
        );
        // A log line that merely mentions serving is not a ready line.
        assert_eq!(
            ready_url("2025-01-01 INFO tether: serving http://127.0.0.1:1/"),
            None
        );
        assert_eq!(ready_url("tether: serving requests"), None);
        assert_eq!(ready_url(": serving http://127.0.0.1:1/"), None);
    }

    #[test]
    fn url_addresses() {
        assert_eq!(
            url_addr("http://127.0.0.1:8080/mcp"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            url_addr("http://[::1]:81"),
            Some("[::1]:81".parse().unwrap())
        );
        assert_eq!(
            url_addr("http://localhost:82/x?y"),
            Some("127.0.0.1:82".parse().unwrap())
        );
        assert_eq!(url_addr("http://example.com/mcp"), None);
    }

    #[tokio::test]
    async fn long_lines_are_cut_and_crlf_stripped() {
        let mut input = vec![b'a'; MAX_LOG_LINE + 100];
        input.extend_from_slice(b"\r\nnext\nlast");
        let mut reader = BufReader::with_capacity(64, &input[..]);
        let mut line = Vec::new();
        assert!(read_line_bounded(&mut reader, &mut line).await.unwrap());
        assert_eq!(line.len(), MAX_LOG_LINE);
        assert!(read_line_bounded(&mut reader, &mut line).await.unwrap());
        assert_eq!(line, b"next");
        assert!(read_line_bounded(&mut reader, &mut line).await.unwrap());
        assert_eq!(line, b"last");
        assert!(!read_line_bounded(&mut reader, &mut line).await.unwrap());
    }

    #[test]
    fn ring_keeps_the_last_lines() {
        let ring = LogRing::new(3);
        let generation = ring.next_generation();
        for i in 0..5 {
            ring.push(generation, Stream::Stderr, "t", format!("line {i}"));
        }
        assert_eq!(
            ring.render(None, usize::MAX),
            "[stderr] line 2\n[stderr] line 3\n[stderr] line 4\n"
        );
        assert_eq!(ring.render(Some(generation), 1), "[stderr] line 4\n");
    }
}
