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
//!
//! `tasks/stream` (SEP-2694, adapted to SEP-2663) reads a task's events from the event log:
//! the task's stream holds what its handler emitted, behind the priming event at stored seq 0,
//! so task seq = stored seq − 1. [`open_stream`] authorizes the reader as `tasks/get` does and
//! checks that the retained events cover its cursor (else `events_gone`, before any event);
//! [`TaskEventReader`] hands out the events past the cursor, then the live ones, as
//! `notifications/tasks/event` until the task's stream ends, then the answer `{}`. Any node
//! serves it: the event log is the store's.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tether_proto::ids::{StreamId, TaskId};
use tether_proto::jsonrpc::{ErrorObject, Request, Response as RpcResponse};
use tether_proto::modern::{Envelope, TASKS_EXTENSION, complete_result, tasks_extension_required};
use tokio_util::sync::CancellationToken;

use super::context::ModernRequest;
use super::dispatch;
use super::finish;
use super::mrtr::TaskLink;
use super::session::SessionRuntime;
use super::state::ServerState;
use crate::store::StoreError;
use crate::store::tasks::{TaskChange, TaskRecord, TaskStatus};
use crate::store::{EventStore, ReadBatch, StoreError as EventStoreError, StreamOwner};

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

/// A `tasks/*` request's answer (its result, or a JSON-RPC error for the request), or the
/// store failure that kept it from being answered, which the endpoint answers as it answers
/// any store failure (`ServerError::Store`: 503 while the store is unavailable, so that the
/// client asks again).
pub(crate) type TaskAnswer<T> = Result<Result<T, ErrorObject>, StoreError>;

/// Answers `tasks/get`, `tasks/update` and `tasks/cancel`; `None` for any other method.
pub(crate) async fn method(
    state: &ServerState,
    principal: &str,
    request: &Request,
    envelope: &Envelope,
) -> Option<TaskAnswer<Value>> {
    let method = request.method.as_str();
    if !matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel") {
        return None;
    }
    if !envelope.declares_extension(TASKS_EXTENSION) {
        return Some(Ok(Err(tasks_extension_required())));
    }
    Some(answer(state, principal, request, method).await)
}

async fn answer(
    state: &ServerState,
    principal: &str,
    request: &Request,
    method: &str,
) -> TaskAnswer<Value> {
    let Some(id) = task_id(request) else {
        return Ok(Err(unknown_task()));
    };
    let ack = || json!({"resultType": "complete"});
    Ok(match method {
        "tasks/get" => match state.tasks.get(&id, principal).await? {
            Some(record) => Ok(detailed(&record)),
            None => Err(unknown_task()),
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
                    return Ok(Err(ErrorObject::invalid_params(
                        "inputResponses must be an object",
                    )));
                }
            };
            if state.tasks.answer(&id, principal, responses).await? {
                Ok(ack())
            } else {
                Err(unknown_task())
            }
        }
        _ => {
            if state.tasks.cancel(&id, principal).await? {
                Ok(ack())
            } else {
                Err(unknown_task())
            }
        }
    })
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
    // From here on the runtime's events are the task's, with a size limit of their own.
    runtime.limit_event_bytes(state.config.task_max_event_bytes);
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
    // A task whose events were lost fails, its stream a gap-free prefix, rather than end
    // `completed` over a stream that misses events.
    let response = finish::settle(&runtime, stream, response).await;
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
    // Retried while the store is unavailable (Redis restarting): the node is alive, so no
    // other node would ever fail the task for it, and it would stay `working` for good.
    if let Err(error) = finish::persist(&runtime, || state.tasks.change(&id, change.clone())).await
    {
        tracing::warn!(error = %crate::error_chain(&error), "a task's outcome could not be stored");
    }
    // Completed after the outcome is recorded, so a reader that sees its events end finds
    // the outcome with `tasks/get`. The stream holds what the handler emitted, not the
    // response, and stays in the event log (the store's retention, or the task's TTL,
    // whichever ends first).
    finish::complete(&runtime, stream).await;
    runtime.close();
    // The task's events are its own session in the event log: removed whole once their
    // retention after the end has passed (readers then get `events_gone`). Not across a
    // restart of this node: the store's retention bounds them then.
    let events = Arc::clone(&state.events);
    let session = runtime.record().id.clone();
    let retention = state.config.task_events_retention;
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(retention) => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(error) = events.remove_session(&session).await {
            tracing::debug!(error = %crate::error_chain(&error), "a task's events were not removed after their retention");
        }
    });
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
                tracing::debug!(error = %crate::error_chain(&error), task = %id, "following a task");
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

