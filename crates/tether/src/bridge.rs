//! A stdio-framed MCP server that is really a remote Streamable HTTP server, reached with
//! tether's client: [`run`] reads a local client's JSON-RPC, one message per line, from any
//! byte stream and writes the server's messages, one per line, to another. `tether connect`
//! runs it on stdin and stdout, so a desktop assistant that launches stdio servers gets one
//! that survives cuts, stalls and server restarts; the rmcp adapter's client transport runs
//! it on an in-memory pipe (`tether::rmcp`, features `rmcp` and `client`).
//!
//! The local `initialize` becomes [`Client::connect`] with the local client's capabilities,
//! name and version, and is answered with the server's result; the client replays the same
//! initialize by itself when the server loses the session (404). Each local request becomes
//! one [`Client::request`], whose stream (resumed with `Last-Event-ID` across cuts, exactly
//! once) is copied out with the final response put back under the local request's id;
//! server→client requests go out under the server's ids and the local answers go back with
//! [`Client::respond`]. A request that fails (the session expired under it, the reconnect
//! budget ran out) is answered with a JSON-RPC error, and a re-initialization is announced
//! with a `notifications/message` log notification. The end of the input closes the session
//! (DELETE) and ends [`run`].
//!
//! [`ClientConfig::protocol`] chooses the era; under `auto` the bridge keeps the 2025 era
//! wherever the server serves it ([`ClientConfig::prefer_tasks`] off). Against a server
//! spoken to in the 2026-07-28 era the local client still speaks the 2025 one: its
//! `initialize` is answered by the bridge from `server/discover` (at the version it asked
//! for), its requests become stateless ones
//! (a `tools/call` a task where the server offers tasks), and the server's questions
//! (`input_required`) become requests to the local client under the bridge's ids
//! (`tether-connect-<n>`), whose answers the client sends back with the retried request. A
//! local `notifications/cancelled` drops the cancelled request's connection (this era's
//! cancellation) and the request gets no answer; the server's list-changed notifications
//! arrive through a `subscriptions/listen` stream in place of the standalone GET, reopened
//! after a cut.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tether_proto::jsonrpc::{
    ErrorObject, INTERNAL_ERROR, INVALID_REQUEST, Message, Notification, Request, RequestId,
    Response,
};
use tether_proto::modern::SUBSCRIPTIONS_ACKNOWLEDGED;
use tether_proto::version::ProtocolVersion;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use crate::client::{
    Client, ClientConfig, ClientEvent, Error, MessageStream, ServerRequestHandler,
};
use crate::lock;
use crate::stdio;

/// The longest input line accepted: the SSE event limit, so anything the server could send
/// back fits too.
pub const MAX_LINE: usize = tether_sse::DEFAULT_MAX_EVENT_BYTES;

/// Lines queued for the output before senders wait.
const OUTPUT_QUEUE: usize = 256;

/// How long the DELETE at the end may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The logger name of the bridge's own log notifications.
const LOGGER: &str = "tether-connect";

/// Bridges the local client on `input` and `output` to the server at `url` until `input`
/// ends (module docs).
pub async fn run(
    url: &str,
    config: ClientConfig,
    input: impl AsyncBufRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
) {
    Bridge::new(url.to_owned(), config).run(input, output).await;
}

/// The bridge's state: the remote session once initialized, and which local request each
/// remote request id stands for (for cancellations).
struct Bridge {
    url: String,
    config: ClientConfig,
    out: mpsc::Sender<Message>,
    out_rx: Option<mpsc::Receiver<Message>>,
    client: Option<Client>,
    /// Local request id → the remote request id it was sent under.
    remote_ids: Arc<Mutex<HashMap<RequestId, RequestId>>>,
    /// Asks the local client what a 2026-07-28 server asks.
    asker: Arc<LocalAsker>,
}

impl Bridge {
    fn new(url: String, config: ClientConfig) -> Self {
        let (out, out_rx) = mpsc::channel(OUTPUT_QUEUE);
        let asker = Arc::new(LocalAsker {
            // Weak: the output writer ends when the bridge drops its sender at end of input.
            out: out.downgrade(),
            modern: AtomicBool::new(false),
            waiting: Mutex::default(),
            next: AtomicU64::new(1),
        });
        let mut config = config;
        config.request_handler = Some(Arc::clone(&asker) as Arc<dyn ServerRequestHandler>);
        // The local client speaks 2025: a session carries all it may send (`ping`,
        // `logging/setLevel`, `resources/subscribe`, its own server requests), so under `auto`
        // the 2026-07-28 era is only for a server that serves nothing else.
        config.prefer_tasks = false;
        Self {
            url,
            config,
            out,
            out_rx: Some(out_rx),
            client: None,
            remote_ids: Arc::default(),
            asker,
        }
    }

