//! `tether connect URL` as a stdio MCP server for a real stdio client (the Python SDK's,
//! interop/python/stdio_client.py), in front of `tether serve` (default SQLite store) behind
//! the fault proxy: connections are cut many times and the server is killed and restarted
//! once. The stdio client gets every progress notification of a call exactly once, a
//! JSON-RPC error for the call in flight at the restart, and carries on normally; and stdout
//! carries nothing but JSON-RPC. Against a server spoken to in the 2026-07-28 era, a local
//! cancellation stops the call and it gets no answer.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tether_testkit::launcher::{ServerSpec, tether_bin};
use tether_testkit::peers::{interop_dir, python};
use tether_testkit::proxy::{FaultPlan, FaultProxy};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Command;

/// Bound on the whole stdio client run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Progress values of call A at which the test cuts every open connection. The cuts are
/// placed by the test rather than at byte offsets: with keep-alive, a byte offset can fall in
/// the head of a later POST on a reused connection, and a POST cut before its answer began
/// cannot be resumed (nothing identifies it yet), which is not what this test is about.
const CUT_AT: [u64; 5] = [8, 18, 28, 38, 48];

fn progress_of(lines: &[Value], call: &str) -> Vec<u64> {
    lines
        .iter()
        .filter(|line| line["call"] == call)
        .filter_map(|line| line["progress"].as_u64())
        .collect()
}

fn outcome<'a>(lines: &'a [Value], call: &str) -> Option<&'a Value> {
    lines
        .iter()
        .find(|line| line["call"] == call && line.get("progress").is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_survives_cuts_and_a_server_restart() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args(["--retry-ms", "100"])
        .start()
        .await?;
    let proxy = FaultProxy::start(server.addr(), FaultPlan::pass_through()).await?;
    let url = proxy.url_for("/mcp");
    let tether = tether_bin()?;
    let mut client = Command::new(python()?)
        .arg(interop_dir().join("python/stdio_client.py"))
        .arg("A:60:15,B:3000:20,C:5:100")
        .arg("--")
        .arg(&tether)
        .args(["connect", &url, "--idle-timeout-secs", "5"])
        .env("RUST_LOG", "tether=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the stdio client")?;
    let mut stdout = BufReader::new(client.stdout.take().context("stdout")?).lines();
    // Drained all along: a full pipe would stall the client (and the bridge logging through it).
    let mut err = client.stderr.take().context("stderr")?;
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut err, &mut text).await;
        text
    });
    let mut lines: Vec<Value> = Vec::new();
    let mut restarted = false;
    let run = async {
        while let Some(line) = stdout.next_line().await? {
            let value: Value =
                serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
            let b_running = value["call"] == "B" && value["progress"].as_u64() == Some(10);
            let cut_a = value["call"] == "A"
                && value["progress"]
                    .as_u64()
                    .is_some_and(|p| CUT_AT.contains(&p));
            let cut_c = value["call"] == "C" && value["progress"].as_u64() == Some(2);
            lines.push(value);
            if cut_a || cut_c {
                proxy.cut_open_connections();
            }
            if b_running && !restarted {
                // Call B is in flight: kill the server under it.
                server.kill().await?;
                server.restart().await?;
                restarted = true;
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(RUN_TIMEOUT, run)
        .await
        .context("the stdio client did not finish")??;
    let status = client.wait().await?;
    let stderr = stderr.await?;
    ensure!(status.success(), "stdio client {status}: {stderr}");
    ensure!(
        restarted,
        "the server was restarted during call B: {lines:?}"
    );

    let expected: Vec<u64> = (1..=60).collect();
    ensure!(
        progress_of(&lines, "A") == expected,
        "call A: every progress once, in order: {:?}",
        progress_of(&lines, "A")
    );
    ensure!(
        outcome(&lines, "A") == Some(&json!({"call": "A", "result": "counted 60"})),
        "call A's outcome {:?}; the bridge said:\n{stderr}",
        outcome(&lines, "A")
    );

    let b = progress_of(&lines, "B");
    let prefix: Vec<u64> = (1..=b.len() as u64).collect();
    ensure!(
        b == prefix && b.len() >= 10,
        "call B: a gap-free prefix: {b:?}"
    );
    let b_outcome = outcome(&lines, "B").context("call B's outcome")?;
    ensure!(
        b_outcome["data"]["reason"] == json!("server_restarted"),
        "call B in flight at the restart gets the JSON-RPC error: {b_outcome}"
    );

    ensure!(progress_of(&lines, "C") == [1, 2, 3, 4, 5], "{lines:?}");
    ensure!(
        outcome(&lines, "C") == Some(&json!({"call": "C", "result": "counted 5"})),
        "call C works after the restart: {lines:?}"
    );
    let counters = proxy.counters();
    ensure!(
        counters.cuts > CUT_AT.len() as u64,
        "cuts injected: {counters:?}"
    );
    println!(
        "stdio client through tether connect: {} cuts, 1 restart, {} lines",
        counters.cuts,
        lines.len()
    );
    server.terminate().await?;
    Ok(())
}

/// Raw JSON-RPC on stdin, cuts on the wire: every stdout line is one JSON-RPC message, the
/// response comes back under the local id, and a line that is not JSON-RPC is answered with a
/// parse error without ending the bridge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_carries_only_json_rpc_under_the_local_ids() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args(["--retry-ms", "50", "--store", "memory"])
        .start()
        .await?;
    let proxy = FaultProxy::start(server.addr(), FaultPlan::pass_through()).await?;
    let url = proxy.url_for("/mcp");
    let mut bridge = Command::new(tether_bin()?)
        .args(["connect", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = bridge.stdin.take().context("stdin")?;
    let input = [
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
            "name": "count", "arguments": {"n": 60, "interval_ms": 20},
            "_meta": {"progressToken": "tok"}}}),
    ];
    for message in &input {
        stdin.write_all(format!("{message}\n").as_bytes()).await?;
    }
    stdin.write_all(b"not json at all\n").await?;
    let mut stdout = BufReader::new(bridge.stdout.take().context("stdout")?).lines();
    let mut messages = Vec::new();
    let read = async {
        while let Some(line) = stdout.next_line().await? {
            let value: Value = serde_json::from_str(&line)
                .with_context(|| format!("stdout line is not JSON: {line:?}"))?;
            ensure!(value["jsonrpc"] == "2.0", "not JSON-RPC: {line}");
            let done = value["id"] == "call-1";
            if value["params"]["progress"]
                .as_u64()
                .is_some_and(|p| p % 15 == 0)
            {
                proxy.cut_open_connections();
            }
            messages.push(value);
            if done {
                return Ok(());
            }
        }
        anyhow::bail!("stdout ended early: {messages:?}")
    };
    tokio::time::timeout(RUN_TIMEOUT, read).await??;
    ensure!(messages[0]["id"] == "init" && messages[0]["result"]["serverInfo"].is_object());
    ensure!(
        messages
            .iter()
            .any(|m| m["error"]["code"] == json!(-32700) && m["id"].is_null()),
        "the garbage line got a parse error: {messages:?}"
    );
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    ensure!(
        progress == (1..=60).collect::<Vec<_>>(),
        "progress once each: {progress:?} in {messages:?}"
    );
    let last = messages.last().context("the response")?;
    ensure!(
        last["result"]["content"][0]["text"] == "counted 60",
        "{last}"
    );
    ensure!(proxy.counters().cuts > 0, "{:?}", proxy.counters());
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await??;
    ensure!(status.success(), "end of stdin: exit 0, not {status}");
    server.terminate().await?;
    Ok(())
}

