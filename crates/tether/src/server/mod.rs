//! The MCP Streamable HTTP server: an axum endpoint whose every outgoing message goes
//! through the event store before it reaches the wire.
//!
//! [`Server`] ties a [`ServerConfig`], a [`Handler`] and the two stores together. Its
//! [`router`](Server::router) is an [`axum::Router`] (so also a tower `Service`)
//! that can be mounted into an application's own router; [`serve`](Server::serve) runs it on
//! a listener with graceful shutdown. Protocol versions 2025-03-26, 2025-06-18 and 2025-11-25
//! are served, each request's behaviour decided by its session's negotiated version.
//!
//! Inside: `endpoint` validates requests and manages sessions, `dispatch` runs requests and
//! routes their responses, `context` is what handlers emit through, `writer` is the one SSE
//! writer loop, `error` maps every refusal to its status and body, `origin` is the
//! DNS-rebinding check, `auth` who a request comes from, `metrics` what operators see, `session` the per-session runtime state, `orphans` the answers to
//! requests an earlier process left unanswered, `handoff` the requests for sessions another
//! node of a shared store runs (see [`Server::with_relay`]). Stores are [`crate::store`]'s;
//! JSON-RPC, versions, headers and ids are [`tether_proto`]'s; SSE framing is [`tether_sse`]'s.

pub mod auth;
pub mod context;
mod dispatch;
mod endpoint;
pub mod error;
pub mod handler;
mod handoff;
mod listen;
mod metrics;
mod origin;
mod orphans;
mod session;
mod writer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use axum::routing::{get, post};
use http::HeaderValue;
use tether_proto::headers::TETHER_NODE;
use tether_proto::ids::StreamId;
use tokio::net::TcpListener;

pub use auth::{Authenticator, BearerTokens, TokenFileError};
pub use context::{ContextError, LogLevel, RequestContext, SessionContext, UnknownLogLevel};
pub use dispatch::CANCEL_GRACE;
pub use error::{ResumeRefusal, ServerError};
pub use handler::{Handler, ServerInfo};
pub use handoff::HANDOFF_TIMEOUT;
pub use listen::{
    ConnectionLimits, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HEADERS,
};
pub use orphans::{OrphanReport, SERVER_RESTARTED_REASON};

use crate::store::{
    EventStore, MemoryEventStore, MemorySessionStore, MemoryStoreConfig, SessionStore, StoreError,
};
use endpoint::Shared;

/// The MCP endpoint's default path, as the spec's examples and the SDKs use it.
pub const DEFAULT_PATH: &str = "/mcp";

/// The health check's path.
pub const HEALTHZ_PATH: &str = "/healthz";

/// The metrics path (Prometheus / OpenMetrics text; see the `metrics` module).
pub const METRICS_PATH: &str = "/metrics";

/// Default `retry` sent with priming events and before the server closes a connection: one
/// second brings a client back quickly after a restart without a reconnect storm, and equals
/// the first backoff step of tether's client, so both agree.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(1000);

/// Default interval of keep-alive comments on a quiet stream (CONTRACTS.md: 15 s): below the
/// 30–60 s idle timeouts of common proxies and load balancers, and frequent enough for a
/// client's half-open detection (60 s by default) to never fire on a healthy connection.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);

/// Default idle time after which a session expires (CONTRACTS.md `--session-idle-secs`
/// 1800): half an hour keeps a session across a laptop lid closing or a coffee break, and a
/// session with a request running or a stream open never counts as idle.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(1800);

/// Default maximum of live sessions. Each session's retained events are bounded by the
/// store's per-session cap; this bound keeps the product of the two within a modest server's
/// memory, and turns a client that initializes in a loop into 503s instead of an outage.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// Default maximum POST body: 4 MiB, the limit of the TypeScript SDK, so any message a peer
/// SDK accepts fits (base64 images in sampling results are the large ones).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Default maximum of requests running at once in one session. Far above what an interactive
/// client does, low enough that one session cannot occupy the server's runtime alone.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION: usize = 64;

