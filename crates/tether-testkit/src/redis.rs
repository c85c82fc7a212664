//! A private `redis-server` for one test: its own free loopback port and temporary directory,
//! no persistence unless asked for, ready when it answers PING, killed and reaped on drop.
//!
//! Tests that need Redis fail (they never skip) when `redis-server` is missing; the error says
//! to run `scripts/setup.sh`. [`RedisServer::kill`] and [`RedisServer::restart`] (same port)
//! are for chaos tests of a briefly unavailable Redis. This module speaks just enough RESP to
//! check readiness; it is not a Redis client.
//!
//! The process plumbing (own process group, drained output, reaping) is the launcher's.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::process::Command;

use crate::launcher::{LogRing, Proc};

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the server to answer
/// PING: Redis is ready within milliseconds; 10 s covers a loaded CI machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Output lines kept for [`RedisServer::logs`]; Redis logs little at its default verbosity.
const LOG_LINES: usize = 500;

/// Lines of output quoted in an error.
const ERROR_TAIL_LINES: usize = 20;

/// Start attempts: a free port found by binding port 0 can be taken by someone else before
/// Redis binds it, in which case Redis exits and we try again (a new port for `start`, the
/// same one for `restart`).
const START_ATTEMPTS: u32 = 10;

/// Pause between readiness probes and between start attempts.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Limit on one readiness probe, so a stuck connection cannot eat the whole ready timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Largest reply the readiness probe accepts (`INFO server` is about 1 KiB).
const MAX_PROBE_REPLY: usize = 64 * 1024;

/// Why a Redis server could not be started or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// `redis-server` is not on `PATH`.
    #[error("redis-server is not on PATH; run scripts/setup.sh to install it")]
    NotInstalled,
    /// `redis-server` could not be executed for another reason.
    #[error("cannot run redis-server")]
    Spawn(#[source] io::Error),
    /// The server exited before it answered PING.
    #[error("redis-server exited ({status}) before answering PING; last output:\n{tail}")]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its output.
        tail: String,
    },
    /// The server did not answer PING within [`READY_TIMEOUT`]; it has been killed.
    #[error("redis-server did not answer PING within {waited:?}; last output:\n{tail}")]
    NotReady {
        /// The timeout that ran out.
        waited: Duration,
        /// The last lines of its output.
        tail: String,
    },
    /// Finding a port, waiting for or signalling the process failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// How to run the server; [`RedisServer::start`] uses the defaults.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisOptions {
    persistence: bool,
    extra_args: Vec<String>,
}

impl RedisOptions {
    /// No persistence, no extra arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns on the append-only file with `appendfsync always`, so every acknowledged write
    /// survives [`RedisServer::kill`] + [`RedisServer::restart`]; off by default (an RDB
    /// snapshot is never taken either way).
    pub fn persistence(mut self, on: bool) -> Self {
        self.persistence = on;
        self
    }

    /// Adds a `redis-server` argument, e.g. `.arg("--maxmemory").arg("10mb")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Starts a server with these options; see [`RedisServer::start`].
    pub async fn start(self) -> Result<RedisServer, RedisError> {
        RedisServer::start_with(self).await
    }
}

/// A running private `redis-server`. Dropping it kills and reaps it, then removes its
/// directory.
pub struct RedisServer {
    // Declared before `dir` so that the process is dead before its directory is removed.
    proc: Proc,
    dir: tempfile::TempDir,
    port: u16,
    options: RedisOptions,
    logs: LogRing,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("url", &self.url())
            .field("pid", &self.proc.pid)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts `redis-server` on a free port of 127.0.0.1 with a fresh temporary directory and
    /// no persistence, and returns once it answers PING.
    pub async fn start() -> Result<Self, RedisError> {
        Self::start_with(RedisOptions::new()).await
    }

