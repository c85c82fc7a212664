//! Two `tether serve` processes sharing one Redis (`--store redis://…`), with no sticky
//! sessions: a call started by a POST to node A, cut, is resumed with GET on node B (the
//! `Tether-Node` header proves which node answered) and receives the rest of the stream,
//! following it live while A is still producing, each event once and in order; a POST for
//! the same session sent to node B is served; and when node A dies, node B answers the call
//! A was running, on the stream B serves, after A's lease, and the session with 404 after.
//!
//! With a stdio server behind the nodes (`tether serve -- CMD`), whose child process for a
//! session lives only on the node that created it, the POSTs that node B receives for that
//! session are handed to node A: the call runs in A's child, a server→client request from it
//! reaches the client through B and the client's answer, POSTed to B, reaches the child; a
//! DELETE sent to B ends the session and A's child.
//!
//! Tasks (2026-07-28): node B reads the tasks node A made; when A dies, B fails A's running
//! task (`server_restarted`) after A's lease and A's finished task stays readable; a task's
//! question is answered on B and the answer reaches the child running it on A.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tempfile::TempDir;
use tether::server::SERVER_RESTARTED_REASON;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec, wait_pids_gone};
use tether_testkit::peers::python;
use tether_testkit::raw::{RawClient, RawResponse, SseEvent};
use tether_testkit::redis::RedisServer;

const N: u64 = 60;
const INTERVAL_MS: u64 = 30;
const READ_ON_A: usize = 10;

/// The node lease of both nodes, in seconds (`--node-lease-secs`).
const LEASE_SECS: u64 = 2;

async fn node(redis: &RedisServer, name: &str) -> anyhow::Result<ServerProcess> {
    Ok(node_spec(redis, name)?.start().await?)
}

fn node_spec(redis: &RedisServer, name: &str) -> anyhow::Result<ServerSpec> {
    Ok(ServerSpec::tether_serve()?
        // Before any `-- CMD`, which takes the rest of the command line.
        .bind_arg(BindArg::Placeholders)
        .args([
            "--bind",
            "{bind}",
            "--store",
            &redis.url(),
            "--node-id",
            name,
            "--retry-ms",
            "100",
            "--node-lease-secs",
            &LEASE_SECS.to_string(),
        ]))
}

/// A node in front of the stdio fixture in mode `ask`, whose children write their pid to
/// `<dir>/pid`.
async fn gateway_node(
    redis: &RedisServer,
    name: &str,
    dir: &Path,
) -> anyhow::Result<ServerProcess> {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/stdio_child.py");
    Ok(node_spec(redis, name)?
        .arg("--")
        .arg(python()?)
        .arg(fixture)
        .arg("ask")
        .arg(dir.join("pid"))
        .start()
        .await?)
}

/// Starts `count` with `arguments` on node `a`, reads its priming event and `read` progress
/// events there, drops the connection, and resumes the stream with GET on node `b`, checking
/// that `b` answered. Returns the call's id, a client for the session on `b`, and the resumed
/// response.
async fn cut_on_a_resume_on_b(
    a: &ServerProcess,
    b: &ServerProcess,
    arguments: Value,
    read: usize,
) -> anyhow::Result<(i64, RawClient, RawResponse)> {
    let mut on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(30));
    on_a.initialize().await?;
    let (id, mut response) = on_a
        .call_tool("count", arguments, Some(json!("two-nodes")))
        .await?;
    ensure!(response.header("tether-node") == Some("node-a"));
    let seen = response.read_events(read + 1).await?;
    let cursor = seen.last().context("events on A")?.id.clone();
    drop(response);

    let mut on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let resumed = on_b.resume(&cursor).await?;
    ensure!(resumed.status() == 200, "resume on B: {}", resumed.status());
    ensure!(
        resumed.header("tether-node") == Some("node-b"),
        "served by node B: {:?}",
        resumed.header("tether-node")
    );
    Ok((id, on_b, resumed))
}

