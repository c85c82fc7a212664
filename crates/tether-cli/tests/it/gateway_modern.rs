//! `tether serve -- CMD` serving 2026-07-28 clients: one legacy child per principal, started
//! with the legacy handshake on first use and reused; `server/discover` from the child's own
//! `initialize` answer; requests mapped to the child with the gateway's ids and progress
//! tokens (two clients using the same id and token get their own progress); a child's
//! server→client request becoming `input_required`, directly (answered by the client's retry)
//! and in a task (answered by `tasks/update`); every tool call running as a task when the
//! client declares the extension; a child that dies failing its call and being started again
//! for the next one; the child's `ping` answered by the gateway and other requests refused.
//! Real `tether serve`, the Python SDK's stdio server and the fixture child,
//! raw HTTP on loopback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tempfile::TempDir;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec};
use tether_testkit::peers::{self, python};
use tether_testkit::raw::{RawClient, Transcript};

/// The tasks extension's key.
const TASKS: &str = "io.modelcontextprotocol/tasks";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/stdio_child.py")
}

/// `tether serve` (memory store) in front of `command`.
async fn gateway(command: Vec<String>) -> anyhow::Result<ServerProcess> {
    Ok(ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--"])
        .args(command)
        .env("RUST_LOG", "warn,tether::gateway=info")
        .start()
        .await?)
}

/// The Python SDK's stdio server (`count`).
async fn python_gateway() -> anyhow::Result<ServerProcess> {
    let (program, args) = peers::python_stdio_server()?.into_parts();
    let mut command = vec![program.display().to_string()];
    command.extend(args);
    gateway(command).await
}

/// The fixture child in `mode`, its pid written to `<dir>/pid`.
async fn fixture_gateway(dir: &Path, mode: &str) -> anyhow::Result<ServerProcess> {
    gateway(vec![
        python()?.display().to_string(),
        fixture().display().to_string(),
        mode.to_owned(),
        dir.join("pid").display().to_string(),
    ])
    .await
}

fn client(server: &ServerProcess) -> anyhow::Result<RawClient> {
    Ok(RawClient::new(server.url())?.with_timeout(Duration::from_secs(30)))
}

/// `_meta` of a client that declares the tasks extension.
fn as_task() -> Value {
    tether_testkit::raw::task_meta()
}

/// The JSON-RPC messages of an answer (SSE or JSON).
fn messages(transcript: &Transcript) -> anyhow::Result<Vec<Value>> {
    if transcript.is_event_stream() {
        Ok(transcript
            .messages()?
            .into_iter()
            .map(|(_, message)| message)
            .collect())
    } else {
        Ok(vec![transcript.json()?])
    }
}

