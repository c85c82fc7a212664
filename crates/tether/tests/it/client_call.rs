//! Client II's API against the tether server: [`Client::call_tool`] yields `count`'s progress
//! 1..n once each, in order, then the result, through a fault proxy that cuts connections;
//! a [`ResumptionToken`] serialized by one client resumes the call in another
//! ([`Client::resume_tool_call`]), starting exactly after the committed event; a token whose
//! session the server no longer knows fails with [`Error::SessionExpired`]. A
//! [`ServerRequestHandler`] answers the server's sampling and elicitation requests (on the
//! call's stream and on the standalone stream) without the application seeing them.

use crate::support::client::{demo_config, fast_config, start_demo_server, start_server};
use crate::support::server::TestServer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether::client::{
    Client, ClientConfig, ClientEvent, Error, ResumptionToken, ServerRequestHandler, ToolCall,
    ToolCallItem,
};
use tether::proto::jsonrpc::{
    ErrorObject, INTERNAL_ERROR, METHOD_NOT_FOUND, Message, Request, Response,
};
use tether::server::{ContextError, Handler, RequestContext, ServerInfo};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads the rest of a call: its progress values, then the text of its result.
async fn rest_of(mut call: ToolCall) -> (Vec<u64>, String) {
    let mut progress = Vec::new();
    while let Some(item) = call.next().await {
        match item.unwrap() {
            ToolCallItem::Progress { progress: p, .. } => progress.push(p as u64),
            ToolCallItem::Response(Response::Result(r)) => {
                assert!(call.next().await.is_none(), "an item after the response");
                let text = r.result["content"][0]["text"].as_str().unwrap().to_owned();
                return (progress, text);
            }
            other => panic!("unexpected item {other:?}"),
        }
    }
    panic!("the call ended without a response; progress {progress:?}");
}

#[tokio::test]
async fn call_tool_yields_progress_once_in_order_then_the_result_across_cuts() {
    let server = start_demo_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    let n = 150;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(
            &proxy.url_for("/mcp"),
            fast_config(Duration::from_millis(50)),
        )
        .await
        .unwrap();
        let mut events = client.events();
        let call = client.call_tool("count", json!({"n": n})).await.unwrap();
        let (progress, text) = rest_of(call).await;
        assert_eq!(progress, (1..=n).collect::<Vec<_>>());
        assert_eq!(text, format!("counted {n}"));
        let reconnected = std::iter::from_fn(|| events.try_recv())
            .any(|e| matches!(e, ClientEvent::Reconnecting { .. }));
        assert!(reconnected, "no Reconnecting event");
        client.close().await.unwrap();
    })
    .await
    .unwrap_or_else(|_| panic!("timed out; proxy: {}", proxy.report()));
    assert!(proxy.counters().cuts >= 1, "{}", proxy.report());
}

/// Starts a slow `count`, takes `taken` items (acking the last one if `ack`), then drops
/// the call and its client; returns the last token the callback saw, as persisted JSON.
async fn abandon_after(url: &str, n: u64, taken: u64, ack: bool) -> String {
    let saved: Arc<Mutex<Option<String>>> = Arc::default();
    let sink = Arc::clone(&saved);
    let config = {
        let mut config = fast_config(Duration::from_millis(50));
        config.on_resumption_token = Some(Arc::new(move |token: &ResumptionToken| {
            *sink.lock().unwrap() = Some(serde_json::to_string(token).unwrap());
        }));
        config
    };
    let client = Client::connect(url, config).await.unwrap();
    let mut call = client
        .call_tool("count", json!({"n": n, "interval_ms": 20}))
        .await
        .unwrap();
    for i in 1..=taken {
        match call.next().await.unwrap().unwrap() {
            ToolCallItem::Progress { progress, .. } => assert_eq!(progress as u64, i),
            other => panic!("unexpected item {other:?}"),
        }
    }
    if ack {
        call.ack();
    }
    drop(call);
    drop(client);
    saved.lock().unwrap().clone().expect("no token was saved")
}

