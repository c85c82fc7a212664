//! The built-in demo server (`tether::demo::DemoHandler`) over a real socket, driven by the
//! test kit's raw reader so that every notification is seen exactly as the server sent it.
//!
//! Covers docs/CONTRACTS.md#demo-count (progress 1..n with total and token, or log
//! messages without a token, then `counted n`), `logging/setLevel` filtering, `echo`,
//! `tools/list`, and the demo's error choices: argument errors are `isError` tool results
//! (MCP 2025-11-25 server/tools, "Error Handling"), unknown tools are -32602, unknown methods
//! -32601. docs/PROTOCOL.md T8 (the SSE answer carries the response) and T13 (progress on the POST
//! stream carries the request's token) are exercised along the way.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tether::{
    demo::{DemoHandler, MAX_COUNT},
    server::{Server, ServerConfig},
};
use tether_testkit::raw::{RawClient, RawResponse};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A demo server on 127.0.0.1:0, stopped gracefully when dropped.
struct DemoServer {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl DemoServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let config = ServerConfig::default();
        let url = format!("http://{addr}{}", config.path);
        let server = Server::builder(Arc::new(DemoHandler::new()))
            .config(config)
            .build()
            .await
            .expect("a server");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async move {
            stopped.await.ok();
        }));
        Self {
            url,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn client(&self) -> RawClient {
        let mut client = RawClient::new(&self.url).expect("client");
        client.initialize().await.expect("initialize");
        client
    }

    /// Stops the server and checks that `serve` returned cleanly.
    async fn shutdown(mut self) {
        self.stop.take().map(|s| s.send(()));
        let task = self.task.take().expect("task");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("serve returns after shutdown")
            .expect("serve task")
            .expect("serve result");
    }
}

impl Drop for DemoServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Reads `response` until the response to `id`; returns every message it carried, in order,
/// and the response itself.
async fn read_call(mut response: RawResponse, id: i64) -> (Vec<Value>, Value) {
    assert_eq!(response.status(), 200, "{:?}", response.transcript());
    let final_response = response
        .read_until_response(id)
        .await
        .expect("read")
        .expect("a response with the request's id");
    let messages = response
        .transcript()
        .messages()
        .expect("JSON messages")
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    (messages, final_response)
}

fn notifications<'a>(messages: &'a [Value], method: &'a str) -> impl Iterator<Item = &'a Value> {
    messages
        .iter()
        .filter(move |m| m["method"] == method && m.get("id").is_none())
}

fn text_of(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {response}"))
}

