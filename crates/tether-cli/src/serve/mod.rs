//! `tether serve`: the built-in demo server, or a gateway to a stdio server (`-- CMD`), over
//! resumable Streamable HTTP.
//!
//! This module turns the flags docs/CONTRACTS.md#tether-serve pins into a
//! [`tether::server::ServerConfig`], binds the listener, prints the one ready line on stdout
//! (`tether: serving http://HOST:PORT/PATH`, which tests and scripts wait for), and runs
//! [`Server::serve`] until SIGINT or SIGTERM, then shuts down gracefully and exits 0. It holds
//! no server logic: everything here is a library call a user can make too.
//!
//! The store is SQLite by default, at `<data dir>/tether.db`, so sessions and events survive a
//! restart; the data dir is `$TETHER_DATA_DIR`, else `$XDG_DATA_HOME/tether`, else
//! `~/.local/share/tether`, created if missing and named in the log. Building the server,
//! before the ready line, answers the requests a killed predecessor left unanswered
//! ([`ServerBuilder::build`](tether::server::ServerBuilder::build)).
//!
//! With `-- CMD ARGS...` it is a gateway: each session runs its own `CMD` as a stdio MCP
//! server ([`tether::gateway`]). With `--config FILE` it federates the file's upstreams
//! behind the one endpoint (`config_file`), reloading them on SIGHUP and when the file
//! changes; a file that does not load is logged and the upstreams in use are kept.
//!
//! `--store redis://HOST:PORT[/DB]` keeps everything in Redis, named by `--node-id` (default
//! `default`, right for one node; every node of a group needs its own).
//!
//! Without a gateway command it serves a built-in demo: `--demo count` (the default; tools
//! `count` and `echo`) or `--demo conformance` (the official conformance suite's fixtures,
//! `tether_conformance::fixtures`, with `count` and `echo` too; feature `conformance`, on
//! by default).
//!
//! `--auth-token-file FILE` requires `Authorization: Bearer <token>` on every request to the
//! MCP path ([`tether::server::BearerTokens`]); an unreadable or malformed file is a usage
//! error (exit 2), found before anything is bound.

