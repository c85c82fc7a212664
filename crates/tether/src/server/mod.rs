//! The MCP Streamable HTTP server: an axum endpoint whose every outgoing message goes
//! through the event store before it reaches the wire.
//!
//! [`Server::builder`] ties a [`Handler`], a [`Stores`] bundle, an authenticator and a
//! [`ServerConfig`] together; [`ServerBuilder::build`] answers the requests an earlier
//! process left unanswered and starts the background work. The built server's
//! [`mcp_service`](Server::mcp_service) is the endpoint alone, to mount in an application's
//! own router; [`ops_router`](Server::ops_router) has `/healthz` and `/metrics`;
//! [`serve`](Server::serve) runs both on a listener with graceful shutdown. Both eras are
//! served on one endpoint: the 2025 versions (2025-03-26, 2025-06-18, 2025-11-25) in sessions,
//! each request's behaviour decided by its session's negotiated version, and 2026-07-28's
//! stateless requests, recognized by their `_meta` envelope.
//!
//! Inside, imports run one way (the repository's `docs/ARCHITECTURE.md` draws the graph):
//! `config` holds the configuration and every default; `session` the per-session runtime
//! state; `state` the server's state (the session registry and lifecycle, the writer
//! factory); `dispatch` runs an accepted POST's messages; `finish` is how
//! every request ends, in both eras and as a task (its handler's events stored, then its answer,
//! then its stream completed); `reply` turns its answer into
//! HTTP; `handoff` carries requests for sessions another node of a shared store runs;
//! `background` is the sweeper, the orphan answers and the relay inbox; `endpoint` is every
//! axum handler; `modern` serves a 2026-07-28 POST, `mrtr` its questions and sealed
//! `requestState`, `subscriptions` its `subscriptions/listen` streams, `tasks` the tasks extension. `context` is what
//! handlers emit through, `writer` the one SSE writer loop
//! (its decisions are [`tether_proto::sse_writer`]'s), `error` maps every refusal to its
//! status and body, `origin` is the DNS-rebinding check, `auth` who a request comes from,
//! `metrics` what operators see, `orphans` the answers to requests an earlier process left
//! unanswered, `handler` the trait an application implements, `listen` the accept loop of
//! [`serve`](Server::serve). Stores are [`crate::store`]'s; JSON-RPC, versions, headers and ids are
//! [`tether_proto`]'s; SSE framing is [`tether_sse`]'s.

pub mod auth;
mod background;
mod config;
pub mod context;
mod dispatch;
mod endpoint;
pub mod error;
mod finish;
pub mod handler;
mod handoff;
mod listen;
mod metrics;
mod modern;
mod mrtr;
#[cfg(feature = "oauth")]
pub mod oauth;
mod origin;
mod orphans;
mod rate_limit;
mod reply;
mod session;
mod state;
mod subscriptions;
mod tasks;
mod writer;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{MethodRouter, get};
use http::HeaderValue;
use tether_proto::headers::TETHER_NODE;
use tether_proto::ids::StreamId;
use tokio::net::TcpListener;

pub use auth::{AuthFailure, Authenticator, BearerTokens, Credentials, TokenFileError};
pub use config::{
    ConnectionLimits, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_KEEPALIVE,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_HEADERS, DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_TASKS_PER_PRINCIPAL, DEFAULT_PATH, DEFAULT_REQUEST_STATE_TTL, DEFAULT_RETRY,
    DEFAULT_SESSION_IDLE, DEFAULT_TASK_EVENTS_RETENTION, DEFAULT_TASK_MAX_EVENT_BYTES,
    DEFAULT_TASK_POLL_INTERVAL, DEFAULT_TASK_TTL, Eras, HEALTHZ_PATH, METRICS_PATH,
    RESOURCE_METADATA_PATH, ServerConfig,
};
pub use context::{ContextError, RequestContext, SessionContext};
pub use dispatch::CANCEL_GRACE;
pub use endpoint::McpService;
pub use error::{ModernRefusal, ResumeRefusal, ServerError};
pub use handler::{Handler, PartStatus, ServerInfo, TaskSupport};
pub use handoff::HANDOFF_TIMEOUT;
pub use orphans::{OrphanReport, SERVER_RESTARTED_REASON};
pub use rate_limit::RateLimit;
pub use tether_proto::logging::{LogLevel, UnknownLogLevel};
pub use tether_proto::modern::Era;
pub use tether_proto::modern::TASKS_EXTENSION;

