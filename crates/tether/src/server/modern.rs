//! The 2026-07-28 era on the endpoint: a stateless POST, beside the legacy sessions.
//!
//! The endpoint hands over every POST whose body carries the modern envelope or whose
//! `MCP-Protocol-Version` is modern ([`tether_proto::modern::era_of`]); the 2025 path is not
//! touched. Here a request is validated in the pinned order (`tether_proto::modern`), then:
//!
//! - `server/discover` is answered by the transport from the handler's [`ServerInfo`];
//! - `subscriptions/listen` opens a listen stream ([`super::subscriptions`]);
//! - the legacy-only methods (`initialize`, `ping`, `logging/setLevel`,
//!   `resources/subscribe`, `resources/unsubscribe`) are 404 with -32601;
//! - everything else runs the handler with a context of its own, through the same
//!   `dispatch::run_handler` as a legacy request, its questions going through
//!   [`super::mrtr`].
//!
//! Each request gets a stream of its own in the event store, under a session id made for it
//! and never stored as a session, so its progress and log messages are stored before they are
//! sent like every event. The HTTP head waits for the first thing the request produces: if
//! that is its final response, it goes out as `application/json` with the status its error
//! code calls for (404 for -32601, 400 for -32020/-32021/-32022); otherwise the answer is an
//! SSE stream. On HTTP a client disconnect *is* cancellation in this era: the connection's
//! [`RequestGuard`] cancels the handler when the response is dropped, and the request's
//! stream is removed with it. Results gain `resultType`, `_meta` server info and, where the
//! schema requires them, caching hints ([`complete_result`]).

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};
use tether_proto::headers::{ResponseKind, server_accepts};
use tether_proto::ids::{SessionId, StreamId};
use tether_proto::jsonrpc::{
    ErrorObject, INVALID_REQUEST, METHOD_NOT_FOUND, Message, Request, RequestId,
    Response as RpcResponse,
};
use tether_proto::modern::{
    DISCOVER, Envelope, HEADER_MISMATCH, LISTEN, META_SERVER_INFO,
    MISSING_REQUIRED_CLIENT_CAPABILITY, REMOVED_METHODS, RESULT_COMPLETE, RESULT_INPUT_REQUIRED,
    RequestHeaders, TASKS_EXTENSION, UNSUPPORTED_PROTOCOL_VERSION, check_request, complete_result,
};
use tether_proto::version::{Eras, ProtocolVersion};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::context::ModernRequest;
use super::dispatch;
use super::error::ServerError;
use super::finish;
use super::handler::{ServerInfo, TaskSupport};
use super::metrics::ModernOutcome;
use super::mrtr::{InputRounds, request_digest};
use super::reply::json_response;
use super::session::SessionRuntime;
use super::state::ServerState;
use super::subscriptions::{self, Filter};
use super::tasks;
use super::writer::{Start, event_stream_response};
use crate::store::{SessionRecord, StreamKind, StreamOwner};

/// A modern POST, after the endpoint's transport checks (host, origin, auth, content type,
/// size) and parsing.
pub(crate) struct ModernPost<'a> {
    pub(crate) principal: Arc<str>,
    pub(crate) message: Message,
    pub(crate) headers: RequestHeaders<'a>,
    pub(crate) accept: Option<&'a str>,
}

