//! What happens to the messages of an accepted POST.
//!
//! - Responses (answers to server→client requests) go to the request awaiting them.
//! - Notifications: `notifications/initialized` is acknowledged, `notifications/cancelled`
//!   cancels the named request (unknown ids ignored, T99), the rest reach
//!   [`Handler::handle_notification`](super::handler::Handler::handle_notification).
//! - Requests: `ping` is answered by the transport (`{}`, T98); the others run the handler in
//!   a task of their own — detached from the HTTP request, so a client disconnect does not
//!   cancel them (T15) — with a [`RequestContext`] whose messages go to the POST's stream.
//!
//! In SSE mode the POST gets a new Request stream in the event store; a driver task appends
//! each request's final response to it and completes it when every request of the POST has
//! finished or was cancelled, which ends the writer loop (T9). A cancelled request gets no
//! response (T16). In JSON mode the responses become the body, and related messages go to
//! the standalone stream. A POST handed over by another node (see [`super::handoff`]) always
//! gets a Request stream, since the other node serves its answer from the store; in JSON
//! mode that stream holds only the responses, which the other node collects into the body.
//!
//! A single request sent again with the same id and content while its Request stream is
//! recent is not run again: the POST is answered with that stream from its start (see
//! [`reattach`]). A client that lost a POST before any event id reached it has nothing to
//! resume with, and this is how it gets its answer without running the request twice.
//!
//! This module does not validate requests or write to connections: it returns an [`Answer`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_proto::headers::ResponseKind;
use tether_proto::ids::StreamId;
use tether_proto::jsonrpc::{
    CANCELLED_NOTIFICATION, ErrorObject, INTERNAL_ERROR, INVALID_REQUEST, Message, Notification,
    Request, RequestId, Response as RpcResponse,
};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use super::context::{ModernRequest, RequestContext, SessionContext};
use super::error::ServerError;
use super::finish;
use super::mrtr::Interrupt;
use super::session::{InFlightSlot, SessionRuntime};
use super::state::ServerState;
use crate::store::{StoreError, StreamKind};
use crate::telemetry::Operation;
use tether_proto::version::ProtocolVersion;

/// A cancelled handler gets this long to notice (`RequestContext::cancelled`) and return
/// before its task is aborted: enough for cleanup, short enough that a handler ignoring
/// cancellation does not hold resources for long. Its outcome is discarded either way.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// `ping`, answered by the transport itself.
const PING: &str = "ping";
/// `notifications/initialized`, acknowledged by the transport.
const INITIALIZED_NOTIFICATION: &str = "notifications/initialized";

/// Who answers a request.
enum Slot {
    /// The transport (`ping`).
    Transport,
    /// The handler, holding an in-flight slot.
    Handler(InFlightSlot),
    /// Nobody: its id is already in flight in this session.
    Duplicate,
}

struct Job {
    request: Request,
    slot: Slot,
}

/// How an accepted POST is answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// 202 with an empty body: no requests, or every request was cancelled.
    Accepted,
    /// The requests are answered on this Request stream.
    Stream(StreamId),
    /// The JSON body (one response, or an array for a batch).
    Json(Vec<u8>),
}

/// Who receives an [`Answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recipient {
    /// The client, on this node's connection.
    Client,
    /// Another node, which received the POST and serves the answer from the store.
    Node,
}

