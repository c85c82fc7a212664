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
use tether::client::{
    AuthError, AuthProvider, AuthRefusal, Client, ClientConfig, Error, ProtocolChoice, StaticToken,
};
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

/// An auth hook that hands out a stale token until a refusal, and a fresh one from then on,
/// recording what it was asked: `token` for a token, `refused <token>` for a refusal.
struct RotatingToken {
    asked: Mutex<Vec<String>>,
    fresh: &'static str,
    refreshed: Mutex<bool>,
}

impl RotatingToken {
    fn new(fresh: &'static str) -> Self {
        Self {
            asked: Mutex::default(),
            fresh,
            refreshed: Mutex::new(false),
        }
    }
}

#[async_trait]
impl AuthProvider for RotatingToken {
    async fn token(&self) -> Result<Option<String>, AuthError> {
        self.asked.lock().unwrap().push("token".to_owned());
        let fresh = *self.refreshed.lock().unwrap();
        Ok(Some(if fresh { self.fresh } else { "stale" }.to_owned()))
    }

    async fn refused(&self, refusal: &AuthRefusal) -> Result<Option<String>, AuthError> {
        assert_eq!(refusal.status, 401);
        assert_eq!(refusal.www_authenticate, ["Bearer"]);
        self.asked.lock().unwrap().push(format!(
            "refused {}",
            refusal.token.as_deref().unwrap_or("-")
        ));
        let mut refreshed = self.refreshed.lock().unwrap();
        if *refreshed {
            // Already gave the fresh one: nothing else to offer.
            return Ok(None);
        }
        *refreshed = true;
        Ok(Some(self.fresh.to_owned()))
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

/// A 401 is handed to the hook, which gives a fresh token; the request is sent again with it,
/// and the fresh token is used for everything else.
#[tokio::test]
async fn a_401_asks_the_auth_hook_once_more_with_refresh_and_succeeds() {
    let (url, refused) = serve_with_bearer_check().await;
    let auth = Arc::new(RotatingToken::new("good"));
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
    let asked = auth.asked.lock().unwrap().clone();
    assert_eq!(asked[..2], ["token", "refused stale"], "{asked:?}");
    assert!(asked[2..].iter().all(|a| a == "token"), "{asked:?}");
    assert_eq!(*refused.lock().unwrap(), 1);
}

/// A hook whose fresh token is refused too, and that then gives up: the client does not
/// loop; it fails with `Unauthorized` after exactly one retry.
#[tokio::test]
async fn a_second_401_fails_with_unauthorized() {
    let (url, refused) = serve_with_bearer_check().await;
    let auth = Arc::new(RotatingToken::new("also-bad"));
    let mut config = ClientConfig::default();
    config.auth = Some(Arc::clone(&auth) as Arc<dyn AuthProvider>);
    let outcome = tokio::time::timeout(TEST_TIMEOUT, Client::connect(&url, config))
        .await
        .expect("hangs");
    assert!(matches!(outcome, Err(Error::Unauthorized)), "{outcome:?}");
    assert_eq!(
        *auth.asked.lock().unwrap(),
        ["token", "refused stale", "refused also-bad"]
    );
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

/// The token goes only to the server it is for: when the endpoint redirects (307) to another
/// origin, the request there carries no `Authorization` (and the client does not follow its
/// token anywhere else). The other origin is a real tether server that records what it got.
#[tokio::test]
async fn a_redirect_to_another_origin_drops_the_token() {
    let server = Server::builder(Arc::new(DemoHandler::new()))
        .build()
        .await
        .expect("a server");
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let record = Arc::clone(&seen);
    let elsewhere = serve(server.router().layer(middleware::from_fn(
        move |request: Request, next: Next| {
            let record = Arc::clone(&record);
            async move {
                record.lock().unwrap().push(
                    request
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                );
                next.run(request).await
            }
        },
    )))
    .await;
    // The same host name, another port: another origin.
    let target = elsewhere.clone();
    let redirecting = serve(Router::new().route(
        "/mcp",
        axum::routing::any(move |request: Request| {
            let target = target.clone();
            async move {
                assert_eq!(
                    request.headers().get("authorization").unwrap(),
                    "Bearer secret-for-this-server"
                );
                HttpResponse::builder()
                    .status(307)
                    .header("location", target)
                    .body(Body::empty())
                    .unwrap()
            }
        }),
    ))
    .await;
    let mut config = ClientConfig::default();
    config.protocol = ProtocolChoice::Legacy;
    config.auth = Some(Arc::new(StaticToken("secret-for-this-server".to_owned())));
    let outcome = tokio::time::timeout(TEST_TIMEOUT, Client::connect(&redirecting, config))
        .await
        .expect("hangs");
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "the redirect was followed: {outcome:?}");
    assert!(
        seen.iter().all(Option::is_none),
        "the other origin got the token: {seen:?}"
    );
}
