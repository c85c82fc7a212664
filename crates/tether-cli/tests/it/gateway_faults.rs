//! `tether serve -- CMD` in front of stdio servers that misbehave (tests/it/fixtures/stdio_child.py):
//! a child that crashes, writes garbage, never answers `initialize`, or floods its output;
//! and one that asks the client something, whose answer must reach it.
//! Each case ends in a clear JSON-RPC error (never a hang), the session answers 404 afterwards
//! where the child died, tether's memory stays bounded under a flood, and no child process is
//! left running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tempfile::TempDir;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec, pid_alive, wait_pids_gone};
use tether_testkit::peers::python;
use tether_testkit::raw::RawClient;

/// How long a child may take to disappear after its session ended.
const GONE_WITHIN: Duration = Duration::from_secs(10);

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/stdio_child.py")
}

/// `tether serve` in gateway mode over the fixture in `mode`; the child writes its pid to
/// `<dir>/pid`.
async fn gateway(dir: &Path, mode: &str, extra: &[&str]) -> anyhow::Result<ServerProcess> {
    let pidfile = dir.join("pid");
    let mut spec = ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--retry-ms", "100"])
        .args(extra)
        .arg("--")
        .arg(python()?)
        .arg(fixture())
        .arg(mode)
        .arg(&pidfile);
    if mode == "flood" {
        spec = spec.arg(FLOOD_LINES.to_string());
    }
    Ok(spec.start().await?)
}

/// The pid the child wrote, waiting for it to appear.
async fn child_pid(dir: &Path) -> anyhow::Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("pid"))
            && let Ok(pid) = text.trim().parse()
        {
            return Ok(pid);
        }
        ensure!(Instant::now() < deadline, "the child never wrote its pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn assert_gone(pid: u32, why: &str) -> anyhow::Result<()> {
    let alive = wait_pids_gone(&[pid], GONE_WITHIN).await;
    ensure!(alive.is_empty(), "child {pid} still running: {why}");
    Ok(())
}

/// A new session on `server` starts a new child (another pid than `old`) that answers calls.
async fn assert_a_new_session_gets_a_new_child(
    server: &ServerProcess,
    dir: &Path,
    old: u32,
) -> anyhow::Result<()> {
    std::fs::remove_file(dir.join("pid"))?;
    let mut fresh = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    fresh.initialize().await?;
    let pid = child_pid(dir).await?;
    ensure!(pid != old, "a new child for the new session");
    Ok(())
}

/// Calls the fixture's tool and returns the final message on the call's stream.
async fn call(client: &mut RawClient) -> anyhow::Result<Value> {
    let (id, mut response) = client.call_tool("any", json!({}), None).await?;
    ensure!(response.status() == 200, "status {}", response.status());
    response
        .read_until_response(id)
        .await?
        .context("the call's stream ended without an answer")
}

/// After a child failure, the session is gone: 404 for its next request.
async fn assert_session_gone(client: &mut RawClient) -> anyhow::Result<()> {
    let (_, response) = client.call_tool("any", json!({}), None).await?;
    ensure!(
        response.status() == 404,
        "the failed session answers 404, not {}",
        response.status()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_crashes_fails_its_call_and_its_session() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "crash", &[]).await?;
    let mut client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    client.initialize().await?;
    let pid = child_pid(dir.path()).await?;
    let answer = call(&mut client).await?;
    ensure!(
        answer["error"]["code"] == json!(-32603),
        "a JSON-RPC error: {answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    ensure!(message.contains("stdio server failed"), "{message}");
    assert_gone(pid, "it crashed").await?;
    assert_session_gone(&mut client).await?;
    assert_a_new_session_gets_a_new_child(&server, dir.path(), pid).await?;
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_writes_garbage_is_stopped_and_its_call_fails() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "garbage", &[]).await?;
    let mut client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    client.initialize().await?;
    let pid = child_pid(dir.path()).await?;
    let answer = call(&mut client).await?;
    ensure!(answer["error"]["code"] == json!(-32603), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("not JSON-RPC (") && message.contains(r#""this is not JSON-RPC""#),
        "the error says what the child wrote, and why it is refused: {answer}"
    );
    assert_gone(pid, "it wrote garbage").await?;
    assert_session_gone(&mut client).await?;
    ensure!(
        server.logs().contains("stdio server failed"),
        "a clear log line:\n{}",
        server.logs()
    );
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_never_answers_initialize_times_out() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "silent", &["--init-timeout-secs", "1"]).await?;
    let client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    let started = Instant::now();
    let response = client
        .post(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }))
        .await?;
    let transcript = response.read_to_end().await?;
    ensure!(
        started.elapsed() >= Duration::from_secs(1),
        "answered only after the timeout"
    );
    ensure!(
        transcript.headers.get("mcp-session-id").is_none(),
        "no session for a failed initialize"
    );
    let answer = transcript
        .messages()?
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == json!(1))
        .context("an answer to initialize")?;
    ensure!(answer["error"]["code"] == json!(-32603), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    ensure!(message.contains("no answer to initialize"), "{answer}");
    let pid = child_pid(dir.path()).await?;
    assert_gone(pid, "initialize timed out").await?;
    server.terminate().await?;
    Ok(())
}

