//! [`StdioGateway`]: one stdio server's children behind the endpoint (see the folder's docs):
//! a child per legacy session, per 2026-07-28 principal, or shared, started, relayed to and
//! stopped; and the handshakes and request shapes a child is given.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId};
use tether_proto::version::ProtocolVersion;

use crate::lock;
use crate::server::{Handler, PartStatus, RequestContext, ServerInfo, SessionContext, TaskSupport};

use super::child::{Child, Owner, busy, gateway_error};
use super::config::{ChildScope, GatewayConfig, Launch};

/// The gateway [`Handler`]; see the module docs.
#[derive(Debug)]
pub struct StdioGateway {
    config: GatewayConfig,
    /// What a child is: a process running `config.program`, or a server in this process.
    launch: Launch,
    /// The legacy sessions' children, one per session.
    children: Mutex<HashMap<SessionId, Arc<Child>>>,
    /// The 2026-07-28 era's children, one per principal, each started on first use.
    principals: Mutex<HashMap<Arc<str>, PrincipalSlot>>,
    /// Numbers the ids and progress tokens of modern requests as the children see them.
    next_id: AtomicU64,
    /// The legacy sessions whose in-process server is being started again (see `revive`).
    reviving: Mutex<HashMap<SessionId, Arc<Reviving>>>,
    /// Whether a legacy session's child that died (or that this gateway never started: an
    /// upstream a reload added) is started again on the session's next request, rather than
    /// the session ending with it: a federation's upstreams, one of which must not take the
    /// session down.
    restarts: bool,
    /// Why the last child failed to start, until one starts.
    start_failure: Mutex<Option<String>>,
}

/// One session's revival: requests of the session wait for it, and a session that ends
/// meanwhile is marked, so that the server started for it is stopped rather than kept.
#[derive(Debug, Default)]
struct Reviving {
    started: tokio::sync::Mutex<()>,
    ended: AtomicBool,
}

/// Where a principal's child lives; locked while one starts, so concurrent first requests
/// share the start.
type PrincipalSlot = Arc<tokio::sync::Mutex<Option<Started>>>;

/// A principal's child that answered the legacy handshake, and who it said it is.
#[derive(Debug, Clone)]
struct Started {
    child: Arc<Child>,
    info: ServerInfo,
}

impl StdioGateway {
    /// A gateway that will run `config.program` for each session.
    #[must_use]
    pub fn new(config: GatewayConfig) -> Self {
        Self::launching(config, Launch::Process)
    }

    /// A gateway whose children are started by `launch` (the rmcp adapter's in-process
    /// servers); `config.program` and `config.args` are not used by an in-process launch.
    pub(crate) fn launching(config: GatewayConfig, launch: Launch) -> Self {
        Self {
            config,
            launch,
            children: Mutex::new(HashMap::new()),
            principals: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            reviving: Mutex::new(HashMap::new()),
            restarts: false,
            start_failure: Mutex::new(None),
        }
    }

    /// Starts a child for `owner` and has it answer `handshake` (at `negotiated`, a
    /// session's version, if given): the child and its `initialize` result. A child that
    /// fails is stopped; either way the outcome is noted for [`Handler::parts`].
    async fn start(
        &self,
        owner: Owner,
        handshake: &Request,
        negotiated: Option<ProtocolVersion>,
    ) -> Result<(Arc<Child>, Value), ErrorObject> {
        if let Some(max) = self.config.max_children
            && self.running() >= max
        {
            return Err(busy(format!(
                "{max} stdio servers are running already, the most allowed"
            )));
        }
        let started = async {
            let shown = owner.to_string();
            let child = Child::spawn(&self.launch, &self.config, owner).map_err(|error| {
                tracing::error!(session = %shown, error = %crate::error_chain(&error), "cannot start the stdio server");
                gateway_error(format!("cannot start the stdio server: {error}"))
            })?;
            match child.initialize(handshake, negotiated, &self.config).await {
                Ok(result) => Ok((child, result)),
                Err(error) => {
                    child.stop();
                    Err(error)
                }
            }
        }
        .await;
        *lock(&self.start_failure) = started.as_ref().err().map(|error| error.message.clone());
        started
    }

    /// Children running now: the sessions' and the principals' (one starting is not
    /// counted).
    fn running(&self) -> usize {
        let sessions = lock(&self.children)
            .values()
            .filter(|child| !child.is_dead())
            .count();
        let slots: Vec<PrincipalSlot> = lock(&self.principals).values().cloned().collect();
        let principals = slots
            .iter()
            .filter(|slot| {
                slot.try_lock()
                    .is_ok_and(|started| started.as_ref().is_some_and(|s| !s.child.is_dead()))
            })
            .count();
        sessions + principals
    }

    /// A gateway of one federation's upstream: a session's child that died is started again
    /// on the session's next request, with the session's handshake.
    pub(crate) fn restarting(config: GatewayConfig) -> Self {
        Self {
            restarts: true,
            ..Self::launching(config, Launch::Process)
        }
    }