    /// Like [`start`](Self::start), with options.
    pub async fn start_with(options: RedisOptions) -> Result<Self, RedisError> {
        let dir = tempfile::Builder::new()
            .prefix("tether-redis-")
            .tempdir()
            .map_err(|source| RedisError::Io {
                what: "creating the redis directory",
                source,
            })?;
        let logs = LogRing::new(LOG_LINES);
        let mut attempt = 1;
        loop {
            let port = free_port().map_err(|source| RedisError::Io {
                what: "finding a free port",
                source,
            })?;
            match launch(&options, dir.path(), port, &logs).await {
                Ok(proc) => {
                    return Ok(Self {
                        proc,
                        dir,
                        port,
                        options,
                        logs,
                    });
                }
                Err(RedisError::Exited { .. }) if attempt < START_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The port it listens on, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its working directory (where the append-only file lives with persistence on).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The pid of the most recently started process, also after it died.
    pub fn pid(&self) -> u32 {
        self.proc.pid
    }

    /// Whether the process is still alive; reaps it if it has exited.
    pub fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// Its last output lines (of every start), stream-tagged, for a failing test to print.
    pub fn logs(&self) -> String {
        self.logs.render(None, usize::MAX)
    }

    /// Sends PING and expects `+PONG`.
    pub async fn ping(&self) -> io::Result<()> {
        let reply = request(self.addr(), &["PING"]).await?;
        if reply == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "PING answered {:?}",
                String::from_utf8_lossy(&reply)
            )))
        }
    }

    /// SIGKILLs the server and reaps it; its port refuses connections afterwards.
    pub async fn kill(&mut self) -> Result<ExitStatus, RedisError> {
        self.proc.kill().await.map_err(|source| RedisError::Io {
            what: "killing redis-server",
            source,
        })
    }

    /// Starts the server again on the same port and directory (killing it first if it is
    /// running), and returns once it answers PING. Without persistence it comes back empty.
    pub async fn restart(&mut self) -> Result<(), RedisError> {
        if self.proc.is_running() {
            self.kill().await?;
        }
        let mut attempt = 1;
        loop {
            match launch(&self.options, self.dir.path(), self.port, &self.logs).await {
                Ok(proc) => {
                    self.proc = proc;
                    return Ok(());
                }
                // The port may still be held for a moment by someone else.
                Err(RedisError::Exited { .. }) if attempt < START_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(POLL_INTERVAL * 5).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A port that was free a moment ago. Whoever binds it next may lose a race, hence the
/// retries in the callers.
fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Runs one `redis-server` on `port` and waits until it answers.
async fn launch(
    options: &RedisOptions,
    dir: &Path,
    port: u16,
    logs: &LogRing,
) -> Result<Proc, RedisError> {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        // Foreground, so that the process we reap is the server itself.
        .args(["--daemonize", "no"])
        // No RDB snapshots: a test's data is throwaway and a background save only adds
        // forks and timing noise.
        .args(["--save", ""])
        .args([
            "--appendonly",
            if options.persistence { "yes" } else { "no" },
        ]);
    if options.persistence {
        // Every acknowledged write is on disk before the reply, so kill -9 loses nothing.
        cmd.args(["--appendfsync", "always"]);
    }
    cmd.args(&options.extra_args);
    let (mut proc, stdout_lines) =
        Proc::spawn(&mut cmd, "redis-server", logs).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => RedisError::NotInstalled,
            _ => RedisError::Spawn(e),
        })?;
    // Readiness is PING, not a log line.
    drop(stdout_lines);

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if !proc.is_running() {
            let status = proc.wait().await.map_err(|source| RedisError::Io {
                what: "waiting for redis-server",
                source,
            })?;
            proc.settle().await;
            return Err(RedisError::Exited {
                status,
                tail: proc.tail(ERROR_TAIL_LINES),
            });
        }
        if answers_as(addr, proc.pid).await {
            return Ok(proc);
        }
        if tokio::time::Instant::now() >= deadline {
            proc.kill().await.ok();
            proc.settle().await;
            return Err(RedisError::NotReady {
                waited: READY_TIMEOUT,
                tail: proc.tail(ERROR_TAIL_LINES),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Whether the server on `addr` answers PING and is process `pid`: when two tests race for
/// one port, the loser must not mistake the winner's Redis for its own.
async fn answers_as(addr: SocketAddr, pid: u32) -> bool {
    let probe = async {
        let pong = request(addr, &["PING"]).await?;
        let info = request(addr, &["INFO", "server"]).await?;
        let info = String::from_utf8_lossy(&info).into_owned();
        io::Result::Ok(pong == b"+PONG\r\n" && info.contains(&format!("\r\nprocess_id:{pid}\r\n")))
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, probe).await,
        Ok(Ok(true))
    )
}

/// Sends one command as a RESP array of bulk strings on a fresh connection and returns the
/// whole raw reply (a simple string, error, integer or bulk string; arrays are not needed).
async fn request(addr: SocketAddr, args: &[&str]) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes()).await?;
    let mut reply = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(len) = complete_reply_len(&reply) {
            reply.truncate(len);
            return Ok(reply);
        }
        if reply.len() > MAX_PROBE_REPLY {
            return Err(io::Error::other("reply too long"));
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
}

/// The length of the first complete non-array RESP reply in `buf`, if it is all there.
fn complete_reply_len(buf: &[u8]) -> Option<usize> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")? + 2;
    if buf.first() != Some(&b'$') {
        return Some(line_end);
    }
    let len: i64 = std::str::from_utf8(&buf[1..line_end - 2])
        .ok()?
        .parse()
        .ok()?;
    // `$-1` is the null bulk string: no body follows.
    let Ok(len) = usize::try_from(len) else {
        return Some(line_end);
    };
    let total = line_end + len + 2;
    (buf.len() >= total).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::complete_reply_len;

    #[test]
    fn reply_lengths() {
        assert_eq!(complete_reply_len(b"+PONG\r\n"), Some(7));
        assert_eq!(complete_reply_len(b"+PON"), None);
        assert_eq!(complete_reply_len(b"$3\r\nabc\r\n"), Some(9));
        assert_eq!(complete_reply_len(b"$3\r\nab"), None);
        assert_eq!(complete_reply_len(b"$-1\r\n"), Some(5));
        assert_eq!(complete_reply_len(b":12\r\n"), Some(5));
    }
}