use std::{
    ffi::OsString,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use tether::{
    demo::DemoHandler,
    gateway::{FederatedGateway, GatewayConfig, StdioGateway},
    server::oauth::{IntrospectionConfig, OAuthConfig, OAuthResource},
    server::{Authenticator, BearerTokens, Eras, Handler, RateLimit, Server, ServerConfig},
    store::{StoreLimits, Stores, redis, sqlite},
};
use tokio::{net::TcpListener, sync::oneshot};
use tracing::{error, info};

use crate::UsageError;

pub(crate) mod config_file;

/// How often `--config`'s file is read to see whether it changed.
const CONFIG_POLL: Duration = Duration::from_secs(1);

/// How long a graceful shutdown may take before the process gives up on it and exits 1. The
/// server only has to append `retry` to each open stream and close it, which takes
/// milliseconds; the bound exists so that a stuck connection cannot keep a stopped server (and
/// its port) alive until someone sends SIGKILL.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The `Host` allow-list entry that accepts any host.
const ANY_HOST: &str = "*";

/// The environment variable that names the data directory (the default store's home).
const DATA_DIR_ENV: &str = "TETHER_DATA_DIR";

/// The default store's file name inside the data directory (docs/CONTRACTS.md#tether-serve).
const DEFAULT_DB_FILE: &str = "tether.db";

/// How long the runtime may take to drop its remaining tasks after `serve` returned.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// Arguments of `tether serve` (docs/CONTRACTS.md#tether-serve).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (`HOST:PORT`); port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    bind: String,

    /// The MCP endpoint's path.
    #[arg(long, value_name = "PATH", default_value = "/mcp", value_parser = parse_path)]
    path: String,

    /// Where sessions and events are kept: `memory`, `sqlite:PATH` or
    /// `redis://HOST:PORT[/DB]`. Default: `sqlite:<data dir>/tether.db`,
    /// the data dir being $TETHER_DATA_DIR, else $XDG_DATA_HOME/tether, else
    /// ~/.local/share/tether.
    #[arg(long, value_name = "STORE", value_parser = parse_store)]
    store: Option<StoreSpec>,

    /// How SQLite commits reach the disk (WAL mode): `normal` (synchronous = NORMAL: a
    /// commit survives the process being killed; the last commits before a power loss or
    /// OS crash may be lost) or `full` (synchronous = FULL: every commit is synced, so it
    /// survives power loss too). Either way nothing is sent before it is committed, so a
    /// crash never takes back an event a client saw. Ignored by the other stores.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Normal)]
    durability: DurabilityArg,

    /// The SSE `retry` (milliseconds) sent on every stream: how long clients wait before
    /// reconnecting.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    retry_ms: u64,

    /// Which protocol eras to serve on the endpoint. `both`: 2025 sessions beside 2026-07-28
    /// requests. `legacy`: 2025 sessions only; a 2026-07-28 request is answered as a
    /// 2025-only server answers it, so dual-era clients (the TypeScript SDK v2 in `auto`
    /// mode, the Python SDK 2.3, fastmcp 4.1) fall back to a session, where a cut stream
    /// resumes; choose it when such clients make plain (non-task) calls, which a cut cancels
    /// in the 2026-07-28 era. `modern`: 2026-07-28 only; `initialize` is refused as an
    /// unsupported version naming 2026-07-28.
    #[arg(long, value_name = "ERAS", default_value = "both", value_parser = parse_eras)]
    eras: Eras,

    /// Seconds between keep-alive comments on idle streams.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 15,
        value_parser = parse_positive
    )]
    keepalive_secs: u64,

    /// Answer requests with one `application/json` body instead of an SSE stream.
    #[arg(long)]
    json_response: bool,

    /// An `Origin` to accept (repeatable; `*` accepts any). Without it, loopback origins
    /// only; giving any replaces that default. Requests without `Origin` are always accepted.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,

    /// A `Host` to accept: `name`, `name:port` or `*` (repeatable). Without it, loopback
    /// names on a loopback bind and any host otherwise; giving any replaces that default.
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,

    /// Seconds without activity after which a session expires.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1800,
        value_parser = parse_positive
    )]
    session_idle_secs: u64,

    /// Require bearer tokens from this file: one `TOKEN` or `PRINCIPAL:TOKEN` per line; each
    /// principal sees only its own sessions. Not with `--oauth-issuer`.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,

    /// Protect the endpoint as an OAuth 2.1 resource: accept JWT access tokens this
    /// authorization server issued for `--oauth-resource` (repeatable; kept exactly as given;
    /// its keys found through RFC 8414 metadata, then OpenID discovery). The principal is the
    /// token's `iss` and `sub`. Not with `--auth-token-file`.
    #[arg(long = "oauth-issuer", value_name = "URL")]
    oauth_issuers: Vec<String>,

    /// The canonical URI clients use for this endpoint: tokens must name it in `aud`, and
    /// the Protected Resource Metadata says it. Default: `http://<bound address><--path>`,
    /// which is right only without a proxy in front; behind one, give the public URL.
    #[arg(long, value_name = "URL", requires = "oauth_issuers")]
    oauth_resource: Option<String>,

    /// A scope every request's token needs (repeatable); a token without it gets 403 with
    /// `error="insufficient_scope"`.
    #[arg(long = "oauth-scope", value_name = "SCOPE", requires = "oauth_issuers")]
    oauth_scopes: Vec<String>,

    /// `TOOL=SCOPE`: a scope a `tools/call` of TOOL needs besides `--oauth-scope`'s
    /// (repeatable); `tools/list` still lists the tool.
    #[arg(
        long = "oauth-tool-scope",
        value_name = "TOOL=SCOPE",
        requires = "oauth_issuers",
        value_parser = parse_tool_scope
    )]
    oauth_tool_scopes: Vec<(String, String)>,

    /// Seconds of clock skew allowed on a token's `exp` and `nbf` (at most 300).
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "oauth_issuers",
          value_parser = clap::value_parser!(u64).range(0..=300))]
    oauth_leeway_secs: u64,

    /// The least seconds between two fetches of an issuer's keys, when a token names a key
    /// the cache lacks (a rotation); a bound, so forged key ids cannot flood the issuer.
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "oauth_issuers",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    oauth_keys_refetch_secs: u64,

    /// Accept opaque access tokens (anything that is not a JWT) by asking this RFC 7662
    /// introspection endpoint of the issuer about them; the answer must be active, name
    /// `--oauth-resource` in `aud` and an `--oauth-issuer` (or none, with one issuer).
    #[arg(
        long,
        value_name = "URL",
        requires_all = ["oauth_issuers", "oauth_introspection_client_id", "oauth_introspection_secret_file"]
    )]
    oauth_introspection_url: Option<String>,

    /// The client id this server introspects as (HTTP Basic authentication).
    #[arg(long, value_name = "ID", requires = "oauth_introspection_url")]
    oauth_introspection_client_id: Option<String>,

    /// A file holding that client's secret (one line).
    #[arg(long, value_name = "FILE", requires = "oauth_introspection_url")]
    oauth_introspection_secret_file: Option<PathBuf>,

    /// The longest seconds an introspection answer is trusted (never past the token's
    /// `exp`): how long a revoked token can go on working. 0 asks every time.
    #[arg(long, value_name = "SECS", default_value_t = 60, requires = "oauth_introspection_url",
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    oauth_introspection_cache_secs: u64,

    /// Close long-lived stream connections after N seconds, with `retry` first; clients
    /// reconnect and resume (SEP-1699 polling, sessions on 2025-11-25).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    poll_after_secs: Option<u64>,

    /// The `Tether-Node` header value (default: a random id chosen at start).
    #[arg(long, value_name = "ID", value_parser = parse_node_id)]
    node_id: Option<String>,

    /// Which built-in demo to serve when no gateway command is given.
    #[arg(long, value_enum, value_name = "DEMO", default_value_t = Demo::Count)]
    demo: Demo,

    /// With `--store redis://`: seconds after which the other nodes take this node for dead
    /// if it stops renewing its lease, and answer its open requests with errors.
    #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = parse_positive)]
    node_lease_secs: u64,

    /// Live sessions at most; further `initialize`s get 503 with `Retry-After`.
    #[arg(long, value_name = "N", default_value_t = tether::server::DEFAULT_MAX_SESSIONS, value_parser = parse_positive_usize)]
    max_sessions: usize,

    /// Live sessions of one principal (a bearer token's) at most; its further `initialize`s
    /// get 503 while other principals can still start sessions. Default: `--max-sessions`.
    #[arg(long, value_name = "N", value_parser = parse_positive_usize)]
    max_sessions_per_principal: Option<usize>,

    /// Requests each principal may make, `N/s`, `N/m`, `N/h` or `N/SECSs` (`10/s`, `600/m`,
    /// `5/30s`), as many at once: past it, a POST of requests for new work gets 429 with
    /// `Retry-After`, which tether's client and the SDKs wait out. `initialize`,
    /// `server/discover`, `ping`, `tasks/*` and resumes are free. Default: no limit.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate_limit)]
    rate_limit: Option<RateLimit>,

    /// Requests in flight per session at most; more get 429 with `Retry-After`.
    #[arg(long, value_name = "N", default_value_t = tether::server::DEFAULT_MAX_CONCURRENT_REQUESTS_PER_SESSION, value_parser = parse_positive_usize)]
    max_requests_per_session: usize,

    /// Tasks (2026-07-28 tasks extension) one principal may hold at once, running or ended and
    /// not yet expired; a call that would make one more gets 429.
    #[arg(long, value_name = "N", default_value_t = tether::server::DEFAULT_MAX_TASKS_PER_PRINCIPAL, value_parser = parse_positive_usize)]
    max_tasks_per_principal: usize,

    /// Seconds a task (2026-07-28 tasks extension) lives from its creation: its record, result
    /// and events are readable until then, across restarts with a durable store; it is
    /// unknown after. At most a week.
    #[arg(long, value_name = "SECS", default_value_t = tether::server::DEFAULT_TASK_TTL.as_secs(), value_parser = parse_task_ttl)]
    task_ttl_secs: u64,

    /// Seconds a task's events (`tasks/stream`) stay readable after the task ended (or until
    /// its TTL, or the store's `--retention-secs`, whichever comes first); later a reader gets
    /// `events_gone`.
    #[arg(long, value_name = "SECS", default_value_t = tether::server::DEFAULT_TASK_EVENTS_RETENTION.as_secs(), value_parser = parse_task_ttl)]
    task_events_retention_secs: u64,

    /// Largest message a task's handler may emit as one task event, in bytes (at most
    /// `--max-event-bytes`); a larger one is refused to the handler. A task's events per task
    /// are bounded by `--max-events-per-session` and `--max-bytes-per-session`: each task's
    /// events are a session of their own in the event store.
    #[arg(long, value_name = "BYTES", default_value_t = tether::server::DEFAULT_TASK_MAX_EVENT_BYTES, value_parser = parse_positive_usize)]
    task_max_event_bytes: usize,

    /// Largest POST body in bytes; larger ones get 413.
    #[arg(long, value_name = "BYTES", default_value_t = tether::server::DEFAULT_MAX_BODY_BYTES, value_parser = parse_positive_usize)]
    max_body_bytes: usize,

    /// Largest message sent as one event, in bytes; a larger response becomes a JSON-RPC
    /// error (-32603, reason `too_large`).
    #[arg(long, value_name = "BYTES", default_value_t = tether::server::DEFAULT_MAX_EVENT_BYTES, value_parser = parse_positive_usize)]
    max_event_bytes: usize,

    /// Events a session may retain at most (all its streams); the oldest are evicted first,
    /// and a resume that needed them gets `expired`.
    #[arg(long, value_name = "N", default_value_t = StoreLimits::DEFAULT_MAX_EVENTS_PER_SESSION, value_parser = parse_positive_usize)]
    max_events_per_session: usize,

    /// Bytes of events a session may retain at most.
    #[arg(long, value_name = "BYTES", default_value_t = StoreLimits::DEFAULT_MAX_BYTES_PER_SESSION, value_parser = parse_positive_usize)]
    max_bytes_per_session: usize,

    /// Streams a session may hold at most (completed ones are evicted first); then 429.
    #[arg(long, value_name = "N", default_value_t = StoreLimits::DEFAULT_MAX_STREAMS_PER_SESSION, value_parser = parse_positive_usize)]
    max_streams_per_session: usize,

    /// Seconds a completed stream stays resumable.
    #[arg(long, value_name = "SECS", default_value_t = StoreLimits::DEFAULT_RETENTION.as_secs(), value_parser = parse_positive)]
    retention_secs: u64,

    /// Seconds a POST body may take to arrive; slower ones get 408.
    #[arg(long, value_name = "SECS", default_value_t = tether::server::DEFAULT_BODY_READ_TIMEOUT.as_secs(), value_parser = parse_positive)]
    body_timeout_secs: u64,

    /// Seconds a new connection may stay silent, and a request head may take; then the
    /// connection is closed (slowloris protection).
    #[arg(long, value_name = "SECS", default_value_t = tether::server::DEFAULT_HEADER_READ_TIMEOUT.as_secs(), value_parser = parse_positive)]
    header_timeout_secs: u64,

    /// Connections served at once; more are closed as soon as they are accepted.
    #[arg(long, value_name = "N", default_value_t = tether::server::DEFAULT_MAX_CONNECTIONS, value_parser = parse_positive_usize)]
    max_connections: usize,

    /// Gateway mode: how long the stdio server may take to answer `initialize`, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30,
        value_parser = parse_positive
    )]
    init_timeout_secs: u64,

    /// Serve this stdio MCP server instead of the demo: one process per session.
    #[arg(last = true, value_name = "CMD ARGS")]
    gateway: Vec<OsString>,

    /// Federate the upstreams of this TOML file behind the endpoint (docs/GATEWAY.md): its
    /// `[[upstream]]` tables, and in `[serve]` any of these flags by long name, the command
    /// line winning. Reloaded on SIGHUP and when the file changes. Not with `-- CMD`.
    #[arg(long, value_name = "FILE", conflicts_with = "gateway")]
    config: Option<PathBuf>,
}

