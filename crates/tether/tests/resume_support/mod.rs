//! Shared by the `resume_*` integration tests: a real server on `127.0.0.1:0` whose handler is
//! the demo handler (`count`, `echo`) plus two tools for resumability tests, and helpers that
//! read, cut and check `count`-shaped streams with the test kit's raw reader (which neither
//! deduplicates nor reconnects, so every duplicate or gap a server produced is visible).
//!
//! - `gated {n}`: like `count` (progress 1..n with the request's token, then `counted n`), but
//!   each of its n + 1 steps (n events, then the result) waits for a permit the test releases
//!   with [`ResumeServer::release`]. The test decides exactly what is stored when it cuts.
//!   The call's [`RequestContext`] is kept ([`ResumeServer::context`]), so a test can call
//!   `close_connection` at a moment of its choosing.
//! - `announce {text}`: a notification on the session's standalone stream.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::str::FromStr as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::demo::DemoHandler;
use tether::proto::ids::{EventId, SessionId, StreamId};
use tether::proto::jsonrpc::{ErrorObject, Request};
use tether::server::{Handler, LogLevel, RequestContext, Server, ServerConfig, ServerInfo};
use tether::store::{
    ANONYMOUS_PRINCIPAL, EventStore as _, MemoryEventStore, MemorySessionStore, MemoryStoreConfig,
    StreamOwner,
};
use tether_testkit::raw::{RawClient, RawResponse, SseEvent, Transcript};
use tokio::sync::{Semaphore, oneshot};

/// How long a test waits for the server to store something before failing.
pub const WAIT: Duration = Duration::from_secs(10);

/// What the gated tool shares with the test.
pub struct Gate {
    permits: Semaphore,
    contexts: Mutex<Vec<RequestContext>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            permits: Semaphore::new(0),
            contexts: Mutex::default(),
        }
    }
}

/// The demo handler plus `gated` and `announce`.
pub struct ResumeHandler {
    demo: DemoHandler,
    gate: Arc<Gate>,
}

fn text(value: &str) -> Value {
    json!({"content": [{"type": "text", "text": value}]})
}

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(-32603, error.to_string())
}

#[async_trait]
impl Handler for ResumeHandler {
    fn server_info(&self) -> ServerInfo {
        self.demo.server_info()
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params = request.params.clone().unwrap_or(Value::Null);
        if request.method == "tools/call" {
            let args = &params["arguments"];
            match params["name"].as_str() {
                Some("gated") => return self.gated(args, &context).await,
                Some("announce") => {
                    context
                        .session()
                        .notify("notifications/test/announce", json!({"text": args["text"]}))
                        .await
                        .map_err(internal)?;
                    return Ok(text("announced"));
                }
                _ => {}
            }
        }
        self.demo.handle_request(request, context).await
    }
}

impl ResumeHandler {
    async fn gated(&self, args: &Value, context: &RequestContext) -> Result<Value, ErrorObject> {
        let n = args["n"].as_u64().unwrap_or(0);
        self.gate.contexts.lock().unwrap().push(context.clone());
        for i in 1..=n {
            self.pass(context).await?;
            let emitted = if context.progress_token().is_some() {
                #[allow(clippy::cast_precision_loss)]
                context.progress(i as f64, Some(n as f64), None).await
            } else {
                context
                    .log(
                        LogLevel::Info,
                        Some("count"),
                        json!({"index": i, "total": n}),
                    )
                    .await
            };
            emitted.map_err(internal)?;
        }
        self.pass(context).await?;
        Ok(text(&format!("counted {n}")))
    }

    async fn pass(&self, context: &RequestContext) -> Result<(), ErrorObject> {
        tokio::select! {
            permit = self.gate.permits.acquire() => {
                permit.map_err(internal)?.forget();
                Ok(())
            }
            () = context.cancelled() => Err(internal("cancelled")),
        }
    }
}

/// A server running on a loopback port.
/// The protocol version that gets priming events and server-initiated closes.
pub const V11: &str = "2025-11-25";