/// 16 KiB notifications the flooding child writes: 160 MiB, two and a half times the store's
/// 64 MiB per session.
const FLOOD_LINES: usize = 160 * 64;

/// Most resident memory tether may reach while relaying the flood: the store's per-session
/// byte cap (64 MiB) plus room for everything else (about 50 MiB here), and below what
/// holding the whole flood would take (160 MiB plus the same base).
const FLOOD_RSS_LIMIT_KIB: u64 = 192 * 1024;

fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .context("VmHWM in /proc/PID/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_child_cannot_grow_memory_beyond_the_store_bounds() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "flood", &[]).await?;
    let mut client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(120));
    client.initialize().await?;
    let pid = child_pid(dir.path()).await?;
    // Nobody reads the call's stream: everything the child writes must be bounded by the
    // store's caps, not queued.
    let (_id, response) = client.call_tool("flood", json!({}), None).await?;
    ensure!(response.status() == 200, "status {}", response.status());
    let flooded = dir.path().join("pid.flooded");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !flooded.exists() {
        ensure!(Instant::now() < deadline, "the flood did not finish");
        ensure!(pid_alive(pid), "the child died:\n{}", server.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = peak_rss_kib(server.pid())?;
    let flood_kib = FLOOD_LINES * 16;
    println!("flood of {flood_kib} KiB relayed with a peak RSS of {peak} KiB");
    ensure!(
        peak < FLOOD_RSS_LIMIT_KIB,
        "peak RSS {peak} KiB while relaying {flood_kib} KiB"
    );
    drop(response);
    // The session still works and its child ends with it.
    let transcript = client.delete_session().await?;
    ensure!(transcript.status == 200, "DELETE {}", transcript.status);
    assert_gone(pid, "its session was deleted").await?;
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_end_with_their_session_and_with_the_server() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "ok", &[]).await?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let deleted = child_pid(dir.path()).await?;
    let answer = call(&mut client).await?;
    ensure!(
        answer["result"]["content"][0]["text"] == json!("ok"),
        "{answer}"
    );
    ensure!(client.delete_session().await?.status == 200);
    assert_gone(deleted, "DELETE").await?;

    std::fs::remove_file(dir.path().join("pid"))?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let at_shutdown = child_pid(dir.path()).await?;
    let status = server.terminate().await?;
    ensure!(status.code() == Some(0), "exit {status}");
    assert_gone(at_shutdown, "graceful shutdown").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_gateway_session_answers_404_and_its_child_is_gone() -> anyhow::Result<()>
{
    let dir = TempDir::new()?;
    let pidfile = dir.path().join("pid");
    // The default (SQLite) store: the session record survives, its child cannot.
    let mut server = ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--"])
        .arg(python()?)
        .arg(fixture())
        .arg("ok")
        .arg(&pidfile)
        .start()
        .await?;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let pid = child_pid(dir.path()).await?;
    server.kill().await?;
    // The child's stdin ended with tether.
    assert_gone(pid, "tether was killed").await?;
    server.restart().await?;
    assert_session_gone(&mut client).await?;
    let mut fresh = RawClient::new(server.url())?;
    fresh.initialize().await?;
    let answer = call(&mut fresh).await?;
    ensure!(
        answer["result"]["content"][0]["text"] == json!("ok"),
        "a new session works after the restart: {answer}"
    );
    server.terminate().await?;
    Ok(())
}

/// A server→client request from the child travels on the call's stream under the
/// transport's own id; the client's answer, POSTed back, reaches the child under the child's
/// id, and the call completes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_from_the_child_reaches_the_client_and_back() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = gateway(dir.path(), "ask", &[]).await?;
    let mut client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    client.initialize().await?;
    let (id, mut response) = client.call_tool("ask", json!({}), None).await?;
    ensure!(response.status() == 200, "status {}", response.status());
    let request = loop {
        let event = response.next_event().await?.context("the stream ended")?;
        if let Some(message) = event.json()?
            && message["method"] == json!("roots/list")
        {
            break message;
        }
    };
    ensure!(
        request["id"] != json!("child-1"),
        "the transport's id, not the child's: {request}"
    );
    let roots = json!({"roots": [{"uri": "file:///tmp/x", "name": "x"}]});
    let posted = client
        .post(&json!({"jsonrpc": "2.0", "id": request["id"], "result": roots}))
        .await?;
    ensure!(
        posted.status() == 202,
        "answer accepted: {}",
        posted.status()
    );
    let answer = response
        .read_until_response(id)
        .await?
        .context("the call's answer")?;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .context("text")?;
    ensure!(
        serde_json::from_str::<Value>(text)? == roots,
        "the child got the client's answer: {text}"
    );
    server.terminate().await?;
    Ok(())
}
