//! The 2026-07-28 era on the server, the rules the conformance suite does not check (it runs
//! in the test command's conformance stage): a disconnect cancels the request and frees it;
//! GET and DELETE are 405; `Last-Event-ID` and `Mcp-Session-Id` on a modern request change
//! nothing; a tampered or foreign `requestState` is refused, a genuine one survives a restart
//! of a SQLite-backed server; log messages only when the envelope asks; a listen stream ends
//! with its completion result on a graceful shutdown; legacy sessions are untouched beside;
//! tasks: the per-principal limit, a task's events kept under its id, and no
//! `CreateTaskResult` while SQLite's commit is held. Raw HTTP on loopback, the real server.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::proto::jsonrpc::{ErrorObject, Request};
use tether::server::{
    BearerTokens, Era, Handler, LogLevel, RequestContext, Server, ServerConfig, ServerInfo,
    TASKS_EXTENSION, TaskSupport,
};
use tether::store::{StoreLimits, Stores};
use tether_testkit::raw::{RawClient, RawRequest, RawResponse, SseItem};

use super::support::server::TestServer;

/// A modern POST (the testkit's envelope and headers).
fn modern(client: &RawClient, id: i64, method: &str, params: Value, meta: Value) -> RawRequest {
    client.modern(id, method, params, meta)
}

/// The JSON-RPC messages of an SSE or JSON answer, read to its end.
async fn messages(response: RawResponse) -> Vec<Value> {
    let transcript = response.read_to_end().await.expect("a complete answer");
    if transcript.is_event_stream() {
        transcript
            .events()
            .filter(|event| !event.data.is_empty())
            .map(|event| serde_json::from_str(&event.data).expect("JSON data"))
            .collect()
    } else {
        vec![transcript.json().expect("a JSON body")]
    }
}

/// A handler whose tools ask: `greet` asks the user's name (key `name`); `steps` reports
/// progress 1..=3 of 3, then answers `stepped`; `announce` tells listening clients the tool
/// list changed. `greet` and `steps` may run as tasks.
struct Asking;

#[async_trait]
impl Handler for Asking {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "asking".into(),
            version: "1".into(),
            capabilities: json!({"tools": {"listChanged": true}}),
            instructions: None,
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let name = request.params.as_ref().and_then(|p| p["name"].as_str());
        match name {
            Some("greet") => {
                let schema = json!({"message": "Name?", "requestedSchema": {"type": "object",
                    "properties": {"name": {"type": "string"}}}});
                let answer = context
                    .ask("name", "elicitation/create", schema)
                    .await
                    .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
                let name = answer["content"]["name"].as_str().unwrap_or("?");
                let era = match context.era() {
                    Era::Legacy => "legacy",
                    Era::Modern => "modern",
                };
                Ok(json!({"content": [{"type": "text", "text": format!("hello {name} ({era})")}]}))
            }
            Some("steps") => {
                for step in 1..=3 {
                    context
                        .progress(f64::from(step), Some(3.0), None)
                        .await
                        .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
                }
                Ok(json!({"content": [{"type": "text", "text": "stepped"}]}))
            }
            Some("announce") => {
                context
                    .notify_subscribers("notifications/tools/list_changed", json!({}))
                    .await
                    .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
                Ok(json!({"content": []}))
            }
            _ => Err(ErrorObject::method_not_found(&request.method)),
        }
    }

    fn offers_tasks(&self) -> bool {
        true
    }

    /// `greet` may run as a task (its question then waits in the task).
    fn task_support(&self, call: &Request) -> TaskSupport {
        match call.params.as_ref().and_then(|p| p["name"].as_str()) {
            Some("greet" | "steps") => TaskSupport::Optional,
            _ => TaskSupport::Forbidden,
        }
    }
}

