//! A minimal HTTP/1.1 + SSE reader for tests that must see exactly what a server sent.
//!
//! It speaks HTTP by hand over a [`tokio::net::TcpStream`]: one request per connection
//! (`Connection: close`), a hand-parsed response head, `Content-Length`, chunked or
//! read-to-close bodies, and [`tether_sse::Decoder`] for `text/event-stream`. No HTTP client
//! library and none of tether's client code is involved, so no deduplication, reconnection or
//! header normalisation can hide a server bug: every event arrives in a [`Transcript`] with
//! the id it carried, in order, with the status, headers and de-chunked body bytes.
//!
//! - [`RawClient`]: the MCP conversation (`initialize`, tool calls, resume with
//!   `Last-Event-ID`, `DELETE`) with the headers a 2025-11-25 client sends, plus
//!   [`RawClient::request`] / [`RawClient::send`] / [`RawClient::send_bytes`] for bad input.
//! - [`RawResponse`]: one response, read item by item; dropping it (or
//!   [`RawResponse::into_transcript`]) closes the connection, which is how tests cut a stream.
//!
//! It does not follow redirects, reuse connections, speak TLS or HTTP/2, or retry anything.
//! Every read is bounded by the client's timeout so a silent server fails a test instead of
//! hanging it.

use std::{fmt, net::SocketAddr, time::Duration};

use anyhow::{Context as _, anyhow, bail, ensure};
use serde_json::{Value, json};
use tether_sse::{Decoder, Item};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// The protocol version [`RawClient`] negotiates and sends in `MCP-Protocol-Version`: the
/// newest revision with resumable streams (servers send priming events only from it on).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// How long one read or connect may take before the reader gives up. Generous, because a
/// loaded CI machine runs several servers at once; tests that expect silence use
/// [`RawResponse::next_item_within`] with a short bound instead.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest response head accepted (status line and headers). Real servers send well under
/// 1 KiB; the bound only keeps a broken server from growing the buffer forever.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Size of one socket read.
const READ_CHUNK: usize = 16 * 1024;

/// Response headers in the order received, names as sent; lookups ignore case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The first value of `name` (case-insensitive).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order (case-insensitive).
    #[must_use]
    pub fn get_all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// One dispatched SSE event, as [`tether_sse::Event`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event ID at dispatch (WHATWG): this block's `id`, or the previous one when the
    /// block had none. Check [`Transcript::body`] to see whether each block carried its own.
    pub id: String,
    /// The event type (`message` when the block had no `event` field).
    pub event_type: String,
    /// The data lines joined with LF; empty for a priming event.
    pub data: String,
    /// The `retry` field of this event's block, if any.
    pub retry: Option<u64>,
}

impl SseEvent {
    /// The data parsed as JSON; `None` when empty (priming events).
    ///
    /// # Errors
    ///
    /// When the data is not JSON.
    pub fn json(&self) -> anyhow::Result<Option<Value>> {
        if self.data.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&self.data)
            .map(Some)
            .with_context(|| format!("event {:?} data is not JSON: {:?}", self.id, self.data))
    }
}

/// What the SSE decoder yielded, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event (including priming events, whose data is empty).
    Event(SseEvent),
    /// A comment line (keep-alive), without the colon and one leading space.
    Comment(String),
    /// A `retry` field, in milliseconds (yielded when read, before its block's event).
    Retry(u64),
    /// A block with an `id` but no `data` changed the last event ID (nothing dispatched).
    LastEventId(String),
}

/// Everything one response delivered: status, headers, de-chunked body bytes and, for an
/// event stream, each decoded item in order.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers.
    pub headers: Headers,
    /// The body bytes read so far, after chunked decoding.
    pub body: Vec<u8>,
    /// The decoded SSE items read so far (empty unless `Content-Type: text/event-stream`).
    pub items: Vec<SseItem>,
    /// Whether the server ended the body (content length reached, last chunk, or close);
    /// false when the reader stopped early.
    pub complete: bool,
}

impl Transcript {
    /// The dispatched events, in order.
    pub fn events(&self) -> impl Iterator<Item = &SseEvent> {
        self.items.iter().filter_map(|item| match item {
            SseItem::Event(event) => Some(event),
            _ => None,
        })
    }

