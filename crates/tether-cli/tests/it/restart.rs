//! `tether serve` on its default store (SQLite in the data dir) survives SIGKILL: after a
//! restart on the same port and file, a client holding its session id and an event id
//! resumes, receives every event stored before the kill exactly once and in order, then a
//! JSON-RPC error for the request whose handler died, and the session keeps working.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tether::server::SERVER_RESTARTED_REASON;
use tether_testkit::{launcher::ServerSpec, raw::RawClient};

/// Events a count would emit if it were not killed: far more than are stored before the kill.
const N: usize = 400;

/// Progress events read on the first connection before the kill.
const READ_BEFORE_KILL: usize = 20;

/// The progress event whose id the client resumes after (so events 6.. are replayed).
const RESUME_AFTER: usize = 5;

/// The `progress` value of a progress notification.
fn progress_of(message: &Value) -> Option<u64> {
    (message["method"] == "notifications/progress")
        .then(|| message["params"]["progress"].as_u64())
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_then_restart_replays_and_answers_the_orphan() -> anyhow::Result<()> {
    let spec = ServerSpec::tether_serve()?.args(["--retry-ms", "100"]);
    let database = spec
        .data_dir()
        .context("a private data dir")?
        .join("tether.db");
    let mut server = spec.start().await?;
    ensure!(
        database.is_file(),
        "default store at {}",
        database.display()
    );

    let mut client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    client.initialize().await?;
    let (id, mut response) = client
        .call_tool(
            "count",
            json!({"n": N, "interval_ms": 10}),
            Some(json!("k")),
        )
        .await?;
    ensure!(response.status() == 200, "status {}", response.status());
    // The priming event, then progress 1..=READ_BEFORE_KILL.
    let before = response.read_events(READ_BEFORE_KILL + 1).await?;
    let before_progress: Vec<u64> = before
        .iter()
        .filter_map(|event| event.json().ok().flatten())
        .filter_map(|message| progress_of(&message))
        .collect();
    let expected: Vec<u64> = (1..=READ_BEFORE_KILL as u64).collect();
    ensure!(
        before_progress == expected,
        "before the kill: {before_progress:?}"
    );
    let cursor = before[RESUME_AFTER].id.clone();

    server.kill().await?;
    drop(response);
    server.restart().await?;

    let resumed = client.resume(&cursor).await?;
    ensure!(
        resumed.status() == 200,
        "resume after restart: {} {:?}",
        resumed.status(),
        resumed.transcript().body
    );
    let transcript = resumed.read_to_end().await?;
    ensure!(transcript.complete, "the resumed stream ends");
    let messages = transcript.messages()?;
    let (last, progress) = messages.split_last().context("events after the restart")?;
    let progress: Vec<u64> = progress
        .iter()
        .map(|(_, message)| progress_of(message).context("only progress before the answer"))
        .collect::<anyhow::Result<_>>()?;
    let first = RESUME_AFTER as u64 + 1;
    let stored = progress.last().copied().unwrap_or(0);
    let contiguous: Vec<u64> = (first..=stored).collect();
    ensure!(
        progress == contiguous,
        "replay after {RESUME_AFTER}: every stored event once, in order: {progress:?}"
    );
    ensure!(
        stored >= READ_BEFORE_KILL as u64,
        "events delivered before the kill were replayed after the restart: up to {stored}"
    );
    ensure!(
        stored < N as u64,
        "the count cannot have finished: {stored}"
    );
    let answer = &last.1;
    ensure!(answer["id"] == json!(id), "the orphan's answer: {answer}");
    ensure!(
        answer["error"]["code"] == json!(-32603)
            && answer["error"]["data"]["reason"] == json!(SERVER_RESTARTED_REASON),
        "a JSON-RPC error naming the restart: {answer}"
    );

    // A second resume from the same cursor replays the very same events: nothing was
    // appended twice, and the answer is part of the stream.
    let again = client.resume(&cursor).await?.read_to_end().await?;
    ensure!(
        again.event_ids() == transcript.event_ids(),
        "same ids on a second resume"
    );

    // The session lives on: a new call in it completes.
    let (id, mut response) = client
        .call_tool("count", json!({"n": 3}), Some(json!("after")))
        .await?;
    ensure!(
        response.status() == 200,
        "call after restart: {}",
        response.status()
    );
    let result = response
        .read_until_response(id)
        .await?
        .context("a result after the restart")?;
    ensure!(
        result["result"]["content"][0]["text"] == json!("counted 3"),
        "{result}"
    );
    let status = server.terminate().await?;
    ensure!(status.code() == Some(0), "exit {status}");
    Ok(())
}

#[tokio::test]
async fn a_second_server_on_the_same_store_is_refused() -> anyhow::Result<()> {
    let spec = ServerSpec::tether_serve()?;
    let mut first = spec.clone().start().await?;
    // Same data dir, another port.
    let second = spec.start().await;
    let error = second.err().context("a second process on the same store")?;
    let message = format!("{error:#}");
    ensure!(message.contains("in use by another process"), "{message}");
    // The first one is unaffected.
    RawClient::new(first.url())?.initialize().await?;
    let status = first.terminate().await?;
    ensure!(status.code() == Some(0), "exit {status}");
    Ok(())
}

/// A 2026-07-28 tasks-extension call on `client`: `tools/call NAME ARGS` (or any `method`),
/// returning its JSON answer.
async fn modern_call(
    client: &RawClient,
    id: i64,
    method: &str,
    params: Value,
) -> anyhow::Result<Value> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut request = client
        .request("POST")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    if let Some(name) = name {
        request = request.header("Mcp-Name", &name);
    }
    let transcript = client.exchange(&request).await?;
    ensure!(transcript.status == 200, "{method}: {}", transcript.status);
    transcript.json()
}

