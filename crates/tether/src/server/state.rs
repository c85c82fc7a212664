//! The server's state: configuration, handler, stores, and the sessions this node has
//! runtime state for.
//!
//! [`ServerState`] owns the session registry and its lifecycle (create a session with its
//! standalone stream, rebuild a session's runtime on first use, forget it here, terminate it
//! everywhere), who a request comes from, where a session's handler runs (here, or on another
//! node of a shared store), and the factory of SSE writers. It does not own HTTP validation
//! (the endpoint's), routing of messages (dispatch's) or background work (`background`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderValue;
use http::request::Parts;
use tether_proto::headers::{ResponseKind, server_accepts};
use tether_proto::ids::{SessionId, StreamId};
use tether_proto::jsonrpc::Message;
use tether_proto::sse_writer::WriterConfig;
use tether_proto::version::ProtocolVersion;
use tokio_util::sync::CancellationToken;

use super::auth::{AuthFailure, Authenticator, Credentials, query_carries_token};
use super::config::ServerConfig;
use super::error::ServerError;
use super::handler::Handler;
use super::metrics::{MeteredEvents, Metrics};
use super::mrtr::Sealer;
use super::session::SessionRuntime;
use super::subscriptions::Subscriptions;
use super::writer::{Start, Writer};
use crate::lock;
use crate::store::relay::{Relay, SessionHome};
use crate::store::{
    ANONYMOUS_PRINCIPAL, EventStore, SessionRecord, SessionStore, StreamKind, StreamOwner,
    TaskStore,
};
use crate::telemetry::{self, Side};

/// Everything the endpoint, dispatch and background work share: configuration, handler, stores, and the
/// sessions this node has runtime state for.
pub(crate) struct ServerState {
    pub(crate) config: ServerConfig,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) events: Arc<dyn EventStore>,
    /// Where a 2026-07-28 request that is not a task keeps its stream while it is answered:
    /// in this process's memory, since nothing can resume such a stream (a disconnect cancels
    /// the request) and nothing else reads it; storing it durably would only cost a commit.
    pub(crate) transient_events: Arc<dyn EventStore>,
    pub(crate) sessions: Arc<dyn SessionStore>,
    /// The tasks extension's tasks.
    pub(crate) tasks: Arc<dyn TaskStore>,
    pub(crate) node_id: HeaderValue,
    /// How this node reaches the other nodes of a shared store, if it shares one.
    pub(crate) relay: Option<Arc<dyn Relay>>,
    /// What operators see (`/metrics`).
    pub(crate) metrics: Arc<Metrics>,
    /// Who requests come from; without one, everyone is [`ANONYMOUS_PRINCIPAL`].
    pub(crate) authenticator: Option<Arc<dyn Authenticator>>,
    /// Cancelled by `Server::shutdown` (which `serve` calls when told to shut down): writer
    /// loops send `retry` and end.
    pub(crate) shutdown: CancellationToken,
    /// The 2026-07-28 listen streams open on this node.
    pub(crate) subscriptions: Arc<Subscriptions>,
    /// Seals and opens the 2026-07-28 era's `requestState`.
    pub(crate) sealer: Sealer,
    /// The per-principal buckets of `config.rate_limit`.
    rate_limiter: Option<super::rate_limit::RateLimiter>,
    runtimes: Mutex<HashMap<SessionId, Arc<SessionRuntime>>>,
    /// Serializes session creation so that `max_sessions` is a hard bound (count, then
    /// insert, without another initialize in between).
    create_lock: tokio::sync::Mutex<()>,
}

