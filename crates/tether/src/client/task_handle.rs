//! The application's handle on a task (SEP-2663): [`Client::call_tool_as_task`] sends a
//! `tools/call` that must become a task and hands back its [`TaskHandle`] as soon as the
//! `CreateTaskResult` arrives, instead of following the task itself as
//! [`Client::call_tool`] does.
//!
//! The handle is the task id plus where its events were read to, and persists as a
//! [`ResumptionToken`]; [`Client::resume_task`] rebuilds it in another process. From it,
//! [`status`](TaskHandle::status) is one `tasks/get`, [`wait`](TaskHandle::wait) polls to
//! the outcome at the task's `pollIntervalMs` (answering `input_required` through the
//! [`ServerRequestHandler`](super::ServerRequestHandler) with `tasks/update`), and
//! [`events`](TaskHandle::events) reads the task's events with `tasks/stream` (SEP-2694):
//! each once, in seq order, across cuts (asked for again with `after` = the last seq
//! delivered), committed only when the application asks for the next one or acks it, each
//! commit handed to [`ClientConfig::on_resumption_token`](super::ClientConfig) like a legacy
//! stream's. The following itself is the `tasks` module's, shared with `call_tool`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether_proto::jsonrpc::{Message, RequestId, Response as RpcResponse};
use tether_proto::version::ProtocolVersion;
use tokio::sync::mpsc;

use super::error::Error;
use super::session::Client;
use super::stream::{Delivery, MessageStream};
use super::tasks::outcome;
use super::token::ResumptionToken;

/// Where a task is in its life, as `tasks/get` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskState {
    /// The handler is running.
    Working,
    /// The handler waits for answers to the task's `inputRequests`.
    InputRequired,
    /// The handler answered with a result (which may say `isError: true`).
    Completed,
    /// The handler answered with a JSON-RPC error, or its server died under it.
    Failed,
    /// `tasks/cancel` ended it.
    Cancelled,
}

