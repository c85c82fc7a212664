//! The MCP Streamable HTTP client whose streams survive disconnects.
//!
//! [`Client::connect`] initializes a session; [`Client::request`] POSTs a request and returns
//! a [`MessageStream`] of the server messages related to it and then its final response;
//! [`Client::server_messages`] opens the standalone GET stream; [`Client::close`] ends the
//! session with DELETE. Every SSE stream is driven by its own task around
//! [`tether_proto::reconnect::Reconnect`]: lost connections are resumed with GET +
//! `Last-Event-ID` on the timing of docs/CONTRACTS.md#client-reconnect-timing, replayed events are
//! deduplicated, and each message reaches the application once, in order. The commit rule (process,
//! then commit) is documented on [`MessageStream`] and in the `stream` module.
//!
//! Statuses: a 404 means the session is gone: the client re-initializes (same capabilities),
//! emits [`ClientEvent`]s, and fails the requests that were in flight with
//! [`Error::SessionExpired`] (a request whose POST itself got the 404 was never accepted and
//! is sent again once on the new session). 405 on a resume is [`Error::NotResumable`]; the
//! 400 for an unusable cursor is [`Error::EventsUnavailable`] naming the reason; 429 and 503
//! are retried after `Retry-After` (as a floor) within the reconnect budget; other 4xx are
//! [`Error::Status`].
//!
//! [`Client::call_tool`] wraps `tools/call` with a progress token ([`ToolCall`]); a
//! [`ResumptionToken`] saved by [`ClientConfig::on_resumption_token`] serializes, and
//! [`Client::resume`] in a new process reattaches to its session and stream and delivers the
//! rest of the call.
//!
//! Server→client requests: `ping` is answered by the client itself; set
//! [`ClientConfig::request_handler`] (a [`ServerRequestHandler`]) to answer the others
//! (sampling, elicitation, …) on every stream, or answer them with [`Client::respond`].
//!
//! TLS is rustls with the *ring* provider: if the process has no default
//! [`rustls::crypto::CryptoProvider`], [`Client::connect`] installs ring's. Certificates are
//! checked against the platform's roots (on Linux the system CA bundle, or `SSL_CERT_FILE` /
//! `SSL_CERT_DIR` when set) plus [`ClientConfig::extra_root_certificates`]; a refused
//! certificate fails with [`Error::Tls`]. Without any platform roots (no CA bundle) only the
//! extra roots are trusted, with a warning. HTTP/2 is used when the server offers it in ALPN
//! (`h2`), HTTP/1.1 otherwise; plain `http://` is HTTP/1.1.
//!
//! Proxies come from the environment when the client is built (each [`Client::connect`]):
//! `HTTP_PROXY` for `http://` URLs (sent as absolute-URI requests), `HTTPS_PROXY` for
//! `https://` URLs (a `CONNECT` tunnel; TLS stays end to end), `ALL_PROXY` for both when the
//! specific one is unset, and `NO_PROXY` (comma-separated host names, domain suffixes, IP
//! addresses or CIDR ranges, or `*`) to bypass them. Each upper-case name wins over its
//! lower-case spelling when both are set; `HTTP_PROXY` is ignored when `REQUEST_METHOD` is
//! set (CGI). Loopback addresses are not bypassed implicitly: list them in `NO_PROXY`.

mod call;
mod error;
mod handler;
mod resume;
mod stream;
mod transport;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::Response;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tether_proto::backoff::SplitMix64;
use tether_proto::headers::{MCP_SESSION_ID, ResponseKind, TETHER_NODE};
use tether_proto::jsonrpc::{
    Batching, INITIALIZE, Message, Notification, Request, RequestId, Response as RpcResponse,
    parse_body,
};
use tether_proto::reconnect::ReconnectConfig;
use tether_proto::version::ProtocolVersion;
use tether_sse::{Decoder, Item};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

pub use call::{ToolCall, ToolCallItem};
pub use error::{BoxError, Error};
pub use handler::ServerRequestHandler;
pub use stream::{MessageStream, ResumptionToken};

use stream::{Delivery, Driver};
use transport::{Failed, Transport};

