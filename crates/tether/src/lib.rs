//! MCP Streamable HTTP for Rust, server and client, whose streams survive disconnects.
//!
//! This crate is the I/O layer: event stores, the HTTP server and the HTTP client, each a thin
//! driver around the pure logic in [`tether_proto`] (JSON-RPC framing, ids, backoff, the
//! reconnect machine and the SSE writer machine) and [`tether_sse`] (the server-sent events
//! codec). Those two crates are re-exported as [`proto`] and [`sse`] so that applications need
//! only this one dependency.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn run(handler: Arc<dyn tether::server::Handler>) -> Result<(), Box<dyn std::error::Error>> {
//! use tether::server::Server;
//! use tether::store::{StoreLimits, Stores};
//!
//! let server = Server::builder(handler)
//!     .stores(Stores::memory(StoreLimits::default()))
//!     .build()
//!     .await?;
//! // Mount `server.mcp_service()` in your own router, or:
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`store`]: the event log behind every stream and the session records, behind two traits
//!   with one behaviour suite: memory, SQLite (feature `sqlite`) and Redis (feature `redis`),
//!   each opened the same way as a [`store::Stores`] bundle with one [`store::StoreLimits`].
//!   Durable backends pipeline their commits (`store/pipeline.rs`) and store chunks of events.
//! - [`server`] (feature `server`): the Streamable HTTP endpoint. `Server::builder` → a server
//!   whose background work has started; `mcp_service()` to mount, `ops_router()` for
//!   `/healthz` and `/metrics`, `serve()` to run it alone. Its modules import one way: config
//!   and session state at the bottom, then the server state, dispatch, the HTTP answers,
//!   handoffs between nodes, background work, and the axum handlers at the top.
//! - [`gateway`] (feature `server`): a stdio MCP server, one process per session, behind the
//!   server.
//! - [`stdio`]: JSON-RPC over stdio lines, read the same way by the gateway and `tether
//!   connect`.
//! - [`rmcp`] (feature `rmcp`): any rmcp server served through tether, and (with `client`)
//!   tether's client as an rmcp client transport.
//! - [`bridge`] (feature `client`): a stdio-framed local client bridged to a remote server
//!   (`tether connect`, the rmcp client transport).
//! - [`demo`] (feature `server`): the demo handler of `tether serve` (`count`, `echo`).
//! - [`client`] (feature `client`): the client, whose streams resume across disconnects and
//!   hand every server message to the application once, in order.
//! - [`telemetry`]: the spans a request makes on both sides in the MCP semantic conventions
//!   and, with feature `otel`, the trace context carried across processes and the duration
//!   histograms (docs/TELEMETRY.md).
//!
//! The conformance suite's fixtures are not here: they are the `tether-conformance` crate's.
//! How the parts fit, and why, is in the repository's `docs/ARCHITECTURE.md`.

pub use tether_proto as proto;
pub use tether_sse as sse;

#[cfg(feature = "client")]
pub mod bridge;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod demo;
mod fifo;
#[cfg(feature = "server")]
pub mod gateway;
#[cfg(feature = "rmcp")]
pub mod rmcp;
#[cfg(feature = "server")]
pub mod server;
pub mod stdio;
pub mod store;
pub mod telemetry;

/// Locks a mutex whose data stays consistent even if a holder panicked: every critical section
/// in this crate is a few map or counter operations with no await inside, so a poisoned lock
/// is still safe to use.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `error` and its causes on one line (`a: b: c`), for logs and messages a person reads. Every
/// error of this crate says only what went wrong at its own level and keeps the cause as its
/// [`source`](std::error::Error::source) (docs/CONTRIBUTING.md#errors), so printing one
/// alone would drop the why.
pub fn error_chain(error: &dyn std::error::Error) -> impl std::fmt::Display + '_ {
    struct Chain<'a>(&'a dyn std::error::Error);
    impl std::fmt::Display for Chain<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}", self.0)?;
            let mut cause = self.0.source();
            while let Some(error) = cause {
                write!(f, ": {error}")?;
                cause = error.source();
            }
            Ok(())
        }
    }
    Chain(error)
}