/// The built-in demos of `--demo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Demo {
    /// The `count` and `echo` tools.
    Count,
    /// The MCP conformance suite's fixtures, plus `count` and `echo`.
    #[cfg(feature = "conformance")]
    Conformance,
}

/// `--durability`: [`sqlite::Durability`] by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityArg {
    /// `synchronous = NORMAL` (the default).
    Normal,
    /// `synchronous = FULL`.
    Full,
}

/// A parsed `--store` value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreSpec {
    Memory,
    Sqlite(PathBuf),
    Redis(String),
}

fn parse_positive(value: &str) -> Result<u64, String> {
    // Zero would mean a keep-alive timer that never waits, sessions that expire at once, or
    // connections closed as soon as they open.
    match value.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(error) => Err(error.to_string()),
    }
}

/// A task TTL: 1 second to a week (a task holds a record, and its principal's limit, for all of
/// it).
fn parse_task_ttl(value: &str) -> Result<u64, String> {
    const WEEK: u64 = 7 * 24 * 3600;
    match parse_positive(value)? {
        n if n > WEEK => Err(format!("must be at most {WEEK} (a week)")),
        n => Ok(n),
    }
}

/// A count or size that must be at least 1 (a limit of 0 would refuse everything).
fn parse_positive_usize(value: &str) -> Result<usize, String> {
    let n = parse_positive(value)?;
    usize::try_from(n).map_err(|error| error.to_string())
}

