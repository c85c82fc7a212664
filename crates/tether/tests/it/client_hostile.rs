//! tether's client against hostile servers over real loopback sockets: a stream whose line
//! never ends, a stream that repeats every event, a server that refuses every resume, and one
//! that goes silent. In each case the call ends with a typed error (or, for repeats, delivers
//! each event once) within a bounded time, and the client's memory stays bounded by its
//! limits (the SSE decoder's event and line caps, the dedup window, the reconnect budget) —
//! nothing a server sends can make it allocate without bound, loop forever or hang a call.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, Error, ToolCallItem};
use tether::proto::backoff::Budget;
use tokio::net::TcpListener;

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);
const SESSION: &str = "hostile-session-0001";

/// How the hostile server answers a `tools/call` POST, and a resume GET.
#[derive(Clone, Copy)]
enum Hostility {
    /// `data:` followed by `x` forever, never a line break.
    EndlessLine,
    /// Progress events 1..=3 with ids, then the same three again and again, then the answer.
    Repeats,
    /// A priming event, then a clean end; every resume GET gets 503 `Retry-After: 0`.
    RefusesResumes,
    /// A priming event, then nothing at all (not even keep-alives), on POST and on GET.
    Silent,
}

struct Hostile {
    hostility: Hostility,
    gets: AtomicUsize,
}

fn sse(body: Body) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

fn event(id: &str, message: &Value) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: message\ndata: {message}\n\n"))
}

fn progress(n: u64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
           "params": {"progressToken": 0, "progress": n, "total": 3}})
}

async fn handle(State(state): State<Arc<Hostile>>, request: Request) -> Response {
    if request.method() == axum::http::Method::GET {
        state.gets.fetch_add(1, Ordering::SeqCst);
        return match state.hostility {
            Hostility::Silent => sse(Body::from_stream(
                futures_util::stream::once(async {
                    Ok::<_, Infallible>(Bytes::from_static(b"id: s:0\ndata:\n\n"))
                })
                .chain(futures_util::stream::pending()),
            )),
            _ => Response::builder()
                .status(503)
                .header("retry-after", "0")
                .body(Body::empty())
                .unwrap(),
        };
    }
    let bytes = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    let message: Value = serde_json::from_slice(&bytes).unwrap();
    let Some(id) = message.get("id").cloned() else {
        return Response::builder().status(202).body(Body::empty()).unwrap();
    };
    if message["method"] == "initialize" {
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "0"}}});
        return Response::builder()
            .header("content-type", "application/json")
            .header("mcp-session-id", SESSION)
            .body(Body::from(result.to_string()))
            .unwrap();
    }
    let priming = Bytes::from_static(b"id: s:0\nretry: 10\ndata:\n\n");
    match state.hostility {
        Hostility::EndlessLine => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let endless = futures_util::stream::repeat(chunk).map(Ok::<_, Infallible>);
            let head = futures_util::stream::iter([Ok(priming), Ok(Bytes::from_static(b"data: "))]);
            sse(Body::from_stream(head.chain(endless)))
        }
        Hostility::Repeats => {
            let mut chunks = vec![priming];
            for _ in 0..50 {
                for n in 1..=3 {
                    chunks.push(event(&format!("s:{n}"), &progress(n)));
                }
            }
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "done"}]}});
            chunks.push(event("s:4", &answer));
            sse(Body::from_stream(futures_util::stream::iter(
                chunks.into_iter().map(Ok::<_, Infallible>),
            )))
        }
        Hostility::RefusesResumes => sse(Body::from(priming)),
        Hostility::Silent => sse(Body::from_stream(
            futures_util::stream::once(async move { Ok::<_, Infallible>(priming) })
                .chain(futures_util::stream::pending()),
        )),
    }
}

async fn serve(hostility: Hostility) -> (String, Arc<Hostile>) {
    let state = Arc::new(Hostile {
        hostility,
        gets: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/mcp", post(handle).get(handle))
        .with_state(Arc::clone(&state));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), state)
}

fn config(max_attempts: u32, idle: Duration) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.reconnect.backoff.base = Duration::from_millis(10);
    config.reconnect.backoff.cap = Duration::from_millis(50);
    config.reconnect.budget = Budget {
        max_attempts,
        max_elapsed: Duration::from_secs(20),
    };
    config.reconnect.idle_timeout = idle;
    config
}

/// Runs one `tools/call` to its end: the progress values delivered, and how it ended (the
/// final response as JSON, or the error).
async fn call(url: &str, config: ClientConfig) -> (Vec<u64>, Result<Value, Error>) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(url, config).await.unwrap();
        let mut call = client.call_tool("any", json!({})).await.unwrap();
        let mut progress = Vec::new();
        loop {
            match call.next().await {
                Some(Ok(ToolCallItem::Progress { progress: p, .. })) => progress.push(p as u64),
                Some(Ok(ToolCallItem::Response(response))) => {
                    let response = serde_json::from_slice(&response.to_vec()).unwrap();
                    return (progress, Ok(response));
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return (progress, Err(error)),
                None => return (progress, Err(Error::NotResumable)),
            }
        }
    })
    .await
    .expect("the call ended in bounded time")
}

#[tokio::test]
async fn an_endless_line_fails_the_call_typed_at_the_decoder_limit() {
    let (url, _) = serve(Hostility::EndlessLine).await;
    let (progress, outcome) = call(&url, config(2, Duration::from_secs(30))).await;
    assert!(progress.is_empty());
    let error = outcome.expect_err("an endless line cannot complete a call");
    assert!(
        !matches!(error, Error::Timeout),
        "stopped by the line limit, not a timeout: {error}"
    );
}

#[tokio::test]
async fn repeated_events_are_delivered_once() {
    let (url, _) = serve(Hostility::Repeats).await;
    let (progress, outcome) = call(&url, config(2, Duration::from_secs(30))).await;
    assert_eq!(progress, [1, 2, 3], "each event once");
    let result = outcome.expect("the answer arrives");
    assert_eq!(result["result"]["content"][0]["text"], "done", "{result}");
}

#[tokio::test]
async fn a_server_refusing_every_resume_exhausts_the_budget() {
    let (url, state) = serve(Hostility::RefusesResumes).await;
    let (_, outcome) = call(&url, config(3, Duration::from_secs(30))).await;
    match outcome {
        Err(Error::BudgetExhausted { attempts, .. }) => assert_eq!(attempts, 3),
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    assert_eq!(
        state.gets.load(Ordering::SeqCst),
        3,
        "no more attempts than the budget"
    );
}

#[tokio::test]
async fn a_silent_server_cannot_hang_a_call() {
    let (url, state) = serve(Hostility::Silent).await;
    let (_, outcome) = call(&url, config(2, Duration::from_millis(300))).await;
    assert!(
        matches!(outcome, Err(Error::BudgetExhausted { .. })),
        "{outcome:?}"
    );
    assert!(state.gets.load(Ordering::SeqCst) >= 1, "it tried to resume");
}
