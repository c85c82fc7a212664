//! Any rmcp server served through tether (feature `rmcp`): [`RmcpHandler`] adapts an rmcp
//! `ServerHandler` to tether's [`Handler`], so its streams are
//! stored before they are sent and resume across cuts, on any of tether's stores, in both
//! eras.
//!
//! The adapter is the gateway with in-process children: a factory makes one rmcp service per
//! legacy session (started by `initialize`) and one per principal in the 2026-07-28 era, each
//! served by rmcp on a transport that hands its messages to the gateway as values (no line is
//! written or parsed between them; what the service says is queued in the order it says it).
//! So the routing of what the service says — responses to their requests,
//! progress by its token, logging, server→client requests (elicitation, sampling, roots, as
//! `input_required` in the 2026-07-28 era), cancellations both ways — is the gateway's own
//! code, not a second copy; `initialize` and `server/discover` answer with the rmcp server's
//! own info and capabilities; every `tools/call` may run as a durable task
//! (docs/CONTRACTS.md#rmcp).
//!
//! With the feature `client` too, [`TetherTransport`] puts tether's client behind rmcp's
//! client API.
//!
//! ```no_run
//! # async fn demo<S: rmcp::ServerHandler + Clone>(my_server: S) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tether::{rmcp::RmcpHandler, server::Server, store::{StoreLimits, Stores}};
//!
//! let handler = RmcpHandler::new(move || my_server.clone());
//! let server = Server::builder(Arc::new(handler))
//!     .stores(Stores::sqlite("mcp.db", StoreLimits::default())?)
//!     .build()
//!     .await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use ::rmcp::{ServerHandler, ServiceExt as _};
use async_trait::async_trait;
use serde_json::Value;
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{
    ErrorObject, INVALID_REQUEST, Message, Notification, Request, Response,
};

use crate::gateway::{
    GatewayConfig, InProcessServer, Launch, PipeClosed, ServerInput, ServerOutput, ServerPipe,
    StdioGateway,
};

/// Bytes in flight each way between an rmcp client and the bridge behind its transport.
#[cfg(feature = "client")]
const PIPE_BYTES: usize = 256 * 1024;

/// How long closing the client transport waits for the bridge to close the session.
#[cfg(feature = "client")]
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
use crate::server::{Handler, RequestContext, ServerInfo, SessionContext, TaskSupport};

/// An rmcp server as a tether [`Handler`] (module docs).
#[derive(Debug)]
pub struct RmcpHandler {
    gateway: StdioGateway,
}

impl RmcpHandler {
    /// Serves the rmcp servers `factory` makes: one per legacy session, one per principal
    /// in the 2026-07-28 era.
    pub fn new<S, F>(factory: F) -> Self
    where
        S: ServerHandler,
        F: Fn() -> S + Send + Sync + 'static,
    {
        let config = GatewayConfig::new("rmcp", []);
        let launch = Launch::InProcess(Arc::new(Factory(factory)));
        Self {
            gateway: StdioGateway::launching(config, launch),
        }
    }

    /// How many rmcp services run for legacy sessions.
    #[must_use]
    pub fn services(&self) -> usize {
        self.gateway.children()
    }
}

/// Makes and serves one rmcp service per child of the gateway.
struct Factory<F>(F);

impl<S, F> InProcessServer for Factory<F>
where
    S: ServerHandler,
    F: Fn() -> S + Send + Sync + 'static,
{
    fn serve(&self, pipe: ServerPipe) -> tokio::task::JoinHandle<()> {
        let service = (self.0)();
        let transport = PipeTransport {
            input: pipe.input,
            output: pipe.output,
        };
        tokio::spawn(async move {
            match service.serve(transport).await {
                Ok(running) => {
                    if let Err(error) = running.waiting().await {
                        tracing::warn!(error = %crate::error_chain(&error), "the rmcp service stopped with an error");
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %crate::error_chain(&error), "the rmcp service did not start")
                }
            }
        })
    }
}

/// An rmcp service's transport to the gateway: its messages cross as values, converted
/// between rmcp's types and tether's through `serde_json::Value`.
struct PipeTransport {
    input: ServerInput,
    output: ServerOutput,
}

/// Why a message could not reach the gateway.
#[derive(Debug, thiserror::Error)]
enum PipeError {
    #[error(transparent)]
    Closed(#[from] PipeClosed),
    #[error("the rmcp service said something that is not a JSON-RPC message: {0}")]
    NotJsonRpc(String),
}

impl ::rmcp::transport::Transport<::rmcp::RoleServer> for PipeTransport {
    type Error = PipeError;

    fn send(
        &mut self,
        item: ::rmcp::service::TxJsonRpcMessage<::rmcp::RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Converted and queued here, not in the future: rmcp runs each send as a task of its
        // own, and only this call's order is the order the service said things in.
        let said = serde_json::to_value(&item)
            .map_err(|error| PipeError::NotJsonRpc(error.to_string()))
            .and_then(|value| {
                Message::from_value(value).map_err(|error| PipeError::NotJsonRpc(error.to_string()))
            })
            .map(|message| self.output.say(message));
        async move { Ok(said?.await?) }
    }

