//! What several test modules share.
//!
//! - [`server`]: the one in-process [`server::TestServer`] (a real server on `127.0.0.1:0`,
//!   stopped when dropped) with its test handler, and assertions on raw HTTP answers.
//! - [`resume`]: reading, cutting and checking `count`-shaped streams with the raw reader.
//! - [`client`]: what the tether client's tests share (a quickly backing-off configuration,
//!   the demo server, reading a `count` call).
//! - [`example`]: running the repository's examples as binaries.

#[cfg(feature = "client")]
pub(crate) mod client;
pub(crate) mod example;
pub(crate) mod resume;
pub(crate) mod server;