/// Default [`ClientConfig::request_timeout`]: 30 s to get the head of an answer (or a whole
/// JSON body). Long tool calls are not bounded by it: their SSE streams are watched by the
/// idle timeout instead.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ClientConfig::connect_timeout`]: 10 s for TCP (and TLS) setup.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`ClientConfig::dedup_window`]: recent event ids remembered per stream. A replay
/// repeats at most the events after the cursor (tether) or the cursor's own event (some
/// peers), so a window far larger than any in-flight backlog costs a few KiB and is safe.
pub const DEFAULT_DEDUP_WINDOW: usize = 1024;

/// Default [`ClientConfig::stream_buffer`]: messages a stream task may decode ahead of the
/// application. Small, so that a slow application slows the server (bounded memory) rather
/// than the client buffering without limit.
pub const DEFAULT_STREAM_BUFFER: usize = 16;

/// The most of an error response's body kept in [`Error::Status`].
pub const MAX_ERROR_BODY: usize = 4096;

/// How long [`Client::connect`] probes for the 2024-11-05 `endpoint` event after an
/// `initialize` was refused.
const LEGACY_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Capacity of the [`ClientEvents`] broadcast; a receiver lagging further loses the oldest.
const EVENT_CAPACITY: usize = 64;

/// Called with the new token after each commit that moves a stream's cursor.
pub type TokenCallback = Arc<dyn Fn(&ResumptionToken) + Send + Sync>;

/// Supplies the bearer token sent as `Authorization: Bearer …`.
#[async_trait]
pub trait AuthProvider: Send + Sync {
    /// The token to send, or `None` for no `Authorization` header. `refresh` is `true` after
    /// the server answered 401 to the previous token; the request is then sent once more.
    async fn bearer_token(&self, refresh: bool) -> Option<String>;
}

/// A fixed bearer token.
#[derive(Debug, Clone)]
pub struct StaticToken(pub String);

#[async_trait]
impl AuthProvider for StaticToken {
    async fn bearer_token(&self, _refresh: bool) -> Option<String> {
        Some(self.0.clone())
    }
}

/// How a [`Client`] behaves. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct ClientConfig {
    /// Reconnect policy and the idle timeout (60 s by default) of every stream.
    pub reconnect: ReconnectConfig,
    /// Wait for an answer's head ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// Connection setup ([`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// The version asked for in `initialize` ([`ProtocolVersion::LATEST`]).
    pub protocol_version: ProtocolVersion,
    /// `clientInfo.name` (default `tether`).
    pub client_name: String,
    /// `clientInfo.version` (default this crate's version).
    pub client_version: String,
    /// The client capabilities sent in `initialize`, and again on re-initialization.
    pub capabilities: Value,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    /// The bearer token hook.
    pub auth: Option<Arc<dyn AuthProvider>>,
    /// Called after each commit; see [`MessageStream`].
    pub on_resumption_token: Option<TokenCallback>,
    /// Recent event ids remembered per stream ([`DEFAULT_DEDUP_WINDOW`]).
    pub dedup_window: usize,
    /// Messages decoded ahead of the application per stream ([`DEFAULT_STREAM_BUFFER`]).
    pub stream_buffer: usize,
    /// Root certificates trusted for HTTPS in addition to the platform's: a private CA, or a
    /// development server's self-signed certificate. Each entry is PEM (one or more
    /// `CERTIFICATE` blocks, as in a `.pem` or `.crt` file) or a single DER certificate.
    /// Empty by default. An entry that does not parse fails [`Client::connect`] with
    /// [`Error::Config`].
    pub extra_root_certificates: Vec<Vec<u8>>,
    /// Answers server→client requests other than `ping` (which the client always answers
    /// itself, still yielding it). `None` (the default): every other request is yielded by
    /// its stream for the application to answer with [`Client::respond`]. With a handler,
    /// each request it [accepts](ServerRequestHandler::accepts), on any stream (a request's,
    /// a [`ToolCall`]'s, or the standalone stream of [`Client::server_messages`]), is answered
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
            protocol_version: ProtocolVersion::LATEST,
            client_name: "tether".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
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
            .field("protocol_version", &self.protocol_version)
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

