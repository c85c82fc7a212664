//! The 2026-07-28 era in the client: choosing the era at connect, and sending a request of
//! that era.
//!
//! [`Inner::choose_era`] follows [`ProtocolChoice`]: `Legacy` initializes; a pinned 2026-07-28
//! requires `server/discover` to answer; `Auto` probes `server/discover` and picks the era in
//! which a call survives a cut: 2026-07-28 when the server offers the tasks extension with
//! its event streams (and [`ClientConfig::tasks`](super::ClientConfig::tasks) and
//! [`ClientConfig::prefer_tasks`](super::ClientConfig::prefer_tasks) are on), since a
//! call there runs as a task whose events are read again after a cut; else the legacy era
//! when the server also serves a 2025 version (it lists one, or answers the probe as a legacy
//! server does: a 4xx or 5xx, a JSON-RPC error, no JSON; or it lists 2026-07-28 alone but
//! accepts an `initialize` all the same), since there a session resumes a cut stream; a
//! server that serves 2026-07-28 alone is spoken to in its era. A probe lost on the network
//! is retried with the reconnect backoff, not taken as an answer.
//!
//! A modern request is stateless: [`Inner::modern_exchange`] POSTs it with the `_meta`
//! envelope and the SEP-2243 headers and reads its JSON or SSE answer, handing the messages
//! before the response to the request's [`MessageStream`](super::MessageStream). An
//! `input_required` result is answered through [`ClientConfig::request_handler`] (the same
//! [`ServerRequestHandler`](super::ServerRequestHandler) that answers a legacy server's
//! requests; `ping` is answered by the client) and the request sent again with the answers
//! and the server's `requestState`, at most [`MAX_INPUT_ROUNDS`] times. A connection lost
//! before the response is not resumable in this era: a request that is safe to repeat
//! ([`SAFE_TO_REPEAT`]), or one whose connection could not even be made, is sent again under
//! a new id with the reconnect backoff and budget; any other fails with
//! [`Error::MayHaveRun`], since the server may have acted on it. A 429 or 503 answer means the
//! server refused without acting on the request: any request is sent again, after the
//! answer's `Retry-After` when it has one, within the same budget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tether_proto::headers::ResponseKind;
use tether_proto::jsonrpc::{
    Batching, ErrorObject, Message, Request, RequestId, Response as RpcResponse, parse_body,
};
use tether_proto::modern::{
    DISCOVER, LISTEN, RESULT_INPUT_REQUIRED, SAFE_TO_REPEAT, TASKS_EXTENSION,
    UNSUPPORTED_PROTOCOL_VERSION, add_envelope, name_header, param_header_values, param_headers,
};
use tether_proto::version::ProtocolVersion;
use tether_sse::{Decoder, Item};
use tokio::sync::mpsc;

use super::config::ProtocolChoice;
use super::error::Error;
use super::events::ClientEvent;
use super::retry::Attempts;
use super::session::{Inner, read_body, response_kind};
use super::stream::Delivery;

/// Whether a `server/discover` result offers the tasks extension with its event streams.
fn offers_task_streams(discovered: &Value) -> bool {
    discovered["capabilities"]["extensions"][TASKS_EXTENSION]
        .get("eventStreams")
        .is_some()
}

/// Rounds of `input_required` one request may take before the client gives up: a server that
/// keeps asking after every answer is broken, and a person answers a handful at most.
pub const MAX_INPUT_ROUNDS: usize = 16;

/// What the era choice decided.
pub(super) enum Chosen {
    /// `initialize` and a session.
    Legacy,
    /// The legacy era, already initialized (while choosing).
    Initialized,
    /// Stateless requests; the server's `server/discover` result.
    Modern(Value),
}

/// What one POST of a modern request came to.
pub(super) enum Outcome {
    /// The response to the request.
    Answered(Box<RpcResponse>),
    /// The connection was lost before the response.
    Lost(Error),
    /// The server refused for now without acting on the request (429, 503): the same request
    /// may be sent again, after `retry_after` when the server said so.
    Busy {
        error: Error,
        status: u16,
        retry_after: Option<Duration>,
    },
}

/// What an answer carried besides its outcome, for the [`Attempts`] that sent it.
#[derive(Debug, Default)]
pub(super) struct Carried {
    /// The server's `retry`, if the event stream gave one.
    pub(super) retry: Option<Duration>,
    /// Messages handed on before the response.
    pub(super) messages: u64,
}