#[tokio::test]
async fn a_disconnect_cancels_a_modern_request() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.client();
    let cancelled = server.observed.cancelled_notify.notified();
    tokio::pin!(cancelled);
    cancelled.as_mut().enable();
    let request = modern(
        &client,
        1,
        "tools/call",
        json!({"name": "wait", "arguments": {}}),
        json!({"progressToken": "w"}),
    );
    let mut response = client.send(&request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.is_event_stream());
    // The progress event arrived: the handler runs. Then the client goes away.
    let progress = next_message(&mut response)
        .await
        .expect("the progress event");
    assert_eq!(progress["method"], "notifications/progress");
    drop(response);
    tokio::time::timeout(Duration::from_secs(10), cancelled)
        .await
        .expect("the handler saw its cancellation");
    let text = metrics(&server).await;
    assert!(
        text.contains(
            r#"tether_modern_requests_total{method="tools/call",outcome="disconnected"} 1"#
        ),
        "{text}"
    );
}

/// `/metrics`, read raw.
async fn metrics(server: &TestServer) -> String {
    let url = server.url.replace("/mcp", "/metrics");
    let client = RawClient::new(&url).unwrap();
    let transcript = client.exchange(&client.request("GET")).await.unwrap();
    String::from_utf8_lossy(&transcript.body).into_owned()
}

#[tokio::test]
async fn modern_get_and_delete_are_405_allowing_post() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server
        .client()
        .with_protocol_version(tether_testkit::raw::MODERN_VERSION);
    for method in ["GET", "DELETE"] {
        let transcript = client.exchange(&client.request(method)).await.unwrap();
        assert_eq!(transcript.status, 405, "{method}");
        assert_eq!(transcript.headers.get("allow"), Some("POST"), "{method}");
    }
    // A legacy GET without a session is still the legacy 400.
    let legacy = server.client();
    let transcript = legacy.exchange(&legacy.request("GET")).await.unwrap();
    assert_eq!(transcript.status, 400);
}

#[tokio::test]
async fn last_event_id_and_session_id_change_nothing_on_a_modern_request() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.client();
    let request = modern(&client, 7, "tools/list", json!({}), json!({}))
        .header("Last-Event-ID", "not-an-id")
        .header("Mcp-Session-Id", "no-such-session");
    let response = client.send(&request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.header("mcp-session-id").is_none(),
        "no session minted or echoed"
    );
    let answer = messages(response).await;
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["id"], 7);
    assert_eq!(answer[0]["result"]["resultType"], "complete");
    assert!(answer[0]["result"]["tools"].is_array());
    assert!(answer[0]["result"]["ttlMs"].is_u64());
    assert_eq!(
        answer[0]["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "server-tests"
    );
}

#[tokio::test]
async fn log_messages_only_at_the_envelope_s_level() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.client();
    let count = json!({"name": "count", "arguments": {"n": 3, "interval_ms": 0}});
    let quiet = messages(
        client
            .send(&modern(&client, 1, "tools/call", count.clone(), json!({})))
            .await
            .unwrap(),
    )
    .await;
    assert!(
        quiet.iter().all(|m| m["method"] != "notifications/message"),
        "no logLevel, no logs: {quiet:?}"
    );
    assert_eq!(
        quiet.last().unwrap()["result"]["content"][0]["text"],
        "counted 3"
    );
    let logged = messages(
        client
            .send(&modern(
                &client,
                2,
                "tools/call",
                count,
                json!({"io.modelcontextprotocol/logLevel": LogLevel::Debug.as_str()}),
            ))
            .await
            .unwrap(),
    )
    .await;
    let logs = logged
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert!(logs >= 3, "the demo logs each step when asked: {logged:?}");
    assert_eq!(
        logged.last().unwrap()["id"],
        2,
        "logs come before the response"
    );
}

/// A server over `stores` with the asking handler and two principals, served until the
/// returned sender is dropped or fires; the task returns once it stopped (and let go of its
/// stores).
async fn asking_server(
    stores: Stores,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    asking_server_with(stores, ServerConfig::default()).await
}

/// [`asking_server`] with `config`.
async fn asking_server_with(
    stores: Stores,
    config: ServerConfig,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let tokens = BearerTokens::parse("alice:alice-token\nbob:bob-token\n").unwrap();
    let server = Server::builder(Arc::new(Asking))
        .config(config)
        .stores(stores)
        .auth(Arc::new(tokens))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    (url, stop, task)
}

/// `alice`'s client of the server at `url`.
fn alice(url: &str) -> RawClient {
    RawClient::new(url)
        .unwrap()
        .with_bearer_token("alice-token")
}