/// Answers a modern POST.
pub(crate) async fn post(
    state: &Arc<ServerState>,
    post: ModernPost<'_>,
) -> Result<Response, ServerError> {
    let request = match post.message {
        // "This revision of the core protocol defines no client-to-server notifications over
        // Streamable HTTP": accepted and ignored (a disconnect is the cancellation here).
        Message::Notification(_) => return Ok(StatusCode::ACCEPTED.into_response()),
        Message::Response(response) => {
            return Err(refused(
                state,
                "other",
                response.id().cloned(),
                StatusCode::BAD_REQUEST,
                ErrorObject::new(
                    INVALID_REQUEST,
                    "a 2026-07-28 client sends no responses: answers travel in inputResponses",
                ),
            ));
        }
        Message::Request(request) => request,
    };
    let method = request.method.clone();
    let envelope =
        check_request(&method, request.params.as_ref(), post.headers).map_err(|refusal| {
            refused(
                state,
                &method,
                Some(request.id.clone()),
                StatusCode::BAD_REQUEST,
                refusal.error_object(state.config.eras),
            )
        })?;
    if REMOVED_METHODS.contains(&method.as_str()) {
        return Err(refused(
            state,
            &method,
            Some(request.id.clone()),
            StatusCode::NOT_FOUND,
            removed_method(&method, state.config.eras),
        ));
    }
    let info = state
        .handler
        .modern_server_info(&post.principal)
        .await
        .map_err(|error| {
            let status = error_status(&error);
            refused(state, &method, Some(request.id.clone()), status, error)
        })?;
    if method == tasks::STREAM_METHOD {
        return task_stream(state, post.principal, request, &envelope, &info).await;
    }
    if let Some(outcome) = tasks::method(state, &post.principal, &request, &envelope).await {
        return Ok(answered(state, &request, outcome?, &info));
    }
    match method.as_str() {
        DISCOVER => {
            state.metrics.modern_request(&method, ModernOutcome::Result);
            let offers_tasks = state.handler.offers_tasks();
            let response = RpcResponse::success(
                request.id,
                discover_result(&info, offers_tasks, state.config.eras),
            );
            Ok(json_response(response.to_vec(), None))
        }
        LISTEN => listen(state, post.principal, request, &envelope, &info).await,
        _ => run(state, post.principal, request, envelope, &info, post.accept).await,
    }
}

/// The JSON answer to a request the transport answered itself (a `tasks/*` method, a new
/// task): completed as this era's results are, with the status its error calls for.
fn answered(
    state: &ServerState,
    request: &Request,
    outcome: Result<Value, ErrorObject>,
    info: &ServerInfo,
) -> Response {
    let (response, status, counted) = match outcome {
        Ok(mut result) => {
            complete_result(&request.method, &mut result, &server_identity(info));
            (
                RpcResponse::success(request.id.clone(), result),
                StatusCode::OK,
                ModernOutcome::Result,
            )
        }
        Err(error) => {
            let status = error_status(&error);
            (
                RpcResponse::error(Some(request.id.clone()), error),
                status,
                ModernOutcome::Error,
            )
        }
    };
    state.metrics.modern_request(&request.method, counted);
    let mut response = json_response(response.to_vec(), None);
    *response.status_mut() = status;
    response
}

/// A refusal before anything ran: counted, and answered with the request's own id.
fn refused(
    state: &ServerState,
    method: &str,
    id: Option<RequestId>,
    status: StatusCode,
    error: ErrorObject,
) -> ServerError {
    state.metrics.modern_request(method, ModernOutcome::Refused);
    ServerError::modern(id, status, error)
}

/// -32601 for a method the modern era removed; `initialize` also names every version served
/// ("legacy clients have no fall-forward mechanism").
fn removed_method(method: &str, eras: Eras) -> ErrorObject {
    let error = ErrorObject::method_not_found(method);
    if method == tether_proto::jsonrpc::INITIALIZE {
        error.with_data(tether_proto::modern::unsupported_version_data(eras, None))
    } else {
        error
    }
}

/// `_meta["io.modelcontextprotocol/serverInfo"]`.
fn server_identity(info: &ServerInfo) -> Value {
    json!({"name": info.name, "version": info.version})
}

/// The handler's capabilities as the modern era states them: the 2025-11-25 experimental
/// `tasks` capability is not the tasks extension, so it is left out, and the tasks extension,
/// which the transport serves, is added when the handler runs calls as tasks.
fn modern_capabilities(info: &ServerInfo, offers_tasks: bool) -> Value {
    let mut capabilities = info.capabilities.clone();
    if let Value::Object(map) = &mut capabilities {
        map.remove("tasks");
        if !offers_tasks {
            return capabilities;
        }
        let extensions = map
            .entry("extensions")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(extensions) = extensions {
            // SEP-2694's task streams, served for every task: `tasks/stream`.
            extensions.insert(TASKS_EXTENSION.into(), json!({"eventStreams": {}}));
        }
    }
    capabilities
}

