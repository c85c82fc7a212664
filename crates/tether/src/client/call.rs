//! `tools/call` with progress: [`Client::call_tool`] sends the call with a progress token and
//! returns a [`ToolCall`], which yields the call's related messages classified
//! ([`ToolCallItem`]) and then its result, each once and in order across reconnects. The
//! commit rule is [`MessageStream`]'s.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tether_proto::jsonrpc::{Message, Notification, Request, Response};
use tokio::sync::mpsc;

use super::error::Error;
use super::session::Client;
use super::stream::MessageStream;
use super::task_handle::{TaskHandle, token_seq};
use super::tasks::created_task;
use super::token::ResumptionToken;

/// Distinguishes the progress tokens of one process's calls.
static NEXT_PROGRESS_TOKEN: AtomicU64 = AtomicU64::new(1);

/// One message of a tool call's stream.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolCallItem {
    /// A `notifications/progress` for this call.
    Progress {
        /// The `progress` value.
        progress: f64,
        /// The `total`, if the server gave one.
        total: Option<f64>,
        /// The `message`, if any.
        message: Option<String>,
    },
    /// Another related notification (for example `notifications/message`).
    Notification(Notification),
    /// A server→client request related to the call. `ping` is answered before it is
    /// yielded; requests the [`ClientConfig::request_handler`](super::ClientConfig::request_handler)
    /// answers are not yielded; answer the others with [`Client::respond`].
    Request(Request),
    /// The final response; nothing follows. A `result` with `isError: true` is a tool error
    /// (see [`ToolCallItem::is_tool_error`]), an `error` a protocol error.
    Response(Response),
}

impl ToolCallItem {
    /// Classifies a message of a tool call's stream.
    #[must_use]
    pub fn from_message(message: Message) -> Self {
        match message {
            Message::Notification(n) if n.method == "notifications/progress" => {
                let params = n.params.clone().unwrap_or(Value::Null);
                match params.get("progress").and_then(Value::as_f64) {
                    Some(progress) => Self::Progress {
                        progress,
                        total: params.get("total").and_then(Value::as_f64),
                        message: params
                            .get("message")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    },
                    None => Self::Notification(n),
                }
            }
            Message::Notification(n) => Self::Notification(n),
            Message::Request(r) => Self::Request(r),
            Message::Response(r) => Self::Response(r),
        }
    }

    /// Whether this is a final response whose result says `isError: true`.
    #[must_use]
    pub fn is_tool_error(&self) -> bool {
        matches!(self, Self::Response(Response::Result(r))
            if r.result.get("isError").and_then(Value::as_bool) == Some(true))
    }
}

/// A tool call in flight: its related messages, then its result.
///
/// ```no_run
/// # async fn demo() -> Result<(), tether::client::Error> {
/// use tether::client::{Client, ClientConfig, ToolCallItem};
///
/// let client = Client::connect("http://127.0.0.1:8080/mcp", ClientConfig::default()).await?;
/// let mut call = client.call_tool("count", serde_json::json!({"n": 5})).await?;
/// while let Some(item) = call.next().await {
///     match item? {
///         ToolCallItem::Progress { progress, .. } => println!("progress {progress}"),
///         ToolCallItem::Response(response) => println!("done: {response:?}"),
///         _ => {}
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ToolCall {
    client: Client,
    stream: MessageStream,
}

impl ToolCall {
    pub(crate) fn new(client: Client, stream: MessageStream) -> Self {
        Self { client, stream }
    }

    /// Commits the previous item (see [`MessageStream::next`]) and waits for the next one;
    /// `None` after the final response or an error. A `ping` from the server is answered
    /// before it is returned; requests the configured
    /// [`ServerRequestHandler`](super::ServerRequestHandler) answers are not returned.
    pub async fn next(&mut self) -> Option<Result<ToolCallItem, Error>> {
        self.next_message()
            .await
            .map(|r| r.map(ToolCallItem::from_message))
    }

    /// Like [`next`](Self::next), but the message as received (for raw output).
    pub async fn next_message(&mut self) -> Option<Result<Message, Error>> {
        self.stream.next().await
    }

    /// Commits the item last returned now.
    pub fn ack(&mut self) {
        self.stream.ack();
    }

    /// Reads to the end and returns the final response (committing everything on the way).
    ///
    /// # Errors
    ///
    /// The stream's error, or [`Error::NoResponse`] if it ended without one.
    pub async fn response(mut self) -> Result<Response, Error> {
        let mut last = None;
        while let Some(item) = self.next().await {
            if let ToolCallItem::Response(response) = item? {
                last = Some(response);
            }
        }
        last.ok_or(Error::NoResponse)
    }

