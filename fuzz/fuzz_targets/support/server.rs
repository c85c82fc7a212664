//! The in-process server the HTTP fuzz targets drive: memory stores, the demo handler, on a
//! current-thread runtime, built once per process.

use axum::Router;
use tether::demo::DemoHandler;
use tether::server::Server;

/// A runtime and the router of a demo server built on it; the server lives as long as the
/// router (its state is the router's).
pub fn demo_server() -> (tokio::runtime::Runtime, Router) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(Server::builder(std::sync::Arc::new(DemoHandler::new())).build())
        .unwrap();
    let router = server.router();
    // The server is kept alive by its router's state.
    std::mem::forget(server);
    (runtime, router)
}