/// Handles the messages of one accepted POST (the session is known and valid); `body` is the
/// POST's body as received, which recognizes a request sent again.
pub(crate) async fn post(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    body: &[u8],
    messages: Vec<Message>,
    accept: Option<&str>,
    is_batch: bool,
    recipient: Recipient,
) -> Result<Answer, ServerError> {
    let mut requests = Vec::new();
    let mut others = Vec::new();
    for message in messages {
        match message {
            Message::Request(request) => requests.push(request),
            other => others.push(other),
        }
    }
    // Every refusal is decided before any side effect, so a 406 or 429 leaves the session
    // exactly as it was.
    let kind = if requests.is_empty() {
        None
    } else {
        Some(state.answer_kind(accept)?)
    };
    // The content of the POST's only request: how a request sent again is recognized.
    let single = match requests.as_slice() {
        [_] => Some(fingerprint(body)),
        _ => None,
    };
    if kind == Some(ResponseKind::EventStream)
        && others.is_empty()
        && let ([request], Some(fingerprint)) = (requests.as_slice(), single)
        && let Some(stream) = runtime.stream_of_request(&request.id, fingerprint)
    {
        return reattach(state, runtime, request, stream).await;
    }
    let handler_ids: Vec<RequestId> = requests
        .iter()
        .filter(|request| request.method != PING)
        .map(|request| request.id.clone())
        .collect();
    let mut slots = runtime
        .reserve(
            &handler_ids,
            state.config.max_concurrent_requests_per_session,
        )
        .ok_or(ServerError::TooManyRequests)?
        .into_iter();

    for message in others {
        handle_other(state, runtime, message).await;
    }
    let Some(kind) = kind else {
        // Only notifications and responses: 202, empty body (T2, T3, T4).
        return Ok(Answer::Accepted);
    };
    let jobs: Vec<Job> = requests
        .into_iter()
        .map(|request| {
            let slot = if request.method == PING {
                Slot::Transport
            } else {
                match slots.next() {
                    Some(Ok(slot)) => Slot::Handler(slot),
                    _ => Slot::Duplicate,
                }
            };
            Job { request, slot }
        })
        .collect();
    match (kind, recipient) {
        (ResponseKind::EventStream, _) => answer_sse(state, runtime, jobs, None, single).await,
        (ResponseKind::Json, Recipient::Node) => {
            answer_sse(state, runtime, jobs, Some(runtime.standalone()), single).await
        }
        (ResponseKind::Json, Recipient::Client) => {
            answer_json(state, runtime, jobs, is_batch).await
        }
    }
}

/// A response or notification from the client.
async fn handle_other(state: &Arc<ServerState>, runtime: &Arc<SessionRuntime>, message: Message) {
    match message {
        Message::Response(response) => {
            if !runtime.deliver_response(response) {
                tracing::debug!("response to no pending server request ignored");
            }
        }
        Message::Notification(notification) => {
            handle_notification(state, runtime, notification).await;
        }
        Message::Request(_) => unreachable!("requests are split off before"),
    }
}

async fn handle_notification(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    notification: Notification,
) {
    match notification.method.as_str() {
        INITIALIZED_NOTIFICATION => {}
        CANCELLED_NOTIFICATION => {
            if let Some(id) = notification.cancelled_request_id() {
                let cancelled = runtime.cancel_request(&id);
                tracing::debug!(request = %id, cancelled, "notifications/cancelled");
            }
        }
        _ => {
            let session = SessionContext::new(Arc::clone(runtime));
            // Awaited, so that notifications of one client are handled in the order sent;
            // abandoned if the session ends meanwhile.
            tokio::select! {
                () = state.handler.handle_notification(notification, session) => {}
                () = runtime.closed().cancelled() => {}
            }
        }
    }
}

/// Stream answer: a new Request stream and a driver task filling it. Related messages go to
/// the stream too, unless `related` names another stream. `single` is the fingerprint of the
/// POST's only request, remembered with the stream so that it can be sent again.
async fn answer_sse(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    jobs: Vec<Job>,
    related: Option<StreamId>,
    single: Option<u64>,
) -> Result<Answer, ServerError> {
    let requests: Vec<RequestId> = jobs.iter().map(|job| job.request.id.clone()).collect();
    let stream = state
        .events
        .create_stream(
            runtime.owner(),
            StreamKind::Request,
            state.config.retry,
            &requests,
        )
        .await?;
    if runtime.is_closed() {
        // DELETE or expiry raced this request: free what was just created for the dead
        // session and answer as if it were already gone.
        let _ = state.events.remove_session(&runtime.record().id).await;
        return Err(ServerError::SessionNotFound);
    }
    if let ([job], Some(fingerprint)) = (jobs.as_slice(), single)
        && matches!(job.slot, Slot::Handler(_))
    {
        runtime.remember_request(&job.request.id, fingerprint, stream);
    }
    let span = tracing::info_span!("post", session = %runtime.record().id, stream = %stream);
    let related = related.unwrap_or(stream);
    tokio::spawn(
        drive_stream(
            Arc::clone(state),
            Arc::clone(runtime),
            stream,
            related,
            jobs,
        )
        .instrument(span),
    );
    Ok(Answer::Stream(stream))
}