#[tokio::test]
async fn count_with_progress_token_delivers_progress_in_order_then_result() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let n = 25;
    let (id, response) = client
        .call_tool("count", json!({"n": n}), Some(json!("tok-7")))
        .await?;
    let (messages, result) = read_call(response, id).await;

    let progress: Vec<&Value> = notifications(&messages, "notifications/progress").collect();
    assert_eq!(progress.len(), n, "{messages:?}");
    for (i, note) in progress.iter().enumerate() {
        let params = &note["params"];
        assert_eq!(params["progressToken"], json!("tok-7"));
        // Whole numbers go on the wire as JSON integers.
        assert_eq!(params["progress"], json!(i + 1));
        assert_eq!(params["total"], json!(n));
    }
    assert_eq!(notifications(&messages, "notifications/message").count(), 0);
    // The response is the last message: every progress notification came before it.
    assert_eq!(messages.last(), Some(&result));
    assert_eq!(text_of(&result), format!("counted {n}"));
    assert_eq!(result["result"].get("isError"), None);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn count_with_integer_token_echoes_it() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client
        .call_tool("count", json!({"n": 2}), Some(json!(42)))
        .await?;
    let (messages, result) = read_call(response, id).await;
    let tokens: Vec<&Value> = notifications(&messages, "notifications/progress")
        .map(|m| &m["params"]["progressToken"])
        .collect();
    assert_eq!(tokens, [&json!(42), &json!(42)]);
    assert_eq!(text_of(&result), "counted 2");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn count_without_token_logs_each_step() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client.call_tool("count", json!({"n": 4}), None).await?;
    let (messages, result) = read_call(response, id).await;

    let logs: Vec<&Value> = notifications(&messages, "notifications/message").collect();
    assert_eq!(logs.len(), 4, "{messages:?}");
    for (i, log) in logs.iter().enumerate() {
        assert_eq!(
            log["params"],
            json!({"level": "info", "logger": "count", "data": {"index": i + 1, "total": 4}})
        );
    }
    assert_eq!(
        notifications(&messages, "notifications/progress").count(),
        0
    );
    assert_eq!(text_of(&result), "counted 4");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn count_zero_emits_nothing() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client
        .call_tool("count", json!({"n": 0}), Some(json!("t")))
        .await?;
    let (messages, result) = read_call(response, id).await;
    assert_eq!(messages, std::slice::from_ref(&result));
    assert_eq!(text_of(&result), "counted 0");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn count_interval_spaces_the_events() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let started = std::time::Instant::now();
    let (id, response) = client
        .call_tool(
            "count",
            json!({"n": 3, "interval_ms": 60}),
            Some(json!("t")),
        )
        .await?;
    let (messages, result) = read_call(response, id).await;
    // Two gaps between three events.
    assert!(started.elapsed() >= Duration::from_millis(120));
    assert_eq!(
        notifications(&messages, "notifications/progress").count(),
        3
    );
    assert_eq!(text_of(&result), "counted 3");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn set_level_warning_suppresses_count_info_logs() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client
        .post_request("logging/setLevel", json!({"level": "warning"}))
        .await?;
    let (_, set) = read_call(response, id).await;
    assert_eq!(set["result"], json!({}), "{set}");

    let (id, response) = client.call_tool("count", json!({"n": 5}), None).await?;
    let (messages, result) = read_call(response, id).await;
    assert_eq!(notifications(&messages, "notifications/message").count(), 0);
    assert_eq!(text_of(&result), "counted 5");

    // Back to debug: the info messages flow again.
    let (id, response) = client
        .post_request("logging/setLevel", json!({"level": "debug"}))
        .await?;
    read_call(response, id).await;
    let (id, response) = client.call_tool("count", json!({"n": 2}), None).await?;
    let (messages, _) = read_call(response, id).await;
    assert_eq!(notifications(&messages, "notifications/message").count(), 2);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn set_level_rejects_unknown_levels() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    for params in [json!({"level": "loud"}), json!({}), json!({"level": 3})] {
        let (id, response) = client.post_request("logging/setLevel", params).await?;
        let (_, answer) = read_call(response, id).await;
        assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn echo_returns_its_text() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client
        .call_tool("echo", json!({"text": "héllo, wörld"}), None)
        .await?;
    let (_, result) = read_call(response, id).await;
    assert_eq!(
        result["result"],
        json!({"content": [{"type": "text", "text": "héllo, wörld"}]})
    );

    let (id, response) = client.call_tool("echo", json!({}), None).await?;
    let (_, result) = read_call(response, id).await;
    assert_eq!(result["result"]["isError"], json!(true), "{result}");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_count_arguments_are_tool_errors() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let cases = [
        (json!({}), "`n` is required"),
        (json!({"n": -1}), "must be >= 0"),
        (json!({"n": 1.5}), "must be an integer"),
        (json!({"n": "3"}), "must be an integer"),
        (json!({"n": MAX_COUNT + 1}), "at most 10000000"),
        (
            json!({"n": 1, "interval_ms": -5}),
            "`interval_ms` must be >= 0",
        ),
    ];
    for (arguments, expected) in cases {
        let (id, response) = client
            .call_tool("count", arguments.clone(), Some(json!("t")))
            .await?;
        let (messages, result) = read_call(response, id).await;
        assert_eq!(
            result["result"]["isError"],
            json!(true),
            "{arguments}: {result}"
        );
        let text = text_of(&result);
        assert!(text.contains(expected), "{arguments}: {text:?}");
        // Nothing was counted.
        assert_eq!(messages, std::slice::from_ref(&result), "{arguments}");
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn unknown_tool_and_method_are_protocol_errors() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client.call_tool("nope", json!({}), None).await?;
    let (_, answer) = read_call(response, id).await;
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nope")),
        "{answer}"
    );

    let (id, response) = client
        .post_request("tools/call", json!({"arguments": {}}))
        .await?;
    let (_, answer) = read_call(response, id).await;
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");

    let (id, response) = client.post_request("resources/list", json!({})).await?;
    let (_, answer) = read_call(response, id).await;
    assert_eq!(answer["error"]["code"], json!(-32601), "{answer}");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn tools_list_describes_count_and_echo() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, response) = client.post_request("tools/list", json!({})).await?;
    let (_, answer) = read_call(response, id).await;
    let tools = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {answer}"));
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["count", "echo"]);
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], json!("object"), "{tool}");
    }
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["n"]));
    assert_eq!(
        tools[0]["inputSchema"]["properties"]["n"]["maximum"],
        json!(MAX_COUNT)
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn initialize_reports_demo_server_info() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = RawClient::new(&server.url)?;
    let initialized = client.initialize().await?;
    let result = initialized.result;
    assert_eq!(result["serverInfo"]["name"], json!("tether-demo"));
    assert_eq!(
        result["serverInfo"]["version"],
        json!(env!("CARGO_PKG_VERSION"))
    );
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert!(result["capabilities"]["logging"].is_object(), "{result}");
    server.shutdown().await;
    Ok(())
}

