//! What a [`Handler`](super::handler::Handler) can do while it runs: the request and session
//! contexts and the errors of emitting (log levels are `tether_proto::logging`'s).
//!
//! A [`RequestContext`] belongs to one client request. Everything it emits — progress,
//! notifications, log messages, server→client requests — is *related* to that request and is
//! appended to the request's stream in the event store (MCP: messages on a POST's SSE stream
//! "SHOULD relate to the originating client request", T13); in JSON-response mode, where a
//! request has no stream, they go to the session's standalone stream instead. A
//! [`SessionContext`] emits on the standalone stream (messages unrelated to any request, T28).
//! Nothing here writes to a connection: the writer loops read the store.
//!
//! This module does not own routing decisions beyond "this request's stream or the standalone
//! one", the JSON-RPC framing (`tether_proto::jsonrpc`) or the store.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tether_proto::ids::{SessionId, StreamId};
use tether_proto::jsonrpc::{
    ErrorObject, Message, Notification, ProgressToken, Request, RequestId, Response,
};
use tether_proto::logging::LogLevel;
use tether_proto::version::ProtocolVersion;
use tokio_util::sync::CancellationToken;

use tether_proto::modern::{Envelope, Era};

use super::mrtr::{AskError, Asked, InputRounds, TaskLink};
use super::session::SessionRuntime;
use super::subscriptions::Subscriptions;
use crate::store::StoreError;

/// The method of log message notifications (MCP `logging`).
const LOG_NOTIFICATION: &str = "notifications/message";

/// Why a context could not emit or get an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The request was cancelled (`notifications/cancelled`); nothing more is sent for it.
    #[error("request cancelled")]
    Cancelled,
    /// The session was deleted or expired.
    #[error("session closed")]
    SessionClosed,
    /// The client answered a server→client request with a JSON-RPC error.
    #[error("client returned error {}: {}", .0.code, .0.message)]
    Remote(ErrorObject),
    /// The event store refused the message (for example, the request already finished and
    /// its stream is complete).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The client did not declare the capability this question needs (2026-07-28: the
    /// server must not ask it). The handler answers without it, or fails the request with
    /// [`tether_proto::modern::missing_capability`].
    #[error("the client did not declare the `{0}` capability")]
    MissingCapability(String),
    /// The client's answer under this key does not answer the question asked (2026-07-28);
    /// the request is answered -32602 whatever the handler returns.
    #[error("the answer `{0}` does not fit its question")]
    InvalidAnswer(String),
}

// ---------------------------------------------------------------------------------------------
// SessionContext

/// A session as a handler sees it: its id and version, its log level, and its standalone
/// stream for messages not related to any request.
#[derive(Clone)]
pub struct SessionContext {
    runtime: Arc<SessionRuntime>,
}

impl fmt::Debug for SessionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionContext")
            .field("session_id", self.session_id())
            .field("protocol_version", &self.protocol_version())
            .finish_non_exhaustive()
    }
}

impl SessionContext {
    pub(crate) fn new(runtime: Arc<SessionRuntime>) -> Self {
        Self { runtime }
    }

    /// The session's id (`Mcp-Session-Id`).
    #[must_use]
    pub fn session_id(&self) -> &SessionId {
        &self.runtime.record().id
    }

    /// The authenticated principal the session (or the 2026-07-28 request) belongs to
    /// (`store::ANONYMOUS_PRINCIPAL` without authentication).
    #[must_use]
    pub fn principal(&self) -> &str {
        &self.runtime.owner().principal
    }

