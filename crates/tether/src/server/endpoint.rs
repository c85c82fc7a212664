//! The HTTP endpoint: POST, GET and DELETE on the MCP path, `GET /healthz`, and the server
//! state they share.
//!
//! This module owns request validation, in a fixed order so that one request always gets the
//! same answer: `Host`/`Origin` (403) first on every method, then authentication (401, see
//! [`super::auth`]); then for POST `Content-Type`
//! (415), body size (413), `MCP-Protocol-Version` (400), the session (400/404), the body
//! (400, parsed with the *session's* batching rule) and `Accept` (406, only when the answer
//! has a body); for GET 405 when GET streams are off, `Accept` (406), the version, the session
//! and `Last-Event-ID` (400); for DELETE the version and the session. A POST without
//! `Mcp-Session-Id` is parsed first, since only an unbatched `initialize` may come without
//! one. It also owns the session lifecycle: `initialize` creates the session record and its
//! standalone stream, DELETE and idle expiry end it. Every refusal is a [`ServerError`]. What
//! happens to the messages of an accepted POST is [`super::dispatch`]'s; how streams reach
//! the wire is [`super::writer`]'s.
//!
//! Decisions where the spec leaves room (recorded here, and in docs/ARCHITECTURE.md by the
//! team):
//!
//! - `initialize` never needs `Mcp-Session-Id` (T39); sent without one, its
//!   `MCP-Protocol-Version` header is not checked (negotiation uses the body, spec digest §6.1
//!   item 9). An `initialize` sent *with* a live session's id starts a new session; a stale id
//!   gets the usual 404, after which the client re-initializes without it (S-SES-4).
//! - `Accept` is checked only when the answer has a body, leniently (§6.1 item 10): the
//!   configured kind (SSE, or JSON with `json_response`) if acceptable, else the other kind if
//!   that is, else 406.
//! - Error bodies carry `"id": null` (a transport refusal answers no particular request).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
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
use tether_proto::version::{ProtocolVersion, check_header, negotiate};
use tokio_util::sync::CancellationToken;

use super::ServerConfig;
use super::auth::Authenticator;
use super::context::SessionContext;
use super::dispatch::{self, Answer, Recipient};
use super::error::{ResumeRefusal, ServerError};
use super::handler::Handler;
use super::handoff;
use super::metrics::{MeteredEvents, Metrics, ResumeOutcome};
use super::origin::{host_allowed, origin_allowed};
use super::session::SessionRuntime;
use super::writer::{Pacing, READ_BATCH, Start, Writer};
use crate::lock;
use crate::store::relay::{Relay, SessionHome};
use crate::store::{
    ANONYMOUS_PRINCIPAL, EventStore, ReadBatch, SessionRecord, SessionStore, StoreError,
    StreamKind, StreamOwner,
};

/// The sweeper looks for idle sessions this often relative to `session_idle`, so a session
/// ends at most a quarter past its idle time.
const SWEEPS_PER_IDLE_PERIOD: u32 = 4;

