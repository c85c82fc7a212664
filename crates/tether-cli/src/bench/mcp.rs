//! A lean MCP Streamable HTTP client for load generation: `initialize`, `count` calls and
//! resumes, read with reqwest and [`tether::sse::Decoder`] and checked event by event; and
//! its 2026-07-28 counterpart ([`Stateless`]), whose requests need no session.
//!
//! It is not tether's client (no reconnects, no deduplication): a bench must see exactly
//! what the server sent, and a lost event must fail the run rather than be papered over. It
//! speaks to any MCP server with the `count` tool of docs/CONTRACTS.md#demo-count (tether, the SDK
//! peers), so it treats event ids as opaque and checks the progress values 1..n and the final
//! `counted n` instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};
use tether::proto::modern::{DISCOVER, TASKS_EXTENSION, add_envelope};
use tether::proto::version::ProtocolVersion;
use tether::sse::{Decoder, Item};

/// The protocol version the bench negotiates: the newest, so servers send priming events.
pub(crate) const PROTOCOL_VERSION: &str = "2025-11-25";

/// The progress token of every `count` call.
const TOKEN: &str = "bench";

/// One HTTP client for a whole scenario: loopback, HTTP/1.1 (each stream its own
/// connection, as MCP clients do), no proxy, `TCP_NODELAY`.
pub(crate) fn http_client() -> anyhow::Result<reqwest::Client> {
    http_client_builder()
        .build()
        .context("building the HTTP client")
}

/// The `Authorization` every request of this run sends, set once before a scenario starts.
static AUTHORIZATION: std::sync::OnceLock<reqwest::header::HeaderValue> =
    std::sync::OnceLock::new();

/// Makes every client of this run send `token` as a bearer token.
pub(crate) fn authorize_with(token: &str) -> anyhow::Result<()> {
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .context("the bearer token is not a valid header value")?;
    value.set_sensitive(true);
    AUTHORIZATION
        .set(value)
        .map_err(|_| anyhow::anyhow!("the bearer token was already set"))
}

/// The builder behind [`http_client`], for scenarios that change its pool.
pub(crate) fn http_client_builder() -> reqwest::ClientBuilder {
    // reqwest is built with `rustls-no-provider`: plain http needs no TLS, but building a
    // client needs a provider installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(value) = AUTHORIZATION.get() {
        headers.insert(reqwest::header::AUTHORIZATION, value.clone());
    }
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .default_headers(headers)
}

/// An initialized MCP session.
#[derive(Debug)]
pub(crate) struct Session {
    http: reqwest::Client,
    url: String,
    id: Option<String>,
    /// JSON-RPC ids, distinct across all sessions of a run: the Python peer's event store
    /// names a request's stream after its id, shared by every session.
    next_request: &'static AtomicU64,
}

/// Request ids across sessions (see [`Session::next_request`]).
static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

