//! The handler API: what a Rust user implements to serve MCP over tether.
//!
//! A [`Handler`] receives requests and notifications; each request comes with a
//! [`RequestContext`] through which the handler emits progress and log notifications, sends
//! server→client requests related to the request and awaits their answers, and observes
//! cancellation. Everything the context emits is appended to a stream in the event store (the
//! request's own, or in JSON-response mode the standalone one) before any connection sees it.
//! The handler never sees HTTP, sessions' wire details, or SSE.

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{ErrorObject, Notification, Request};

pub use super::context::{RequestContext, SessionContext};

/// One part of a handler as operators see it on `/healthz` and `/metrics` (a gateway's
/// upstream): [`Handler::parts`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartStatus {
    /// Its name (a federation's upstream name).
    pub name: String,
    /// Whether it can serve now, as far as it knows (a child started, a remote reached).
    pub up: bool,
    /// Children or connections it holds open.
    pub children: usize,
    /// Requests it answered with a result.
    pub answered: u64,
    /// Requests it answered with an error, its own or the gateway's for it.
    pub failed: u64,
    /// Why it is down, when it is.
    pub detail: Option<String>,
}

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

impl ServerInfo {
    /// The `initialize` result announcing this server at `session`'s negotiated version.
    #[must_use]
    pub fn initialize_result(&self, session: &SessionContext) -> Value {
        let mut result = json!({
            "protocolVersion": session.protocol_version().as_str(),
            "capabilities": self.capabilities,
            "serverInfo": {"name": self.name, "version": self.version},
        });
        if let Some(instructions) = &self.instructions {
            result["instructions"] = Value::String(instructions.clone());
        }
        result
    }
}

/// Whether a tool may run as a task of the tasks extension (SEP-2663), as
/// [`Handler::task_support`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TaskSupport {
    /// Never: the call is answered directly (the default).
    #[default]
    Forbidden,
    /// As a task when the request declares the extension; directly otherwise.
    Optional,
    /// Only as a task: a request that does not declare the extension is refused with -32021.
    Required,
}

/// An MCP server's behaviour. The transport handles `initialize` (version negotiation,
/// session creation), `ping` and `notifications/initialized` and `notifications/cancelled`
/// itself; everything else reaches the handler.
///
/// The session hooks ([`initialize`](Handler::initialize),
/// [`session_alive`](Handler::session_alive), [`session_closed`](Handler::session_closed),
/// [`shutdown`](Handler::shutdown)) have defaults that suit a handler without per-session
/// state; a handler that keeps some (the stdio gateway runs a process per session) uses them
/// to create, check and free it.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The server's name, version and capabilities for the initialize result.
    fn server_info(&self) -> ServerInfo;

    /// Who the server is to a 2026-07-28 client of `principal`: the identity and
    /// capabilities `server/discover` states and every modern result carries. By default
    /// [`server_info`](Handler::server_info). A handler that learns them from per-principal
    /// state (the stdio gateway asks its child) answers here; an error answers the request
    /// with it.
    async fn modern_server_info(&self, principal: &str) -> Result<ServerInfo, ErrorObject> {
        let _ = principal;
        Ok(self.server_info())
    }

    /// Answers `initialize` for the session just created (its version already negotiated):
    /// the `result` object. By default, [`server_info`](Handler::server_info) at the
    /// negotiated version. An error is sent as the JSON-RPC error response and the session is
    /// dropped (no `Mcp-Session-Id` is issued).
    async fn initialize(
        &self,
        request: &Request,
        session: SessionContext,
    ) -> Result<Value, ErrorObject> {
        let _ = request;
        Ok(self.server_info().initialize_result(&session))
    }

    /// Whether this handler can still serve `session`, asked on every request for it. A
    /// session it cannot serve (its state died with an earlier process, or failed) is ended
    /// and answered 404, so the client re-initializes. By default, always.
    fn session_alive(&self, session: &SessionId) -> bool {
        let _ = session;
        true
    }

    /// The session ended (DELETE, idle expiry, a failed initialize, or
    /// [`session_alive`](Handler::session_alive) said no): free what it held. Its requests'
    /// contexts are already cancelled.
    fn session_closed(&self, session: &SessionId) {
        let _ = session;
    }

    /// The server stopped serving: free everything (a gateway stops its children). Called by
    /// `Server::serve` once its graceful shutdown has finished, and by `Server::close` for a
    /// server mounted in an application.
    async fn shutdown(&self) {}

    /// Handles one request. The returned value is the JSON-RPC `result`; an error becomes a
    /// JSON-RPC error response. If the request is cancelled the return value is discarded and
    /// no response is sent (MCP cancellation).
    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject>;

    /// Whether this `tools/call` may run as a task (2026-07-28 with the tasks extension): the
    /// call then answers at once with the task, runs detached from its connection, and its
    /// result is read with `tasks/get`, from any node of a shared store. Asked per request, so a
    /// tool can gather input first in the request's own rounds (`input_required`) and run as a
    /// task once answered (the request then carries `inputResponses`). By default no call does.
    fn task_support(&self, call: &Request) -> TaskSupport {
        let _ = call;
        TaskSupport::Forbidden
    }

    /// Whether `server/discover` offers the tasks extension (with its event streams): true
    /// for a handler whose [`task_support`](Self::task_support) lets some call run as a task.
    /// By default false, so that a client choosing its era by what the server offers (tether's
    /// `auto`) does not take a server that runs no call as a task for one that does.
    fn offers_tasks(&self) -> bool {
        false
    }

    /// Handles a notification from the client (other than the ones the transport consumes).
    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        let _ = (notification, session);
    }

    /// The parts this handler reports on `/healthz` and `/metrics` (a gateway's upstreams);
    /// none by default.
    fn parts(&self) -> Vec<PartStatus> {
        Vec::new()
    }
}