/// The `server/discover` result. The identity and capabilities do not depend on the caller,
/// so it is `public`; `ttlMs` 0, since a handler's capabilities can change with a restart.
fn discover_result(info: &ServerInfo, offers_tasks: bool, eras: Eras) -> Value {
    let supported = eras.version_strings();
    let mut result = json!({
        "resultType": RESULT_COMPLETE,
        "supportedVersions": supported,
        "capabilities": modern_capabilities(info, offers_tasks),
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {META_SERVER_INFO: server_identity(info)},
    });
    if let Some(instructions) = &info.instructions {
        result["instructions"] = Value::from(instructions.as_str());
    }
    result
}

/// The HTTP status of a modern request answered with `error` before any other message.
fn error_status(error: &ErrorObject) -> StatusCode {
    match error.code {
        METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// Ends a modern request's life on this node when its response is dropped: the client
/// disconnected (cancellation, in this era) or everything was sent. Its handler is cancelled
/// and its stream removed.
pub(crate) struct RequestGuard {
    runtime: Arc<SessionRuntime>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.runtime.close();
        let events = Arc::clone(self.runtime.events());
        let session = self.runtime.record().id.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(error) = events.remove_session(&session).await {
                    tracing::debug!(error = %crate::error_chain(&error), "a modern request's stream was not removed");
                }
            });
        }
    }
}

/// Which event store a modern request's stream lives in.
#[derive(Clone, Copy)]
enum Keep {
    /// The server's store: a task's stream, read later by `tasks/stream` on any node.
    Durable,
    /// This process's memory: a request answered on its own connection, which nothing
    /// resumes ([`ServerState::transient_events`]).
    Transient,
}

/// A context for one modern request: a session id made for it (never stored as a session),
/// its stream in the store `keep` names, and the runtime that serves them.
async fn ephemeral(
    state: &ServerState,
    principal: Arc<str>,
    id: &RequestId,
    keep: Keep,
) -> Result<(Arc<SessionRuntime>, StreamId), ServerError> {
    let events = match keep {
        Keep::Durable => &state.events,
        Keep::Transient => &state.transient_events,
    };
    let session = SessionId::generate();
    let owner = StreamOwner {
        principal: Arc::clone(&principal),
        session: session.clone(),
    };
    let stream = events
        .create_stream(
            &owner,
            StreamKind::Request,
            state.config.retry,
            std::slice::from_ref(id),
        )
        .await?;
    let record = SessionRecord {
        id: session,
        version: ProtocolVersion::MODERN,
        principal,
        standalone: stream,
        client: None,
    };
    let runtime = SessionRuntime::new(record, Arc::clone(events), state.config.max_event_bytes);
    Ok((runtime, stream))
}

