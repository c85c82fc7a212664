//! Shared by the `server_*` integration tests: a real server on `127.0.0.1:0` run by
//! `Server::serve` with a oneshot shutdown, a small test handler, and assertions on raw HTTP
//! answers read with the test kit's `RawClient` (no tether client code involved).

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::proto::ids::SessionId;
use tether::proto::jsonrpc::{ErrorObject, INVALID_PARAMS, METHOD_NOT_FOUND, Request};
use tether::server::{
    ContextError, Handler, LogLevel, RequestContext, Server, ServerConfig, ServerInfo,
};
use tether::store::{MemoryEventStore, MemorySessionStore, MemoryStoreConfig, SessionUsage};
use tether_testkit::raw::{RawClient, Transcript};
use tokio::sync::{Mutex, Notify, oneshot};
use tokio::task::JoinHandle;

/// What the test handler saw, for assertions the wire cannot show.
#[derive(Debug, Default)]
pub struct Observed {
    /// `wait` calls that saw their cancellation.
    pub cancelled: AtomicUsize,
    /// Woken whenever a `wait` call sees its cancellation.
    pub cancelled_notify: Notify,
    /// Woken whenever a `wait` call has started.
    pub started_notify: Notify,
    /// What emitting after cancellation returned.
    pub emit_after_cancel: Mutex<Vec<Result<(), ContextError>>>,
    /// `count` calls that finished (returned their result).
    pub counts_finished: AtomicUsize,
}

/// The handler of the server tests:
///
/// - `tools/call` `count {n, interval_ms}`: progress 1..n with the request's token (log
///   messages without one), then `counted n` (the demo tool of docs/CONTRACTS.md#demo-count).
/// - `tools/call` `echo {text}`.
/// - `tools/call` `ask {question}`: a server→client `sampling/createMessage` request on the
///   call's stream; returns `client said <text>` from the answer, or `client refused <message>`.
/// - `tools/call` `wait {}`: emits one progress event, then waits until cancelled.
/// - `tools/call` `announce {text}`: a notification on the standalone stream.
/// - `logging/setLevel`.
pub struct TestHandler {
    pub observed: Arc<Observed>,
}

fn text(value: &str) -> Value {
    json!({"content": [{"type": "text", "text": value}]})
}

#[async_trait]
impl Handler for TestHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "server-tests".to_owned(),
            version: "0.0.0".to_owned(),
            capabilities: json!({"tools": {}, "logging": {}}),
            instructions: None,
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params = request.params.clone().unwrap_or(Value::Null);
        match request.method.as_str() {
            "logging/setLevel" => {
                let level: LogLevel = params["level"]
                    .as_str()
                    .and_then(|l| l.parse().ok())
                    .ok_or_else(|| ErrorObject::new(INVALID_PARAMS, "bad level"))?;
                context.session().set_log_level(level);
                Ok(json!({}))
            }
            "tools/call" => {
                let args = &params["arguments"];
                match params["name"].as_str().unwrap_or_default() {
                    "count" => self.count(args, &context).await,
                    "echo" => Ok(text(args["text"].as_str().unwrap_or_default())),
                    "ask" => Ok(ask(args, &context).await),
                    "wait" => self.wait(&context).await,
                    "announce" => {
                        context
                            .session()
                            .notify("notifications/test/announce", json!({"text": args["text"]}))
                            .await
                            .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
                        Ok(text("announced"))
                    }
                    other => Err(ErrorObject::new(INVALID_PARAMS, format!("no tool {other}"))),
                }
            }
            other => Err(ErrorObject::new(METHOD_NOT_FOUND, other.to_owned())),
        }
    }
}

impl TestHandler {
    async fn count(&self, args: &Value, context: &RequestContext) -> Result<Value, ErrorObject> {
        let n = args["n"].as_u64().unwrap_or(0);
        let interval = Duration::from_millis(args["interval_ms"].as_u64().unwrap_or(0));
        for i in 1..=n {
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
            emitted.map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            } else if i % 256 == 0 {
                tokio::task::yield_now().await;
            }
        }
        self.observed.counts_finished.fetch_add(1, Ordering::SeqCst);
        Ok(text(&format!("counted {n}")))
    }

    async fn wait(&self, context: &RequestContext) -> Result<Value, ErrorObject> {
        context
            .progress(1.0, None, Some("waiting"))
            .await
            .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
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

/// A server running on a loopback port.
pub struct TestServer {
    pub url: String,
    pub node_id: String,
    pub events: Arc<MemoryEventStore>,
    pub observed: Arc<Observed>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server with `config` and default memory-store limits.
    pub async fn start(config: ServerConfig) -> Self {
        Self::start_with_store(config, MemoryStoreConfig::default()).await
    }

    /// Starts a server with `config` over a memory event store with `store` limits.
    pub async fn start_with_store(config: ServerConfig, store: MemoryStoreConfig) -> Self {
        let observed = Arc::new(Observed::default());
        let events = Arc::new(MemoryEventStore::new(store));
        let server = Server::new(
            config,
            Arc::new(TestHandler {
                observed: Arc::clone(&observed),
            }),
            Arc::clone(&events) as _,
            Arc::new(MemorySessionStore::new()),
        );
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
            node_id,
            events,
            observed,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// A raw client for this server (2025-11-25 unless changed).
    pub fn client(&self) -> RawClient {
        RawClient::new(&self.url).unwrap()
    }

    /// A raw client that has initialized a session with `version`.
    pub async fn session(&self, version: &str) -> RawClient {
        let mut client = self.client().with_protocol_version(version);
        let init = client.initialize().await.unwrap();
        assert_eq!(init.initialized.status, 202, "notifications/initialized");
        assert!(
            client.session_id().is_some(),
            "initialize issued a session id"
        );
        client
    }

    /// What the store retains for `client`'s session.
    pub async fn usage(&self, client: &RawClient) -> SessionUsage {
        use tether::store::EventStore as _;
        let id = SessionId::parse(client.session_id().unwrap()).unwrap();
        self.events.usage(&id).await.unwrap()
    }

    /// Triggers graceful shutdown and waits for `serve` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
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
pub fn assert_refused(t: &Transcript, status: u16, code: i64, node_id: &str) -> Value {
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
pub async fn assert_session_works(client: &mut RawClient) {
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
pub fn messages(t: &Transcript) -> Vec<Value> {
    t.messages().unwrap().into_iter().map(|(_, m)| m).collect()
}

/// Checks a count transcript: progress 1..=n with `token` in order, then `counted n` as the
/// response to `id`, nothing else; every event carries an id of its stream, in order.
pub fn assert_count_stream(t: &Transcript, id: i64, token: &Value, n: u64) {
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