    /// The protocol version negotiated at `initialize`.
    #[must_use]
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.runtime.version()
    }

    /// What the client said of itself at `initialize` (its `clientInfo` and `capabilities`),
    /// as the session store keeps it, so also after a restart or on another node; `None`
    /// as [`SessionRecord::client`](crate::store::SessionRecord::client) says.
    #[must_use]
    pub fn client(&self) -> Option<&Value> {
        self.runtime.record().client.as_deref()
    }

    /// Sets the minimum level of log messages sent to this session (what `logging/setLevel`
    /// asks for; the handler answers that request, the transport only filters).
    pub fn set_log_level(&self, level: LogLevel) {
        self.runtime.set_log_level(level);
    }

    /// The minimum level of log messages sent to this session ([`LogLevel::DEFAULT`] until
    /// set).
    #[must_use]
    pub fn log_level(&self) -> LogLevel {
        self.runtime.log_level()
    }

    /// Whether the session has ended (deleted or expired).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.runtime.is_closed()
    }

    /// Sends a notification on the standalone stream: one not related to any request
    /// (e.g. `notifications/tools/list_changed`). It is stored at once and delivered when the
    /// client has (or next opens) its GET stream.
    ///
    /// # Errors
    ///
    /// [`ContextError::SessionClosed`] after the session ended; [`ContextError::Store`] if the
    /// store refused it.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ContextError> {
        let message = notification(method, params).to_vec();
        emit(&self.runtime, self.runtime.standalone(), None, &message).await
    }

    /// Sends a log message (`notifications/message`) on the standalone stream, if `level` is
    /// at least the session's [`log_level`](Self::log_level); otherwise does nothing.
    ///
    /// # Errors
    ///
    /// As for [`notify`](Self::notify).
    pub async fn log(
        &self,
        level: LogLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), ContextError> {
        if level < self.log_level() {
            return Ok(());
        }
        self.notify(LOG_NOTIFICATION, log_params(level, logger, data))
            .await
    }

    /// Sends a server→client request on the standalone stream and waits for the client's
    /// answer (POSTed back to the endpoint).
    ///
    /// # Errors
    ///
    /// [`ContextError::Remote`] with the client's error, [`ContextError::SessionClosed`] if
    /// the session ends first, [`ContextError::Store`] if the request could not be stored.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ContextError> {
        round_trip(
            &self.runtime,
            self.runtime.standalone(),
            None,
            method,
            params,
        )
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// RequestContext

/// One client request as a handler sees it: its id and progress token, its session, a way to
/// emit messages related to it, and its cancellation.
///
/// Cheap to clone; clones share the request (a handler may move one into a spawned task).
#[derive(Clone)]
pub struct RequestContext {
    inner: Arc<RequestInner>,
}

struct RequestInner {
    session: SessionContext,
    /// The 2026-07-28 request's envelope and questions; `None` in a legacy session.
    modern: Option<Arc<ModernRequest>>,
    subscriptions: Arc<Subscriptions>,
    request_id: RequestId,
    progress_token: Option<ProgressToken>,
    /// The start of every progress message of this request, from its token
    /// ([`progress_prefix`]).
    progress_prefix: Option<Vec<u8>>,
    /// Where related messages go: the request's own stream, or the standalone stream when the
    /// answer is a JSON body.
    stream: StreamId,
    cancel: CancellationToken,
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestContext")
            .field("request_id", &self.inner.request_id)
            .field("progress_token", &self.inner.progress_token)
            .field("session", &self.inner.session)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// What a 2026-07-28 request carries beyond its JSON-RPC fields.
#[derive(Debug)]
pub(crate) struct ModernRequest {
    pub(crate) envelope: Envelope,
    pub(crate) rounds: InputRounds,
    /// The request's identity across its rounds (`mrtr::request_digest`).
    pub(crate) digest: String,
    /// The task it runs as, if it does: its questions wait in the task.
    pub(crate) task: Option<TaskLink>,
}

impl RequestContext {
    pub(crate) fn new(
        runtime: Arc<SessionRuntime>,
        request: &Request,
        stream: StreamId,
        cancel: CancellationToken,
        modern: Option<Arc<ModernRequest>>,
        subscriptions: Arc<Subscriptions>,
    ) -> Self {
        Self {
            inner: Arc::new(RequestInner {
                session: SessionContext::new(runtime),
                modern,
                subscriptions,
                request_id: request.id.clone(),
                progress_token: request.progress_token(),
                progress_prefix: request.progress_token().as_ref().map(progress_prefix),
                stream,
                cancel,
            }),
        }
    }

    /// The request's JSON-RPC id.
    #[must_use]
    pub fn request_id(&self) -> &RequestId {
        &self.inner.request_id
    }

    /// The request's `params._meta.progressToken`, if the client asked for progress.
    #[must_use]
    pub fn progress_token(&self) -> Option<&ProgressToken> {
        self.inner.progress_token.as_ref()
    }

    /// The session the request belongs to. A 2026-07-28 request has no session: its
    /// context is one made for the request alone, which ends with it.
    #[must_use]
    pub fn session(&self) -> &SessionContext {
        &self.inner.session
    }