impl Session {
    /// Sends `initialize` and `notifications/initialized`. Fails, saying so, when `url` does
    /// not answer like an MCP server.
    pub(crate) async fn initialize(http: &reqwest::Client, url: &str) -> anyhow::Result<Self> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "tether-bench", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let response = post(http, url, None)
            .body(body.to_string())
            .send()
            .await
            .with_context(|| format!("POST initialize to {url}"))?;
        let status = response.status();
        ensure!(
            status == reqwest::StatusCode::OK,
            "{url} is not an MCP server: initialize answered {status}"
        );
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = first_message(response)
            .await
            .with_context(|| format!("{url} is not an MCP server: reading initialize"))?;
        ensure!(
            answer.pointer("/result/protocolVersion").is_some(),
            "{url} is not an MCP server: initialize answered {answer}"
        );
        let session = Self {
            http: http.clone(),
            url: url.to_owned(),
            id,
            next_request: &REQUEST_IDS,
        };
        let notified = session
            .post()
            .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .send()
            .await
            .context("POST notifications/initialized")?;
        ensure!(
            notified.status().is_success(),
            "notifications/initialized answered {}",
            notified.status()
        );
        Ok(session)
    }

    fn post(&self) -> reqwest::RequestBuilder {
        post(&self.http, &self.url, self.id.as_deref())
    }

    /// Sends `count {n, interval_ms}` with a progress token; the response is not read yet.
    pub(crate) async fn start_count(
        &self,
        n: u64,
        interval_ms: u64,
    ) -> anyhow::Result<reqwest::Response> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let body = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": {
                "name": "count",
                "arguments": {"n": n, "interval_ms": interval_ms},
                "_meta": {"progressToken": TOKEN},
            },
        });
        let response = self
            .post()
            .body(body.to_string())
            .send()
            .await
            .context("POST tools/call count")?;
        ensure!(
            response.status() == reqwest::StatusCode::OK,
            "tools/call count answered {}",
            response.status()
        );
        Ok(response)
    }

    /// Opens a GET stream: the standalone stream, or with `last_event_id` a resume.
    pub(crate) async fn get_stream(
        &self,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<reqwest::Response> {
        let mut request = self
            .http
            .get(&self.url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION);
        if let Some(id) = &self.id {
            request = request.header("Mcp-Session-Id", id);
        }
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.context("GET stream")?;
        ensure!(
            response.status() == reqwest::StatusCode::OK,
            "GET stream answered {}",
            response.status()
        );
        Ok(response)
    }

    /// A request that the server answers at once without opening a stream (a GET without
    /// `Accept: text/event-stream`), read to its end: it leaves an idle connection in the
    /// pool, so that the next request does not pay for connecting.
    pub(crate) async fn warm_connection(&self) {
        if let Ok(response) = self.http.get(&self.url).send().await {
            let _ = response.bytes().await;
        }
    }

    /// Ends the session (DELETE); errors are ignored, a bench cleans up on a best-effort basis.
    pub(crate) async fn delete(&self) {
        if let Some(id) = &self.id {
            let _ = self
                .http
                .delete(&self.url)
                .header("Mcp-Session-Id", id)
                .header("MCP-Protocol-Version", PROTOCOL_VERSION)
                .send()
                .await;
        }
    }
}

/// A 2026-07-28 client of one server: no session; every request carries the `_meta` envelope
/// and the standard headers, and stands alone.
#[derive(Debug)]
pub(crate) struct Stateless {
    http: reqwest::Client,
    url: String,
    /// The envelope's `clientCapabilities`.
    capabilities: Value,
    /// The server's `server/discover` result.
    discovered: Value,
    /// The tool `start_count` calls: `count`, or its name behind a gateway (`demo_count`).
    tool: String,
}