/// A server that lost the session (restarted on the memory store: 404): the bridge answers the
/// call that was in flight with a JSON-RPC error, tells the local client with a log
/// notification, initializes again by itself, and the next call works, all without the local
/// client doing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_is_reinitialized_and_announced() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args(["--retry-ms", "50", "--store", "memory"])
        .start()
        .await?;
    // Sessions are the 2025 era's (`auto` would run the call as a task with this server).
    let mut bridge = Command::new(tether_bin()?)
        .args(["connect", server.url(), "--protocol", "legacy"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = bridge.stdin.take().context("stdin")?;
    let mut stdout = BufReader::new(bridge.stdout.take().context("stdout")?).lines();
    let send = |message: Value| format!("{message}\n");
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .as_bytes(),
        )
        .await?;
    stdin
        .write_all(
            send(
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "count", "arguments": {"n": 100_000, "interval_ms": 20},
                "_meta": {"progressToken": "t"}}}),
            )
            .as_bytes(),
        )
        .await?;
    let mut messages: Vec<Value> = Vec::new();
    let mut restarted = false;
    let mut asked_again = false;
    let read = async {
        while let Some(line) = stdout.next_line().await? {
            let value: Value = serde_json::from_str(&line)?;
            if !restarted && value["params"]["progress"] == json!(3) {
                server.kill().await?;
                server.restart().await?;
                restarted = true;
            }
            let call_failed = value["id"] == json!(2);
            let done = value["id"] == json!(3);
            messages.push(value);
            if call_failed && !asked_again {
                asked_again = true;
                stdin
                    .write_all(
                        send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                            "params": {"name": "count", "arguments": {"n": 2}}}))
                        .as_bytes(),
                    )
                    .await?;
            }
            if done {
                return Ok(());
            }
        }
        anyhow::bail!("stdout ended: {messages:?}")
    };
    tokio::time::timeout(RUN_TIMEOUT, read).await??;
    let failed = messages
        .iter()
        .find(|m| m["id"] == json!(2))
        .context("call 2's answer")?;
    ensure!(
        failed["error"]["data"]["reason"] == json!("session_expired"),
        "the call in flight fails typed: {failed}"
    );
    ensure!(
        messages
            .iter()
            .any(|m| m["method"] == "notifications/message" && m["params"]["level"] == "warning"),
        "a log notification tells the local client: {messages:?}"
    );
    let last = messages.last().context("call 3's answer")?;
    ensure!(
        last["result"]["content"][0]["text"] == "counted 2",
        "the next call works on the new session: {last}"
    );
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await??;
    ensure!(status.success(), "exit {status}");
    server.terminate().await?;
    Ok(())
}