/// Something the client did on its own that the application may need to react to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// The server answered 404: the session is gone.
    SessionExpired {
        /// The expired session's id.
        session_id: Option<String>,
    },
    /// A new session was initialized in place of an expired one (restore subscriptions).
    Reinitialized {
        /// The new session's id.
        session_id: Option<String>,
    },
    /// Re-initializing failed; the next request tries again.
    ReinitializeFailed {
        /// Why.
        error: String,
    },
    /// A stream lost its connection (or is being resumed from a token) and is reconnecting
    /// with GET + `Last-Event-ID`; or, for a request's stream lost before any event id reached
    /// the client (`last_event_id` `None`), by sending the request again to a server that
    /// re-attaches it to its stream rather than running it twice (a tether server).
    Reconnecting {
        /// The request whose stream it is; `None` for the standalone stream.
        request_id: Option<RequestId>,
        /// The cursor sent, if any.
        last_event_id: Option<String>,
        /// Consecutive failed attempts so far.
        failures: u32,
    },
    /// A stream's GET (the standalone stream's connection, or a resume) was answered with an
    /// event stream: from now on the server can deliver on it. Some servers (the TypeScript
    /// SDK's without an event store) drop the messages they send unrelated to a request while
    /// no standalone stream is open, so an application about to provoke one waits for this.
    Connected {
        /// The request whose stream it is; `None` for the standalone stream.
        request_id: Option<RequestId>,
    },
}

/// A subscription to [`ClientEvent`]s.
#[derive(Debug)]
pub struct ClientEvents(broadcast::Receiver<ClientEvent>);

impl ClientEvents {
    /// The next event; `None` once the client is gone. A receiver that fell more than 64
    /// events behind skips the oldest.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        loop {
            match self.0.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// An event already received, without waiting.
    pub fn try_recv(&mut self) -> Option<ClientEvent> {
        loop {
            match self.0.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => return None,
            }
        }
    }
}

/// State shared by the client handle and its stream tasks.
pub(crate) struct Inner {
    transport: Transport,
    config: ClientConfig,
    next_id: AtomicU64,
    events: broadcast::Sender<ClientEvent>,
    /// Serializes re-initialization, so that streams discovering one expiry together replace
    /// the session once.
    reinit: tokio::sync::Mutex<()>,
    server_result: Mutex<Value>,
    rng: Mutex<SplitMix64>,
    standalone_open: AtomicBool,
    shutdown: CancellationToken,
}

/// An MCP client over Streamable HTTP. Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.transport.url().as_str())
            .field("session_id", &self.session_id())
            .finish_non_exhaustive()
    }
}

/// Parses [`ClientConfig::extra_root_certificates`]: PEM bundles and DER certificates.
fn root_certificates(entries: &[Vec<u8>]) -> Result<Vec<reqwest::Certificate>, Error> {
    let mut roots = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let bad = |e: &dyn std::fmt::Display| {
            Error::Config(format!("extra_root_certificates[{index}]: {e}"))
        };
        if entry.trim_ascii_start().starts_with(b"-----BEGIN") {
            let bundle = reqwest::Certificate::from_pem_bundle(entry).map_err(|e| bad(&e))?;
            if bundle.is_empty() {
                return Err(bad(&"no CERTIFICATE block in the PEM"));
            }
            roots.extend(bundle);
        } else {
            roots.push(reqwest::Certificate::from_der(entry).map_err(|e| bad(&e))?);
        }
    }
    Ok(roots)
}

/// The HTTP client: the platform's roots plus the extra ones. A system without a CA bundle
/// (a minimal container) has no platform roots, which fails the build; the client then
/// trusts only the extra roots, so that plain `http://` still works and an `https://`
/// server the extra roots do not cover is refused with [`Error::Tls`] (unknown issuer).
fn http_client(config: &ClientConfig) -> Result<reqwest::Client, Error> {
    let roots = root_certificates(&config.extra_root_certificates)?;
    ensure_crypto_provider();
    let builder = || {
        reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
    };
    let platform = match builder().tls_certs_merge(roots.clone()).build() {
        Ok(http) => return Ok(http),
        Err(error) => error,
    };
    let http = builder()
        .tls_certs_only(roots)
        .build()
        .map_err(|_| Error::Config(format!("http client: {}", error_chain(&platform))))?;
    tracing::warn!(
        error = %error_chain(&platform),
        "no platform root certificates; trusting only ClientConfig::extra_root_certificates"
    );
    Ok(http)
}