    async fn run(
        mut self,
        mut input: impl AsyncBufRead + Unpin,
        output: impl AsyncWrite + Unpin + Send + 'static,
    ) {
        let Some(out_rx) = self.out_rx.take() else {
            return;
        };
        let mut writer = tokio::spawn(write_lines(out_rx, output));
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdio::read_line(&mut input, &mut line, MAX_LINE).await {
                Ok(false) => break,
                Ok(true) => {}
                Err(error) => {
                    tracing::error!(error = %crate::error_chain(&error), "reading the local client's input failed");
                    break;
                }
            }
            let Some(message) = stdio::parse_line(&line) else {
                continue;
            };
            match message {
                Ok(message) => self.handle(message).await,
                Err(error) => {
                    tracing::warn!(error = %crate::error_chain(&error), "an input line is not JSON-RPC");
                    self.emit(Message::Response(error.error_response())).await;
                }
            }
        }
        if let Some(client) = self.client.take()
            && tokio::time::timeout(CLOSE_TIMEOUT, client.close())
                .await
                .is_err()
        {
            tracing::warn!("closing the session timed out");
        }
        drop(self.out);
        // The last messages reach the local client unless it stopped reading.
        if tokio::time::timeout(CLOSE_TIMEOUT, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
    }

    async fn emit(&self, message: Message) {
        let _ = self.out.send(message).await;
    }

    /// One message from the local client.
    async fn handle(&mut self, message: Message) {
        match message {
            Message::Request(request) if request.is_initialize() => self.initialize(request).await,
            Message::Request(request) => {
                let Some(client) = self.client.clone() else {
                    let error = ErrorObject::new(INVALID_REQUEST, "send initialize first");
                    self.emit(Message::Response(Response::error(Some(request.id), error)))
                        .await;
                    return;
                };
                tokio::spawn(relay(
                    client,
                    request,
                    self.out.clone(),
                    Arc::clone(&self.remote_ids),
                ));
            }
            Message::Notification(notification) => self.notify(notification).await,
            Message::Response(response) if self.asker.answered(&response) => {}
            Message::Response(response) => match &self.client {
                Some(client) => {
                    if let Err(error) = client.respond(response).await {
                        tracing::warn!(error = %crate::error_chain(&error), "an answer to the server could not be sent");
                    }
                }
                None => tracing::warn!("an answer before initialize dropped"),
            },
        }
    }

    /// `initialize`: connects with the local client's identity and answers with the server's
    /// result.
    async fn initialize(&mut self, request: Request) {
        let params = request.params.clone().unwrap_or_else(|| json!({}));
        let mut config = self.config.clone();
        if let Some(version) = params["protocolVersion"]
            .as_str()
            .and_then(|v| v.parse::<ProtocolVersion>().ok())
        {
            config.protocol_version = version;
        }
        if let Some(capabilities) = params.get("capabilities") {
            config.capabilities = capabilities.clone();
        }
        if let Some(name) = params["clientInfo"]["name"].as_str() {
            config.client_name = name.to_owned();
        }
        if let Some(version) = params["clientInfo"]["version"].as_str() {
            config.client_version = version.to_owned();
        }
        match Client::connect(&self.url, config).await {
            Ok(client) => {
                self.asker
                    .modern
                    .store(client.is_modern(), Ordering::SeqCst);
                let result = if client.is_modern() {
                    initialize_result_of(&client.server_info(), config_version(&params))
                } else {
                    client.server_info()
                };
                tokio::spawn(announce_reinitializations(client.clone(), self.out.clone()));
                tokio::spawn(relay_standalone(client.clone(), self.out.clone()));
                if let Some(old) = self.client.replace(client) {
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, old.close()).await;
                }
                self.emit(Message::Response(Response::success(request.id, result)))
                    .await;
            }
            Err(error) => {
                tracing::error!(error = %crate::error_chain(&error), url = %self.url, "cannot connect");
                let error = ErrorObject::new(
                    INTERNAL_ERROR,
                    format!(
                        "tether: cannot reach {}: {}",
                        self.url,
                        crate::error_chain(&error)
                    ),
                );
                self.emit(Message::Response(Response::error(Some(request.id), error)))
                    .await;
            }
        }
    }

    /// A notification from the local client: `initialized` was already sent by
    /// [`Client::connect`]; cancellations name the remote id; the rest go as they are.
    async fn notify(&self, notification: Notification) {
        let Some(client) = &self.client else { return };
        if notification.method == "notifications/initialized" {
            return;
        }
        let mut params = notification.params.clone();
        if let Some(local) = notification.cancelled_request_id() {
            // The remote id is known once the server accepted the request; a cancellation
            // before that (or after the answer) names nothing the server runs.
            let Some(remote) = lock(&self.remote_ids).get(&local).cloned() else {
                tracing::debug!(request = %local, "cancellation of no running request dropped");
                return;
            };
            if let Some(params) = params.as_mut() {
                params["requestId"] = json!(remote);
            }
        }
        if let Err(error) = client.notify(&notification.method, params).await {
            tracing::warn!(error = %crate::error_chain(&error), method = %notification.method, "a notification could not be sent");
        }
    }
}

