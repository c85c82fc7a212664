//! Task streams (SEP-2694, adapted to SEP-2663; docs/CONTRACTS.md#task-streams): `tasks/stream`
//! reads a task's events from the event log, `seq` from 0, then live until the task ends,
//! then answers `{}`. Through a fault proxy that cuts the stream, a reader that asks again
//! with `after` = the last seq it took gets every event exactly once after deduplication, in
//! order, on the memory store, on SQLite, and on Redis read from the node that does not run
//! the task. A cursor that retained events cannot cover is `events_gone` with the earliest
//! seq; a bad `after`, another principal's task and a request without the extension are
//! refused. A task's events have limits of their own: they are gone once their retention after
//! the task ended has passed, and an event over the task event size limit is refused to the
//! handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::proto::jsonrpc::{ErrorObject, Request};
use tether::server::{
    BearerTokens, Handler, RequestContext, Server, ServerConfig, ServerInfo, TaskSupport,
};
use tether::store::{StoreLimits, Stores};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tether_testkit::raw::{RawClient, RawRequest, RawResponse, SseItem, task_meta};

/// Bound on a whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(90);

/// `count {n, interval_ms}`: progress 1..n (with the request's token), then `counted n`; it may
/// run as a task.
struct Counting;

#[async_trait]
impl Handler for Counting {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "counting".into(),
            version: "1".into(),
            capabilities: json!({"tools": {}}),
            instructions: None,
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let args = request
            .params
            .as_ref()
            .map(|p| p["arguments"].clone())
            .unwrap_or_default();
        let n = args["n"].as_u64().unwrap_or(3);
        let interval = Duration::from_millis(args["interval_ms"].as_u64().unwrap_or(0));
        if let Some(bytes) = args["message_bytes"].as_u64() {
            // One progress event carrying a message of this size first.
            let message = "x".repeat(usize::try_from(bytes).unwrap());
            context
                .progress(0.0, Some(1.0), Some(&message))
                .await
                .map_err(|e| ErrorObject::new(-32603, format!("refused: {e}")))?;
        }
        for i in 1..=n {
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            #[allow(clippy::cast_precision_loss)]
            context
                .progress(i as f64, Some(n as f64), None)
                .await
                .map_err(|e| ErrorObject::new(-32603, e.to_string()))?;
        }
        Ok(json!({"content": [{"type": "text", "text": format!("counted {n}")}]}))
    }

    fn offers_tasks(&self) -> bool {
        true
    }

    fn task_support(&self, _call: &Request) -> TaskSupport {
        TaskSupport::Optional
    }
}

/// A server of [`Counting`] over `stores` with alice and bob as principals; its URL and its
/// stop signal (dropping it stops the server).
async fn serve(stores: Stores) -> (String, tokio::sync::oneshot::Sender<()>) {
    serve_with(stores, ServerConfig::default()).await
}

/// [`serve`] with `config`.
async fn serve_with(
    stores: Stores,
    config: ServerConfig,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let tokens = BearerTokens::parse("alice:alice-token\nbob:bob-token\n").unwrap();
    let server = Server::builder(Arc::new(Counting))
        .config(config)
        .stores(stores)
        .auth(Arc::new(tokens))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    (url, stop)
}

fn alice(url: &str) -> RawClient {
    RawClient::new(url)
        .unwrap()
        .with_bearer_token("alice-token")
}

