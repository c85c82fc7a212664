//! MCP Streamable HTTP for Rust, server and client, whose streams survive disconnects.
//!
//! This crate is the I/O layer: event stores, the HTTP server and the HTTP client, each a thin
//! driver around the pure logic in [`tether_proto`] (JSON-RPC framing, ids, backoff and the
//! reconnect state machine) and [`tether_sse`] (the server-sent events codec). Those two crates
//! are re-exported as [`proto`] and [`sse`] so that applications need only this one dependency.
//!
//! - [`store`]: the event and session stores behind every stream: memory, SQLite (feature
//!   `sqlite`) and Redis (feature `redis`).
//! - [`gateway`] (feature `server`): a stdio MCP server, one process per session, behind the
//!   server.
//! - [`stdio`]: JSON-RPC over stdio lines, read the same way by the gateway and `tether
//!   connect`.
//! - [`server`] (feature `server`): the Streamable HTTP endpoint, the handler API, and
//!   `serve`.
//! - [`demo`] (feature `server`): the built-in demo server of `tether serve`.
//! - [`client`] (feature `client`): the client, whose streams resume across disconnects and
//!   hand every server message to the application once, in order.

pub use tether_proto as proto;
pub use tether_sse as sse;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod demo;
mod fifo;
#[cfg(feature = "server")]
pub mod gateway;
#[cfg(feature = "server")]
pub mod server;
pub mod stdio;
pub mod store;

/// Locks a mutex whose data stays consistent even if a holder panicked: every critical section
/// in this crate is a few map or counter operations with no await inside, so a poisoned lock
/// is still safe to use.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