/// Default [`ServerConfig::body_read_timeout`]: a 4 MiB body arrives in well under that on
/// any working link; a client trickling a body (or never finishing it) is cut off.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ServerConfig::max_event_bytes`]: 16 MiB, what tether's own SSE decoder accepts
/// per event (the Python SDK client accepts 1 MiB; keep large payloads off events for it).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Shortest period of the memory store's retention sweeper, whatever its retention.
const MIN_STORE_SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// Characters of a generated node id: 72 random bits, plenty to tell nodes apart in logs.
const GENERATED_NODE_ID_LEN: usize = 12;

/// How the server behaves. Every field has a documented default ([`ServerConfig::default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The MCP endpoint's path ([`DEFAULT_PATH`]). Must start with `/`.
    pub path: String,
    /// `retry` sent in priming events and before closing a connection ([`DEFAULT_RETRY`]).
    pub retry: Duration,
    /// Keep-alive comment interval on quiet streams ([`DEFAULT_KEEPALIVE`]); zero turns
    /// keep-alives off.
    pub keepalive: Duration,
    /// Answer requests with `application/json` instead of an SSE stream (default `false`).
    /// Related notifications then go to the standalone GET stream; JSON answers cannot be
    /// resumed.
    pub json_response: bool,
    /// Accepted `Origin` values, e.g. `https://app.example.com`; `*` accepts any. Empty (the
    /// default): loopback origins only (`http(s)://localhost|127.0.0.1|[::1]`, any port). A
    /// request without `Origin` is always accepted (non-browser clients send none).
    pub allowed_origins: Vec<String>,
    /// Accepted `Host` values: `name` (any port), `name:port`, or `*` for any. Empty (the
    /// default): `localhost`, `127.0.0.1` and `[::1]` with any port, which is right for a
    /// loopback bind (DNS-rebinding protection on by default); a server reachable under
    /// other names must list them.
    pub allowed_hosts: Vec<String>,
    /// Idle time after which a session expires ([`DEFAULT_SESSION_IDLE`]).
    pub session_idle: Duration,
    /// Maximum of live sessions; further `initialize`s get 503 ([`DEFAULT_MAX_SESSIONS`]).
    pub max_sessions: usize,
    /// Maximum of live sessions of one principal; its further `initialize`s get 503, while
    /// other principals can still start sessions (default [`DEFAULT_MAX_SESSIONS`]: no
    /// separate bound; lower it when several principals share a server).
    pub max_sessions_per_principal: usize,
    /// Maximum POST body in bytes; larger bodies get 413 ([`DEFAULT_MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
    /// Longest time to receive a POST body; slower bodies get 408
    /// ([`DEFAULT_BODY_READ_TIMEOUT`]).
    pub body_read_timeout: Duration,
    /// Largest message sent as one event (or one JSON answer), in bytes
    /// ([`DEFAULT_MAX_EVENT_BYTES`]): a larger response is replaced by a JSON-RPC error
    /// (-32603, `data.reason` `"too_large"`), a larger notification is refused to the handler
    /// (`ContextError::Store(StoreError::EventTooLarge)`).
    pub max_event_bytes: usize,
    /// Limits on connections: request-head timeout, connections at once, header count
    /// ([`ConnectionLimits::default`]). Applied by [`Server::serve`]; a router mounted in an
    /// application's own server gets that server's.
    pub connections: ConnectionLimits,
    /// Maximum of requests in flight per session; more get 429
    /// ([`DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION`]).
    pub max_concurrent_requests_per_session: usize,
    /// This node's id, sent as `Tether-Node` on every response. Empty (the default): a random
    /// id chosen when the server is created. Must be a valid header value (visible ASCII).
    pub node_id: String,
    /// Serve the standalone GET stream and resumption (default `true`). When `false`, GET
    /// gets 405 with `Allow: POST, DELETE`, which tells clients streams are not resumable.
    pub get_streams: bool,
    /// Close every SSE connection (POST streams, the standalone GET stream, resumes) after it
    /// has been open this long, with a `retry` field first; the stream stays resumable and the
    /// client reconnects with `Last-Event-ID` (SEP-1699 "polling", `tether serve
    /// --poll-after-secs`). `None` (the default): connections stay open until their stream
    /// ends. Applies to sessions that negotiated 2025-11-25 only; older clients are not
    /// expected to reconnect to a POST stream closed before its response. Use it to bound
    /// how long a connection holds a proxy slot or a load balancer's affinity.
    pub poll_after: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            path: DEFAULT_PATH.to_owned(),
            retry: DEFAULT_RETRY,
            keepalive: DEFAULT_KEEPALIVE,
            json_response: false,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle: DEFAULT_SESSION_IDLE,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            connections: ConnectionLimits::default(),
            max_concurrent_requests_per_session: DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION,
            node_id: String::new(),
            get_streams: true,
            poll_after: None,
        }
    }
}