/// How often the server asks its store for streams orphaned by another process (a dead node
/// of a shared store): a small fraction of a node lease, and a cheap call for every store.
const ORPHAN_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Lower bound of the sweep period: short idle times (tests) must not spin the sweeper.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(10);
/// Upper bound of the sweep period: with the default 30-minute idle time, expired sessions'
/// memory is reclaimed within half a minute.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Everything the endpoint's handlers share: configuration, handler, stores, and the
/// sessions this node has runtime state for.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) events: Arc<dyn EventStore>,
    pub(crate) sessions: Arc<dyn SessionStore>,
    pub(crate) node_id: HeaderValue,
    /// How this node reaches the other nodes of a shared store, if it shares one.
    pub(crate) relay: OnceLock<Arc<dyn Relay>>,
    /// What operators see (`/metrics`).
    pub(crate) metrics: Arc<Metrics>,
    /// Who requests come from; without one, everyone is [`ANONYMOUS_PRINCIPAL`].
    pub(crate) authenticator: OnceLock<Arc<dyn Authenticator>>,
    /// Cancelled when `serve` is told to shut down: writer loops send `retry` and end.
    pub(crate) shutdown: CancellationToken,
    runtimes: Mutex<HashMap<SessionId, Arc<SessionRuntime>>>,
    /// Serializes session creation so that `max_sessions` is a hard bound (count, then
    /// insert, without another initialize in between).
    create_lock: tokio::sync::Mutex<()>,
    sweeper_started: AtomicBool,
    /// Background work of the stores that needs a runtime (the memory store's retention
    /// sweeper), started together with the session sweeper.
    store_tasks: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Shared {
    pub(crate) fn new(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
        events: Arc<dyn EventStore>,
        sessions: Arc<dyn SessionStore>,
        node_id: HeaderValue,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        // Every append, whichever path makes it, is counted.
        let events = Arc::new(MeteredEvents {
            inner: events,
            metrics: Arc::clone(&metrics),
        });
        Self {
            config,
            handler,
            events,
            sessions,
            metrics,
            node_id,
            relay: OnceLock::new(),
            authenticator: OnceLock::new(),
            shutdown: CancellationToken::new(),
            runtimes: Mutex::new(HashMap::new()),
            create_lock: tokio::sync::Mutex::new(()),
            sweeper_started: AtomicBool::new(false),
            store_tasks: Mutex::new(None),
        }
    }

    /// Registers store background work to start with the sweeper (inside a runtime).
    pub(crate) fn set_store_tasks(&self, start: Box<dyn FnOnce() + Send>) {
        *lock(&self.store_tasks) = Some(start);
    }

    /// The principal of a request (see [`super::auth`]): 401 when an authenticator is set and
    /// the request's credentials are missing or wrong.
    pub(crate) fn principal(&self, parts: &Parts) -> Result<Arc<str>, ServerError> {
        match self.authenticator.get() {
            None => Ok(Arc::from(ANONYMOUS_PRINCIPAL)),
            Some(authenticator) => authenticator
                .authenticate(&parts.headers)
                .ok_or(ServerError::Unauthorized),
        }
    }

    /// DNS-rebinding protection, first on every method (see [`super::origin`]).
    fn check_host_origin(&self, parts: &Parts) -> Result<(), ServerError> {
        let host = match parts.headers.get(header::HOST) {
            Some(value) => value.to_str().ok(),
            // HTTP/2 carries the host in `:authority`, which hyper puts in the URI.
            None => parts.uri.authority().map(http::uri::Authority::as_str),
        };
        if !host_allowed(host, &self.config.allowed_hosts) {
            return Err(ServerError::ForbiddenHost);
        }
        let origin = match parts.headers.get(header::ORIGIN) {
            None => None,
            Some(value) => Some(value.to_str().map_err(|_| ServerError::ForbiddenOrigin)?),
        };
        if !origin_allowed(origin, &self.config.allowed_origins) {
            return Err(ServerError::ForbiddenOrigin);
        }
        Ok(())
    }

    /// How to answer a POST that contains requests, given its `Accept`.
    pub(crate) fn answer_kind(&self, accept: Option<&str>) -> Result<ResponseKind, ServerError> {
        let (preferred, other) = if self.config.json_response {
            (ResponseKind::Json, ResponseKind::EventStream)
        } else {
            (ResponseKind::EventStream, ResponseKind::Json)
        };
        if server_accepts(accept, preferred) {
            Ok(preferred)
        } else if server_accepts(accept, other) {
            Ok(other)
        } else {
            Err(ServerError::NotAcceptable {
                needs: "application/json or text/event-stream",
            })
        }
    }

    /// The session named by `Mcp-Session-Id`, if it exists and is `principal`'s.
    async fn session_record(
        &self,
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
        self.record_of(&id, principal).await
    }

    /// The session `id`, if it exists and is `principal`'s.
    pub(crate) async fn record_of(
        &self,
        id: &SessionId,
        principal: &str,
    ) -> Result<SessionRecord, ServerError> {
        let Some(record) = self.sessions.get(id).await? else {
            // Gone from the store (expired, deleted, or removed by another node): drop any
            // runtime state left here.
            self.forget(id);
            return Err(ServerError::SessionNotFound);
        };
        // Another principal's session is reported exactly like an unknown one.
        if &*record.principal != principal {
            return Err(ServerError::SessionNotFound);
        }
        Ok(record)
    }

    /// Where the session's handler runs: here, unless a relay says another node runs it.
    async fn home(&self, record: &SessionRecord) -> Result<SessionHome, ServerError> {
        match self.relay.get() {
            None => Ok(SessionHome::Here),
            Some(relay) => Ok(relay.home(record.standalone).await?),
        }
    }

    /// The runtime of a session whose handler runs on this node, if the handler can still
    /// serve it; touches it.
    pub(crate) async fn local_session(
        &self,
        record: SessionRecord,
    ) -> Result<Arc<SessionRuntime>, ServerError> {
        if !self.handler.session_alive(&record.id) {
            tracing::info!(session = %record.id, "session ended: the handler can no longer serve it");
            self.terminate(&record.id).await?;
            return Err(ServerError::SessionNotFound);
        }
        self.runtime(record).await
    }

    /// This node's runtime state of a session (created on first use: after a restart, or on
    /// a node that only serves its streams); touches the session.
    pub(crate) async fn runtime(
        &self,
        record: SessionRecord,
    ) -> Result<Arc<SessionRuntime>, ServerError> {
        self.sessions.touch(&record.id).await?;
        let mut runtimes = lock(&self.runtimes);
        let id = record.id.clone();
        Ok(Arc::clone(runtimes.entry(id).or_insert_with(|| {
            SessionRuntime::new(
                record,
                Arc::clone(&self.events),
                self.config.max_event_bytes,
            )
        })))
    }

    /// The runtime for a request that needs no handler (a GET): the local session when it
    /// runs here, else state for serving its streams from the shared store, also when its
    /// node is gone (its streams stay readable).
    async fn session_for_reading(
        &self,
        headers: &HeaderMap,
        principal: &str,
    ) -> Result<Arc<SessionRuntime>, ServerError> {
        let record = self.session_record(headers, principal).await?;
        match self.home(&record).await? {
            SessionHome::Here => self.local_session(record).await,
            SessionHome::Node(_) | SessionHome::Gone(_) => self.runtime(record).await,
        }
    }

    /// The sessions this node holds runtime state for.
    pub(crate) fn local_session_ids(&self) -> Vec<SessionId> {
        lock(&self.runtimes).keys().cloned().collect()
    }

    /// The HTTP answer to an accepted POST.
    pub(crate) fn respond(&self, runtime: &Arc<SessionRuntime>, answer: Answer) -> Response {
        match answer {
            Answer::Accepted => StatusCode::ACCEPTED.into_response(),
            Answer::Stream(stream) => self
                .writer(runtime, stream, Start::Fresh { cursor: 0 })
                .into_response(None),
            Answer::Json(body) => json_response(body, None),
        }
    }

    /// Creates a session: record, standalone stream and runtime.
    async fn create_session(
        &self,
        version: ProtocolVersion,
        principal: Arc<str>,
    ) -> Result<Arc<SessionRuntime>, ServerError> {
        let _creating = self.create_lock.lock().await;
        if self.sessions.count().await? >= self.config.max_sessions
            || self.sessions.count_for(&principal).await? >= self.config.max_sessions_per_principal
        {
            return Err(ServerError::TooManySessions);
        }
        let id = SessionId::generate();
        let owner = StreamOwner {
            principal: Arc::clone(&principal),
            session: id.clone(),
        };
        let standalone = self
            .events
            .create_stream(&owner, StreamKind::Standalone, self.config.retry, &[])
            .await?;
        let record = SessionRecord {
            id: id.clone(),
            version,
            principal,
            standalone,
        };
        if let Err(error) = self.sessions.insert(record.clone()).await {
            let _ = self.events.remove_session(&id).await;
            return Err(error.into());
        }
        let runtime = SessionRuntime::new(
            record,
            Arc::clone(&self.events),
            self.config.max_event_bytes,
        );
        lock(&self.runtimes).insert(id.clone(), Arc::clone(&runtime));
        tracing::info!(session = %id, version = %version, "session created");
        Ok(runtime)
    }

    /// Drops this node's runtime state of a session, cancelling its handlers and closing its
    /// connections.
    pub(crate) fn forget(&self, id: &SessionId) {
        let runtime = lock(&self.runtimes).remove(id);
        if let Some(runtime) = runtime {
            runtime.close();
            self.handler.session_closed(id);
        }
    }

    /// Ends a session everywhere: record, runtime, events. Returns whether it existed.
    pub(crate) async fn terminate(&self, id: &SessionId) -> Result<bool, ServerError> {
        let existed = self.sessions.remove(id).await?;
        self.forget(id);
        self.events.remove_session(id).await?;
        Ok(existed)
    }

    /// Starts the idle-session sweeper once, on first use (inside a runtime). It holds only a
    /// weak reference, so it ends when the server is dropped, or at shutdown.
    pub(crate) fn ensure_sweeper(self: &Arc<Self>) {
        if self.sweeper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let store_tasks = lock(&self.store_tasks).take();
        if let Some(start) = store_tasks {
            start();
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        if let Some(inbox) = self.relay.get().and_then(|relay| relay.take_inbox()) {
            tokio::spawn(handoff::serve(weak.clone(), inbox));
        }
        let shutdown = self.shutdown.clone();
        let interval = (self.config.session_idle / SWEEPS_PER_IDLE_PERIOD)
            .clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL);
        tokio::spawn({
            let weak = weak.clone();
            let shutdown = shutdown.clone();
            async move {
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(interval) => {}
                    }
                    let Some(shared) = weak.upgrade() else { break };
                    shared.sweep().await;
                }
            }
        });
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ORPHAN_POLL_INTERVAL) => {}
                }
                let Some(shared) = weak.upgrade() else { break };
                shared.answer_orphans().await;
            }
        });
    }

    /// Answers the streams the store reports orphaned since the last look (with a shared
    /// store, those of a node whose lease ran out).
    async fn answer_orphans(&self) {
        match super::orphans::answer_orphans(&*self.events).await {
            Ok(report) => self.metrics.orphans_answered(report.requests as u64),
            Err(error) => tracing::warn!(%error, "looking for orphaned streams failed"),
        }
    }

    /// One sweep: sessions with requests running or connections open are kept alive (a long
    /// tool call or an open GET stream is activity), the rest expire after `session_idle`.
    async fn sweep(&self) {
        let (busy, quiet): (Vec<_>, Vec<_>) = lock(&self.runtimes)
            .iter()
            .map(|(id, runtime)| (id.clone(), runtime.is_busy()))
            .partition(|(_, busy)| *busy);
        // Runtime state whose record is gone (a DELETE that raced a request re-creating the
        // runtime, or a session removed by another node) is dropped here.
        for (id, _) in &quiet {
            if let Ok(None) = self.sessions.get(id).await {
                self.forget(id);
                let _ = self.events.remove_session(id).await;
            }
        }
        let busy: Vec<SessionId> = busy.into_iter().map(|(id, _)| id).collect();
        for id in &busy {
            if let Err(error) = self.sessions.touch(id).await {
                tracing::warn!(session = %id, %error, "could not keep a busy session alive");
            }
        }
        let expired = match self.sessions.expire_idle(self.config.session_idle).await {
            Ok(expired) => expired,
            Err(error) => {
                tracing::warn!(%error, "idle-session sweep failed");
                return;
            }
        };
        for id in expired {
            tracing::info!(session = %id, "session expired");
            self.forget(&id);
            if let Err(error) = self.events.remove_session(&id).await {
                tracing::warn!(session = %id, %error, "could not free an expired session");
            }
        }
    }

    pub(crate) fn writer(
        &self,
        runtime: &Arc<SessionRuntime>,
        stream: tether_proto::ids::StreamId,
        start: Start,
    ) -> Writer {
        let pacing = Pacing {
            retry: self.config.retry,
            keepalive: self.config.keepalive,
            poll_after: self.config.poll_after,
        };
        Writer::new(
            runtime,
            stream,
            start,
            pacing,
            self.shutdown.clone(),
            &self.metrics,
        )
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

/// `MCP-Protocol-Version` checked against the supported versions (CONTRACTS.md): absent or
/// supported is fine (the session's negotiated version stays in force either way).
fn check_protocol_version(headers: &HeaderMap) -> Result<Option<ProtocolVersion>, ServerError> {
    let value = match headers.get(MCP_PROTOCOL_VERSION) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ServerError::UnsupportedProtocolVersion)?,
        ),
    };
    check_header(value).map_err(|_| ServerError::UnsupportedProtocolVersion)
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

