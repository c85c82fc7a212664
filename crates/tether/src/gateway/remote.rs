//! A remote Streamable HTTP server as one upstream of a federation, reached through tether's
//! own resumable client.
//!
//! [`RemoteGateway`] is a [`Handler`] like [`StdioGateway`](super::stdio_gateway::StdioGateway), and the
//! federation uses it the same way. Each legacy session of the caller gets its own
//! [`Client`] (the remote's session is the caller's, so what the remote says outside a
//! request reaches that caller), opened by the caller's `initialize` with the caller's
//! capabilities; each 2026-07-28 principal gets one, opened on first use. The client picks
//! the remote's era itself (`auto`, keeping a 2025 session wherever the remote serves one),
//! resumes cut streams, and re-initializes when the remote forgets its session, so the caller
//! sees none of that.
//!
//! A request is relayed as is (the caller's progress token too, so the remote's progress
//! goes back under it); the remote's notifications go to the caller's request, its requests
//! (sampling, elicitation, roots) are asked of the caller and answered back, and its answer
//! ends the request. A cancelled caller request is cancelled at the remote. The credentials
//! are the upstream's own ([`RemoteConfig::headers`], a bearer token): a caller's token is
//! never passed on. A remote that cannot be reached within [`REMOTE_CONNECT_WITHIN`] fails the
//! requests that need it with a typed JSON-RPC error (`data.reason` `unreachable`), and for
//! [`REMOTE_DOWN_FOR`] after that fails them at once, so that a dead upstream does not hold up every
//! new session and every merged list; the first request after that tries again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{
    CANCELLED_NOTIFICATION, ErrorObject, Message, Notification, Request, Response,
};

use crate::client::{Client, ClientConfig};
use crate::lock;
use crate::server::{
    ContextError, Era, Handler, PartStatus, RequestContext, ServerInfo, SessionContext, TaskSupport,
};

use super::child::{gateway_error, relay_notification};
use super::config::RemoteConfig;
use super::stdio_gateway::{for_legacy_child, server_info_of};

/// How long connecting to a remote upstream (its `initialize` or `server/discover`) may take.
pub const REMOTE_CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// How long a remote upstream that could not be reached is taken for down.
pub const REMOTE_DOWN_FOR: Duration = Duration::from_secs(10);

/// The [`Handler`] of one remote upstream; see the module docs.
#[derive(Debug)]
pub struct RemoteGateway {
    config: RemoteConfig,
    /// The legacy sessions' clients, one each.
    sessions: Mutex<HashMap<SessionId, Arc<Client>>>,
    /// The 2026-07-28 principals' clients, each opened on first use.
    principals: Mutex<HashMap<Arc<str>, PrincipalClient>>,
    /// Until when the remote is taken for down after a failed connect, and why.
    down_until: Mutex<Option<(Instant, String)>>,
}

/// Where a principal's client lives; locked while it connects, so concurrent first requests
/// share one connection.
type PrincipalClient = Arc<tokio::sync::Mutex<Option<Arc<Client>>>>;

impl RemoteGateway {
    /// An upstream at `config.url`; nothing is connected until a caller needs it.
    #[must_use]
    pub fn new(config: RemoteConfig) -> Self {
        Self {
            config,
            sessions: Mutex::new(HashMap::new()),
            principals: Mutex::new(HashMap::new()),
            down_until: Mutex::new(None),
        }
    }