fn parse_store(value: &str) -> Result<StoreSpec, String> {
    if value == "memory" {
        return Ok(StoreSpec::Memory);
    }
    if let Some(path) = value.strip_prefix("sqlite:") {
        if path.is_empty() {
            return Err("`sqlite:` needs a database path, e.g. sqlite:./tether.db".to_owned());
        }
        return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
    }
    if value.starts_with("redis://") || value.starts_with("rediss://") {
        return Ok(StoreSpec::Redis(value.to_owned()));
    }
    Err("expected `memory`, `sqlite:PATH` or `redis://HOST:PORT[/DB]`".to_owned())
}

fn parse_path(value: &str) -> Result<String, String> {
    // The path becomes a route and part of the advertised URL: one plain absolute path, no
    // query, fragment or route-pattern syntax.
    let plain =
        value.bytes().all(|b| b.is_ascii_graphic()) && !value.contains(['?', '#', '{', '}', '*']);
    if !value.starts_with('/') || !plain {
        return Err("expected an absolute path such as /mcp".to_owned());
    }
    Ok(value.to_owned())
}

/// `TOOL=SCOPE` of `--oauth-tool-scope`.
fn parse_tool_scope(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((tool, scope)) if !tool.is_empty() && !scope.is_empty() && !scope.contains(' ') => {
            Ok((tool.to_owned(), scope.to_owned()))
        }
        _ => Err(format!("expected TOOL=SCOPE, got {value:?}")),
    }
}

