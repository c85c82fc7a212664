//! Server→client requests: the [`ServerRequestHandler`] an application configures as
//! [`ClientConfig::request_handler`](super::ClientConfig::request_handler) to answer them.
//!
//! Every [`MessageStream`](super::MessageStream) of a client (a request's stream, a
//! [`ToolCall`](super::ToolCall)'s, the standalone stream of
//! [`Client::server_messages`](super::Client::server_messages)) passes each server request
//! through one function of the `stream` module before yielding it:
//!
//! - `ping` is answered with an empty result and still yielded (for visibility);
//! - a request the handler [accepts](ServerRequestHandler::accepts) is answered with the
//!   handler's result or error and *not* yielded: the stream commits it once the answer is
//!   sent and moves on;
//! - anything else (no handler, or the handler declines) is yielded for the application to
//!   answer with [`Client::respond`](super::Client::respond).

use async_trait::async_trait;
use serde_json::Value;
use tether_proto::jsonrpc::{ErrorObject, Request};

/// Answers server→client requests other than `ping` (`sampling/createMessage`,
/// `elicitation/create`, `roots/list`, …) for a [`Client`](super::Client); set it as
/// [`ClientConfig::request_handler`](super::ClientConfig::request_handler). Declare what it
/// supports in [`ClientConfig::capabilities`](super::ClientConfig::capabilities) (for example
/// `{"sampling": {}, "elicitation": {}}`): servers only ask for what a client announced.
///
/// ```
/// use async_trait::async_trait;
/// use serde_json::{Value, json};
/// use tether::client::ServerRequestHandler;
/// use tether::proto::jsonrpc::{ErrorObject, METHOD_NOT_FOUND, Request};
///
/// struct Sampler;
///
/// #[async_trait]
/// impl ServerRequestHandler for Sampler {
///     async fn handle(&self, request: &Request) -> Result<Value, ErrorObject> {
///         match request.method.as_str() {
///             "sampling/createMessage" => Ok(json!({
///                 "role": "assistant",
///                 "content": {"type": "text", "text": "hello"},
///                 "model": "canned",
///             })),
///             other => Err(ErrorObject::new(METHOD_NOT_FOUND, format!("no {other}"))),
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait ServerRequestHandler: Send + Sync {
    /// Whether this handler answers `request`. `false` leaves it to the application: the
    /// stream yields it as if no handler were configured. Every request by default.
    fn accepts(&self, request: &Request) -> bool {
        let _ = request;
        true
    }

    /// The answer to `request`: its JSON-RPC `result`, or the error sent back instead (the
    /// server's side sees it as a remote error).
    async fn handle(&self, request: &Request) -> Result<Value, ErrorObject>;
}