impl Carried {
    /// Tells `attempts` what arrived: the `retry` to wait after a loss, and whether the
    /// answer made progress.
    pub(super) fn report(&self, attempts: &mut Attempts) {
        if let Some(retry) = self.retry {
            attempts.retry(retry);
        }
        if self.messages > 0 {
            attempts.delivered(None);
        }
    }
}

impl Inner {
    /// The era to speak with the server, as `choice` says (module docs).
    pub(super) async fn choose_era(
        self: &Arc<Self>,
        choice: ProtocolChoice,
    ) -> Result<Chosen, Error> {
        let pinned = match choice {
            ProtocolChoice::Legacy => return Ok(Chosen::Legacy),
            ProtocolChoice::Version(version) if !version.is_modern() => {
                return Ok(Chosen::Legacy);
            }
            ProtocolChoice::Version(_) => true,
            ProtocolChoice::Auto => false,
        };
        match self.discover().await? {
            Some(result) if pinned => Ok(Chosen::Modern(result)),
            // A call runs as a task whose events are read again after a cut: it survives the
            // cut in this era, progress included.
            Some(result)
                if self.config.tasks
                    && self.config.prefer_tasks
                    && offers_task_streams(&result) =>
            {
                Ok(Chosen::Modern(result))
            }
            Some(result) => {
                let lists_legacy = result["supportedVersions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .any(|v| ProtocolVersion::parse_legacy(v).is_ok());
                if lists_legacy {
                    return Ok(Chosen::Legacy);
                }
                // Some servers that serve both eras list only 2026-07-28 (the Python SDK
                // 2.3.0's): only an `initialize` tells whether a session, where a call survives
                // a cut, is on offer.
                match self.initialize().await {
                    Ok(()) => Ok(Chosen::Initialized),
                    Err(
                        Error::UnsupportedVersion { .. }
                        | Error::LegacyTransport
                        | Error::Status { .. }
                        | Error::SessionExpired
                        | Error::Protocol(_),
                    ) => Ok(Chosen::Modern(result)),
                    Err(error) => Err(error),
                }
            }
            None if pinned => Err(Error::UnsupportedVersion {
                offered: "no 2026-07-28 (server/discover was refused)".to_owned(),
            }),
            None => Ok(Chosen::Legacy),
        }
    }

    /// `server/discover`: its result, or `None` when the server answers as one that does not
    /// serve 2026-07-28. Network failures are retried within the reconnect budget.
    async fn discover(self: &Arc<Self>) -> Result<Option<Value>, Error> {
        let mut attempts = self.attempts();
        let mut version_retried = false;
        loop {
            attempts.next().await?;
            let id = self.next_request_id();
            let body = self.modern_body(&id, DISCOVER, None, &Map::new(), None);
            let response = match self.transport.post_modern(body, DISCOVER, None, &[]).await {
                Ok(response) => response,
                Err(error @ (Error::Network(_) | Error::Timeout)) => {
                    attempts.lost(error);
                    continue;
                }
                Err(error) => return Err(error),
            };
            let status = response.status().as_u16();
            if status == 401 {
                return Err(Error::Unauthorized);
            }
            // The answer may be JSON or, as rmcp sends it, an event stream. No message is
            // expected before the response: one makes the answer a refusal (nothing reads it).
            let (ignored, _) = mpsc::channel(1);
            let answer = match self.read_answer(response, &id, &ignored).await {
                Ok((Outcome::Answered(answer), _)) => *answer,
                // An answer that began but never gave the response (an event stream that
                // ended or went silent): not a 2026-07-28 server's.
                Ok((Outcome::Lost(_), _)) => return Ok(None),
                Ok((
                    Outcome::Busy {
                        error,
                        status,
                        retry_after,
                    },
                    _,
                )) => {
                    attempts.refused(error, status, retry_after);
                    continue;
                }
                Err(Error::Unauthorized) => return Err(Error::Unauthorized),
                // Not a 2026-07-28 answer: a legacy server's refusal.
                Err(_) => return Ok(None),
            };
            match answer {
                RpcResponse::Result(result)
                    if status == 200 && result.result.get("supportedVersions").is_some() =>
                {
                    return Ok(Some(result.result));
                }
                RpcResponse::Error(error)
                    if !version_retried && refuses_a_version_it_serves(&error.error) =>
                {
                    // Sent once more at once: a refusal is not a failure to reach the server.
                    version_retried = true;
                    attempts = self.attempts();
                }
                _ => return Ok(None),
            }
        }
    }

    /// The [`Attempts`] of a request sent now: the reconnect configuration, and the server's
    /// last `retry` to wait where an answer carries none.
    pub(super) fn attempts(&self) -> Attempts {
        Attempts::request(self.config.reconnect, *crate::lock(&self.server_retry))
    }

    pub(super) fn next_request_id(&self) -> RequestId {
        RequestId::from(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// A modern request's body: `params` with the envelope, the answers given so far and the
    /// server's `requestState`.
    pub(super) fn modern_body(
        &self,
        id: &RequestId,
        method: &str,
        params: Option<&Value>,
        answers: &Map<String, Value>,
        state: Option<&Value>,
    ) -> Vec<u8> {
        let mut params = params.cloned().unwrap_or_else(|| json!({}));
        if let Value::Object(object) = &mut params {
            if !answers.is_empty() {
                object.insert("inputResponses".into(), Value::Object(answers.clone()));
            }
            if let Some(state) = state {
                object.insert("requestState".into(), state.clone());
            }
        }
        let client_info = json!({
            "name": self.config.client_name,
            "version": self.config.client_version,
        });
        // The configured capabilities as they are, unless the tasks extension joins them.
        let with_tasks;
        let capabilities = if self.config.tasks && self.offers_tasks().0 {
            with_tasks = declaring_tasks(&self.config.capabilities);
            &with_tasks
        } else {
            &self.config.capabilities
        };
        add_envelope(
            &mut params,
            ProtocolVersion::MODERN,
            capabilities,
            &client_info,
        );
        Message::from(Request::new(id.clone(), method, Some(params))).to_vec()
    }

    /// Runs one modern request to its response, handing everything it yields to `tx`: the
    /// messages before the response, then the response (under `id`, the id the caller knows),
    /// or the error it failed with.
    pub(super) async fn modern_exchange(
        self: Arc<Self>,
        id: RequestId,
        method: String,
        params: Option<Value>,
        tx: mpsc::Sender<Delivery>,
    ) {
        let cancel = self.shutdown.child_token();
        crate::lock(&self.modern_running).insert(id.clone(), cancel.clone());
        let outcome = tokio::select! {
            outcome = self.rounds_or_task(&method, params.as_ref(), &tx) => Some(outcome),
            // Dropping the exchange drops its connection, which is this era's cancellation.
            () = cancel.cancelled() => None,
            () = tx.closed() => None,
        };
        crate::lock(&self.modern_running).remove(&id);
        let outcome = outcome.unwrap_or(Err(Error::Cancelled));
        let _ = tx.send(final_delivery(outcome, id)).await;
    }

    /// Follows task `task` after `after` as the exchange of the request the caller knows as
    /// `id` (a resumed task call): its events, then its outcome under `id`.
    pub(super) async fn task_exchange(
        self: Arc<Self>,
        id: RequestId,
        task: String,
        after: Option<u64>,
        tx: mpsc::Sender<Delivery>,
    ) {
        let outcome = tokio::select! {
            outcome = self.follow_task(&task, None, after, &tx) => outcome,
            () = self.shutdown.cancelled() => Err(Error::Closed),
            () = tx.closed() => return,
        };
        let _ = tx.send(final_delivery(outcome, id)).await;
    }

    /// Cancels the modern request the caller knows as `id`, if it is still running: its
    /// connection is dropped (the server takes that as the cancellation) and its stream ends
    /// with [`Error::Cancelled`]. `false` when no such request runs.
    pub(super) fn cancel_modern(&self, id: &RequestId) -> bool {
        crate::lock(&self.modern_running)
            .remove(id)
            .map(|cancel| cancel.cancel())
            .is_some()
    }

    /// Runs `subscriptions/listen` with `filter` (its `notifications` object) for as long as
    /// `tx` is read: every message of the stream goes to `tx` (the acknowledgment first, then
    /// the notifications), and a stream that is cut, or that the server ends gracefully, is
    /// opened again with the reconnect backoff (a [`ClientEvent::Reconnecting`] first; the
    /// new acknowledgment says it is open again, and what was sent in between is lost: this
    /// era has no resumption, so an application re-reads the lists it watches). Backoff and
    /// budget restart whenever a stream delivers a message. A JSON-RPC error (the server refuses the filter)
    /// ends the stream with [`Error::Protocol`] naming it.
    pub(super) async fn modern_listen(self: Arc<Self>, filter: Value, tx: mpsc::Sender<Delivery>) {
        let outcome = tokio::select! {
            error = self.listen_until_refused(&filter, &tx) => Some(error),
            () = self.shutdown.cancelled() => None,
            () = tx.closed() => None,
        };
        if let Some(error) = outcome {
            let _ = tx.send(Delivery::Failed(error)).await;
        }
    }

    async fn listen_until_refused(&self, filter: &Value, tx: &mpsc::Sender<Delivery>) -> Error {
        let params = json!({ "notifications": filter });
        let mut attempts = self.attempts();
        let mut opened_before = false;
        loop {
            if let Err(error) = attempts.next().await {
                return error;
            }
            if opened_before {
                self.emit(ClientEvent::Reconnecting {
                    request_id: None,
                    last_event_id: None,
                    failures: attempts.failures(),
                });
            }
            opened_before = true;
            let id = self.next_request_id();
            let body = self.modern_body(&id, LISTEN, Some(&params), &Map::new(), None);
            let lost = match self.transport.post_modern(body, LISTEN, None, &[]).await {
                Ok(response) => {
                    if response.status().as_u16() == 200 {
                        attempts.connected();
                        self.emit(ClientEvent::Connected { request_id: None });
                    }
                    let read = self.read_answer(response, &id, tx).await;
                    match read {
                        Ok((outcome, carried)) => {
                            carried.report(&mut attempts);
                            match outcome {
                                Outcome::Answered(answer) => match *answer {
                                    RpcResponse::Error(error) => {
                                        return Error::Protocol(format!(
                                            "{LISTEN} refused: {} {}",
                                            error.error.code, error.error.message
                                        ));
                                    }
                                    RpcResponse::Result(_) => Error::Closed,
                                },
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
                        Err(error) => return error,
                    }
                }
                Err(error @ (Error::Network(_) | Error::Timeout)) => error,
                Err(error) => return error,
            };
            tracing::debug!(%lost, "the listen stream ended; opening it again");
            attempts.lost(lost);
        }
    }

    pub(super) async fn modern_rounds(
        self: &Arc<Self>,
        method: &str,
        params: Option<&Value>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<RpcResponse, Error> {
        let headers = Headers {
            name: name_header(method, params),
            params: self.param_headers_of(method, params),
        };
        let mut answers = Map::new();
        let mut state: Option<Value> = None;
        let mut version_retried = false;
        for _ in 0..MAX_INPUT_ROUNDS {
            let mut response = self
                .modern_attempts(method, params, &headers, &answers, state.as_ref(), tx)
                .await?;
            let result = match &mut response {
                RpcResponse::Error(error)
                    if !version_retried && refuses_a_version_it_serves(&error.error) =>
                {
                    version_retried = true;
                    continue;
                }
                RpcResponse::Error(_) => return Ok(response),
                RpcResponse::Result(result) => &mut result.result,
            };
            if result.get("resultType").and_then(Value::as_str) != Some(RESULT_INPUT_REQUIRED) {
                if method == "tools/list" {
                    self.keep_valid_tools(result);
                }
                return Ok(response);
            }
            let result = &*result;
            let questions = result["inputRequests"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            state = result.get("requestState").cloned();
            for (key, question) in questions {
                answers.insert(key.clone(), self.answer_question(&key, &question).await?);
            }
        }
        Err(Error::Protocol(format!(
            "{method}: the server still asked for input after {MAX_INPUT_ROUNDS} rounds"
        )))
    }

    /// Sends one round of the request, again under a new id after a lost connection while
    /// that is safe (module docs).
    async fn modern_attempts(
        self: &Arc<Self>,
        method: &str,
        params: Option<&Value>,
        headers: &Headers,
        answers: &Map<String, Value>,
        state: Option<&Value>,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<RpcResponse, Error> {
        let mut attempts = self.attempts();
        loop {
            attempts.next().await?;
            let id = self.next_request_id();
            let body = self.modern_body(&id, method, params, answers, state);
            let posted = self
                .transport
                .post_modern(body, method, headers.name.as_deref(), &headers.params)
                .await;
            let lost = match posted {
                Ok(response) => {
                    attempts.connected();
                    let (outcome, carried) = self.read_answer(response, &id, tx).await?;
                    carried.report(&mut attempts);
                    match outcome {
                        Outcome::Answered(response) => return Ok(*response),
                        Outcome::Lost(error) => error,
                        // Refused without acting on it: any request may be sent again.
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
            if !SAFE_TO_REPEAT.contains(&method) && !lost.never_sent() {
                tracing::debug!(%lost, method, "a modern request's connection was lost");
                return Err(Error::MayHaveRun {
                    method: method.to_owned(),
                });
            }
            tracing::info!(error.type = lost.kind_name(), "tether.reconnect");
            attempts.lost(lost);
        }
    }

    /// The answer to one POST: JSON, SSE (messages before the response go to `tx`), a refusal
    /// for now (429, 503: [`Outcome::Busy`]), or an error status whose body is the JSON-RPC
    /// error.
    pub(super) async fn read_answer(
        &self,
        response: reqwest::Response,
        id: &RequestId,
        tx: &mpsc::Sender<Delivery>,
    ) -> Result<(Outcome, Carried), Error> {
        let mut carried = Carried::default();
        let outcome = self.read_answer_into(response, id, tx, &mut carried).await;
        if let Some(retry) = carried.retry {
            *crate::lock(&self.server_retry) = Some(retry);
        }
        Ok((outcome?, carried))
    }

    async fn read_answer_into(
        &self,
        mut response: reqwest::Response,
        id: &RequestId,
        tx: &mpsc::Sender<Delivery>,
        carried: &mut Carried,
    ) -> Result<Outcome, Error> {
        let status = response.status().as_u16();
        if matches!(status, 429 | 503) {
            let failed = super::transport::Failed::read(response).await;
            return Ok(Outcome::Busy {
                status,
                retry_after: failed.retry_after,
                error: failed.into_error(),
            });
        }
        match response_kind(&response) {
            Some(ResponseKind::EventStream) if status == 200 => {}
            Some(ResponseKind::Json) => {
                let bytes = match read_body(response, self.transport.request_timeout()).await {
                    Ok(bytes) => bytes,
                    Err(error @ (Error::Network(_) | Error::Timeout)) => {
                        return Ok(Outcome::Lost(error));
                    }
                    Err(error) => return Err(error),
                };
                return match response_to(&bytes, id) {
                    Some(response) => Ok(Outcome::Answered(Box::new(response))),
                    None => Err(Error::Status {
                        status,
                        body: String::from_utf8_lossy(&bytes).into_owned(),
                    }),
                };
            }
            _ => {
                let failed = super::transport::Failed::read(response).await;
                return Err(match failed.status {
                    401 => Error::Unauthorized,
                    _ => failed.into_error(),
                });
            }
        }
        let idle = self.config.reconnect.idle_timeout;
        let mut decoder = Decoder::new();
        loop {
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => return Ok(Outcome::Lost(Error::Timeout)),
                Ok(Err(error)) => return Ok(Outcome::Lost(Error::network(error))),
                Ok(Ok(None)) => {
                    return Ok(Outcome::Lost(Error::Network(Box::new(
                        std::io::Error::other("the stream ended before the response"),
                    ))));
                }
                Ok(Ok(Some(chunk))) => chunk,
            };
            decoder.feed(&chunk);
            loop {
                let item = decoder
                    .next_item()
                    .map_err(|error| Error::Protocol(format!("SSE: {error}")))?;
                let Some(item) = item else { break };
                let event = match item {
                    Item::Event(event) => event,
                    Item::Retry(ms) => {
                        carried.retry = Some(Duration::from_millis(ms));
                        continue;
                    }
                    Item::Comment(_) | Item::LastEventId(_) => continue,
                };
                if event.data().is_empty() {
                    continue;
                }
                let message = serde_json::from_str::<Value>(event.data())
                    .map_err(|error| Error::Protocol(format!("an SSE message: {error}")))
                    .and_then(|value| {
                        Message::from_value(value)
                            .map_err(|error| Error::Protocol(format!("an SSE message: {error}")))
                    })?;
                match message {
                    Message::Response(response) if response.id() == Some(id) => {
                        return Ok(Outcome::Answered(Box::new(response)));
                    }
                    message => {
                        let delivery = Delivery::Message {
                            message,
                            event_id: None,
                        };
                        if tx.send(delivery).await.is_err() {
                            return Err(Error::Closed);
                        }
                        carried.messages += 1;
                    }
                }
            }
        }
    }

    /// The `Mcp-Param-*` headers of a `tools/call` of a tool listed earlier (SEP-2243); none
    /// for other methods, or for a tool this client has not seen in a `tools/list` (its
    /// schema, which says what to mirror, is unknown).
    fn param_headers_of(&self, method: &str, params: Option<&Value>) -> Vec<(String, String)> {
        if method != "tools/call" {
            return Vec::new();
        }
        let Some(params) = params else {
            return Vec::new();
        };
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Vec::new();
        };
        let tools = crate::lock(&self.tool_headers);
        tools.get(name).map_or_else(Vec::new, |headers| {
            param_header_values(headers, params.get("arguments").unwrap_or(&Value::Null))
        })
    }

    /// Drops from a `tools/list` result every tool whose `x-mcp-header` annotations are invalid
    /// (SEP-2243 requires it, so that one bad definition does not make the others unusable),
    /// with a warning naming the tool and the reason, and remembers the annotations of the rest
    /// for their calls.
    fn keep_valid_tools(&self, result: &mut Value) {
        let Some(Value::Array(tools)) = result.get_mut("tools") else {
            return;
        };
        let mut known = crate::lock(&self.tool_headers);
        tools.retain(|tool| {
            let name = tool["name"].as_str().unwrap_or_default();
            match param_headers(tool.get("inputSchema").unwrap_or(&Value::Null)) {
                Ok(headers) => {
                    known.insert(name.to_owned(), headers);
                    true
                }
                Err(reason) => {
                    tracing::warn!(tool = name, %reason, "dropping a listed tool: invalid x-mcp-header");
                    known.remove(name);
                    false
                }
            }
        });
    }

    /// The answer to the server's question `question` (`{method, params}`) under `key`.
    pub(super) async fn answer_question(
        &self,
        key: &str,
        question: &Value,
    ) -> Result<Value, Error> {
        let method = question["method"].as_str().unwrap_or_default();
        if method == "ping" {
            return Ok(json!({}));
        }
        let request = Request::new(
            RequestId::String(key.to_owned()),
            method,
            question.get("params").cloned(),
        );
        match &self.config.request_handler {
            Some(handler) if handler.accepts(&request) => {
                handler
                    .handle(&request)
                    .await
                    .map_err(|error: ErrorObject| Error::QuestionDeclined {
                        method: method.to_owned(),
                        message: error.message,
                    })
            }
            _ => Err(Error::QuestionDeclined {
                method: method.to_owned(),
                message: "no ServerRequestHandler answers it".to_owned(),
            }),
        }
    }
}

/// The headers a modern request carries beside the method and version: `Mcp-Name` and the
/// `Mcp-Param-*` of a tool call.
struct Headers {
    name: Option<String>,
    params: Vec<(String, String)>,
}

/// Whether `error` refuses the request's protocol version while naming 2026-07-28 among the
/// versions the server supports (-32022, `data.supported`): a server in the middle of a
/// rolling upgrade, or one that picks its version per request. The request is sent once more;
/// a second refusal is final.
fn refuses_a_version_it_serves(error: &ErrorObject) -> bool {
    error.code == UNSUPPORTED_PROTOCOL_VERSION
        && error
            .data
            .as_ref()
            .and_then(|data| data.get("supported"))
            .and_then(Value::as_array)
            .is_some_and(|supported| {
                supported
                    .iter()
                    .any(|v| v.as_str() == Some(ProtocolVersion::MODERN.as_str()))
            })
}

/// The response to `id` in a JSON body, if there is one.
fn response_to(bytes: &[u8], id: &RequestId) -> Option<RpcResponse> {
    parse_body(bytes, Batching::Allowed)
        .ok()?
        .into_messages()
        .into_iter()
        .find_map(|message| match message {
            Message::Response(response) if response.id() == Some(id) => Some(response),
            _ => None,
        })
}

/// `capabilities` with the tasks extension declared.
fn declaring_tasks(capabilities: &Value) -> Value {
    let mut declared = capabilities.clone();
    if let Value::Object(map) = &mut declared {
        let extensions = map
            .entry("extensions")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(extensions) = extensions {
            extensions.insert(TASKS_EXTENSION.into(), json!({}));
        }
    }
    declared
}

/// What ends a request's stream: its response under `id`, or the error it failed with.
fn final_delivery(outcome: Result<RpcResponse, Error>, id: RequestId) -> Delivery {
    match outcome {
        Ok(response) => Delivery::Message {
            message: Message::Response(with_id(response, id)),
            event_id: None,
        },
        Err(error) => Delivery::Failed(error),
    }
}

/// `response` under `id` (each round went out under an id of its own).
fn with_id(response: RpcResponse, id: RequestId) -> RpcResponse {
    match response {
        RpcResponse::Result(result) => RpcResponse::success(id, result.result),
        RpcResponse::Error(error) => RpcResponse::error(Some(id), error.error),
    }
}
