//! MCP Streamable HTTP for Rust, server and client, whose streams survive disconnects.
//!
//! This crate is the I/O layer: event stores, the HTTP server and the HTTP client, each a thin
//! driver around the pure logic in [`tether_proto`] (JSON-RPC framing, ids, backoff and the
//! reconnect state machine) and [`tether_sse`] (the server-sent events codec). Those two crates
//! are re-exported as [`proto`] and [`sse`] so that applications need only this one dependency.
//!
//! - [`store`]: the event and session stores behind every stream (memory now; SQLite and Redis
//!   arrive with their issues).
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
#[cfg(feature = "server")]
pub mod gateway;
#[cfg(feature = "server")]
pub mod server;
pub mod store;