/// One local request: sent, its stream copied to the output, its response put back under the
/// local id; a failure becomes a JSON-RPC error.
async fn relay(
    client: Client,
    request: Request,
    out: mpsc::Sender<Message>,
    remote_ids: Arc<Mutex<HashMap<RequestId, RequestId>>>,
) {
    let local = request.id;
    let stream = match client.request(&request.method, request.params).await {
        Ok(stream) => stream,
        Err(error) => {
            let _ = out.send(failure(local, &error)).await;
            return;
        }
    };
    if let Some(remote) = stream.request_id() {
        lock(&remote_ids).insert(local.clone(), remote.clone());
    }
    let answer = copy_stream(stream, &out).await;
    lock(&remote_ids).remove(&local);
    let message = match answer {
        // The local client cancelled it: a cancelled request gets no answer.
        Err(Error::Cancelled) => return,
        Ok(Some(response)) => Message::Response(with_id(response, local)),
        Ok(None) => failure(local, &Error::NoResponse),
        Err(error) => failure(local, &error),
    };
    let _ = out.send(message).await;
}

/// Copies a stream's messages to the output until its final response, which is returned. Each
/// message is committed once it is queued for the output.
async fn copy_stream(
    mut stream: MessageStream,
    out: &mpsc::Sender<Message>,
) -> Result<Option<Response>, Error> {
    while let Some(message) = stream.next().await {
        match message? {
            Message::Response(response) => {
                stream.ack();
                return Ok(Some(response));
            }
            // Answered by the client already; the local client must not answer it again.
            Message::Request(request) if request.method == "ping" => {}
            message => {
                if out.send(message).await.is_err() {
                    return Ok(None);
                }
            }
        }
    }
    Ok(None)
}

/// The standalone stream's messages, copied to the output for as long as the client lives.
async fn relay_standalone(client: Client, out: mpsc::Sender<Message>) {
    let Ok(mut stream) = client.server_messages() else {
        return;
    };
    while let Some(message) = stream.next().await {
        match message {
            Ok(Message::Request(request)) if request.method == "ping" => {}
            // The 2026-07-28 listen stream's (re)opening: nothing a 2025 client knows.
            Ok(Message::Notification(notification))
                if notification.method == SUBSCRIPTIONS_ACKNOWLEDGED => {}
            Ok(message) => {
                if out.send(message).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::debug!(error = %crate::error_chain(&error), "standalone stream ended");
                return;
            }
        }
    }
}

/// Tells the local client, with a log notification, when the server lost the session and
/// the bridge re-initialized.
async fn announce_reinitializations(client: Client, out: mpsc::Sender<Message>) {
    let mut events = client.events();
    drop(client);
    while let Some(event) = events.recv().await {
        let text = match event {
            ClientEvent::SessionExpired { .. } => {
                "the server lost the session; requests in flight fail and the bridge re-initializes"
            }
            ClientEvent::Reinitialized { .. } => "re-initialized with the server: a new session",
            _ => continue,
        };
        tracing::warn!("{text}");
        let params = json!({"level": "warning", "logger": LOGGER, "data": text});
        let log = Notification::new("notifications/message", Some(params));
        if out.send(Message::Notification(log)).await.is_err() {
            return;
        }
    }
}

