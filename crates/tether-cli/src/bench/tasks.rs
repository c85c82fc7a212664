//! `tether bench tasks`: what the tasks extension (SEP-2663) and task streams (SEP-2694) cost
//! on one 2026-07-28 server, with the tasks extension declared:
//!
//! - creation: `count {n: 1}` calls made one after another, each timed from sending the
//!   request to its `CreateTaskResult` parsed (the server stored the record before answering);
//! - `tasks/get`: C callers polling the created tasks back to back for a while, each answer
//!   checked to be a task with a known status;
//! - `tasks/stream`: a `count {n: E}` task read from its first event while it runs (live),
//!   then again once it ended (replay from the store); each read is checked event by event
//!   (`seq` 0..E−1, each carrying progress `seq + 1`) and must end with the `{}` answer; a
//!   server whose `server/discover` offers no `eventStreams` (any but tether) reports
//!   `stream_offered: false` instead.
//!
//! Like every bench, it fails rather than report a number when anything went missing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use tether::proto::modern::TASKS_EXTENSION;
use tether::sse::{Decoder, Item};
use tokio::task::JoinSet;

use super::mcp::{Stateless, first_message, http_client_builder, is_event_stream};
use super::scenarios::{latency_histogram, micros, quantile_ms};
use super::{Report, median, per_second};

/// Creations before the timed ones, so that connections and the store are warm.
const WARM_UP_CREATIONS: u64 = 20;

/// The statuses a task can be in.
const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// Runs the scenario against `url` (module docs).
pub(crate) async fn run(
    url: &str,
    creations: u64,
    clients: u64,
    seconds: f64,
    events: u64,
    runs: u64,
) -> anyhow::Result<Report> {
    let http = http_client_builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .context("building the HTTP client")?;
    let client = Arc::new(Stateless::discover(&http, url).await?.declaring_tasks());
    let mut report = Report::new("tasks", url);

    for _ in 0..WARM_UP_CREATIONS {
        create(&client, 1).await?;
    }
    let mut histogram = latency_histogram();
    let mut ids = Vec::new();
    for _ in 0..creations {
        let sent = Instant::now();
        ids.push(create(&client, 1).await?);
        histogram.record(micros(sent.elapsed()))?;
    }
    report.add("create_p50_ms", quantile_ms(&histogram, 0.5), "ms");
    report.add("create_p99_ms", quantile_ms(&histogram, 0.99), "ms");

    let (gets, histogram, elapsed) = poll_for(&client, Arc::new(ids), clients, seconds).await?;
    report.add("get_clients", clients, "clients");
    report.add("gets_per_sec", per_second(gets, elapsed), "calls/s");
    report.add("get_p50_ms", quantile_ms(&histogram, 0.5), "ms");
    report.add("get_p99_ms", quantile_ms(&histogram, 0.99), "ms");

    let streams = client.discovered()["capabilities"]["extensions"][TASKS_EXTENSION]
        .get("eventStreams")
        .is_some();
    report.add("stream_offered", streams, "");
    if !streams {
        // Nothing to read: SEP-2694 is tether's alone so far.
        return Ok(report);
    }
    let (mut live, mut replay) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let task = create(&client, events).await?;
        let started = Instant::now();
        read_stream(&client, &task, events).await?;
        live.push(per_second(events, started.elapsed()));
        let started = Instant::now();
        read_stream(&client, &task, events).await?;
        replay.push(per_second(events, started.elapsed()));
    }
    report.add("stream_events", events, "events");
    report.add("stream_live_events_per_sec", median(live), "events/s");
    report.add("stream_replay_events_per_sec", median(replay), "events/s");
    Ok(report)
}

/// Starts `count {n}` as a task; its id, once the `CreateTaskResult` arrived.
async fn create(client: &Stateless, n: u64) -> anyhow::Result<String> {
    let params = json!({
        "name": "count",
        "arguments": {"n": n, "interval_ms": 0},
        "_meta": {"progressToken": "bench"},
    });
    let response = client.send("tools/call", Some("count"), params).await?;
    let answer = first_message(response).await?;
    match (
        answer.pointer("/result/resultType").and_then(Value::as_str),
        answer.pointer("/result/taskId").and_then(Value::as_str),
    ) {
        (Some("task"), Some(id)) => Ok(id.to_owned()),
        _ => bail!(
            "`count` did not run as a task (does the server offer the tasks extension?): {answer}"
        ),
    }
}