/// `N/PERIOD` of `--rate-limit`.
fn parse_rate_limit(value: &str) -> Result<RateLimit, String> {
    let shape =
        || format!("expected N/s, N/m, N/h or N/SECSs (such as 10/s or 5/30s), got {value:?}");
    let (requests, period) = value.split_once('/').ok_or_else(shape)?;
    let requests: u32 = requests.parse().map_err(|_| shape())?;
    let period = match period {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        secs => Duration::from_secs(
            secs.strip_suffix('s')
                .and_then(|secs| secs.parse::<u64>().ok())
                .ok_or_else(shape)?,
        ),
    };
    if requests == 0 || period.is_zero() {
        return Err(format!(
            "{value:?}: the rate must allow at least one request, in a period of at least 1 s"
        ));
    }
    Ok(RateLimit::per(requests, period))
}

fn parse_eras(value: &str) -> Result<Eras, String> {
    value
        .parse()
        .map_err(|error: tether::proto::version::UnknownEras| error.to_string())
}

fn parse_node_id(value: &str) -> Result<String, String> {
    // It is sent as the `Tether-Node` header value on every response.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("expected visible ASCII characters without spaces".to_owned());
    }
    Ok(value.to_owned())
}

impl ServeArgs {
    /// The authentication these flags ask for: the bearer tokens of `--auth-token-file`,
    /// read before anything is bound, or the OAuth resource server, built once the bound
    /// address (the default resource) is known.
    fn authentication(&self) -> Result<Authentication, UsageError> {
        if !self.oauth_issuers.is_empty() {
            if self.auth_token_file.is_some() {
                return Err(UsageError(
                    "--auth-token-file and --oauth-issuer are two ways to authenticate; give one"
                        .to_owned(),
                ));
            }
            let mut config = OAuthConfig::new(
                self.oauth_issuers.clone(),
                self.oauth_resource.clone().unwrap_or_default(),
            );
            config.required_scopes.clone_from(&self.oauth_scopes);
            for (tool, scope) in &self.oauth_tool_scopes {
                config
                    .tool_scopes
                    .entry(tool.clone())
                    .or_default()
                    .push(scope.clone());
            }
            config.leeway = Duration::from_secs(self.oauth_leeway_secs);
            config.refetch_interval = Duration::from_secs(self.oauth_keys_refetch_secs);
            config.introspection = self.introspection()?;
            return Ok(Authentication::OAuth(Box::new(config)));
        }
        let Some(path) = &self.auth_token_file else {
            return Ok(Authentication::None);
        };
        let tokens = BearerTokens::from_file(path)
            .map_err(|error| UsageError(format!("--auth-token-file: {error}")))?;
        info!(principals = ?tokens.principals(), "bearer authentication on");
        Ok(Authentication::Ready(Arc::new(tokens)))
    }

    /// The introspection endpoint and the credentials these flags name, the secret read now.
    fn introspection(&self) -> Result<Option<IntrospectionConfig>, UsageError> {
        let (Some(url), Some(client_id), Some(secret_file)) = (
            &self.oauth_introspection_url,
            &self.oauth_introspection_client_id,
            &self.oauth_introspection_secret_file,
        ) else {
            return Ok(None);
        };
        let secret =
            crate::remote::read_secret_file("--oauth-introspection-secret-file", secret_file)?;
        let mut config = IntrospectionConfig::new(url.clone(), client_id.clone(), secret);
        config.cache_for = Duration::from_secs(self.oauth_introspection_cache_secs);
        Ok(Some(config))
    }

    /// The per-session caps and retention these flags set.
    fn store_bounds(&self) -> StoreLimits {
        let mut limits = StoreLimits::default();
        limits.retention = Duration::from_secs(self.retention_secs);
        limits.max_events_per_session = self.max_events_per_session;
        limits.max_bytes_per_session = self.max_bytes_per_session;
        limits.max_streams_per_session = self.max_streams_per_session;
        limits
    }