/// A request for the handler: run it, then answer with JSON or a stream (module docs).
async fn run(
    state: &Arc<ServerState>,
    principal: Arc<str>,
    request: Request,
    envelope: Envelope,
    info: &ServerInfo,
    accept: Option<&str>,
) -> Result<Response, ServerError> {
    let method = request.method.clone();
    let id = request.id.clone();
    let digest = request_digest(&method, request.params.as_ref());
    let answers = state
        .sealer
        .answers(request.params.as_ref(), &principal, &digest)
        .map_err(|refusal| {
            refused(
                state,
                &method,
                Some(id.clone()),
                StatusCode::BAD_REQUEST,
                refusal.error_object(),
            )
        })?;
    if method == "tools/call" {
        let declared = envelope.declares_extension(TASKS_EXTENSION);
        match (state.handler.task_support(&request), declared) {
            (TaskSupport::Required, false) => {
                return Err(refused(
                    state,
                    &method,
                    Some(id),
                    StatusCode::BAD_REQUEST,
                    tether_proto::modern::tasks_extension_required(),
                ));
            }
            (TaskSupport::Optional | TaskSupport::Required, true) => {
                let limit = state.config.max_tasks_per_principal;
                if state.tasks.count_for(&principal).await? >= limit {
                    return Err(refused(
                        state,
                        &method,
                        Some(id),
                        StatusCode::TOO_MANY_REQUESTS,
                        ErrorObject::new(
                            tether_proto::jsonrpc::INTERNAL_ERROR,
                            "too many tasks for this principal",
                        )
                        .with_data(json!({"reason": "too_many_tasks", "limit": limit})),
                    ));
                }
                let (runtime, stream) =
                    ephemeral(state, Arc::clone(&principal), &id, Keep::Durable).await?;
                let identity = server_identity(info);
                let rounds = InputRounds::new(answers.answers, envelope.capabilities.clone());
                let modern = ModernRequest {
                    rounds,
                    envelope,
                    digest,
                    task: None,
                };
                let created =
                    tasks::start(state, runtime, stream, request.clone(), modern, identity)
                        .await
                        .map_err(ServerError::Store)?;
                return Ok(answered(state, &request, Ok(created), info));
            }
            _ => {}
        }
    }
    let streams = !state.config.json_response && server_accepts(accept, ResponseKind::EventStream)
        || !server_accepts(accept, ResponseKind::Json);
    let (runtime, stream) = ephemeral(state, principal, &id, Keep::Transient).await?;
    let guard = RequestGuard {
        runtime: Arc::clone(&runtime),
    };
    let slot = runtime
        .reserve(std::slice::from_ref(&id), 1)
        .and_then(|mut slots| slots.pop())
        .and_then(Result::ok)
        .expect("a fresh runtime has room for its one request");
    let modern = Arc::new(ModernRequest {
        rounds: InputRounds::new(answers.answers, envelope.capabilities.clone()),
        envelope,
        digest,
        task: None,
    });
    let span = tracing::info_span!("modern", method = %method, request = %id);
    tokio::spawn(
        drive(
            Arc::clone(state),
            Arc::clone(&runtime),
            stream,
            request,
            slot,
            modern,
            server_identity(info),
        )
        .instrument(span),
    );
    // The head waits for the first message; a client that leaves meanwhile drops this
    // future, and with it the guard: cancellation.
    let first = if streams {
        loop {
            let batch = runtime
                .events()
                .read_after(runtime.owner(), stream, 0, 2)
                .await?;
            if !batch.events.is_empty() {
                break batch;
            }
            runtime.events().wait_for_more(stream, 0).await?;
        }
    } else {
        // JSON only: wait for the end; what came before the response cannot be sent.
        read_to_end(&runtime, stream).await?
    };
    // The request's one response is the last thing its stream holds: first means alone.
    let only_response = match first.events.as_slice() {
        _ if !streams => first
            .events
            .last()
            .and_then(|event| response_of(event.message())),
        [event, ..] => response_of(event.message()),
        [] => None,
    };
    if let Some((body, response)) = only_response {
        let status = match response {
            RpcResponse::Error(response) => error_status(&response.error),
            RpcResponse::Result(_) => StatusCode::OK,
        };
        drop(guard);
        let mut response = json_response(body, None);
        *response.status_mut() = status;
        return Ok(response);
    }
    Ok(state
        .writer(&runtime, stream, Start::Fresh { cursor: 0 })
        .with_guard(guard)
        .into_response(None))
}

/// `message` (a stored event's JSON) and its response, when it is one.
fn response_of(message: &[u8]) -> Option<(Vec<u8>, RpcResponse)> {
    match Message::from_value(serde_json::from_slice(message).ok()?) {
        Ok(Message::Response(response)) => Some((message.to_vec(), response)),
        _ => None,
    }
}

/// Every event of `stream` after its priming event, once it is complete.
async fn read_to_end(
    runtime: &SessionRuntime,
    stream: StreamId,
) -> Result<crate::store::ReadBatch, ServerError> {
    let mut cursor = 0;
    let mut all = crate::store::ReadBatch::default();
    loop {
        let batch = runtime
            .events()
            .read_after(runtime.owner(), stream, cursor, 1024)
            .await?;
        if let Some(last) = batch.events.last() {
            cursor = last.id.seq;
        }
        all.events.extend(batch.events);
        if batch.complete {
            all.complete = true;
            return Ok(all);
        }
        runtime.events().wait_for_more(stream, cursor).await?;
    }
}