/// The method that reads a task's event stream (SEP-2694).
pub(crate) const STREAM_METHOD: &str = "tasks/stream";

/// The notification that carries one task event.
pub(crate) const EVENT_NOTIFICATION: &str = "notifications/tasks/event";

/// SEP-2694's error for a cursor that retained events cannot cover.
pub(crate) const EVENTS_GONE: i64 = -32010;

/// Events read from the task's stream per store read.
const STREAM_BATCH: usize = 256;

/// The vendor event types of what a task's handler emits (docs/CONTRACTS.md#task-streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    /// `dev.tether.progress`: a `notifications/progress`; the payload is its `params`.
    Progress,
    /// `dev.tether.log`: a `notifications/message`; the payload is its `params`.
    Log,
    /// `dev.tether.message`: any other notification, whole.
    Other,
}

impl EventType {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Progress => "dev.tether.progress",
            Self::Log => "dev.tether.log",
            Self::Other => "dev.tether.message",
        }
    }
}

/// The event type of a carried notification, by its method.
fn event_type(method: &str) -> EventType {
    match method {
        "notifications/progress" => EventType::Progress,
        "notifications/message" => EventType::Log,
        _ => EventType::Other,
    }
}

/// A `tasks/stream` request that may start: where its task's events are, and the stored
/// cursor to read after (`None`: from the stream's start).
pub(crate) struct TaskEvents {
    id: TaskId,
    owner: StreamOwner,
    after: Option<u64>,
}

/// `events_gone` for task `id`: the earliest task seq still retained (`null` when none is).
fn events_gone(id: TaskId, earliest: Option<u64>) -> ErrorObject {
    ErrorObject::new(EVENTS_GONE, "the task's events after the cursor are gone")
        .with_data(json!({"reason": "events_gone", "taskId": id, "earliestSeq": earliest}))
}

/// The `after` of a `tasks/stream` request: `Some(None)` when absent, `Some(Some(seq))` for a
/// non-negative integer, `None` for anything else.
fn stream_cursor(request: &Request) -> Option<Option<u64>> {
    match request.params.as_ref().and_then(|p| p.get("after")) {
        None | Some(Value::Null) => Some(None),
        Some(after) => after.as_u64().map(Some),
    }
}