    /// What serves the sessions: the federation of `--config`, the stdio gateway when a
    /// command is given, else the demo.
    fn handler(&self) -> Result<Served, UsageError> {
        if let Some(path) = &self.config {
            let loaded = config_file::load(path)?;
            let gateway = FederatedGateway::new(loaded.federation.clone())
                .map_err(|error| UsageError(format!("{}: {error}", path.display())))?;
            let gateway = Arc::new(gateway);
            return Ok(Served {
                handler: Arc::clone(&gateway) as Arc<dyn Handler>,
                description: format!(
                    "gateway of {}: {}",
                    path.display(),
                    gateway.upstream_names().join(", ")
                ),
                reload: Some(Reload {
                    path: path.clone(),
                    gateway,
                    loaded,
                }),
                authentication: Authentication::None,
            });
        }
        let (handler, description): (Arc<dyn Handler>, String) = match self.gateway.split_first() {
            Some((program, args)) => {
                let mut config = GatewayConfig::new(program.clone(), args.iter().cloned());
                config.initialize_timeout = Duration::from_secs(self.init_timeout_secs);
                let shown = self
                    .gateway
                    .iter()
                    .map(|arg| arg.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ");
                (
                    Arc::new(StdioGateway::new(config)),
                    format!("gateway: {shown}"),
                )
            }
            None => match self.demo {
                Demo::Count => (Arc::new(DemoHandler::new()), "demo count".to_owned()),
                #[cfg(feature = "conformance")]
                Demo::Conformance => (
                    Arc::new(tether_conformance::fixtures::ConformanceHandler::new()),
                    "demo conformance".to_owned(),
                ),
            },
        };
        Ok(Served {
            handler,
            description,
            reload: None,
            authentication: Authentication::None,
        })
    }

    /// The server configuration these flags describe; unset flags keep the library defaults.
    fn server_config(&self) -> ServerConfig {
        let mut config = ServerConfig::default();
        config.path.clone_from(&self.path);
        config.retry = Duration::from_millis(self.retry_ms);
        config.keepalive = Duration::from_secs(self.keepalive_secs);
        config.json_response = self.json_response;
        config.eras = self.eras;
        config.allowed_origins.clone_from(&self.allowed_origins);
        config.allowed_hosts.clone_from(&self.allowed_hosts);
        config.session_idle = Duration::from_secs(self.session_idle_secs);
        config.poll_after = self.poll_after_secs.map(Duration::from_secs);
        config.max_sessions = self.max_sessions;
        config.max_sessions_per_principal =
            self.max_sessions_per_principal.unwrap_or(self.max_sessions);
        config.max_concurrent_requests_per_session = self.max_requests_per_session;
        config.max_tasks_per_principal = self.max_tasks_per_principal;
        config.rate_limit = self.rate_limit;
        config.task_ttl = Duration::from_secs(self.task_ttl_secs);
        config.task_events_retention = Duration::from_secs(self.task_events_retention_secs);
        config.task_max_event_bytes = self.task_max_event_bytes;
        config.max_body_bytes = self.max_body_bytes;
        config.max_event_bytes = self.max_event_bytes;
        config.body_read_timeout = Duration::from_secs(self.body_timeout_secs);
        config.connections.header_read_timeout = Duration::from_secs(self.header_timeout_secs);
        config.connections.max_connections = self.max_connections;
        if let Some(node_id) = &self.node_id {
            config.node_id.clone_from(node_id);
        }
        config
    }
}

/// Runs `tether serve` to completion: 0 after a graceful shutdown.
pub(crate) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let authentication = args.authentication()?;
    let config = args.server_config();
    let store = Store {
        spec: match args.store.clone() {
            Some(store) => store,
            None => StoreSpec::Sqlite(default_database()?),
        },
        bounds: args.store_bounds(),
        node_lease: Duration::from_secs(args.node_lease_secs),
        durability: match args.durability {
            DurabilityArg::Normal => sqlite::Durability::Normal,
            DurabilityArg::Full => sqlite::Durability::Full,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut served = args.handler()?;
    served.authentication = authentication;
    let result = runtime.block_on(serve(&args.bind, config, &store, served));
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result.map(|()| ExitCode::SUCCESS)
}

/// `<data dir>/tether.db`, creating the data dir.
fn default_database() -> anyhow::Result<PathBuf> {
    let non_empty = |key: &str| std::env::var_os(key).filter(|value| !value.is_empty());
    let dir = if let Some(dir) = non_empty(DATA_DIR_ENV) {
        PathBuf::from(dir)
    } else if let Some(dir) = non_empty("XDG_DATA_HOME").filter(|dir| Path::new(dir).is_absolute())
    {
        PathBuf::from(dir).join("tether")
    } else if let Some(home) = non_empty("HOME") {
        PathBuf::from(home).join(".local/share/tether")
    } else {
        bail!("no data directory: set {DATA_DIR_ENV} or HOME, or pass --store");
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    info!(data_dir = %dir.display(), "data directory");
    Ok(dir.join(DEFAULT_DB_FILE))
}

/// The server over the store `spec` names, built the way an application builds one.
async fn build_server(
    store: &Store,
    config: ServerConfig,
    handler: Arc<dyn Handler>,
    authenticator: Option<Arc<dyn Authenticator>>,
) -> anyhow::Result<Server> {
    let limits = store.bounds.clone();
    let stores = match &store.spec {
        StoreSpec::Memory => Stores::memory(limits),
        StoreSpec::Sqlite(path) => {
            let mut sqlite_config = sqlite::SqliteStoreConfig::new(path);
            sqlite_config.limits = limits;
            sqlite_config.durability = store.durability;
            Stores::sqlite_with(sqlite_config)
                .with_context(|| format!("opening the store {}", path.display()))?
        }
        StoreSpec::Redis(url) => {
            let mut redis_config = redis::RedisStoreConfig::new(url.clone());
            redis_config.limits = limits;
            redis_config.node_lease = store.node_lease;
            if !config.node_id.is_empty() {
                redis_config.node_id.clone_from(&config.node_id);
            }
            // Several nodes may share this Redis: the bundle's relay sends each session's
            // POSTs to its node.
            Stores::redis_with(redis_config)
                .await
                .with_context(|| format!("opening the store {url}"))?
        }
    };
    let mut builder = Server::builder(handler).stores(stores).config(config);
    if let Some(authenticator) = authenticator {
        builder = builder.auth(authenticator);
    }
    // Answers the requests a killed predecessor left unanswered before the ready line.
    builder.build().await.context("starting the server")
}

/// How the log names a store.
fn describe(spec: &StoreSpec) -> String {
    match spec {
        StoreSpec::Memory => "memory".to_owned(),
        StoreSpec::Sqlite(path) => format!("sqlite:{}", path.display()),
        StoreSpec::Redis(url) => url.clone(),
    }
}

/// Where events and sessions are kept, and how much of them.
struct Store {
    spec: StoreSpec,
    /// The per-session caps and retention (every backend has the same ones).
    bounds: StoreLimits,
    node_lease: Duration,
    /// SQLite's `synchronous` setting.
    durability: sqlite::Durability,
}

/// Who may send requests.
enum Authentication {
    /// Anyone.
    None,
    /// An authenticator built from the flags alone.
    Ready(Arc<dyn Authenticator>),
    /// The OAuth resource server; an empty `resource` is the bound endpoint's URL.
    OAuth(Box<OAuthConfig>),
}

impl Authentication {
    /// The authenticator, for the endpoint at `url`.
    fn build(self, url: &str) -> anyhow::Result<Option<Arc<dyn Authenticator>>> {
        Ok(match self {
            Self::None => None,
            Self::Ready(authenticator) => Some(authenticator),
            Self::OAuth(mut config) => {
                if config.resource.is_empty() {
                    url.clone_into(&mut config.resource);
                }
                let issuers = config.issuers.clone();
                let resource = config.resource.clone();
                let oauth =
                    OAuthResource::new(*config).map_err(|error| UsageError(error.to_string()))?;
                info!(?issuers, %resource, metadata = oauth.metadata_url(), "OAuth resource server on");
                Some(Arc::new(oauth))
            }
        })
    }
}

/// What answers the requests, and who may send them.
struct Served {
    handler: Arc<dyn Handler>,
    authentication: Authentication,
    /// How the log names the handler.
    description: String,
    /// The federation of `--config`, to reload from its file.
    reload: Option<Reload>,
}

/// `--config`'s file and the federation it configures.
struct Reload {
    path: PathBuf,
    gateway: Arc<FederatedGateway>,
    /// What the file said when last loaded.
    loaded: config_file::Loaded,
}

impl Reload {
    /// Reloads the file on SIGHUP and whenever what it holds changes (read every
    /// [`CONFIG_POLL`]), until the server stops.
    async fn watch(mut self, mut hangup: Hangup) {
        let mut seen = tokio::fs::read(&self.path).await.ok();
        let mut poll = tokio::time::interval(CONFIG_POLL);
        loop {
            let why = tokio::select! {
                () = hangup.recv() => "SIGHUP",
                _ = poll.tick() => "the file changed",
            };
            let read = tokio::fs::read(&self.path).await;
            let now = read.as_ref().ok().cloned();
            if why != "SIGHUP" && now == seen {
                continue;
            }
            seen = now;
            self.reload(why, read).await;
        }
    }

    /// Reloads from `read`, what reading the file just gave.
    async fn reload(&mut self, why: &str, read: std::io::Result<Vec<u8>>) {
        let file = self.path.display().to_string();
        let loaded = match config_file::contents(&self.path, read) {
            Ok(loaded) => loaded,
            Err(error) => {
                error!(%file, why, %error, "config not reloaded; the upstreams in use are kept");
                return;
            }
        };
        if !loaded.same_serve_table(&self.loaded) {
            tracing::warn!(%file, "[serve] changed: it takes effect when tether serve restarts");
        }
        match self.gateway.reload(loaded.federation.clone()).await {
            Ok(reloaded) => info!(
                %file, why, added = ?reloaded.added, removed = ?reloaded.removed, changed = ?reloaded.changed,
                "config reloaded"
            ),
            Err(error) => {
                error!(%file, why, %error, "config not reloaded; the upstreams in use are kept");
                return;
            }
        }
        self.loaded = loaded;
    }
}

/// SIGHUP, registered before the ready line so that it never takes the default action (exit).
struct Hangup {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Hangup {
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                signal: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            self.signal.recv().await;
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    }
}

/// Binds `bind`, announces the URL and serves until a signal stops it.
async fn serve(
    bind: &str,
    mut config: ServerConfig,
    store: &Store,
    served: Served,
) -> anyhow::Result<()> {
    // Before the ready line: a SIGTERM that follows it at once must take the graceful path,
    // not the default action (death by signal, no exit 0).
    let mut signals = Signals::new().context("installing signal handlers")?;
    let listener = TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if config.allowed_hosts.is_empty() && !local.ip().is_loopback() {
        // The library's default Host allow-list (loopback names) guards a loopback bind
        // against DNS rebinding; a server bound to a routable address is reached under names
        // it cannot know, so the check is on by default for loopback binds only
        // (docs/SECURITY.md).
        info!(bind = %local, "Host check off for a non-loopback bind; restrict it with --allowed-host");
        config.allowed_hosts = vec![ANY_HOST.to_owned()];
    }
    let url = endpoint_url(local, &config.path);
    let description = served.description.clone();
    let authenticator = served.authentication.build(&url)?;
    let server = build_server(store, config, served.handler, authenticator).await?;
    let watching = match served.reload {
        Some(reload) => {
            let hangup = Hangup::new().context("installing the SIGHUP handler")?;
            Some(tokio::spawn(reload.watch(hangup)))
        }
        None => None,
    };
    announce(&url)?;
    info!(%url, store = %describe(&store.spec), serving = %description, "tether serve ready");

    let (stop, stopped) = oneshot::channel::<()>();
    let serving = server.serve(listener, async move {
        // A dropped sender also stops the server; either way it is time to go.
        stopped.await.ok();
    });
    tokio::pin!(serving);

    let signal = tokio::select! {
        result = &mut serving => {
            // Only an accept-loop failure ends `serve` without a shutdown request.
            return result.context("serving");
        }
        signal = signals.recv() => signal,
    };
    info!(signal, "shutting down: closing open streams");
    stop.send(()).ok();
    tokio::select! {
        result = &mut serving => result.context("shutting down")?,
        signal = signals.recv() => {
            error!(signal, "second signal: stopping without waiting for open streams");
            bail!("stopped by a second {signal} before the graceful shutdown finished");
        }
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            error!(grace = ?SHUTDOWN_GRACE, "graceful shutdown did not finish in time");
            bail!("graceful shutdown did not finish within {SHUTDOWN_GRACE:?}");
        }
    }
    if let Some(watching) = watching {
        watching.abort();
    }
    info!("stopped");
    Ok(())
}

/// `http://HOST:PORT/PATH` of the bound listener (IPv6 hosts in brackets).
fn endpoint_url(local: SocketAddr, path: &str) -> String {
    format!("http://{local}{path}")
}

/// Prints the ready line, the only line `serve` ever writes to stdout
/// (docs/CONTRACTS.md#tether-serve).
fn announce(url: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "tether: serving {url}")
        .and_then(|()| stdout.flush())
        .context("writing the ready line to stdout")
}

/// SIGINT and SIGTERM, registered once so that no signal between two waits is lost.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next signal and names it.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.ok();
            "ctrl-c"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_values() {
        assert_eq!(parse_store("memory"), Ok(StoreSpec::Memory));
        assert_eq!(
            parse_store("sqlite:/tmp/t.db"),
            Ok(StoreSpec::Sqlite(PathBuf::from("/tmp/t.db")))
        );
        assert_eq!(
            parse_store("redis://127.0.0.1:6379/2"),
            Ok(StoreSpec::Redis("redis://127.0.0.1:6379/2".to_owned()))
        );
        assert!(parse_store("sqlite:").is_err());
        assert!(parse_store("postgres://x").is_err());
    }