    /// A client of the remote that introduces itself with `client` (a caller's `clientInfo`
    /// and `capabilities`) where there is one.
    async fn connect(&self, client: Option<&Value>) -> Result<Arc<Client>, ErrorObject> {
        let mut config = ClientConfig::default();
        config.headers.clone_from(&self.config.headers);
        // A 2025 session where the remote serves one: its cut streams resume, and the calls
        // of every caller, one principal to the remote, do not pile up as tasks against the
        // remote's per-principal task limit (a remote that serves only 2026-07-28 still runs
        // them as tasks where it offers them).
        config.prefer_tasks = false;
        if let Some(client) = client {
            if let Some(capabilities) = client.get("capabilities").filter(|c| c.is_object()) {
                config.capabilities = capabilities.clone();
            }
            if let Some(name) = client["clientInfo"]["name"].as_str() {
                name.clone_into(&mut config.client_name);
            }
            if let Some(version) = client["clientInfo"]["version"].as_str() {
                version.clone_into(&mut config.client_version);
            }
        }
        let url = &self.config.url;
        if let Some((until, _)) = *lock(&self.down_until)
            && Instant::now() < until
        {
            return Err(down(url, "could not be reached just now", "down"));
        }
        let connected =
            tokio::time::timeout(REMOTE_CONNECT_WITHIN, Client::connect(url, config)).await;
        let failed = match connected {
            Ok(Ok(client)) => {
                *lock(&self.down_until) = None;
                return Ok(Arc::new(client));
            }
            Ok(Err(error)) => down(url, &error.to_string(), error.kind_name()),
            Err(_) => down(
                url,
                &format!("did not answer within {REMOTE_CONNECT_WITHIN:?}"),
                "timeout",
            ),
        };
        *lock(&self.down_until) = Some((Instant::now() + REMOTE_DOWN_FOR, failed.message.clone()));
        tracing::warn!(%url, error = %failed.message, "remote upstream unreachable");
        Err(failed)
    }

    /// `session`'s client: the one its `initialize` opened, or a new one (the remote was
    /// unreachable then, or a reload added this upstream).
    async fn session_client(&self, session: &SessionContext) -> Result<Arc<Client>, ErrorObject> {
        if let Some(client) = lock(&self.sessions).get(session.session_id()) {
            return Ok(Arc::clone(client));
        }
        let client = self.connect(session.client()).await?;
        let mut sessions = lock(&self.sessions);
        let kept = sessions
            .entry(session.session_id().clone())
            .or_insert_with(|| Arc::clone(&client));
        if !Arc::ptr_eq(kept, &client) {
            close_later(client);
        }
        Ok(Arc::clone(kept))
    }

    /// `principal`'s client, opened on first use.
    async fn principal_client(&self, principal: &str) -> Result<Arc<Client>, ErrorObject> {
        let slot = Arc::clone(
            lock(&self.principals)
                .entry(Arc::from(principal))
                .or_default(),
        );
        let mut slot = slot.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(Arc::clone(client));
        }
        let client = self.connect(None).await?;
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }
}

/// The error of a request the remote could not be asked or did not answer.
fn unreachable(url: &str, error: &crate::client::Error) -> ErrorObject {
    gateway_error(format!("the remote server {url} failed: {error}"))
        .with_data(json!({"reason": error.kind_name()}))
}

/// The error of a request for which the remote could not be connected to: `why`, and the
/// client's error kind (or `timeout`, `down`) as `data.detail`.
fn down(url: &str, why: &str, detail: &str) -> ErrorObject {
    gateway_error(format!("the remote server {url} is unreachable: {why}"))
        .with_data(json!({"reason": "unreachable", "detail": detail}))
}

/// Ends a client's remote session without making anyone wait for it.
fn close_later(client: Arc<Client>) {
    tokio::spawn(async move {
        let _ = client.close().await;
    });
}