/// Round two of `greet` with `state` is answered `hello Ada (modern)`.
async fn greet_completes(client: &RawClient, state: &str) {
    let answer = messages(
        client
            .send(&greet_retry(client, 2, state, json!(null)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        answer[0]["result"]["content"][0]["text"], "hello Ada (modern)",
        "{answer:?}"
    );
}

/// The next JSON-RPC message of an SSE answer (priming events, comments and `retry` fields
/// skipped), or `None` at its end.
async fn next_message(response: &mut RawResponse) -> Option<Value> {
    loop {
        match response.next_item().await.unwrap() {
            Some(SseItem::Event(event)) if !event.data.is_empty() => {
                return Some(serde_json::from_str(&event.data).unwrap());
            }
            Some(_) => {}
            None => return None,
        }
    }
}

/// Round one of `greet`: the question and the sealed state.
async fn greet_round_one(client: &RawClient) -> (Value, String) {
    let answer = messages(
        client
            .send(&modern(
                client,
                1,
                "tools/call",
                json!({"name": "greet"}),
                json!({}),
            ))
            .await
            .unwrap(),
    )
    .await;
    let result = &answer[0]["result"];
    assert_eq!(result["resultType"], "input_required", "{answer:?}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    (result["inputRequests"].clone(), state)
}

/// Round two of `greet`, answered `Ada`, with `arguments` when they are not null (round one
/// had none).
fn greet_retry(client: &RawClient, id: i64, state: &str, arguments: Value) -> RawRequest {
    let mut params = json!({"name": "greet", "requestState": state,
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}});
    if !arguments.is_null() {
        params["arguments"] = arguments;
    }
    modern(client, id, "tools/call", params, json!({}))
}

#[tokio::test]
async fn request_state_is_refused_when_tampered_or_foreign() {
    let (url, _stop, _task) = asking_server(Stores::memory(StoreLimits::default())).await;
    let alice = alice(&url);
    let bob = RawClient::new(&url).unwrap().with_bearer_token("bob-token");
    let (questions, state) = greet_round_one(&alice).await;
    assert_eq!(questions["name"]["method"], "elicitation/create");
    greet_completes(&alice, &state).await;
    let mut tampered = state.clone().into_bytes();
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (who, client, state, arguments) in [
        ("tampered", &alice, tampered.as_str(), json!(null)),
        ("another principal's", &bob, state.as_str(), json!(null)),
        ("another request's", &alice, state.as_str(), json!({"x": 1})),
    ] {
        let transcript = client
            .exchange(&greet_retry(client, 3, state, arguments))
            .await
            .unwrap();
        assert_eq!(transcript.status, 400, "{who} state");
        let body = transcript.json().unwrap();
        assert_eq!(body["id"], 3, "{who}: the error echoes the request id");
        assert_eq!(body["error"]["code"], -32602, "{who}: {body}");
    }
}

#[tokio::test]
async fn request_state_sealed_before_a_restart_opens_after_it_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.db");
    let (url, stop, task) =
        asking_server(Stores::sqlite(&path, StoreLimits::default()).unwrap()).await;
    let (_, state) = greet_round_one(&alice(&url)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
    // The same file, a new server: its sealing key is the file's. Tasks of the stopped server
    // that still hold the store (a removal spawned as its last connection closed) end soon.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let stores = loop {
        match Stores::sqlite(&path, StoreLimits::default()) {
            Ok(stores) => break stores,
            Err(error) if tokio::time::Instant::now() > deadline => panic!("{error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let (url, _stop, _task) = asking_server(stores).await;
    greet_completes(&alice(&url), &state).await;
}

#[tokio::test]
async fn a_listen_stream_acknowledges_filters_and_ends_with_its_result_on_shutdown() {
    let server = TestServer::start_with_handler(ServerConfig::default(), Arc::new(Asking)).await;
    let client = server.client();
    let listen = modern(
        &client,
        41,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
        json!({}),
    );
    let mut stream = client.send(&listen).await.unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.is_event_stream());
    let ack = next_message(&mut stream).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "prompts have no listChanged here: not honoured"
    );
    let announce = modern(
        &client,
        2,
        "tools/call",
        json!({"name": "announce"}),
        json!({}),
    );
    messages(client.send(&announce).await.unwrap()).await;
    let changed = next_message(&mut stream).await.unwrap();
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );

    let stopping = tokio::spawn(server.stop());
    let result = next_message(&mut stream)
        .await
        .expect("the completion result before the end");
    assert_eq!(result["id"], 41);
    assert_eq!(result["result"]["resultType"], "complete");
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert!(
        next_message(&mut stream).await.is_none(),
        "then the stream ends"
    );
    stopping.await.unwrap().unwrap();
}

#[tokio::test]
async fn one_handler_asks_through_a_session_request_in_the_legacy_era() {
    let server = TestServer::start_with_handler(ServerConfig::default(), Arc::new(Asking)).await;
    let mut client = server.session("2025-11-25").await;
    let (_, mut call) = client
        .post_request("tools/call", json!({"name": "greet"}))
        .await
        .unwrap();
    let question = next_message(&mut call)
        .await
        .expect("a question on the call's stream");
    assert_eq!(question["method"], "elicitation/create");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"name": "Lin"}}});
    assert_eq!(client.post(&answer).await.unwrap().status(), 202);
    let rest = messages(call).await;
    assert_eq!(
        rest.last().unwrap()["result"]["content"][0]["text"],
        "hello Lin (legacy)"
    );
}

