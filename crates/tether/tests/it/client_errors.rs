//! The client's reconnect timing and typed errors, against real loopback servers: the tether
//! server (its router wrapped in small axum middlewares that observe or refuse requests), or
//! a few-line axum server playing an old 2024-11-05 server. What is asserted is what a user
//! sees: when the reconnect arrives at the server, which `Error` a call fails with, how often
//! the auth hook is asked.

use crate::support::client::{count_params, drain};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response as HttpResponse;
use axum::serve::ListenerExt as _;
use futures_util::StreamExt as _;
use tether::client::{AuthProvider, Client, ClientConfig, Error, ProtocolChoice};
use tether::demo::DemoHandler;
use tether::server::{Server, ServerConfig};
use tether::store::{StoreLimits, Stores};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tokio::net::TcpListener;

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on a loopback port until the test's runtime ends; returns the MCP URL.
async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Without TCP_NODELAY the stream's last small write waits for the client's delayed ACK
    // (40 ms), which would show up as client lateness.
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// What the retry test's middleware saw at the server.
#[derive(Default)]
struct Timeline {
    /// When the server ended the cut POST stream's body, and the bytes it had sent.
    cut: Option<(Instant, Vec<u8>)>,
    /// Each GET's arrival and its `Last-Event-ID`.
    gets: Vec<(Instant, Option<String>)>,
}

/// Ends a `tools/call` POST's SSE body cleanly right after the first chunk carrying a
/// progress notification (recording when), records every GET's arrival, and answers the
/// first GET 503 (without `Retry-After`).
async fn cut_after_first_progress(
    timeline: Arc<Mutex<Timeline>>,
    request: Request,
    next: Next,
) -> HttpResponse {
    if request.method() == http_method_get() {
        let last = request
            .headers()
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let first = {
            let mut timeline = timeline.lock().unwrap();
            timeline.gets.push((Instant::now(), last));
            timeline.gets.len() == 1
        };
        if first {
            // A failed reconnect: the next wait is max(retry, backoff), so `retry` again.
            return HttpResponse::builder()
                .status(503)
                .body(Body::empty())
                .unwrap();
        }
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let is_call = String::from_utf8_lossy(&bytes).contains("tools/call");
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if !is_call {
        return response;
    }
    let (parts, body) = response.into_parts();
    let state = (body.into_data_stream(), Vec::new(), false, timeline);
    let cut =
        futures_util::stream::unfold(state, |(mut body, mut sent, done, timeline)| async move {
            if done {
                timeline.lock().unwrap().cut = Some((Instant::now(), sent));
                return None;
            }
            let chunk: Result<Bytes, axum::Error> = body.next().await?;
            let done = match &chunk {
                Ok(bytes) => {
                    sent.extend_from_slice(bytes);
                    String::from_utf8_lossy(&sent).contains("notifications/progress")
                }
                Err(_) => false,
            };
            Some((chunk, (body, sent, done, timeline)))
        });
    HttpResponse::from_parts(parts, Body::from_stream(cut))
}

fn http_method_get() -> axum::http::Method {
    axum::http::Method::GET
}

/// docs/CONTRACTS.md#client-reconnect-timing: the first reconnect after a loss waits exactly the
/// server's last `retry`; after a failed reconnect the wait is max(`retry`, backoff). The
/// server sends `retry: 500` and ends the stream after the first progress event; its first
/// resume GET must arrive 450–1000 ms later (measured at the server; the conformance suite's
/// `sse-retry` tolerance, a little wider upward for a loaded machine). That GET gets 503;
/// the next must again come 450–1000 ms after it (the client's own backoff is 50 ms-based,
/// so `retry` is what it waits).
#[tokio::test]
async fn reconnects_wait_the_servers_retry() {
    let mut config = ServerConfig::default();
    config.retry = Duration::from_millis(500);
    let server = Server::builder(Arc::new(DemoHandler::new()))
        .config(config)
        .build()
        .await
        .expect("a server");
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let seen = Arc::clone(&timeline);
    let app = server
        .router()
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            cut_after_first_progress(Arc::clone(&seen), request, next)
        }));
    let url = serve(app).await;
    // The client's own first backoff step is far from 500 ms, so that waiting it instead of
    // `retry` would be caught.
    let mut client_config = ClientConfig::default();
    // `retry` is the 2025 era's SSE reconnection (auto would pick tasks with this server).
    client_config.protocol = tether::client::ProtocolChoice::Legacy;
    client_config.reconnect.backoff.base = Duration::from_millis(50);
    let (progress, result) = tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&url, client_config).await.unwrap();
        let stream = client
            .request("tools/call", count_params(30, 10))
            .await
            .unwrap();
        drain(stream).await
    })
    .await
    .expect("the call hangs");
    assert_eq!(result.unwrap(), "counted 30");
    assert_eq!(progress, (1..=30).collect::<Vec<_>>());

    let timeline = timeline.lock().unwrap();
    let (cut_at, sent) = timeline.cut.as_ref().expect("the POST stream was not cut");
    let sent = String::from_utf8_lossy(sent);
    assert!(
        sent.contains("retry: 500") || sent.contains("retry:500"),
        "{sent}"
    );
    let [(first_at, first_last), (second_at, second_last)] = &timeline.gets[..] else {
        panic!("expected two reconnect GETs, got {}", timeline.gets.len());
    };
    assert!(
        first_last.is_some(),
        "the reconnect carries no Last-Event-ID"
    );
    assert_eq!(first_last, second_last, "nothing arrived in between");
    let first = first_at.duration_since(*cut_at);
    let second = second_at.duration_since(*first_at);
    eprintln!("reconnect GETs {first:?} after the cut, then {second:?} after the 503");
    let tolerance = Duration::from_millis(450)..Duration::from_millis(1000);
    assert!(
        tolerance.contains(&first),
        "the reconnect came {first:?} after the cut, not ~500 ms"
    );
    assert!(
        tolerance.contains(&second),
        "the reconnect after a 503 came {second:?} later, not ~500 ms"
    );
}

