//! How a client behaves: [`ClientConfig`](super::ClientConfig) with every default and the
//! reason for it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether_proto::reconnect::ReconnectConfig;
use tether_proto::version::ProtocolVersion;

use super::auth::AuthProvider;
use super::handler::ServerRequestHandler;
use super::token::ResumptionToken;

/// Default [`ClientConfig::request_timeout`](super::ClientConfig::request_timeout): 30 s to get the head of an answer (or a whole
/// JSON body). Long tool calls are not bounded by it: their SSE streams are watched by the
/// idle timeout instead.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ClientConfig::connect_timeout`](super::ClientConfig::connect_timeout): 10 s for TCP (and TLS) setup.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`ClientConfig::dedup_window`](super::ClientConfig::dedup_window): recent event ids remembered per stream. A replay
/// repeats at most the events after the cursor (tether) or the cursor's own event (some
/// peers), so a window far larger than any in-flight backlog costs a few KiB and is safe.
pub const DEFAULT_DEDUP_WINDOW: usize = 1024;

/// Default [`ClientConfig::stream_buffer`](super::ClientConfig::stream_buffer): messages a stream task may decode ahead of the
/// application. Small, so that a slow application slows the server (bounded memory) rather
/// than the client buffering without limit.
pub const DEFAULT_STREAM_BUFFER: usize = 16;

/// The most of an error response's body kept in [`Error::Status`](super::Error::Status).
pub const MAX_ERROR_BODY: usize = 4096;

/// Called with the new token after each commit that moves a stream's cursor.
pub type TokenCallback = Arc<dyn Fn(&ResumptionToken) + Send + Sync>;

/// Which protocol era a [`Client`](super::Client) speaks (docs/CONTRACTS.md#client-era).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProtocolChoice {
    /// The 2025 era only: `initialize` at [`ClientConfig::protocol_version`], no probe.
    Legacy,
    /// The default. Probe `server/discover` and speak the era in which a call survives a
    /// cut: 2026-07-28 when the server offers tasks with event streams (and
    /// [`ClientConfig::tasks`] and [`ClientConfig::prefer_tasks`] are on); else the legacy era
    /// when the server also serves a 2025 version (or does not answer the probe as a
    /// 2026-07-28 server); else 2026-07-28.
    #[default]
    Auto,
    /// Exactly this version: a 2025 version is [`Legacy`](Self::Legacy) at that version;
    /// 2026-07-28 requires the server to serve it.
    Version(ProtocolVersion),
}

impl std::str::FromStr for ProtocolChoice {
    type Err = String;

    /// `legacy`, `auto`, or a version (`2026-07-28`, `2025-11-25`, …).
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "legacy" => Ok(Self::Legacy),
            "auto" => Ok(Self::Auto),
            version => ProtocolVersion::parse(version)
                .map(Self::Version)
                .map_err(|_| {
                    format!(
                        "{version:?} is not legacy, auto or a protocol version this client speaks"
                    )
                }),
        }
    }
}

/// How a [`Client`](super::Client) behaves. `Default` gives the documented defaults.
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Reconnect policy and the idle timeout (60 s by default) of every stream.
    pub reconnect: ReconnectConfig,
    /// Wait for an answer's head ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// Connection setup ([`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// The era to speak ([`ProtocolChoice::Auto`] unless set).
    pub protocol: ProtocolChoice,
    /// The version asked for in `initialize` ([`ProtocolVersion::LATEST_LEGACY`]).
    pub protocol_version: ProtocolVersion,
    /// `clientInfo.name` (default `tether`).
    pub client_name: String,
    /// `clientInfo.version` (default this crate's version).
    pub client_version: String,
    /// Declare the tasks extension (SEP-2663) in 2026-07-28 requests when the server offers
    /// it, so that a tool that may run as a task does, and its call survives cuts and
    /// restarts (docs/CONTRACTS.md#client-era). On by default.
    pub tasks: bool,
    /// Under [`ProtocolChoice::Auto`], prefer the 2026-07-28 era with tasks over a 2025
    /// session when the server offers both (on by default). Off, `auto` keeps the 2025 era
    /// wherever the server serves it, and speaks 2026-07-28 (with tasks where offered) only
    /// to a server that serves nothing else: what a bridge for a 2025 client wants, since its
    /// session carries everything that client may send.
    pub prefer_tasks: bool,
    /// The client capabilities sent in `initialize`, and again on re-initialization.
    pub capabilities: Value,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    /// The bearer token hook: [`StaticToken`](super::StaticToken), an
    /// [`OAuthProvider`](super::oauth::OAuthProvider), or the application's own.
    pub auth: Option<Arc<dyn AuthProvider>>,
    /// Called after each commit; see [`MessageStream`](super::MessageStream).
    pub on_resumption_token: Option<TokenCallback>,
    /// Recent event ids remembered per stream ([`DEFAULT_DEDUP_WINDOW`]).
    pub dedup_window: usize,
    /// Messages decoded ahead of the application per stream ([`DEFAULT_STREAM_BUFFER`]).
    pub stream_buffer: usize,
    /// Root certificates trusted for HTTPS in addition to the platform's: a private CA, or a
    /// development server's self-signed certificate. Each entry is PEM (one or more
    /// `CERTIFICATE` blocks, as in a `.pem` or `.crt` file) or a single DER certificate.
    /// Empty by default. An entry that does not parse fails [`Client::connect`](super::Client::connect) with
    /// [`Error::Config`](super::Error::Config).
    pub extra_root_certificates: Vec<Vec<u8>>,
    /// Answers server→client requests other than `ping` (which the client always answers
    /// itself, still yielding it). `None` (the default): every other request is yielded by
    /// its stream for the application to answer with [`Client::respond`](super::Client::respond). With a handler,
    /// each request it [accepts](ServerRequestHandler::accepts), on any stream (a request's,
    /// a [`ToolCall`](super::ToolCall)'s, or the standalone stream of [`Client::server_messages`](super::Client::server_messages)), is answered
    /// with the handler's result or error when the stream reaches it, and is not yielded;
    /// requests it declines are yielded as without a handler. Streams only answer while the
    /// application reads them.
    pub request_handler: Option<Arc<dyn ServerRequestHandler>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            reconnect: ReconnectConfig::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            protocol: ProtocolChoice::Auto,
            protocol_version: ProtocolVersion::LATEST_LEGACY,
            client_name: "tether".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            tasks: true,
            prefer_tasks: true,
            capabilities: json!({}),
            headers: Vec::new(),
            auth: None,
            on_resumption_token: None,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            stream_buffer: DEFAULT_STREAM_BUFFER,
            extra_root_certificates: Vec::new(),
            request_handler: None,
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("reconnect", &self.reconnect)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("protocol", &self.protocol)
            .field("protocol_version", &self.protocol_version)
            .field("tasks", &self.tasks)
            .field("client_name", &self.client_name)
            .field("auth", &self.auth.is_some())
            .field("dedup_window", &self.dedup_window)
            .field("stream_buffer", &self.stream_buffer)
            .field(
                "extra_root_certificates",
                &self.extra_root_certificates.len(),
            )
            .field("request_handler", &self.request_handler.is_some())
            .finish_non_exhaustive()
    }
}