#[tokio::test]
async fn a_quiet_listen_stream_carries_keep_alive_comments() {
    let mut config = ServerConfig::default();
    config.keepalive = Duration::from_millis(50);
    let server = TestServer::start_with_handler(config, Arc::new(Asking)).await;
    let client = server.client();
    let listen = modern(
        &client,
        5,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        json!({}),
    );
    let mut stream = client.send(&listen).await.unwrap();
    let ack = next_message(&mut stream).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let mut comments = 0;
    while comments < 2 {
        match stream.next_item().await.unwrap() {
            Some(SseItem::Comment(_)) => comments += 1,
            Some(SseItem::Event(event)) => {
                assert!(
                    event.data.is_empty(),
                    "nothing else on a quiet stream: {event:?}"
                );
            }
            Some(_) => {}
            None => panic!("the listen stream ended"),
        }
    }
}

#[tokio::test]
async fn a_principal_holds_at_most_its_task_limit() {
    let mut config = ServerConfig::default();
    config.max_tasks_per_principal = 1;
    let (url, _stop, _task) =
        asking_server_with(Stores::memory(StoreLimits::default()), config).await;
    let as_task = json!({"io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}});
    let call = |client: &RawClient, id: i64| {
        modern(
            client,
            id,
            "tools/call",
            json!({"name": "greet"}),
            as_task.clone(),
        )
    };
    let alice = alice(&url);
    let first = alice.exchange(&call(&alice, 1)).await.unwrap();
    assert_eq!(first.status, 200);
    let first = first.json().unwrap();
    assert_eq!(first["result"]["resultType"], "task", "{first}");
    let refused = alice.exchange(&call(&alice, 2)).await.unwrap();
    assert_eq!(refused.status, 429);
    let refused = refused.json().unwrap();
    assert_eq!(refused["id"], 2);
    assert_eq!(
        refused["error"]["data"]["reason"], "too_many_tasks",
        "{refused}"
    );
    // The limit is per principal: bob still gets a task.
    let bob = RawClient::new(&url).unwrap().with_bearer_token("bob-token");
    let other = bob.exchange(&call(&bob, 3)).await.unwrap().json().unwrap();
    assert_eq!(other["result"]["resultType"], "task", "{other}");
    // Without the extension the same call is no task at all, and not counted.
    let direct = messages(
        alice
            .send(&modern(
                &alice,
                4,
                "tools/call",
                json!({"name": "greet"}),
                json!({}),
            ))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        direct[0]["result"]["resultType"], "input_required",
        "{direct:?}"
    );
}

/// The envelope's `_meta` of a client that declares the tasks extension.
fn as_task() -> Value {
    tether_testkit::raw::task_meta()
}

/// `tasks/get` of `task` until it is terminal (or 20 s pass); the last answer.
async fn until_terminal(client: &RawClient, task: &str) -> Value {
    client.poll_task(task, "completed").await.unwrap()
}

/// What a task's handler emits is kept in the event log as the stream whose id is the task
/// id, in order, after the task ended; the response is not in it (it is the task's result).
#[tokio::test]
async fn a_tasks_events_stay_in_the_event_log_under_its_id() {
    use tether::proto::ids::TaskId;
    use tether::store::StreamOwner;
    let stores = Stores::memory(StoreLimits::default());
    let (events, tasks) = (Arc::clone(stores.events()), Arc::clone(stores.tasks()));
    let (url, _stop, _task) = asking_server(stores).await;
    let alice = alice(&url);
    let mut meta = as_task();
    meta["progressToken"] = json!("p");
    let call = modern(&alice, 1, "tools/call", json!({"name": "steps"}), meta);
    let created = alice.exchange(&call).await.unwrap().json().unwrap();
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let done = until_terminal(&alice, &id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["result"]["content"][0]["text"], "stepped");
    let task = TaskId::parse(&id).unwrap();
    let record = tasks.get(&task, "alice").await.unwrap().unwrap();
    let owner = StreamOwner {
        principal: Arc::from("alice"),
        session: record.events_session.expect("the task keeps its events"),
    };
    let batch = events
        .read_from_start(&owner, task.stream(), 100)
        .await
        .unwrap();
    assert!(batch.complete, "the stream ended with the task");
    let emitted: Vec<Value> = batch
        .events
        .iter()
        .filter(|event| !event.is_priming())
        .map(|event| serde_json::from_slice(event.message()).unwrap())
        .collect();
    let progress: Vec<f64> = emitted
        .iter()
        .map(|message| {
            assert_eq!(message["method"], "notifications/progress", "{message}");
            message["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(
        progress,
        [1.0, 2.0, 3.0],
        "every step once, in order, nothing else"
    );
    // Another principal cannot read them.
    let bob = StreamOwner {
        principal: Arc::from("bob"),
        session: owner.session.clone(),
    };
    assert!(
        events
            .read_from_start(&bob, task.stream(), 100)
            .await
            .is_err()
    );
}

/// `CreateTaskResult` waits for the task's commit: while another connection holds SQLite's
/// write lock no answer comes, and once it lets go the answer names a task that `tasks/get`
/// finds.
#[tokio::test]
async fn no_create_task_result_while_the_sqlite_commit_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tether.db");
    let stores = Stores::sqlite(&path, StoreLimits::default()).unwrap();
    let (url, _stop, _task) = asking_server(stores).await;
    let alice = alice(&url);
    // Warm up: the server's first writes (sealing key, schema) are behind it.
    let first = alice
        .exchange(&modern(
            &alice,
            1,
            "tools/call",
            json!({"name": "steps"}),
            as_task(),
        ))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(first["result"]["resultType"], "task", "{first}");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let call = modern(&alice, 2, "tools/call", json!({"name": "steps"}), as_task());
    let pending = tokio::spawn({
        let alice = alice.clone();
        async move { alice.exchange(&call).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !pending.is_finished(),
        "no CreateTaskResult before the commit"
    );
    holder.execute_batch("COMMIT").unwrap();
    let created = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("answered once the lock is released")
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap();
    let done = until_terminal(&alice, id).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
}

/// `subscriptions/listen` with `taskIds`: the ack names only the principal's own tasks; a
/// full snapshot arrives now and after each change (input required, then completed once
/// `tasks/update` answered), tagged with the subscription id.
#[tokio::test]
async fn a_listen_stream_carries_snapshots_of_the_principal_s_tasks() {
    let (url, _stop, _task) = asking_server(Stores::memory(StoreLimits::default())).await;
    let (alice, bob) = (
        alice(&url),
        RawClient::new(&url).unwrap().with_bearer_token("bob-token"),
    );
    let start = |client: &RawClient, id: i64| {
        modern(
            client,
            id,
            "tools/call",
            json!({"name": "greet"}),
            as_task(),
        )
    };
    let mine = alice
        .exchange(&start(&alice, 1))
        .await
        .unwrap()
        .json()
        .unwrap();
    let mine = mine["result"]["taskId"].as_str().unwrap().to_owned();
    let theirs = bob.exchange(&start(&bob, 2)).await.unwrap().json().unwrap();
    let theirs = theirs["result"]["taskId"].as_str().unwrap().to_owned();
    // The task asks at once: wait until it is input_required.
    let asked = alice.poll_task(&mine, "input_required").await.unwrap();
    assert_eq!(asked["result"]["status"], "input_required", "{asked}");
    let listen = modern(
        &alice,
        7,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [mine, theirs]}}),
        as_task(),
    );
    let mut stream = alice.send(&listen).await.unwrap();
    let ack = next_message(&mut stream).await.unwrap();
    assert_eq!(
        ack["params"]["notifications"],
        json!({"taskIds": [mine]}),
        "bob's task is not alice's to watch"
    );
    let now = next_message(&mut stream).await.unwrap();
    assert_eq!(now["method"], "notifications/tasks", "{now}");
    assert_eq!(now["params"]["taskId"], mine.as_str());
    assert_eq!(now["params"]["status"], "input_required");
    assert!(now["params"]["inputRequests"]["name"].is_object(), "{now}");
    assert_eq!(
        now["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    let update = modern(
        &alice,
        8,
        "tasks/update",
        json!({"taskId": mine, "inputResponses": {"name": {"action": "accept",
            "content": {"name": "Ada"}}}}),
        as_task(),
    );
    assert_eq!(alice.exchange(&update).await.unwrap().status, 200);
    let last = loop {
        let snapshot = next_message(&mut stream).await.unwrap();
        assert_eq!(snapshot["method"], "notifications/tasks");
        if snapshot["params"]["status"] == "completed" {
            break snapshot;
        }
        assert_eq!(snapshot["params"]["status"], "working", "{snapshot}");
    };
    assert_eq!(
        last["params"]["result"]["content"][0]["text"],
        "hello Ada (modern)"
    );
}

// ---------------------------------------------------------------------------------------
// The eras the operator serves (`ServerConfig::eras`) and the modern era's `retry`
// ---------------------------------------------------------------------------------------

/// A server that speaks only the eras `eras` names, `retry` 250 ms.
async fn serving(eras: tether::server::Eras) -> TestServer {
    let mut config = ServerConfig::default();
    config.eras = eras;
    config.retry = Duration::from_millis(250);
    TestServer::start(config).await
}

/// `server/discover`'s `supportedVersions`, asked in the 2026-07-28 era.
async fn discovered_versions(client: &RawClient) -> Value {
    let request = modern(client, 1, "server/discover", json!({}), json!({}));
    let answer = client.exchange(&request).await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json().unwrap()["result"]["supportedVersions"].clone()
}

#[tokio::test]
async fn discover_lists_exactly_the_versions_of_the_eras_served() {
    let both = serving(tether::server::Eras::Both).await;
    let versions = discovered_versions(&both.client()).await;
    let versions: Vec<&str> = versions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(versions.contains(&"2026-07-28"), "{versions:?}");
    assert!(versions.contains(&"2025-11-25"), "{versions:?}");
    let modern_only = serving(tether::server::Eras::Modern).await;
    assert_eq!(
        discovered_versions(&modern_only.client()).await,
        json!(["2026-07-28"])
    );
}

#[tokio::test]
async fn legacy_only_answers_a_modern_request_as_a_2025_server_and_keeps_sessions() {
    let server = serving(tether::server::Eras::Legacy).await;
    let client = server.client();
    for method in ["server/discover", "tools/list"] {
        let request = modern(&client, 1, method, json!({}), json!({}));
        let answer = client.exchange(&request).await.unwrap();
        assert_eq!(answer.status, 400, "{method}: {answer:?}");
        assert!(answer.headers.get("mcp-session-id").is_none(), "{method}");
        let body = answer.json().unwrap();
        assert_eq!(body["error"]["code"], -32600, "{method}: {body}");
        let supported = body["error"]["data"]["supported"].as_array().unwrap();
        assert!(!supported.is_empty(), "{body}");
        assert!(
            supported.iter().all(|v| v.as_str().unwrap() < "2026"),
            "only 2025 versions: {body}"
        );
    }
    // A modern GET is not the modern era's 405 either: it is a request without a session.
    let modern_get = client
        .clone()
        .with_protocol_version(tether_testkit::raw::MODERN_VERSION);
    let answer = modern_get
        .exchange(&modern_get.request("GET"))
        .await
        .unwrap();
    assert_eq!(answer.status, 400, "{answer:?}");
    // Sessions work as ever: initialize, then a call that streams.
    let mut legacy = server.client();
    let initialized = legacy.initialize().await.unwrap();
    assert_eq!(initialized.result["protocolVersion"], "2025-11-25");
    assert!(legacy.session_id().is_some());
}

#[tokio::test]
async fn modern_only_refuses_initialize_with_the_versions_it_serves() {
    let server = serving(tether::server::Eras::Modern).await;
    let mut client = server.client();
    let (id, response) = client
        .post_request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "old", "version": "1"}}),
        )
        .await
        .unwrap();
    let answer = response.read_to_end().await.unwrap();
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.headers.get("mcp-session-id").is_none(), "no session");
    let body = answer.json().unwrap();
    assert_eq!(body["id"], json!(id), "{body}");
    assert!(
        body.get("result").is_none(),
        "never an InitializeResult: {body}"
    );
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(
        body["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"}),
        "{body}"
    );
    // No session can exist, so GET and DELETE are the modern era's 405 with or without the
    // version header.
    for method in ["GET", "DELETE"] {
        let answer = client.exchange(&client.request(method)).await.unwrap();
        assert_eq!(answer.status, 405, "{method}: {answer:?}");
        assert_eq!(answer.headers.get("allow"), Some("POST"), "{method}");
    }
    // The modern era is served.
    let list = modern(&client, 2, "tools/list", json!({}), json!({}));
    let answer = messages(client.send(&list).await.unwrap()).await;
    assert_eq!(answer[0]["result"]["resultType"], "complete", "{answer:?}");
}