/// `response` under the local client's request id.
fn with_id(response: Response, id: RequestId) -> Response {
    match response {
        Response::Result(result) => Response::success(id, result.result),
        Response::Error(error) => Response::error(Some(id), error.error),
    }
}

/// The JSON-RPC error answering a request the bridge could not complete.
fn failure(id: RequestId, error: &Error) -> Message {
    let reason = match error {
        Error::SessionExpired => "session_expired",
        Error::Auth(_) => "authorization",
        _ => "transport",
    };
    let error = ErrorObject::new(
        INTERNAL_ERROR,
        format!("tether: {}", crate::error_chain(&error)),
    )
    .with_data(json!({"reason": reason}));
    Message::Response(Response::error(Some(id), error))
}

/// Writes each message as one line to `output`, flushing after each.
async fn write_lines(mut messages: mpsc::Receiver<Message>, mut output: impl AsyncWrite + Unpin) {
    while let Some(message) = messages.recv().await {
        let mut line = message.to_vec();
        line.push(b'\n');
        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
            tracing::error!("the local client's output closed");
            return;
        }
    }
}

/// The version the local client asked for in `initialize`, if this bridge speaks it (2025).
fn config_version(params: &serde_json::Value) -> ProtocolVersion {
    params["protocolVersion"]
        .as_str()
        .and_then(|v| ProtocolVersion::parse_legacy(v).ok())
        .unwrap_or(ProtocolVersion::LATEST_LEGACY)
}

/// The `initialize` result a 2025 client gets for a server discovered in the 2026-07-28 era:
/// its capabilities (the extensions, which a 2025 client cannot use, left out), identity and
/// instructions, at `version`.
fn initialize_result_of(
    discovered: &serde_json::Value,
    version: ProtocolVersion,
) -> serde_json::Value {
    let mut capabilities = discovered
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(capabilities) = capabilities.as_object_mut() {
        capabilities.remove("extensions");
    }
    let server_info = discovered["_meta"][tether_proto::modern::META_SERVER_INFO].clone();
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": if server_info.is_object() { server_info } else { json!({"name": "remote", "version": "0"}) },
    });
    if let Some(instructions) = discovered.get("instructions") {
        result["instructions"] = instructions.clone();
    }
    result
}

/// Puts a 2026-07-28 server's questions to the local client: each becomes a request on
/// the output under an id of the bridge's, and the local client's answer is
/// the question's answer (read from the input). Inactive (declining every request) while the client speaks the
/// 2025 era, where server requests pass through under the server's ids.
struct LocalAsker {
    out: mpsc::WeakSender<Message>,
    modern: AtomicBool,
    waiting: Mutex<HashMap<RequestId, tokio::sync::oneshot::Sender<Response>>>,
    next: AtomicU64,
}

impl LocalAsker {
    /// Hands `response` to the question waiting for it; `false` when none is.
    fn answered(&self, response: &Response) -> bool {
        let Some(id) = response.id() else {
            return false;
        };
        let Some(waiter) = lock(&self.waiting).remove(id) else {
            return false;
        };
        let _ = waiter.send(response.clone());
        true
    }
}

#[async_trait::async_trait]
impl ServerRequestHandler for LocalAsker {
    fn accepts(&self, _request: &Request) -> bool {
        self.modern.load(Ordering::SeqCst)
    }

    async fn handle(&self, request: &Request) -> Result<serde_json::Value, ErrorObject> {
        let id = RequestId::String(format!(
            "tether-connect-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = tokio::sync::oneshot::channel();
        lock(&self.waiting).insert(id.clone(), tx);
        let mut asked = request.clone();
        asked.id = id.clone();
        let sent = match self.out.upgrade() {
            Some(out) => out.send(Message::Request(asked)).await.is_ok(),
            None => false,
        };
        if !sent {
            lock(&self.waiting).remove(&id);
            return Err(ErrorObject::new(INTERNAL_ERROR, "the local client is gone"));
        }
        match rx.await {
            Ok(Response::Result(result)) => Ok(result.result),
            Ok(Response::Error(error)) => Err(error.error),
            Err(_) => Err(ErrorObject::new(
                INTERNAL_ERROR,
                "the local client did not answer",
            )),
        }
    }
}