/// The content of a POST holding one request, as [`SessionRuntime::remember_request`]
/// compares it: a request sent again must be the same request, not a new one reusing an id.
/// The body as received (a client sending a request again sends the same bytes), so nothing
/// is serialized a second time.
fn fingerprint(body: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::hash::DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

/// `request` again, answered by `stream` (its first POST's): the stream from its start,
/// everything it holds replayed and then the rest live, as a fresh POST stream would be. If
/// the store no longer holds the stream (it completed and its retention ran out), the request
/// gets an error response on a stream of its own saying so (-32600, `data.reason`
/// `"answer_expired"`) rather than running a second time.
async fn reattach(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    request: &Request,
    stream: StreamId,
) -> Result<Answer, ServerError> {
    tracing::debug!(request = %request.id, stream = %stream, "request sent again: re-attached to its stream");
    match state
        .events
        .read_from_start(runtime.owner(), stream, 1)
        .await
    {
        Ok(_) => Ok(Answer::Stream(stream)),
        Err(StoreError::Expired | StoreError::UnknownStream) => {
            let answer = state
                .events
                .create_stream(
                    runtime.owner(),
                    StreamKind::Request,
                    state.config.retry,
                    std::slice::from_ref(&request.id),
                )
                .await?;
            let error = ErrorObject::new(
                INVALID_REQUEST,
                "request already answered; its answer is no longer retained",
            )
            .with_data(json!({"reason": "answer_expired"}));
            let response = RpcResponse::error(Some(request.id.clone()), error);
            runtime.append_bytes(answer, &response.to_vec()).await?;
            state.events.complete(answer).await?;
            Ok(Answer::Stream(answer))
        }
        Err(error) => Err(error.into()),
    }
}

/// Runs a POST's requests, with their related messages going to `related`, appends each
/// final response to `stream` as it is ready, then completes the stream.
async fn drive_stream(
    state: Arc<ServerState>,
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    related: StreamId,
    jobs: Vec<Job>,
) {
    let mut running = JoinSet::new();
    for job in jobs {
        running.spawn(
            run(Arc::clone(&state), Arc::clone(&runtime), job, related)
                .instrument(tracing::Span::current()),
        );
    }
    while let Some(done) = running.join_next().await {
        let Ok(response) = done else { continue };
        let Some(response) = finish::settle(&runtime, related, response).await else {
            continue;
        };
        let _ = finish::store_response(&runtime, stream, &response).await;
    }
    finish::complete(&runtime, stream).await;
}

/// JSON answer: the responses as the body (an array for a batch); related messages went to
/// the standalone stream.
async fn answer_json(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    jobs: Vec<Job>,
    is_batch: bool,
) -> Result<Answer, ServerError> {
    let span = tracing::info_span!("post", session = %runtime.record().id);
    let standalone = runtime.standalone();
    // Spawned, so that a client that disconnects does not cancel the handlers (T15).
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            tokio::spawn(
                run(Arc::clone(state), Arc::clone(runtime), job, standalone)
                    .instrument(span.clone()),
            )
        })
        .collect();
    let collect = async {
        let mut responses = Vec::with_capacity(handles.len());
        for handle in handles {
            if let Ok(Some(response)) = handle.await {
                responses.push(runtime.fit(response));
            }
        }
        responses
    };
    let responses = tokio::select! {
        responses = collect => responses,
        () = state.shutdown.cancelled() => return Err(ServerError::ShuttingDown),
    };
    Ok(json_body(&responses, is_batch).map_or(Answer::Accepted, Answer::Json))
}

/// The JSON body answering `responses`: an array for a batch, else the one response; `None`
/// when there is none (every request was cancelled: nothing to answer, as for a batch of
/// notifications).
pub(crate) fn json_body(responses: &[RpcResponse], is_batch: bool) -> Option<Vec<u8>> {
    match (responses, is_batch) {
        ([], _) => None,
        (_, true) => Some(serde_json::to_vec(responses).expect("responses serialize")),
        ([response, ..], false) => Some(response.to_vec()),
    }
}