/// docs/PROTOCOL.md T16: `notifications/cancelled` stops `count`, and no response is sent for it.
#[tokio::test]
async fn cancelled_count_stops_without_a_response() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let (id, mut response) = client
        .call_tool(
            "count",
            json!({"n": 1000, "interval_ms": 20}),
            Some(json!("c")),
        )
        .await?;
    assert_eq!(response.status(), 200);
    // Wait for the first progress notification: the handler is running.
    loop {
        let event = response.next_event().await?.expect("stream open");
        if event
            .json()?
            .is_some_and(|m| m["method"] == "notifications/progress")
        {
            break;
        }
    }
    let cancel = client
        .notify(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": "test"})),
        )
        .await?
        .read_to_end()
        .await?;
    assert_eq!(cancel.status, 202);

    // Drain whatever was in flight; the count must stop well before 1000 and never answer.
    while let Some(item) = response
        .next_item_within(Duration::from_millis(500))
        .await?
    {
        if item.is_none() {
            break;
        }
    }
    let messages = response.transcript().messages()?;
    let progress = messages
        .iter()
        .filter(|(_, m)| m["method"] == "notifications/progress")
        .count();
    assert!(progress < 100, "count kept going: {progress} events");
    assert!(
        messages
            .iter()
            .all(|(_, m)| m.get("id") != Some(&json!(id))),
        "a cancelled request was answered: {messages:?}"
    );
    server.shutdown().await;
    Ok(())
}

/// A long count without an interval (the path that yields to the scheduler every few hundred
/// events) still delivers every step, in order, once.
#[tokio::test]
async fn long_count_delivers_every_step() -> TestResult {
    let server = DemoServer::start().await;
    let mut client = server.client().await;
    let n = 5000;
    let (id, response) = client
        .call_tool("count", json!({"n": n}), Some(json!("long")))
        .await?;
    let (messages, result) = read_call(response, id).await;
    let steps: Vec<u64> = notifications(&messages, "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    assert_eq!(steps, (1..=n).collect::<Vec<u64>>());
    assert_eq!(text_of(&result), format!("counted {n}"));
    server.shutdown().await;
    Ok(())
}
