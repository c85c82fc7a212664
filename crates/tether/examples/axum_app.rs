//! An axum application with routes of its own that mounts a tether server at `/mcp`, on a
//! SQLite store, so that its MCP streams survive cuts and restarts.
//!
//! ```text
//! cargo run --release -p tether --all-features --example axum_app -- --bind 127.0.0.1:0 --db app.db
//! ```
//!
//! It prints `tether: serving http://HOST:PORT/mcp` once listening. The application keeps its
//! own `GET /healthz` (answering `app: ok`) and `GET /`; tether's endpoint is mounted with
//! `route_service`, and tether's own `/healthz` and `/metrics` (its `ops_router`) are left
//! out, so nothing collides. The tool is the demo's `count {n, interval_ms}`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tether::demo::DemoHandler;
use tether::server::Server;
use tether::store::{StoreLimits, Stores};

/// `--bind ADDR` and `--db PATH`.
struct Args {
    bind: String,
    db: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut bind = "127.0.0.1:8080".to_owned();
    let mut db = PathBuf::from("axum_app.db");
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bind" => bind = value,
            "--db" => db = PathBuf::from(value),
            _ => {
                return Err(format!(
                    "unknown flag {flag}; expected --bind ADDR --db PATH"
                ));
            }
        }
    }
    Ok(Args { bind, db })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;

    // The whole mounting: a store bundle, a built server, its MCP service at a path.
    let stores = Stores::sqlite(&args.db, StoreLimits::default())?;
    let mcp = Server::builder(Arc::new(DemoHandler::new()))
        .stores(stores)
        .build()
        .await?;
    let app = Router::new()
        .route(
            "/",
            get(|| async { "an application with an MCP endpoint at /mcp\n" }),
        )
        .route("/healthz", get(|| async { "app: ok" }))
        .route_service("/mcp", mcp.mcp_service());

    let listener = tokio::net::TcpListener::bind(&args.bind).await?;
    println!("tether: serving http://{}/mcp", listener.local_addr()?);
    let stopping = mcp.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            // Open streams end with a `retry`, so clients come back and resume.
            stopping.shutdown();
        })
        .await?;
    // The handler frees what it holds (a gateway would stop its child processes).
    mcp.close().await;
    Ok(())
}
