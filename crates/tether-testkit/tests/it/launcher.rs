//! The server launcher against a real child process: `examples/ready_server.rs`, a tiny HTTP
//! server that follows the `tether serve` ready-line convention, and a few shell scripts that
//! break it.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tether_testkit::launcher::{BinKind, BindArg, LaunchError, ServerSpec, cargo_bin};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

fn ready_server() -> PathBuf {
    cargo_bin(BinKind::Example, "tether-testkit", "ready_server").expect("build ready_server")
}

/// A minimal `GET` over a fresh connection: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {response:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    Ok((status, body.to_owned()))
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Gone, or a zombie waiting for init: either way no longer running.
fn proc_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_url_comes_from_the_ready_line_and_the_server_answers_there() {
    let server = ServerSpec::new(ready_server()).start().await.unwrap();
    let url = server.url();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    assert_ne!(server.addr().port(), 0);
    assert_eq!(url, format!("http://{}/mcp", server.addr()));

    let (status, body) = get(server.addr(), "/mcp").await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, format!("pid={} starts=1\n", server.pid()));
    // Output before and after the ready line is kept; the request's log line is read from
    // the pipe concurrently with the response, so it may trail it a little.
    assert!(server.logs().contains("[stdout] tether: serving http://"));
    eventually("the request's log line arrives", || {
        server
            .logs()
            .contains("[stderr] ready_server: GET /mcp HTTP/1.1")
    })
    .await;
}

#[tokio::test]
async fn kill_makes_the_port_refuse_connections_and_reaps_the_process() {
    let mut server = ServerSpec::new(ready_server()).start().await.unwrap();
    let pid = server.pid();
    assert!(server.is_running());

    let status = server.kill().await.unwrap();
    assert_eq!(status.signal(), Some(9));
    assert!(!server.is_running());
    // Reaped, not a zombie: the /proc entry is gone as soon as kill returns.
    assert!(!proc_exists(pid), "pid {pid} still in /proc");
    let err = TcpStream::connect(server.addr()).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    // Killing a dead server is a no-op that reports the same exit.
    assert_eq!(server.kill().await.unwrap().signal(), Some(9));
}

#[tokio::test]
async fn restart_comes_back_on_the_same_port_with_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut server = ServerSpec::new(ready_server())
        .arg("--state-file")
        .arg(&state)
        .start()
        .await
        .unwrap();
    let (url, addr, first_pid) = (server.url().to_owned(), server.addr(), server.pid());
    assert_eq!(
        get(addr, "/").await.unwrap().1,
        format!("pid={first_pid} starts=1\n")
    );

    server.kill().await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(server.url(), url);
    assert_ne!(server.pid(), first_pid);
    let (status, body) = get(addr, "/").await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, format!("pid={} starts=2\n", server.pid()));

    // Restarting a running server kills it first.
    let second_pid = server.pid();
    server.restart().await.unwrap();
    assert!(!proc_exists(second_pid));
    assert_eq!(
        get(addr, "/").await.unwrap().1,
        format!("pid={} starts=3\n", server.pid())
    );
    let logs = server.logs();
    assert_eq!(logs.matches("tether: serving").count(), 3, "{logs}");
}

#[tokio::test]
async fn terminate_sends_sigterm_and_falls_back_to_sigkill() {
    let mut server = ServerSpec::new(ready_server()).start().await.unwrap();
    let pid = server.pid();
    assert_eq!(server.terminate().await.unwrap().signal(), Some(15));
    assert!(!proc_exists(pid));

    // A server that ignores SIGTERM (the disposition survives exec) gets SIGKILL after the
    // terminate timeout.
    let mut stubborn = ServerSpec::new("sh")
        .args(["-c", "trap '' TERM; exec \"$0\" \"$@\""])
        .arg(ready_server())
        .terminate_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(stubborn.terminate().await.unwrap().signal(), Some(9));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!proc_exists(stubborn.pid()));
}