    async fn receive(&mut self) -> Option<::rmcp::service::RxJsonRpcMessage<::rmcp::RoleServer>> {
        loop {
            let message = self.input.recv().await?;
            match serde_json::from_slice(&message.to_vec()) {
                Ok(read) => return Some(read),
                // rmcp's own transports answer what they cannot read with -32600; so does
                // this one, so the client's request is answered rather than left waiting.
                Err(error) => {
                    tracing::debug!(error = %crate::error_chain(&error), "a message the rmcp service cannot read");
                    if let Message::Request(request) = message {
                        let refused = Response::error(
                            Some(request.id),
                            ErrorObject::new(
                                INVALID_REQUEST,
                                format!("the rmcp server cannot read this request: {error}"),
                            ),
                        );
                        let _ = self.output.say(Message::Response(refused)).await;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.input.close();
        Ok(())
    }
}

#[async_trait]
impl Handler for RmcpHandler {
    fn server_info(&self) -> ServerInfo {
        self.gateway.server_info()
    }

    async fn modern_server_info(&self, principal: &str) -> Result<ServerInfo, ErrorObject> {
        self.gateway.modern_server_info(principal).await
    }

    fn offers_tasks(&self) -> bool {
        self.gateway.offers_tasks()
    }

    fn task_support(&self, call: &Request) -> TaskSupport {
        self.gateway.task_support(call)
    }

    async fn initialize(
        &self,
        request: &Request,
        session: SessionContext,
    ) -> Result<Value, ErrorObject> {
        self.gateway.initialize(request, session).await
    }

    fn session_alive(&self, session: &SessionId) -> bool {
        self.gateway.session_alive(session)
    }

    fn session_closed(&self, session: &SessionId) {
        self.gateway.session_closed(session);
    }

    async fn shutdown(&self) {
        self.gateway.shutdown().await;
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        self.gateway.handle_request(request, context).await
    }

    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        self.gateway
            .handle_notification(notification, session)
            .await;
    }
}

/// tether's client behind rmcp's client API (features `rmcp` and `client`): a transport an
/// rmcp client is served on (`handler.serve(TetherTransport::new(url, config))`), so its
/// requests go through tether's [`Client`](crate::client::Client) with its reconnects,
/// backoff, half-open detection and exactly-once delivery, in the era
/// [`ClientConfig::protocol`](crate::client::ClientConfig::protocol) picks.
///
/// It is [`bridge`](crate::bridge) on an in-memory pipe: the rmcp client's `initialize`
/// connects tether's client with its capabilities and identity and is answered with the
/// server's result; its requests, notifications and answers are carried as `tether connect`
/// carries a stdio client's. Closing the transport ends the session (DELETE).
#[cfg(feature = "client")]
pub struct TetherTransport {
    rmcp: ::rmcp::transport::async_rw::AsyncRwTransport<
        ::rmcp::RoleClient,
        tokio::io::DuplexStream,
        tokio::io::DuplexStream,
    >,
    bridge: Option<tokio::task::JoinHandle<()>>,
}

#[cfg(feature = "client")]
impl std::fmt::Debug for TetherTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TetherTransport").finish_non_exhaustive()
    }
}

#[cfg(feature = "client")]
impl TetherTransport {
    /// A transport to the MCP endpoint `url`; nothing is sent before the rmcp client's
    /// `initialize`. Must be called inside a tokio runtime.
    #[must_use]
    pub fn new(url: &str, config: crate::client::ClientConfig) -> Self {
        // A pipe each way, so that rmcp dropping its writer on close is the end of the
        // bridge's input.
        let (write, input) = tokio::io::duplex(PIPE_BYTES);
        let (output, read) = tokio::io::duplex(PIPE_BYTES);
        let url = url.to_owned();
        let bridge = tokio::spawn(async move {
            crate::bridge::run(&url, config, tokio::io::BufReader::new(input), output).await;
        });
        Self {
            rmcp: ::rmcp::transport::async_rw::AsyncRwTransport::new_client(read, write),
            bridge: Some(bridge),
        }
    }
}

#[cfg(feature = "client")]
impl ::rmcp::transport::Transport<::rmcp::RoleClient> for TetherTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ::rmcp::service::TxJsonRpcMessage<::rmcp::RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.rmcp.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<::rmcp::service::RxJsonRpcMessage<::rmcp::RoleClient>>> + Send
    {
        self.rmcp.receive()
    }

    /// Closes the pipe, which ends the bridge's input: it closes the session, then ends
    /// (it is stopped if that takes longer than ten seconds).
    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.rmcp.close().await;
        if let Some(mut bridge) = self.bridge.take()
            && tokio::time::timeout(CLOSE_GRACE, &mut bridge)
                .await
                .is_err()
        {
            bridge.abort();
        }
        closed
    }
}