/// A JSON answer (`application/json`).
pub(crate) fn json_response(body: Vec<u8>, session: Option<HeaderValue>) -> Response {
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(headers::APPLICATION_JSON),
        )],
        body,
    )
        .into_response();
    if let Some(session) = session {
        response.headers_mut().insert(MCP_SESSION_ID, session);
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Handlers

/// `POST <path>`: one JSON-RPC message (or a 2025-03-26 batch).
pub(crate) async fn post(
    State(shared): State<Arc<Shared>>,
    request: Request,
) -> Result<Response, ServerError> {
    shared.ensure_sweeper();
    let (parts, body) = request.into_parts();
    shared.check_host_origin(&parts)?;
    let principal = shared.principal(&parts)?;
    if !header_str(&parts.headers, header::CONTENT_TYPE).is_some_and(is_json_content_type) {
        return Err(ServerError::UnsupportedMediaType);
    }
    let config = &shared.config;
    let bytes = read_body(
        body,
        &parts.headers,
        config.max_body_bytes,
        config.body_read_timeout,
    )
    .await?;
    let version_header = check_protocol_version(&parts.headers);
    let accept = accept_value(&parts.headers);

    if !parts.headers.contains_key(MCP_SESSION_ID) {
        // Without a session only `initialize` is possible, and it is never batched.
        let body = parse_body(&bytes, Batching::Forbidden)?;
        return match body {
            RpcBody::Single(Message::Request(request)) if request.is_initialize() => {
                initialize(&shared, request, accept.as_deref(), principal).await
            }
            _ => {
                version_header?;
                Err(ServerError::MissingSessionId)
            }
        };
    }
    version_header?;
    let record = shared.session_record(&parts.headers, &principal).await?;
    let version = record.version;
    let (runtime, home_node) = match shared.home(&record).await? {
        SessionHome::Here => (Some(shared.local_session(record.clone()).await?), None),
        SessionHome::Node(node) => (None, Some(node)),
        SessionHome::Gone(node) => {
            // Its handler's state died with its node: the client starts a new session.
            tracing::info!(session = %record.id, %node, "session's node is gone");
            return Err(ServerError::SessionNotFound);
        }
    };
    // The session's negotiated version decides whether a batch is allowed, whatever the
    // request's header says (CONTRACTS.md).
    let batching = if version.allows_batches() {
        Batching::Allowed
    } else {
        Batching::Forbidden
    };
    let body = match parse_body(&bytes, batching)? {
        RpcBody::Single(Message::Request(request)) if request.is_initialize() => {
            return initialize(&shared, request, accept.as_deref(), principal).await;
        }
        body => body,
    };
    let is_batch = matches!(body, RpcBody::Batch(_));
    match (runtime, home_node) {
        (Some(runtime), _) => {
            let answer = dispatch::post(
                &shared,
                &runtime,
                body.into_messages(),
                accept.as_deref(),
                is_batch,
                Recipient::Client,
            )
            .await?;
            Ok(shared.respond(&runtime, answer))
        }
        (None, Some(node)) => {
            let post = handoff::Post {
                record,
                principal,
                body: bytes,
                accept,
                is_batch,
            };
            handoff::post(&shared, &node, post).await
        }
        (None, None) => unreachable!("a session runs here or on another node"),
    }
}

/// `initialize`: negotiates the version, creates the session and answers with
/// `Mcp-Session-Id` on the response head (T34), before any event in SSE mode.
async fn initialize(
    shared: &Arc<Shared>,
    request: RpcRequest,
    accept: Option<&str>,
    principal: Arc<str>,
) -> Result<Response, ServerError> {
    let kind = shared.answer_kind(accept)?;
    let requested = request
        .params
        .as_ref()
        .and_then(|params| params.get("protocolVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version = negotiate(requested);
    let runtime = shared.create_session(version, principal).await?;
    let session = SessionContext::new(Arc::clone(&runtime));
    let answer = shared.handler.initialize(&request, session).await;
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
            shared.terminate(&runtime.record().id).await?;
            let response = RpcResponse::error(Some(request_id), error);
            return Ok(json_response(Message::Response(response).to_vec(), None));
        }
    };
    let response = Message::Response(response);
    match kind {
        ResponseKind::Json => Ok(json_response(response.to_vec(), session_header)),
        ResponseKind::EventStream => {
            let stream = async {
                let stream = shared
                    .events
                    .create_stream(
                        runtime.owner(),
                        StreamKind::Request,
                        shared.config.retry,
                        std::slice::from_ref(&request_id),
                    )
                    .await?;
                runtime.append(stream, &response).await?;
                shared.events.complete(stream).await?;
                Ok::<_, StoreError>(stream)
            }
            .await;
            match stream {
                Ok(stream) => Ok(shared
                    .writer(&runtime, stream, Start::Fresh { cursor: 0 })
                    .into_response(session_header)),
                Err(error) => {
                    // The client never learnt the session id: nobody can use or delete it.
                    let _ = shared.terminate(&runtime.record().id).await;
                    Err(error.into())
                }
            }
        }
    }
}

/// `GET <path>`: the standalone stream, or a resume after `Last-Event-ID`.
pub(crate) async fn get(
    State(shared): State<Arc<Shared>>,
    request: Request,
) -> Result<Response, ServerError> {
    shared.ensure_sweeper();
    let (parts, _body) = request.into_parts();
    shared.check_host_origin(&parts)?;
    let principal = shared.principal(&parts)?;
    if !shared.config.get_streams {
        return Err(ServerError::GetDisabled);
    }
    let accept = accept_value(&parts.headers);
    if !server_accepts(accept.as_deref(), ResponseKind::EventStream) {
        return Err(ServerError::NotAcceptable {
            needs: headers::TEXT_EVENT_STREAM,
        });
    }
    check_protocol_version(&parts.headers)?;
    let runtime = shared
        .session_for_reading(&parts.headers, &principal)
        .await?;
    let Some(last_event_id) = parts.headers.get(headers::LAST_EVENT_ID) else {
        // A fresh GET continues the standalone stream after what earlier connections were
        // given; a second one replaces the first (CONTRACTS.md, T33).
        let start = Start::Fresh {
            cursor: runtime.standalone_cursor(),
        };
        return Ok(shared
            .writer(&runtime, runtime.standalone(), start)
            .into_response(None));
    };
    let (id, first) = match first_resumed_batch(&shared, &runtime, last_event_id).await {
        Ok(found) => found,
        Err(error) => {
            if let ServerError::ResumeRefused(refusal) = &error {
                shared.metrics.resume((*refusal).into());
            }
            return Err(error);
        }
    };
    shared.metrics.resume(ResumeOutcome::Ok);
    tracing::debug!(session = %runtime.record().id, stream = %id.stream, seq = id.seq, "resume");
    let start = Start::Resume {
        cursor: id.seq,
        first,
    };
    Ok(shared
        .writer(&runtime, id.stream, start)
        .into_response(None))
}

/// The event id of a resume and the batch after it, read once before answering: an unusable
/// id must be a 400, never a 200 with an empty or partial stream (DESIGN.md property 2). On
/// failure, the refusal.
async fn first_resumed_batch(
    shared: &Shared,
    runtime: &SessionRuntime,
    last_event_id: &HeaderValue,
) -> Result<(EventId, ReadBatch), ServerError> {
    let id = last_event_id
        .to_str()
        .ok()
        .and_then(|v| parse_last_event_id(v).ok())
        .ok_or(ServerError::ResumeRefused(ResumeRefusal::Malformed))?;
    let first = shared
        .events
        .read_after(runtime.owner(), id.stream, id.seq, READ_BATCH)
        .await
        .map_err(resume_error)?;
    if first.events.is_empty() && !was_issued(shared, runtime, id).await? {
        // A seq past the stream's end was never sent: answering 200 would wait for events
        // the client then never sees numbered as it expects (or end at once on a complete
        // stream), a silent gap either way.
        return Err(ServerError::ResumeRefused(ResumeRefusal::Unknown));
    }
    Ok((id, first))
}

/// How a store error on a resume's first read is answered (CONTRACTS.md `Last-Event-ID` row).
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
    shared: &Shared,
    runtime: &SessionRuntime,
    id: tether_proto::ids::EventId,
) -> Result<bool, ServerError> {
    let Some(before) = id.seq.checked_sub(1) else {
        return Ok(true);
    };
    match shared
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
    State(shared): State<Arc<Shared>>,
    request: Request,
) -> Result<Response, ServerError> {
    shared.ensure_sweeper();
    let (parts, _body) = request.into_parts();
    shared.check_host_origin(&parts)?;
    let principal = shared.principal(&parts)?;
    check_protocol_version(&parts.headers)?;
    let record = shared.session_record(&parts.headers, &principal).await?;
    let id = match shared.home(&record).await? {
        // Its node stops the handler's work for it (and answers for the DELETE).
        SessionHome::Node(node) => return handoff::delete(&shared, &node, record, principal).await,
        SessionHome::Here => shared.local_session(record).await?.record().id.clone(),
        SessionHome::Gone(_) => record.id,
    };
    // Two concurrent DELETEs: the one that did not remove the record gets the 404.
    if !shared.terminate(&id).await? {
        return Err(ServerError::SessionNotFound);
    }
    tracing::info!(session = %id, "session deleted");
    Ok(StatusCode::OK.into_response())
}

/// `GET /healthz`: the process is up and serving.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}
