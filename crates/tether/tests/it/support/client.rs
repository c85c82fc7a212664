//! Shared by the `client_*` integration tests: the demo handler in the in-process
//! [`TestServer`], a client configuration that backs off quickly, and the `count` call's
//! parameters and reading.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether::client::{ClientConfig, Error, MessageStream};
use tether::demo::DemoHandler;
use tether::proto::jsonrpc::{Message, Response};
use tether::server::{Handler, ServerConfig};

use super::server::TestServer;

/// The server's `retry` in these tests: short, so that a test with dozens of cuts takes a
/// second or two.
pub(crate) const RETRY: Duration = Duration::from_millis(50);

/// The demo server (`count`, `echo`) with `retry` = [`RETRY`].
pub(crate) async fn start_demo_server() -> TestServer {
    start_server(demo_config(), Arc::new(DemoHandler::new())).await
}

/// The server configuration of [`start_demo_server`], to adjust.
pub(crate) fn demo_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.retry = RETRY;
    config
}

/// `handler` served with `config` and memory stores.
pub(crate) async fn start_server(config: ServerConfig, handler: Arc<dyn Handler>) -> TestServer {
    TestServer::start_with_handler(config, handler).await
}

/// A client that backs off from `base` up to 500 ms, so reconnect-heavy tests stay short.
pub(crate) fn fast_config(base: Duration) -> ClientConfig {
    let mut config = ClientConfig::default();
    // These tests are of the 2025 era; `auto` would pick 2026-07-28 with tether's server,
    // which offers task streams (tests of `auto` set it themselves).
    config.protocol = tether::client::ProtocolChoice::Legacy;
    config.reconnect.backoff.base = base;
    config.reconnect.backoff.cap = Duration::from_millis(500);
    config
}

/// `tools/call` parameters for `count` with progress token `"p"`.
pub(crate) fn count_params(n: u64, interval_ms: u64) -> Option<Value> {
    Some(json!({
        "name": "count",
        "arguments": {"n": n, "interval_ms": interval_ms},
        "_meta": {"progressToken": "p"},
    }))
}

/// Reads a `count` stream to its end: the progress values, the result text, or the first
/// error.
pub(crate) async fn drain(mut stream: MessageStream) -> (Vec<u64>, Result<String, Error>) {
    let mut progress = Vec::new();
    let mut result = Err(Error::Protocol("no result".to_owned()));
    while let Some(item) = stream.next().await {
        match item {
            Ok(Message::Notification(note)) => {
                progress.push(
                    note.params.unwrap_or_default()["progress"]
                        .as_u64()
                        .unwrap(),
                );
            }
            Ok(Message::Response(Response::Result(r))) => {
                result = Ok(r.result["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned());
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(error) => return (progress, Err(error)),
        }
    }
    (progress, result)
}
