//! The one in-process server of these tests: a real server on `127.0.0.1:0` run by
//! `Server::serve` with a oneshot shutdown (stopped when dropped), over memory stores the test
//! can inspect; its test handler; and assertions on raw HTTP answers read with the test kit's
//! `RawClient` (no tether client code involved). The server, resume and client tests all use
//! [`TestServer`]; the client's tests may give it a handler of their own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::demo::DemoHandler;
use tether::proto::ids::{SessionId, StreamId};
use tether::proto::jsonrpc::{ErrorObject, Request};
use tether::server::{
    ContextError, Era, Handler, LogLevel, RequestContext, Server, ServerConfig, ServerInfo,
};
use tether::store::{
    EventStore as _, MemoryEventStore, MemorySessionStore, SessionUsage, StoreLimits, Stores,
};
use tether_testkit::raw::{RawClient, Transcript};
use tokio::sync::{Mutex, Notify, Semaphore, oneshot};
use tokio::task::JoinHandle;

use super::resume::{Call, V11, WAIT, owner, read_priming};

/// What the test handler saw, for assertions the wire cannot show.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// `wait` calls that saw their cancellation.
    pub(crate) cancelled: AtomicUsize,
    /// Woken whenever a `wait` call sees its cancellation.
    pub(crate) cancelled_notify: Notify,
    /// Woken whenever a `wait` call has started.
    pub(crate) started_notify: Notify,
    /// What emitting after cancellation returned.
    pub(crate) emit_after_cancel: Mutex<Vec<Result<(), ContextError>>>,
    /// `count` calls that finished (returned their result).
    pub(crate) counts_finished: AtomicUsize,
}

/// What the `gated` tool shares with the test: the permits for its steps, and the contexts of
/// its calls.
struct Gate {
    permits: Semaphore,
    contexts: SyncMutex<Vec<RequestContext>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            permits: Semaphore::new(0),
            contexts: SyncMutex::default(),
        }
    }
}

/// The handler of the server and resume tests: the demo handler, under the name
/// `server-tests`, plus tools of its own.
///
/// - `tools/call` `count {n, interval_ms}`: the demo's (progress 1..n with the request's token,
///   log messages without one, then `counted n`: the demo tool of
///   docs/CONTRACTS.md#demo-count), counted in [`Observed::counts_finished`] when it finishes.
/// - `tools/call` `echo {text}`, `tools/list`, `logging/setLevel`, `ping`: the demo's.
/// - `tools/call` `ask {question}`: a server→client `sampling/createMessage` request on the
///   call's stream; returns `client said <text>` from the answer, or `client refused <message>`.
/// - `tools/call` `wait {}`: emits one progress event, then waits until cancelled.
/// - `tools/call` `announce {text}`: a notification on the standalone stream; in the
///   2026-07-28 era `notifications/tools/list_changed` to the listen streams.
/// - `tools/call` `gated {n}`: like `count` (progress 1..n with the request's token, then
///   `counted n`), but each of its n + 1 steps (n events, then the result) waits for a permit
///   the test releases with [`TestServer::release`], so the test decides exactly what is
///   stored when it cuts. The call's [`RequestContext`] is kept ([`TestServer::context`]), so
///   a test can call `close_connection` at a moment of its choosing.
struct TestHandler {
    demo: DemoHandler,
    observed: Arc<Observed>,
    gate: Arc<Gate>,
}

fn text(value: &str) -> Value {
    json!({"content": [{"type": "text", "text": value}]})
}

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(-32603, error.to_string())
}

#[async_trait]
impl Handler for TestHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "server-tests".to_owned(),
            version: "0.0.0".to_owned(),
            capabilities: json!({"tools": {"listChanged": true}, "logging": {}}),
            instructions: None,
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        if request.method != "tools/call" {
            return self.demo.handle_request(request, context).await;
        }
        let params = request.params.clone().unwrap_or(Value::Null);
        let args = &params["arguments"];
        match params["name"].as_str().unwrap_or_default() {
            "count" => {
                let result = self.demo.handle_request(request, context).await;
                if result.is_ok() {
                    self.observed.counts_finished.fetch_add(1, Ordering::SeqCst);
                }
                result
            }
            "ask" => Ok(ask(args, &context).await),
            "wait" => self.wait(&context).await,
            "gated" => self.gated(args, &context).await,
            "announce" if context.era() == Era::Modern => {
                context
                    .notify_subscribers("notifications/tools/list_changed", json!({}))
                    .await
                    .map_err(internal)?;
                Ok(text("announced"))
            }
            "announce" => {
                context
                    .session()
                    .notify("notifications/test/announce", json!({"text": args["text"]}))
                    .await
                    .map_err(internal)?;
                Ok(text("announced"))
            }
            _ => self.demo.handle_request(request, context).await,
        }
    }
}

