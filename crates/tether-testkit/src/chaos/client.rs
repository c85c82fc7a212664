//! The chaos workers that call through tether's client library, which resumes on its own:
//! each call's messages are checked as the application takes them.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, Error as ClientError, ToolCallItem};
use tether::proto::backoff::{BackoffConfig, Budget};
use tether::proto::jsonrpc::Response;
use tether::proto::reconnect::ReconnectConfig;

use super::{
    Call, ChaosConfig, Ctx, Outcome, RAW_BACKOFF_CAP, RECONNECT_ATTEMPTS, RECONNECT_ELAPSED,
    Tracker, check_result, error_outcome, finish, setup_failed, take_call, within_deadline,
};

pub(super) fn client_config(config: &ChaosConfig) -> ClientConfig {
    let retry = Duration::from_millis(config.retry_ms.max(1));
    let mut backoff = BackoffConfig::default();
    backoff.base = retry;
    backoff.cap = RAW_BACKOFF_CAP;
    let mut reconnect = ReconnectConfig::default();
    reconnect.backoff = backoff;
    reconnect.budget = Budget {
        max_attempts: RECONNECT_ATTEMPTS,
        max_elapsed: RECONNECT_ELAPSED,
    };
    reconnect.idle_timeout = config.idle_timeout;
    let mut client = ClientConfig::default();
    // The client workers are the 2025 era's (sessions, `Last-Event-ID`); the task workers
    // pin 2026-07-28 themselves.
    client.protocol = tether::client::ProtocolChoice::Legacy;
    client.reconnect = reconnect;
    client.request_timeout = Duration::from_secs(5);
    client.connect_timeout = Duration::from_secs(2);
    client.client_name = "tether-chaos".to_owned();
    client
}

/// When the current call's stream was lost (the first `Reconnecting` since its last
/// delivered message).
#[derive(Default)]
pub(super) struct LossClock(Mutex<Option<Instant>>);

impl LossClock {
    /// A new call: no loss yet.
    pub(super) fn reset(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// A message reached the application: the time since the loss, if there was one, is a
    /// resume latency.
    pub(super) fn resumed(&self, ctx: &Ctx) {
        if let Some(lost_at) = self.0.lock().unwrap_or_else(PoisonError::into_inner).take() {
            ctx.tally.latency(lost_at);
        }
    }
}

/// Counts `client`'s reconnects and starts the loss clock at the first of each loss.
pub(super) fn watch_reconnects(
    ctx: &Arc<Ctx>,
    client: &Client,
    clock: &Arc<LossClock>,
) -> tokio::task::JoinHandle<()> {
    let mut events = client.events();
    let clock = Arc::clone(clock);
    let ctx = Arc::clone(ctx);
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let tether::client::ClientEvent::Reconnecting { .. } = event {
                ctx.tally.reconnects.fetch_add(1, Ordering::SeqCst);
                let mut at = clock.0.lock().unwrap_or_else(PoisonError::into_inner);
                at.get_or_insert_with(Instant::now);
            }
        }
    })
}

pub(super) async fn client_worker(ctx: Arc<Ctx>, worker: usize) -> anyhow::Result<()> {
    let mut attempts = 0;
    let client = loop {
        // Tether's client talks to one URL: workers are spread over the nodes.
        let url = &ctx.urls[(worker / 2) % ctx.urls.len()];
        match Client::connect(url, client_config(&ctx.config)).await {
            Ok(client) => break client,
            Err(error) => setup_failed(worker, &mut attempts, error).await?,
        }
    };
    let clock = Arc::new(LossClock::default());
    let watcher = watch_reconnects(&ctx, &client, &clock);
    while let Some((call, mut tracker)) = take_call(&ctx, &ctx.tally.client_calls).await {
        clock.reset();
        let outcome = within_deadline(
            &ctx,
            client_call(&ctx, &client, &clock, call, &mut tracker, &mut None),
        )
        .await;
        finish(&ctx, call.index, "client", &tracker, outcome);
    }
    watcher.abort();
    // Through the faulty proxy the DELETE may fail; the server forgets the session anyway.
    let _ = tokio::time::timeout(Duration::from_secs(2), client.close()).await;
    Ok(())
}

/// One `count` call through `client`, checked item by item; `task` gets the id of the task
/// the call runs as, once the server answered with one.
pub(super) async fn client_call(
    ctx: &Ctx,
    client: &Client,
    clock: &LossClock,
    call: Call,
    tracker: &mut Tracker,
    task: &mut Option<String>,
) -> Outcome {
    let mut stream = match client.call_tool("count", call.arguments()).await {
        Ok(stream) => stream,
        Err(error) => return Outcome::BeforeStream(tether::error_chain(&error).to_string()),
    };
    while let Some(item) = stream.next().await {
        if task.is_none() {
            *task = stream.task_id().map(str::to_owned);
        }
        clock.resumed(ctx);
        match item {
            Ok(item) => {
                if let Some(outcome) = client_outcome(ctx, call, tracker, item) {
                    return outcome;
                }
            }
            Err(error) => return client_error(error, tracker),
        }
    }
    Outcome::Untyped("the call's stream ended without a response".to_owned())
}

/// Checks one item of a `count` call: progress goes to the tracker; the response ends the
/// call with its outcome.
fn client_outcome(
    ctx: &Ctx,
    call: Call,
    tracker: &mut Tracker,
    item: ToolCallItem,
) -> Option<Outcome> {
    match item {
        ToolCallItem::Progress { progress, .. } => {
            tracker.progress(progress as u64);
            None
        }
        ToolCallItem::Response(Response::Result(result)) => {
            check_result(ctx, call.index, call.n, &result.result);
            Some(Outcome::Completed)
        }
        ToolCallItem::Response(Response::Error(error)) => {
            let object = &error.error;
            let data = object.data.clone().unwrap_or(Value::Null);
            Some(error_outcome(
                &json!({"code": object.code, "message": object.message, "data": data}),
            ))
        }
        other => Some(Outcome::Untyped(format!("unexpected item {other:?}"))),
    }
}

fn client_error(error: ClientError, tracker: &Tracker) -> Outcome {
    let text = format!("{} ({error:?})", tether::error_chain(&error));
    match error {
        // The session died with its node; the client has already made a new one.
        ClientError::SessionExpired => Outcome::ServerRestarted,
        ClientError::NotResumable if tracker.max == 0 => Outcome::BeforeStream(text),
        // 2026-07-28: `tools/call` is not repeated, so a cut before `CreateTaskResult` leaves
        // nothing to follow; a task the server forgot is lost.
        ClientError::MayHaveRun { .. } => Outcome::BeforeStream(text),
        ClientError::UnknownTask { task_id } => {
            Outcome::Untyped(format!("the server forgot task {task_id}"))
        }
        ClientError::Protocol(_) | ClientError::NoResponse => Outcome::Untyped(text),
        _ => Outcome::Typed(text),
    }
}