    #[test]
    fn rate_limits() {
        let per = |n, secs| Ok(RateLimit::per(n, Duration::from_secs(secs)));
        assert_eq!(parse_rate_limit("10/s"), per(10, 1));
        assert_eq!(parse_rate_limit("600/m"), per(600, 60));
        assert_eq!(parse_rate_limit("1/h"), per(1, 3600));
        assert_eq!(parse_rate_limit("5/30s"), per(5, 30));
        for bad in ["10", "0/s", "10/0s", "10/d", "x/s", "-1/s", "10/s/s"] {
            assert!(parse_rate_limit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_and_node_ids() {
        assert_eq!(parse_path("/mcp").as_deref(), Ok("/mcp"));
        assert!(parse_path("mcp").is_err());
        assert!(parse_path("/a b").is_err());
        assert!(parse_path("/mcp?x=1").is_err());
        assert!(parse_path("/{id}").is_err());
        assert_eq!(parse_node_id("node-1").as_deref(), Ok("node-1"));
        assert!(parse_node_id("").is_err());
        assert!(parse_node_id("a b").is_err());
    }

    #[test]
    fn urls() {
        assert_eq!(
            endpoint_url("127.0.0.1:8080".parse().unwrap(), "/mcp"),
            "http://127.0.0.1:8080/mcp"
        );
        assert_eq!(
            endpoint_url("[::1]:9".parse().unwrap(), "/x"),
            "http://[::1]:9/x"
        );
    }
}