/// The progress values of `events`, which must all be progress notifications except the
/// last, and that last message (the call's answer).
fn progress_then_answer(events: &[SseEvent]) -> anyhow::Result<(Vec<u64>, Value)> {
    let mut messages = Vec::new();
    for event in events {
        if let Some(message) = event.json()? {
            messages.push(message);
        }
    }
    let (last, progress) = messages.split_last().context("messages on B")?;
    let progress = progress
        .iter()
        .map(|m| {
            m["params"]["progress"]
                .as_u64()
                .with_context(|| format!("only progress before the answer: {m}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((progress, last.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_started_on_one_node_is_resumed_live_on_the_other() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let mut a = node(&redis, "node-a").await?;
    let mut b = node(&redis, "node-b").await?;
    let resumed_at = Instant::now();
    let (id, mut on_b, resumed) = cut_on_a_resume_on_b(
        &a,
        &b,
        json!({"n": N, "interval_ms": INTERVAL_MS}),
        READ_ON_A,
    )
    .await?;
    let transcript = resumed.read_to_end().await?;
    let took = resumed_at.elapsed();
    let events: Vec<SseEvent> = transcript.events().cloned().collect();
    let (progress, answer) = progress_then_answer(&events)?;
    let expected: Vec<u64> = (READ_ON_A as u64 + 1..=N).collect();
    ensure!(
        progress == expected,
        "the rest, once each, in order: {progress:?}"
    );
    ensure!(answer["id"] == json!(id), "{answer}");
    ensure!(
        answer["result"]["content"][0]["text"] == json!(format!("counted {N}")),
        "{answer}"
    );
    // Most of the call was still to come when B took over: B followed A live rather than
    // replaying a finished stream.
    let remaining = Duration::from_millis(INTERVAL_MS * (N - READ_ON_A as u64) / 2);
    ensure!(
        took >= remaining,
        "B delivered the rest as A produced it ({took:?}, at least {remaining:?})"
    );

    // The session is served by B too.
    let (id, mut response) = on_b.call_tool("count", json!({"n": 3}), None).await?;
    ensure!(response.status() == 200, "POST on B: {}", response.status());
    ensure!(response.header("tether-node") == Some("node-b"));
    let answer = response
        .read_until_response(id)
        .await?
        .context("an answer on B")?;
    ensure!(
        answer["result"]["content"][0]["text"] == json!("counted 3"),
        "{answer}"
    );
    a.terminate().await?;
    b.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_node_dies_another_answers_its_open_call_after_the_lease() -> anyhow::Result<()> {
    const READ: usize = 5;
    let redis = RedisServer::start().await?;
    let mut a = node(&redis, "node-a").await?;
    let mut b = node(&redis, "node-b").await?;
    let (id, mut on_b, mut resumed) =
        cut_on_a_resume_on_b(&a, &b, json!({"n": 100_000, "interval_ms": 20}), READ).await?;
    // B is following A's production live before A dies.
    let mut events = resumed.read_events(1).await?;

    let killed = Instant::now();
    a.kill().await?;
    let transcript = resumed.read_to_end().await?;
    let took = killed.elapsed();
    ensure!(transcript.complete, "B ends the stream");
    events.extend(transcript.events().skip(1).cloned());
    let (progress, answer) = progress_then_answer(&events)?;
    let first = READ as u64 + 1;
    let expected: Vec<u64> = (first..first + progress.len() as u64).collect();
    ensure!(
        !progress.is_empty() && progress == expected,
        "a gap-free continuation: {progress:?}"
    );
    ensure!(
        answer["id"] == json!(id),
        "the answer to the call: {answer}"
    );
    ensure!(
        answer["error"]["code"] == json!(-32603)
            && answer["error"]["data"]["reason"] == json!(SERVER_RESTARTED_REASON),
        "a JSON-RPC error: {answer}"
    );
    // A renews its lease every third of it, so the lease runs out between two thirds of it
    // and all of it after the kill; half is that floor with room for timing.
    ensure!(
        took >= Duration::from_secs(LEASE_SECS) / 2,
        "not before A's lease ran out ({took:?})"
    );
    // The session's handler state died with A: B answers it with 404, and the client starts
    // a new session, which B serves.
    let (_, refused) = on_b.call_tool("count", json!({"n": 1}), None).await?;
    ensure!(
        refused.status() == 404,
        "a dead node's session: {}",
        refused.status()
    );
    let mut fresh = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    fresh.initialize().await?;
    let (id, mut response) = fresh.call_tool("count", json!({"n": 2}), None).await?;
    let answer = response.read_until_response(id).await?.context("answer")?;
    ensure!(
        answer["result"]["content"][0]["text"] == json!("counted 2"),
        "{answer}"
    );
    b.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_session_is_served_through_the_node_that_does_not_run_it() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let (dir_a, dir_b) = (TempDir::new()?, TempDir::new()?);
    let mut a = gateway_node(&redis, "node-a", dir_a.path()).await?;
    let mut b = gateway_node(&redis, "node-b", dir_b.path()).await?;
    let mut on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(30));
    on_a.initialize().await?;
    let child = std::fs::read_to_string(dir_a.path().join("pid"))?
        .trim()
        .parse::<u32>()?;

    let mut on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let (id, mut response) = on_b.call_tool("ask", json!({}), None).await?;
    ensure!(response.status() == 200, "POST on B: {}", response.status());
    ensure!(response.header("tether-node") == Some("node-b"));
    let request = loop {
        let event = response.next_event().await?.context("the stream ended")?;
        if let Some(message) = event.json()?
            && message["method"] == json!("roots/list")
        {
            break message;
        }
    };
    let roots = json!({"roots": [{"uri": "file:///tmp/two-nodes", "name": "two"}]});
    let posted = on_b
        .post(&json!({"jsonrpc": "2.0", "id": request["id"], "result": roots}))
        .await?;
    ensure!(posted.status() == 202, "answer on B: {}", posted.status());
    let answer = response
        .read_until_response(id)
        .await?
        .context("the call's answer")?;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .with_context(|| format!("a text answer: {answer}"))?;
    ensure!(
        serde_json::from_str::<Value>(text)? == roots,
        "A's child got the answer posted to B: {text}"
    );
    ensure!(
        !dir_b.path().join("pid").exists(),
        "B never started a child for A's session"
    );

    let deleted = on_b.delete_session().await?;
    ensure!(deleted.status == 200, "DELETE on B: {}", deleted.status);
    ensure!(
        wait_pids_gone(&[child], Duration::from_secs(10))
            .await
            .is_empty(),
        "A stopped the session's child"
    );
    let (_, gone) = on_a.call_tool("ask", json!({}), None).await?;
    ensure!(
        gone.status() == 404,
        "deleted everywhere: {}",
        gone.status()
    );
    a.terminate().await?;
    b.terminate().await?;
    Ok(())
}

/// With `--json-response`, a call POSTed to B for A's session runs on A; B answers with the
/// JSON response, and the call's progress reaches the session's standalone stream, which B
/// serves too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_answer_is_collected_by_the_node_that_received_the_call() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let mut a = node_spec(&redis, "node-a")?
        .arg("--json-response")
        .start()
        .await?;
    let mut b = node_spec(&redis, "node-b")?
        .arg("--json-response")
        .start()
        .await?;
    let mut on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(30));
    on_a.initialize().await?;
    let mut on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let mut standalone = on_b.open_get_stream().await?;
    ensure!(
        standalone.status() == 200,
        "GET on B: {}",
        standalone.status()
    );

    let (id, response) = on_b
        .call_tool("count", json!({"n": 3}), Some(json!("json")))
        .await?;
    ensure!(response.status() == 200, "POST on B: {}", response.status());
    ensure!(response.header("tether-node") == Some("node-b"));
    let answer = response.read_to_end().await?.json()?;
    ensure!(answer["id"] == json!(id), "{answer}");
    ensure!(
        answer["result"]["content"][0]["text"] == json!("counted 3"),
        "{answer}"
    );
    let mut progress = Vec::new();
    while progress.len() < 3 {
        let event = standalone.next_event().await?.context("standalone ended")?;
        if let Some(message) = event.json()? {
            progress.push(message["params"]["progress"].clone());
        }
    }
    ensure!(progress == [json!(1), json!(2), json!(3)], "{progress:?}");
    a.terminate().await?;
    b.terminate().await?;
    Ok(())
}

/// `_meta` of a 2026-07-28 client that declares the tasks extension.
fn as_task() -> Value {
    tether_testkit::raw::task_meta()
}

/// `tasks/get` of `task` on `node` until its status is `wanted` or terminal (or 20 s pass).
async fn task_on(node: &ServerProcess, task: &str, wanted: &str) -> anyhow::Result<Value> {
    RawClient::new(node.url())?
        .with_timeout(Duration::from_secs(30))
        .poll_task(task, wanted)
        .await
}

/// Starts `count` with `arguments` as a task on `node`; its id.
async fn start_count_task(node: &ServerProcess, arguments: Value) -> anyhow::Result<String> {
    let client = RawClient::new(node.url())?.with_timeout(Duration::from_secs(30));
    let call = client.modern(
        1,
        "tools/call",
        json!({"name": "count", "arguments": arguments}),
        as_task(),
    );
    let created = client.exchange(&call).await?.json()?;
    ensure!(created["result"]["resultType"] == "task", "{created}");
    Ok(created["result"]["taskId"]
        .as_str()
        .context("a task id")?
        .to_owned())
}

/// Tasks made on node A are read from node B; when A dies, B fails A's running task with
/// `server_restarted` once A's lease ran out, and A's finished task stays readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_running_task_fails_and_its_finished_one_stays() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let mut a = node(&redis, "node-a").await?;
    let mut b = node(&redis, "node-b").await?;
    let finished = start_count_task(&a, json!({"n": 2})).await?;
    let running = start_count_task(&a, json!({"n": 100_000, "interval_ms": 20})).await?;
    let done = task_on(&b, &finished, "completed").await?;
    ensure!(
        done["result"]["status"] == "completed",
        "B reads A's task: {done}"
    );
    ensure!(
        done["result"]["result"]["content"][0]["text"] == "counted 2",
        "{done}"
    );
    let working = task_on(&b, &running, "working").await?;
    ensure!(working["result"]["status"] == "working", "{working}");

    let killed = Instant::now();
    a.kill().await?;
    let failed = task_on(&b, &running, "failed").await?;
    let took = killed.elapsed();
    ensure!(failed["result"]["status"] == "failed", "{failed}");
    ensure!(
        failed["result"]["error"]["data"]["reason"] == json!(SERVER_RESTARTED_REASON),
        "{failed}"
    );
    ensure!(
        took >= Duration::from_secs(LEASE_SECS) / 2,
        "not before A's lease ran out ({took:?})"
    );
    let still = task_on(&b, &finished, "completed").await?;
    ensure!(still["result"]["status"] == "completed", "{still}");
    b.terminate().await?;
    Ok(())
}

/// A task runs in node A's stdio child; its question, read on node B, is answered with
/// `tasks/update` on node B, and the answer reaches A's child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_answer_sent_to_another_node_reaches_the_running_child() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let (dir_a, dir_b) = (TempDir::new()?, TempDir::new()?);
    let mut a = gateway_node(&redis, "node-a", dir_a.path()).await?;
    let mut b = gateway_node(&redis, "node-b", dir_b.path()).await?;
    let on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(30));
    let created = on_a
        .exchange(&on_a.modern(1, "tools/call", json!({"name": "ask"}), as_task()))
        .await?
        .json()?;
    let task = created["result"]["taskId"]
        .as_str()
        .context("a task")?
        .to_owned();
    let waiting = task_on(&b, &task, "input_required").await?;
    let key = waiting["result"]["inputRequests"]
        .as_object()
        .and_then(|questions| questions.keys().next().cloned())
        .with_context(|| format!("a question: {waiting}"))?;
    let roots = json!({"roots": [{"uri": "file:///b", "name": "b"}]});
    let on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    let update = on_b.modern(
        2,
        "tasks/update",
        json!({"taskId": task, "inputResponses": {key: roots}}),
        as_task(),
    );
    let ack = on_b.exchange(&update).await?;
    ensure!(ack.status == 200, "{:?}", ack.json());
    let done = task_on(&a, &task, "completed").await?;
    let text = done["result"]["result"]["content"][0]["text"]
        .as_str()
        .with_context(|| format!("a result: {done}"))?;
    ensure!(
        serde_json::from_str::<Value>(text)? == roots,
        "A's child got B's answer: {done}"
    );
    a.terminate().await?;
    b.terminate().await?;
    Ok(())
}