impl TestHandler {
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

    async fn wait(&self, context: &RequestContext) -> Result<Value, ErrorObject> {
        context
            .progress(1.0, None, Some("waiting"))
            .await
            .map_err(internal)?;
        self.observed.started_notify.notify_waiters();
        context.cancelled().await;
        let emitted = context.notify("notifications/test/late", json!({})).await;
        self.observed.emit_after_cancel.lock().await.push(emitted);
        self.observed.cancelled.fetch_add(1, Ordering::SeqCst);
        self.observed.cancelled_notify.notify_waiters();
        Ok(text("cancelled, but this is never sent"))
    }
}

async fn ask(args: &Value, context: &RequestContext) -> Value {
    let answer = context
        .request(
            "sampling/createMessage",
            json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": args["question"]}}],
                "maxTokens": 10,
            }),
        )
        .await;
    match answer {
        Ok(result) => text(&format!(
            "client said {}",
            result["content"]["text"].as_str().unwrap_or("?")
        )),
        Err(ContextError::Remote(error)) => text(&format!("client refused {}", error.message)),
        Err(other) => text(&format!("failed {other}")),
    }
}

/// A server running on a loopback port, over memory stores; it stops when dropped.
pub(crate) struct TestServer {
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub(crate) url: String,
    pub(crate) addr: SocketAddr,
    pub(crate) node_id: String,
    pub(crate) events: Arc<MemoryEventStore>,
    /// What the test handler saw (nothing, with a handler of the test's own).
    pub(crate) observed: Arc<Observed>,
    gate: Arc<Gate>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server with `config`, the test handler and default memory-store limits.
    pub(crate) async fn start(config: ServerConfig) -> Self {
        Self::start_with_store(config, StoreLimits::default()).await
    }

    /// Starts a server with `config` and the test handler over a memory event store with
    /// `store` limits.
    pub(crate) async fn start_with_store(config: ServerConfig, store: StoreLimits) -> Self {
        let observed = Arc::new(Observed::default());
        let gate = Arc::new(Gate::default());
        let handler = Arc::new(TestHandler {
            demo: DemoHandler::new(),
            observed: Arc::clone(&observed),
            gate: Arc::clone(&gate),
        });
        Self::launch(config, store, handler, observed, gate).await
    }