impl Stateless {
    /// Checks with `server/discover` that `url` serves 2026-07-28.
    pub(crate) async fn discover(http: &reqwest::Client, url: &str) -> anyhow::Result<Self> {
        let client = Self {
            http: http.clone(),
            url: url.to_owned(),
            capabilities: json!({}),
            discovered: Value::Null,
            tool: "count".to_owned(),
        };
        let response = client
            .post(DISCOVER, None, json!({}))
            .send()
            .await
            .with_context(|| format!("POST server/discover to {url}"))?;
        let status = response.status();
        ensure!(
            status == reqwest::StatusCode::OK,
            "{url} does not serve 2026-07-28: server/discover answered {status}"
        );
        let answer = first_message(response).await?;
        let versions = answer.pointer("/result/supportedVersions");
        ensure!(
            versions
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v == ProtocolVersion::MODERN.as_str())),
            "{url} does not serve 2026-07-28: server/discover answered {answer}"
        );
        Ok(Self {
            discovered: answer["result"].clone(),
            ..client
        })
    }

    /// The server's `server/discover` result.
    pub(crate) fn discovered(&self) -> &Value {
        &self.discovered
    }

    /// The same client calling `tool` (a `count` by another name) in `start_count`.
    pub(crate) fn calling(mut self, tool: &str) -> Self {
        tool.clone_into(&mut self.tool);
        self
    }

    /// The same client declaring the tasks extension in every request, so that a tool that
    /// may run as a task does.
    pub(crate) fn declaring_tasks(mut self) -> Self {
        self.capabilities = json!({"extensions": {TASKS_EXTENSION: {}}});
        self
    }

    /// Sends `method` with `params` and `name` as `Mcp-Name`; the response, once it is a 200
    /// (not read yet).
    pub(crate) async fn send(
        &self,
        method: &str,
        name: Option<&str>,
        params: Value,
    ) -> anyhow::Result<reqwest::Response> {
        let response = self
            .post(method, name, params)
            .send()
            .await
            .with_context(|| format!("POST {method}"))?;
        ensure!(
            response.status() == reqwest::StatusCode::OK,
            "{method} answered {}",
            response.status()
        );
        Ok(response)
    }

    /// A POST of `method` with `params` (gaining the envelope) and `name` as `Mcp-Name`.
    fn post(&self, method: &str, name: Option<&str>, mut params: Value) -> reqwest::RequestBuilder {
        let client_info = json!({"name": "tether-bench", "version": env!("CARGO_PKG_VERSION")});
        add_envelope(
            &mut params,
            ProtocolVersion::MODERN,
            &self.capabilities,
            &client_info,
        );
        let id = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", ProtocolVersion::MODERN.as_str())
            .header("Mcp-Method", method)
            .body(body.to_string());
        if let Some(name) = name {
            request = request.header("Mcp-Name", name);
        }
        request
    }

    /// Sends `count {n}` (under the name it was given, see `calling`) with a progress
    /// token; the response is not read yet.
    pub(crate) async fn start_count(&self, n: u64) -> anyhow::Result<reqwest::Response> {
        let params = json!({
            "name": self.tool,
            "arguments": {"n": n, "interval_ms": 0},
            "_meta": {"progressToken": TOKEN},
        });
        self.send("tools/call", Some(&self.tool), params).await
    }
}

fn post(http: &reqwest::Client, url: &str, session: Option<&str>) -> reqwest::RequestBuilder {
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", PROTOCOL_VERSION);
    if let Some(id) = session {
        request = request.header("Mcp-Session-Id", id);
    }
    request
}

/// The first JSON-RPC message of a response, SSE or JSON.
pub(crate) async fn first_message(mut response: reqwest::Response) -> anyhow::Result<Value> {
    if !is_event_stream(&response) {
        let body = response.bytes().await?;
        return Ok(serde_json::from_slice(&body)?);
    }
    let mut decoder = Decoder::new();
    while let Some(chunk) = response.chunk().await? {
        decoder.feed(&chunk);
        while let Some(item) = decoder.next_item()? {
            if let Item::Event(event) = item
                && !event.data().is_empty()
            {
                return Ok(serde_json::from_str(event.data())?);
            }
        }
    }
    bail!("the response ended without a message")
}

pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// What to do after each event of a count stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Read to the final result.
    AtResult,
    /// Return after the first progress event (dropping the response cuts the stream).
    AtFirstEvent,
}

/// What one `count` stream (or a resume of one) delivered, checked as it arrived.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// The progress value expected next.
    pub(crate) next: u64,
    /// Progress events received.
    pub(crate) events: u64,
    /// When the first progress event arrived.
    pub(crate) first_event_at: Option<Instant>,
    /// When each progress event arrived, if asked for (at the granularity of body chunks:
    /// one clock read per chunk keeps the reader lean).
    pub(crate) arrivals: Option<Vec<Instant>>,
    /// The id of the first event with an id, and the progress value expected after it: where
    /// a resume of this stream can start.
    pub(crate) resume_point: Option<(String, u64)>,
}

impl Tally {
    /// A tally expecting progress `first` next.
    pub(crate) fn expecting(first: u64, record_arrivals: bool) -> Self {
        Self {
            next: first,
            arrivals: record_arrivals.then(Vec::new),
            ..Self::default()
        }
    }
}

