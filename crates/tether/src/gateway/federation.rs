//! The federating gateway: many stdio servers behind one endpoint, their tools, prompts and
//! resources merged.
//!
//! [`FederatedGateway`] is a [`Handler`] over one [`StdioGateway`] per upstream
//! ([`FederationConfig`]), each running its own children exactly as a single gateway does (one
//! per legacy session, one per 2026-07-28 principal), so everything a child says still goes
//! through the request contexts and is stored before it is sent. What the federation adds is
//! naming and routing:
//!
//! - `initialize` starts every upstream's child for the session and answers the union of their
//!   capabilities; `server/discover` likewise for a principal.
//! - `tools/list`, `prompts/list`, `resources/list` and `resources/templates/list` ask every
//!   upstream and merge the pages; tool and prompt names become `<prefix><separator><name>`
//!   (the prefix is the upstream's name unless the config says otherwise). The next cursor
//!   holds each upstream's own cursor, so a client that pages gets every upstream's every page.
//! - `tools/call`, `prompts/get` and `completion/complete` go to the upstream their name's
//!   prefix names, with the name it knows; `resources/read`, `subscribe` and `unsubscribe` to
//!   the upstream that listed the URI (else the first that can read it). Validation refuses
//!   prefixes of which one, with the separator, begins another, so every federated name has
//!   exactly one upstream.
//! - Allow and deny rules hide tools and prompts from the lists and refuse their calls as
//!   unknown names, so a denied tool cannot be told from an absent one.
//! - An upstream whose child dies fails only its own requests in flight; its next request
//!   starts a new child with the session's handshake, and the session, its streams and the
//!   other upstreams carry on (an upstream that does not answer a list is left out of it and
//!   logged).
//! - [`reload`](FederatedGateway::reload) swaps in a new set of upstreams: the unchanged keep
//!   their children, the removed are stopped, the added start on each session's next use, and
//!   every live legacy session is told with `list_changed`.
//!
//! Notifications from the client go to every upstream; server→client requests, progress and
//! logs of a child reach the caller through the request they belong to, as in one gateway.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use futures_util::future::join_all;
use serde_json::{Value, json};
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{ErrorObject, Notification, Request};

use crate::lock;
use crate::server::{Handler, PartStatus, RequestContext, ServerInfo, SessionContext, TaskSupport};

use super::child::{busy, gateway_error};
use super::config::{FederationConfig, UpstreamConfig, UpstreamServer};
use super::merge::{decode_cursor, encode_cursor, federated_info};
use super::stdio_gateway::StdioGateway;

/// The kinds of list the federation merges: the method, the result's array member, and
/// whether its entries are named (tools, prompts: prefixed) or addressed by URI (resources).
const LISTS: [(&str, &str, Entries); 4] = [
    ("tools/list", "tools", Entries::Tools),
    ("prompts/list", "prompts", Entries::Prompts),
    ("resources/list", "resources", Entries::Resources),
    (
        "resources/templates/list",
        "resourceTemplates",
        Entries::Templates,
    ),
];

/// How many principals' [`ServerInfo`] are kept at most (all are forgotten past it).
const KEPT_PRINCIPALS: usize = 4096;

/// The notifications a reload sends every live legacy session.
const LIST_CHANGED: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entries {
    Tools,
    Prompts,
    Resources,
    Templates,
}

/// The [`Handler`] of a federating gateway; see the module docs.
#[derive(Debug)]
pub struct FederatedGateway {
    upstreams: RwLock<Arc<Upstreams>>,
    /// The legacy sessions this process initialized, to tell of a reload and to know which
    /// sessions it can serve (a child's state does not survive a restart).
    sessions: Mutex<HashMap<SessionId, SessionContext>>,
    /// Which upstream listed a resource URI, so that reading it goes there.
    resource_owners: Mutex<HashMap<String, String>>,
    /// Who the federation is to each 2026-07-28 principal, asked on every modern request:
    /// kept once every upstream answered, until a reload.
    modern_infos: Mutex<HashMap<Arc<str>, ServerInfo>>,
}

/// One set of upstreams, swapped whole by a reload.
#[derive(Debug)]
struct Upstreams {
    separator: String,
    members: Vec<Arc<Member>>,
}

