//! `tether serve` as a process: the ready line, a `count` call over the raw reader, graceful
//! exit 0 on SIGTERM and SIGINT, `--bind 127.0.0.1:0`, the flags that shape the endpoint,
//! and `--poll-after-secs` polling (docs/CONTRACTS.md#tether-serve). Authentication is
//! `auth.rs`'s.

use std::{process::Output, time::Duration};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use tether_testkit::{
    launcher::{ServerProcess, ServerSpec, tether_bin},
    raw::{RawClient, SseItem},
};

/// How long a refused invocation may take: it must fail before binding anything.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `tether ARGS` to completion (killed after [`REFUSAL_TIMEOUT`]).
async fn run_tether(args: &[&str]) -> anyhow::Result<Output> {
    // Never the user's data dir, even when a flag is wrongly accepted.
    let data_dir = tempfile::tempdir()?;
    let child = tokio::process::Command::new(tether_bin()?)
        .args(args)
        .env("TETHER_DATA_DIR", data_dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("spawning tether")?;
    tokio::time::timeout(REFUSAL_TIMEOUT, child.wait_with_output())
        .await
        .with_context(|| format!("tether {args:?} did not exit"))?
        .context("waiting for tether")
}

/// Calls `count` with a progress token and checks the shape of docs/CONTRACTS.md#demo-count.
async fn count_over(url: &str, n: usize) -> anyhow::Result<()> {
    let mut client = RawClient::new(url)?;
    client.initialize().await?;
    let (id, mut response) = client
        .call_tool("count", json!({"n": n}), Some(json!("cli")))
        .await?;
    ensure!(response.status() == 200, "status {}", response.status());
    let result = response
        .read_until_response(id)
        .await?
        .context("no response to count")?;
    let progress: Vec<f64> = response
        .transcript()
        .messages()?
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .filter_map(|(_, m)| m["params"]["progress"].as_f64())
        .collect();
    let expected: Vec<f64> = (1..=n).map(|i| i as f64).collect();
    ensure!(progress == expected, "progress {progress:?}");
    ensure!(
        result["result"]["content"][0]["text"] == json!(format!("counted {n}")),
        "result {result}"
    );
    Ok(())
}

/// SIGTERMs the server and expects exit 0.
async fn terminate_ok(server: &mut ServerProcess) -> anyhow::Result<()> {
    let status = server.terminate().await?;
    ensure!(
        status.code() == Some(0),
        "exit {status}; logs:\n{}",
        server.logs()
    );
    Ok(())
}

fn stdout_lines(server: &ServerProcess) -> Vec<String> {
    server
        .logs()
        .lines()
        .filter_map(|l| l.strip_prefix("[stdout] ").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn serves_count_and_exits_zero_on_sigterm() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?.start().await?;
    let url = server.url().to_owned();
    ensure!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    count_over(&url, 10).await?;
    terminate_ok(&mut server).await?;
    // The ready line is the only thing on stdout; logs go to stderr.
    let stdout = stdout_lines(&server);
    ensure!(
        stdout == [format!("tether: serving {url}")],
        "stdout {stdout:?}"
    );
    Ok(())
}

#[tokio::test]
async fn exits_zero_on_sigint() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?.start().await?;
    let status = std::process::Command::new("kill")
        .args(["-INT", &server.pid().to_string()])
        .status()?;
    ensure!(status.success(), "kill -INT failed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.is_running() {
        if tokio::time::Instant::now() > deadline {
            bail!("still running after SIGINT; logs:\n{}", server.logs());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Already reaped: `kill` reports the earlier exit status.
    let status = server.kill().await?;
    ensure!(status.code() == Some(0), "exit {status}");
    Ok(())
}

#[tokio::test]
async fn sigterm_with_an_open_stream_still_exits_zero() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?.start().await?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let standalone = client.open_get_stream().await?;
    ensure!(standalone.status() == 200, "GET {}", standalone.status());
    let (_, long_call) = client
        .call_tool(
            "count",
            json!({"n": 100_000, "interval_ms": 50}),
            Some(json!(1)),
        )
        .await?;
    ensure!(long_call.status() == 200);
    terminate_ok(&mut server).await?;
    drop((standalone, long_call));
    Ok(())
}

#[tokio::test]
async fn port_zero_picks_distinct_free_ports() -> anyhow::Result<()> {
    let mut first = ServerSpec::tether_serve()?.start().await?;
    let mut second = ServerSpec::tether_serve()?.start().await?;
    ensure!(first.addr().port() != 0 && second.addr().port() != 0);
    ensure!(first.addr() != second.addr(), "{first:?} {second:?}");
    count_over(first.url(), 1).await?;
    count_over(second.url(), 1).await?;
    terminate_ok(&mut first).await?;
    terminate_ok(&mut second).await?;
    Ok(())
}

#[tokio::test]
async fn endpoint_flags_shape_the_server() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args([
            "--path",
            "/other",
            "--json-response",
            "--node-id",
            "node-a",
            "--retry-ms",
            "250",
            "--keepalive-secs",
            "5",
            "--session-idle-secs",
            "60",
            "--allowed-origin",
            "http://example.test",
            "--allowed-host",
            "example.test",
            "--allowed-host",
            "127.0.0.1",
            "--store",
            "memory",
            "--demo",
            "count",
        ])
        .start()
        .await?;
    ensure!(server.url().ends_with("/other"), "{}", server.url());
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let (id, response) = client
        .call_tool("count", json!({"n": 3}), Some(json!("j")))
        .await?;
    ensure!(
        response
            .header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "--json-response: {:?}",
        response.headers()
    );
    ensure!(
        response.header("tether-node") == Some("node-a"),
        "--node-id: {:?}",
        response.headers()
    );
    let transcript = response.read_to_end().await?;
    let body: Value = transcript.json()?;
    ensure!(body["id"] == json!(id), "{body}");
    ensure!(
        body["result"]["content"][0]["text"] == json!("counted 3"),
        "{body}"
    );
    terminate_ok(&mut server).await?;
    Ok(())
}

/// The limit flags reach the server: `--max-body-bytes` (413), `--max-sessions` (503 with
/// `Retry-After`), `--header-timeout-secs` (a silent connection is closed),
/// `--max-events-per-session` (a resume of evicted events gets `expired`), and the session
/// that fits keeps working.
#[tokio::test]
async fn limit_flags_shape_the_server() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args([
            "--store",
            "memory",
            "--max-body-bytes",
            "400",
            "--max-sessions",
            "1",
        ])
        .args(["--header-timeout-secs", "1", "--body-timeout-secs", "5"])
        .args(["--max-connections", "64", "--max-requests-per-session", "8"])
        .args(["--max-events-per-session", "50"])
        .start()
        .await?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let big = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x".repeat(500)}}});
    let refused = client.post(&big).await?.read_to_end().await?;
    ensure!(
        refused.status == 413,
        "--max-body-bytes: {}",
        refused.status
    );
    let mut second = RawClient::new(server.url())?;
    let full = second
        .send(
            &second
                .request("POST")
                .json(&json!({"jsonrpc": "2.0", "id": 1,
            "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})),
        )
        .await?
        .read_to_end()
        .await?;
    ensure!(full.status == 503, "--max-sessions: {}", full.status);
    ensure!(full.headers.get("retry-after").is_some(), "Retry-After");
    second.set_session_id(None);
    let addr = server
        .url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .context("addr")?
        .to_owned();
    let mut silent = tokio::net::TcpStream::connect(addr).await?;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncReadExt::read_to_end(&mut silent, &mut rest),
    )
    .await;
    ensure!(
        closed.is_ok(),
        "--header-timeout-secs: a silent connection is closed"
    );
    let (id, mut response) = client.call_tool("count", json!({"n": 2}), None).await?;
    ensure!(
        response.read_until_response(id).await?.is_some(),
        "the session works"
    );
    // --max-events-per-session: a call of 100 events keeps only the newest; a resume from
    // its start is told the events expired.
    let (_, response) = client
        .call_tool("count", json!({"n": 100}), Some(json!("cap")))
        .await?;
    let transcript = response.read_to_end().await?;
    let first = transcript
        .event_ids()
        .first()
        .context("event ids")?
        .to_string();
    let resumed = client.resume(&first).await?.read_to_end().await?;
    ensure!(
        resumed.status == 400,
        "--max-events-per-session: {}",
        resumed.status
    );
    let refusal: Value = serde_json::from_slice(&resumed.body)?;
    ensure!(
        refusal["error"]["data"]["reason"] == json!("expired"),
        "{refusal}"
    );
    terminate_ok(&mut server).await?;
    Ok(())
}

/// `--poll-after-secs N` (SEP-1699 polling, T73–T75): a `count` that outlasts N seconds has
/// its POST connection closed after about N seconds, with the `--retry-ms` value as a `retry`
/// field right after an event with an id and no result; resuming with `Last-Event-ID` after
/// `retry` (again and again if the server closes again) delivers every progress event once, in
/// order, and the result.
#[tokio::test]
async fn poll_after_secs_closes_connections_and_resume_continues() -> anyhow::Result<()> {
    const N: usize = 15;
    let mut server = ServerSpec::tether_serve()?
        .args(["--poll-after-secs", "1", "--retry-ms", "50"])
        .start()
        .await?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let started = tokio::time::Instant::now();
    let (id, response) = client
        .call_tool(
            "count",
            json!({"n": N, "interval_ms": 100}),
            Some(json!("p")),
        )
        .await?;
    ensure!(response.status() == 200, "status {}", response.status());
    let mut transcript = response.read_to_end().await?;
    let elapsed = started.elapsed();
    ensure!(
        elapsed >= Duration::from_secs(1),
        "closed after 1 s, not {elapsed:?}"
    );
    let mut messages = transcript.messages()?;
    ensure!(
        !messages.iter().any(|(_, m)| m["id"] == json!(id)),
        "the first connection closed before the result"
    );
    let mut connections = 1;
    while !messages.iter().any(|(_, m)| m["id"] == json!(id)) {
        ensure!(transcript.complete, "the server ended the connection");
        let last_item = transcript
            .items
            .iter()
            .rev()
            .find(|item| !matches!(item, SseItem::Comment(_)));
        ensure!(
            matches!(last_item, Some(SseItem::Retry(50))),
            "retry: 50 last: {:?}",
            transcript.items
        );
        let last = transcript
            .last_event_id()
            .context("an id before the close")?
            .to_owned();
        ensure!(connections < 10, "no end in sight");
        tokio::time::sleep(Duration::from_millis(50)).await;
        transcript = client.resume(&last).await?.read_to_end().await?;
        ensure!(transcript.status == 200, "resume {}", transcript.status);
        messages.extend(transcript.messages()?);
        connections += 1;
    }
    ensure!(connections >= 2, "{connections} connections");
    let progress: Vec<f64> = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .filter_map(|(_, m)| m["params"]["progress"].as_f64())
        .collect();
    let expected: Vec<f64> = (1..=N).map(|i| i as f64).collect();
    ensure!(
        progress == expected,
        "progress once each, in order: {progress:?}"
    );
    ensure!(messages.len() == N + 1, "nothing else: {messages:?}");
    ensure!(
        messages[N].1["result"]["content"][0]["text"] == json!(format!("counted {N}")),
        "{messages:?}"
    );
    terminate_ok(&mut server).await?;
    Ok(())
}

#[tokio::test]
async fn bad_flag_values_exit_two() -> anyhow::Result<()> {
    for args in [
        &["serve", "--store", "postgres://x"][..],
        &["serve", "--path", "mcp"],
        &["serve", "--keepalive-secs", "0"],
        &["serve", "--poll-after-secs", "0"],
        &["serve", "--task-ttl-secs", "0"],
        &["serve", "--task-ttl-secs", "604801"],
        &["serve", "--max-tasks-per-principal", "0"],
        &["serve", "--retry-ms", "soon"],
        &["serve", "--node-id", "two words"],
        &["serve", "--eras", "2025"],
        &["serve", "--no-such-flag"],
    ] {
        let output = run_tether(args).await?;
        ensure!(
            output.status.code() == Some(2),
            "{args:?}: exit {} stderr {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        ensure!(output.stdout.is_empty(), "{args:?}");
    }
    Ok(())
}

#[tokio::test]
async fn bind_failure_is_reported() -> anyhow::Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let output = run_tether(&["serve", "--bind", &addr]).await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.code() == Some(1), "exit {}", output.status);
    ensure!(
        stderr.contains("cannot listen on") && stderr.contains(&addr),
        "{stderr}"
    );
    ensure!(output.stdout.is_empty());
    Ok(())
}