/// docs/CONTRACTS.md#last-event-id-row: a resume whose events are gone gets 400 with -32000 and
/// `data.reason`; the call fails with `EventsUnavailable` naming it. The store keeps 8 events per
/// session, and the stream is cut once early; by the time the client resumes (`retry` 500 ms, 10 ms
/// per progress) the cursor's events have been evicted.
#[tokio::test]
async fn a_resume_of_evicted_events_fails_with_events_unavailable_expired() {
    let mut config = ServerConfig::default();
    config.retry = Duration::from_millis(500);
    let mut limits = StoreLimits::default();
    limits.max_events_per_session = 8;
    let server = Server::builder(Arc::new(DemoHandler::new()))
        .stores(Stores::memory(limits))
        .config(config)
        .build()
        .await
        .expect("a server");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, std::future::pending()));
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(1200).at_most(1));
    let proxy = FaultProxy::start(addr, plan).await.unwrap();
    let (progress, result) = tokio::time::timeout(TEST_TIMEOUT, async {
        // Legacy, with no `server/discover` probe first: the cut's byte offset is counted from
        // the `initialize` on.
        let mut config = ClientConfig::default();
        config.protocol = ProtocolChoice::Legacy;
        let client = Client::connect(&proxy.url_for("/mcp"), config)
            .await
            .unwrap();
        let stream = client
            .request("tools/call", count_params(200, 10))
            .await
            .unwrap();
        drain(stream).await
    })
    .await
    .expect("the call hangs");
    assert_eq!(proxy.counters().cuts, 1, "{}", proxy.report());
    let error = result.expect_err("the call survived evicted events");
    match &error {
        Error::EventsUnavailable { reason } => assert_eq!(reason, "expired"),
        other => panic!("{other:?} after {progress:?}"),
    }
    assert_eq!(error.to_string(), "events unavailable: expired");
    // What arrived before the cut arrived once, in order.
    assert!(!progress.is_empty() && progress.len() < 200, "{progress:?}");
    assert_eq!(progress, (1..=progress.len() as u64).collect::<Vec<_>>());
}

/// An auth hook that hands out a stale token first and a fresh one when asked to refresh,
/// recording each `refresh` flag it was asked with.
struct RotatingToken {
    asked: Mutex<Vec<bool>>,
    fresh: &'static str,
}