    /// The era the request is in: a legacy session's, or a stateless 2026-07-28 request.
    #[must_use]
    pub fn era(&self) -> Era {
        if self.inner.modern.is_some() {
            Era::Modern
        } else {
            Era::Legacy
        }
    }

    /// Whether the client declared `capability` (`"elicitation"`, `"sampling"`, `"roots"`,
    /// …) for this request. In the 2026-07-28 era, from the request's own envelope (a server
    /// "MUST NOT infer capabilities from prior requests"); in a legacy session the transport
    /// does not keep the `initialize` capabilities, so this is `true` and the client answers a
    /// question it cannot handle with an error.
    #[must_use]
    pub fn client_declares(&self, capability: &str) -> bool {
        self.inner
            .modern
            .as_ref()
            .is_none_or(|modern| modern.envelope.declares(capability))
    }

    /// The 2026-07-28 request's `clientInfo`, if it sent one.
    #[must_use]
    pub fn client_info(&self) -> Option<&Value> {
        self.inner.modern.as_ref()?.envelope.client_info.as_ref()
    }

    /// Sends a change every listening client may want (`notifications/tools/list_changed`,
    /// `notifications/prompts/list_changed`, `notifications/resources/list_changed`,
    /// `notifications/resources/updated`): to the `subscriptions/listen` streams on this
    /// node whose filter asks for it, tagged with each one's subscription id, and in a legacy
    /// session also on the session's standalone stream. It never waits for a slow listener.
    ///
    /// # Errors
    ///
    /// As for [`SessionContext::notify`], for the legacy session's own stream.
    pub async fn notify_subscribers(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(), ContextError> {
        self.inner.subscriptions.publish(method, &params);
        if self.inner.modern.is_some() {
            return Ok(());
        }
        self.session().notify(method, params).await
    }

    /// Sends `notifications/progress` with the request's progress token. Without a token (the
    /// client did not ask for progress) this does nothing and returns `Ok(())`.
    ///
    /// MCP requires `progress` to increase with each call; the transport does not check.
    ///
    /// # Errors
    ///
    /// [`ContextError::Cancelled`] once the request is cancelled, [`ContextError::SessionClosed`]
    /// once the session ended, [`ContextError::Store`] if the store refused it.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), ContextError> {
        let Some(prefix) = &self.inner.progress_prefix else {
            return Ok(());
        };
        self.emit(&progress_message(prefix, progress, total, message))
            .await
    }

    /// Sends a notification related to this request (on its stream).
    ///
    /// # Errors
    ///
    /// As for [`progress`](Self::progress).
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ContextError> {
        self.emit(&notification(method, params).to_vec()).await
    }

    /// Sends a log message (`notifications/message`) related to this request, if `level` is at
    /// least the session's log level (set by `logging/setLevel`); otherwise does nothing. A
    /// 2026-07-28 request gets log messages only at or above the `logLevel` of its envelope,
    /// and none without one.
    ///
    /// # Errors
    ///
    /// As for [`progress`](Self::progress).
    pub async fn log(
        &self,
        level: LogLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), ContextError> {
        let minimum = match &self.inner.modern {
            Some(modern) => modern.envelope.log_level,
            None => Some(self.session().log_level()),
        };
        if minimum.is_none_or(|minimum| level < minimum) {
            return Ok(());
        }
        self.notify(LOG_NOTIFICATION, log_params(level, logger, data))
            .await
    }

    /// Sends a server→client request (sampling, elicitation, ping, …) on this request's stream
    /// and waits for the client's answer, which it POSTs back to the endpoint.
    ///
    /// # Errors
    ///
    /// [`ContextError::Remote`] with the client's error response; [`ContextError::Cancelled`]
    /// if this request is cancelled while waiting; [`ContextError::SessionClosed`] if the
    /// session ends; [`ContextError::Store`] if the request could not be stored.
    ///
    /// In the 2026-07-28 era this is [`ask`](Self::ask) under a key made from the method and
    /// the order of the question.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ContextError> {
        if let Some(modern) = &self.inner.modern {
            let key = modern.rounds.next_key(method);
            return self.ask(&key, method, params).await;
        }
        round_trip(
            &self.inner.session.runtime,
            self.inner.stream,
            Some(&self.inner.cancel),
            method,
            params,
        )
        .await
    }