/// One upstream: what the config says of it, and the gateway that serves it (a
/// [`StdioGateway`] or a `RemoteGateway`).
struct Member {
    config: UpstreamConfig,
    gateway: Box<dyn Handler>,
    /// Requests it answered with a result, and with an error.
    answered: AtomicU64,
    failed: AtomicU64,
    /// Requests it is serving now.
    in_flight: AtomicUsize,
}

/// One request counted in [`Member::in_flight`] until dropped (answered or cancelled).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a reload changed, by upstream name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// Upstreams that were not there before.
    pub added: Vec<String>,
    /// Upstreams that are gone; their children were stopped.
    pub removed: Vec<String>,
    /// Upstreams whose config changed; their children were stopped and start again on next use.
    pub changed: Vec<String>,
}

impl Reloaded {
    /// Whether the reload changed nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl Member {
    fn new(config: UpstreamConfig) -> Arc<Self> {
        let gateway: Box<dyn Handler> = match &config.server {
            UpstreamServer::Command(server) => Box::new(StdioGateway::restarting(server.clone())),
            #[cfg(feature = "client")]
            UpstreamServer::Url(remote) => {
                Box::new(super::remote::RemoteGateway::new(remote.clone()))
            }
        };
        Arc::new(Self {
            config,
            gateway,
            answered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// `request` served by this upstream, counted.
    async fn handle(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let held = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _counted = InFlight(&self.in_flight);
        let answer = match self.config.max_in_flight {
            Some(max) if held >= max => Err(self.blame(busy(format!(
                "{max} requests in flight already, the most allowed"
            )))),
            _ => self.gateway.handle_request(request, context).await,
        };
        let counter = if answer.is_ok() {
            &self.answered
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        answer
    }

    /// What `/healthz` and `/metrics` say of it.
    fn status(&self) -> PartStatus {
        let mut status = self.gateway.parts().into_iter().next().unwrap_or_default();
        self.config.name.clone_into(&mut status.name);
        status.answered = self.answered.load(Ordering::Relaxed);
        status.failed = self.failed.load(Ordering::Relaxed);
        status
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    /// An upstream's error as the caller sees it: which upstream, then what it said.
    fn blame(&self, mut error: ErrorObject) -> ErrorObject {
        error.message = format!("upstream {:?}: {}", self.config.name, error.message);
        error
    }
}

impl Upstreams {
    fn new(config: FederationConfig) -> Self {
        Self {
            separator: config.separator,
            members: config.upstreams.into_iter().map(Member::new).collect(),
        }
    }

    /// The upstream a federated name belongs to, and the name it knows.
    fn route<'a>(&self, federated: &'a str) -> Option<(&Arc<Member>, &'a str)> {
        self.members.iter().find_map(|member| {
            let inner = federated
                .strip_prefix(member.config.prefix())?
                .strip_prefix(self.separator.as_str())?;
            (!inner.is_empty()).then_some((member, inner))
        })
    }

    fn federated_name(&self, member: &Member, name: &str) -> String {
        format!("{}{}{name}", member.config.prefix(), self.separator)
    }

    fn member(&self, name: &str) -> Option<&Arc<Member>> {
        self.members.iter().find(|member| member.name() == name)
    }
}

impl FederatedGateway {
    /// A gateway over `config`'s upstreams; each starts its children on first use.
    ///
    /// # Errors
    ///
    /// What [`FederationConfig::validate`] finds.
    pub fn new(config: FederationConfig) -> Result<Self, super::config::FederationError> {
        config.validate()?;
        Ok(Self {
            upstreams: RwLock::new(Arc::new(Upstreams::new(config))),
            sessions: Mutex::new(HashMap::new()),
            resource_owners: Mutex::new(HashMap::new()),
            modern_infos: Mutex::new(HashMap::new()),
        })
    }

    /// The upstreams' names, in config order.
    #[must_use]
    pub fn upstream_names(&self) -> Vec<String> {
        self.current()
            .members
            .iter()
            .map(|member| member.name().to_owned())
            .collect()
    }

    /// Replaces the upstreams with `config`'s (see the module docs). A config that does not
    /// validate changes nothing.
    ///
    /// # Errors
    ///
    /// What [`FederationConfig::validate`] finds.
    pub async fn reload(
        &self,
        config: FederationConfig,
    ) -> Result<Reloaded, super::config::FederationError> {
        config.validate()?;
        let old = self.current();
        let mut reloaded = Reloaded::default();
        let separator_changed = old.separator != config.separator;
        let members: Vec<Arc<Member>> = config
            .upstreams
            .into_iter()
            .map(|wanted| match old.member(&wanted.name) {
                Some(kept) if kept.config == wanted => Arc::clone(kept),
                Some(_) => {
                    reloaded.changed.push(wanted.name.clone());
                    Member::new(wanted)
                }
                None => {
                    reloaded.added.push(wanted.name.clone());
                    Member::new(wanted)
                }
            })
            .collect();
        let stopped: Vec<Arc<Member>> = old
            .members
            .iter()
            .filter(|member| !members.iter().any(|kept| Arc::ptr_eq(kept, member)))
            .cloned()
            .collect();
        for member in &stopped {
            if !reloaded.changed.iter().any(|name| name == member.name()) {
                reloaded.removed.push(member.name().to_owned());
            }
        }
        *self
            .upstreams
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(Upstreams {
            separator: config.separator,
            members,
        });
        lock(&self.modern_infos).clear();
        lock(&self.resource_owners)
            .retain(|_, owner| !stopped.iter().any(|member| member.name() == owner.as_str()));
        for member in stopped {
            member.gateway.shutdown().await;
        }
        if !reloaded.is_empty() || separator_changed {
            self.tell_sessions().await;
        }
        Ok(reloaded)
    }

    /// Sends every live legacy session the `list_changed` notifications.
    async fn tell_sessions(&self) {
        let sessions: Vec<SessionContext> = lock(&self.sessions).values().cloned().collect();
        for session in sessions {
            for method in LIST_CHANGED {
                if let Err(error) = session.notify(method, json!({})).await {
                    tracing::debug!(session = %session.session_id(), error = %crate::error_chain(&error), "list_changed not sent");
                }
            }
        }
    }

    fn current(&self) -> Arc<Upstreams> {
        Arc::clone(
            &self
                .upstreams
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// A merged list (`method`), one page: every upstream still listed in `cursor` (all of
    /// them without one) asked for its next page.
    async fn list(
        &self,
        upstreams: &Upstreams,
        request: &Request,
        context: &RequestContext,
        (method, key, entries): (&str, &str, Entries),
    ) -> Result<Value, ErrorObject> {
        let cursors = match request.params.as_ref().and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(decode_cursor(cursor).ok_or_else(|| {
                ErrorObject::invalid_params("the cursor is not one this gateway gave")
            })?),
            Some(_) => return Err(ErrorObject::invalid_params("cursor must be a string")),
        };
        let asked: Vec<(&Arc<Member>, Option<String>)> = upstreams
            .members
            .iter()
            .filter_map(|member| match &cursors {
                None => Some((member, None)),
                Some(cursors) => cursors
                    .get(member.name())
                    .map(|cursor| (member, Some(cursor.clone()))),
            })
            .collect();
        let pages = join_all(asked.into_iter().map(|(member, cursor)| {
            let mut forwarded = request.clone();
            set_param(&mut forwarded, "cursor", cursor.map(Value::String));
            let context = context.clone();
            async move {
                let page = member.handle(forwarded, context).await;
                (member, page)
            }
        }))
        .await;
        let mut merged = Vec::new();
        let mut next = BTreeMap::new();
        for (member, page) in pages {
            let page = match page {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(upstream = member.name(), method, error = %error.message, "upstream left out of the list");
                    continue;
                }
            };
            if let Some(cursor) = page.get("nextCursor").and_then(Value::as_str) {
                next.insert(member.name().to_owned(), cursor.to_owned());
            }
            let Some(Value::Array(items)) = page.get(key) else {
                continue;
            };
            for item in items {
                if let Some(item) = self.federate(upstreams, member, entries, item) {
                    merged.push(item);
                }
            }
        }
        let mut result = json!({ key: merged });
        if !next.is_empty() {
            result["nextCursor"] = Value::String(encode_cursor(&next));
        }
        Ok(result)
    }

    /// One upstream's list entry as the caller sees it, `None` if the rules hide it.
    fn federate(
        &self,
        upstreams: &Upstreams,
        member: &Member,
        entries: Entries,
        item: &Value,
    ) -> Option<Value> {
        let mut item = item.clone();
        match entries {
            Entries::Tools | Entries::Prompts => {
                let name = item.get("name")?.as_str()?;
                let filter = if entries == Entries::Tools {
                    &member.config.tools
                } else {
                    &member.config.prompts
                };
                if !filter.allows(name) {
                    return None;
                }
                item["name"] = Value::String(upstreams.federated_name(member, name));
            }
            Entries::Resources => {
                if let Some(uri) = item.get("uri").and_then(Value::as_str) {
                    lock(&self.resource_owners).insert(uri.to_owned(), member.name().to_owned());
                }
            }
            Entries::Templates => {}
        }
        Some(item)
    }

    /// A named request (`tools/call`, `prompts/get`) sent to the upstream its name belongs
    /// to, under the name that upstream knows.
    async fn call_named(
        upstreams: &Upstreams,
        mut request: Request,
        context: RequestContext,
        entries: Entries,
    ) -> Result<Value, ErrorObject> {
        let kind = if entries == Entries::Tools {
            "tool"
        } else {
            "prompt"
        };
        let federated = request
            .params
            .as_ref()
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params(format!("a {kind} name is required")))?
            .to_owned();
        let unknown = || ErrorObject::invalid_params(format!("unknown {kind}: {federated}"));
        let (member, inner) = upstreams.route(&federated).ok_or_else(unknown)?;
        let filter = if entries == Entries::Tools {
            &member.config.tools
        } else {
            &member.config.prompts
        };
        if !filter.allows(inner) {
            return Err(unknown());
        }
        set_param(&mut request, "name", Some(Value::from(inner)));
        member
            .handle(request, context)
            .await
            .map_err(|error| member.blame(error))
    }

    /// `completion/complete`: to the upstream of the prompt, or of the resource, it completes.
    async fn complete(
        &self,
        upstreams: &Upstreams,
        mut request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let reference = request
            .params
            .as_ref()
            .and_then(|params| params.get("ref"))
            .cloned()
            .unwrap_or(Value::Null);
        match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let federated = reference.get("name").and_then(Value::as_str).unwrap_or("");
                let (member, inner) = upstreams
                    .route(federated)
                    .filter(|(member, inner)| member.config.prompts.allows(inner))
                    .ok_or_else(|| {
                        ErrorObject::invalid_params(format!("unknown prompt: {federated}"))
                    })?;
                if let Some(Value::Object(params)) = &mut request.params {
                    params.insert("ref".into(), json!({"type": "ref/prompt", "name": inner}));
                }
                member
                    .handle(request, context)
                    .await
                    .map_err(|error| member.blame(error))
            }
            Some("ref/resource") => {
                let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                self.by_uri(upstreams, uri, request, context).await
            }
            _ => Err(ErrorObject::invalid_params(
                "ref must be a ref/prompt or a ref/resource",
            )),
        }
    }

    /// A request about resource `uri`: to the upstream that listed it, else to each in turn
    /// until one answers (which is then remembered).
    async fn by_uri(
        &self,
        upstreams: &Upstreams,
        uri: &str,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let owner = lock(&self.resource_owners).get(uri).cloned();
        if let Some(member) = owner.as_deref().and_then(|name| upstreams.member(name)) {
            return member
                .handle(request, context)
                .await
                .map_err(|error| member.blame(error));
        }
        let mut last = None;
        for member in &upstreams.members {
            match member.handle(request.clone(), context.clone()).await {
                Ok(result) => {
                    lock(&self.resource_owners).insert(uri.to_owned(), member.name().to_owned());
                    return Ok(result);
                }
                Err(error) => last = Some(member.blame(error)),
            }
        }
        Err(last.unwrap_or_else(|| gateway_error("no upstreams")))
    }

    /// A request every upstream must hear (`logging/setLevel`): answered once all did, with
    /// the first error if one failed.
    async fn broadcast(
        upstreams: &Upstreams,
        request: &Request,
        context: &RequestContext,
    ) -> Result<Value, ErrorObject> {
        let answers = join_all(upstreams.members.iter().map(|member| async {
            member
                .handle(request.clone(), context.clone())
                .await
                .map_err(|error| member.blame(error))
        }))
        .await;
        for answer in answers {
            answer?;
        }
        Ok(json!({}))
    }
}

/// `params[key] = value` (removed for `None`), creating `params`.
fn set_param(request: &mut Request, key: &str, value: Option<Value>) {
    let params = request.params.get_or_insert_with(|| json!({}));
    if let Value::Object(params) = params {
        match value {
            Some(value) => {
                params.insert(key.to_owned(), value);
            }
            None => {
                params.remove(key);
            }
        }
    }
}

#[async_trait]
impl Handler for FederatedGateway {
    fn server_info(&self) -> ServerInfo {
        federated_info(&[])
    }