/// Runs the request and stores its final response (completed as this era requires) and the
/// stream's end.
async fn drive(
    state: Arc<ServerState>,
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    request: Request,
    slot: super::session::InFlightSlot,
    modern: Arc<ModernRequest>,
    identity: Value,
) {
    let method = request.method.clone();
    let response =
        dispatch::run_handler(&state, &runtime, request, slot, stream, Some(modern)).await;
    let Some(mut response) = finish::settle(&runtime, stream, response).await else {
        state
            .metrics
            .modern_request(&method, ModernOutcome::Disconnected);
        finish::complete(&runtime, stream).await;
        return;
    };
    let outcome = match &mut response {
        RpcResponse::Result(result) => {
            complete_result(&method, &mut result.result, &identity);
            if result.result.get("resultType").and_then(Value::as_str)
                == Some(RESULT_INPUT_REQUIRED)
            {
                ModernOutcome::InputRequired
            } else {
                ModernOutcome::Result
            }
        }
        RpcResponse::Error(_) => ModernOutcome::Error,
    };
    state.metrics.modern_request(&method, outcome);
    // Completed even when the response was lost: the reader then sees the stream end
    // unanswered rather than wait for good.
    let _ = finish::store_response(&runtime, stream, &response).await;
    finish::complete(&runtime, stream).await;
}

/// `tasks/stream`: a refusal (unknown task, bad cursor, `events_gone`) as JSON, or the task's
/// events as `notifications/tasks/event`, read from the event log on whichever node stored
/// them, then `{}`, in an event stream written as the body is pulled (keep-alive comments
/// while the task is quiet). Closing it ends the reading, not the task; the server's shutdown
/// ends it without an answer, and the client asks again with `after`.
async fn task_stream(
    state: &Arc<ServerState>,
    principal: Arc<str>,
    request: Request,
    envelope: &Envelope,
    info: &ServerInfo,
) -> Result<Response, ServerError> {
    let events = match tasks::open_stream(state, &principal, &request, envelope).await? {
        Ok(events) => events,
        Err(error) => return Ok(answered(state, &request, Err(error), info)),
    };
    state
        .metrics
        .modern_request(tasks::STREAM_METHOD, ModernOutcome::Result);
    let reader =
        tasks::TaskEventReader::new(Arc::clone(state), events, request.id, server_identity(info));
    let (keepalive, shutdown) = (state.config.keepalive, state.shutdown.clone());
    // Like every modern event stream, it opens with the server's `retry`: a reader that is
    // cut comes back after it, with `after` (docs/CONTRACTS.md#task-streams).
    let retry_ms = u64::try_from(state.config.retry.as_millis()).unwrap_or(u64::MAX);
    let advice = tether_sse::EventFrame::new()
        .retry(retry_ms)
        .encode()
        .expect("a retry field has no line breaks");
    let advice = futures_util::stream::once(std::future::ready(Ok::<_, std::convert::Infallible>(
        advice,
    )));
    let events = futures_util::stream::unfold(reader, move |mut reader| {
        let shutdown = shutdown.clone();
        async move {
            let chunk = tokio::select! {
                messages = reader.next() => {
                    let mut chunk = Vec::new();
                    for message in messages? {
                        let data = String::from_utf8(message).expect("JSON is UTF-8");
                        let frame = tether_sse::EventFrame::with_data(&data)
                            .event("message")
                            .encode()
                            .expect("compact JSON is one SSE data line");
                        chunk.extend_from_slice(&frame);
                    }
                    bytes::Bytes::from(chunk)
                }
                () = tokio::time::sleep(keepalive) => {
                    tether_sse::encode_comment("").expect("an empty comment")
                }
                () = shutdown.cancelled() => return None,
            };
            Some((Ok::<_, std::convert::Infallible>(chunk), reader))
        }
    });
    let body = futures_util::StreamExt::chain(advice, events);
    Ok(event_stream_response(axum::body::Body::from_stream(body)))
}