/// An error and its causes, `: `-separated.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl Client {
    /// Connects to the MCP endpoint `url`: `initialize` (version negotiation), then
    /// `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL or header; [`Error::LegacyTransport`] or
    /// [`Error::UnsupportedVersion`] for a server this client cannot speak to; otherwise what
    /// the exchange failed with.
    pub async fn connect(url: &str, config: ClientConfig) -> Result<Self, Error> {
        let inner = Inner::build(url, config, 0)?;
        inner.initialize().await?;
        Ok(Self { inner })
    }

    /// The server's `initialize` result (protocol version, capabilities, server info).
    #[must_use]
    pub fn server_info(&self) -> Value {
        self.inner
            .server_result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current `Mcp-Session-Id`, if the server issued one.
    #[must_use]
    pub fn session_id(&self) -> Option<String> {
        self.inner.transport.session().id
    }

    /// The negotiated protocol version.
    #[must_use]
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.inner.transport.session().version
    }

    /// Subscribes to [`ClientEvent`]s from now on.
    #[must_use]
    pub fn events(&self) -> ClientEvents {
        ClientEvents(self.inner.events.subscribe())
    }

    /// Sends a request; the stream yields the server messages related to it (progress, log
    /// messages, server requests), then the final response, each once and in order, across
    /// reconnects.
    ///
    /// # Errors
    ///
    /// What sending failed with; failures after the server accepted the request arrive as
    /// the stream's items.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<MessageStream, Error> {
        let inner = &self.inner;
        inner.ensure_initialized().await?;
        let id = RequestId::from(inner.next_id.fetch_add(1, Ordering::Relaxed));
        let body = Message::from(Request::new(id.clone(), method, params)).to_vec();
        let buffer = inner.config.stream_buffer.max(1);
        // Kept only for a server that re-attaches a request sent again (see
        // `transport::Session::reattaches`): no other may be sent it twice.
        let resend = inner.transport.session().reattaches.then(|| body.clone());
        let (response, session) = match inner.post(body).await {
            Ok(answered) => answered,
            // Lost before any answer: the request may or may not have reached the server. One
            // that re-attaches can be sent it again without running it twice; the stream task
            // does that, with backoff, as it would after losing the stream before its first id.
            Err(Error::Network(_) | Error::Timeout) if resend.is_some() => {
                let session = inner.transport.session();
                let (tx, rx) = mpsc::channel(buffer);
                let driver =
                    Driver::new(Arc::clone(inner), Some(id.clone()), session.generation, tx)
                        .resending(resend);
                tokio::spawn(driver.run(None));
                return Ok(self.stream(rx, Some(id), &session));
            }
            Err(error) => return Err(error),
        };
        let kind = response_kind(&response);
        match (response.status().as_u16(), kind) {
            (200, Some(ResponseKind::EventStream)) => {
                let (tx, rx) = mpsc::channel(buffer);
                let driver =
                    Driver::new(Arc::clone(inner), Some(id.clone()), session.generation, tx)
                        .resending(resend);
                tokio::spawn(driver.run(Some(response)));
                Ok(self.stream(rx, Some(id), &session))
            }
            (200, Some(ResponseKind::Json)) => {
                let bytes = read_body(response, inner.transport.request_timeout()).await?;
                let messages = parse_body(&bytes, Batching::Allowed)
                    .map_err(|e| Error::Protocol(format!("JSON answer: {e}")))?
                    .into_messages();
                let (tx, rx) = mpsc::channel(messages.len().max(1));
                for message in messages {
                    let _ = tx.try_send(Delivery::Message {
                        message,
                        event_id: None,
                    });
                }
                Ok(self.stream(rx, Some(id), &session))
            }
            (status, _) => Err(Error::Protocol(format!(
                "request answered {status} without a JSON or SSE body"
            ))),
        }
    }

    /// Sends a notification (202 expected).
    ///
    /// # Errors
    ///
    /// What sending failed with.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        self.inner.ensure_initialized().await?;
        let body = Message::from(Notification::new(method, params)).to_vec();
        self.inner.post(body).await.map(drop)
    }

    /// Answers a server→client request received on a stream (202 expected).
    ///
    /// # Errors
    ///
    /// What sending failed with.
    pub async fn respond(&self, response: RpcResponse) -> Result<(), Error> {
        let body = Message::Response(response).to_vec();
        self.inner.post(body).await.map(drop)
    }

    /// Opens the standalone GET stream of server-initiated messages. It follows the session
    /// across re-initializations; if the server has none (405) it yields
    /// [`Error::NoStandaloneStream`]. One per client.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if it is already open.
    pub fn server_messages(&self) -> Result<MessageStream, Error> {
        if self.inner.standalone_open.swap(true, Ordering::SeqCst) {
            return Err(Error::Config(
                "the standalone stream is already open".to_owned(),
            ));
        }
        let session = self.inner.transport.session();
        let (tx, rx) = mpsc::channel(self.inner.config.stream_buffer.max(1));
        let driver = Driver::new(Arc::clone(&self.inner), None, session.generation, tx);
        tokio::spawn(driver.run(None));
        Ok(self.stream(rx, None, &session))
    }

    /// Ends the session: stops every stream task and sends DELETE (2xx, 404 and 405 all mean
    /// done).
    ///
    /// # Errors
    ///
    /// What the DELETE failed with.
    pub async fn close(self) -> Result<(), Error> {
        self.inner.shutdown.cancel();
        if self.inner.transport.session().id.is_none() {
            return Ok(());
        }
        // DELETE is idempotent: a connection lost under it (a pooled connection the network
        // cut) is retried once on a fresh one.
        let (response, _) = match self.inner.transport.delete().await {
            Err(Error::Network(_)) => self.inner.transport.delete().await?,
            other => other?,
        };
        match response.status().as_u16() {
            200..=299 | 404 | 405 => Ok(()),
            _ => Err(Failed::read(response).await.into_error()),
        }
    }

    fn stream(
        &self,
        rx: mpsc::Receiver<Delivery>,
        request_id: Option<RequestId>,
        session: &transport::Session,
    ) -> MessageStream {
        MessageStream::new(
            self.clone(),
            rx,
            request_id,
            session.id.clone(),
            session.version,
            self.inner.config.on_resumption_token.clone(),
        )
    }
}

