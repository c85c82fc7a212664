//! Client II's API against the tether server: [`Client::call_tool`] yields `count`'s progress
//! 1..n once each, in order, then the result, through a fault proxy that cuts connections;
//! a [`ResumptionToken`] serialized by one client resumes the call in another
//! ([`Client::resume_tool_call`]), starting exactly after the committed event; a token whose
//! session the server no longer knows fails with [`Error::SessionExpired`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tether::client::{
    Client, ClientConfig, ClientEvent, Error, ResumptionToken, ToolCall, ToolCallItem,
};
use tether::demo::DemoHandler;
use tether::proto::backoff::BackoffConfig;
use tether::proto::jsonrpc::Response;
use tether::proto::reconnect::ReconnectConfig;
use tether::server::{Server, ServerConfig};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

struct TestServer {
    addr: std::net::SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl TestServer {
    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

async fn start_server() -> TestServer {
    let config = ServerConfig {
        retry: Duration::from_millis(50),
        ..ServerConfig::default()
    };
    let server = Server::with_memory_stores(config, Arc::new(DemoHandler::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    TestServer { addr, _stop: stop }
}

fn fast_config() -> ClientConfig {
    ClientConfig {
        reconnect: ReconnectConfig {
            backoff: BackoffConfig {
                base: Duration::from_millis(50),
                cap: Duration::from_millis(500),
                ..BackoffConfig::default()
            },
            ..ReconnectConfig::default()
        },
        ..ClientConfig::default()
    }
}

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
    let server = start_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    let n = 150;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&proxy.url_for("/mcp"), fast_config())
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
    let config = ClientConfig {
        on_resumption_token: Some(Arc::new(move |token: &ResumptionToken| {
            *sink.lock().unwrap() = Some(serde_json::to_string(token).unwrap());
        })),
        ..fast_config()
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
    let server = start_server().await;
    let url = server.url();
    let n = 60;
    tokio::time::timeout(TEST_TIMEOUT, async {
        // Five taken, the fifth not committed: the resume starts with it again.
        let saved = abandon_after(&url, n, 5, false).await;
        let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
        assert!(token.request_id.is_some() && token.session_id.is_some());
        let call = Client::resume_tool_call(&url, &token, fast_config())
            .await
            .unwrap();
        assert_eq!(call.resumption_token(), Some(token));
        let (progress, text) = rest_of(call).await;
        assert_eq!(progress, (5..=n).collect::<Vec<_>>());
        assert_eq!(text, format!("counted {n}"));

        // Acked: the resume starts after it.
        let saved = abandon_after(&url, n, 5, true).await;
        let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
        let call = Client::resume_tool_call(&url, &token, fast_config())
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
    let first = start_server().await;
    let saved = tokio::time::timeout(TEST_TIMEOUT, abandon_after(&first.url(), 1000, 3, true))
        .await
        .expect("timed out");
    let token: ResumptionToken = serde_json::from_str(&saved).unwrap();
    // Another server (a restart with an empty store) does not know the session.
    let second = start_server().await;
    let outcome = tokio::time::timeout(TEST_TIMEOUT, async {
        let mut call = Client::resume_tool_call(&second.url(), &token, fast_config())
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
    let server = start_server().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&server.url(), fast_config()).await.unwrap();
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
    };
    let error = Client::resume("http://127.0.0.1:1/mcp", &token, ClientConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error:?}");
}
