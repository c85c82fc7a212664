//! The handler API: what a Rust user implements to serve MCP over tether.
//!
//! A [`Handler`] receives requests and notifications; each request comes with a
//! [`RequestContext`] through which the handler emits progress and log notifications, sends
//! server→client requests related to the request and awaits their answers, and observes
//! cancellation. Everything the context emits is appended to a stream in the event store (the
//! request's own, or in JSON-response mode the standalone one) before any connection sees it.
//! The handler never sees HTTP, sessions' wire details, or SSE.

use async_trait::async_trait;
use serde_json::Value;
use tether_proto::jsonrpc::{ErrorObject, Notification, Request};

pub use super::context::{RequestContext, SessionContext};

/// Who the server is, for the `initialize` result.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// The `capabilities` object of the initialize result.
    pub capabilities: Value,
    /// Optional `instructions`.
    pub instructions: Option<String>,
}

/// An MCP server's behaviour. The transport handles `initialize` (version negotiation,
/// session creation), `ping` and `notifications/initialized` and `notifications/cancelled`
/// itself; everything else reaches the handler.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The server's name, version and capabilities for the initialize result.
    fn server_info(&self) -> ServerInfo;

    /// Handles one request. The returned value is the JSON-RPC `result`; an error becomes a
    /// JSON-RPC error response. If the request is cancelled the return value is discarded and
    /// no response is sent (MCP cancellation).
    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject>;

    /// Handles a notification from the client (other than the ones the transport consumes).
    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        let _ = (notification, session);
    }
}