impl ServerState {
    // The one constructor, called by the builder (and dispatch's unit tests): every part is
    // a different kind of thing, and a struct of them would only repeat these names.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
        events: Arc<dyn EventStore>,
        sessions: Arc<dyn SessionStore>,
        tasks: Arc<dyn TaskStore>,
        node_id: HeaderValue,
        relay: Option<Arc<dyn Relay>>,
        authenticator: Option<Arc<dyn Authenticator>>,
        sealing_key: &[u8; 32],
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        // Every append, whichever path makes it, is counted.
        let events = Arc::new(MeteredEvents {
            inner: events,
            metrics: Arc::clone(&metrics),
        });
        let transient_events = Arc::new(MeteredEvents {
            inner: Arc::new(crate::store::MemoryEventStore::new(
                crate::store::StoreLimits::default(),
            )),
            metrics: Arc::clone(&metrics),
        });
        let sealer = Sealer::new(sealing_key, config.request_state_ttl);
        let rate_limiter = config.rate_limit.map(super::rate_limit::RateLimiter::new);
        Self {
            config,
            handler,
            events,
            transient_events,
            sessions,
            tasks,
            metrics,
            node_id,
            relay,
            authenticator,
            shutdown: CancellationToken::new(),
            subscriptions: Arc::default(),
            sealer,
            rate_limiter,
            runtimes: Mutex::new(HashMap::new()),
            create_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The principal of a request (see [`super::auth`]).
    pub(crate) async fn principal(&self, parts: &Parts) -> Result<Arc<str>, ServerError> {
        Ok(self.credentials(parts).await?.principal)
    }

    /// What a request's credentials prove (see [`super::auth`]): refused, with the
    /// authenticator's challenge, when an authenticator is set and they are missing, invalid
    /// or without a scope every request needs. A token in the query string is refused
    /// before the authenticator sees the request.
    pub(crate) async fn credentials(&self, parts: &Parts) -> Result<Credentials, ServerError> {
        let Some(authenticator) = self.authenticator.as_ref() else {
            return Ok(Credentials::principal(Arc::from(ANONYMOUS_PRINCIPAL)));
        };
        let outcome = if query_carries_token(parts.uri.query()) {
            Err(AuthFailure::InvalidToken("token_in_query"))
        } else {
            authenticator.authenticate(&parts.headers).await
        };
        outcome.map_err(|failure| self.refuse(authenticator.as_ref(), failure))
    }

    /// Whether the requests among `messages` may run: refused with 403 for a missing scope
    /// (`authorize_calls`), then with 429 past the principal's rate limit
    /// ([`ServerConfig::rate_limit`]), before anything of them runs.
    pub(crate) fn admit(
        &self,
        credentials: &Credentials,
        messages: &[Message],
    ) -> Result<(), ServerError> {
        self.authorize_calls(credentials, messages)?;
        // After the scope check: a refused call spends no token.
        if let Some(limiter) = &self.rate_limiter
            && let Err(retry_after) = limiter.admit(&credentials.principal, messages)
        {
            self.metrics.rate_limited();
            tracing::debug!(principal = %credentials.principal, ?retry_after, "rate limited");
            return Err(ServerError::RateLimited { retry_after });
        }
        Ok(())
    }

    /// 403 when a `tools/call` among `messages` names a tool that needs scopes `credentials`
    /// lack (docs/CONTRACTS.md#oauth-scopes); `tools/list` still lists it. Nothing is looked
    /// at without an authenticator.
    fn authorize_calls(
        &self,
        credentials: &Credentials,
        messages: &[Message],
    ) -> Result<(), ServerError> {
        let Some(authenticator) = self.authenticator.as_ref() else {
            return Ok(());
        };
        for message in messages {
            let Message::Request(request) = message else {
                continue;
            };
            let tool = (request.method == "tools/call")
                .then(|| request.params.as_ref()?.get("name")?.as_str())
                .flatten();
            let Some(tool) = tool else {
                continue;
            };
            let needed = authenticator.tool_scopes(tool);
            if !credentials.grants(needed) {
                // The challenge names every scope the call needs (2026-07-28: all at once),
                // not only the missing ones, so a client re-authorizing with it has them all.
                tracing::info!(%tool, principal = %credentials.principal, "tool call refused: scope missing");
                let failure = AuthFailure::InsufficientScope(needed.to_vec());
                return Err(self.refuse(authenticator.as_ref(), failure));
            }
        }
        Ok(())
    }

    /// `failure` as the refusal sent, counted.
    fn refuse(&self, authenticator: &dyn Authenticator, failure: AuthFailure) -> ServerError {
        self.metrics.auth_failure(failure.reason());
        ServerError::Unauthorized {
            challenge: authenticator.challenge(&failure),
            failure,
        }
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
    pub(crate) async fn home(&self, record: &SessionRecord) -> Result<SessionHome, ServerError> {
        match self.relay.as_ref() {
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

    /// Each session this node holds runtime state for, and whether it is busy (requests
    /// running or connections open), for the idle sweep.
    pub(crate) fn runtime_busyness(&self) -> Vec<(SessionId, bool)> {
        lock(&self.runtimes)
            .iter()
            .map(|(id, runtime)| (id.clone(), runtime.is_busy()))
            .collect()
    }

    /// The sessions this node holds runtime state for.
    pub(crate) fn local_session_ids(&self) -> Vec<SessionId> {
        lock(&self.runtimes).keys().cloned().collect()
    }

    /// Creates a session: record, standalone stream and runtime. `client` is what the
    /// client said of itself (`SessionRecord::client`).
    pub(crate) async fn create_session(
        &self,
        version: ProtocolVersion,
        principal: Arc<str>,
        client: Option<Arc<serde_json::Value>>,
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
            client,
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
            telemetry::record_session(
                Side::Server,
                Some(runtime.version().as_str()),
                runtime.age(),
            );
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

    /// A writer loop for `stream` of `runtime`'s session, starting at `start`, paced by the
    /// configuration and ended by the server's shutdown.
    pub(crate) fn writer(
        &self,
        runtime: &Arc<SessionRuntime>,
        stream: StreamId,
        start: Start,
    ) -> Writer {
        self.writer_until(runtime, stream, start, self.shutdown.clone())
    }

    /// [`writer`](Self::writer), ended by `close` instead of the server's shutdown (a listen
    /// stream, which stores its completion result on shutdown and must send it).
    pub(crate) fn writer_until(
        &self,
        runtime: &Arc<SessionRuntime>,
        stream: StreamId,
        start: Start,
        close: CancellationToken,
    ) -> Writer {
        let pacing = WriterConfig::new(
            self.config.retry,
            self.config.keepalive,
            self.config.poll_after,
        );
        Writer::new(runtime, stream, start, pacing, close, &self.metrics)
    }
}