    /// Asks the client one question (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`) under `key`, and returns its answer; [`ask_all`](Self::ask_all) with one
    /// question.
    ///
    /// # Errors
    ///
    /// As for [`ask_all`](Self::ask_all).
    pub async fn ask(&self, key: &str, method: &str, params: Value) -> Result<Value, ContextError> {
        let mut answers = self
            .ask_all(vec![(key.to_owned(), method.to_owned(), params)])
            .await?;
        Ok(answers.pop().expect("one answer per question"))
    }

    /// Asks the client several questions at once, each `(key, method, params)`, and returns
    /// their answers in the same order. The handler is written once for both eras:
    ///
    /// - in a legacy session each question is a server→client request on this request's
    ///   stream, sent together and awaited together (keys are not sent);
    /// - in a task (the tasks extension) the questions become the task's `inputRequests`, and
    ///   the call returns once `tasks/update` answered them all;
    /// - otherwise in the 2026-07-28 era (SEP-2322) a question the client already answered (its
    ///   `inputResponses`, or an earlier round's answers sealed in `requestState`) returns at
    ///   once; otherwise the request ends here with an `input_required` result listing every
    ///   unanswered question under its key, and the client's retry runs the handler again
    ///   from the start. A handler must therefore be safe to re-run up to its questions, and
    ///   should ask what it can ask together in one call, so the client gets one round for
    ///   them. Keys must be unique within the request and the same in every run.
    ///
    /// # Errors
    ///
    /// [`ContextError::MissingCapability`] when the 2026-07-28 client did not declare what a
    /// question needs (`elicitation`, `sampling`, `roots`); [`ContextError::InvalidAnswer`]
    /// when its answer does not fit; [`ContextError::Cancelled`] once the request ends for
    /// its questions (its outcome is discarded); otherwise as for [`request`](Self::request).
    pub async fn ask_all(
        &self,
        questions: Vec<(String, String, Value)>,
    ) -> Result<Vec<Value>, ContextError> {
        let Some(modern) = &self.inner.modern else {
            let asks = questions.into_iter().map(|(_, method, params)| async move {
                round_trip(
                    &self.inner.session.runtime,
                    self.inner.stream,
                    Some(&self.inner.cancel),
                    &method,
                    params,
                )
                .await
            });
            return futures_util::future::try_join_all(asks).await;
        };
        if let Some(task) = &modern.task {
            // Answered in the request's own rounds (before it became a task), or asked in
            // the task.
            let mut answers: Vec<Option<Value>> = Vec::with_capacity(questions.len());
            let mut asked = Vec::new();
            for (key, method, params) in questions {
                if let Some(capability) = super::mrtr::capability_for(&method)
                    && !modern.rounds.declares(capability)
                {
                    return Err(ContextError::MissingCapability(capability.to_owned()));
                }
                if let Some(answer) = modern.rounds.answered(&key) {
                    answers.push(Some(answer));
                    continue;
                }
                let mut question = Map::new();
                question.insert("method".into(), Value::from(method));
                if !params.is_null() {
                    question.insert("params".into(), params);
                }
                answers.push(None);
                asked.push((key, Value::Object(question)));
            }
            let mut received = if asked.is_empty() {
                Vec::new()
            } else {
                task.ask(asked, &self.inner.cancel)
                    .await
                    .map_err(|error| match error {
                        StoreError::Completed => ContextError::Cancelled,
                        other => ContextError::Store(other),
                    })?
            }
            .into_iter();
            return Ok(answers
                .into_iter()
                .map(|answer| answer.unwrap_or_else(|| received.next().unwrap_or(Value::Null)))
                .collect());
        }
        let mut answers = Vec::with_capacity(questions.len());
        let mut pending = false;
        for (key, method, params) in &questions {
            match modern.rounds.ask(key, method, params) {
                Ok(Asked::Answered(answer)) => answers.push(answer),
                Ok(Asked::Pending) => pending = true,
                Err(AskError::MissingCapability(capability)) => {
                    return Err(ContextError::MissingCapability(capability.to_owned()));
                }
                Err(AskError::InvalidAnswer(key)) => return Err(ContextError::InvalidAnswer(key)),
            }
        }
        if !pending {
            return Ok(answers);
        }
        modern.rounds.interrupt();
        self.inner.cancel.cancelled().await;
        Err(ContextError::Cancelled)
    }