/// `tasks/get` until the task is terminal (or 20 s pass).
async fn terminal(client: &RawClient, task: &str) -> anyhow::Result<Value> {
    for attempt in 0..200 {
        let got = modern_call(client, 1000 + attempt, "tasks/get", json!({"taskId": task})).await?;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return Ok(got["result"].clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("task {task} did not end")
}

/// Tasks on SQLite survive SIGKILL: after a restart on the same file a completed task is
/// still readable with its result, and the one that was running when the process died is
/// `failed` with `data.reason` `server_restarted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_restart_keeps_finished_tasks_and_fails_the_running_one() -> anyhow::Result<()>
{
    let spec = ServerSpec::tether_serve()?.args(["--demo", "conformance"]);
    let mut server = spec.start().await?;
    let client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));
    let quick = modern_call(
        &client,
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "quick"}}),
    )
    .await?;
    ensure!(quick["result"]["resultType"] == "task", "{quick}");
    let quick = quick["result"]["taskId"]
        .as_str()
        .context("a task id")?
        .to_owned();
    let done = terminal(&client, &quick).await?;
    ensure!(done["status"] == "completed", "{done}");
    let long = modern_call(
        &client,
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": "long"}}),
    )
    .await?;
    let long = long["result"]["taskId"]
        .as_str()
        .context("a task id")?
        .to_owned();

    server.kill().await?;
    server.restart().await?;
    let client = RawClient::new(server.url())?.with_timeout(Duration::from_secs(20));

    let after = modern_call(&client, 3, "tasks/get", json!({"taskId": quick})).await?;
    ensure!(after["result"]["status"] == "completed", "{after}");
    ensure!(
        after["result"]["result"] == done["result"],
        "the same result after the restart: {after}"
    );
    let orphan = terminal(&client, &long).await?;
    ensure!(orphan["status"] == "failed", "{orphan}");
    ensure!(
        orphan["error"]["data"]["reason"] == SERVER_RESTARTED_REASON,
        "{orphan}"
    );
    Ok(())
}