/// Authorizes a `tasks/stream` request (the extension declared, the principal's own task, a
/// valid `after`) and checks that its cursor is covered: `events_gone` now, never a partial
/// stream later. Without `after`, the stream starts at the earliest event retained.
pub(crate) async fn open_stream(
    state: &ServerState,
    principal: &str,
    request: &Request,
    envelope: &Envelope,
) -> TaskAnswer<TaskEvents> {
    if !envelope.declares_extension(TASKS_EXTENSION) {
        return Ok(Err(tasks_extension_required()));
    }
    let Some(id) = task_id(request) else {
        return Ok(Err(unknown_task()));
    };
    let Some(after) = stream_cursor(request) else {
        return Ok(Err(ErrorObject::invalid_params(
            "after must be a non-negative integer (a task event seq)",
        )));
    };
    let Some(record) = state.tasks.get(&id, principal).await? else {
        return Ok(Err(unknown_task()));
    };
    let Some(session) = record.events_session else {
        return Ok(Err(events_gone(id, None)));
    };
    let owner = StreamOwner {
        principal: Arc::clone(&record.principal),
        session,
    };
    // Task seq `a` is stored seq `a + 1`: reading after stored `a + 1` gives task seq > a.
    let stored_after = after.map(|a| a.saturating_add(1));
    let probe = match stored_after {
        Some(cursor) => {
            state
                .events
                .read_after(&owner, id.stream(), cursor, 1)
                .await
        }
        None => state.events.read_from_start(&owner, id.stream(), 1).await,
    };
    Ok(match probe {
        Ok(_) => Ok(TaskEvents {
            id,
            owner,
            after: stored_after,
        }),
        Err(EventStoreError::Expired | EventStoreError::UnknownStream) => {
            let from = stored_after.unwrap_or(0);
            let earliest = earliest_retained(&*state.events, &owner, id.stream(), from).await;
            match (after, earliest) {
                // No cursor: start where the retained events start.
                (None, Some(cursor)) => Ok(TaskEvents {
                    id,
                    owner,
                    after: Some(cursor),
                }),
                (_, earliest) => Err(events_gone(id, earliest)),
            }
        }
        Err(error) => return Err(error),
    })
}

/// The smallest stored cursor at or after `from` whose following events are all retained
/// (so the earliest retained event is stored seq cursor + 1, task seq cursor), found by
/// reading one event at growing, then halving, cursors; `None` when the stream is gone.
/// Reads are monotone: once a cursor is covered, every later one is.
async fn earliest_retained(
    events: &dyn EventStore,
    owner: &StreamOwner,
    stream: StreamId,
    from: u64,
) -> Option<u64> {
    let covered = |cursor: u64| async move {
        match events.read_after(owner, stream, cursor, 1).await {
            Ok(_) => Some(true),
            Err(EventStoreError::Expired) => Some(false),
            Err(_) => None,
        }
    };
    if covered(from).await? {
        return Some(from);
    }
    let (mut low, mut step) = (from, 1u64);
    let mut high = loop {
        let cursor = from.checked_add(step)?;
        if covered(cursor).await? {
            break cursor;
        }
        low = cursor;
        step = step.checked_mul(2)?;
    };
    // `low` is not covered, `high` is.
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if covered(middle).await? {
            high = middle;
        } else {
            low = middle;
        }
    }
    Some(high)
}

/// Reads a task's events for one `tasks/stream` response, batch by batch: each batch is the
/// `notifications/tasks/event` messages of the next retained events (live ones once the
/// replay caught up), and the last is the answer (`{}`, or `events_gone` when eviction
/// overtook the cursor meanwhile). Pulled by the response body, so a slow reader holds the
/// reading back instead of a copy growing; cancel-safe between awaits (the cursor moves only
/// after a read completed).
pub(crate) struct TaskEventReader {
    state: Arc<ServerState>,
    events: TaskEvents,
    request: tether_proto::jsonrpc::RequestId,
    identity: Value,
    /// Without a cursor the reader asked for the earliest retained event: until one is
    /// sent, evicted events are skipped rather than reported.
    may_skip: bool,
    answered: bool,
}

impl TaskEventReader {
    /// A reader answering `request` from `events`, its final result completed with
    /// `identity` (the server's `serverInfo`).
    pub(crate) fn new(
        state: Arc<ServerState>,
        events: TaskEvents,
        request: tether_proto::jsonrpc::RequestId,
        identity: Value,
    ) -> Self {
        let may_skip = events.after.is_none();
        Self {
            state,
            events,
            request,
            identity,
            may_skip,
            answered: false,
        }
    }