    /// How many children are running for legacy sessions.
    #[must_use]
    pub fn children(&self) -> usize {
        lock(&self.children).len()
    }

    /// `principal`'s child for 2026-07-28 requests: the running one, or a new one once it
    /// answered the legacy handshake (a dead one is replaced). Concurrent first requests of a
    /// principal share one start.
    async fn principal_child(&self, principal: &str) -> Result<Started, ErrorObject> {
        let slot = Arc::clone(
            lock(&self.principals)
                .entry(Arc::from(principal))
                .or_default(),
        );
        let mut slot = slot.lock().await;
        if let Some(started) = slot.as_ref()
            && !started.child.is_dead()
        {
            return Ok(started.clone());
        }
        if let Some(dead) = slot.take() {
            dead.child.stop();
        }
        let owner = Owner::Principal(Arc::from(principal));
        let handshake = handshake(ProtocolVersion::LATEST_LEGACY, None);
        let (child, result) = self.start(owner, &handshake, None).await?;
        let started = Started {
            child,
            info: server_info_of(&result),
        };
        *slot = Some(started.clone());
        Ok(started)
    }

    /// A new child for legacy session `session`, which outlived its in-process server (this
    /// process restarted) or, in a federation, its child (it died, or a reload added the
    /// upstream): started with the client's own handshake (its `clientInfo` and
    /// capabilities, which the session store keeps) at the session's version, or the
    /// gateway's where the store has none, so the session goes on. Concurrent requests
    /// of the session share one start; other sessions' starts do not wait for it.
    async fn revive(&self, session: &SessionContext) -> Result<Arc<Child>, ErrorObject> {
        let id = session.session_id().clone();
        let reviving = Arc::clone(lock(&self.reviving).entry(id.clone()).or_default());
        let started = reviving.started.lock().await;
        let revived = self.start_again(session, &reviving).await;
        drop(started);
        let mut all = lock(&self.reviving);
        if all.get(&id).is_some_and(|r| Arc::ptr_eq(r, &reviving)) {
            all.remove(&id);
        }
        revived
    }

    /// [`revive`](Self::revive) under the session's claim: the child that serves it now.
    async fn start_again(
        &self,
        session: &SessionContext,
        reviving: &Reviving,
    ) -> Result<Arc<Child>, ErrorObject> {
        let id = session.session_id();
        if let Some(child) = self.child(id)
            && !child.is_dead()
        {
            return Ok(child);
        }
        let version = session.protocol_version();
        let owner = Owner::Session(session.clone());
        let handshake = handshake(version, session.client());
        let (child, _) = self.start(owner, &handshake, Some(version)).await?;
        let mut children = lock(&self.children);
        // Ended (DELETE, expiry) during the handshake: nothing would ever stop it later.
        if reviving.ended.load(Ordering::SeqCst) {
            drop(children);
            child.stop();
            return Err(gateway_error("the session ended"));
        }
        children.insert(id.clone(), Arc::clone(&child));
        tracing::info!(session = %id, "the session's server was started again");
        Ok(child)
    }

    /// The key of the child that serves `principal`'s requests outside its own session's
    /// child: the principal, or one key for everyone ([`ChildScope::Shared`]).
    fn principal_key<'a>(&self, principal: &'a str) -> &'a str {
        match self.config.children {
            ChildScope::Shared => "",
            ChildScope::Session | ChildScope::Principal => principal,
        }
    }

    /// Whether legacy sessions have children of their own.
    fn per_session(&self) -> bool {
        self.config.children == ChildScope::Session
    }

    /// A request relayed to the child of `principal`'s key, under the gateway's id and
    /// progress token.
    async fn call_principal_child(
        &self,
        request: &Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let key = self.principal_key(context.session().principal());
        let started = self.principal_child(key).await?;
        let id = RequestId::String(self.next_child_id("m"));
        let token = context.progress_token().map(|_| self.next_child_id("p"));
        let forwarded = for_legacy_child(request, id, token.as_deref());
        started.child.call(forwarded, context, token).await
    }

    /// A gateway-wide number for the id (or progress token) a child sees.
    fn next_child_id(&self, kind: &str) -> String {
        format!(
            "tether-{kind}{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn child(&self, session: &SessionId) -> Option<Arc<Child>> {
        lock(&self.children).get(session).cloned()
    }

    fn remove(&self, session: &SessionId) -> Option<Arc<Child>> {
        lock(&self.children).remove(session)
    }
}

/// The `initialize` the gateway sends a child no client initialized, at `version`: with what
/// a session's client said of itself (`SessionContext::client`, its `clientInfo` and
/// capabilities) where there is that, else the gateway's own, declaring the capabilities it
/// maps (to 2026-07-28 input requests, or to a session's client).
fn handshake(version: ProtocolVersion, client: Option<&Value>) -> Request {
    let mut params = match client {
        Some(client @ Value::Object(_)) => client.clone(),
        _ => json!({
            "capabilities": {"elicitation": {}, "sampling": {}, "roots": {}},
            "clientInfo": {"name": "tether-gateway", "version": env!("CARGO_PKG_VERSION")},
        }),
    };
    // Both are objects: this sets a member.
    params["protocolVersion"] = Value::from(version.as_str());
    Request::new(
        RequestId::String("tether-initialize".into()),
        "initialize",
        Some(params),
    )
}