/// Reads a `count {n}` stream through the decoder, checking that the progress values arrive
/// as `tally.next`, `tally.next + 1`, … n and that the result is `counted n`. A gap, a
/// duplicate, an error or an early end fails with what was missing.
pub(crate) async fn read_count(
    mut response: reqwest::Response,
    n: u64,
    mut tally: Tally,
    stop: Stop,
) -> anyhow::Result<Tally> {
    if !is_event_stream(&response) {
        let body = response.bytes().await.context("reading the JSON answer")?;
        let message: Value = serde_json::from_slice(&body).context("the answer is not JSON")?;
        // Said first: `check_result` would fail on the same grounds, less clearly.
        ensure!(
            tally.next > n,
            "the server answered with JSON: progress {}..{n} never arrived",
            tally.next
        );
        check_result(&message, n, &tally)?;
        return Ok(tally);
    }
    let mut decoder = Decoder::new();
    loop {
        let chunk = response.chunk().await.context("reading the count stream")?;
        let now = Instant::now();
        match &chunk {
            Some(bytes) => decoder.feed(bytes),
            None => decoder.finish(),
        }
        while let Some(item) = decoder.next_item().context("invalid SSE")? {
            let Item::Event(event) = item else { continue };
            if tally.resume_point.is_none() && !event.last_event_id().is_empty() {
                let next = if event.data().is_empty() {
                    tally.next
                } else {
                    tally.next + 1
                };
                tally.resume_point = Some((event.last_event_id().to_owned(), next));
            }
            let data = event.data();
            if data.is_empty() {
                continue; // a priming event
            }
            if let Some(progress) = progress_value(data) {
                ensure!(
                    progress == tally.next,
                    "progress {progress} arrived where {} was expected: events lost or repeated",
                    tally.next
                );
                tally.next += 1;
                tally.events += 1;
                if tally.first_event_at.is_none() {
                    tally.first_event_at = Some(now);
                }
                if let Some(arrivals) = &mut tally.arrivals {
                    arrivals.push(now);
                }
                if stop == Stop::AtFirstEvent {
                    return Ok(tally);
                }
                continue;
            }
            let message: Value =
                serde_json::from_str(data).with_context(|| format!("not JSON: {data}"))?;
            if message.get("id").is_some() && message.get("method").is_none() {
                check_result(&message, n, &tally)?;
                return Ok(tally);
            }
        }
        if chunk.is_none() {
            bail!(
                "the stream ended after progress {} of {n}, without the result",
                tally.next - 1
            );
        }
    }
}

/// Checks the final answer: no error, `counted n`, and every progress event before it.
fn check_result(message: &Value, n: u64, tally: &Tally) -> anyhow::Result<()> {
    if let Some(error) = message.get("error") {
        bail!("count failed: {error}");
    }
    let text = message
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    ensure!(
        text == format!("counted {n}"),
        "the result is {message}, not `counted {n}`"
    );
    ensure!(
        tally.next == n + 1,
        "the result arrived after progress {} of {n}: events lost",
        tally.next.saturating_sub(1)
    );
    Ok(())
}

/// The `progress` of a `notifications/progress` message, found without parsing the whole
/// message (the reader's hot path); `None` for any other message. Peers serialize it as an
/// integer or a float (`1.0`).
pub(crate) fn progress_value(data: &str) -> Option<u64> {
    if !data.contains("notifications/progress") {
        return None;
    }
    // `"progress":` cannot match `"progressToken":`.
    let at = data.find("\"progress\":")? + "\"progress\":".len();
    let rest = data[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+'))
        .unwrap_or(rest.len());
    let value: f64 = rest[..end].parse().ok()?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // counts are small
    Some(value as u64)
}

#[cfg(test)]
mod tests {
    use super::progress_value;

    #[test]
    fn progress_values_of_each_peer_shape() {
        let tether = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"bench","progress":17,"total":20}}"#;
        let python = r#"{"method":"notifications/progress","params":{"progressToken":"bench","progress":17.0,"total":20.0},"jsonrpc":"2.0"}"#;
        let spaced = r#"{"method": "notifications/progress", "params": {"progress": 17}}"#;
        assert_eq!(progress_value(tether), Some(17));
        assert_eq!(progress_value(python), Some(17));
        assert_eq!(progress_value(spaced), Some(17));
        assert_eq!(
            progress_value(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            None
        );
    }
}