#[async_trait]
impl AuthProvider for RotatingToken {
    async fn bearer_token(&self, refresh: bool) -> Option<String> {
        self.asked.lock().unwrap().push(refresh);
        Some(if refresh { self.fresh } else { "stale" }.to_owned())
    }
}

/// The tether router behind a bearer check: anything but `Bearer good` gets 401 (counted).
async fn serve_with_bearer_check() -> (String, Arc<Mutex<u32>>) {
    let server = Server::builder(Arc::new(DemoHandler::new()))
        .build()
        .await
        .expect("a server");
    let refused: Arc<Mutex<u32>> = Arc::default();
    let count = Arc::clone(&refused);
    let app = server
        .router()
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let count = Arc::clone(&count);
            async move {
                let authorized = request
                    .headers()
                    .get("authorization")
                    .is_some_and(|v| v == "Bearer good");
                if authorized {
                    next.run(request).await
                } else {
                    *count.lock().unwrap() += 1;
                    HttpResponse::builder()
                        .status(401)
                        .header("www-authenticate", "Bearer")
                        .body(Body::empty())
                        .unwrap()
                }
            }
        }));
    (serve(app).await, refused)
}

/// A 401 makes the client ask the hook again, once, with `refresh = true`, and resend; the
/// fresh token is then used for everything else.
#[tokio::test]
async fn a_401_asks_the_auth_hook_once_more_with_refresh_and_succeeds() {
    let (url, refused) = serve_with_bearer_check().await;
    let auth = Arc::new(RotatingToken {
        asked: Mutex::default(),
        fresh: "good",
    });
    let mut config = ClientConfig::default();
    config.auth = Some(Arc::clone(&auth) as Arc<dyn AuthProvider>);
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&url, config).await.unwrap();
        let (progress, result) = drain(
            client
                .request("tools/call", count_params(5, 0))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(result.unwrap(), "counted 5");
        assert_eq!(progress, vec![1, 2, 3, 4, 5]);
        client.close().await.unwrap();
    })
    .await
    .expect("hangs");
    assert_eq!(*auth.asked.lock().unwrap(), vec![false, true]);
    assert_eq!(*refused.lock().unwrap(), 1);
}

/// A hook whose fresh token is refused too: the client does not loop; it fails with
/// `Unauthorized` after exactly one refresh.
#[tokio::test]
async fn a_second_401_fails_with_unauthorized() {
    let (url, refused) = serve_with_bearer_check().await;
    let auth = Arc::new(RotatingToken {
        asked: Mutex::default(),
        fresh: "also-bad",
    });
    let mut config = ClientConfig::default();
    config.auth = Some(Arc::clone(&auth) as Arc<dyn AuthProvider>);
    let outcome = tokio::time::timeout(TEST_TIMEOUT, Client::connect(&url, config))
        .await
        .expect("hangs");
    assert!(matches!(outcome, Err(Error::Unauthorized)), "{outcome:?}");
    assert_eq!(*auth.asked.lock().unwrap(), vec![false, true]);
    assert_eq!(*refused.lock().unwrap(), 2);
}

/// A 2024-11-05 HTTP+SSE server: POST is not allowed on its SSE endpoint; GET opens a stream
/// whose first event is `endpoint`. `connect` says so with `LegacyTransport`.
#[tokio::test]
async fn a_legacy_http_sse_server_is_reported_as_legacy() {
    let sse = || async {
        let first = futures_util::stream::once(async {
            Ok::<_, std::convert::Infallible>(Bytes::from_static(
                b"event: endpoint\ndata: /messages?sessionId=abc\n\n",
            ))
        });
        // The old transport keeps the stream open.
        let stream = first.chain(futures_util::stream::pending());
        HttpResponse::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap()
    };
    let app = Router::new().route(
        "/mcp",
        axum::routing::get(sse).post(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED }),
    );
    let url = serve(app).await;
    let start = Instant::now();
    let outcome =
        tokio::time::timeout(TEST_TIMEOUT, Client::connect(&url, ClientConfig::default()))
            .await
            .expect("hangs");
    assert!(
        matches!(outcome, Err(Error::LegacyTransport)),
        "{outcome:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}
