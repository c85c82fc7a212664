//! Tasks (SEP-2663) and task streams (SEP-2694) in the client: following a `tools/call` that
//! the server answered with a task, to its outcome, as the call's own [`MessageStream`].
//!
//! When the server offers the tasks extension (`server/discover`) and
//! [`ClientConfig::tasks`](super::ClientConfig::tasks) is on, every 2026-07-28 request
//! declares it, so a tool that may run as a task does. Its `CreateTaskResult` is not handed
//! to the application: [`Inner::follow_task`] tells the stream the task id at once (its
//! [`ResumptionToken`](super::ResumptionToken) names the task from then on), then
//!
//! - reads the task's events with `tasks/stream` where the server offers `eventStreams`: each
//!   event's carried message is delivered under its `seq` (the stream's commit cursor), an
//!   event at or below the last delivered seq is dropped, and a cut is followed by
//!   `tasks/stream` again with `after` = the last delivered seq, with the reconnect backoff
//!   and budget; `events_gone` fails the call with [`Error::EventsUnavailable`];
//! - polls `tasks/get` at the task's `pollIntervalMs` meanwhile, answering `input_required`
//!   through the [`ServerRequestHandler`](super::ServerRequestHandler) with `tasks/update`;
//! - ends with the outcome `tasks/get` reports as the final response: a completed task's
//!   result, a failed task's error, a cancelled task as an error with `data.reason`
//!   `"cancelled"`. A task the server no longer knows is [`Error::UnknownTask`].
//!
//! [`Client::resume`](super::Client::resume) of a token that names a task continues the same
//! way after the token's seq, in a new process, without sending `tools/call` again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tether_proto::jsonrpc::{
    ErrorObject, Message, Notification, RequestId, Response as RpcResponse,
};
use tether_proto::modern::{TASKS_EXTENSION, name_header};
use tokio::sync::{Notify, mpsc};

use super::error::Error;
use super::modern::{Carried, Outcome};
use super::retry::Attempts;
use super::session::Inner;
use super::stream::Delivery;
use super::stream::MessageStream;

/// SEP-2694's error for a cursor the retained events cannot cover.
const EVENTS_GONE: i64 = -32010;

/// The poll interval when the server suggests none; and the bounds put on a suggestion, so that
/// a server can neither make the client spin nor stall it.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
const MIN_POLL: Duration = Duration::from_millis(20);
const MAX_POLL: Duration = Duration::from_secs(30);

/// Task events read ahead of the application while a `tasks/stream` response is parsed.
const READ_AHEAD: usize = 64;