/// A tool call in flight, as [`ResumeServer::call`] opened it.
pub struct Call {
    /// The session's client.
    pub client: RawClient,
    /// The request id.
    pub id: i64,
    /// The POST's SSE response, read past the priming event.
    pub post: RawResponse,
    /// The request's stream.
    pub stream: StreamId,
    /// The progress token.
    pub token: Value,
}

pub struct ResumeServer {
    pub url: String,
    pub node_id: String,
    pub events: Arc<MemoryEventStore>,
    gate: Arc<Gate>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl ResumeServer {
    /// Starts a server with `config` and default memory-store limits.
    pub async fn start(config: ServerConfig) -> Self {
        Self::start_with_store(config, MemoryStoreConfig::default()).await
    }

    /// Starts a server with `config` over a memory event store with `store` limits.
    pub async fn start_with_store(config: ServerConfig, store: MemoryStoreConfig) -> Self {
        let gate = Arc::new(Gate::default());
        let events = Arc::new(MemoryEventStore::new(store));
        let server = Server::new(
            config,
            Arc::new(ResumeHandler {
                demo: DemoHandler::new(),
                gate: Arc::clone(&gate),
            }),
            Arc::clone(&events) as _,
            Arc::new(MemorySessionStore::new()),
        );
        let node_id = server.node_id().to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}{}",
            listener.local_addr().unwrap(),
            server.config().path
        );
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(server.serve(listener, async move {
            let _ = rx.await;
        }));
        Self {
            url,
            node_id,
            events,
            gate,
            shutdown: Some(tx),
        }
    }

    /// A raw client that has initialized a session with `version`.
    /// Opens a 2025-11-25 session and calls `tool` with progress token `token`, reading the
    /// POST response past its priming event: the opening every resume test shares.
    pub async fn call(&self, tool: &str, arguments: Value, token: &str) -> Call {
        let mut client = self.session(V11).await;
        let token = json!(token);
        let (id, mut post) = client
            .call_tool(tool, arguments, Some(token.clone()))
            .await
            .unwrap();
        let stream = read_priming(&mut post).await;
        Call {
            client,
            id,
            post,
            stream,
            token,
        }
    }

    pub async fn session(&self, version: &str) -> RawClient {
        let mut client = RawClient::new(&self.url)
            .unwrap()
            .with_protocol_version(version);
        let init = client.initialize().await.unwrap();
        assert_eq!(init.initialized.status, 202, "notifications/initialized");
        assert!(client.session_id().is_some(), "a session id");
        client
    }

    /// Lets the running `gated` call take `k` more steps (events, then the result).
    pub fn release(&self, k: u64) {
        self.gate.permits.add_permits(usize::try_from(k).unwrap());
    }

    /// The context of the latest `gated` call.
    pub fn context(&self) -> RequestContext {
        self.gate.contexts.lock().unwrap().last().unwrap().clone()
    }

    /// Waits until event `seq` of `stream` (of `client`'s session) is stored.
    pub async fn wait_stored(&self, client: &RawClient, stream: StreamId, seq: u64) {
        let owner = owner(client);
        tokio::time::timeout(WAIT, async {
            loop {
                let batch = self
                    .events
                    .read_after(&owner, stream, seq.saturating_sub(1), 1)
                    .await
                    .unwrap();
                if batch.events.first().is_some_and(|e| e.id.seq >= seq) {
                    return;
                }
                self.events
                    .wait_for_more(stream, seq.saturating_sub(1))
                    .await
                    .unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("event {seq} of {stream} not stored within {WAIT:?}"));
    }

    /// Waits until `stream` of `client`'s session is complete (its final response stored).
    pub async fn wait_complete(&self, client: &RawClient, stream: StreamId) {
        // No seq is past u64::MAX - 1: the wait ends when the stream completes (or is gone,
        // which the read below reports).
        tokio::time::timeout(WAIT, self.events.wait_for_more(stream, u64::MAX - 1))
            .await
            .unwrap_or_else(|_| panic!("{stream} not complete within {WAIT:?}"))
            .unwrap();
        let end = self
            .events
            .read_after(&owner(client), stream, u64::MAX - 1, 1)
            .await
            .unwrap();
        assert!(end.complete, "{stream} complete");
    }
}

impl Drop for ResumeServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The store owner of `client`'s session (no authentication: the anonymous principal).
pub fn owner(client: &RawClient) -> StreamOwner {
    StreamOwner {
        principal: Arc::from(ANONYMOUS_PRINCIPAL),
        session: SessionId::parse(client.session_id().unwrap()).unwrap(),
    }
}

/// `(stream, seq)` of one of tether's event ids.
pub fn split_id(id: &str) -> (StreamId, u64) {
    let id = EventId::from_str(id).unwrap_or_else(|e| panic!("event id {id:?}: {e}"));
    (id.stream, id.seq)
}

/// The JSON-RPC messages of a transcript with their event ids (priming events skipped).
pub fn messages(t: &Transcript) -> Vec<(String, Value)> {
    t.messages().unwrap()
}

/// Reads `k` message events (events with data), skipping nothing else: a priming event among
/// them fails the test, since it would mean a duplicate id or a primed resume.
pub async fn read_messages(response: &mut RawResponse, k: u64) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    while (out.len() as u64) < k {
        let event: SseEvent = response
            .next_event()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("stream ended after {} of {k} messages", out.len()));
        let message = event
            .json()
            .unwrap()
            .unwrap_or_else(|| panic!("unexpected empty-data event {event:?}"));
        out.push((event.id, message));
    }
    out
}