fn response_kind(response: &Response) -> Option<ResponseKind> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(ResponseKind::from_content_type)
}

async fn read_body(response: Response, timeout: Duration) -> Result<bytes::Bytes, Error> {
    tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| Error::Timeout)?
        .map_err(Error::network)
}

impl Inner {
    /// The client state for `url`, not yet initialized: the HTTP client (TLS roots, timeouts),
    /// the configured headers, and request ids counting from `first_id`. Shared by
    /// [`Client::connect`] and [`Client::resume`] so that both speak with the same settings.
    pub(super) fn build(
        url: &str,
        config: ClientConfig,
        first_id: u64,
    ) -> Result<Arc<Self>, Error> {
        let url = reqwest::Url::parse(url).map_err(|e| Error::Config(format!("url: {e}")))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Error::Config(format!("header name {name:?}: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| Error::Config(format!("header value for {name}: {e}")))?;
            headers.append(name, value);
        }
        let http = http_client(&config)?;
        let transport = Transport::new(
            http,
            url,
            headers,
            config.auth.clone(),
            config.request_timeout,
        );
        let rng = SplitMix64::from_os_entropy().unwrap_or_else(|_| SplitMix64::new(0x7e7e));
        Ok(Arc::new(Self {
            transport,
            config,
            next_id: AtomicU64::new(first_id),
            events: broadcast::channel(EVENT_CAPACITY).0,
            reinit: tokio::sync::Mutex::new(()),
            server_result: Mutex::new(Value::Null),
            rng: Mutex::new(rng),
            standalone_open: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        }))
    }
}

impl Inner {
    fn emit(&self, event: ClientEvent) {
        let _ = self.events.send(event);
    }

