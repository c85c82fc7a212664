//! The tasks extension (SEP-2663) on the server: which `tools/call` becomes a task, running it
//! detached from its connection, and `tasks/get`, `tasks/update` and `tasks/cancel`.
//!
//! A call becomes a task when its request declares the extension
//! (`clientCapabilities.extensions["io.modelcontextprotocol/tasks"]`) and the handler says the
//! tool may run as one ([`Handler::task_support`](super::handler::Handler::task_support)); a
//! tool that must run as one answers a request without the extension -32021. The task's record
//! is created in the [`TaskStore`] first — `CreateTaskResult` goes out only once a `tasks/get`
//! on any node would find it — then the handler runs in a task of its own: its questions
//! (`RequestContext::ask`) become the task's `inputRequests` and wait for `tasks/update`, a
//! `tasks/cancel` fires its cancellation, and its answer becomes the record's result or error.
//! The methods read and write the store only, never this node's memory, so any node answers
//! them. Another principal's task is answered exactly like an unknown one.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tether_proto::ids::{StreamId, TaskId};
use tether_proto::jsonrpc::{ErrorObject, Request, Response as RpcResponse};
use tether_proto::modern::{Envelope, TASKS_EXTENSION, complete_result, tasks_extension_required};
use tokio_util::sync::CancellationToken;

use super::context::ModernRequest;
use super::dispatch;
use super::mrtr::TaskLink;
use super::session::SessionRuntime;
use super::state::ServerState;
use crate::store::StoreError;
use crate::store::tasks::{TaskChange, TaskRecord, TaskStatus};

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds (`2026-12-02T06:27:01.123Z`).
pub(crate) fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The fields every view of a task has.
fn base(record: &TaskRecord) -> Map<String, Value> {
    let mut task = Map::new();
    task.insert("taskId".into(), json!(record.id));
    task.insert("status".into(), json!(record.status.as_str()));
    if let Some(message) = &record.status_message {
        task.insert("statusMessage".into(), json!(message));
    }
    task.insert("createdAt".into(), json!(iso8601(record.created_at_ms)));
    task.insert(
        "lastUpdatedAt".into(),
        json!(iso8601(record.last_updated_at_ms)),
    );
    task.insert("ttlMs".into(), json!(record.ttl_ms));
    if let Some(poll) = record.poll_interval_ms {
        task.insert("pollIntervalMs".into(), json!(poll));
    }
    task
}

/// `CreateTaskResult`: `resultType` `task` and the task, nothing inlined.
pub(crate) fn created(record: &TaskRecord) -> Value {
    let mut task = base(record);
    task.insert("resultType".into(), json!("task"));
    Value::Object(task)
}

/// `tasks/get`'s `DetailedTask`: the task with its result, error or questions inlined.
pub(crate) fn detailed(record: &TaskRecord) -> Value {
    let mut task = base(record);
    task.insert("resultType".into(), json!("complete"));
    match record.status {
        TaskStatus::Completed => {
            if let Some(result) = &record.result {
                task.insert("result".into(), result.clone());
            }
        }
        TaskStatus::Failed => {
            if let Some(error) = &record.error {
                task.insert("error".into(), error.clone());
            }
        }
        TaskStatus::InputRequired => {
            task.insert(
                "inputRequests".into(),
                Value::Object(record.input_requests.clone()),
            );
        }
        _ => {}
    }
    Value::Object(task)
}

/// The task id of a `tasks/*` request; an unparseable one is as unknown as a missing one.
fn task_id(request: &Request) -> Option<TaskId> {
    request
        .params
        .as_ref()
        .and_then(|params| params.get("taskId"))
        .and_then(Value::as_str)
        .and_then(|id| TaskId::parse(id).ok())
}

fn unknown_task() -> ErrorObject {
    ErrorObject::invalid_params("unknown task")
}

fn store_failed(error: &StoreError) -> ErrorObject {
    ErrorObject::new(
        tether_proto::jsonrpc::INTERNAL_ERROR,
        format!("task store: {error}"),
    )
}

/// Answers `tasks/get`, `tasks/update` and `tasks/cancel`; `None` for any other method.
pub(crate) async fn method(
    state: &ServerState,
    principal: &str,
    request: &Request,
    envelope: &Envelope,
) -> Option<Result<Value, ErrorObject>> {
    let method = request.method.as_str();
    if !matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel") {
        return None;
    }
    if !envelope.declares_extension(TASKS_EXTENSION) {
        return Some(Err(tasks_extension_required()));
    }
    Some(answer(state, principal, request, method).await)
}

async fn answer(
    state: &ServerState,
    principal: &str,
    request: &Request,
    method: &str,
) -> Result<Value, ErrorObject> {
    let id = task_id(request).ok_or_else(unknown_task)?;
    let ack = || json!({"resultType": "complete"});
    match method {
        "tasks/get" => match state.tasks.get(&id, principal).await {
            Ok(Some(record)) => Ok(detailed(&record)),
            Ok(None) => Err(unknown_task()),
            Err(error) => Err(store_failed(&error)),
        },
        "tasks/update" => {
            let responses = match request
                .params
                .as_ref()
                .and_then(|p| p.get("inputResponses"))
            {
                None => Map::new(),
                Some(Value::Object(responses)) => responses.clone(),
                Some(_) => {
                    return Err(ErrorObject::invalid_params(
                        "inputResponses must be an object",
                    ));
                }
            };
            match state.tasks.answer(&id, principal, responses).await {
                Ok(true) => Ok(ack()),
                Ok(false) => Err(unknown_task()),
                Err(error) => Err(store_failed(&error)),
            }
        }
        _ => match state.tasks.cancel(&id, principal).await {
            Ok(true) => Ok(ack()),
            Ok(false) => Err(unknown_task()),
            Err(error) => Err(store_failed(&error)),
        },
    }
}