/// Runs one request to its final response; `None` when it was cancelled (no response is
/// sent, MCP cancellation). Related messages go to `related`.
async fn run(
    state: Arc<ServerState>,
    runtime: Arc<SessionRuntime>,
    job: Job,
    related: StreamId,
) -> Option<RpcResponse> {
    let Job { request, slot } = job;
    let id = request.id.clone();
    match slot {
        Slot::Transport => Some(RpcResponse::success(id, json!({}))),
        Slot::Duplicate => Some(RpcResponse::error(
            Some(id),
            ErrorObject::new(
                INVALID_REQUEST,
                "request id already in flight in this session",
            ),
        )),
        Slot::Handler(slot) => run_handler(&state, &runtime, request, slot, related, None).await,
    }
}

/// Runs the handler for `request` to its final response; `None` when it was cancelled (no
/// response is sent, MCP cancellation). Related messages go to `related`. A 2026-07-28
/// request (`modern`) may also end early for its questions (SEP-2322,
/// [`super::mrtr`]): its answer is then the `input_required` result.
///
/// The run is the request's server span (`crate::telemetry`), continuing the caller's trace,
/// and is measured on `mcp.server.operation.duration`.
pub(crate) async fn run_handler(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    request: Request,
    slot: InFlightSlot,
    related: StreamId,
    modern: Option<Arc<ModernRequest>>,
) -> Option<RpcResponse> {
    let (session, version) = match &modern {
        Some(_) => (None, ProtocolVersion::MODERN),
        None => (Some(runtime.record().id.as_str()), runtime.version()),
    };
    let operation = Operation::server(&request, session, version.as_str());
    let response = run_to_response(state, runtime, request, slot, related, modern)
        .instrument(operation.span().clone())
        .await;
    operation.answered(response.as_ref());
    response
}

