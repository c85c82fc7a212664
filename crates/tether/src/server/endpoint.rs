//! The HTTP endpoint: every axum handler of the server — POST, GET and DELETE on the MCP
//! path, `GET /healthz`, `GET /metrics` — and the layer that counts answers.
//!
//! A POST of the 2026-07-28 era (its body carries the `_meta` envelope, or its
//! `MCP-Protocol-Version` is modern) goes to [`super::modern`] once the checks every POST shares
//! (host, origin, authentication, content type, body size) have passed; a GET or DELETE of that
//! era is 405. For the legacy era, this module owns request validation, in a fixed order so
//! that one request always gets the same answer: `Host`/`Origin` (403) first on every method, then authentication (401, see
//! [`super::auth`]); then for POST `Content-Type`
//! (415), body size (413), `MCP-Protocol-Version` (400), the session (400/404), the body
//! (400, parsed with the *session's* batching rule) and `Accept` (406, only when the answer
//! has a body); for GET 405 when GET streams are off, `Accept` (406), the version, the session
//! and `Last-Event-ID` (400); for DELETE the version and the session. A POST without
//! `Mcp-Session-Id` is parsed first, since only an unbatched `initialize` may come without
//! one. It decides when sessions begin and end: `initialize` has [`super::state`] create the
//! session (its record and standalone stream), DELETE has it terminate the session; idle
//! expiry is `background`'s. Every refusal is a [`ServerError`]. What
//! happens to the messages of an accepted POST is [`super::dispatch`]'s; how streams reach
//! the wire is [`super::writer`]'s; the sessions themselves are [`super::state`]'s.
//!
//! Decisions where the spec leaves room (recorded here, and in docs/ARCHITECTURE.md by the
//! team):
//!
//! - `initialize` never needs `Mcp-Session-Id` (T39); sent without one, its
//!   `MCP-Protocol-Version` header is not checked (negotiation uses the body,
//!   docs/PROTOCOL.md#open-9). An `initialize` sent *with* a live session's id starts a new
//!   session; a stale id gets the usual 404, after which the client re-initializes without it
//!   (S-SES-4).
//! - `Accept` is checked only when the answer has a body, leniently (docs/PROTOCOL.md#open-10): the
//!   configured kind (SSE, or JSON with `json_response`) if acceptable, else the other kind if
//!   that is, else 406.
//! - Error bodies carry `"id": null` (a transport refusal answers no particular request).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;
use tether_proto::headers::{
    self, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, ResponseKind, is_json_content_type,
    parse_last_event_id, server_accepts,
};
use tether_proto::ids::{EventId, SessionId};
use tether_proto::jsonrpc::{
    Batching, Body as RpcBody, Message, Request as RpcRequest, Response as RpcResponse, parse_body,
};
use tether_proto::modern::{Era, MCP_METHOD, MCP_NAME, RequestHeaders, era_of};
use tether_proto::version::{Eras, ProtocolVersion, check_header, negotiate};

use super::context::SessionContext;
use super::dispatch::{self, Recipient};
use super::error::{ResumeRefusal, ServerError};
use super::handoff;
use super::metrics::{OPENMETRICS, ResponseLabels, ResumeOutcome};
use super::modern::{self, ModernPost};
use super::origin::{host_allowed, origin_allowed};
use super::reply::{self, json_response};
use super::session::SessionRuntime;
use super::state::ServerState;
use super::writer::{FIRST_RESUME_BATCH, Start};
use crate::store::relay::SessionHome;
use crate::store::{ReadBatch, SessionRecord, SessionUsage, StoreError, StreamKind};
use crate::telemetry;

// ---------------------------------------------------------------------------------------------
// Checks shared by the methods

