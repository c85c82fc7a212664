//! Any rmcp server served through tether (feature `rmcp`): [`RmcpHandler`] adapts an rmcp
//! `ServerHandler` to tether's [`Handler`], so its streams are
//! stored before they are sent and resume across cuts, on any of tether's stores, in both
//! eras.
//!
//! The adapter is the gateway with in-process children: a factory makes one rmcp service per
//! legacy session (started by `initialize`) and one per principal in the 2026-07-28 era, each
//! served by rmcp over one end of an in-memory byte pipe in the stdio framing, the gateway on
//! the other. So the routing of what the service says — responses to their requests,
//! progress by its token, logging, server→client requests (elicitation, sampling, roots, as
//! `input_required` in the 2026-07-28 era), cancellations both ways — is the gateway's own
//! code, not a second copy; `initialize` and `server/discover` answer with the rmcp server's
//! own info and capabilities; every `tools/call` may run as a durable task
//! (docs/CONTRACTS.md#rmcp).
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
use tether_proto::jsonrpc::{ErrorObject, Notification, Request};

use crate::gateway::{GatewayConfig, InProcessServer, Launch, StdioGateway};
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
    fn serve(&self, io: tokio::io::DuplexStream) -> tokio::task::JoinHandle<()> {
        let service = (self.0)();
        tokio::spawn(async move {
            match service.serve(io).await {
                Ok(running) => {
                    if let Err(error) = running.waiting().await {
                        tracing::warn!(%error, "the rmcp service stopped with an error");
                    }
                }
                Err(error) => tracing::warn!(%error, "the rmcp service did not start"),
            }
        })
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
