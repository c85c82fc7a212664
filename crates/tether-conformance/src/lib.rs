//! The official MCP conformance suite's side of tether, kept out of the `tether` library: the
//! fixtures a server needs for the suite's server mode, and the scenario scripts of its
//! client mode. The `tether` command links this crate (its default `conformance` feature) for
//! `tether serve --demo conformance` and the hidden `tether conformance-client`.
//!
//! - [`fixtures`]: [`ConformanceHandler`](fixtures::ConformanceHandler), every tool, resource
//!   and prompt the server scenarios call by name, plus the demo's `count` and `echo`.
//! - [`client`]: the client-mode scenarios, each played with `tether::client`.
//! - `stateless`: the tools and prompt the 2026-07-28 scenarios call by name.

pub mod client;
pub mod fixtures;
mod stateless;