/// DNS-rebinding protection, first on every method (see [`super::origin`]).
fn check_host_origin(state: &ServerState, parts: &Parts) -> Result<(), ServerError> {
    let host = match parts.headers.get(header::HOST) {
        Some(value) => value.to_str().ok(),
        // HTTP/2 carries the host in `:authority`, which hyper puts in the URI.
        None => parts.uri.authority().map(http::uri::Authority::as_str),
    };
    if !host_allowed(host, &state.config.allowed_hosts) {
        return Err(ServerError::ForbiddenHost);
    }
    let origin = match parts.headers.get(header::ORIGIN) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| ServerError::ForbiddenOrigin)?),
    };
    if !origin_allowed(origin, &state.config.allowed_origins) {
        return Err(ServerError::ForbiddenOrigin);
    }
    Ok(())
}

/// The session named by `Mcp-Session-Id`, if it exists and is `principal`'s.
async fn session_record(
    state: &ServerState,
    headers: &HeaderMap,
    principal: &str,
) -> Result<SessionRecord, ServerError> {
    let value = headers
        .get(MCP_SESSION_ID)
        .ok_or(ServerError::MissingSessionId)?;
    let id = value
        .to_str()
        .ok()
        .and_then(|v| SessionId::parse(v).ok())
        .ok_or(ServerError::MalformedSessionId)?;
    state.record_of(&id, principal).await
}

/// The runtime for a request that needs no handler (a GET): the local session when it
/// runs here, else state for serving its streams from the shared store, also when its
/// node is gone (its streams stay readable).
async fn session_for_reading(
    state: &ServerState,
    headers: &HeaderMap,
    principal: &str,
) -> Result<Arc<SessionRuntime>, ServerError> {
    let record = session_record(state, headers, principal).await?;
    match state.home(&record).await? {
        SessionHome::Here => state.local_session(record).await,
        SessionHome::Node(_) | SessionHome::Gone(_) => state.runtime(record).await,
    }
}

// ---------------------------------------------------------------------------------------------
// Header helpers

/// A header's first value as text; `None` when absent or not visible ASCII.
fn header_str(headers: &HeaderMap, name: impl http::header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `Accept`, with several field lines joined by ", " (RFC 9110 §5.3), as
/// [`server_accepts`] expects.
fn accept_value(headers: &HeaderMap) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// `MCP-Protocol-Version` checked against the legacy versions `eras` serves
/// (docs/CONTRACTS.md#negotiated-version): absent or supported is fine (the session's
/// negotiated version stays in force either way).
fn check_protocol_version(
    headers: &HeaderMap,
    eras: Eras,
) -> Result<Option<ProtocolVersion>, ServerError> {
    let unsupported = || ServerError::UnsupportedProtocolVersion(eras);
    let value = match headers.get(MCP_PROTOCOL_VERSION) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| unsupported())?),
    };
    check_header(value).map_err(|_| unsupported())
}

/// Reads the body up to `limit` bytes within `timeout`: 413 as soon as it is known to be
/// larger (a declared `Content-Length`, or the bytes read so far), without buffering the
/// excess; 408 when it has not arrived in time.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ServerError> {
    tokio::time::timeout(timeout, read_body_within(body, headers, limit))
        .await
        .map_err(|_| ServerError::BodyTimeout { timeout })?
}

