//! Resuming a call from a persisted [`ResumptionToken`] in a new process:
//! [`Client::resume`] rebuilds a client on the token's session (no `initialize`: the server
//! still has the session) and reattaches to the request's stream with GET + `Last-Event-ID`,
//! delivering the rest of the call: the events after the token's cursor, then the response.
//! A token that names a task (2026-07-28) is followed as a task instead (the `tasks` module);
//! [`Client::resume_task`] hands such a token back as a [`TaskHandle`](super::TaskHandle).

use std::sync::Arc;

use tether_proto::jsonrpc::RequestId;
use tether_proto::version::ProtocolVersion;
use tokio::sync::mpsc;

use super::call::ToolCall;
use super::config::{ClientConfig, ProtocolChoice};
use super::error::Error;
use super::session::{Client, Inner};
use super::stream::{Driver, MessageStream};
use super::task_handle::{TaskHandle, token_seq};
use super::token::ResumptionToken;

/// Request ids of a resumed client start here, far from the ids the first process used, so
/// that a new request cannot be confused with the resumed one.
const RESUMED_ID_BASE: u64 = 1 << 40;

impl Client {
    /// Reattaches to the session and stream named by `token` (saved by
    /// [`ClientConfig::on_resumption_token`] in an earlier process) at the MCP endpoint `url`.
    /// The returned stream yields the messages after the token's cursor and then the final
    /// response; commits fire the token callback as usual.
    ///
    /// ```no_run
    /// # async fn demo(saved: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// use tether::client::{Client, ClientConfig, ResumptionToken};
    ///
    /// let token: ResumptionToken = serde_json::from_str(saved)?;
    /// let (_client, stream) =
    ///     Client::resume("http://127.0.0.1:8080/mcp", &token, ClientConfig::default()).await?;
    /// let response = stream.response().await?;
    /// println!("{response:?}");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL or header, or a token of the standalone stream.
    /// Failures of the resume itself (the session expired, the events expired, the budget ran
    /// out) arrive as the stream's items.
    pub async fn resume(
        url: &str,
        token: &ResumptionToken,
        config: ClientConfig,
    ) -> Result<(Self, MessageStream), Error> {
        let request_id = token.request_id.clone().ok_or_else(|| {
            Error::Config("the token is for the standalone stream, not a request".to_owned())
        })?;
        if let Some(task) = &token.task_id {
            return Self::resume_task_call(url, token, task, request_id, config).await;
        }
        let inner = Inner::build(url, config, RESUMED_ID_BASE)?;
        inner.transport.update_session(|s| {
            s.id.clone_from(&token.session_id);
            s.version = token.protocol_version;
            s.initialized = true;
        });
        let session = inner.transport.session();
        let client = Self { inner };
        let (tx, rx) = mpsc::channel(client.inner.config.stream_buffer.max(1));
        let driver = Driver::resuming(
            Arc::clone(&client.inner),
            request_id.clone(),
            &token.last_event_id,
            session.generation,
            tx,
        );
        tokio::spawn(driver.run(None));
        let stream = client
            .stream(rx, Some(request_id), &session)
            .with_committed(&token.last_event_id);
        Ok((client, stream))
    }

    /// A token naming a task: a 2026-07-28 client (after `server/discover`) that follows the
    /// task after the token's seq; `tools/call` is never sent again.
    async fn resume_task_call(
        url: &str,
        token: &ResumptionToken,
        task: &str,
        request_id: RequestId,
        mut config: ClientConfig,
    ) -> Result<(Self, MessageStream), Error> {
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        config.tasks = true;
        let after = token_seq(token)?;
        let client = Self::connect(url, config).await?;
        let (tx, rx) = mpsc::channel(client.inner.config.stream_buffer.max(1));
        tokio::spawn(Arc::clone(&client.inner).task_exchange(
            request_id.clone(),
            task.to_owned(),
            after,
            tx,
        ));
        let stream = client
            .stream(rx, Some(request_id), &client.inner.transport.session())
            .with_committed(&token.last_event_id)
            .with_task(task);
        Ok((client, stream))
    }

    /// [`resume`](Self::resume) for a tool call: the rest of the call as a [`ToolCall`].
    ///
    /// # Errors
    ///
    /// As [`resume`](Self::resume).
    pub async fn resume_tool_call(
        url: &str,
        token: &ResumptionToken,
        config: ClientConfig,
    ) -> Result<ToolCall, Error> {
        let (client, stream) = Self::resume(url, token, config).await?;
        Ok(ToolCall::new(client, stream))
    }

    /// The task `token` names (saved from a [`TaskHandle`], a [`TaskEvents`](super::TaskEvents) commit or a
    /// task call's stream, in an earlier process) at the MCP endpoint `url`, as a handle whose
    /// events continue after the token's seq. Connects in the 2026-07-28 era with tasks on;
    /// `tools/call` is never sent again.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL, a token that names no task or a seq that is not a
    /// number; what connecting failed with; [`Error::TasksNotOffered`] when the server no
    /// longer offers tasks.
    pub async fn resume_task(
        url: &str,
        token: &ResumptionToken,
        mut config: ClientConfig,
    ) -> Result<TaskHandle, Error> {
        let task = token
            .task_id
            .clone()
            .ok_or_else(|| Error::Config("the token names no task".to_owned()))?;
        let request_id = token.request_id.clone().ok_or_else(|| {
            Error::Config("the token is for the standalone stream, not a request".to_owned())
        })?;
        let after = token_seq(token)?;
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        config.tasks = true;
        let client = Self::connect(url, config).await?;
        if !client.inner.offers_tasks().0 {
            return Err(Error::TasksNotOffered {
                what: "tasks (a 2026-07-28 server with the tasks extension)",
            });
        }
        Ok(TaskHandle::new(client, task, request_id, after, None))
    }
}