async fn run_to_response(
    state: &Arc<ServerState>,
    runtime: &Arc<SessionRuntime>,
    request: Request,
    slot: InFlightSlot,
    related: StreamId,
    modern: Option<Arc<ModernRequest>>,
) -> Option<RpcResponse> {
    let id = request.id.clone();
    let span = tracing::Span::current();
    let token = slot.token().clone();
    let context = RequestContext::new(
        Arc::clone(runtime),
        &request,
        related,
        token.clone(),
        modern.clone(),
        Arc::clone(&state.subscriptions),
    );
    let handler = Arc::clone(&state.handler);
    let mut task = tokio::spawn(
        async move { handler.handle_request(request, context).await }.instrument(span),
    );
    let interrupted = async {
        match &modern {
            Some(modern) => modern.rounds.interrupted().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        // Cancellation wins a tie: a cancelled request gets no response.
        biased;
        () = token.cancelled() => None,
        () = interrupted => Some(Err(())),
        joined = &mut task => Some(Ok(joined)),
    };
    if !matches!(outcome, Some(Ok(_))) {
        // The handler's outcome no longer matters: stop it (an interrupted one waits in a
        // question that this run will never see answered).
        token.cancel();
    }
    drop(slot);
    let finish_in_background = |mut task: tokio::task::JoinHandle<_>, id: RequestId| {
        tokio::spawn(async move {
            if tokio::time::timeout(CANCEL_GRACE, &mut task).await.is_err() {
                tracing::debug!(request = %id, "cancelled handler aborted");
                task.abort();
            }
        });
    };
    match outcome {
        None => {
            tracing::debug!(request = %id, "request cancelled: no response");
            finish_in_background(task, id);
            None
        }
        Some(Err(())) => {
            finish_in_background(task, id.clone());
            let modern = modern.expect("only a modern request is interrupted");
            Some(match modern.rounds.interrupt_outcome() {
                Interrupt::InputRequired { questions, answers } => RpcResponse::success(
                    id,
                    state.sealer.input_required(
                        questions,
                        answers,
                        &runtime.owner().principal,
                        &modern.digest,
                    ),
                ),
                Interrupt::InvalidAnswer(key) => RpcResponse::error(
                    Some(id),
                    ErrorObject::invalid_params(format!(
                        "inputResponses[{key}] does not answer the question asked"
                    )),
                ),
            })
        }
        Some(Ok(Ok(result))) => Some(match result {
            Ok(value) => RpcResponse::success(id, value),
            Err(error) => RpcResponse::error(Some(id), error),
        }),
        Some(Ok(Err(error))) => {
            tracing::error!(request = %id, error = %crate::error_chain(&error), "handler failed");
            Some(RpcResponse::error(
                Some(id),
                ErrorObject::new(INTERNAL_ERROR, "internal error"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::ServerConfig;
    use crate::server::handler::{Handler, ServerInfo};
    use crate::store::{EventStore, MemoryEventStore, MemorySessionStore, SessionStore};
    use http::HeaderValue;
    use serde_json::Value;
    use tether_proto::jsonrpc::{Batching, parse_body};
    use tether_proto::version::ProtocolVersion;

    const SSE: Option<&str> = Some("application/json, text/event-stream");

    /// The demo's `count` as these tests need it: `n` progress notifications `interval_ms`
    /// apart, then "counted n"; a cancelled call stops at its next step. Written here so that
    /// the server's tests do not import the demo, which is built on the server.
    struct Counter;

    #[async_trait::async_trait]
    impl Handler for Counter {
        fn server_info(&self) -> ServerInfo {
            ServerInfo {
                name: "counter".to_owned(),
                version: "0".to_owned(),
                capabilities: json!({"tools": {}}),
                instructions: None,
            }
        }

        async fn handle_request(
            &self,
            request: Request,
            context: RequestContext,
        ) -> Result<Value, ErrorObject> {
            let arguments = &request.params.as_ref().expect("params")["arguments"];
            let n = arguments["n"].as_u64().expect("n");
            let interval = Duration::from_millis(arguments["interval_ms"].as_u64().unwrap_or(0));
            for i in 1..=n {
                context
                    .progress(i as f64, Some(n as f64), None)
                    .await
                    .map_err(|_| ErrorObject::cancelled())?;
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = context.cancelled() => return Err(ErrorObject::cancelled()),
                }
            }
            Ok(json!({"content": [{"type": "text", "text": format!("counted {n}")}]}))
        }
    }

    async fn session(config: ServerConfig) -> (Arc<ServerState>, Arc<SessionRuntime>) {
        let events: Arc<dyn EventStore> = Arc::new(MemoryEventStore::default());
        let sessions: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new());
        let state = Arc::new(ServerState::new(
            config,
            Arc::new(Counter),
            events,
            sessions,
            Arc::new(crate::store::MemoryTaskStore::new()),
            HeaderValue::from_static("test"),
            None,
            None,
            &[0; 32],
        ));
        let runtime = state
            .create_session(ProtocolVersion::V2025_11_25, Arc::from("alice"), None)
            .await
            .expect("a session");
        (state, runtime)
    }

    async fn post(
        state: &Arc<ServerState>,
        runtime: &Arc<SessionRuntime>,
        body: &str,
        accept: Option<&str>,
    ) -> Result<Answer, ServerError> {
        let messages = parse_body(body.as_bytes(), Batching::Forbidden)
            .expect("valid JSON-RPC")
            .into_messages();
        super::post(
            state,
            runtime,
            body.as_bytes(),
            messages,
            accept,
            false,
            Recipient::Client,
        )
        .await
    }

    /// Every message of `stream` (its priming event left out), read until it completes.
    async fn messages(runtime: &SessionRuntime, stream: StreamId) -> Vec<Value> {
        let mut cursor = 0;
        let mut out = Vec::new();
        loop {
            let batch = runtime
                .events()
                .read_after(runtime.owner(), stream, cursor, 64)
                .await
                .expect("readable");
            for event in &batch.events {
                cursor = event.id.seq;
                out.push(serde_json::from_slice(event.message()).expect("JSON"));
            }
            if batch.complete {
                return out;
            }
            if batch.events.is_empty() {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    runtime.events().wait_for_more(stream, cursor),
                )
                .await
                .expect("the stream goes on")
                .expect("waitable");
            }
        }
    }

    fn count(id: i64, n: u64, interval_ms: u64) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "count", "arguments": {"n": n, "interval_ms": interval_ms},
            "_meta": {"progressToken": id}}})
        .to_string()
    }

    #[tokio::test]
    async fn notifications_alone_are_accepted_without_a_stream() {
        let (state, runtime) = session(ServerConfig::default()).await;
        let body = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let answer = post(&state, &runtime, body, SSE).await.expect("accepted");
        assert!(matches!(answer, Answer::Accepted));
    }

    #[tokio::test]
    async fn a_request_gets_a_stream_with_its_progress_then_its_response() {
        let (state, runtime) = session(ServerConfig::default()).await;
        let Answer::Stream(stream) = post(&state, &runtime, &count(1, 3, 0), SSE).await.unwrap()
        else {
            panic!("an SSE answer");
        };
        let messages = messages(&runtime, stream).await;
        let progress: Vec<_> = messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| m["params"]["progress"].as_u64().unwrap())
            .collect();
        assert_eq!(progress, [1, 2, 3]);
        let last = messages.last().unwrap();
        assert_eq!(last["id"], 1);
        assert_eq!(last["result"]["content"][0]["text"], "counted 3");
    }

    #[tokio::test]
    async fn the_same_request_sent_again_is_answered_by_its_first_stream_not_run_twice() {
        let (state, runtime) = session(ServerConfig::default()).await;
        let body = count(7, 3, 20);
        let Answer::Stream(first) = post(&state, &runtime, &body, SSE).await.unwrap() else {
            panic!("an SSE answer");
        };
        let Answer::Stream(again) = post(&state, &runtime, &body, SSE).await.unwrap() else {
            panic!("an SSE answer");
        };
        assert_eq!(
            again, first,
            "reattached to the stream already answering it"
        );
        // Another request reusing the id while it is in flight is refused on its own stream.
        let other = count(7, 5, 0);
        let Answer::Stream(refused) = post(&state, &runtime, &other, SSE).await.unwrap() else {
            panic!("an SSE answer");
        };
        assert_ne!(refused, first);
        let answer = messages(&runtime, refused).await;
        assert_eq!(answer.len(), 1, "{answer:?}");
        assert_eq!(answer[0]["id"], 7);
        assert_eq!(answer[0]["error"]["code"], INVALID_REQUEST);
        let counted = messages(&runtime, first).await;
        assert_eq!(
            counted.last().unwrap()["result"]["content"][0]["text"],
            "counted 3"
        );
    }

    #[tokio::test]
    async fn json_mode_answers_in_the_body_and_ping_is_the_transports() {
        let config = ServerConfig {
            json_response: true,
            ..ServerConfig::default()
        };
        let (state, runtime) = session(config).await;
        let ping = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
        let Answer::Json(body) = post(&state, &runtime, ping, SSE).await.unwrap() else {
            panic!("a JSON answer");
        };
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
    }

    #[tokio::test]
    async fn a_session_at_its_request_limit_refuses_more_before_any_side_effect() {
        let config = ServerConfig {
            max_concurrent_requests_per_session: 1,
            ..ServerConfig::default()
        };
        let (state, runtime) = session(config).await;
        let Answer::Stream(running) = post(&state, &runtime, &count(1, 2, 200), SSE)
            .await
            .unwrap()
        else {
            panic!("an SSE answer");
        };
        let refused = post(&state, &runtime, &count(2, 1, 0), SSE).await;
        assert!(matches!(refused, Err(ServerError::TooManyRequests)));
        // A 406 is decided before any side effect too.
        let unacceptable = post(&state, &runtime, &count(3, 1, 0), Some("text/plain")).await;
        assert!(matches!(
            unacceptable,
            Err(ServerError::NotAcceptable { .. })
        ));
        let done = messages(&runtime, running).await;
        assert_eq!(
            done.last().unwrap()["result"]["content"][0]["text"],
            "counted 2"
        );
        assert!(matches!(
            post(&state, &runtime, &count(4, 1, 0), SSE).await,
            Ok(Answer::Stream(_))
        ));
    }

    #[tokio::test]
    async fn cancelling_a_request_ends_its_stream_without_a_response() {
        let (state, runtime) = session(ServerConfig::default()).await;
        let Answer::Stream(stream) = post(&state, &runtime, &count(9, 1000, 10), SSE)
            .await
            .unwrap()
        else {
            panic!("an SSE answer");
        };
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 9}})
        .to_string();
        assert!(matches!(
            post(&state, &runtime, &cancel, SSE).await,
            Ok(Answer::Accepted)
        ));
        let messages = messages(&runtime, stream).await;
        assert!(
            messages.iter().all(|m| m.get("id").is_none()),
            "a cancelled request gets no response (T16): {:?}",
            messages.last()
        );
        assert!(messages.len() < 1000);
    }
}