/// `clients` callers polling `tasks/get` over `ids` for `seconds` (after a fifth of it as a
/// warm-up): the answers, their latencies and the time until the last caller stopped.
async fn poll_for(
    client: &Arc<Stateless>,
    ids: Arc<Vec<String>>,
    clients: u64,
    seconds: f64,
) -> anyhow::Result<(u64, hdrhistogram::Histogram<u64>, Duration)> {
    ensure!(!ids.is_empty(), "no task was created to poll");
    let warm_up = Duration::from_secs_f64(seconds / 5.0);
    let window = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut callers = JoinSet::new();
    for caller in 0..clients {
        let (client, ids) = (Arc::clone(client), Arc::clone(&ids));
        callers.spawn(async move {
            let mut histogram = latency_histogram();
            let mut gets = 0;
            let mut at = usize::try_from(caller).unwrap_or_default();
            while start.elapsed() < warm_up + window {
                let id = &ids[at % ids.len()];
                at += 1;
                let sent = Instant::now();
                let params = json!({"taskId": id});
                let response = client.send("tasks/get", Some(id), params).await?;
                let answer = first_message(response).await?;
                let status = answer.pointer("/result/status").and_then(Value::as_str);
                ensure!(
                    status.is_some_and(|s| STATUSES.contains(&s)),
                    "tasks/get {id} answered {answer}"
                );
                if start.elapsed() > warm_up {
                    histogram.record(micros(sent.elapsed()))?;
                    gets += 1;
                }
            }
            anyhow::Ok((gets, histogram))
        });
    }
    let mut total = 0;
    let mut histogram = latency_histogram();
    while let Some(caller) = callers.join_next().await {
        let (gets, caller) = caller.context("a caller panicked")??;
        total += gets;
        histogram.add(caller)?;
    }
    Ok((total, histogram, start.elapsed().saturating_sub(warm_up)))
}

/// Reads task `task`'s stream from its first event, checking that the events are seq
/// 0..`events`−1 in order, each carrying progress `seq + 1`, and that it ends with `{}`.
async fn read_stream(client: &Stateless, task: &str, events: u64) -> anyhow::Result<()> {
    let mut response = client
        .send("tasks/stream", Some(task), json!({"taskId": task}))
        .await?;
    ensure!(
        is_event_stream(&response),
        "tasks/stream answered without a stream: {}",
        first_message(response).await?
    );
    let mut decoder = Decoder::new();
    let mut next = 0;
    loop {
        let chunk = response.chunk().await.context("reading the task stream")?;
        match &chunk {
            Some(bytes) => decoder.feed(bytes),
            None => decoder.finish(),
        }
        while let Some(item) = decoder.next_item().context("invalid SSE")? {
            let Item::Event(event) = item else { continue };
            let data = event.data();
            if data.is_empty() {
                continue;
            }
            if data.contains("notifications/tasks/event") {
                let seq = number_after(data, "\"seq\":");
                ensure!(
                    seq == Some(next)
                        && data.contains("\"type\":\"dev.tether.progress\"")
                        && number_after(data, "\"progress\":") == Some(next + 1),
                    "task event {data} arrived where seq {next} was expected: events lost or \
                     repeated"
                );
                next += 1;
                continue;
            }
            let message: Value =
                serde_json::from_str(data).with_context(|| format!("not JSON: {data}"))?;
            ensure!(
                message.get("result").is_some(),
                "tasks/stream failed: {message}"
            );
            ensure!(
                next == events,
                "the task stream ended after {next} of {events} events"
            );
            return Ok(());
        }
        if chunk.is_none() {
            bail!("the task stream ended after {next} of {events} events, without its answer");
        }
    }
}

/// The unsigned integer right after `key` in `data` (the bench's hot path: no JSON parse).
fn number_after(data: &str, key: &str) -> Option<u64> {
    let rest = &data[data.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::number_after;

    #[test]
    fn the_seq_of_a_task_event() {
        let event = r#"{"jsonrpc":"2.0","method":"notifications/tasks/event","params":{"seq":17,"taskId":"t","type":"dev.tether.progress","payload":{"progressToken":"bench","progress":18}}}"#;
        assert_eq!(number_after(event, "\"seq\":"), Some(17));
        assert_eq!(number_after(event, "\"progress\":"), Some(18));
        assert_eq!(number_after(r#"{"seq":"x"}"#, "\"seq\":"), None);
        assert_eq!(number_after("{}", "\"seq\":"), None);
    }
}
