//! The client's session: the state a handle and its stream tasks share ([`Inner`]), the
//! `initialize` handshake, POSTs with their retry rules (404 re-initializes, 429/503 wait
//! for `Retry-After`), and reading single answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::Response;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tether_proto::headers::{MCP_SESSION_ID, ResponseKind, TETHER_NODE};
use tether_proto::jsonrpc::{
    Batching, INITIALIZE, Message, Notification, Request, RequestId, Response as RpcResponse,
    parse_body,
};
use tether_proto::modern::ParamHeader;
use tether_proto::version::ProtocolVersion;
use tether_sse::{Decoder, Item};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::config::ClientConfig;
use super::error::Error;
use super::events::ClientEvent;
use super::retry::Attempts;
use super::tls::http_client;
use super::transport;
use super::transport::{Failed, Transport};
use crate::telemetry::{self, Side};

/// How long [`Client::connect`](super::Client::connect) probes for the 2024-11-05 `endpoint` event after an
/// `initialize` was refused.
pub(super) const LEGACY_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Capacity of the [`ClientEvents`] broadcast; a receiver lagging further loses the oldest.
pub(super) const EVENT_CAPACITY: usize = 64;

/// An MCP client over Streamable HTTP. Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.transport.url().as_str())
            .field("session_id", &self.session_id())
            .finish_non_exhaustive()
    }
}

/// State shared by the client handle and its stream tasks.
pub(crate) struct Inner {
    pub(super) transport: Transport,
    pub(super) config: ClientConfig,
    pub(super) next_id: AtomicU64,
    pub(super) events: broadcast::Sender<ClientEvent>,
    /// Serializes re-initialization, so that streams discovering one expiry together replace
    /// the session once.
    pub(super) reinit: tokio::sync::Mutex<()>,
    pub(super) server_result: Mutex<Value>,
    pub(super) standalone_open: AtomicBool,
    /// The client speaks the 2026-07-28 era (stateless requests, no session).
    pub(super) modern: AtomicBool,
    /// The `x-mcp-header` annotations of each tool the server listed in the 2026-07-28 era,
    /// by tool name: the `Mcp-Param-*` headers its calls carry.
    pub(super) tool_headers: Mutex<HashMap<String, Vec<ParamHeader>>>,
    /// The modern requests running, by the id their caller knows, each with the token that
    /// cancels it.
    pub(super) modern_running: Mutex<HashMap<RequestId, CancellationToken>>,
    /// The last `retry` the server sent on a 2026-07-28 answer: what a request sent again
    /// waits when its own answer (JSON, or cut before its `retry`) carried none.
    pub(super) server_retry: Mutex<Option<Duration>>,
    pub(super) shutdown: CancellationToken,
    /// When the client was made, for `mcp.client.session.duration`.
    pub(super) opened: std::time::Instant,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let session = self.transport.session();
        if session.id.is_some() {
            telemetry::record_session(
                Side::Client,
                session.version.map(ProtocolVersion::as_str),
                self.opened.elapsed(),
            );
        }
    }
}

pub(super) fn response_kind(response: &Response) -> Option<ResponseKind> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(ResponseKind::from_content_type)
}

pub(super) async fn read_body(
    response: Response,
    timeout: Duration,
) -> Result<bytes::Bytes, Error> {
    tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| Error::Timeout)?
        .map_err(Error::network)
}

impl Inner {
    /// The client state for `url`, not yet initialized: the HTTP client (TLS roots, timeouts),
    /// the configured headers, and request ids counting from `first_id`. Shared by
    /// [`Client::connect`](super::Client::connect) and [`Client::resume`](super::Client::resume) so that both speak with the same settings.
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
        Ok(Arc::new(Self {
            transport,
            config,
            next_id: AtomicU64::new(first_id),
            events: broadcast::channel(EVENT_CAPACITY).0,
            reinit: tokio::sync::Mutex::new(()),
            server_result: Mutex::new(Value::Null),
            standalone_open: AtomicBool::new(false),
            modern: AtomicBool::new(false),
            tool_headers: Mutex::new(HashMap::new()),
            modern_running: Mutex::new(HashMap::new()),
            server_retry: Mutex::new(None),
            shutdown: CancellationToken::new(),
            opened: std::time::Instant::now(),
        }))
    }
}

impl Inner {
    pub(super) fn emit(&self, event: ClientEvent) {
        let _ = self.events.send(event);
    }

    /// POSTs a message. 404 on an initialized session: re-initialize and send once more on
    /// the new session (the server did not accept it). 429 and 503: wait (`Retry-After` as a
    /// floor over our backoff) within the reconnect budget. Other failures are typed errors.
    pub(super) async fn post(
        self: &Arc<Self>,
        body: Vec<u8>,
    ) -> Result<(Response, transport::Session), Error> {
        let mut attempts = Attempts::request(self.config.reconnect, None);
        let mut resent = false;
        loop {
            attempts.next().await?;
            let (response, session) = self.transport.post(body.clone()).await?;
            if response.status().is_success() {
                return Ok((response, session));
            }
            let failed = Failed::read(response).await;
            match failed.status {
                404 if session.initialized && !resent => {
                    resent = true;
                    self.reinitialize(session.generation).await?;
                    // Sent again at once, on the new session.
                    attempts = Attempts::request(self.config.reconnect, None);
                }
                status @ (429 | 503) => {
                    let retry_after = failed.retry_after;
                    attempts.refused(failed.into_error(), status, retry_after);
                }
                _ => return Err(failed.into_error()),
            }
        }
    }

    /// Initializes if the session was dropped and a re-initialization failed earlier.
    pub(super) async fn ensure_initialized(self: &Arc<Self>) -> Result<(), Error> {
        let session = self.transport.session();
        if session.initialized {
            return Ok(());
        }
        self.reinitialize(session.generation).await
    }

    /// Replaces the session of generation `failed` (once, however many streams found it
    /// gone), emitting [`ClientEvent`](super::ClientEvent)s.
    pub(super) async fn reinitialize(self: &Arc<Self>, failed: u64) -> Result<(), Error> {
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
    pub(super) async fn initialize(self: &Arc<Self>) -> Result<(), Error> {
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
        let version =
            ProtocolVersion::parse_legacy(offered).map_err(|_| Error::UnsupportedVersion {
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
    pub(super) async fn initialize_refused(&self, failed: Failed) -> Error {
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

    pub(super) async fn is_legacy_server(&self) -> bool {
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
pub(super) fn version_error(data: Option<&Value>) -> Option<Error> {
    let supported: Vec<&str> = data?
        .get("supported")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let speaks_one = supported
        .iter()
        .any(|v| ProtocolVersion::parse_legacy(v).is_ok());
    (!supported.is_empty() && !speaks_one).then(|| Error::UnsupportedVersion {
        offered: supported.join(", "),
    })
}

/// Reads the response to request `id` from a JSON or SSE answer (initialize).
pub(super) async fn read_single_response(
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