/// An MCP Streamable HTTP server.
///
/// ```no_run
/// # use std::sync::Arc;
/// # async fn run(handler: Arc<dyn tether::server::Handler>) -> std::io::Result<()> {
/// use tether::server::{Server, ServerConfig};
///
/// let server = Server::with_memory_stores(ServerConfig::default(), handler);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
pub struct Server {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.shared.config)
            .field("node_id", &self.shared.node_id)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server over the given stores.
    ///
    /// # Panics
    ///
    /// If `config.node_id` is not a valid header value, or `config.path` does not start with
    /// `/` (both are programming or configuration errors to catch at startup).
    pub fn new(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
        events: Arc<dyn EventStore>,
        sessions: Arc<dyn SessionStore>,
    ) -> Self {
        assert!(
            config.path.starts_with('/'),
            "ServerConfig::path must start with '/': {:?}",
            config.path
        );
        let node_id = if config.node_id.is_empty() {
            let id = StreamId::generate();
            HeaderValue::from_str(&id.as_str()[..GENERATED_NODE_ID_LEN])
                .expect("base64url is a valid header value")
        } else {
            HeaderValue::from_str(&config.node_id).unwrap_or_else(|_| {
                panic!(
                    "ServerConfig::node_id must be visible ASCII: {:?}",
                    config.node_id
                )
            })
        };
        Self {
            shared: Arc::new(Shared::new(config, handler, events, sessions, node_id)),
        }
    }

    /// Lets this server share its stores with other nodes: requests for a session whose
    /// handler runs on another node are handed to that node through `relay` (see
    /// [`crate::store::relay`]), and the sessions of a node that is gone get 404 on POST.
    /// Without a relay, every session found in the store is served here.
    ///
    /// # Panics
    ///
    /// If a relay was already set.
    #[must_use]
    pub fn with_relay(self, relay: Arc<dyn crate::store::relay::Relay>) -> Self {
        assert!(
            self.shared.relay.set(relay).is_ok(),
            "Server::with_relay called twice"
        );
        self
    }

    /// Authenticates every request on the MCP path with `authenticator` (see [`auth`]):
    /// requests without valid credentials get 401, and each session and its streams belong
    /// to the principal that created it.
    ///
    /// # Panics
    ///
    /// If an authenticator was already set.
    #[must_use]
    pub fn with_authenticator(self, authenticator: Arc<dyn Authenticator>) -> Self {
        assert!(
            self.shared.authenticator.set(authenticator).is_ok(),
            "Server::with_authenticator called twice"
        );
        self
    }

    /// A server over in-memory stores with their default limits; the event store's retention
    /// sweeper starts with the server. (With [`Server::new`] and a `MemoryEventStore` of your
    /// own, call its `spawn_sweeper` yourself.)
    ///
    /// # Panics
    ///
    /// As for [`Server::new`].
    pub fn with_memory_stores(config: ServerConfig, handler: Arc<dyn Handler>) -> Self {
        Self::with_memory_stores_configured(config, handler, MemoryStoreConfig::default())
    }

    /// As [`with_memory_stores`](Self::with_memory_stores), with the event store's bounds
    /// (per-session caps, retention) from `store`.
    ///
    /// # Panics
    ///
    /// As for [`Server::new`].
    pub fn with_memory_stores_configured(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
        store: MemoryStoreConfig,
    ) -> Self {
        let events = Arc::new(MemoryEventStore::new(store));
        let server = Self::new(
            config,
            handler,
            Arc::clone(&events) as Arc<dyn EventStore>,
            Arc::new(MemorySessionStore::new()),
        );
        // Completed streams of sessions nobody touches expire only through the store's own
        // sweeper; a tenth of the retention is the period the store recommends.
        let period = (events.config().retention / 10).max(MIN_STORE_SWEEP_PERIOD);
        server.shared.set_store_tasks(Box::new(move || {
            drop(events.spawn_sweeper(period));
        }));
        server
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }

    /// This node's id (the `Tether-Node` header value).
    #[must_use]
    pub fn node_id(&self) -> &str {
        self.shared
            .node_id
            .to_str()
            .expect("checked to be visible ASCII")
    }

    /// Answers the requests an earlier process left unanswered in the event store: each gets a
    /// JSON-RPC error (code -32603, `data.reason` [`SERVER_RESTARTED_REASON`]) on its stream,
    /// which is then completed, so a client resuming it is not left waiting. [`serve`] does
    /// this before accepting connections; call it yourself before serving
    /// [`router`](Self::router) over a durable store. Reports each stream once, so calling it
    /// again does nothing.
    ///
    /// # Errors
    ///
    /// When the store is unavailable.
    ///
    /// [`serve`]: Self::serve
    pub async fn answer_orphans(&self) -> Result<OrphanReport, StoreError> {
        let report = orphans::answer_orphans(&*self.shared.events).await?;
        self.shared.metrics.orphans_answered(report.requests as u64);
        Ok(report)
    }

    /// The endpoint as an axum router: POST, GET and DELETE on the configured path,
    /// `GET /healthz` and `GET /metrics`, every response carrying `Tether-Node`. Mount it in an application's
    /// router with `Router::merge`, or use it directly as a tower `Service`.
    ///
    /// The idle-session sweeper starts with the first request. Routers made from one server
    /// share its sessions.
    pub fn router(&self) -> Router {
        let node_id = self.shared.node_id.clone();
        let add_node = move |mut response: Response| {
            response.headers_mut().insert(TETHER_NODE, node_id.clone());
            response
        };
        let counted = axum::middleware::from_fn_with_state(
            Arc::clone(&self.shared),
            metrics::count_responses,
        );
        Router::new()
            .route(
                &self.shared.config.path,
                post(endpoint::post)
                    .get(endpoint::get)
                    .delete(endpoint::delete)
                    .layer(counted),
            )
            .route(HEALTHZ_PATH, get(endpoint::healthz))
            .route(METRICS_PATH, get(metrics::scrape))
            .with_state(Arc::clone(&self.shared))
            .layer(tower::util::MapResponseLayer::new(add_node))
    }

    /// Serves on `listener` until `shutdown` completes, then shuts down gracefully: stops
    /// accepting, ends every open stream after a `retry` field (clients come back when the
    /// server is up again and resume), waits for in-flight answers to finish, and returns.
    /// Before the first connection is accepted, requests an earlier process left unanswered
    /// are answered ([`answer_orphans`](Self::answer_orphans)).
    ///
    /// Connections are bounded by [`ServerConfig::connections`] (see [`ConnectionLimits`]).
    ///
    /// # Errors
    ///
    /// When the store is unavailable at start (accept errors are logged and retried).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.answer_orphans().await.map_err(|error| {
            std::io::Error::other(format!("answering orphaned requests: {error}"))
        })?;
        self.shared.ensure_sweeper();
        let token = self.shared.shutdown.clone();
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, path = %self.shared.config.path, node = self.node_id(), "serving");
        }
        let router = self.router();
        let limits = self.shared.config.connections;
        listen::serve(listener, router, limits, shutdown, move || token.cancel()).await;
        self.shared.handler.shutdown().await;
        Ok(())
    }
}
