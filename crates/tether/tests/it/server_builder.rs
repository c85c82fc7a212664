//! The server as an application builds and mounts it: `Server::builder` refuses a bad path
//! or node id with an error instead of a panic, a later setter replaces an earlier one, and
//! `mcp_service()` answers wherever it is mounted beside the application's own routes.

use std::sync::Arc;

use axum::Router;
use serde_json::json;
use tether::demo::DemoHandler;
use tether::server::{BearerTokens, BuildError, Server, ServerConfig};
use tether::store::{StoreLimits, Stores};
use tether_testkit::raw::{RawClient, Transcript};
use tokio::net::TcpListener;

fn builder() -> tether::server::ServerBuilder {
    Server::builder(Arc::new(DemoHandler::new())).stores(Stores::memory(StoreLimits::default()))
}

/// Serves `app` on a loopback port; its base URL.
async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A plain GET of `url`, read to its end.
async fn get(url: &str) -> Transcript {
    let client = RawClient::new(url).unwrap();
    client.exchange(&client.request("GET")).await.unwrap()
}

/// An `initialize` POST to `url`, with `token` as its bearer token, read to its end.
async fn initialize(url: &str, token: Option<&str>) -> Transcript {
    let mut client = RawClient::new(url).unwrap();
    if let Some(token) = token {
        client = client.with_bearer_token(token);
    }
    let request = client.request("POST").json(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}));
    client.exchange(&request).await.unwrap()
}

#[tokio::test]
async fn a_bad_path_or_node_id_is_an_error_not_a_panic() {
    let mut config = ServerConfig::default();
    config.path = "mcp".to_owned();
    let error = builder().config(config).build().await.unwrap_err();
    assert!(
        matches!(error, BuildError::InvalidPath(ref path) if path == "mcp"),
        "{error}"
    );
    let error = builder().node_id("two\nlines").build().await.unwrap_err();
    assert!(matches!(error, BuildError::InvalidNodeId(_)), "{error}");
}

#[tokio::test]
async fn the_mcp_service_answers_where_it_is_mounted_beside_the_apps_own_routes() {
    let server = builder().node_id("node-7").build().await.unwrap();
    assert_eq!(server.node_id(), "node-7");
    let app = Router::new()
        .route("/healthz", axum::routing::get(|| async { "app: ok" }))
        .nest_service("/api/mcp", server.mcp_service());
    let base = serve(app).await;

    assert_eq!(get(&format!("{base}/healthz")).await.body, b"app: ok");

    let answer = initialize(&format!("{base}/api/mcp"), None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers.get("tether-node"), Some("node-7"));
    assert!(answer.headers.get("mcp-session-id").is_some());
    let wrong = RawClient::new(&format!("{base}/api/mcp")).unwrap();
    let wrong = wrong.exchange(&wrong.request("PUT")).await.unwrap();
    assert_eq!(wrong.status, 405, "only POST, GET and DELETE");
    assert_eq!(
        get(&format!("{base}/metrics")).await.status,
        404,
        "the ops routes are opt-in"
    );
}

/// `mcp_service()` is a tower service of its own, not tied to an axum router: served here by
/// hyper alone, on hyper's own request body, it answers at any path.
#[tokio::test]
async fn the_mcp_service_serves_under_hyper_without_a_router() {
    let server = builder().node_id("bare").build().await.unwrap();
    let service = server.mcp_service();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let http = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let _ = http
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let answer = initialize(&format!("{base}/anywhere"), None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers.get("tether-node"), Some("bare"));
    let session = answer
        .headers
        .get("mcp-session-id")
        .expect("a session")
        .to_owned();
    let client = RawClient::new(&format!("{base}/anywhere")).unwrap();
    let delete = client
        .exchange(
            &client
                .request("DELETE")
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25"),
        )
        .await
        .unwrap();
    assert_eq!(delete.status, 200, "the session it made is its own to end");
}

#[tokio::test]
async fn the_ops_router_serves_health_and_metrics_when_merged() {
    let server = builder().build().await.unwrap();
    let app = Router::new()
        .route_service("/mcp", server.mcp_service())
        .merge(server.ops_router());
    let base = serve(app).await;
    assert_eq!(initialize(&format!("{base}/mcp"), None).await.status, 200);
    let health = get(&format!("{base}/healthz")).await;
    assert_eq!(health.headers.get("tether-node"), Some(server.node_id()));
    assert_eq!(health.body, b"ok\n");
    let metrics = get(&format!("{base}/metrics")).await;
    let text = String::from_utf8(metrics.body).unwrap();
    assert!(
        text.lines()
            .any(|line| line.starts_with("tether_sessions ") && line.ends_with(" 1")),
        "{text}"
    );
}

#[tokio::test]
async fn a_later_setter_replaces_an_earlier_one() {
    let first = Arc::new(BearerTokens::parse("alice:first").unwrap());
    let second = Arc::new(BearerTokens::parse("alice:second").unwrap());
    let server = builder()
        .auth(first)
        .auth(second)
        .node_id("a")
        .node_id("b")
        // A configuration set after the node id does not undo it.
        .config(ServerConfig::default())
        .build()
        .await
        .unwrap();
    assert_eq!(server.node_id(), "b");
    let base = serve(server.router()).await;
    let url = format!("{base}/mcp");
    assert_eq!(initialize(&url, Some("first")).await.status, 401);
    assert_eq!(initialize(&url, Some("second")).await.status, 200);
    assert_eq!(initialize(&url, None).await.status, 401);
}

/// Clones are the same server: shutting a clone down ends the GET stream the original's
/// service opened, with a `retry` first, so an application can keep a clone to stop it.
#[tokio::test]
async fn a_clone_shuts_the_same_server_down() {
    let server = builder().build().await.expect("a server");
    let clone = server.clone();
    let base = serve(Router::new().route_service("/mcp", server.mcp_service())).await;
    let mut client = RawClient::new(&format!("{base}/mcp")).unwrap();
    client.initialize().await.unwrap();
    let stream = client.send(&client.request("GET")).await.unwrap();
    clone.shutdown();
    let transcript = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end())
        .await
        .expect("the stream ended at the clone's shutdown")
        .unwrap();
    assert_eq!(transcript.status, 200, "{transcript:?}");
    assert!(
        !transcript.retries().is_empty(),
        "a retry first: {transcript:?}"
    );
}