    /// The id of every dispatched event, in order (priming events included).
    #[must_use]
    pub fn event_ids(&self) -> Vec<&str> {
        self.events().map(|event| event.id.as_str()).collect()
    }

    /// The id of the last dispatched event or id-only block: what a client would send as
    /// `Last-Event-ID`. `None` when the stream carried no id.
    #[must_use]
    pub fn last_event_id(&self) -> Option<&str> {
        self.items
            .iter()
            .rev()
            .find_map(|item| match item {
                SseItem::Event(event) => Some(event.id.as_str()),
                SseItem::LastEventId(id) => Some(id.as_str()),
                _ => None,
            })
            .filter(|id| !id.is_empty())
    }

    /// The `retry` values received, in order.
    #[must_use]
    pub fn retries(&self) -> Vec<u64> {
        self.items
            .iter()
            .filter_map(|item| match item {
                SseItem::Retry(ms) => Some(*ms),
                _ => None,
            })
            .collect()
    }

    /// The comments received, in order.
    #[must_use]
    pub fn comments(&self) -> Vec<&str> {
        self.items
            .iter()
            .filter_map(|item| match item {
                SseItem::Comment(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The JSON-RPC messages delivered, each with the SSE event id it came with (empty for a
    /// JSON body). For an event stream: every event with non-empty data; for
    /// `application/json`: the body (an array is flattened).
    ///
    /// # Errors
    ///
    /// When an event's data or the body is not JSON.
    pub fn messages(&self) -> anyhow::Result<Vec<(String, Value)>> {
        if self.is_event_stream() {
            let mut messages = Vec::new();
            for event in self.events() {
                if let Some(value) = event.json()? {
                    messages.push((event.id.clone(), value));
                }
            }
            return Ok(messages);
        }
        if self.body.is_empty() {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "body is not JSON: {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })?;
        Ok(match value {
            Value::Array(values) => values.into_iter().map(|v| (String::new(), v)).collect(),
            value => vec![(String::new(), value)],
        })
    }

    /// The body parsed as one JSON value (for JSON responses and error bodies).
    ///
    /// # Errors
    ///
    /// When the body is not JSON.
    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "body is not JSON: {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Whether the response is `text/event-stream`.
    #[must_use]
    pub fn is_event_stream(&self) -> bool {
        is_event_stream(&self.headers)
    }
}

/// An HTTP request written byte for byte as described: nothing is added except
/// `Content-Length` when a body is set and no such header was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRequest {
    /// The method, e.g. `POST`.
    pub method: String,
    /// The request target, e.g. `/mcp`.
    pub target: String,
    /// Header lines in order, written as `name: value`.
    pub headers: Vec<(String, String)>,
    /// The body (may be empty).
    pub body: Vec<u8>,
}

impl RawRequest {
    /// A request with no headers and no body.
    #[must_use]
    pub fn new(method: &str, target: &str) -> Self {
        Self {
            method: method.to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Sets `name` to `value`, replacing any header of that name (case-insensitive).
    #[must_use]
    pub fn header(self, name: &str, value: &str) -> Self {
        let mut request = self.without_header(name);
        request.headers.push((name.to_owned(), value.to_owned()));
        request
    }

    /// Adds a header line even if one of that name exists (for duplicate-header tests).
    #[must_use]
    pub fn append_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Removes every header of that name (case-insensitive).
    #[must_use]
    pub fn without_header(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body.
    #[must_use]
    pub fn json(self, value: &Value) -> Self {
        self.body(value.to_string())
    }

    /// The bytes written on the wire.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.target).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        let has_length = self.headers.iter().any(|(n, _)| {
            n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
        });
        if !self.body.is_empty() && !has_length {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// What [`RawClient::initialize`] saw.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The `initialize` response, read to its end.
    pub response: Transcript,
    /// The JSON-RPC `result` of `initialize`.
    pub result: Value,
    /// The response to `notifications/initialized` (202 expected, not checked).
    pub initialized: Transcript,
}

/// A raw MCP Streamable HTTP client for one endpoint and (after `initialize`) one session.
#[derive(Debug, Clone)]
pub struct RawClient {
    addr: SocketAddr,
    authority: String,
    path: String,
    session_id: Option<String>,
    protocol_version: String,
    next_id: i64,
    timeout: Duration,
    bearer_token: Option<String>,
}

/// The 2026-07-28 protocol version, as the modern requests of [`RawClient::modern`] state it.
pub const MODERN_VERSION: &str = "2026-07-28";

/// A 2026-07-28 request's `_meta`: the envelope (version, client capabilities for
/// elicitation, sampling and roots, client info) with `extra` merged over it.
#[must_use]
pub fn modern_envelope(extra: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {}, "sampling": {}, "roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "tether-testkit", "version": "1"},
    });
    if let (Value::Object(meta), Value::Object(extra)) = (&mut meta, extra) {
        meta.extend(extra);
    }
    meta
}

/// `_meta` of a 2026-07-28 client that declares the tasks extension (and roots and
/// elicitation), to merge into [`modern_envelope`].
#[must_use]
pub fn task_meta() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {
        "roots": {}, "elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

impl RawClient {
    /// A client for `http://HOST:PORT/PATH` (HOST an IP address or `localhost`).
    ///
    /// # Errors
    ///
    /// When the URL is not of that shape.
    pub fn new(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("only http:// URLs are supported: {url}"))?;
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, "/"),
        };
        let addr: SocketAddr = authority
            .replace("localhost", "127.0.0.1")
            .parse()
            .with_context(|| format!("URL authority must be IP:PORT: {url}"))?;
        Ok(Self {
            addr,
            authority: authority.to_owned(),
            path: path.to_owned(),
            session_id: None,
            protocol_version: PROTOCOL_VERSION.to_owned(),
            next_id: 1,
            timeout: DEFAULT_TIMEOUT,
            bearer_token: None,
        })
    }

    /// Sets the bound on each connect and read.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the version sent in `initialize` and `MCP-Protocol-Version`.
    #[must_use]
    pub fn with_protocol_version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.protocol_version);
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request from now on.
    #[must_use]
    pub fn with_bearer_token(mut self, token: &str) -> Self {
        self.bearer_token = Some(token.to_owned());
        self
    }

    /// The server's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint path, e.g. `/mcp`.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The session id learnt from `initialize`, if any.
    #[must_use]
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Replaces the session id sent with later requests (`None`: send none).
    pub fn set_session_id(&mut self, session_id: Option<String>) {
        self.session_id = session_id;
    }

    /// Takes the next JSON-RPC request id (1, 2, …).
    pub fn next_request_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A 2026-07-28 POST of `method` with `params`, its `_meta` the envelope with `meta`
    /// merged ([`modern_envelope`]), and the SEP-2243 headers (`Mcp-Method`, and `Mcp-Name`
    /// from `params.name`, `params.uri` or `params.taskId`).
    #[must_use]
    pub fn modern(&self, id: i64, method: &str, mut params: Value, meta: Value) -> RawRequest {
        params["_meta"] = modern_envelope(meta);
        let name = ["name", "uri", "taskId"]
            .iter()
            .find_map(|key| params.get(*key))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut request = self
            .request("POST")
            .header("MCP-Protocol-Version", MODERN_VERSION)
            .header("Mcp-Method", method)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if let Some(name) = name {
            request = request.header("Mcp-Name", &name);
        }
        request
    }

    /// `tasks/get` of `task` (declaring the extension) until its status is `wanted` or
    /// terminal, or 20 s pass; the last answer.
    ///
    /// # Errors
    ///
    /// When an exchange fails or its body is not JSON.
    pub async fn poll_task(&self, task: &str, wanted: &str) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let request = self.modern(90, "tasks/get", json!({"taskId": task}), task_meta());
            let got = self.exchange(&request).await?.json()?;
            let status = got["result"]["status"].as_str().unwrap_or("?");
            if status == wanted
                || !matches!(status, "working" | "input_required")
                || tokio::time::Instant::now() > deadline
            {
                return Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A request to the endpoint with the headers a 2025-11-25 client sends: `Host`,
    /// `Connection: close`, `Accept` for both JSON and SSE, `MCP-Protocol-Version`, and
    /// `Mcp-Session-Id` once known; `Content-Type: application/json` on POST; `Authorization`
    /// when a bearer token was given. Adjust it with
    /// [`RawRequest::header`] / [`RawRequest::without_header`] for bad-input tests.
    #[must_use]
    pub fn request(&self, method: &str) -> RawRequest {
        let mut request = RawRequest::new(method, &self.path)
            .header("Host", &self.authority)
            .header("Connection", "close")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", &self.protocol_version);
        if method == "POST" {
            request = request.header("Content-Type", "application/json");
        }
        if let Some(session_id) = &self.session_id {
            request = request.header("Mcp-Session-Id", session_id);
        }
        if let Some(token) = &self.bearer_token {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        request
    }

    /// Sends a request and reads the response head.
    ///
    /// # Errors
    ///
    /// Connect, write or read failures, timeouts, or a malformed response head.
    pub async fn send(&self, request: &RawRequest) -> anyhow::Result<RawResponse> {
        self.send_bytes(&request.to_bytes()).await
    }

    /// Sends a request and reads the whole response: what a test of a status or an error
    /// body wants.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send), and failures reading the body.
    pub async fn exchange(&self, request: &RawRequest) -> anyhow::Result<Transcript> {
        self.send(request).await?.read_to_end().await
    }

    /// Writes arbitrary bytes to a new connection and reads the response head.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn send_bytes(&self, bytes: &[u8]) -> anyhow::Result<RawResponse> {
        let mut stream = tokio::time::timeout(self.timeout, TcpStream::connect(self.addr))
            .await
            .with_context(|| format!("connect to {} timed out", self.addr))?
            .with_context(|| format!("connect to {}", self.addr))?;
        stream.set_nodelay(true)?;
        tokio::time::timeout(self.timeout, stream.write_all(bytes))
            .await
            .context("writing the request timed out")?
            .context("writing the request")?;
        RawResponse::read_head(stream, self.timeout).await
    }

    /// POSTs one JSON-RPC message (or batch) with the standard headers.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn post(&self, message: &Value) -> anyhow::Result<RawResponse> {
        self.send(&self.request("POST").json(message)).await
    }

    /// POSTs a JSON-RPC request with the next request id; returns the id and the response.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn post_request(
        &mut self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<(i64, RawResponse)> {
        let id = self.next_request_id();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Ok((id, self.post(&message).await?))
    }

    /// POSTs a JSON-RPC notification.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> anyhow::Result<RawResponse> {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        self.post(&message).await
    }

    /// `initialize` (reading its response to the end, JSON or SSE), learns `Mcp-Session-Id`,
    /// then sends `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// I/O failures, a non-200 status, or a response without a `result`.
    pub async fn initialize(&mut self) -> anyhow::Result<Initialized> {
        let params = json!({
            "protocolVersion": self.protocol_version,
            "capabilities": {},
            "clientInfo": {"name": "tether-testkit-raw", "version": "0.0.0"},
        });
        let (id, mut response) = self.post_request("initialize", params).await?;
        response.read_until_response(id).await?;
        let response = response.into_transcript();
        ensure!(
            response.status == 200,
            "initialize: status {} body {:?}",
            response.status,
            String::from_utf8_lossy(&response.body)
        );
        let result = response
            .messages()?
            .into_iter()
            .find_map(|(_, m)| (m["id"] == json!(id)).then(|| m["result"].clone()))
            .filter(|r| !r.is_null())
            .ok_or_else(|| anyhow!("initialize: no result in {response:?}"))?;
        self.session_id = response.headers.get("mcp-session-id").map(str::to_owned);
        let initialized = self
            .notify("notifications/initialized", None)
            .await?
            .read_to_end()
            .await?;
        Ok(Initialized {
            response,
            result,
            initialized,
        })
    }

    /// POSTs `tools/call` for `name` with `arguments`, with `_meta.progressToken` when given;
    /// returns the request id and the response (head read, body not yet).
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn call_tool(
        &mut self,
        name: &str,
        arguments: Value,
        progress_token: Option<Value>,
    ) -> anyhow::Result<(i64, RawResponse)> {
        let mut params = json!({"name": name, "arguments": arguments});
        if let Some(token) = progress_token {
            params["_meta"] = json!({"progressToken": token});
        }
        self.post_request("tools/call", params).await
    }

    /// GET with `Last-Event-ID: last_event_id`: resumes the stream that id belongs to.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn resume(&self, last_event_id: &str) -> anyhow::Result<RawResponse> {
        self.send(
            &self
                .request("GET")
                .header("Accept", "text/event-stream")
                .header("Last-Event-ID", last_event_id),
        )
        .await
    }