    async fn modern_server_info(&self, principal: &str) -> Result<ServerInfo, ErrorObject> {
        if let Some(info) = lock(&self.modern_infos).get(principal) {
            return Ok(info.clone());
        }
        let upstreams = self.current();
        let infos = join_all(
            upstreams
                .members
                .iter()
                .map(|member| member.gateway.modern_server_info(principal)),
        )
        .await;
        let mut answered = Vec::new();
        let mut last = None;
        for (member, info) in upstreams.members.iter().zip(infos) {
            match info {
                Ok(info) => answered.push((member.config.prefix(), info)),
                Err(error) => {
                    tracing::warn!(upstream = member.name(), principal, error = %error.message, "upstream did not start");
                    last = Some(member.blame(error));
                }
            }
        }
        match (answered.is_empty(), last) {
            (true, Some(error)) => Err(error),
            (_, Some(_)) => Ok(federated_info(&answered)),
            (_, None) => {
                let info = federated_info(&answered);
                let mut kept = lock(&self.modern_infos);
                if kept.len() >= KEPT_PRINCIPALS {
                    kept.clear();
                }
                kept.insert(Arc::from(principal), info.clone());
                Ok(info)
            }
        }
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
        let upstreams = self.current();
        let results = join_all(
            upstreams
                .members
                .iter()
                .map(|member| member.gateway.initialize(request, session.clone())),
        )
        .await;
        let mut answered = Vec::new();
        let mut last = None;
        for (member, result) in upstreams.members.iter().zip(results) {
            match result {
                Ok(result) => answered.push((
                    member.config.prefix(),
                    super::stdio_gateway::server_info_of(&result),
                )),
                // Started again on the session's first request to it.
                Err(error) => {
                    tracing::warn!(upstream = member.name(), session = %session.session_id(), error = %error.message, "upstream did not initialize");
                    last = Some(member.blame(error));
                }
            }
        }
        if answered.is_empty()
            && let Some(error) = last
        {
            return Err(error);
        }
        lock(&self.sessions).insert(session.session_id().clone(), session.clone());
        Ok(federated_info(&answered).initialize_result(&session))
    }