    /// Closes the HTTP connection that currently carries this request's SSE stream, without
    /// ending the stream (SEP-1699 "polling", MCP 2025-11-25): the connection ends after a
    /// `retry` field, the client reconnects after that many milliseconds with `Last-Event-ID`
    /// and gets everything emitted meanwhile, then the rest live. The handler is unaffected
    /// and keeps running; what it emits is stored and replayed (T75). Useful before a long
    /// quiet phase, so that no connection (or proxy slot) is held while nothing is sent.
    ///
    /// `retry` is the reconnection delay to send; `None` sends the server's configured
    /// [`retry`](super::ServerConfig::retry). The connection's writer first writes what is
    /// already stored (everything emitted before this call), then the `retry` field, then
    /// closes; if nothing with an event id went out on that connection yet, it sends a
    /// priming event first, so a close never comes before an id (T73).
    ///
    /// Returns whether a close was requested: `false` when no connection is open for the
    /// stream (the client is away and will resume anyway), in JSON-response mode (the request
    /// has no stream of its own), and for sessions that negotiated a version before
    /// 2025-11-25, whose clients do not expect the server to close a POST stream before its
    /// response.
    pub fn close_connection(&self, retry: Option<Duration>) -> bool {
        let runtime = &self.inner.session.runtime;
        if !runtime.version().allows_polling() || self.inner.stream == runtime.standalone() {
            return false;
        }
        runtime.request_close(self.inner.stream, retry)
    }