/// Starts `count {n, interval_ms}` as a task of `client`; its task id.
async fn start_count(client: &RawClient, n: u64, interval_ms: u64) -> String {
    let mut meta = task_meta();
    meta["progressToken"] = json!("p");
    let call = client.modern(
        1,
        "tools/call",
        json!({"name": "count", "arguments": {"n": n, "interval_ms": interval_ms}}),
        meta,
    );
    let created = client.exchange(&call).await.unwrap().json().unwrap();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

fn stream_request(client: &RawClient, id: i64, task: &str, after: Option<Value>) -> RawRequest {
    let mut params = json!({"taskId": task});
    if let Some(after) = after {
        params["after"] = after;
    }
    client.modern(id, "tasks/stream", params, task_meta())
}

/// The next JSON-RPC message of an SSE answer; `None` at its end or when it was cut.
async fn next_message(response: &mut RawResponse) -> Option<Value> {
    loop {
        match response.next_item().await {
            Ok(Some(SseItem::Event(event))) if !event.data.is_empty() => {
                return Some(serde_json::from_str(&event.data).unwrap());
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// What a reader of one task stream took.
#[derive(Default)]
struct Taken {
    /// Events by seq, each taken once (a repeat after a reconnect is dropped, as SEP-2694's
    /// clients do).
    events: BTreeMap<u64, Value>,
    /// Events delivered again after a reconnect (seq already taken).
    repeats: usize,
    /// `tasks/stream` requests sent.
    requests: usize,
    /// The final answer.
    answer: Option<Value>,
}

/// Reads task `task`'s stream at `url` to its answer, asking again with `after` = the last seq
/// taken whenever the stream is cut before it.
async fn read_task_stream(url: &str, task: &str) -> Taken {
    let client = alice(url);
    let mut taken = Taken::default();
    while taken.answer.is_none() {
        assert!(taken.requests < 200, "too many reconnects");
        let after = taken.events.keys().next_back().map(|&seq| json!(seq));
        let request = stream_request(&client, 10 + taken.requests as i64, task, after);
        taken.requests += 1;
        let Ok(mut response) = client.send(&request).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        while let Some(message) = next_message(&mut response).await {
            if message.get("id").is_some() {
                taken.answer = Some(message);
                break;
            }
            assert_eq!(message["method"], "notifications/tasks/event", "{message}");
            let params = &message["params"];
            let seq = params["seq"].as_u64().unwrap();
            if taken.events.insert(seq, params.clone()).is_some() {
                taken.repeats += 1;
            }
        }
    }
    taken
}

/// Every event 0..n, in order, carrying progress seq + 1 of the request's token, once each.
fn assert_every_event(taken: &Taken, task: &str, n: u64) {
    let seqs: Vec<u64> = taken.events.keys().copied().collect();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "every seq once");
    for (seq, event) in &taken.events {
        assert_eq!(event["taskId"], task);
        assert_eq!(event["type"], "dev.tether.progress", "{event}");
        // The payload is the progress notification's params: the envelope and a related-task
        // `_meta` would only repeat what the event's own fields say.
        assert_eq!(event["payload"]["progress"], json!(seq + 1), "{event}");
        assert_eq!(event["payload"]["progressToken"], "p");
        assert!(event.get("_meta").is_none(), "{event}");
        assert!(event["payload"].get("method").is_none(), "{event}");
    }
    let answer = taken.answer.as_ref().unwrap();
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
}

#[tokio::test]
async fn a_task_stream_replays_then_follows_live_then_answers_empty() {
    let (url, _stop) = serve(Stores::memory(StoreLimits::default())).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = alice(&url);
        let task = start_count(&client, 20, 20).await;
        // Opened while the task runs: the events so far, then the rest as they happen.
        let taken = read_task_stream(&url, &task).await;
        assert_eq!(taken.requests, 1, "nothing was cut");
        assert_every_event(&taken, &task, 20);
        let done = client.poll_task(&task, "completed").await.unwrap();
        assert_eq!(done["result"]["result"]["content"][0]["text"], "counted 20");
        // A task that ended: from a cursor, only what follows it; past the end, just `{}`.
        let mut after = client
            .send(&stream_request(&client, 2, &task, Some(json!(16))))
            .await
            .unwrap();
        let mut seqs = Vec::new();
        while let Some(message) = next_message(&mut after).await {
            match message["params"]["seq"].as_u64() {
                Some(seq) => seqs.push(seq),
                None => assert_eq!(message["result"]["resultType"], "complete"),
            }
        }
        assert_eq!(seqs, [17, 18, 19]);
        let mut past = client
            .send(&stream_request(&client, 3, &task, Some(json!(19))))
            .await
            .unwrap();
        let only = next_message(&mut past).await.unwrap();
        assert!(only["result"].is_object(), "{only}");
        assert!(next_message(&mut past).await.is_none());
    })
    .await
    .unwrap();
}

/// A `count` task of n events started on the server at `run_on`, its stream read from the one
/// at `read_from` (the same, or another node of a shared store) through a proxy that cuts
/// every few events; the reader asks again with `after`.
async fn through_cuts(run_on: &str, read_from: &str, n: u64) {
    let addr: std::net::SocketAddr = read_from
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(1500).with_jitter(700));
    let proxy = FaultProxy::start(addr, plan).await.unwrap();
    let task = start_count(&alice(run_on), n, 5).await;
    let taken = read_task_stream(&proxy.url_for("/mcp"), &task).await;
    assert!(proxy.counters().cuts >= 2, "cuts: {}", proxy.report());
    assert!(taken.requests >= 3, "the reader asked again after each cut");
    assert_every_event(&taken, &task, n);
}

#[tokio::test]
async fn a_cut_task_stream_resumes_with_after_exactly_once_on_memory() {
    let (url, _stop) = serve(Stores::memory(StoreLimits::default())).await;
    tokio::time::timeout(TEST_TIMEOUT, through_cuts(&url, &url, 150))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_cut_task_stream_resumes_with_after_exactly_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::sqlite(dir.path().join("tether.db"), StoreLimits::default()).unwrap();
    let (url, _stop) = serve(stores).await;
    tokio::time::timeout(TEST_TIMEOUT, through_cuts(&url, &url, 150))
        .await
        .unwrap();
}

/// Two nodes on one Redis: the task runs on A, its stream is read from B through the cuts.
#[tokio::test]
async fn a_cut_task_stream_read_from_the_other_redis_node_is_exactly_once() {
    use crate::store_redis::{fresh_prefix, redis_url};
    use tether::store::redis::RedisStoreConfig;
    let prefix = fresh_prefix();
    let node = |id: &str| {
        let mut config = RedisStoreConfig::new(redis_url());
        config.key_prefix = prefix.clone();
        config.node_id = id.to_owned();
        config
    };
    let (a, _stop_a) = serve(Stores::redis_with(node("a")).await.unwrap()).await;
    let (b, _stop_b) = serve(Stores::redis_with(node("b")).await.unwrap()).await;
    tokio::time::timeout(TEST_TIMEOUT, through_cuts(&a, &b, 150))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_cursor_before_the_retained_events_is_events_gone_and_no_cursor_starts_there() {
    let mut limits = StoreLimits::default();
    limits.max_events_per_session = 4;
    let (url, _stop) = serve(Stores::memory(limits)).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = alice(&url);
        let task = start_count(&client, 10, 0).await;
        client.poll_task(&task, "completed").await.unwrap();
        // Four events kept: task seqs 6..=9.
        let gone = client
            .exchange(&stream_request(&client, 2, &task, Some(json!(2))))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(gone["error"]["code"], -32010, "{gone}");
        assert_eq!(gone["error"]["data"]["reason"], "events_gone");
        assert_eq!(gone["error"]["data"]["taskId"], json!(task));
        assert_eq!(gone["error"]["data"]["earliestSeq"], 6, "{gone}");
        let mut from_start = client
            .send(&stream_request(&client, 3, &task, None))
            .await
            .unwrap();
        let mut seqs = Vec::new();
        while let Some(message) = next_message(&mut from_start).await {
            if let Some(seq) = message["params"]["seq"].as_u64() {
                seqs.push(seq);
            }
        }
        assert_eq!(seqs, [6, 7, 8, 9], "from the earliest retained event");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_cursors_other_principals_and_missing_extension_are_refused() {
    let (url, _stop) = serve(Stores::memory(StoreLimits::default())).await;
    let client = alice(&url);
    let task = start_count(&client, 2, 0).await;
    let bob = RawClient::new(&url).unwrap().with_bearer_token("bob-token");
    let answer = |client: &RawClient, request: RawRequest| {
        let client = client.clone();
        async move { client.exchange(&request).await.unwrap().json().unwrap() }
    };
    for bad in [json!(-1), json!("3"), json!(1.5)] {
        let request = stream_request(&client, 2, &task, Some(bad.clone()));
        let refused: Value = answer(&client, request).await;
        assert_eq!(refused["error"]["code"], -32602, "after {bad}: {refused}");
    }
    let theirs: Value = answer(&bob, stream_request(&bob, 3, &task, None)).await;
    assert_eq!(
        theirs["error"]["code"], -32602,
        "bob's is an unknown task: {theirs}"
    );
    assert_eq!(theirs["error"]["message"], "unknown task");
    let plain = client.modern(4, "tasks/stream", json!({"taskId": task}), json!({}));
    let refused: Value = answer(&client, plain).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
}

#[tokio::test]
async fn discover_advertises_task_event_streams() {
    let (url, _stop) = serve(Stores::memory(StoreLimits::default())).await;
    let client = alice(&url);
    let discover = client.modern(1, "server/discover", json!({}), json!({}));
    let answer = client.exchange(&discover).await.unwrap().json().unwrap();
    assert_eq!(
        answer["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({"eventStreams": {}}),
        "{answer}"
    );
}

#[tokio::test]
async fn closing_a_task_stream_does_not_cancel_the_task() {
    let (url, _stop) = serve(Stores::memory(StoreLimits::default())).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = alice(&url);
        let task = start_count(&client, 30, 20).await;
        let mut stream = client
            .send(&stream_request(&client, 2, &task, None))
            .await
            .unwrap();
        for seq in 0..3 {
            let event = next_message(&mut stream).await.unwrap();
            assert_eq!(event["params"]["seq"], seq, "{event}");
        }
        drop(stream);
        let done = client.poll_task(&task, "completed").await.unwrap();
        assert_eq!(done["result"]["status"], "completed", "{done}");
        assert_eq!(done["result"]["result"]["content"][0]["text"], "counted 30");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_tasks_events_are_gone_after_their_retention_and_its_record_stays() {
    let mut config = ServerConfig::default();
    config.task_events_retention = Duration::from_millis(300);
    let (url, _stop) = serve_with(Stores::memory(StoreLimits::default()), config).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = alice(&url);
        let task = start_count(&client, 5, 0).await;
        client.poll_task(&task, "completed").await.unwrap();
        let read = read_task_stream(&url, &task).await;
        assert_every_event(&read, &task, 5);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let gone = client
            .exchange(&stream_request(&client, 2, &task, None))
            .await
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(gone["error"]["code"], -32010, "{gone}");
        assert_eq!(gone["error"]["data"]["earliestSeq"], Value::Null, "{gone}");
        // The outcome is the record's, which keeps its own TTL.
        let record = client.poll_task(&task, "completed").await.unwrap();
        assert_eq!(record["result"]["status"], "completed", "{record}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_task_event_over_the_task_event_size_limit_is_refused_to_the_handler() {
    let mut config = ServerConfig::default();
    config.task_max_event_bytes = 2048;
    let (url, _stop) = serve_with(Stores::memory(StoreLimits::default()), config).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = alice(&url);
        let start = |bytes: u64| {
            let mut meta = task_meta();
            meta["progressToken"] = json!("p");
            let arguments = json!({"n": 1, "message_bytes": bytes});
            client.modern(
                1,
                "tools/call",
                json!({"name": "count", "arguments": arguments}),
                meta,
            )
        };
        let created: Value = client.exchange(&start(4096)).await.unwrap().json().unwrap();
        let task = created["result"]["taskId"].as_str().unwrap().to_owned();
        let failed = client.poll_task(&task, "failed").await.unwrap();
        assert_eq!(failed["result"]["status"], "failed", "{failed}");
        let message = failed["result"]["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.starts_with("refused: "), "{failed}");
        // Under the limit, the same task completes and its stream carries the event.
        let created: Value = client.exchange(&start(1024)).await.unwrap().json().unwrap();
        let task = created["result"]["taskId"].as_str().unwrap().to_owned();
        let done = client.poll_task(&task, "completed").await.unwrap();
        assert_eq!(done["result"]["status"], "completed", "{done}");
        let read = read_task_stream(&url, &task).await;
        assert_eq!(read.events.len(), 2, "{:?}", read.events);
        let message = &read.events[&0]["payload"]["message"];
        assert_eq!(message.as_str().map(str::len), Some(1024));
    })
    .await
    .unwrap();
}