/// Against a server spoken to in the 2026-07-28 era: the local client's
/// `notifications/cancelled` drops the call's connection, which ends the call on the server
/// (its progress stops) and the cancelled call gets no answer; the bridge goes on serving the
/// next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_modern_call_stops_and_gets_no_answer() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args(["--store", "memory"])
        .start()
        .await?;
    let mut bridge = Command::new(tether_bin()?)
        .args(["connect", server.url(), "--protocol", "2026-07-28"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = bridge.stdin.take().context("stdin")?;
    let call = |id: &str, n: u64, token: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "count", "arguments": {"n": n, "interval_ms": 50},
            "_meta": {"progressToken": token}}})
    };
    let input = [
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call("call-1", 200, "t1"),
    ];
    for message in &input {
        stdin.write_all(format!("{message}\n").as_bytes()).await?;
    }
    let mut stdout = BufReader::new(bridge.stdout.take().context("stdout")?).lines();
    let mut messages: Vec<Value> = Vec::new();
    let progress = |messages: &[Value], token: &str| {
        messages
            .iter()
            .filter(|m| m["params"]["progressToken"] == token)
            .count()
    };
    let read = async {
        let mut cancelled = false;
        while let Some(line) = stdout.next_line().await? {
            let value: Value = serde_json::from_str(&line)?;
            messages.push(value.clone());
            if !cancelled && progress(&messages, "t1") == 3 {
                cancelled = true;
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": "call-1", "reason": "test"}});
                stdin.write_all(format!("{cancel}\n").as_bytes()).await?;
                stdin
                    .write_all(format!("{}\n", call("call-2", 3, "t2")).as_bytes())
                    .await?;
            }
            if value["id"] == "call-2" {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("stdout ended early: {messages:?}")
    };
    tokio::time::timeout(RUN_TIMEOUT, read).await??;
    let last = messages.last().context("call-2's answer")?;
    ensure!(
        last["result"]["content"][0]["text"] == "counted 3",
        "{last}"
    );
    let at_answer = progress(&messages, "t1");
    // Half a second more: a call still running would add about ten progress events.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, stdout.next_line()).await {
        messages.push(serde_json::from_str(&line)?);
    }
    ensure!(
        !messages.iter().any(|m| m["id"] == "call-1"),
        "the cancelled call got no answer: {messages:?}"
    );
    let total = progress(&messages, "t1");
    ensure!(
        total == at_answer && total < 10,
        "call-1 stopped at the cancellation ({at_answer} then {total} progress events)"
    );
    drop(stdin);
    tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await??;
    server.terminate().await?;
    Ok(())
}

/// Against a server spoken to in the 2026-07-28 era that offers tasks, the bridge runs the
/// stdio client's `tools/call` as a task: through a proxy that cuts every open connection
/// now and then, the stdio client gets every progress notification once, in order, then the
/// result, under its own request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_call_runs_as_a_task_and_survives_cuts() -> anyhow::Result<()> {
    let mut server = ServerSpec::tether_serve()?
        .args(["--store", "memory"])
        .start()
        .await?;
    let proxy = FaultProxy::start(server.addr(), FaultPlan::pass_through()).await?;
    let url = proxy.url_for("/mcp");
    let mut bridge = Command::new(tether_bin()?)
        .args(["connect", &url, "--protocol", "2026-07-28"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = bridge.stdin.take().context("stdin")?;
    let input = [
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
            "name": "count", "arguments": {"n": 60, "interval_ms": 20},
            "_meta": {"progressToken": "tok"}}}),
    ];
    for message in &input {
        stdin.write_all(format!("{message}\n").as_bytes()).await?;
    }
    let mut stdout = BufReader::new(bridge.stdout.take().context("stdout")?).lines();
    let mut messages = Vec::new();
    let read = async {
        while let Some(line) = stdout.next_line().await? {
            let value: Value = serde_json::from_str(&line)?;
            if value["params"]["progress"]
                .as_u64()
                .is_some_and(|p| p % 15 == 0)
            {
                proxy.cut_open_connections();
            }
            let done = value["id"] == "call-1";
            messages.push(value);
            if done {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("stdout ended early: {messages:?}")
    };
    tokio::time::timeout(RUN_TIMEOUT, read).await??;
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    ensure!(
        progress == (1..=60).collect::<Vec<_>>(),
        "progress once each: {progress:?}"
    );
    let last = messages.last().context("the response")?;
    ensure!(
        last["result"]["content"][0]["text"] == "counted 60",
        "{last}"
    );
    ensure!(proxy.counters().cuts > 0, "{:?}", proxy.counters());
    drop(stdin);
    tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await??;
    server.terminate().await?;
    Ok(())
}