    /// The next messages to send, each serialized; `None` after the answer, or without one
    /// when the store became unavailable (the body ends, and the reader asks again).
    pub(crate) async fn next(&mut self) -> Option<Vec<Vec<u8>>> {
        if self.answered {
            return None;
        }
        let (id, stream) = (self.events.id, self.events.id.stream());
        loop {
            let owner = &self.events.owner;
            let read = match self.events.after {
                Some(c) => {
                    self.state
                        .events
                        .read_after(owner, stream, c, STREAM_BATCH)
                        .await
                }
                None => {
                    self.state
                        .events
                        .read_from_start(owner, stream, STREAM_BATCH)
                        .await
                }
            };
            let ReadBatch { events, complete } = match read {
                Ok(batch) => batch,
                Err(EventStoreError::Expired | EventStoreError::UnknownStream) => {
                    let from = self.events.after.unwrap_or(0);
                    let earliest =
                        earliest_retained(&*self.state.events, owner, stream, from).await;
                    if self.may_skip
                        && let Some(earliest) = earliest
                    {
                        self.may_skip = false;
                        self.events.after = Some(earliest);
                        continue;
                    }
                    return Some(vec![self.answer(Err(events_gone(id, earliest)))]);
                }
                // The reader asks again with `after` once the store is back.
                Err(EventStoreError::Unavailable(error)) => {
                    tracing::debug!(error = %crate::error_chain(&error), task = %id, "a task stream ends: store unavailable");
                    return None;
                }
                Err(error) => {
                    let error = ErrorObject::new(
                        tether_proto::jsonrpc::INTERNAL_ERROR,
                        format!("task store: {error}"),
                    );
                    return Some(vec![self.answer(Err(error))]);
                }
            };
            let drained = events.is_empty();
            let mut out = Vec::with_capacity(events.len());
            for event in events {
                self.events.after = Some(event.id.seq);
                if let Some(message) = carried(id, &event) {
                    self.may_skip = false;
                    out.push(message);
                }
            }
            if !out.is_empty() {
                return Some(out);
            }
            if complete && drained {
                return Some(vec![self.answer(Ok(json!({})))]);
            }
            if !drained {
                continue;
            }
            let after = self.events.after.unwrap_or(0);
            if let Err(error) = self.state.events.wait_for_more(stream, after).await {
                tracing::debug!(error = %crate::error_chain(&error), task = %id, "waiting on a task's events");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }

    /// The response that ends the stream, serialized.
    fn answer(&mut self, outcome: Result<Value, ErrorObject>) -> Vec<u8> {
        self.answered = true;
        let response = match outcome {
            Ok(mut result) => {
                complete_result(STREAM_METHOD, &mut result, &self.identity);
                RpcResponse::success(self.request.clone(), result)
            }
            Err(error) => RpcResponse::error(Some(self.request.clone()), error),
        };
        tether_proto::jsonrpc::Message::Response(response).to_vec()
    }
}

/// The `notifications/tasks/event` carrying `event` of task `id`, serialized; `None` for the
/// priming event and for a response (the restart error an orphan sweep stored: the outcome is
/// `tasks/get`'s to tell, not the stream's).
///
/// Compact (docs/CONTRACTS.md#task-streams): no `_meta` (the related task is `taskId`
/// already), and a progress or log event's payload is its notification's `params` alone, since
/// the type names the method; any other notification travels whole.
fn carried(id: TaskId, event: &crate::store::StoredEvent) -> Option<Vec<u8>> {
    if event.is_priming() {
        return None;
    }
    let mut message = serde_json::from_slice::<Value>(event.message()).ok()?;
    let kind = event_type(message.get("method")?.as_str()?);
    let payload = match kind {
        EventType::Progress | EventType::Log => message
            .get_mut("params")
            .map_or_else(|| json!({}), Value::take),
        EventType::Other => message,
    };
    let notification = json!({
        "jsonrpc": "2.0",
        "method": EVENT_NOTIFICATION,
        "params": {
            "seq": event.id.seq - 1,
            "taskId": id,
            "type": kind.as_str(),
            "payload": payload,
        },
    });
    Some(serde_json::to_vec(&notification).expect("JSON"))
}
