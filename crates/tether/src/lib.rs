//! MCP Streamable HTTP for Rust, server and client, whose streams survive disconnects.
//!
//! This crate is the I/O layer: event stores, the HTTP server and the HTTP client, each a thin
//! driver around the pure logic in [`tether_proto`] (JSON-RPC framing, ids, backoff and the
//! reconnect state machine) and [`tether_sse`] (the server-sent events codec). Those two crates
//! are re-exported as [`proto`] and [`sse`] so that applications need only this one dependency.
//!
//! The server, the client and the durable stores arrive with their own issues; until then this
//! crate offers the pure building blocks only. See `docs/ARCHITECTURE.md` for the plan.

pub use tether_proto as proto;
pub use tether_sse as sse;