/// Who the child's `initialize` result says it is.
pub(super) fn server_info_of(result: &Value) -> ServerInfo {
    let text = |key: &str| {
        result["serverInfo"][key]
            .as_str()
            .unwrap_or("stdio-server")
            .to_owned()
    };
    ServerInfo {
        name: text("name"),
        version: text("version"),
        capabilities: result
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// A 2026-07-28 request as a legacy child sees it: the gateway's own id, the envelope and
/// the retry fields (`inputResponses`, `requestState`, which the transport consumed) taken
/// out, and the progress token replaced by `token` when there is one.
pub(super) fn for_legacy_child(request: &Request, id: RequestId, token: Option<&str>) -> Request {
    let mut forwarded = request.clone();
    forwarded.id = id;
    if let Some(Value::Object(params)) = &mut forwarded.params {
        params.remove("inputResponses");
        params.remove("requestState");
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
            if let Some(token) = token {
                meta.insert("progressToken".into(), Value::from(token));
            }
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
    }
    forwarded
}

#[async_trait]
impl Handler for StdioGateway {
    fn server_info(&self) -> ServerInfo {
        // Only used if `initialize` were not overridden: the child's own answer is sent.
        ServerInfo {
            name: "tether-gateway".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: json!({}),
            instructions: None,
        }
    }

    async fn modern_server_info(&self, principal: &str) -> Result<ServerInfo, ErrorObject> {
        Ok(self
            .principal_child(self.principal_key(principal))
            .await?
            .info)
    }

    /// Every `tools/call` may run as a task.
    fn offers_tasks(&self) -> bool {
        true
    }

    /// Every tool may run as a task: the child's call is then held by tether, not by the
    /// client's connection.
    fn task_support(&self, call: &Request) -> TaskSupport {
        let _ = call;
        TaskSupport::Optional
    }

    async fn initialize(
        &self,
        request: &Request,
        session: SessionContext,
    ) -> Result<Value, ErrorObject> {
        if !self.per_session() {
            // The shared child answered the gateway's own handshake; the session is told
            // who it is at the session's version.
            let key = self.principal_key(session.principal());
            let started = self.principal_child(key).await?;
            return Ok(started.info.initialize_result(&session));
        }
        let owner = Owner::Session(session.clone());
        let version = Some(session.protocol_version());
        // On failure the child is stopped and the transport ends the session.
        let (child, result) = self.start(owner, request, version).await?;
        lock(&self.children).insert(session.session_id().clone(), child);
        Ok(result)
    }

    fn session_alive(&self, session: &SessionId) -> bool {
        if !self.per_session() {
            // Nothing of the session is in the shared child: it is served by whichever runs.
            return true;
        }
        match self.child(session) {
            Some(child) => !child.is_dead(),
            // A session this process never served outlived its server (a restart): an
            // in-process server is started again on its next request; a process's state
            // is gone with it, so its session ends.
            None => matches!(self.launch, Launch::InProcess(_)),
        }
    }

    fn session_closed(&self, session: &SessionId) {
        if let Some(reviving) = lock(&self.reviving).get(session) {
            reviving.ended.store(true, Ordering::SeqCst);
        }
        if let Some(child) = self.remove(session) {
            tracing::info!(session = %session, "stopping the session's stdio server");
            child.stop();
        }
    }

    async fn shutdown(&self) {
        let mut children: Vec<Arc<Child>> = lock(&self.children).drain().map(|(_, c)| c).collect();
        let slots: Vec<_> = lock(&self.principals).drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Some(started) = slot.lock().await.take() {
                children.push(started.child);
            }
        }
        for child in &children {
            child.stop();
        }
        for child in children {
            child.stopped().await;
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        if context.era() == crate::server::Era::Modern || !self.per_session() {
            return self.call_principal_child(&request, context).await;
        }
        let session = context.session().session_id().clone();
        let child = match (self.child(&session), &self.launch) {
            (Some(child), _) if !(self.restarts && child.is_dead()) => child,
            (None, Launch::Process) if !self.restarts => {
                return Err(gateway_error("this session's stdio server is not running"));
            }
            _ => self.revive(context.session()).await?,
        };
        child.call(request, context, None).await
    }

    fn parts(&self) -> Vec<PartStatus> {
        let detail = lock(&self.start_failure).clone();
        vec![PartStatus {
            name: "stdio".to_owned(),
            up: detail.is_none(),
            children: self.running(),
            detail,
            ..PartStatus::default()
        }]
    }

    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        if let Some(child) = self.child(session.session_id()) {
            child.send(Message::Notification(notification)).await;
        }
    }
}