    /// Whether the request was cancelled (by `notifications/cancelled`, or because the
    /// session ended). In a legacy session a client disconnect is *not* cancellation (T15);
    /// in the 2026-07-28 era it is.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the request is cancelled. Cancel-safe.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await;
    }

    async fn emit(&self, message: &[u8]) -> Result<(), ContextError> {
        emit(
            &self.inner.session.runtime,
            self.inner.stream,
            Some(&self.inner.cancel),
            message,
        )
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

fn notification(method: &str, params: Value) -> Message {
    let params = (!params.is_null()).then_some(params);
    Message::Notification(Notification::new(method, params))
}

fn log_params(level: LogLevel, logger: Option<&str>, data: Value) -> Value {
    let mut params = Map::new();
    params.insert("level".to_owned(), Value::from(level.as_str()));
    if let Some(logger) = logger {
        params.insert("logger".to_owned(), Value::from(logger));
    }
    params.insert("data".to_owned(), data);
    Value::Object(params)
}

/// The part of a request's `notifications/progress` messages that never changes, up to the
/// `progress` value: `{"jsonrpc":"2.0","method":"notifications/progress","params":
/// {"progressToken":<token>,"progress":`. Serialized once per request, since a handler may
/// report progress for every one of millions of items.
fn progress_prefix(token: &ProgressToken) -> Vec<u8> {
    let mut prefix =
        br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"#
            .to_vec();
    serde_json::to_writer(&mut prefix, token).expect("a progress token serializes to memory");
    prefix.extend_from_slice(br#","progress":"#);
    prefix
}

/// One `notifications/progress` message, written after its [`progress_prefix`] without
/// building a JSON value: exactly the bytes of the message built as a [`Message`] (a test
/// holds them equal), in a fraction of the time and with one allocation.
fn progress_message(
    prefix: &[u8],
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 48 + message.map_or(0, |m| m.len() + 16));
    out.extend_from_slice(prefix);
    write_number(&mut out, progress);
    if let Some(total) = total {
        out.extend_from_slice(br#","total":"#);
        write_number(&mut out, total);
    }
    if let Some(message) = message {
        out.extend_from_slice(br#","message":"#);
        serde_json::to_writer(&mut out, message).expect("a string serializes to memory");
    }
    out.extend_from_slice(b"}}");
    out
}

/// Writes `value` as JSON, as an integer when it is one (`3`, not `3.0`): clients in typed
/// languages compare progress values to integers.
fn write_number(out: &mut Vec<u8>, value: f64) {
    match exact_integer(value) {
        Some(integer) => out.extend_from_slice(itoa::Buffer::new().format(integer).as_bytes()),
        // serde_json writes NaN and the infinities as `null`.
        None => serde_json::to_writer(&mut *out, &value).expect("a number serializes to memory"),
    }
}

/// `value` as an `i64` when it is an integer that an `f64` holds exactly.
fn exact_integer(value: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: larger floats are not exact integers
    #[allow(clippy::cast_possible_truncation)] // integral and below 2^53
    (value.fract() == 0.0 && value.abs() < EXACT).then_some(value as i64)
}

/// Why a request-scoped emission failed, given the state of its tokens.
fn closed_error(
    runtime: &SessionRuntime,
    cancel: Option<&CancellationToken>,
) -> Option<ContextError> {
    // A request's token is a child of its session's (`SessionRuntime::reserve`), so while
    // neither fired one check answers for both: this runs before every emitted message, and
    // each check takes the token's lock.
    let fired = cancel.map_or_else(|| runtime.is_closed(), CancellationToken::is_cancelled);
    if !fired {
        None
    } else if runtime.is_closed() {
        Some(ContextError::SessionClosed)
    } else {
        Some(ContextError::Cancelled)
    }
}

async fn emit(
    runtime: &SessionRuntime,
    stream: StreamId,
    cancel: Option<&CancellationToken>,
    message: &[u8],
) -> Result<(), ContextError> {
    // A cancelled request sends nothing more (MCP cancellation); checked before the store so
    // that the error says why rather than "stream already complete".
    if let Some(error) = closed_error(runtime, cancel) {
        return Err(error);
    }
    match runtime.append_bytes(stream, message).await {
        Ok(_) => Ok(()),
        Err(error) => Err(closed_error(runtime, cancel).unwrap_or(ContextError::Store(error))),
    }
}

async fn round_trip(
    runtime: &Arc<SessionRuntime>,
    stream: StreamId,
    cancel: Option<&CancellationToken>,
    method: &str,
    params: Value,
) -> Result<Value, ContextError> {
    let id = runtime.next_request_id();
    // Registered before sending, so an answer that arrives at once is not missed; the guard
    // unregisters on every exit path.
    let (_guard, answer) = runtime.expect_response(id.clone());
    let params = (!params.is_null()).then_some(params);
    let message = Message::Request(Request::new(id, method, params)).to_vec();
    emit(runtime, stream, cancel, &message).await?;
    let never = CancellationToken::new();
    let cancel = cancel.unwrap_or(&never);
    tokio::select! {
        () = runtime.closed().cancelled() => Err(ContextError::SessionClosed),
        () = cancel.cancelled() => Err(closed_error(runtime, Some(cancel)).unwrap_or(ContextError::Cancelled)),
        answer = answer => match answer {
            Ok(Response::Result(response)) => Ok(response.result),
            Ok(Response::Error(response)) => Err(ContextError::Remote(response.error)),
            // The sender is dropped only when the session closes.
            Err(_) => Err(ContextError::SessionClosed),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// How progress values were made JSON before [`write_number`].
    fn number(value: f64) -> Value {
        exact_integer(value).map_or_else(|| json!(value), Value::from)
    }

    /// The message `progress` sent before it was written by hand: built as a JSON value and
    /// serialized as a [`Message`].
    fn progress_as_value(
        token: &ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Vec<u8> {
        let mut params = Map::new();
        params.insert("progressToken".to_owned(), json!(token));
        params.insert("progress".to_owned(), number(progress));
        if let Some(total) = total {
            params.insert("total".to_owned(), number(total));
        }
        if let Some(message) = message {
            params.insert("message".to_owned(), Value::from(message));
        }
        notification(
            tether_proto::jsonrpc::PROGRESS_NOTIFICATION,
            Value::Object(params),
        )
        .to_vec()
    }

    #[test]
    fn progress_messages_are_the_serialized_notification() {
        let tokens: Vec<ProgressToken> =
            [json!("tok"), json!(7), json!("quote \" \n é"), json!(-3)]
                .into_iter()
                .map(|token| serde_json::from_value(token).expect("a progress token"))
                .collect();
        let values = [
            0.0,
            1.0,
            42.0,
            0.5,
            -2.25,
            1e300,
            9_007_199_254_740_992.0,
            f64::NAN,
            f64::INFINITY,
        ];
        for token in &tokens {
            let prefix = progress_prefix(token);
            for &progress in &values {
                for total in [None, Some(100.0), Some(2.5)] {
                    for message in [None, Some("half way"), Some("line\nbreak \u{1}")] {
                        let fast = progress_message(&prefix, progress, total, message);
                        assert_eq!(
                            String::from_utf8_lossy(&fast),
                            String::from_utf8_lossy(&progress_as_value(
                                token, progress, total, message
                            )),
                        );
                    }
                }
            }
        }
    }
}