    /// Cancels the call: stops reading its stream and sends `notifications/cancelled` naming
    /// it (with `reason`, if given). The server sends no response to a cancelled request.
    ///
    /// # Errors
    ///
    /// What sending the notification failed with.
    pub async fn cancel(self, reason: Option<&str>) -> Result<(), Error> {
        let Self { client, stream } = self;
        let Some(id) = stream.request_id().cloned() else {
            return Ok(());
        };
        drop(stream);
        let mut params = json!({"requestId": id});
        if let Some(reason) = reason {
            params["reason"] = json!(reason);
        }
        client.notify("notifications/cancelled", Some(params)).await
    }

    /// The token for the last committed event, if any.
    #[must_use]
    pub fn resumption_token(&self) -> Option<ResumptionToken> {
        self.stream.resumption_token()
    }

    /// The task this call runs as (2026-07-28, a server that offers tasks), once the server
    /// answered with one: what `tasks/get` takes.
    #[must_use]
    pub fn task_id(&self) -> Option<&str> {
        self.stream.task_id()
    }

    /// A handle on the task this call runs as, once the server answered with one: its
    /// [`status`](TaskHandle::status), [`cancel`](TaskHandle::cancel), or its outcome from
    /// another place. The call's own stream goes on delivering the task's events.
    #[must_use]
    pub fn task(&self) -> Option<TaskHandle> {
        let task = self.stream.task_id()?;
        let token = self.stream.resumption_token()?;
        let after = token_seq(&token).ok().flatten();
        Some(TaskHandle::new(
            self.client.clone(),
            task.to_owned(),
            token.request_id?,
            after,
            None,
        ))
    }

    /// The client this call runs on.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Client {
    /// Calls tool `name` with `arguments` (a JSON object), asking for progress notifications
    /// (`_meta.progressToken`).
    ///
    /// # Errors
    ///
    /// What sending failed with; later failures arrive as the call's items.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolCall, Error> {
        let stream = self
            .request("tools/call", Some(tool_call_params(name, arguments)))
            .await?;
        Ok(ToolCall::new(self.clone(), stream))
    }

    /// Calls tool `name` with `arguments` as a task: sends `tools/call` (with a progress
    /// token and the tasks extension declared) and returns the task's handle once the server
    /// answered with its `CreateTaskResult`. The application then follows the task itself
    /// ([`TaskHandle`]); [`call_tool`](Self::call_tool) follows it for the application.
    ///
    /// A message the server sends before the `CreateTaskResult` is logged and dropped: this
    /// era's servers create the task before its handler emits anything.
    ///
    /// # Errors
    ///
    /// [`Error::TasksNotOffered`] when the client speaks the 2025 era, its
    /// [`ClientConfig::tasks`](super::ClientConfig::tasks) is off or the server does not offer the tasks extension;
    /// [`Error::NotATask`] (holding the answer) when the server ran the call directly;
    /// [`Error::MayHaveRun`] when the connection was lost before the answer.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<TaskHandle, Error> {
        let inner = &self.inner;
        if !self.is_modern() || !inner.config.tasks || !inner.offers_tasks().0 {
            return Err(Error::TasksNotOffered {
                what: "tasks (a 2026-07-28 server with the tasks extension)",
            });
        }
        let request_id = inner.next_request_id();
        let (tx, mut rx) = mpsc::channel(inner.config.stream_buffer.max(1));
        let early = tokio::spawn(async move {
            while let Some(delivery) = rx.recv().await {
                tracing::debug!(?delivery, "a message before the CreateTaskResult, dropped");
            }
        });
        let params = tool_call_params(name, arguments);
        let answered = inner.modern_rounds("tools/call", Some(&params), &tx).await;
        drop(tx);
        let _ = early.await;
        let response = answered?;
        match created_task(&response) {
            Some((task, poll)) => Ok(TaskHandle::new(self.clone(), task, request_id, None, poll)),
            None => Err(Error::NotATask {
                response: Box::new(response),
            }),
        }
    }
}

/// `tools/call`'s params for tool `name` with `arguments`, asking for progress under a token
/// no other call of this process uses.
pub(super) fn tool_call_params(name: &str, arguments: Value) -> Value {
    let token = format!(
        "tether-{}-{}",
        std::process::id(),
        NEXT_PROGRESS_TOKEN.fetch_add(1, Ordering::Relaxed)
    );
    json!({
        "name": name,
        "arguments": arguments,
        "_meta": {"progressToken": token},
    })
}