/// `subscriptions/listen`: the acknowledgement, then the notifications the filter admits,
/// until the client leaves or the server shuts down (then the completion result).
async fn listen(
    state: &Arc<ServerState>,
    principal: Arc<str>,
    request: Request,
    envelope: &Envelope,
    info: &ServerInfo,
) -> Result<Response, ServerError> {
    let filter = Filter::parse(
        request.params.as_ref(),
        envelope.declares_extension(TASKS_EXTENSION),
    )
    .map_err(|error| {
        refused(
            state,
            LISTEN,
            Some(request.id.clone()),
            StatusCode::BAD_REQUEST,
            error.error_object(),
        )
    })?;
    state.metrics.modern_request(LISTEN, ModernOutcome::Result);
    let mut honoured = filter.honoured(&info.capabilities);
    // Only the principal's own tasks are accepted; another's reads as no task at all.
    let mut owned = Vec::with_capacity(honoured.task_ids.len());
    for id in &honoured.task_ids {
        if state.tasks.get(id, &principal).await?.is_some() {
            owned.push(*id);
        }
    }
    honoured.task_ids = owned;
    let (runtime, stream) =
        ephemeral(state, Arc::clone(&principal), &request.id, Keep::Transient).await?;
    let guard = RequestGuard {
        runtime: Arc::clone(&runtime),
    };
    let (snapshots, snapshots_rx) = tokio::sync::mpsc::channel(16);
    for id in &honoured.task_ids {
        let watcher = tasks::snapshots_for_listener(
            Arc::clone(&state.tasks),
            *id,
            Arc::clone(&principal),
            snapshots.clone(),
        );
        let closed = runtime.closed().clone();
        // Ends with the task, or with the listen stream.
        tokio::spawn(async move {
            tokio::select! {
                () = watcher => {}
                () = closed.cancelled() => {}
            }
        });
    }
    drop(snapshots);
    let done = CancellationToken::new();
    tokio::spawn(subscriptions::drive(
        Arc::clone(&state.subscriptions),
        Arc::clone(&runtime),
        stream,
        request.id,
        honoured,
        server_identity(info),
        snapshots_rx,
        state.shutdown.clone(),
        done.clone(),
    ));
    // The writer ends when the stream completes (the completion result on shutdown), or
    // when the driver stopped storing; not on the server's shutdown signal, which would
    // close it before the completion result is stored.
    Ok(state
        .writer_until(&runtime, stream, Start::Fresh { cursor: 0 }, done)
        .with_guard(guard)
        .into_response(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ServerInfo {
        ServerInfo {
            name: "t".into(),
            version: "1".into(),
            capabilities: json!({"tools": {"listChanged": true}, "tasks": {}}),
            instructions: Some("be kind".into()),
        }
    }

    #[test]
    fn discover_names_every_version_and_identifies_in_meta() {
        let result = discover_result(&info(), true, Eras::Both);
        assert_eq!(result["resultType"], "complete");
        assert_eq!(
            result["supportedVersions"],
            json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
        );
        assert_eq!(
            result["capabilities"],
            json!({"tools": {"listChanged": true},
                   "extensions": {TASKS_EXTENSION: {"eventStreams": {}}}}),
            "the 2025 experimental tasks capability out, the tasks extension in"
        );
        assert_eq!(result["_meta"][META_SERVER_INFO]["name"], "t");
        assert_eq!(result["instructions"], "be kind");
        assert!(result.get("serverInfo").is_none());
        assert_eq!(result["ttlMs"], 0);
        assert_eq!(result["cacheScope"], "public");
        let modern_only = discover_result(&info(), true, Eras::Modern);
        assert_eq!(modern_only["supportedVersions"], json!(["2026-07-28"]));
        let without = discover_result(&info(), false, Eras::Both);
        assert_eq!(
            without["capabilities"],
            json!({"tools": {"listChanged": true}}),
            "a handler that runs no call as a task offers no tasks extension"
        );
    }

    #[test]
    fn errors_answered_first_get_the_status_their_code_calls_for() {
        let status = |code| error_status(&ErrorObject::new(code, "x"));
        assert_eq!(status(METHOD_NOT_FOUND), StatusCode::NOT_FOUND);
        assert_eq!(
            status(MISSING_REQUIRED_CLIENT_CAPABILITY),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status(-32602), StatusCode::OK);
        assert_eq!(
            removed_method("initialize", Eras::Both).data.unwrap()["supported"][3],
            "2026-07-28"
        );
    }
}