use crate::store::{StoreError, StoreLimits, Stores};
use state::ServerState;

/// Characters of a generated node id: 72 random bits, plenty to tell nodes apart in logs.
const GENERATED_NODE_ID_LEN: usize = 12;

/// Why a server could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// [`ServerConfig::path`] does not start with `/`.
    #[error("the MCP path must start with '/': {0:?}")]
    InvalidPath(String),
    /// The node id is not a valid header value (visible ASCII).
    #[error("the node id must be visible ASCII: {0:?}")]
    InvalidNodeId(String),
    /// The store failed while the server read its sealing key or answered requests an
    /// earlier process left unanswered.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How to build a [`Server`]: [`Server::builder`], then the stores, authentication,
/// configuration and node id it needs, then [`build`](Self::build). Every setter replaces
/// what an earlier call set; nothing panics.
#[must_use = "a builder does nothing until built"]
pub struct ServerBuilder {
    handler: Arc<dyn Handler>,
    stores: Option<Stores>,
    authenticator: Option<Arc<dyn Authenticator>>,
    config: ServerConfig,
    /// Set by [`ServerBuilder::node_id`]; wins over the config's, whichever came first.
    node_id: Option<String>,
    /// Set by [`ServerBuilder::eras`]; wins over the config's, whichever came first.
    eras: Option<Eras>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("stores", &self.stores)
            .field("auth", &self.authenticator.is_some())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// The stores to run on (default: [`Stores::memory`] with the default limits).
    pub fn stores(mut self, stores: Stores) -> Self {
        self.stores = Some(stores);
        self
    }

    /// Authenticates every request on the MCP path (and `/metrics`) with `authenticator`
    /// (see [`auth`]): requests without valid credentials get 401, and each session and its
    /// streams belong to the principal that created it. Default: no authentication.
    pub fn auth(mut self, authenticator: Arc<dyn Authenticator>) -> Self {
        self.authenticator = Some(authenticator);
        self
    }

    /// The configuration (default: [`ServerConfig::default`]).
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// This node's id, sent as `Tether-Node` on every response (default: the config's
    /// [`node_id`](ServerConfig::node_id), else a random id). It wins over the config's,
    /// whether [`config`](Self::config) is called before or after.
    pub fn node_id(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
        self
    }

    /// Which protocol eras the endpoint serves (default: the config's
    /// [`eras`](ServerConfig::eras), [`Eras::Both`] unless set; docs/CONTRACTS.md#eras). It
    /// wins over the config's, whether [`config`](Self::config) is called before or after.
    pub fn eras(mut self, eras: Eras) -> Self {
        self.eras = Some(eras);
        self
    }

    /// The server, with its background work started: the idle-session sweeper, the stores'
    /// own tasks, the relay inbox, and the answers to requests an earlier process left
    /// unanswered in a durable store (each gets a JSON-RPC error, see [`OrphanReport`]), all
    /// before this returns. Call it inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidPath`], [`BuildError::InvalidNodeId`], or
    /// [`BuildError::Store`] when the store fails while orphans are answered.
    pub async fn build(self) -> Result<Server, BuildError> {
        let mut stores = self
            .stores
            .unwrap_or_else(|| Stores::memory(StoreLimits::default()));
        let store_tasks = stores.start.take();
        let mut config = self.config;
        if let Some(eras) = self.eras {
            config.eras = eras;
        }
        if let Some(node_id) = self.node_id {
            config.node_id = node_id;
        }
        let sealing_key = stores.sessions.sealing_key().await?;
        let mut server = Server::assemble(
            config,
            self.handler,
            stores,
            self.authenticator,
            &sealing_key,
        )?;
        server.answered_at_start = server.answer_orphans().await?;
        let failed = server.state.tasks.fail_orphans().await?;
        if !failed.is_empty() {
            tracing::info!(
                tasks = failed.len(),
                "tasks left running by an earlier process: failed"
            );
        }
        background::start(&server.state, store_tasks);
        Ok(server)
    }
}