    /// POSTs a message. 404 on an initialized session: re-initialize and send once more on
    /// the new session (the server did not accept it). 429 and 503: wait (`Retry-After` as a
    /// floor over our backoff) within the reconnect budget. Other failures are typed errors.
    async fn post(
        self: &Arc<Self>,
        body: Vec<u8>,
    ) -> Result<(Response, transport::Session), Error> {
        let backoff = self.config.reconnect.backoff;
        let budget = self.config.reconnect.budget;
        let start = Instant::now();
        let mut failures = 0u32;
        let mut resent = false;
        loop {
            let (response, session) = self.transport.post(body.clone()).await?;
            if response.status().is_success() {
                return Ok((response, session));
            }
            let failed = Failed::read(response).await;
            match failed.status {
                404 if session.initialized && !resent => {
                    resent = true;
                    self.reinitialize(session.generation).await?;
                }
                429 | 503 => {
                    failures = failures.saturating_add(1);
                    let wait = {
                        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                        backoff.delay(failures, None, failed.retry_after, &mut *rng)
                    };
                    if !budget.allows(failures, start.elapsed() + wait) {
                        return Err(Error::BudgetExhausted {
                            attempts: failures,
                            elapsed: start.elapsed(),
                        });
                    }
                    tokio::time::sleep(wait).await;
                }
                _ => return Err(failed.into_error()),
            }
        }
    }

    /// Initializes if the session was dropped and a re-initialization failed earlier.
    async fn ensure_initialized(self: &Arc<Self>) -> Result<(), Error> {
        let session = self.transport.session();
        if session.initialized {
            return Ok(());
        }
        self.reinitialize(session.generation).await
    }

    /// Replaces the session of generation `failed` (once, however many streams found it
    /// gone), emitting [`ClientEvent`]s.
    async fn reinitialize(self: &Arc<Self>, failed: u64) -> Result<(), Error> {
        let _guard = self.reinit.lock().await;
        let session = self.transport.session();
        if session.generation != failed {
            return Ok(());
        }
        if session.initialized {
            self.emit(ClientEvent::SessionExpired {
                session_id: session.id,
            });
        }
        self.transport.update_session(|s| {
            *s = transport::Session {
                generation: s.generation + 1,
                ..transport::Session::default()
            };
        });
        match self.initialize().await {
            Ok(()) => {
                self.emit(ClientEvent::Reinitialized {
                    session_id: self.transport.session().id,
                });
                Ok(())
            }
            Err(error) => {
                self.emit(ClientEvent::ReinitializeFailed {
                    error: error.to_string(),
                });
                Err(error)
            }
        }
    }