impl TaskState {
    /// Whether the task has ended: nothing about it changes any more.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    fn parse(status: &str) -> Option<Self> {
        Some(match status {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// One `tasks/get` answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskStatus {
    /// The task's state.
    pub state: TaskState,
    /// The server's `statusMessage`, if any.
    pub message: Option<String>,
    /// How often the server asks to be polled (`pollIntervalMs`), if it said.
    pub poll_interval: Option<Duration>,
    /// The whole `DetailedTask` as the server sent it (with `result`, `error` or
    /// `inputRequests` inlined).
    pub detailed: Value,
}

/// A task the application follows itself (module docs). Cheap to clone; clones share the
/// client.
#[derive(Debug, Clone)]
pub struct TaskHandle {
    client: Client,
    task_id: String,
    request_id: RequestId,
    after: Option<u64>,
    poll: Option<Duration>,
}

impl TaskHandle {
    pub(super) fn new(
        client: Client,
        task_id: String,
        request_id: RequestId,
        after: Option<u64>,
        poll: Option<Duration>,
    ) -> Self {
        Self {
            client,
            task_id,
            request_id,
            after,
            poll,
        }
    }

    /// The task's id: what `tasks/get` takes, and what to persist.
    #[must_use]
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The token that names this task and the seq its events are read after (the handle's
    /// starting point; the commits of [`events`](Self::events) hand out later ones).
    #[must_use]
    pub fn resumption_token(&self) -> ResumptionToken {
        ResumptionToken {
            session_id: None,
            protocol_version: Some(ProtocolVersion::MODERN),
            request_id: Some(self.request_id.clone()),
            last_event_id: self.after.map(|seq| seq.to_string()).unwrap_or_default(),
            task_id: Some(self.task_id.clone()),
        }
    }

    /// The task as the server has it now (one `tasks/get`; an `input_required` task is
    /// reported, not answered: [`wait`](Self::wait) answers).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTask`] when the server no longer knows the task; what the request
    /// failed with; [`Error::Protocol`] for a status this client does not know.
    pub async fn status(&self) -> Result<TaskStatus, Error> {
        let detailed = self
            .client
            .inner
            .task_request("tasks/get", json!({"taskId": self.task_id}), &self.task_id)
            .await?;
        let state = detailed["status"]
            .as_str()
            .and_then(TaskState::parse)
            .ok_or_else(|| {
                Error::Protocol(format!("tasks/get answered an unknown status: {detailed}"))
            })?;
        Ok(TaskStatus {
            state,
            message: detailed["statusMessage"].as_str().map(str::to_owned),
            poll_interval: detailed["pollIntervalMs"]
                .as_u64()
                .map(Duration::from_millis),
            detailed,
        })
    }

    /// Polls `tasks/get` until the task ends, answering its questions on the way, and returns
    /// its outcome as the call's final response: a completed task's result, a failed task's
    /// error (`data.reason` `server_restarted` when its server died), a cancelled task's as an
    /// error with `data.reason` `"cancelled"`. The questions are answered by this `wait`: let
    /// one follower of a task answer them (a second `wait`, or a [`ToolCall`](super::ToolCall)
    /// still following the same task, would ask the handler again).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTask`] when the server no longer knows the task (it expired); a
    /// question nothing answered ([`Error::QuestionDeclined`]); what polling failed with
    /// once the reconnect budget ran out.
    pub async fn wait(&self) -> Result<RpcResponse, Error> {
        let record = self
            .client
            .inner
            .await_task(&self.task_id, self.poll, None)
            .await?;
        Ok(outcome(&record, self.request_id.clone()))
    }

    /// The task's events after the handle's cursor, each once and in order, until the task's
    /// events end (then its outcome is [`wait`](Self::wait)'s or [`status`](Self::status)'s).
    /// Dropping the reader stops the reading, not the task.
    ///
    /// # Errors
    ///
    /// [`Error::TasksNotOffered`] when the server does not offer task event streams. Failures
    /// of the reading (`events_gone` as [`Error::EventsUnavailable`], an unknown task, the
    /// budget) arrive as the reader's items.
    pub fn events(&self) -> Result<TaskEvents, Error> {
        let inner = &self.client.inner;
        if !inner.offers_tasks().1 {
            return Err(Error::TasksNotOffered {
                what: "task event streams (eventStreams)",
            });
        }
        let (tx, rx) = mpsc::channel(inner.config.stream_buffer.max(1));
        let reading = Arc::clone(inner);
        let (task, after, poll) = (self.task_id.clone(), self.after, self.poll);
        tokio::spawn(async move {
            let read = tokio::select! {
                read = reading.stream_task_events(&task, after, poll, &tx) => read,
                () = reading.shutdown.cancelled() => Err(Error::Closed),
                () = tx.closed() => return,
            };
            if let Err(error) = read {
                let _ = tx.send(Delivery::Failed(error)).await;
            }
        });
        let last = self.resumption_token().last_event_id;
        let stream = self
            .client
            .stream(
                rx,
                Some(self.request_id.clone()),
                &inner.transport.session(),
            )
            .with_committed(&last)
            .with_task(&self.task_id);
        Ok(TaskEvents { stream })
    }

    /// Asks the server to cancel the task (`tasks/cancel`; cooperative: a task that completes
    /// first stays completed). [`wait`](Self::wait) shows how it ended.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTask`] when the server no longer knows the task; what the request
    /// failed with.
    pub async fn cancel(&self) -> Result<(), Error> {
        self.client
            .inner
            .task_request(
                "tasks/cancel",
                json!({"taskId": self.task_id}),
                &self.task_id,
            )
            .await
            .map(drop)
    }

    /// The client this handle speaks through.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// One event of a task: its seq and the message its handler emitted (a progress
/// notification, a log message, another notification).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskEvent {
    /// The event's seq: 0 for the task's first, +1 after.
    pub seq: u64,
    /// The message it carries, as the handler emitted it.
    pub message: Message,
}

/// A task's events (see [`TaskHandle::events`]). The commit rule is [`MessageStream`]'s: the
/// event returned by [`next`](Self::next) is committed when `next` is called again, or at once
/// by [`ack`](Self::ack); each commit fires the resumption-token callback.
#[derive(Debug)]
pub struct TaskEvents {
    stream: MessageStream,
}

impl TaskEvents {
    /// Commits the previous event, then waits for the next; `None` once the task's events
    /// ended (or after an error).
    pub async fn next(&mut self) -> Option<Result<TaskEvent, Error>> {
        let message = match self.stream.next().await? {
            Ok(message) => message,
            Err(error) => return Some(Err(error)),
        };
        let seq = self
            .stream
            .pending_event_id()
            .and_then(|id| id.parse().ok());
        Some(
            seq.map(|seq| TaskEvent { seq, message })
                .ok_or_else(|| Error::Protocol("a task event arrived without its seq".to_owned())),
        )
    }

    /// Commits the event last returned now.
    pub fn ack(&mut self) {
        self.stream.ack();
    }

    /// The seq of the last committed event, if one was.
    #[must_use]
    pub fn last_committed(&self) -> Option<u64> {
        self.resumption_token()
            .and_then(|token| token_seq(&token).ok().flatten())
    }

    /// The token naming the task and its last committed seq.
    #[must_use]
    pub fn resumption_token(&self) -> Option<ResumptionToken> {
        self.stream.resumption_token()
    }
}

/// The last committed task seq a token holds (`None` before the first event).
pub(super) fn token_seq(token: &ResumptionToken) -> Result<Option<u64>, Error> {
    match token.last_event_id.as_str() {
        "" => Ok(None),
        seq => seq
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Error::Config(format!("the token's task seq {seq:?} is not a number"))),
    }
}