/// An MCP Streamable HTTP server.
///
/// ```no_run
/// # use std::sync::Arc;
/// # async fn run(handler: Arc<dyn tether::server::Handler>) -> Result<(), Box<dyn std::error::Error>> {
/// use tether::server::Server;
/// use tether::store::{StoreLimits, Stores};
///
/// let server = Server::builder(handler)
///     .stores(Stores::memory(StoreLimits::default()))
///     .build()
///     .await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
///
/// To mount it in an application of your own, route its [`mcp_service`](Self::mcp_service)
/// and, if you want them, its [`ops_router`](Self::ops_router)'s `/healthz` and `/metrics`.
/// Cheap to clone: clones are the same server (one that mounts it can keep another to shut
/// it down).
#[derive(Clone)]
pub struct Server {
    state: Arc<ServerState>,
    /// What [`ServerBuilder::build`] answered of an earlier process's orphans.
    answered_at_start: OrphanReport,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.state.config)
            .field("node_id", &self.state.node_id)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder for a server whose requests `handler` answers.
    pub fn builder(handler: Arc<dyn Handler>) -> ServerBuilder {
        ServerBuilder {
            handler,
            stores: None,
            authenticator: None,
            config: ServerConfig::default(),
            node_id: None,
            eras: None,
        }
    }

    /// The server's state over `stores`, without background work.
    fn assemble(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
        stores: Stores,
        authenticator: Option<Arc<dyn Authenticator>>,
        sealing_key: &[u8; 32],
    ) -> Result<Self, BuildError> {
        if !config.path.starts_with('/') {
            return Err(BuildError::InvalidPath(config.path));
        }
        let node_id = if config.node_id.is_empty() {
            let id = StreamId::generate();
            HeaderValue::from_str(&id.as_str()[..GENERATED_NODE_ID_LEN])
                .expect("base64url is a valid header value")
        } else {
            HeaderValue::from_str(&config.node_id)
                .map_err(|_| BuildError::InvalidNodeId(config.node_id.clone()))?
        };
        let Stores {
            events,
            sessions,
            tasks,
            relay,
            ..
        } = stores;
        let state = ServerState::new(
            config,
            handler,
            events,
            sessions,
            tasks,
            node_id,
            relay,
            authenticator,
            sealing_key,
        );
        Ok(Self {
            state: Arc::new(state),
            answered_at_start: OrphanReport::default(),
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServerConfig {
        &self.state.config
    }

    /// This node's id (the `Tether-Node` header value).
    #[must_use]
    pub fn node_id(&self) -> &str {
        self.state
            .node_id
            .to_str()
            .expect("checked to be visible ASCII")
    }

    /// What [`ServerBuilder::build`] found an earlier process had left unanswered in the store,
    /// and answered before the server was handed out.
    #[must_use]
    pub fn orphans_answered_at_start(&self) -> OrphanReport {
        self.answered_at_start
    }

    /// Answers the requests an earlier process left unanswered in the event store: each gets a
    /// JSON-RPC error (code -32603, `data.reason` [`SERVER_RESTARTED_REASON`]) on its stream,
    /// which is then completed, so a client resuming it is not left waiting. A built server
    /// has done this already, and goes on doing it for streams a dead node of a shared store
    /// leaves; reports each stream once, so calling it again does nothing.
    ///
    /// # Errors
    ///
    /// When the store is unavailable.
    pub async fn answer_orphans(&self) -> Result<OrphanReport, StoreError> {
        let report = orphans::answer_orphans(&*self.state.events).await?;
        self.state.metrics.orphans_answered(report.requests as u64);
        Ok(report)
    }

    /// The MCP endpoint alone, as a tower service: POST, GET and DELETE (any other method gets
    /// 405), every response carrying `Tether-Node`. It answers on whatever path it is
    /// mounted at, so mount it with `Router::route_service(path, ..)` or
    /// `Router::nest_service(path, ..)`. Services made from one server share its sessions.
    pub fn mcp_service(&self) -> McpService {
        McpService::new(self.endpoint())
    }

    /// The endpoint's routes; [`router`](Self::router) mounts them as they are, without the
    /// boxed future [`McpService`] answers with.
    fn endpoint(&self) -> MethodRouter {
        let counted = axum::middleware::from_fn_with_state(
            Arc::clone(&self.state),
            endpoint::count_responses,
        );
        let endpoint: MethodRouter<Arc<ServerState>> = axum::routing::post(endpoint::post)
            .get(endpoint::get)
            .delete(endpoint::delete);
        endpoint
            .layer::<_, std::convert::Infallible>(counted)
            .layer::<_, std::convert::Infallible>(tower::util::MapResponseLayer::new(
                self.add_node(),
            ))
            .with_state(Arc::clone(&self.state))
    }

    /// The operators' routes, to merge into an application's router if wanted:
    /// `GET /healthz` ([`HEALTHZ_PATH`]) and `GET /metrics` ([`METRICS_PATH`], OpenMetrics
    /// text, behind the same authentication as the MCP endpoint).
    ///
    /// With an OAuth authenticator, also the Protected Resource Metadata (RFC 9728) at
    /// `/.well-known/oauth-protected-resource` followed by [`ServerConfig::path`], and at the
    /// root one, readable cross-origin.
    pub fn ops_router(&self) -> Router {
        let metadata =
            get(endpoint::resource_metadata).options(endpoint::resource_metadata_preflight);
        let suffixed = format!("{RESOURCE_METADATA_PATH}{}", self.state.config.path);
        Router::new()
            .route(HEALTHZ_PATH, get(endpoint::healthz))
            .route(METRICS_PATH, get(endpoint::metrics))
            .route(RESOURCE_METADATA_PATH, metadata.clone())
            .route(&suffixed, metadata)
            .with_state(Arc::clone(&self.state))
            .layer(tower::util::MapResponseLayer::new(self.add_node()))
    }

    /// Everything [`serve`](Self::serve) serves: the MCP endpoint at
    /// [`ServerConfig::path`] and the [`ops_router`](Self::ops_router)'s routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route_service(&self.state.config.path, self.endpoint())
            .merge(self.ops_router())
    }

    /// Starts a graceful shutdown of the streams this server serves: each open SSE connection
    /// writes what is already stored, then a `retry` field, and ends; the streams stay
    /// resumable, so clients come back (to this process restarted, or another node) and
    /// resume. [`serve`](Self::serve) does this when its shutdown signal arrives; call it
    /// yourself when the server is mounted in an application that shuts down on its own.
    pub fn shutdown(&self) {
        self.state.shutdown.cancel();
    }

    /// Tells the handler the server has stopped serving ([`Handler::shutdown`]: a gateway
    /// stops its child processes), after [`shutdown`](Self::shutdown) if it was not called
    /// yet. [`serve`](Self::serve) does this once its connections are closed; call it
    /// yourself after your own server, in which this one is mounted, has stopped.
    pub async fn close(&self) {
        self.shutdown();
        self.state.handler.shutdown().await;
    }

    /// Sets `Tether-Node` on a response.
    fn add_node(&self) -> impl Fn(Response) -> Response + Clone + Send + Sync + 'static {
        let node_id = self.state.node_id.clone();
        move |mut response: Response| {
            response.headers_mut().insert(TETHER_NODE, node_id.clone());
            response
        }
    }

    /// Serves [`router`](Self::router) on `listener` until `shutdown` completes, then shuts
    /// down gracefully: stops accepting, ends every open stream after a `retry` field
    /// (clients come back when the server is up again and resume), waits for in-flight
    /// answers to finish, and returns.
    ///
    /// Connections are bounded by [`ServerConfig::connections`] (see [`ConnectionLimits`]).
    /// The requests a predecessor left unanswered were answered when the server was built.
    ///
    /// # Errors
    ///
    /// None today: accept errors are logged and retried, so this returns `Ok` once shut down;
    /// the `io::Result` leaves room for a listener that fails for good.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let token = self.state.shutdown.clone();
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, path = %self.state.config.path, node = self.node_id(), "serving");
        }
        let router = self.router();
        let limits = self.state.config.connections;
        listen::serve(listener, router, limits, shutdown, move || token.cancel()).await;
        self.close().await;
        Ok(())
    }
}