impl Inner {
    /// [`modern_rounds`](Self::modern_rounds), then, when the server answered with a task,
    /// the task followed to its outcome ([`follow_task`](Self::follow_task)).
    pub(super) async fn rounds_or_task(
        self: &Arc<Self>,
        method: &str,
        params: Option<&Value>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<RpcResponse, Error> {
        let response = self.modern_rounds(method, params, tx).await?;
        match created_task(&response) {
            Some((task, poll)) => self.follow_task(&task, poll, None, tx).await,
            None => Ok(response),
        }
    }

    /// Whether the server offers the tasks extension, and its event streams.
    pub(super) fn offers_tasks(&self) -> (bool, bool) {
        let result = crate::lock(&self.server_result);
        let extension = &result["capabilities"]["extensions"][TASKS_EXTENSION];
        (
            extension.is_object(),
            extension.get("eventStreams").is_some(),
        )
    }

    /// Follows task `task` to its outcome (module docs), delivering its events after `after`
    /// to `tx`; the final response, under a placeholder id.
    pub(super) async fn follow_task(
        self: &Arc<Self>,
        task: &str,
        poll: Option<Duration>,
        after: Option<u64>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<RpcResponse, Error> {
        if tx.send(Delivery::Task(task.to_owned())).await.is_err() {
            return Err(Error::Closed);
        }
        let (_, streams) = self.offers_tasks();
        // The events end once the outcome is recorded (the server completes a task's stream
        // after it): asking for it then, not a poll interval later.
        let ended = Notify::new();
        let events = async {
            if streams {
                let read = self.stream_task_events(task, after, poll, tx).await;
                ended.notify_one();
                read
            } else {
                Ok(())
            }
        };
        let (record, ()) = tokio::try_join!(self.await_task(task, poll, Some(&ended)), events)?;
        Ok(outcome(&record, RequestId::from(0_u64)))
    }

    /// One task request (`tasks/get`, `tasks/update`) to its result; an error answer is
    /// [`Error::UnknownTask`] when it says so, else [`Error::Protocol`].
    pub(super) async fn task_request(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        task: &str,
    ) -> Result<Value, Error> {
        // Nothing is delivered before these answers; a message that came would fail the
        // request rather than wait for a reader.
        let (sink, _) = mpsc::channel(1);
        match self.modern_rounds(method, Some(&params), &sink).await? {
            RpcResponse::Result(result) => Ok(result.result),
            RpcResponse::Error(error) if names_unknown_task(&error.error) => {
                Err(Error::UnknownTask {
                    task_id: task.to_owned(),
                })
            }
            RpcResponse::Error(error) => Err(Error::Protocol(format!(
                "{method} answered {} {}",
                error.error.code, error.error.message
            ))),
        }
    }

    /// Polls `tasks/get` until the task is terminal, answering its questions; its last
    /// `DetailedTask`. A notice on `wake` asks again at once.
    pub(super) async fn await_task(
        self: &Arc<Self>,
        task: &str,
        poll: Option<Duration>,
        wake: Option<&Notify>,
    ) -> Result<Value, Error> {
        let mut poll = poll.unwrap_or(DEFAULT_POLL);
        let mut answered: Map<String, Value> = Map::new();
        loop {
            let record = self
                .task_request("tasks/get", json!({"taskId": task}), task)
                .await?;
            if let Some(ms) = record["pollIntervalMs"].as_u64() {
                poll = Duration::from_millis(ms);
            }
            match record["status"].as_str() {
                Some("completed" | "failed" | "cancelled") => return Ok(record),
                Some("input_required") => {
                    let questions = record["inputRequests"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    let mut responses = Map::new();
                    for (key, question) in questions {
                        if !answered.contains_key(&key) {
                            let answer = self.answer_question(&key, &question).await?;
                            responses.insert(key, answer);
                        }
                    }
                    if !responses.is_empty() {
                        let params = json!({"taskId": task, "inputResponses": responses});
                        match self.task_request("tasks/update", params, task).await {
                            Ok(_) => answered.extend(responses),
                            // Maybe applied: the next poll shows whether it still asks.
                            Err(Error::MayHaveRun { .. }) => {}
                            Err(error) => return Err(error),
                        }
                        continue;
                    }
                }
                _ => {}
            }
            let pause = tokio::time::sleep(poll.clamp(MIN_POLL, MAX_POLL));
            match wake {
                Some(wake) => tokio::select! {
                    () = pause => {}
                    () = wake.notified() => {}
                },
                None => pause.await,
            }
        }
    }

    /// Reads task `task`'s events with `tasks/stream` after `after` until the stream answers,
    /// asking again after each cut (module docs), after the server's `retry`, else `poll`.
    pub(super) async fn stream_task_events(
        self: &Arc<Self>,
        task: &str,
        after: Option<u64>,
        poll: Option<Duration>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<(), Error> {
        let mut last = after;
        let fallback = crate::lock(&self.server_retry).or(poll);
        let mut attempts = Attempts::task_stream(self.config.reconnect, after, fallback);
        let mut first = true;
        loop {
            attempts.next().await?;
            if !first {
                self.emit(super::events::ClientEvent::Reconnecting {
                    request_id: None,
                    last_event_id: last.map(|seq| seq.to_string()),
                    failures: attempts.failures(),
                });
            }
            first = false;
            let mut params = json!({"taskId": task});
            if let Some(last) = last {
                params["after"] = json!(last);
            }
            let id = self.next_request_id();
            let body = self.modern_body(&id, "tasks/stream", Some(&params), &Map::new(), None);
            let name = name_header("tasks/stream", Some(&params));
            let posted = self
                .transport
                .post_modern(body, "tasks/stream", name.as_deref(), &[])
                .await;
            let lost = match posted {
                Ok(response) => {
                    attempts.connected();
                    let before = last;
                    let read = self.read_task_events(response, &id, &mut last, tx).await?;
                    let (outcome, carried) = read;
                    if let Some(retry) = carried.retry {
                        attempts.retry(retry);
                    }
                    if last != before {
                        attempts.delivered(last);
                    }
                    match outcome {
                        Outcome::Answered(answer) => return answered(task, *answer),
                        Outcome::Lost(error) => error,
                        Outcome::Busy {
                            error,
                            status,
                            retry_after,
                        } => {
                            attempts.refused(error, status, retry_after);
                            continue;
                        }
                    }
                }
                Err(error @ (Error::Network(_) | Error::Timeout)) => error,
                Err(error) => return Err(error),
            };
            // An event of the request's span (docs/TELEMETRY.md), and the log line saying
            // why the stream is read again.
            tracing::info!(
                error.type = lost.kind_name(),
                error = %lost,
                task,
                tether.task.cursor = ?last,
                "tether.reconnect"
            );
            attempts.lost(lost);
        }
    }

    /// One `tasks/stream` answer: each event past `last` delivered under its seq, `last`
    /// moved with it; how the answer ended, and what it carried.
    async fn read_task_events(
        &self,
        response: reqwest::Response,
        id: &RequestId,
        last: &mut Option<u64>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<(Outcome, Carried), Error> {
        let (raw, mut raw_rx) = mpsc::channel(READ_AHEAD);
        let reading = self.read_answer(response, id, &raw);
        tokio::pin!(reading);
        let outcome = loop {
            tokio::select! {
                outcome = &mut reading => break outcome,
                Some(delivery) = raw_rx.recv() => deliver_event(delivery, last, tx).await?,
            }
        };
        while let Ok(delivery) = raw_rx.try_recv() {
            deliver_event(delivery, last, tx).await?;
        }
        outcome
    }
}

/// Delivers the message a `notifications/tasks/event` carries, under its seq, if it is past
/// `last`; anything else on a task stream is ignored.
async fn deliver_event(
    delivery: Delivery,
    last: &mut Option<u64>,
    tx: &mpsc::Sender<Delivery>,
) -> Result<(), Error> {
    let Delivery::Message {
        message: Message::Notification(notification),
        ..
    } = delivery
    else {
        return Ok(());
    };
    if notification.method != "notifications/tasks/event" {
        return Ok(());
    }
    let params = notification.params.unwrap_or_default();
    let Some(seq) = params["seq"].as_u64() else {
        return Err(Error::Protocol(format!(
            "a task event without a seq: {params}"
        )));
    };
    if last.is_some_and(|last| seq <= last) {
        return Ok(());
    }
    let message = carried_message(&params)?;
    *last = Some(seq);
    let delivery = Delivery::Message {
        message,
        event_id: Some(seq.to_string()),
    };
    tx.send(delivery).await.map_err(|_| Error::Closed)
}

/// The JSON-RPC message a task event carries: its payload whole, or, for tether's compact
/// progress and log events (docs/CONTRACTS.md#task-streams), the notification whose `params`
/// the payload is.
fn carried_message(params: &Value) -> Result<Message, Error> {
    let payload = &params["payload"];
    let method = match params["type"].as_str() {
        // A whole message (every other type, and what earlier servers sent for all).
        _ if payload.get("jsonrpc").is_some() => None,
        Some("dev.tether.progress") => Some("notifications/progress"),
        Some("dev.tether.log") => Some("notifications/message"),
        _ => None,
    };
    match method {
        Some(method) if payload.is_object() => Ok(Message::Notification(Notification::new(
            method,
            Some(payload.clone()),
        ))),
        _ => Message::from_value(payload.clone())
            .map_err(|error| Error::Protocol(format!("a task event's payload: {error}"))),
    }
}

/// What a `tasks/stream` response means: `{}` is the end of the events; `events_gone` and
/// any other error fail the call.
fn answered(task: &str, answer: RpcResponse) -> Result<(), Error> {
    match answer {
        RpcResponse::Result(_) => Ok(()),
        RpcResponse::Error(error) if error.error.code == EVENTS_GONE => {
            let earliest = error.error.data.as_ref().map(|d| d["earliestSeq"].clone());
            Err(Error::EventsUnavailable {
                reason: format!(
                    "events_gone (task {task}; earliest retained seq {})",
                    earliest.unwrap_or(Value::Null)
                ),
            })
        }
        RpcResponse::Error(error) if names_unknown_task(&error.error) => Err(Error::UnknownTask {
            task_id: task.to_owned(),
        }),
        RpcResponse::Error(error) => Err(Error::Protocol(format!(
            "tasks/stream answered {} {}",
            error.error.code, error.error.message
        ))),
    }
}

/// Whether `error` says the task is unknown (expired, or never this principal's): -32602
/// `unknown task`, as tether's server and the tasks extension's reference answer it.
fn names_unknown_task(error: &ErrorObject) -> bool {
    error.code == tether_proto::jsonrpc::INVALID_PARAMS && error.message == "unknown task"
}

/// The task a response creates (a `CreateTaskResult`: `resultType` `task`): its id and the
/// poll interval it suggests.
pub(super) fn created_task(response: &RpcResponse) -> Option<(String, Option<Duration>)> {
    let RpcResponse::Result(result) = response else {
        return None;
    };
    let created = &result.result;
    match (created["resultType"].as_str(), created["taskId"].as_str()) {
        (Some("task"), Some(task)) => Some((
            task.to_owned(),
            created["pollIntervalMs"]
                .as_u64()
                .map(Duration::from_millis),
        )),
        _ => None,
    }
}

/// A terminal task as the final response of its call under `id` (module docs).
pub(super) fn outcome(record: &Value, id: RequestId) -> RpcResponse {
    match record["status"].as_str() {
        Some("completed") => RpcResponse::success(id, record["result"].clone()),
        Some("failed") => {
            // The stored error object, parsed the way any error response is.
            let response = json!({"jsonrpc": "2.0", "id": &id, "error": record["error"]});
            match Message::from_value(response) {
                Ok(Message::Response(response @ RpcResponse::Error(_))) => response,
                _ => RpcResponse::error(Some(id), ErrorObject::new(-32603, "the task failed")),
            }
        }
        _ => {
            let message = record["statusMessage"]
                .as_str()
                .unwrap_or("the task was cancelled");
            let error = ErrorObject::new(-32800, message).with_data(json!({"reason": "cancelled"}));
            RpcResponse::error(Some(id), error)
        }
    }
}

impl MessageStream {
    /// The task this call runs as, once the server answered with one.
    #[must_use]
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }
}