#[tokio::test]
async fn a_modern_stream_opens_with_the_server_s_retry() {
    let server = serving(tether::server::Eras::Both).await;
    let client = server.client();
    let request = modern(
        &client,
        1,
        "tools/call",
        json!({"name": "count", "arguments": {"n": 2}}),
        json!({"progressToken": "p"}),
    );
    let response = client.send(&request).await.unwrap();
    assert!(
        response.is_event_stream(),
        "a stream: {}",
        response.status()
    );
    let transcript = response.read_to_end().await.unwrap();
    assert_eq!(transcript.retries(), vec![250], "{transcript:?}");
    let text = String::from_utf8_lossy(&transcript.body);
    assert!(text.starts_with("retry: 250\n"), "{text}");
}

#[tokio::test]
async fn a_task_stream_opens_with_retry_and_carries_compact_events() {
    let stores = Stores::memory(StoreLimits::default());
    let mut config = ServerConfig::default();
    config.retry = Duration::from_millis(250);
    let (url, _stop, _task) = asking_server_with(stores, config).await;
    let alice = alice(&url);
    let mut meta = as_task();
    meta["progressToken"] = json!("p");
    let call = modern(&alice, 1, "tools/call", json!({"name": "steps"}), meta);
    let created = alice.exchange(&call).await.unwrap().json().unwrap();
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    until_terminal(&alice, &task).await;
    let stream = modern(
        &alice,
        2,
        "tasks/stream",
        json!({"taskId": task}),
        as_task(),
    );
    let transcript = alice
        .send(&stream)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert!(transcript.is_event_stream(), "{transcript:?}");
    let text = String::from_utf8_lossy(&transcript.body).into_owned();
    assert!(text.starts_with("retry: 250\n"), "{text}");
    let events: Vec<Value> = transcript
        .events()
        .filter(|event| !event.data.is_empty())
        .map(|event| serde_json::from_str(&event.data).unwrap())
        .filter(|message: &Value| message["method"] == "notifications/tasks/event")
        .collect();
    assert_eq!(events.len(), 3, "{text}");
    for (seq, event) in events.iter().enumerate() {
        let params = &event["params"];
        assert_eq!(params["seq"], json!(seq), "{event}");
        assert_eq!(params["taskId"], json!(task), "{event}");
        assert_eq!(params["type"], "dev.tether.progress", "{event}");
        assert_eq!(params["payload"]["progress"], json!(seq + 1), "{event}");
        assert_eq!(params["payload"]["progressToken"], "p", "{event}");
        assert!(params.get("_meta").is_none(), "{event}");
    }
}
