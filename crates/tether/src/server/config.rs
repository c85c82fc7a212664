//! How a server behaves: [`ServerConfig`], [`ConnectionLimits`] and every default, each with
//! the reason for its value.
//!
//! Both structs are `#[non_exhaustive]`: start from `Default` and set the fields you need, so
//! that a field added later is not a breaking change. Nothing here acts on the values; the
//! endpoint, the writer loops and the accept loop read them.

use std::time::Duration;
pub use tether_proto::version::Eras;

/// The MCP endpoint's default path, as the spec's examples and the SDKs use it.
pub const DEFAULT_PATH: &str = "/mcp";

/// The health check's path.
pub const HEALTHZ_PATH: &str = "/healthz";

/// The metrics path (Prometheus / OpenMetrics text; see the `metrics` module).
pub const METRICS_PATH: &str = "/metrics";

/// Where an OAuth-protected server serves its Protected Resource Metadata (RFC 9728), the
/// endpoint's path appended for the path-suffixed form.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Default `retry` sent with priming events and before the server closes a connection: one
/// second brings a client back quickly after a restart without a reconnect storm, and equals
/// the first backoff step of tether's client, so both agree.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(1000);

/// Default life of a task from its creation ([`ServerConfig::task_ttl`]): an hour, for a
/// client that comes back after a cut, a crash or a restart to find its result.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(3600);

/// Default [`ServerConfig::task_events_retention`]: as long as a task lives by default, so
/// that the store's retention (`StoreLimits::retention`) is what bounds it unless this is set
/// lower.
pub const DEFAULT_TASK_EVENTS_RETENTION: Duration = DEFAULT_TASK_TTL;

/// Default [`ServerConfig::task_max_event_bytes`]: 1 MiB. A task's events are read again by
/// every reader that comes back, from the store, so they are kept smaller than a session's
/// messages may be; a task's result is its record's, not an event, and is not bound by it.
pub const DEFAULT_TASK_MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Default bound on one principal's tasks ([`ServerConfig::max_tasks_per_principal`]): each
/// holds a record for its TTL, so the bound is what one client can make the store keep.
pub const DEFAULT_MAX_TASKS_PER_PRINCIPAL: usize = 1024;

/// Default polling interval a task suggests ([`ServerConfig::task_poll_interval`]).
pub const DEFAULT_TASK_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Default life of a 2026-07-28 `requestState` ([`ServerConfig::request_state_ttl`]): ten
/// minutes, time for a person to answer an elicitation, short enough that a leaked state is
/// soon useless.
pub const DEFAULT_REQUEST_STATE_TTL: Duration = Duration::from_secs(600);

/// Default interval of keep-alive comments on a quiet stream (docs/CONTRACTS.md#keep-alive: 15 s):
/// below the 30–60 s idle timeouts of common proxies and load balancers, and frequent enough for a
/// client's half-open detection (60 s by default) to never fire on a healthy connection.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);

/// Default idle time after which a session expires (docs/CONTRACTS.md#tether-serve,
/// `--session-idle-secs` 1800): half an hour keeps a session across a laptop lid closing or a
/// coffee break, and a session with a request running or a stream open never counts as idle.
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

/// Default [`ConnectionLimits::header_read_timeout`]: a real client sends its request head at
/// once; ten seconds leave room for a congested link and free a stalled connection soon.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`ConnectionLimits::max_connections`]: room for ten thousand open streams (each
/// SSE stream is a connection) with headroom, well below what a raised file-descriptor limit
/// allows.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

/// Default [`ConnectionLimits::max_headers`]: MCP requests carry about ten; hyper's own
/// default is 100.
pub const DEFAULT_MAX_HEADERS: usize = 64;

/// Limits on connections, before any request reaches the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// How long a new connection may stay silent, and how long a request head may take from
    /// its first byte; then the connection is closed.
    pub header_read_timeout: Duration,
    /// Connections served at once; more are closed when accepted.
    pub max_connections: usize,
    /// Header fields per HTTP/1 request; more get 431.
    pub max_headers: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_headers: DEFAULT_MAX_HEADERS,
        }
    }
}

/// How the server behaves. Every field has a documented default ([`ServerConfig::default`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// ([`ConnectionLimits::default`]). Applied by
    /// [`Server::serve`](crate::server::Server::serve); an
    /// [`mcp_service`](crate::server::Server::mcp_service) mounted in an application's own
    /// server gets that server's limits.
    pub connections: ConnectionLimits,
    /// Maximum of requests in flight per session; more get 429
    /// ([`DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION`]).
    pub max_concurrent_requests_per_session: usize,
    /// This node's id, sent as `Tether-Node` on every response. Empty (the default): a random
    /// id chosen when the server is built. Must be a valid header value (visible ASCII).
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
    /// How long a 2026-07-28 `requestState` stays valid after it is sealed
    /// ([`DEFAULT_REQUEST_STATE_TTL`]): the client's time to answer the questions of an
    /// `input_required` result. Older state is refused like tampered state.
    pub request_state_ttl: Duration,
    /// The `ttlMs` of a task (the tasks extension): how long from its creation it stays
    /// readable ([`DEFAULT_TASK_TTL`]).
    pub task_ttl: Duration,
    /// The `pollIntervalMs` a task suggests ([`DEFAULT_TASK_POLL_INTERVAL`]).
    pub task_poll_interval: Duration,
    /// How long a task's events (`tasks/stream`) stay readable after the task ended
    /// ([`DEFAULT_TASK_EVENTS_RETENTION`]), or until its TTL if that comes first; later a
    /// reader gets `events_gone`. The event store's retention after a stream ends
    /// (`StoreLimits::retention`) bounds it too, and is what holds after a restart of the node
    /// that ran the task.
    pub task_events_retention: Duration,
    /// Largest message a task's handler may emit as one task event, in bytes
    /// ([`DEFAULT_TASK_MAX_EVENT_BYTES`]; never more than [`max_event_bytes`](Self::max_event_bytes)):
    /// a larger one is refused to the handler (`ContextError::Store(StoreError::EventTooLarge)`).
    pub task_max_event_bytes: usize,
    /// Tasks one principal may hold at once (running, or ended and not yet expired)
    /// ([`DEFAULT_MAX_TASKS_PER_PRINCIPAL`]); a call that would make one more is refused with
    /// 429.
    pub max_tasks_per_principal: usize,
    /// Which eras the endpoint serves (`tether serve --eras`; default [`Eras::Both`]):
    /// under `Legacy` a 2026-07-28 request is answered as a 2025-only server answers it (a
    /// dual-era client falls back to a session, where a cut stream resumes); under `Modern`
    /// `initialize` is refused as an unsupported version. docs/CONTRACTS.md#eras.
    pub eras: Eras,
    /// Requests each principal may make (`tether serve --rate-limit`; default none): the
    /// requests for new work of a principal past it get 429 with `Retry-After`
    /// ([`RateLimit`](super::rate_limit::RateLimit)).
    pub rate_limit: Option<super::rate_limit::RateLimit>,
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
            request_state_ttl: DEFAULT_REQUEST_STATE_TTL,
            task_ttl: DEFAULT_TASK_TTL,
            task_poll_interval: DEFAULT_TASK_POLL_INTERVAL,
            task_events_retention: DEFAULT_TASK_EVENTS_RETENTION,
            task_max_event_bytes: DEFAULT_TASK_MAX_EVENT_BYTES,
            max_tasks_per_principal: DEFAULT_MAX_TASKS_PER_PRINCIPAL,
            eras: Eras::Both,
            rate_limit: None,
        }
    }
}