#[tokio::test]
async fn a_persisted_token_resumes_the_call_after_the_committed_event() {
    let server = start_demo_server().await;
    let url = server.url.clone();
    let n = 60;
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Five taken, the fifth not committed: the resume starts with it again.
        let saved = abandon_after(&url, n, 5, false).await;
        let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
        assert!(token.request_id.is_some() && token.session_id.is_some());
        let call = Client::resume_tool_call(&url, &token, fast_config(Duration::from_millis(50)))
            .await
            .unwrap();
        assert_eq!(call.resumption_token(), Some(token));
        let (progress, text) = rest_of(call).await;
        assert_eq!(progress, (5..=n).collect::<Vec<_>>());
        assert_eq!(text, format!("counted {n}"));

        // Acked: the resume starts after it.
        let saved = abandon_after(&url, n, 5, true).await;
        let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
        let call = Client::resume_tool_call(&url, &token, fast_config(Duration::from_millis(50)))
            .await
            .unwrap();
        let (progress, _) = rest_of(call).await;
        assert_eq!(progress, (6..=n).collect::<Vec<_>>());
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_token_for_a_session_the_server_lost_fails_with_session_expired() {
    let first = start_demo_server().await;
    let saved = tokio::time::timeout(TEST_TIMEOUT, abandon_after(&first.url, 1000, 3, true))
        .await
        .expect("timed out");
    let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
    // Another server (a restart with an empty store) does not know the session.
    let second = start_demo_server().await;
    let outcome = tokio::time::timeout(TEST_TIMEOUT, async {
        let mut call =
            Client::resume_tool_call(&second.url, &token, fast_config(Duration::from_millis(50)))
                .await
                .unwrap();
        call.next().await
    })
    .await
    .expect("timed out");
    assert!(
        matches!(outcome, Some(Err(Error::SessionExpired))),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_cancelled_call_stops_and_the_client_goes_on() {
    let server = start_demo_server().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&server.url, fast_config(Duration::from_millis(50)))
            .await
            .unwrap();
        let mut call = client
            .call_tool("count", json!({"n": 100_000, "interval_ms": 10}))
            .await
            .unwrap();
        for _ in 0..3 {
            let item = call.next().await.unwrap().unwrap();
            assert!(matches!(item, ToolCallItem::Progress { .. }), "{item:?}");
        }
        call.cancel(Some("enough")).await.unwrap();
        let (progress, text) =
            rest_of(client.call_tool("count", json!({"n": 3})).await.unwrap()).await;
        assert_eq!((progress, text.as_str()), (vec![1, 2, 3], "counted 3"));
        client.close().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_standalone_token_is_refused() {
    let token = ResumptionToken {
        session_id: Some("s".to_owned()),
        protocol_version: None,
        request_id: None,
        last_event_id: "e".to_owned(),
        task_id: None,
    };
    let error = Client::resume("http://127.0.0.1:1/mcp", &token, ClientConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error:?}");
}

/// A server whose tools ask the client: `sample` sends `sampling/createMessage` and `elicit`
/// sends `elicitation/create` on the call's stream, `elicit_standalone` sends
/// `elicitation/create` on the standalone stream; each returns the answer's text, or reports
/// a client error as a tool error naming it.
struct AskingHandler;

#[async_trait]
impl Handler for AskingHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "asking".to_owned(),
            version: "0".to_owned(),
            capabilities: json!({"tools": {}}),
            instructions: None,
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        if request.method != "tools/call" {
            return Err(ErrorObject::new(METHOD_NOT_FOUND, "tools/call only"));
        }
        let params = request.params.unwrap_or(Value::Null);
        let question = params["arguments"]["question"].clone();
        let sampling = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
            "maxTokens": 10,
        });
        let elicitation = json!({
            "message": question,
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        });
        let answer = match params["name"].as_str() {
            Some("sample") => context.request("sampling/createMessage", sampling).await,
            Some("elicit") => context.request("elicitation/create", elicitation).await,
            Some("elicit_standalone") => {
                context
                    .session()
                    .request("elicitation/create", elicitation)
                    .await
            }
            _ => return Err(ErrorObject::new(METHOD_NOT_FOUND, "no such tool")),
        };
        let (text, is_error) = match answer {
            Ok(answer) => {
                let text = answer["content"]["text"]
                    .as_str()
                    .or_else(|| answer["content"]["name"].as_str())
                    .unwrap_or("?");
                (format!("client said {text}"), false)
            }
            Err(ContextError::Remote(error)) => (
                format!("client refused {}: {}", error.code, error.message),
                true,
            ),
            Err(other) => return Err(ErrorObject::new(INTERNAL_ERROR, other.to_string())),
        };
        Ok(json!({"content": [{"type": "text", "text": text}], "isError": is_error}))
    }
}

/// The client's side: answers sampling with the question shouted, elicitation with a name,
/// or everything with `refusal`; declines the methods not in `accepts`; records what it saw.
#[derive(Default)]
struct Answerer {
    refusal: Option<ErrorObject>,
    declined: Vec<&'static str>,
    seen: Mutex<Vec<String>>,
}

#[async_trait]
impl ServerRequestHandler for Answerer {
    fn accepts(&self, request: &Request) -> bool {
        !self.declined.contains(&request.method.as_str())
    }