/// Reads the priming event of a new 2025-11-25 stream and returns its stream.
pub async fn read_priming(response: &mut RawResponse) -> StreamId {
    let event = response.next_event().await.unwrap().expect("priming event");
    assert_eq!(
        event.data, "",
        "the first event is the priming event: {event:?}"
    );
    let (stream, seq) = split_id(&event.id);
    assert_eq!(seq, 0, "the priming event is seq 0");
    stream
}

/// Asserts that `all` is exactly what `count`/`gated` with `n` emits on `stream` for the
/// request `id` with progress token `token`: progress 1..=n as seq 1..=n, then `counted n`
/// as seq n + 1 — contiguous, in order, once each.
pub fn assert_exact_count(
    all: &[(String, Value)],
    stream: StreamId,
    id: i64,
    token: &Value,
    n: u64,
) {
    let seqs: Vec<u64> = all
        .iter()
        .map(|(event_id, _)| {
            let (s, seq) = split_id(event_id);
            assert_eq!(s, stream, "an event of another stream: {event_id}");
            seq
        })
        .collect();
    assert_eq!(
        seqs,
        (1..=n + 1).collect::<Vec<_>>(),
        "contiguous seqs 1..={}, once each",
        n + 1
    );
    for (i, (_, message)) in all.iter().enumerate() {
        let i = i as u64 + 1;
        if i <= n {
            assert_eq!(message["method"], "notifications/progress", "{message}");
            assert_eq!(message["params"]["progressToken"], *token, "{message}");
            assert_eq!(message["params"]["progress"], json!(i), "{message}");
            assert_eq!(message["params"]["total"], json!(n), "{message}");
        } else {
            assert_eq!(message["id"], json!(id), "the final response: {message}");
            assert_eq!(
                message["result"]["content"][0]["text"],
                format!("counted {n}"),
                "{message}"
            );
        }
    }
}

/// Asserts a resume refusal: 400, JSON-RPC -32000, `data.reason` = `reason`, `id` null.
pub fn assert_resume_refused(t: &Transcript, reason: &str) -> Value {
    let body = String::from_utf8_lossy(&t.body);
    assert_eq!(t.status, 400, "status; body {body}");
    assert!(!t.is_event_stream(), "a refusal is not a stream");
    let value = t.json().unwrap();
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert_eq!(value["id"], Value::Null, "{value}");
    assert_eq!(value["error"]["code"], json!(-32000), "{value}");
    assert_eq!(value["error"]["data"]["reason"], reason, "{value}");
    value
}