    /// Starts a server with `config` and `handler` (default memory-store limits). The
    /// handler's own tools are the test's: [`TestServer::observed`], [`TestServer::release`]
    /// and [`TestServer::context`] see only the test handler's.
    pub(crate) async fn start_with_handler(
        config: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> Self {
        let observed = Arc::new(Observed::default());
        let gate = Arc::new(Gate::default());
        Self::launch(config, StoreLimits::default(), handler, observed, gate).await
    }

    async fn launch(
        config: ServerConfig,
        store: StoreLimits,
        handler: Arc<dyn Handler>,
        observed: Arc<Observed>,
        gate: Arc<Gate>,
    ) -> Self {
        let events = Arc::new(MemoryEventStore::new(store));
        let stores = Stores::custom(
            Arc::clone(&events) as _,
            Arc::new(MemorySessionStore::new()),
        );
        let server = Server::builder(handler)
            .stores(stores)
            .config(config)
            .build()
            .await
            .expect("a server");
        let node_id = server.node_id().to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!("http://{addr}{}", server.config().path);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            let _ = rx.await;
        }));
        Self {
            url,
            addr,
            node_id,
            events,
            observed,
            gate,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// A raw client for this server (2025-11-25 unless changed).
    pub(crate) fn client(&self) -> RawClient {
        RawClient::new(&self.url).unwrap()
    }

    /// A raw client that has initialized a session with `version`.
    pub(crate) async fn session(&self, version: &str) -> RawClient {
        let mut client = self.client().with_protocol_version(version);
        let init = client.initialize().await.unwrap();
        assert_eq!(init.initialized.status, 202, "notifications/initialized");
        assert!(
            client.session_id().is_some(),
            "initialize issued a session id"
        );
        client
    }

    /// Opens a 2025-11-25 session and calls `tool` with progress token `token`, reading the
    /// POST response past its priming event: the opening every resume test shares.
    pub(crate) async fn call(&self, tool: &str, arguments: Value, token: &str) -> Call {
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

    /// What the store retains for `client`'s session.
    pub(crate) async fn usage(&self, client: &RawClient) -> SessionUsage {
        let id = SessionId::parse(client.session_id().unwrap()).unwrap();
        self.events.usage(&id).await.unwrap()
    }

    /// Lets the running `gated` call take `k` more steps (events, then the result).
    pub(crate) fn release(&self, k: u64) {
        self.gate.permits.add_permits(usize::try_from(k).unwrap());
    }

    /// The context of the latest `gated` call.
    pub(crate) fn context(&self) -> RequestContext {
        self.gate.contexts.lock().unwrap().last().unwrap().clone()
    }

    /// Waits until event `seq` of `stream` (of `client`'s session) is stored.
    pub(crate) async fn wait_stored(&self, client: &RawClient, stream: StreamId, seq: u64) {
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
    pub(crate) async fn wait_complete(&self, client: &RawClient, stream: StreamId) {
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

    /// Triggers graceful shutdown and waits for `serve` to return.
    pub(crate) async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("serve returns after shutdown")
            .expect("serve task")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Asserts a refusal: `status`, a JSON-RPC error body with `code` and `"id": null`, and the
/// `Tether-Node` header. Returns the error object.
pub(crate) fn assert_refused(t: &Transcript, status: u16, code: i64, node_id: &str) -> Value {
    let body = String::from_utf8_lossy(&t.body);
    assert_eq!(t.status, status, "status; body {body}");
    assert_eq!(t.headers.get("tether-node"), Some(node_id), "Tether-Node");
    assert!(
        t.headers
            .get("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "JSON error body: {:?}",
        t.headers
    );
    let value = t.json().unwrap();
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert_eq!(value["id"], Value::Null, "id null: {value}");
    assert!(value.get("id").is_some(), "id present (null): {value}");
    assert_eq!(value["error"]["code"], json!(code), "{value}");
    assert!(value["error"]["message"].is_string(), "{value}");
    value["error"].clone()
}

/// Calls `echo` on the client's session and asserts the answer: the session still works.
pub(crate) async fn assert_session_works(client: &mut RawClient) {
    let (id, mut response) = client
        .call_tool("echo", json!({"text": "still here"}), None)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let message = response.read_until_response(id).await.unwrap().unwrap();
    assert_eq!(
        message["result"]["content"][0]["text"], "still here",
        "{message}"
    );
}

/// The JSON-RPC messages (non-priming events) of an SSE transcript.
pub(crate) fn messages(t: &Transcript) -> Vec<Value> {
    t.messages().unwrap().into_iter().map(|(_, m)| m).collect()
}

/// Checks a count transcript: progress 1..=n with `token` in order, then `counted n` as the
/// response to `id`, nothing else; every event carries an id of its stream, in order.
pub(crate) fn assert_count_stream(t: &Transcript, id: i64, token: &Value, n: u64) {
    let all = t.messages().unwrap();
    assert_eq!(all.len() as u64, n + 1, "n progress + result: {all:?}");
    let stream = all[0].0.split(':').next().unwrap().to_owned();
    let mut last_seq = 0;
    for (i, (event_id, message)) in all.iter().enumerate() {
        let (s, seq) = event_id.split_once(':').unwrap();
        assert_eq!(s, stream, "one stream");
        let seq: u64 = seq.parse().unwrap();
        assert!(seq > last_seq, "increasing ids");
        last_seq = seq;
        if (i as u64) < n {
            assert_eq!(message["method"], "notifications/progress", "{message}");
            assert_eq!(message["params"]["progressToken"], *token, "{message}");
            assert_eq!(
                message["params"]["progress"],
                json!(i as u64 + 1),
                "{message}"
            );
            assert_eq!(message["params"]["total"], json!(n), "{message}");
        } else {
            assert_eq!(message["id"], json!(id), "{message}");
            assert_eq!(
                message["result"]["content"][0]["text"],
                format!("counted {n}"),
                "{message}"
            );
        }
    }
}