    fn session_alive(&self, session: &SessionId) -> bool {
        lock(&self.sessions).contains_key(session)
    }

    fn session_closed(&self, session: &SessionId) {
        lock(&self.sessions).remove(session);
        for member in &self.current().members {
            member.gateway.session_closed(session);
        }
    }

    async fn shutdown(&self) {
        let upstreams = self.current();
        join_all(
            upstreams
                .members
                .iter()
                .map(|member| member.gateway.shutdown()),
        )
        .await;
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let upstreams = self.current();
        if let Some(list) = LISTS.iter().find(|(method, ..)| *method == request.method) {
            return self.list(&upstreams, &request, &context, *list).await;
        }
        match request.method.as_str() {
            "tools/call" => Self::call_named(&upstreams, request, context, Entries::Tools).await,
            "prompts/get" => Self::call_named(&upstreams, request, context, Entries::Prompts).await,
            "completion/complete" => self.complete(&upstreams, request, context).await,
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = request
                    .params
                    .as_ref()
                    .and_then(|params| params.get("uri"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorObject::invalid_params("a resource uri is required"))?
                    .to_owned();
                self.by_uri(&upstreams, &uri, request, context).await
            }
            "logging/setLevel" => Self::broadcast(&upstreams, &request, &context).await,
            method => Err(ErrorObject::method_not_found(method)),
        }
    }

    fn parts(&self) -> Vec<PartStatus> {
        self.current()
            .members
            .iter()
            .map(|member| member.status())
            .collect()
    }

    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        let upstreams = self.current();
        join_all(upstreams.members.iter().map(|member| {
            member
                .gateway
                .handle_notification(notification.clone(), session.clone())
        }))
        .await;
    }
}