    /// `initialize`, then `notifications/initialized`, on a session with no id or version.
    async fn initialize(self: &Arc<Self>) -> Result<(), Error> {
        let id = RequestId::from(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = json!({
            "protocolVersion": self.config.protocol_version.as_str(),
            "capabilities": self.config.capabilities,
            "clientInfo": {"name": self.config.client_name, "version": self.config.client_version},
        });
        let body = Message::from(Request::new(id.clone(), INITIALIZE, Some(params))).to_vec();
        let (response, _) = self.transport.post(body).await?;
        if !response.status().is_success() {
            return Err(self.initialize_refused(Failed::read(response).await).await);
        }
        let session_id = response
            .headers()
            .get(MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let reattaches = response.headers().contains_key(TETHER_NODE)
            && response_kind(&response) == Some(ResponseKind::EventStream);
        let result =
            match read_single_response(response, &id, self.transport.request_timeout()).await? {
                RpcResponse::Result(result) => result.result,
                RpcResponse::Error(error) => {
                    return Err(version_error(error.error.data.as_ref()).unwrap_or(
                        Error::Status {
                            status: 200,
                            body: format!("initialize failed: {}", error.error.message),
                        },
                    ));
                }
            };
        let offered = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = ProtocolVersion::parse(offered).map_err(|_| Error::UnsupportedVersion {
            offered: offered.to_owned(),
        })?;
        self.transport.update_session(|s| {
            s.id = session_id;
            s.version = Some(version);
            s.reattaches = reattaches;
        });
        *self
            .server_result
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = result;
        let note = Message::from(Notification::new("notifications/initialized", None)).to_vec();
        let (response, _) = self.transport.post(note).await?;
        if !response.status().is_success() {
            return Err(Failed::read(response).await.into_error());
        }
        self.transport.update_session(|s| s.initialized = true);
        Ok(())
    }

    /// Why `initialize` was refused: a server naming only versions we do not speak, a server
    /// of the old HTTP+SSE transport (docs/PROTOCOL.md#legacy-fallback: 400/404/405, then a GET
    /// whose first event is `endpoint`), or a plain status error.
    async fn initialize_refused(&self, failed: Failed) -> Error {
        if let Some(error) = failed
            .rpc_error()
            .and_then(|e| version_error(e.get("data")))
        {
            return error;
        }
        if matches!(failed.status, 400 | 404 | 405) && self.is_legacy_server().await {
            return Error::LegacyTransport;
        }
        match failed.status {
            401 => Error::Unauthorized,
            status => Error::Status {
                status,
                body: failed.body,
            },
        }
    }

    async fn is_legacy_server(&self) -> bool {
        let probe = async {
            let (mut response, _) = self.transport.get(None).await.ok()?;
            if response_kind(&response) != Some(ResponseKind::EventStream) {
                return None;
            }
            let mut decoder = Decoder::new();
            loop {
                let chunk = response.chunk().await.ok()??;
                decoder.feed(&chunk);
                while let Some(item) = decoder.next_item().ok()? {
                    if let Item::Event(event) = item {
                        return Some(event.event_type() == "endpoint");
                    }
                }
            }
        };
        tokio::time::timeout(LEGACY_PROBE_TIMEOUT, probe)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
    }
}

/// An initialize error whose `data.supported` lists versions, none of which we speak (a
/// 2026-07-28-only server names its versions there).
fn version_error(data: Option<&Value>) -> Option<Error> {
    let supported: Vec<&str> = data?
        .get("supported")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let speaks_one = supported.iter().any(|v| ProtocolVersion::parse(v).is_ok());
    (!supported.is_empty() && !speaks_one).then(|| Error::UnsupportedVersion {
        offered: supported.join(", "),
    })
}

/// Reads the response to request `id` from a JSON or SSE answer (initialize).
async fn read_single_response(
    mut response: Response,
    id: &RequestId,
    timeout: Duration,
) -> Result<RpcResponse, Error> {
    let find = |messages: Vec<Message>| {
        messages.into_iter().find_map(|m| match m {
            Message::Response(r) if r.id() == Some(id) => Some(r),
            _ => None,
        })
    };
    match response_kind(&response) {
        Some(ResponseKind::Json) => {
            let bytes = read_body(response, timeout).await?;
            let body = parse_body(&bytes, Batching::Allowed)
                .map_err(|e| Error::Protocol(format!("initialize answer: {e}")))?;
            find(body.into_messages())
                .ok_or_else(|| Error::Protocol("initialize answer has no response".to_owned()))
        }
        Some(ResponseKind::EventStream) => {
            let read = async {
                let mut decoder = Decoder::new();
                while let Some(chunk) = response.chunk().await.map_err(Error::network)? {
                    decoder.feed(&chunk);
                    while let Some(item) = decoder
                        .next_item()
                        .map_err(|e| Error::Protocol(e.to_string()))?
                    {
                        let Item::Event(event) = item else { continue };
                        if event.data().is_empty() {
                            continue;
                        }
                        let message = serde_json::from_str(event.data())
                            .ok()
                            .and_then(|v| Message::from_value(v).ok());
                        if let Some(found) = message.and_then(|m| find(vec![m])) {
                            return Ok(found);
                        }
                    }
                }
                Err(Error::Protocol(
                    "initialize stream ended without a response".to_owned(),
                ))
            };
            tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| Error::Timeout)?
        }
        None => Err(Error::Protocol(
            "initialize answered without a JSON or SSE body".to_owned(),
        )),
    }
}