#[tokio::test]
async fn no_ready_line_is_a_timeout_that_quotes_the_stderr_tail() {
    let started = Instant::now();
    let err = ServerSpec::new("sh")
        .args([
            "-c",
            "echo 'opening store at /tmp/x' >&2; echo 'not a ready line'; echo 'still migrating' >&2; \
             sleep 1000",
        ])
        .ready_timeout(Duration::from_millis(500))
        .start()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(err, LaunchError::Timeout { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("no ready line within 500ms"), "{message}");
    assert!(message.contains("[stderr] still migrating"), "{message}");
    assert!(message.contains("[stdout] not a ready line"), "{message}");
}

#[tokio::test]
async fn an_early_exit_fails_fast_with_the_exit_status() {
    let started = Instant::now();
    let err = ServerSpec::new("sh")
        .args([
            "-c",
            "echo 'cannot open store: permission denied' >&2; exit 3",
        ])
        .start()
        .await
        .unwrap_err();
    // Far below the 30 s ready timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
    let LaunchError::Exited { status, tail, .. } = &err else {
        panic!("expected Exited, got {err:?}");
    };
    assert_eq!(status.code(), Some(3));
    assert!(
        tail.contains("cannot open store: permission denied"),
        "{tail}"
    );
    assert!(err.to_string().contains("exit status: 3"), "{err}");

    let err = ServerSpec::new("/nonexistent/tether")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, LaunchError::Spawn { .. }), "{err:?}");
}

#[tokio::test]
async fn drop_kills_the_process_group_and_reaps_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    // The shell starts a background grandchild in the same process group, then becomes the
    // server.
    let server = ServerSpec::new("sh")
        .args([
            "-c",
            "sleep 1000 & echo $! > \"$PID_FILE\"; exec \"$0\" \"$@\"",
        ])
        .arg(ready_server())
        .env("PID_FILE", &pid_file)
        .start()
        .await
        .unwrap();
    let pid = server.pid();
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!proc_dead(grandchild));
    let addr = server.addr();

    drop(server);
    assert!(!proc_exists(pid), "server pid {pid} not reaped");
    // The grandchild is not ours to reap; it must at least be dead.
    eventually("the grandchild is dead", || proc_dead(grandchild)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn output_is_drained_so_a_chatty_server_never_blocks() {
    let server = ServerSpec::new(ready_server())
        .log_lines(100)
        .start()
        .await
        .unwrap();
    // About 600 KB of stderr, ten times a pipe buffer: the answer only comes if someone
    // keeps reading.
    let (status, _) =
        tokio::time::timeout(Duration::from_secs(20), get(server.addr(), "/noise/60000"))
            .await
            .expect("the server blocked on its stderr pipe")
            .unwrap();
    assert_eq!(status, 200);
    eventually("the request's log line arrives", || {
        server.logs().contains("ready_server: GET /noise/60000")
    })
    .await;
    let logs = server.logs();
    assert_eq!(logs.lines().count(), 100);
    assert!(logs.contains("[stderr] noise 59999"), "{logs}");
}

#[tokio::test]
async fn placeholders_put_the_address_where_the_program_wants_it() {
    let server = ServerSpec::new(ready_server())
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}"])
        .start()
        .await
        .unwrap();
    assert_eq!(get(server.addr(), "/").await.unwrap().0, 200);

    // In environment values too, and `{host}`/`{port}` separately; restart reuses the port.
    let mut server = ServerSpec::new("sh")
        .bind_arg(BindArg::Placeholders)
        .args(["-c", "exec \"$0\" --bind \"$LISTEN_HOST:$LISTEN_PORT\""])
        .arg(ready_server())
        .env("LISTEN_HOST", "{host}")
        .env("LISTEN_PORT", "{port}")
        .start()
        .await
        .unwrap();
    let url = server.url().to_owned();
    server.restart().await.unwrap();
    assert_eq!(server.url(), url);
    assert_eq!(get(server.addr(), "/").await.unwrap().0, 200);
}

#[tokio::test]
async fn any_program_name_may_announce_itself() {
    let server = ServerSpec::new("sh")
        .args([
            "-c",
            "echo 'peer: starting'; echo 'peer: serving http://127.0.0.1:1/mcp'; sleep 1000",
        ])
        .start()
        .await
        .unwrap();
    assert_eq!(server.url(), "http://127.0.0.1:1/mcp");
    assert_eq!(server.addr(), "127.0.0.1:1".parse().unwrap());
}
