//! The chaos workers that call as 2026-07-28 tasks: tether's client pinned to the modern era,
//! so every `count` runs as a task whose events it reads with `tasks/stream` (SEP-2694),
//! deduplicating by seq and asking again after each cut.
//!
//! Besides the checks every call gets (progress 1..n once and in order, then `counted n`),
//! each task the client learned of must reach a terminal status that `tasks/get` shows,
//! whatever happened to the call that followed it: a call that gave up (its reconnect budget
//! ran out) leaves its task running on the server, so the worker polls `tasks/get` until the
//! task ends. A task the server no longer knows, one still running past the call deadline,
//! or one whose status contradicts what the call delivered (a completed call whose task did
//! not complete) is a lost task: a violation.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use tether::client::{Client, ProtocolChoice};
use tether::proto::jsonrpc::Response;
use tether::proto::version::ProtocolVersion;

use super::client::{LossClock, client_call, client_config, watch_reconnects};
use super::{Ctx, Outcome, finish, setup_failed, take_call, within_deadline};

/// How often a task that outlived its call is polled.
const POLL: Duration = Duration::from_millis(100);

pub(super) async fn task_worker(ctx: Arc<Ctx>, worker: usize) -> anyhow::Result<()> {
    let mut attempts = 0;
    let mut config = client_config(&ctx.config);
    config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
    config.client_name = "tether-chaos-tasks".to_owned();
    let client = loop {
        let url = &ctx.urls[worker % ctx.urls.len()];
        match Client::connect(url, config.clone()).await {
            Ok(client) if client.is_modern() => break client,
            Ok(_) => anyhow::bail!("worker {worker}: the server did not serve 2026-07-28"),
            Err(error) => setup_failed(worker, &mut attempts, error).await?,
        }
    };
    let clock = Arc::new(LossClock::default());
    let watcher = watch_reconnects(&ctx, &client, &clock);
    while let Some((call, mut tracker)) = take_call(&ctx, &ctx.tally.task_calls).await {
        clock.reset();
        let mut task: Option<String> = None;
        let outcome = within_deadline(
            &ctx,
            client_call(&ctx, &client, &clock, call, &mut tracker, &mut task),
        )
        .await;
        if let Some(task) = task {
            check_task(&ctx, &client, call.index, &task, outcome.as_ref()).await;
        }
        finish(&ctx, call.index, "task", &tracker, outcome);
    }
    watcher.abort();
    Ok(())
}

/// Polls `tasks/get` for `task` until it is terminal (at most the call deadline), and checks
/// its status against how its call ended; records the task as ended or lost.
async fn check_task(ctx: &Ctx, client: &Client, index: u64, task: &str, outcome: Option<&Outcome>) {
    let t = &ctx.tally;
    t.tasks_created.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + ctx.config.call_deadline;
    let status = loop {
        match task_status(client, task).await {
            Ok(Some(status)) if is_terminal(&status) => break Ok(status),
            Ok(_) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
            Ok(status) => break Err(format!("still {status:?} past the deadline")),
            Err(error) if Instant::now() < deadline && !error.contains("unknown task") => {
                tokio::time::sleep(POLL).await;
            }
            Err(error) => break Err(error),
        }
    };
    let contradiction = match (&status, outcome) {
        (Ok(status), Some(Outcome::Completed)) if status != "completed" => {
            Some(format!("the call completed but the task is {status}"))
        }
        (Ok(status), Some(Outcome::ServerRestarted | Outcome::StoreOutage))
            if status != "failed" =>
        {
            Some(format!("the call failed but the task is {status}"))
        }
        _ => None,
    };
    match (status, contradiction) {
        (Ok(status), None) => {
            t.tasks_terminal.fetch_add(1, Ordering::SeqCst);
            let counter = match status.as_str() {
                "completed" => &t.tasks_completed,
                "failed" => &t.tasks_failed,
                _ => &t.tasks_cancelled,
            };
            counter.fetch_add(1, Ordering::SeqCst);
        }
        (Ok(_), Some(why)) | (Err(why), _) => {
            t.tasks_lost.fetch_add(1, Ordering::SeqCst);
            t.note(
                format!("call {index} (task {task}): TASK LOST: {why}"),
                true,
            );
        }
    }
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// One `tasks/get`: the task's status, or why there is none.
async fn task_status(client: &Client, task: &str) -> Result<Option<String>, String> {
    let stream = client
        .request("tasks/get", Some(json!({"taskId": task})))
        .await
        .map_err(|e| tether::error_chain(&e).to_string())?;
    match stream
        .response()
        .await
        .map_err(|e| tether::error_chain(&e).to_string())?
    {
        Response::Result(result) => Ok(result.result["status"].as_str().map(str::to_owned)),
        Response::Error(error) => Err(format!(
            "tasks/get answered {} {}",
            error.error.code, error.error.message
        )),
    }
}