async fn read_body_within(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ServerError> {
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(ServerError::PayloadTooLarge { limit });
    }
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ServerError::BodyUnreadable)?;
        if buf.len() + chunk.len() > limit {
            return Err(ServerError::PayloadTooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

// ---------------------------------------------------------------------------------------------
// Handlers

/// `POST <path>`: one JSON-RPC message (or a 2025-03-26 batch).
pub(crate) async fn post(
    State(state): State<Arc<ServerState>>,
    request: Request,
) -> Result<Response, ServerError> {
    let (parts, body) = request.into_parts();
    check_host_origin(&state, &parts)?;
    let credentials = state.credentials(&parts).await?;
    let principal = Arc::clone(&credentials.principal);
    if !header_str(&parts.headers, header::CONTENT_TYPE).is_some_and(is_json_content_type) {
        return Err(ServerError::UnsupportedMediaType);
    }
    let config = &state.config;
    let bytes = read_body(
        body,
        &parts.headers,
        config.max_body_bytes,
        config.body_read_timeout,
    )
    .await?;
    let accept = accept_value(&parts.headers);
    let eras = config.eras;
    if let Some(message) = modern_message(&parts.headers, &bytes, eras)? {
        state.admit(&credentials, std::slice::from_ref(&message))?;
        let headers = RequestHeaders {
            protocol_version: header_str(&parts.headers, MCP_PROTOCOL_VERSION),
            method: header_str(&parts.headers, MCP_METHOD),
            name: header_str(&parts.headers, MCP_NAME),
        };
        let post = ModernPost {
            principal,
            message,
            headers,
            accept: accept.as_deref(),
        };
        return modern::post(&state, post).await;
    }
    if !eras.serves_legacy() {
        // A 2026-07-28-only server: what is not a modern request is a legacy client's, which
        // has no fall-forward, so the answer names the version served (malformed bodies
        // still get their parse error first).
        return Err(match parse_body(&bytes, Batching::Allowed)? {
            RpcBody::Single(Message::Request(request)) if request.is_initialize() => {
                let requested = request
                    .params
                    .as_ref()
                    .and_then(|params| params.get("protocolVersion"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                ServerError::InitializeRefused {
                    id: request.id,
                    requested,
                }
            }
            _ => ServerError::UnsupportedProtocolVersion(eras),
        });
    }
    let version_header = check_protocol_version(&parts.headers, eras);

    if !parts.headers.contains_key(MCP_SESSION_ID) {
        // Without a session only `initialize` is possible, and it is never batched.
        let body = parse_body(&bytes, Batching::Forbidden)?;
        return match body {
            RpcBody::Single(Message::Request(request)) if request.is_initialize() => {
                initialize(&state, request, accept.as_deref(), principal).await
            }
            _ => {
                version_header?;
                Err(ServerError::MissingSessionId)
            }
        };
    }
    version_header?;
    let record = session_record(&state, &parts.headers, &principal).await?;
    let version = record.version;
    let (runtime, home_node) = match state.home(&record).await? {
        SessionHome::Here => (Some(state.local_session(record.clone()).await?), None),
        SessionHome::Node(node) => (None, Some(node)),
        SessionHome::Gone(node) => {
            // Its handler's state died with its node: the client starts a new session.
            tracing::info!(session = %record.id, %node, "session's node is gone");
            return Err(ServerError::SessionNotFound);
        }
    };
    // The session's negotiated version decides whether a batch is allowed, whatever the
    // request's header says (docs/CONTRACTS.md#negotiated-version).
    let batching = if version.allows_batches() {
        Batching::Allowed
    } else {
        Batching::Forbidden
    };
    let body = match parse_body(&bytes, batching)? {
        RpcBody::Single(Message::Request(request)) if request.is_initialize() => {
            return initialize(&state, request, accept.as_deref(), principal).await;
        }
        body => body,
    };
    let messages = match &body {
        RpcBody::Single(message) => std::slice::from_ref(message),
        RpcBody::Batch(messages) => messages.as_slice(),
    };
    state.admit(&credentials, messages)?;
    let is_batch = matches!(body, RpcBody::Batch(_));
    match (runtime, home_node) {
        (Some(runtime), _) => {
            let answer = dispatch::post(
                &state,
                &runtime,
                &bytes,
                body.into_messages(),
                accept.as_deref(),
                is_batch,
                Recipient::Client,
            )
            .await?;
            Ok(reply::respond(&state, &runtime, answer))
        }
        (None, Some(node)) => {
            let post = handoff::Post {
                record,
                principal,
                body: bytes,
                accept,
                is_batch,
            };
            handoff::post(&state, &node, post).await
        }
        (None, None) => unreachable!("a session runs here or on another node"),
    }
}

/// The message of a 2026-07-28 POST, or `None` for a legacy one (docs/CONTRACTS.md#planned-eras):
/// modern when the body carries the `_meta` envelope, whatever other headers it has, or when
/// `MCP-Protocol-Version` names the modern version on a POST without a session. A legacy body is not parsed here unless it
/// mentions an envelope key, so the 2025 path pays nothing for the check.
///
/// A server that serves the legacy era alone has no modern requests: every POST takes the
/// legacy path, which answers a 2026-07-28 header as an unsupported version, as a 2025-only
/// server does.
fn modern_message(
    headers: &HeaderMap,
    bytes: &[u8],
    eras: Eras,
) -> Result<Option<Message>, ServerError> {
    if !eras.serves_modern() {
        return Ok(None);
    }
    let header = header_str(headers, MCP_PROTOCOL_VERSION);
    let has_session = headers.contains_key(MCP_SESSION_ID);
    let modern_header = !has_session && names_modern_version(headers);
    if !modern_header && memchr::memmem::find(bytes, b"io.modelcontextprotocol/").is_none() {
        return Ok(None);
    }
    let body = match parse_body(bytes, Batching::Allowed) {
        Ok(body) => body,
        // Unparseable: the modern rules answer it when the header says modern, else the
        // legacy path gives its usual 400.
        Err(error) if modern_header => return Err(error.into()),
        Err(_) => return Ok(None),
    };
    let message = match body {
        RpcBody::Single(message) => message,
        RpcBody::Batch(_) if modern_header => {
            return Err(ServerError::modern(
                None,
                StatusCode::BAD_REQUEST,
                tether_proto::jsonrpc::ErrorObject::new(
                    tether_proto::jsonrpc::INVALID_REQUEST,
                    "the 2026-07-28 era has no batches",
                ),
            ));
        }
        RpcBody::Batch(_) => return Ok(None),
    };
    let params = match &message {
        Message::Request(request) => request.params.as_ref(),
        Message::Notification(notification) => notification.params.as_ref(),
        Message::Response(_) => None,
    };
    Ok((era_of(params, header, has_session) == Era::Modern).then_some(message))
}

/// Whether `MCP-Protocol-Version` names the modern version.
fn names_modern_version(headers: &HeaderMap) -> bool {
    header_str(headers, MCP_PROTOCOL_VERSION)
        .and_then(|v| ProtocolVersion::parse(v.trim_matches([' ', '\t'])).ok())
        .is_some_and(ProtocolVersion::is_modern)
}

/// 405 for a GET or DELETE of the 2026-07-28 era, which has neither: the modern version
/// header and no session, or any GET or DELETE on a server that serves that era alone. On a
/// legacy-only server they take the legacy path (a 2026-07-28 header is unsupported there).
fn refuse_modern_get_or_delete(headers: &HeaderMap, eras: Eras) -> Result<(), ServerError> {
    let modern = match eras {
        Eras::Both => names_modern_version(headers) && !headers.contains_key(MCP_SESSION_ID),
        Eras::Legacy => false,
        Eras::Modern => true,
    };
    if modern {
        return Err(ServerError::ModernMethodNotAllowed);
    }
    Ok(())
}

/// What the client of an `initialize` with `params` said of itself, as the session keeps it
/// (`SessionRecord::client`): its `clientInfo` and `capabilities`, if it sent either and
/// they fit in `MAX_SESSION_CLIENT_BYTES`.
fn session_client(params: Option<&Value>) -> Option<Arc<Value>> {
    let params = params?;
    let mut client = serde_json::Map::new();
    for key in ["clientInfo", "capabilities"] {
        if let Some(value) = params.get(key) {
            client.insert(key.to_owned(), value.clone());
        }
    }
    if client.is_empty() {
        return None;
    }
    let client = Value::Object(client);
    let bytes = client.to_string().len();
    if bytes > crate::store::MAX_SESSION_CLIENT_BYTES {
        tracing::debug!(
            bytes,
            "the client's clientInfo and capabilities are not kept: too large"
        );
        return None;
    }
    Some(Arc::new(client))
}

/// `initialize`: negotiates the version, creates the session and answers with
/// `Mcp-Session-Id` on the response head (T34), before any event in SSE mode.
async fn initialize(
    state: &Arc<ServerState>,
    request: RpcRequest,
    accept: Option<&str>,
    principal: Arc<str>,
) -> Result<Response, ServerError> {
    let kind = state.answer_kind(accept)?;
    let requested = request
        .params
        .as_ref()
        .and_then(|params| params.get("protocolVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version = negotiate(requested);
    let client = session_client(request.params.as_ref());
    let runtime = state.create_session(version, principal, client).await?;
    let session = SessionContext::new(Arc::clone(&runtime));
    let answer = state.handler.initialize(&request, session).await;
    let request_id = request.id;
    let (response, session_header) = match answer {
        Ok(result) => {
            let header = HeaderValue::from_str(runtime.record().id.as_str())
                .expect("generated session ids are visible ASCII");
            (
                RpcResponse::success(request_id.clone(), result),
                Some(header),
            )
        }
        Err(error) => {
            tracing::warn!(session = %runtime.record().id, error = %error.message, "initialize refused by the handler");
            // The client never learns the session id: nobody could use or delete it.
            state.terminate(&runtime.record().id).await?;
            let response = RpcResponse::error(Some(request_id), error);
            return Ok(json_response(Message::Response(response).to_vec(), None));
        }
    };
    let response = Message::Response(response);
    match kind {
        ResponseKind::Json => Ok(json_response(response.to_vec(), session_header)),
        ResponseKind::EventStream => {
            let stream = async {
                let stream = state
                    .events
                    .create_stream(
                        runtime.owner(),
                        StreamKind::Request,
                        state.config.retry,
                        std::slice::from_ref(&request_id),
                    )
                    .await?;
                runtime.append(stream, &response).await?;
                state.events.complete(stream).await?;
                Ok::<_, StoreError>(stream)
            }
            .await;
            match stream {
                Ok(stream) => Ok(state
                    .writer(&runtime, stream, Start::Fresh { cursor: 0 })
                    .into_response(session_header)),
                Err(error) => {
                    // The client never learnt the session id: nobody can use or delete it.
                    let _ = state.terminate(&runtime.record().id).await;
                    Err(error.into())
                }
            }
        }
    }
}

/// `GET <path>`: the standalone stream, or a resume after `Last-Event-ID`.
pub(crate) async fn get(
    State(state): State<Arc<ServerState>>,
    request: Request,
) -> Result<Response, ServerError> {
    let (parts, _body) = request.into_parts();
    check_host_origin(&state, &parts)?;
    let principal = state.principal(&parts).await?;
    let eras = state.config.eras;
    refuse_modern_get_or_delete(&parts.headers, eras)?;
    if !state.config.get_streams {
        return Err(ServerError::GetDisabled);
    }
    let accept = accept_value(&parts.headers);
    if !server_accepts(accept.as_deref(), ResponseKind::EventStream) {
        return Err(ServerError::NotAcceptable {
            needs: headers::TEXT_EVENT_STREAM,
        });
    }
    check_protocol_version(&parts.headers, eras)?;
    let runtime = session_for_reading(&state, &parts.headers, &principal).await?;
    let Some(last_event_id) = parts.headers.get(headers::LAST_EVENT_ID) else {
        // A fresh GET continues the standalone stream after what earlier connections were
        // given; a second one replaces the first (docs/CONTRACTS.md#second-get, T33).
        let start = Start::Fresh {
            cursor: runtime.standalone_cursor(),
        };
        return Ok(state
            .writer(&runtime, runtime.standalone(), start)
            .into_response(None));
    };
    let (id, first) = match first_resumed_batch(&state, &runtime, last_event_id).await {
        Ok(found) => found,
        Err(error) => {
            if let ServerError::ResumeRefused(refusal) = &error {
                state.metrics.resume((*refusal).into());
            }
            return Err(error);
        }
    };
    state.metrics.resume(ResumeOutcome::Ok);
    tracing::debug!(session = %runtime.record().id, stream = %id.stream, seq = id.seq, "resume");
    let span = telemetry::resume_span(
        &id.to_string(),
        Some(runtime.record().id.as_str()),
        state.node_id.to_str().unwrap_or_default(),
    );
    telemetry::continue_from(&span, |name| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    });
    let start = Start::Resume {
        cursor: id.seq,
        first,
    };
    Ok(state
        .writer(&runtime, id.stream, start)
        .with_resume_span(span)
        .into_response(None))
}

/// The event id of a resume and the batch after it, read once before answering: an unusable
/// id must be a 400, never a 200 with an empty or partial stream (docs/DESIGN.md#property-2). On
/// failure, the refusal.
async fn first_resumed_batch(
    state: &ServerState,
    runtime: &SessionRuntime,
    last_event_id: &HeaderValue,
) -> Result<(EventId, ReadBatch), ServerError> {
    let id = last_event_id
        .to_str()
        .ok()
        .and_then(|v| parse_last_event_id(v).ok())
        .ok_or(ServerError::ResumeRefused(ResumeRefusal::Malformed))?;
    let first = state
        .events
        .read_after(runtime.owner(), id.stream, id.seq, FIRST_RESUME_BATCH)
        .await
        .map_err(resume_error)?;
    if first.events.is_empty() && !was_issued(state, runtime, id).await? {
        // A seq past the stream's end was never sent: answering 200 would wait for events
        // the client then never sees numbered as it expects (or end at once on a complete
        // stream), a silent gap either way.
        return Err(ServerError::ResumeRefused(ResumeRefusal::Unknown));
    }
    Ok((id, first))
}

/// How a store error on a resume's first read is answered (docs/CONTRACTS.md#last-event-id-row).
fn resume_error(error: StoreError) -> ServerError {
    match error {
        StoreError::UnknownStream => ServerError::ResumeRefused(ResumeRefusal::Unknown),
        StoreError::Expired => ServerError::ResumeRefused(ResumeRefusal::Expired),
        other => ServerError::Store(other),
    }
}

/// Whether the event `id` of a stream this session can read was ever stored, given that
/// nothing follows it: the stream's last event, or one evicted since (then its successors
/// were evicted too, and the stream is merely quiet). Seq 0, the priming event, always was.
async fn was_issued(
    state: &ServerState,
    runtime: &SessionRuntime,
    id: tether_proto::ids::EventId,
) -> Result<bool, ServerError> {
    let Some(before) = id.seq.checked_sub(1) else {
        return Ok(true);
    };
    match state
        .events
        .read_after(runtime.owner(), id.stream, before, 1)
        .await
    {
        Ok(batch) => Ok(batch.events.first().is_some_and(|event| event.id == id)),
        Err(StoreError::Expired) => Ok(true),
        Err(error) => Err(resume_error(error)),
    }
}

/// `DELETE <path>`: ends the session and frees everything it held (T44, T45).
pub(crate) async fn delete(
    State(state): State<Arc<ServerState>>,
    request: Request,
) -> Result<Response, ServerError> {
    let (parts, _body) = request.into_parts();
    check_host_origin(&state, &parts)?;
    let principal = state.principal(&parts).await?;
    let eras = state.config.eras;
    refuse_modern_get_or_delete(&parts.headers, eras)?;
    check_protocol_version(&parts.headers, eras)?;
    let record = session_record(&state, &parts.headers, &principal).await?;
    let id = match state.home(&record).await? {
        // Its node stops the handler's work for it (and answers for the DELETE).
        SessionHome::Node(node) => return handoff::delete(&state, &node, record, principal).await,
        SessionHome::Here => state.local_session(record).await?.record().id.clone(),
        SessionHome::Gone(_) => record.id,
    };
    // Two concurrent DELETEs: the one that did not remove the record gets the 404.
    if !state.terminate(&id).await? {
        return Err(ServerError::SessionNotFound);
    }
    tracing::info!(session = %id, "session deleted");
    Ok(StatusCode::OK.into_response())
}

/// `GET /.well-known/oauth-protected-resource[/<path>]`: the authenticator's Protected
/// Resource Metadata (RFC 9728), open to every origin (browser clients such as the Inspector
/// fetch it), or 404 when it has none.
pub(crate) async fn resource_metadata(State(state): State<Arc<ServerState>>) -> Response {
    let document = state
        .authenticator
        .as_ref()
        .and_then(|authenticator| authenticator.resource_metadata());
    match document {
        Some(document) => (
            [(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
            axum::Json(document),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The CORS preflight of [`resource_metadata`].
pub(crate) async fn resource_metadata_preflight() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, OPTIONS"),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, "mcp-protocol-version"),
        ],
    )
        .into_response()
}

/// `GET /healthz`: the process is up and serving (`ok`), then a line per part of the handler
/// (a gateway's upstreams: `upstream NAME: up, N children` or `… down: why`). One upstream
/// down leaves the endpoint serving, so the status stays 200.
pub(crate) async fn healthz(State(state): State<Arc<ServerState>>) -> String {
    let mut body = "ok\n".to_owned();
    for part in state.handler.parts() {
        let children = part.children;
        let line = match (&part.detail, part.up) {
            (_, true) => format!("upstream {}: up, {children} children\n", part.name),
            (Some(why), false) => format!("upstream {}: down: {why}\n", part.name),
            (None, false) => format!("upstream {}: down\n", part.name),
        };
        body.push_str(&line);
    }
    body
}

/// `GET /metrics`: the server's counters and gauges in the OpenMetrics text format (see
/// `metrics`); needs the same credentials as the MCP endpoint when authentication is on.
pub(crate) async fn metrics(
    State(state): State<Arc<ServerState>>,
    request: Request,
) -> Result<Response, ServerError> {
    let (parts, _) = request.into_parts();
    state.principal(&parts).await?;
    let sessions = state.local_session_ids();
    let stored = state.sessions.count().await.ok();
    let mut retained = SessionUsage::default();
    for id in &sessions {
        if let Ok(usage) = state.events.usage(id).await {
            retained.events += usage.events;
            retained.bytes += usage.bytes;
        }
    }
    let body = state
        .metrics
        .render(sessions.len(), stored, retained, &state.handler.parts());
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    Ok(response)
}

/// The layer on the MCP path that counts every answer by method and status.
pub(crate) async fn count_responses(
    State(state): State<Arc<ServerState>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    state.metrics.count_response(ResponseLabels {
        method,
        status: response.status().as_u16(),
    });
    response
}

/// The MCP endpoint as a tower service (what [`Server::mcp_service`](super::Server::mcp_service)
/// returns): POST, GET and DELETE, any other method 405. Clones share the server. It takes
/// any request body (axum's, hyper's `Incoming`, …), so it mounts in an axum router with
/// `route_service` or `nest_service`, or serves on its own in any tower stack.
#[derive(Clone)]
pub struct McpService {
    router: axum::routing::MethodRouter,
}

impl McpService {
    pub(super) fn new(router: axum::routing::MethodRouter) -> Self {
        Self { router }
    }
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService").finish_non_exhaustive()
    }
}

impl<B> tower::Service<http::Request<B>> for McpService
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::<http::Request<B>>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(tower::Service::call(&mut self.router, request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_session_keeps_only_what_the_client_said_of_itself_and_only_within_the_bound() {
        let params = json!({
            "protocolVersion": "2025-11-25",
            "clientInfo": {"name": "probe", "version": "1"},
            "capabilities": {"roots": {}},
            "_meta": {"not": "kept"},
        });
        assert_eq!(
            session_client(Some(&params)).as_deref(),
            Some(&json!({
                "clientInfo": {"name": "probe", "version": "1"},
                "capabilities": {"roots": {}},
            }))
        );
        assert_eq!(
            session_client(Some(&json!({"protocolVersion": "2025-11-25"}))),
            None
        );
        assert_eq!(session_client(None), None);
        let huge = "x".repeat(crate::store::MAX_SESSION_CLIENT_BYTES);
        let params = json!({"clientInfo": {"name": huge}, "capabilities": {}});
        assert_eq!(session_client(Some(&params)), None, "too large to keep");
    }
}
