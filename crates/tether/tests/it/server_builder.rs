//! The server as an application builds and mounts it: `Server::builder` refuses a bad path
//! or node id with an error instead of a panic, a later setter replaces an earlier one, and
//! `mcp_service()` answers wherever it is mounted beside the application's own routes.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tether::demo::DemoHandler;
use tether::server::{BearerTokens, BuildError, Server, ServerConfig};
use tether::store::{StoreLimits, Stores};
use tokio::net::TcpListener;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

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

fn http() -> reqwest::Client {
    // reqwest is built without a default crypto provider; tether's client installs ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn initialize(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
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
        .route("/healthz", get(|| async { "app: ok" }))
        .nest_service("/api/mcp", server.mcp_service());
    let base = serve(app).await;

    let health = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.text().await.unwrap(), "app: ok");

    let answer = initialize(&format!("{base}/api/mcp"), None).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["tether-node"], "node-7");
    assert!(answer.headers().contains_key("mcp-session-id"));
    let wrong = http().put(format!("{base}/api/mcp")).send().await.unwrap();
    assert_eq!(wrong.status(), 405, "only POST, GET and DELETE");
    let metrics = http().get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), 404, "the ops routes are opt-in");
}

#[tokio::test]
async fn the_ops_router_serves_health_and_metrics_when_merged() {
    let server = builder().build().await.unwrap();
    let app = Router::new()
        .route_service("/mcp", server.mcp_service())
        .merge(server.ops_router());
    let base = serve(app).await;
    let answer = initialize(&format!("{base}/mcp"), None).await;
    assert_eq!(answer.status(), 200);
    drop(answer);
    let health = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.headers()["tether-node"], server.node_id());
    assert_eq!(health.text().await.unwrap(), "ok\n");
    let metrics = http().get(format!("{base}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
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
        .build()
        .await
        .unwrap();
    assert_eq!(server.node_id(), "b");
    let base = serve(server.router()).await;
    let url = format!("{base}/mcp");
    assert_eq!(initialize(&url, Some("first")).await.status(), 401);
    assert_eq!(initialize(&url, Some("second")).await.status(), 200);
    assert_eq!(initialize(&url, None).await.status(), 401);
}