    /// GET without `Last-Event-ID`: opens the standalone stream.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn open_get_stream(&self) -> anyhow::Result<RawResponse> {
        self.send(&self.request("GET").header("Accept", "text/event-stream"))
            .await
    }

    /// DELETE the session, reading the whole response.
    ///
    /// # Errors
    ///
    /// As for [`send`](Self::send).
    pub async fn delete_session(&self) -> anyhow::Result<Transcript> {
        self.send(&self.request("DELETE"))
            .await?
            .read_to_end()
            .await
    }
}

/// One HTTP response: the head is read, the body is read on demand.
pub struct RawResponse {
    stream: TcpStream,
    timeout: Duration,
    /// Bytes read from the socket and not yet framed.
    pending: Vec<u8>,
    framing: Framing,
    sse: Option<Decoder>,
    transcript: Transcript,
}

impl fmt::Debug for RawResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawResponse")
            .field("framing", &self.framing)
            .field("transcript", &self.transcript)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// `Content-Length`: this many bytes left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(ChunkState),
    /// Neither: the body ends when the server closes.
    UntilClose,
    /// The body has ended.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

impl RawResponse {
    async fn read_head(mut stream: TcpStream, timeout: Duration) -> anyhow::Result<Self> {
        let mut buf = Vec::with_capacity(READ_CHUNK);
        let head_end = loop {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                break end;
            }
            ensure!(
                buf.len() <= MAX_HEAD_BYTES,
                "response head over {MAX_HEAD_BYTES} bytes"
            );
            let n = tokio::time::timeout(timeout, stream.read_buf(&mut buf))
                .await
                .context("timed out waiting for the response head")?
                .context("reading the response head")?;
            if n == 0 {
                bail!(
                    "connection closed before a complete response head ({} bytes: {:?})",
                    buf.len(),
                    String::from_utf8_lossy(&buf)
                );
            }
        };
        let head = std::str::from_utf8(&buf[..head_end]).context("response head is not UTF-8")?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        ensure!(
            version.starts_with("HTTP/1."),
            "bad status line {status_line:?}"
        );
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| anyhow!("bad header line {line:?}"))?;
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
        let headers = Headers(headers);
        let chunked = headers
            .get_all("transfer-encoding")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("chunked"));
        let framing = if matches!(status, 100..=199 | 204 | 304) {
            Framing::Done
        } else if chunked {
            Framing::Chunked(ChunkState::Size)
        } else if let Some(length) = headers.get("content-length") {
            let length: u64 = length
                .parse()
                .with_context(|| format!("bad Content-Length {length:?}"))?;
            if length == 0 {
                Framing::Done
            } else {
                Framing::Length(length)
            }
        } else {
            Framing::UntilClose
        };
        let sse = is_event_stream(&headers).then(Decoder::new);
        let pending = buf.split_off(head_end + 4);
        let mut response = Self {
            stream,
            timeout,
            pending,
            framing,
            sse,
            transcript: Transcript {
                status,
                headers,
                complete: framing == Framing::Done,
                ..Transcript::default()
            },
        };
        response.frame_pending()?;
        Ok(response)
    }

    /// The status code.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.transcript.status
    }

    /// The response headers.
    #[must_use]
    pub fn headers(&self) -> &Headers {
        &self.transcript.headers
    }

    /// The first value of a header (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.transcript.headers.get(name)
    }

    /// Whether the response is `text/event-stream`.
    #[must_use]
    pub fn is_event_stream(&self) -> bool {
        self.sse.is_some()
    }

    /// What has been read so far.
    #[must_use]
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// Stops reading and closes the connection (a cut, if the body had not ended); returns
    /// what was read.
    #[must_use]
    pub fn into_transcript(self) -> Transcript {
        self.transcript
    }

    /// The next SSE item, reading from the socket as needed; `None` once the body has ended.
    ///
    /// # Errors
    ///
    /// Not an event stream, I/O failure, timeout, bad chunked framing, or an SSE limit.
    pub async fn next_item(&mut self) -> anyhow::Result<Option<SseItem>> {
        self.next_item_within(self.timeout)
            .await?
            .ok_or_else(|| anyhow!("no SSE item within {:?}", self.timeout))
    }

    /// Like [`next_item`](Self::next_item) but waits at most `wait` for more bytes:
    /// `Ok(None)` when nothing arrived in time, `Ok(Some(None))` at the end of the body.
    ///
    /// # Errors
    ///
    /// As for [`next_item`](Self::next_item), except the timeout.
    pub async fn next_item_within(
        &mut self,
        wait: Duration,
    ) -> anyhow::Result<Option<Option<SseItem>>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let decoder = self
                .sse
                .as_mut()
                .ok_or_else(|| anyhow!("response is not text/event-stream"))?;
            if let Some(item) = decoder.next_item().context("SSE decoding")? {
                let item = convert(item);
                self.transcript.items.push(item.clone());
                return Ok(Some(Some(item)));
            }
            if self.framing == Framing::Done {
                return Ok(Some(None));
            }
            match tokio::time::timeout_at(deadline, self.fill()).await {
                Err(_) => return Ok(None),
                Ok(result) => result?,
            }
        }
    }

    /// The next dispatched event, recording any comments and `retry` items before it;
    /// `None` once the body has ended.
    ///
    /// # Errors
    ///
    /// As for [`next_item`](Self::next_item).
    pub async fn next_event(&mut self) -> anyhow::Result<Option<SseEvent>> {
        while let Some(item) = self.next_item().await? {
            if let SseItem::Event(event) = item {
                return Ok(Some(event));
            }
        }
        Ok(None)
    }

    /// Reads `k` more events (priming events count), or fewer if the body ends first.
    ///
    /// # Errors
    ///
    /// As for [`next_item`](Self::next_item).
    pub async fn read_events(&mut self, k: usize) -> anyhow::Result<Vec<SseEvent>> {
        let mut events = Vec::with_capacity(k);
        while events.len() < k {
            match self.next_event().await? {
                Some(event) => events.push(event),
                None => break,
            }
        }
        Ok(events)
    }

    /// Reads until a JSON-RPC response (`result` or `error`) with id `id` has arrived, as an
    /// SSE event or as the JSON body, or the body ends. Servers may keep a stream open after
    /// the response; this does not wait for the close.
    ///
    /// # Errors
    ///
    /// As for [`next_item`](Self::next_item), or a body that is not JSON.
    pub async fn read_until_response(&mut self, id: i64) -> anyhow::Result<Option<Value>> {
        let is_response = |m: &Value| {
            m["id"] == json!(id) && (m.get("result").is_some() || m.get("error").is_some())
        };
        if self.sse.is_none() {
            self.read_body().await?;
            return Ok(self
                .transcript
                .messages()?
                .into_iter()
                .map(|(_, m)| m)
                .find(is_response));
        }
        while let Some(event) = self.next_event().await? {
            if let Some(message) = event.json()?
                && is_response(&message)
            {
                return Ok(Some(message));
            }
        }
        Ok(None)
    }

    /// Reads the whole body (decoding SSE items if it is an event stream) and returns the
    /// transcript.
    ///
    /// # Errors
    ///
    /// As for [`next_item`](Self::next_item).
    pub async fn read_to_end(mut self) -> anyhow::Result<Transcript> {
        if self.sse.is_some() {
            while self.next_item().await?.is_some() {}
        } else {
            self.read_body().await?;
        }
        Ok(self.transcript)
    }

    async fn read_body(&mut self) -> anyhow::Result<()> {
        while self.framing != Framing::Done {
            tokio::time::timeout(self.timeout, self.fill())
                .await
                .with_context(|| format!("body not complete within {:?}", self.timeout))??;
        }
        Ok(())
    }

    /// Reads once from the socket and frames what arrived. Cancel-safe: `read_buf` either
    /// reads or not, and framing happens after it returns.
    async fn fill(&mut self) -> anyhow::Result<()> {
        let mut buf = Vec::with_capacity(READ_CHUNK);
        let n = self
            .stream
            .read_buf(&mut buf)
            .await
            .context("reading the body")?;
        if n == 0 {
            match self.framing {
                Framing::UntilClose => self.end_body(),
                Framing::Done => {}
                framing => bail!("connection closed mid-body ({framing:?})"),
            }
            return Ok(());
        }
        self.pending.extend_from_slice(&buf);
        self.frame_pending()
    }

    fn end_body(&mut self) {
        self.framing = Framing::Done;
        self.transcript.complete = true;
        if let Some(decoder) = &mut self.sse {
            decoder.finish();
        }
    }

    fn deliver(&mut self, bytes: &[u8]) {
        self.transcript.body.extend_from_slice(bytes);
        if let Some(decoder) = &mut self.sse {
            decoder.feed(bytes);
        }
    }

    /// Moves body bytes from `pending` through the framing into the transcript and decoder.
    fn frame_pending(&mut self) -> anyhow::Result<()> {
        loop {
            match self.framing {
                Framing::Done => {
                    self.pending.clear();
                    return Ok(());
                }
                Framing::UntilClose => {
                    let bytes = std::mem::take(&mut self.pending);
                    self.deliver(&bytes);
                    return Ok(());
                }
                Framing::Length(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(self.pending.len());
                    let bytes: Vec<u8> = self.pending.drain(..take).collect();
                    self.deliver(&bytes);
                    let left = left - take as u64;
                    if left == 0 {
                        self.end_body();
                    } else {
                        self.framing = Framing::Length(left);
                    }
                    return Ok(());
                }
                Framing::Chunked(state) => {
                    if !self.step_chunked(state)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One step of chunked decoding (RFC 9112 §7.1); false when more bytes are needed.
    fn step_chunked(&mut self, state: ChunkState) -> anyhow::Result<bool> {
        match state {
            ChunkState::Size | ChunkState::Trailers => {
                let Some(end) = find(&self.pending, b"\r\n") else {
                    ensure!(self.pending.len() <= MAX_HEAD_BYTES, "chunk line too long");
                    return Ok(false);
                };
                let line: Vec<u8> = self.pending.drain(..end + 2).take(end).collect();
                if state == ChunkState::Trailers {
                    if line.is_empty() {
                        self.end_body();
                    }
                    return Ok(true);
                }
                let line = String::from_utf8_lossy(&line);
                let size = line.split(';').next().unwrap_or_default().trim();
                let size = u64::from_str_radix(size, 16)
                    .with_context(|| format!("bad chunk size line {line:?}"))?;
                self.framing = Framing::Chunked(if size == 0 {
                    ChunkState::Trailers
                } else {
                    ChunkState::Data(size)
                });
                Ok(true)
            }
            ChunkState::Data(left) => {
                if self.pending.is_empty() {
                    return Ok(false);
                }
                let take = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(self.pending.len());
                let bytes: Vec<u8> = self.pending.drain(..take).collect();
                self.deliver(&bytes);
                let left = left - take as u64;
                self.framing = Framing::Chunked(if left == 0 {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left)
                });
                Ok(true)
            }
            ChunkState::DataEnd => {
                if self.pending.len() < 2 {
                    return Ok(false);
                }
                ensure!(
                    self.pending.starts_with(b"\r\n"),
                    "chunk data not followed by CRLF"
                );
                self.pending.drain(..2);
                self.framing = Framing::Chunked(ChunkState::Size);
                Ok(true)
            }
        }
    }
}

fn is_event_stream(headers: &Headers) -> bool {
    headers.get("content-type").is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
    })
}

fn convert(item: Item) -> SseItem {
    match item {
        Item::Event(event) => SseItem::Event(SseEvent {
            id: event.last_event_id().to_owned(),
            event_type: event.event_type().to_owned(),
            retry: event.retry(),
            data: event.into_data(),
        }),
        Item::Comment(text) => SseItem::Comment(text),
        Item::Retry(ms) => SseItem::Retry(ms),
        Item::LastEventId(id) => SseItem::LastEventId(id),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `GET url` (no session, no MCP headers) read to its end: for the endpoints beside MCP's,
/// such as `/metrics`.
///
/// # Errors
///
/// As for [`RawClient::send`] and [`RawResponse::read_to_end`].
pub async fn get(url: &str) -> anyhow::Result<Transcript> {
    let client = RawClient::new(url)?;
    client
        .send(&client.request("GET"))
        .await?
        .read_to_end()
        .await
}

/// The samples of an OpenMetrics text (`GET /metrics`): every `name{labels}` with its value,
/// comments skipped.
#[must_use]
pub fn metric_samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}