/// The gateway's `stdio server started` log lines.
fn children_started(server: &ServerProcess) -> usize {
    server
        .logs()
        .lines()
        .filter(|line| line.contains("stdio server started"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_is_served_by_one_child_per_principal() -> anyhow::Result<()> {
    let mut server = python_gateway().await?;
    let discover = client(&server)?;
    let found = discover
        .exchange(&discover.modern(1, "server/discover", json!({}), json!({})))
        .await?
        .json()?;
    let result = &found["result"];
    ensure!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tether-interop-python",
        "the child's identity: {found}"
    );
    ensure!(
        result["capabilities"]["tools"].is_object(),
        "the child's capabilities: {found}"
    );
    ensure!(
        result["capabilities"]["extensions"][TASKS].is_object(),
        "tasks, which tether serves: {found}"
    );
    // Two clients, the same request id and progress token, at once.
    let call = |client: &RawClient| {
        client.modern(
            1,
            "tools/call",
            json!({"name": "count", "arguments": {"n": 5, "interval_ms": 40}}),
            json!({"progressToken": "t"}),
        )
    };
    let (a, b) = (client(&server)?, client(&server)?);
    let (call_a, call_b) = (call(&a), call(&b));
    let (first, second) = tokio::join!(a.exchange(&call_a), b.exchange(&call_b));
    for transcript in [first?, second?] {
        let messages = messages(&transcript)?;
        let progress: Vec<f64> = messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| {
                assert_eq!(m["params"]["progressToken"], "t", "the client's own token");
                m["params"]["progress"].as_f64().unwrap_or(-1.0)
            })
            .collect();
        ensure!(
            progress == [1.0, 2.0, 3.0, 4.0, 5.0],
            "each call's own progress, once: {messages:?}"
        );
        let last = messages.last().context("an answer")?;
        ensure!(last["id"] == 1, "{last}");
        ensure!(
            last["result"]["content"][0]["text"] == "counted 5",
            "{last}"
        );
    }
    ensure!(
        children_started(&server) == 1,
        "one child for the principal, reused:\n{}",
        server.logs()
    );
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_through_the_gateway_runs_as_a_task() -> anyhow::Result<()> {
    let mut server = python_gateway().await?;
    let client = client(&server)?;
    let call = client.modern(
        1,
        "tools/call",
        json!({"name": "count", "arguments": {"n": 4, "interval_ms": 20}}),
        as_task(),
    );
    let created = client.exchange(&call).await?.json()?;
    ensure!(created["result"]["resultType"] == "task", "{created}");
    let task = created["result"]["taskId"]
        .as_str()
        .context("a task id")?
        .to_owned();
    let done = client.poll_task(&task, "completed").await?;
    ensure!(done["result"]["status"] == "completed", "{done}");
    ensure!(
        done["result"]["result"]["content"][0]["text"] == "counted 4",
        "{done}"
    );
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_question_becomes_input_required_and_its_answer_reaches_the_child()
-> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = fixture_gateway(dir.path(), "ask").await?;
    let client = client(&server)?;
    let roots = json!({"roots": [{"uri": "file:///tmp/x", "name": "x"}]});

    // Directly: the request ends with the question; the retry carries the answer.
    let asked = client
        .exchange(&client.modern(1, "tools/call", json!({"name": "ask"}), json!({})))
        .await?;
    let asked = messages(&asked)?.pop().context("an answer")?;
    let result = &asked["result"];
    ensure!(result["resultType"] == "input_required", "{asked}");
    let (key, question) = result["inputRequests"]
        .as_object()
        .and_then(|questions| questions.iter().next())
        .context("one question")?;
    ensure!(question["method"] == "roots/list", "{asked}");
    let retry = client.modern(
        2,
        "tools/call",
        json!({"name": "ask", "inputResponses": {key.as_str(): roots},
            "requestState": result["requestState"]}),
        json!({}),
    );
    let answered = messages(&client.exchange(&retry).await?)?
        .pop()
        .context("an answer")?;
    let text = answered["result"]["content"][0]["text"]
        .as_str()
        .context("text")?;
    ensure!(
        serde_json::from_str::<Value>(text)? == roots,
        "the child got the answer: {answered}"
    );

    // In a task: the question is the task's, answered with tasks/update.
    let created = client
        .exchange(&client.modern(3, "tools/call", json!({"name": "ask"}), as_task()))
        .await?
        .json()?;
    let task = created["result"]["taskId"]
        .as_str()
        .context("a task")?
        .to_owned();
    let waiting = client.poll_task(&task, "input_required").await?;
    ensure!(waiting["result"]["status"] == "input_required", "{waiting}");
    let (key, question) = waiting["result"]["inputRequests"]
        .as_object()
        .and_then(|questions| questions.iter().next())
        .context("one question")?;
    ensure!(question["method"] == "roots/list", "{waiting}");
    let update = client.modern(
        4,
        "tasks/update",
        json!({"taskId": task, "inputResponses": {key.as_str(): roots}}),
        as_task(),
    );
    let ack = client.exchange(&update).await?;
    ensure!(ack.status == 200, "update accepted: {:?}", ack.json());
    let done = client.poll_task(&task, "completed").await?;
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .context("text")?;
    ensure!(
        serde_json::from_str::<Value>(text)? == roots,
        "the child in the task got the answer: {done}"
    );
    server.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_fails_its_call_and_is_started_again() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = fixture_gateway(dir.path(), "crash").await?;
    let client = client(&server)?;
    let mut pids = Vec::new();
    for id in 1..=2 {
        let _ = std::fs::remove_file(dir.path().join("pid"));
        let call = client.modern(id, "tools/call", json!({"name": "any"}), json!({}));
        let answer = messages(&client.exchange(&call).await?)?
            .pop()
            .context("an answer")?;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains("the stdio server failed"),
            "a clear error, not a hang: {answer}"
        );
        pids.push(std::fs::read_to_string(dir.path().join("pid"))?);
    }
    ensure!(pids[0] != pids[1], "a new child for the next request");
    ensure!(children_started(&server) == 2, "{}", server.logs());
    server.terminate().await?;
    Ok(())
}

/// What a modern client cannot be asked: the child's `ping` is answered by the gateway, any
/// other request than the three questions gets -32601; the call itself goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_ping_is_answered_and_other_requests_refused() -> anyhow::Result<()> {
    for (mode, expected) in [
        ("ping", json!({})),
        (
            "other",
            json!({"code": -32601, "message": "method not found: tasks/list"}),
        ),
    ] {
        let dir = TempDir::new()?;
        let mut server = fixture_gateway(dir.path(), mode).await?;
        let client = client(&server)?;
        let call = client.modern(1, "tools/call", json!({"name": "any"}), json!({}));
        let answer = messages(&client.exchange(&call).await?)?
            .pop()
            .context("an answer")?;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .with_context(|| format!("{mode}: {answer}"))?;
        let got: Value = serde_json::from_str(text)?;
        ensure!(
            got["code"] == expected["code"] && (mode != "ping" || got == expected),
            "{mode}: the child got {got}"
        );
        server.terminate().await?;
    }
    Ok(())
}