    async fn handle(&self, request: &Request) -> Result<Value, ErrorObject> {
        self.seen.lock().unwrap().push(request.method.clone());
        if let Some(refusal) = &self.refusal {
            return Err(refusal.clone());
        }
        let params = request.params.clone().unwrap_or(Value::Null);
        match request.method.as_str() {
            "sampling/createMessage" => {
                let question = params["messages"][0]["content"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_uppercase();
                Ok(json!({
                    "role": "assistant",
                    "content": {"type": "text", "text": question},
                    "model": "test",
                }))
            }
            "elicitation/create" => Ok(json!({"action": "accept", "content": {"name": "Ada"}})),
            other => Err(ErrorObject::new(METHOD_NOT_FOUND, format!("no {other}"))),
        }
    }
}

/// A client on `server` whose request handler is `answerer`.
async fn answering_client(server: &TestServer, answerer: &Arc<Answerer>) -> Client {
    let mut config = fast_config(Duration::from_millis(50));
    config.capabilities = json!({"sampling": {}, "elicitation": {}});
    config.request_handler = Some(Arc::clone(answerer) as Arc<dyn ServerRequestHandler>);
    Client::connect(&server.url, config).await.unwrap()
}

/// Calls `tool` and reads it to the end (any server request reaching the application fails
/// the test); the result's text and whether it is a tool error.
async fn ask(client: &Client, tool: &str, question: &str) -> (String, bool) {
    let call = client
        .call_tool(tool, json!({"question": question}))
        .await
        .unwrap();
    match call.response().await.unwrap() {
        Response::Result(r) => (
            r.result["content"][0]["text"].as_str().unwrap().to_owned(),
            r.result["isError"] == json!(true),
        ),
        Response::Error(e) => panic!("protocol error {e:?}"),
    }
}

#[tokio::test]
async fn the_request_handler_answers_sampling_on_the_calls_stream() {
    let server = start_server(demo_config(), Arc::new(AskingHandler)).await;
    let answerer = Arc::new(Answerer::default());
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = answering_client(&server, &answerer).await;
        let mut call = client
            .call_tool("sample", json!({"question": "colour?"}))
            .await
            .unwrap();
        // The request is answered, not yielded: the only item is the result.
        let item = call.next().await.unwrap().unwrap();
        let ToolCallItem::Response(Response::Result(r)) = item else {
            panic!("unexpected item {item:?}");
        };
        assert_eq!(r.result["content"][0]["text"], "client said COLOUR?");
        assert!(call.next().await.is_none());
        assert_eq!(*answerer.seen.lock().unwrap(), ["sampling/createMessage"]);
        client.close().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_handler_error_reaches_the_tool_as_a_remote_error() {
    let server = start_server(demo_config(), Arc::new(AskingHandler)).await;
    let answerer = Arc::new(Answerer {
        refusal: Some(ErrorObject::new(-1, "user declined")),
        ..Answerer::default()
    });
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = answering_client(&server, &answerer).await;
        let (text, is_error) = ask(&client, "sample", "colour?").await;
        assert_eq!(text, "client refused -1: user declined");
        assert!(is_error);
        client.close().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn the_request_handler_answers_elicitation_on_the_call_and_standalone_streams() {
    let server = start_server(demo_config(), Arc::new(AskingHandler)).await;
    let answerer = Arc::new(Answerer::default());
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = answering_client(&server, &answerer).await;
        assert_eq!(
            ask(&client, "elicit", "name?").await,
            ("client said Ada".to_owned(), false)
        );

        // On the standalone stream: answered while the application reads it, not yielded.
        let mut standalone = client.server_messages().unwrap();
        let reader = tokio::spawn(async move {
            let mut yielded = Vec::new();
            while let Some(Ok(message)) = standalone.next().await {
                yielded.push(message);
            }
            yielded
        });
        assert_eq!(
            ask(&client, "elicit_standalone", "name?").await,
            ("client said Ada".to_owned(), false)
        );
        assert_eq!(
            *answerer.seen.lock().unwrap(),
            ["elicitation/create", "elicitation/create"]
        );
        client.close().await.unwrap();
        let yielded = reader.await.unwrap();
        assert!(
            !yielded.iter().any(|m| matches!(m, Message::Request(_))),
            "{yielded:?}"
        );
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn a_declined_request_is_yielded_for_the_application_to_answer() {
    let server = start_server(demo_config(), Arc::new(AskingHandler)).await;
    let answerer = Arc::new(Answerer {
        declined: vec!["elicitation/create"],
        ..Answerer::default()
    });
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = answering_client(&server, &answerer).await;
        let mut call = client
            .call_tool("elicit", json!({"question": "name?"}))
            .await
            .unwrap();
        let item = call.next().await.unwrap().unwrap();
        let ToolCallItem::Request(request) = item else {
            panic!("unexpected item {item:?}");
        };
        assert_eq!(request.method, "elicitation/create");
        let answer = json!({"action": "accept", "content": {"name": "Bo"}});
        client
            .respond(Response::success(request.id, answer))
            .await
            .unwrap();
        let response = call.response().await.unwrap();
        let Response::Result(r) = response else {
            panic!("{response:?}");
        };
        assert_eq!(r.result["content"][0]["text"], "client said Bo");
        assert!(answerer.seen.lock().unwrap().is_empty());
        client.close().await.unwrap();
    })
    .await
    .expect("timed out");
}