/// Relays `request` to the remote through `client` and what comes back to `context`, until
/// the answer.
async fn relay(
    url: &str,
    client: &Arc<Client>,
    request: &Request,
    context: &RequestContext,
) -> Result<Value, ErrorObject> {
    let params = if context.era() == Era::Modern {
        // The envelope is this hop's; the client writes the next hop's own.
        for_legacy_child(request, request.id.clone(), None).params
    } else {
        request.params.clone()
    };
    let mut stream = client
        .request(&request.method, params)
        .await
        .map_err(|error| unreachable(url, &error))?;
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            () = context.cancelled() => {
                if let Some(id) = stream.request_id() {
                    let params = json!({"requestId": id, "reason": "cancelled by the client"});
                    let _ = client.notify(CANCELLED_NOTIFICATION, Some(params)).await;
                }
                return Err(gateway_error("cancelled"));
            }
        };
        match message {
            None => {
                return Err(gateway_error(format!(
                    "the remote server {url} sent no answer"
                )));
            }
            Some(Err(error)) => return Err(unreachable(url, &error)),
            Some(Ok(Message::Response(Response::Result(answer)))) => return Ok(answer.result),
            Some(Ok(Message::Response(Response::Error(error)))) => return Err(error.error),
            Some(Ok(Message::Notification(notification))) => {
                let params = notification.params.unwrap_or(Value::Null);
                if let Err(error) = relay_notification(context, &notification.method, params).await
                {
                    tracing::debug!(error = %crate::error_chain(&error), method = %notification.method, "notification from the remote server dropped");
                }
            }
            Some(Ok(Message::Request(asked))) => {
                // Spawned: the caller may take its time, and the stream must keep flowing.
                let (client, context) = (Arc::clone(client), context.clone());
                tokio::spawn(async move {
                    let params = asked.params.unwrap_or(Value::Null);
                    let response = match context.request(&asked.method, params).await {
                        Ok(result) => Response::success(asked.id, result),
                        Err(ContextError::Remote(error)) => Response::error(Some(asked.id), error),
                        Err(error) => Response::error(
                            Some(asked.id),
                            gateway_error(format!("no answer from the client: {error}")),
                        ),
                    };
                    if let Err(error) = client.respond(response).await {
                        tracing::debug!(error = %crate::error_chain(&error), "answer to the remote server lost");
                    }
                });
            }
        }
    }
}

#[async_trait]
impl Handler for RemoteGateway {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: "tether-gateway".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: json!({}),
            instructions: None,
        }
    }

    async fn modern_server_info(&self, principal: &str) -> Result<ServerInfo, ErrorObject> {
        let client = self.principal_client(principal).await?;
        Ok(server_info_of(&client.server_info()))
    }

    fn offers_tasks(&self) -> bool {
        true
    }

    fn task_support(&self, call: &Request) -> TaskSupport {
        let _ = call;
        TaskSupport::Optional
    }

    async fn initialize(
        &self,
        request: &Request,
        session: SessionContext,
    ) -> Result<Value, ErrorObject> {
        let client = self.connect(request.params.as_ref()).await?;
        let info = client.server_info();
        if let Some(replaced) =
            lock(&self.sessions).insert(session.session_id().clone(), Arc::clone(&client))
        {
            close_later(replaced);
        }
        Ok(info)
    }

    fn session_closed(&self, session: &SessionId) {
        if let Some(client) = lock(&self.sessions).remove(session) {
            close_later(client);
        }
    }

    async fn shutdown(&self) {
        let mut clients: Vec<Arc<Client>> = lock(&self.sessions).drain().map(|(_, c)| c).collect();
        let slots: Vec<_> = lock(&self.principals).drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Some(client) = slot.lock().await.take() {
                clients.push(client);
            }
        }
        futures_util::future::join_all(clients.iter().map(|client| client.close())).await;
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let client = if context.era() == Era::Modern {
            self.principal_client(context.session().principal()).await?
        } else {
            self.session_client(context.session()).await?
        };
        relay(&self.config.url, &client, &request, &context).await
    }

    fn parts(&self) -> Vec<PartStatus> {
        let detail = lock(&self.down_until)
            .as_ref()
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, why)| why.clone());
        let principals = lock(&self.principals)
            .values()
            .filter(|slot| slot.try_lock().is_ok_and(|client| client.is_some()))
            .count();
        vec![PartStatus {
            name: "remote".to_owned(),
            up: detail.is_none(),
            children: lock(&self.sessions).len() + principals,
            detail,
            ..PartStatus::default()
        }]
    }

    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        let client = lock(&self.sessions).get(session.session_id()).cloned();
        if let Some(client) = client
            && let Err(error) = client
                .notify(&notification.method, notification.params)
                .await
        {
            tracing::debug!(error = %crate::error_chain(&error), "notification to the remote server lost");
        }
    }
}