/// Starts `request` as a task of `runtime`'s principal: its record is created first (durable,
/// readable from every node), then its handler runs detached on `runtime` and `stream` (a
/// context made for it); the `CreateTaskResult` to answer with.
/// `modern` is the request as the endpoint validated it, its answers from its own rounds
/// included (a tool may have asked before it became a task).
pub(crate) async fn start(
    state: &Arc<ServerState>,
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    request: Request,
    modern: ModernRequest,
    identity: Value,
) -> Result<Value, StoreError> {
    let record = TaskRecord::new(
        Arc::clone(&runtime.owner().principal),
        Some(state.config.task_ttl),
        Some(state.config.task_poll_interval),
    )
    .with_events(stream, runtime.record().id.clone());
    state.tasks.create(&record).await?;
    let span = tracing::info_span!("task", task = %record.id, method = %request.method);
    tokio::spawn(tracing::Instrument::instrument(
        run(
            Arc::clone(state),
            runtime,
            stream,
            record.id,
            request,
            modern,
            identity,
        ),
        span,
    ));
    Ok(created(&record))
}

/// Runs a task's handler to its end and records the outcome.
async fn run(
    state: Arc<ServerState>,
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    id: TaskId,
    request: Request,
    mut modern: ModernRequest,
    identity: Value,
) {
    let method = request.method.clone();
    let principal = Arc::clone(&runtime.owner().principal);
    let slot = runtime
        .reserve(std::slice::from_ref(&request.id), 1)
        .and_then(|mut slots| slots.pop())
        .and_then(Result::ok)
        .expect("a fresh runtime has room for its one request");
    let token = slot.token().clone();
    modern.task = Some(TaskLink {
        tasks: Arc::clone(&state.tasks),
        id,
    });
    let modern = Arc::new(modern);
    let watcher = tokio::spawn(watch_cancellation(
        Arc::clone(&state.tasks),
        id,
        principal,
        token,
    ));
    let response =
        dispatch::run_handler(&state, &runtime, request, slot, stream, Some(modern)).await;
    watcher.abort();
    let change = match response {
        None => TaskChange::cancelled(),
        Some(RpcResponse::Result(mut result)) => {
            complete_result(&method, &mut result.result, &identity);
            TaskChange::completed(result.result)
        }
        Some(RpcResponse::Error(error)) => {
            TaskChange::failed(serde_json::to_value(&error.error).expect("an error serializes"))
        }
    };
    if let Err(error) = state.tasks.change(&id, change).await {
        tracing::warn!(%error, "a task's outcome could not be stored");
    }
    // Completed after the outcome is recorded, so a reader that sees its events end finds
    // the outcome with `tasks/get`. The stream holds what the handler emitted, not the
    // response, and stays in the event log (the store's retention, or the task's TTL,
    // whichever ends first).
    if let Err(error) = state.events.complete(stream).await {
        tracing::debug!(%error, "a task's event stream was not completed");
    }
    runtime.close();
}

/// Calls `seen` with task `id` of `principal` as the store has it, now and after every
/// change, until `seen` says stop (`false`), the task ends (after its terminal record was
/// seen) or it is gone. Store errors are retried after a short pause.
async fn follow<F>(
    tasks: &dyn crate::store::TaskStore,
    id: TaskId,
    principal: &str,
    mut seen: impl FnMut(TaskRecord) -> F + Send,
) where
    F: std::future::Future<Output = bool> + Send,
{
    const PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
    loop {
        let record = match tasks.get(&id, principal).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%error, task = %id, "following a task");
                tokio::time::sleep(PAUSE).await;
                continue;
            }
        };
        let (version, terminal) = (record.version, record.status.is_terminal());
        if !seen(record).await || terminal {
            return;
        }
        if tasks.wait_for_change(&id, version).await.is_err() {
            tokio::time::sleep(PAUSE).await;
        }
    }
}

/// `notifications/tasks` for a listen stream: a full snapshot ([`detailed`]) of task `id` of
/// `principal` now and after every change, into `tx`, until the task ends, expires or the
/// listener goes. Read from the store, so it follows the task on whichever node runs it.
pub(crate) async fn snapshots_for_listener(
    tasks: Arc<dyn crate::store::TaskStore>,
    id: TaskId,
    principal: Arc<str>,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
) {
    let mut sent = 0;
    follow(&*tasks, id, &principal, |record: TaskRecord| {
        let fresh = record.version > sent;
        sent = sent.max(record.version);
        let tx = tx.clone();
        async move {
            if !fresh {
                return true;
            }
            let notification = tether_proto::jsonrpc::Notification::new(
                TASKS_NOTIFICATION,
                Some(detailed(&record)),
            );
            let message = tether_proto::jsonrpc::Message::Notification(notification).to_vec();
            tx.send(message).await.is_ok()
        }
    })
    .await;
}

/// The method of a task's status push on a listen stream (SEP-2663).
pub(crate) const TASKS_NOTIFICATION: &str = "notifications/tasks";

/// Cancels `token` once a client asked to cancel task `id`; ends with the task.
async fn watch_cancellation(
    tasks: Arc<dyn crate::store::TaskStore>,
    id: TaskId,
    principal: Arc<str>,
    token: CancellationToken,
) {
    follow(&*tasks, id, &principal, |record: TaskRecord| {
        if record.cancel_requested {
            token.cancel();
        }
        std::future::ready(!record.cancel_requested)
    })
    .await;
}
