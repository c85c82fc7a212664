//! The stdio gateway: any stdio MCP server behind tether's resumable Streamable HTTP.
//!
//! [`StdioGateway`] is a [`Handler`] that runs one child process per legacy session (started
//! by `initialize`, stopped by DELETE, idle expiry, a failure or shutdown) and relays JSON-RPC
//! between the session and the child's stdin and stdout, one message per line. What the
//! child says goes through the request contexts, so it is stored before it is sent and a
//! client that loses its connection resumes without a gap, although the child knows nothing
//! of HTTP.
//!
//! Routing of the child's output: a response goes to the request with its id (the client's
//! ids are passed through unchanged: ids are unique per session and direction); a progress
//! notification to the request that carries its `progressToken`; any other notification and
//! any server→client request to the one request in flight if there is exactly one, otherwise
//! to the session's standalone stream. The client's answers to server→client requests are
//! written back to the child under the child's own ids; cancellations of client requests
//! become `notifications/cancelled` to the child.
//!
//! 2026-07-28 clients have no session: their requests go to one child per principal, started
//! on the principal's first request (`server/discover` included, which answers with the
//! child's own identity and capabilities) with the legacy handshake at the latest 2025
//! version, declaring elicitation, sampling and roots, and reused. Their ids and progress
//! tokens need not be unique across a principal's clients, so the child sees the gateway's
//! (`tether-m<n>`, `tether-p<n>`) and the client its own. A server→client request the child
//! sends while serving one becomes that request's `input_required` result (the client's retry
//! runs the call again, and the child's question is then answered at once from the retry) or,
//! in a task, the task's `inputRequests`, answered by `tasks/update`; every `tools/call` may
//! run as a task. What has no 2026-07-28 equivalent is answered, refused or dropped: the
//! child's `ping` is answered by the gateway, a request other than the three questions gets
//! -32601, a question outside any client request (or beside several) gets an error, a
//! notification outside any request is dropped (docs/CONTRACTS.md#gateway-modern). A principal's child that dies fails its requests in
//! flight, and the next request starts a new one.
//!
//! The rmcp adapter's children are servers in this process instead (`Launch::InProcess`),
//! handed messages as values over a bounded, ordered pipe (`in_process`) and routed by the
//! same code; a legacy session that outlived its in-process server (a restart) gets a new one
//! on its next request, started with the client's own handshake as the session store kept it.
//!
//! A child that exits, writes a line that is not a JSON-RPC message (or longer than
//! [`GatewayConfig::max_line_bytes`]) or does not answer `initialize` in time fails its
//! session: the requests in flight get JSON-RPC errors and the session answers 404 from then
//! on, with a log line saying why. A child that floods its output is slowed to the store's
//! pace: the next line is read only after the previous message was stored. The child's stderr
//! goes to the log, tagged with its session. Children run in their own process group, which
//! is killed when the session ends; if tether itself dies, their stdin reaches end-of-file.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_proto::ids::SessionId;
use tether_proto::jsonrpc::{
    CANCELLED_NOTIFICATION, ErrorObject, INTERNAL_ERROR, Message, Notification, ProgressToken,
    Request, RequestId, Response,
};
use tether_proto::version::ProtocolVersion;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::lock;
use crate::server::{
    ContextError, Handler, LogLevel, RequestContext, ServerInfo, SessionContext, TaskSupport,
};
use crate::stdio;

#[cfg_attr(
    not(feature = "rmcp"),
    expect(
        dead_code,
        reason = "only the rmcp adapter serves on the in-process pipe"
    )
)]
mod in_process;
pub(crate) use in_process::InProcessServer;
#[cfg(feature = "rmcp")]
pub(crate) use in_process::{PipeClosed, ServerInput, ServerOutput, ServerPipe};

/// Default for [`GatewayConfig::initialize_timeout`]: generous for a server started through
/// `npx` or `uvx` on a cold cache.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for [`GatewayConfig::max_line_bytes`]: the SSE event limit of `tether-sse`, so any
/// message the child may write can also be sent.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long a child may take to exit after its stdin closed before its process group is
/// killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What the gateway's children are.
#[derive(Clone)]
pub(crate) enum Launch {
    /// A process running [`GatewayConfig::program`], spoken to over its stdio.
    Process,
    /// A server in this process, handed messages as values (`in_process`).
    #[cfg_attr(
        not(feature = "rmcp"),
        expect(
            dead_code,
            reason = "only the rmcp adapter launches in-process servers"
        )
    )]
    InProcess(Arc<dyn InProcessServer>),
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Process => "Process",
            Self::InProcess(_) => "InProcess",
        })
    }
}

/// The server→client requests a 2026-07-28 client answers, as `input_required` questions.
const QUESTION_METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Messages queued for a child's input before writers wait.
const STDIN_QUEUE: usize = 64;

/// What the gateway runs and how.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The stdio server's program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long the child may take to answer `initialize`.
    pub initialize_timeout: Duration,
    /// The longest line the child may write to stdout.
    pub max_line_bytes: usize,
}

impl GatewayConfig {
    /// Runs `program` with `args`, with the default limits.
    pub fn new(program: impl Into<OsString>, args: impl IntoIterator<Item = OsString>) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().collect(),
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

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
        let child = Child::spawn(&self.launch, &self.config, owner).map_err(|error| {
            tracing::error!(principal, %error, "cannot start the stdio server");
            gateway_error(format!("cannot start the stdio server: {error}"))
        })?;
        let handshake = handshake(ProtocolVersion::LATEST_LEGACY, None);
        let result = match child.initialize(&handshake, None, &self.config).await {
            Ok(result) => result,
            Err(error) => {
                child.stop();
                return Err(error);
            }
        };
        let started = Started {
            child,
            info: server_info_of(&result),
        };
        *slot = Some(started.clone());
        Ok(started)
    }

    /// A new in-process server for legacy session `session`, which outlived its server (this
    /// process restarted): started with the client's own handshake (its `clientInfo` and
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
        if let Some(child) = self.child(id) {
            return Ok(child);
        }
        let child = Child::spawn(&self.launch, &self.config, Owner::Session(session.clone()))
            .map_err(|error| gateway_error(format!("cannot start the server: {error}")))?;
        let version = session.protocol_version();
        let initialized = child
            .initialize(
                &handshake(version, session.client()),
                Some(version),
                &self.config,
            )
            .await;
        if let Err(error) = initialized {
            child.stop();
            return Err(error);
        }
        let mut children = lock(&self.children);
        // Ended (DELETE, expiry) during the handshake: nothing would ever stop it later.
        if reviving.ended.load(Ordering::SeqCst) {
            drop(children);
            child.stop();
            return Err(gateway_error("the session ended"));
        }
        children.insert(id.clone(), Arc::clone(&child));
        tracing::info!(session = %id, "the session's server was started again after a restart");
        Ok(child)
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
fn server_info_of(result: &Value) -> ServerInfo {
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
fn for_legacy_child(request: &Request, id: RequestId, token: Option<&str>) -> Request {
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

/// A JSON-RPC error from the gateway itself.
fn gateway_error(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, message)
}

/// The error for a request of a child that failed for reason `why`.
fn failed(why: &str) -> ErrorObject {
    gateway_error(format!("the stdio server failed: {why}"))
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
        Ok(self.principal_child(principal).await?.info)
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
        let id = session.session_id().clone();
        let child = Child::spawn(&self.launch, &self.config, Owner::Session(session.clone()))
            .map_err(|error| {
                tracing::error!(session = %id, %error, "cannot start the stdio server");
                gateway_error(format!("cannot start the stdio server: {error}"))
            })?;
        lock(&self.children).insert(id, Arc::clone(&child));
        // On failure the transport ends the session, and `session_closed` stops the child.
        child
            .initialize(request, Some(session.protocol_version()), &self.config)
            .await
    }

    fn session_alive(&self, session: &SessionId) -> bool {
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
        if context.era() == crate::server::Era::Modern {
            let started = self.principal_child(context.session().principal()).await?;
            let id = RequestId::String(self.next_child_id("m"));
            let token = context.progress_token().map(|_| self.next_child_id("p"));
            let forwarded = for_legacy_child(&request, id, token.as_deref());
            return started.child.call(forwarded, context, token).await;
        }
        let session = context.session().session_id().clone();
        let child = match (self.child(&session), &self.launch) {
            (Some(child), _) => child,
            (None, Launch::InProcess(_)) => self.revive(context.session()).await?,
            (None, Launch::Process) => {
                return Err(gateway_error("this session's stdio server is not running"));
            }
        };
        child.call(request, context, None).await
    }

    async fn handle_notification(&self, notification: Notification, session: SessionContext) {
        if let Some(child) = self.child(session.session_id()) {
            child.send(Message::Notification(notification)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One child

/// A client request the child has not answered yet.
struct Pending {
    /// `None` for `initialize`, which has no request context.
    context: Option<RequestContext>,
    /// The progress token the child was given in place of the client's (2026-07-28
    /// requests, whose tokens need not be unique across a principal's clients).
    child_token: Option<String>,
    answer: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// Whom a child serves.
#[derive(Clone)]
enum Owner {
    /// One legacy session: what is related to no request goes to its standalone stream.
    Session(SessionContext),
    /// A principal's 2026-07-28 requests: there is no stream outside a request.
    Principal(Arc<str>),
}

/// The session id, or `principal:<name>`, as logs show it.
impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Session(session) => write!(f, "{}", session.session_id()),
            Self::Principal(principal) => write!(f, "principal:{principal}"),
        }
    }
}

#[derive(Default)]
struct Routing {
    pending: HashMap<RequestId, Pending>,
    /// Why the child is dead, once it is.
    dead: Option<String>,
}

/// One session's, or one principal's, stdio server.
struct Child {
    owner: Owner,
    /// Its input queue: a process's stdin, or an in-process server's input.
    input: mpsc::Sender<Message>,
    routing: Mutex<Routing>,
    /// Cancelled to stop the child (the session ended).
    stop: CancellationToken,
    /// Cancelled once the process has exited and been reaped.
    exited: CancellationToken,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("owner", &self.owner.to_string())
            .field("dead", &lock(&self.routing).dead)
            .finish_non_exhaustive()
    }
}

impl Child {
    /// Starts the child as `launch` says, and the tasks that feed its input, read its output
    /// (and a process's stderr), and reap it.
    fn spawn(launch: &Launch, config: &GatewayConfig, owner: Owner) -> std::io::Result<Arc<Self>> {
        let Launch::InProcess(server) = launch else {
            return Self::spawn_process(config, owner);
        };
        let stop = CancellationToken::new();
        let (ours, theirs) = in_process::pipe(STDIN_QUEUE, stop.clone());
        let serving = server.serve(theirs);
        let child = Arc::new(Self::new(owner, ours.input, stop));
        tracing::info!(session = %child.owner, "in-process server started");
        tokio::spawn(Arc::clone(&child).read_output(ours.output));
        tokio::spawn(Arc::clone(&child).reap_in_process(serving));
        Ok(child)
    }

    /// A child of `owner` whose input messages go to `input`, stopped by `stop`.
    fn new(owner: Owner, input: mpsc::Sender<Message>, stop: CancellationToken) -> Self {
        Self {
            owner,
            input,
            routing: Mutex::new(Routing::default()),
            stop,
            exited: CancellationToken::new(),
        }
    }

    /// [`spawn`](Self::spawn) for a process.
    fn spawn_process(config: &GatewayConfig, owner: Owner) -> std::io::Result<Arc<Self>> {
        let mut command = Command::new(&config.program);
        command
            .args(&config.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let mut process = command.spawn()?;
        let (stdin, stdout, stderr) = match (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) {
            (Some(stdin), Some(stdout), Some(stderr)) => (stdin, stdout, stderr),
            _ => return Err(std::io::Error::other("the child's pipes are missing")),
        };
        let (tx, rx) = mpsc::channel(STDIN_QUEUE);
        let child = Arc::new(Self::new(owner, tx, CancellationToken::new()));
        let id = child.owner.to_string();
        tracing::info!(session = %id, pid = process.id(), "stdio server started");
        tokio::spawn(feed_stdin(stdin, rx, child.stop.clone()));
        tokio::spawn(log_stderr(BufReader::new(stderr), id));
        tokio::spawn(Arc::clone(&child).read_stdout(BufReader::new(stdout), config.max_line_bytes));
        tokio::spawn(Arc::clone(&child).reap(process));
        Ok(child)
    }

    fn is_dead(&self) -> bool {
        lock(&self.routing).dead.is_some()
    }

    /// Stops the child: closes its stdin, then kills its process group after a grace period.
    fn stop(&self) {
        let _ = self.die("the session ended".to_owned());
        self.stop.cancel();
    }

    async fn stopped(&self) {
        self.exited.cancelled().await;
    }

    /// Marks the child dead (once) and fails every request it has not answered. Returns
    /// whether it was alive until now.
    fn die(&self, why: String) -> bool {
        let pending = {
            let mut routing = lock(&self.routing);
            if routing.dead.is_some() {
                return false;
            }
            routing.dead = Some(why.clone());
            std::mem::take(&mut routing.pending)
        };
        for (_, pending) in pending {
            let _ = pending.answer.send(Err(failed(&why)));
        }
        true
    }

    /// Fails the session: the child is dead, so is the session (the transport answers 404
    /// from now on, through `session_alive`).
    fn fail(&self, why: String) {
        let session = &self.owner;
        if self.die(why.clone()) {
            tracing::error!(%session, reason = %why, "stdio server failed; ending its session");
        }
        self.stop.cancel();
    }

    /// Queues one message for the child's input (dropped if the child is gone or being
    /// stopped: a child that stops reading cannot hold a writer forever).
    async fn send(&self, message: Message) {
        tokio::select! {
            _ = self.input.send(message) => {}
            () = self.stop.cancelled() => {}
        }
    }

    /// Sends `initialize` and waits for the answer; then `notifications/initialized`, which
    /// the transport consumed. With `negotiated` (a session's version) the request asks for it
    /// and the child must answer with it; without (a principal's child), the request's own
    /// version is asked and any 2025 version the child answers is taken.
    async fn initialize(
        self: &Arc<Self>,
        request: &Request,
        negotiated: Option<ProtocolVersion>,
        config: &GatewayConfig,
    ) -> Result<Value, ErrorObject> {
        let mut forwarded = request.clone();
        let mut params = forwarded.params.take().unwrap_or_else(|| json!({}));
        if let Some(negotiated) = negotiated {
            params["protocolVersion"] = Value::from(negotiated.as_str());
        }
        forwarded.params = Some(params);
        let (tx, rx) = oneshot::channel();
        // Initialize has no request context: register a waiter keyed by its id.
        let waiter = InitializeWaiter::register(self, request.id.clone(), tx);
        self.send(Message::Request(forwarded)).await;
        let answer = tokio::select! {
            answer = rx => match answer {
                Ok(answer) => answer,
                Err(_) => Err(gateway_error("the stdio server exited during initialize")),
            },
            () = tokio::time::sleep(config.initialize_timeout) => {
                let why = format!("no answer to initialize within {:?}", config.initialize_timeout);
                self.fail(why.clone());
                Err(failed(&why))
            }
        };
        drop(waiter);
        let result = answer?;
        let version = result.get("protocolVersion").and_then(Value::as_str);
        let acceptable = match negotiated {
            Some(negotiated) => version == Some(negotiated.as_str()),
            None => version.is_some_and(|v| ProtocolVersion::parse_legacy(v).is_ok()),
        };
        if !acceptable {
            let wanted = negotiated.map_or_else(
                || "a 2025 version".to_owned(),
                |negotiated| negotiated.to_string(),
            );
            let why =
                format!("it answered initialize with protocol version {version:?}, not {wanted}");
            self.fail(why.clone());
            return Err(failed(&why));
        }
        self.send(Message::Notification(Notification::new(
            "notifications/initialized",
            None,
        )))
        .await;
        Ok(result)
    }

    /// Relays one client request and waits for the child's answer. On cancellation the
    /// child is told, and the (discarded) result is an error. `child_token` is the progress
    /// token the request carries in place of the client's, if it was replaced.
    async fn call(
        &self,
        request: Request,
        context: RequestContext,
        child_token: Option<String>,
    ) -> Result<Value, ErrorObject> {
        let id = request.id.clone();
        let (tx, rx) = oneshot::channel();
        {
            let mut routing = lock(&self.routing);
            if let Some(why) = &routing.dead {
                return Err(failed(why));
            }
            routing.pending.insert(
                id.clone(),
                Pending {
                    context: Some(context.clone()),
                    child_token,
                    answer: tx,
                },
            );
        }
        let sent = async {
            self.send(Message::Request(request)).await;
            rx.await
        };
        tokio::select! {
            answer = sent => match answer {
                Ok(answer) => answer,
                Err(_) => Err(gateway_error("the stdio server stopped")),
            },
            () = context.cancelled() => {
                lock(&self.routing).pending.remove(&id);
                let params = json!({"requestId": id, "reason": "cancelled by the client"});
                self.send(Message::Notification(Notification::new(CANCELLED_NOTIFICATION, Some(params)))).await;
                Err(gateway_error("cancelled"))
            }
        }
    }

    /// Reads the child's stdout line by line and routes each message; the end of stdout (or
    /// a bad line) is the end of the child.
    async fn read_stdout(self: Arc<Self>, mut stdout: impl AsyncBufRead + Unpin, max: usize) {
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdio::read_line(&mut stdout, &mut line, max).await {
                Ok(true) => {}
                Ok(false) => {
                    // Usually the process exited; one that only closed stdout is stopped.
                    self.fail("its output ended".to_owned());
                    return;
                }
                Err(error) => {
                    self.fail(format!("its output: {error}"));
                    return;
                }
            }
            match stdio::parse_line(&line) {
                None => {}
                Some(Ok(message)) => self.route(message).await,
                Some(Err(error)) => {
                    let shown: String = String::from_utf8_lossy(line.trim_ascii())
                        .chars()
                        .take(200)
                        .collect();
                    self.fail(format!(
                        "it wrote a line that is not JSON-RPC ({error}): {shown:?}"
                    ));
                    return;
                }
            }
        }
    }

    /// Routes what an in-process server says; the end of its output is the end of the
    /// child.
    async fn read_output(self: Arc<Self>, mut output: in_process::GatewayOutput) {
        while let Some(message) = output.recv().await {
            self.route(message).await;
        }
        self.fail("its output ended".to_owned());
    }

    /// Delivers one message from the child.
    async fn route(self: &Arc<Self>, message: Message) {
        match message {
            Message::Response(response) => self.answer(response),
            Message::Notification(notification) => {
                let target = self.target(notification.progress_token().as_ref());
                let mut params = notification.params.unwrap_or(Value::Null);
                // Awaited: returns once the line is queued for its commit (store/pipeline.rs),
                // so the next line is read while earlier ones commit, and a full pipeline
                // window holds the child back (backpressure).
                let sent = match (&target, &self.owner) {
                    (Some(context), _) => {
                        if let (Some(token), Value::Object(params)) =
                            (context.progress_token(), &mut params)
                            && params.contains_key("progressToken")
                        {
                            // The client's own token, where the child was given another.
                            params.insert("progressToken".into(), json!(token));
                        }
                        relay_notification(context, &notification.method, params).await
                    }
                    (None, Owner::Session(session)) => {
                        session.notify(&notification.method, params).await
                    }
                    (None, Owner::Principal(_)) => {
                        tracing::debug!(session = %self.owner, method = %notification.method, "a notification outside any request has no 2026-07-28 stream: dropped");
                        Ok(())
                    }
                };
                if let Err(error) = sent {
                    tracing::debug!(session = %self.owner, %error, method = %notification.method, "notification from the stdio server dropped");
                }
            }
            Message::Request(request) => {
                let target = self.target(None);
                let child = Arc::clone(self);
                // Spawned: the client may take its time to answer, and the child's other
                // messages must keep flowing meanwhile.
                tokio::spawn(async move {
                    let params = request.params.unwrap_or(Value::Null);
                    let modern = matches!(child.owner, Owner::Principal(_));
                    let answer = match (&target, &child.owner) {
                        // 2026-07-28 has no server→client ping: the gateway is the peer that
                        // is alive.
                        _ if modern && request.method == "ping" => Ok(json!({})),
                        _ if modern && !QUESTION_METHODS.contains(&request.method.as_str()) => Err(
                            ContextError::Remote(ErrorObject::method_not_found(&request.method)),
                        ),
                        (Some(context), _) => context.request(&request.method, params).await,
                        (None, Owner::Session(session)) => {
                            session.request(&request.method, params).await
                        }
                        (None, Owner::Principal(_)) => Err(ContextError::Remote(gateway_error(
                            "a request outside any client request (or beside several) has no \
                             2026-07-28 equivalent",
                        ))),
                    };
                    let response = match answer {
                        Ok(result) => Response::success(request.id, result),
                        Err(ContextError::Remote(error)) => {
                            Response::error(Some(request.id), error)
                        }
                        Err(error) => Response::error(
                            Some(request.id),
                            gateway_error(format!("no answer from the client: {error}")),
                        ),
                    };
                    child.send(Message::Response(response)).await;
                });
            }
        }
    }

    /// Hands the child's response to the request waiting for it (or to initialize).
    fn answer(&self, response: Response) {
        let Some(id) = response.id().cloned() else {
            tracing::warn!(session = %self.owner, "the stdio server sent a response without an id");
            return;
        };
        let waiter = lock(&self.routing).pending.remove(&id);
        let result = match response {
            Response::Result(result) => Ok(result.result),
            Response::Error(error) => Err(error.error),
        };
        match waiter {
            Some(pending) => {
                let _ = pending.answer.send(result);
            }
            None => {
                tracing::debug!(session = %self.owner, request = %id, "response to no pending request dropped");
            }
        }
    }

    /// The request a related message belongs to: the one whose token (as the child knows
    /// it) is `token`, else the only one in flight; `None` for the standalone stream.
    fn target(&self, token: Option<&ProgressToken>) -> Option<RequestContext> {
        let routing = lock(&self.routing);
        if let Some(token) = token
            && let Some(context) = routing.pending.values().find_map(|pending| {
                let context = pending.context.as_ref()?;
                let known = match &pending.child_token {
                    Some(child) => matches!(token, ProgressToken::String(t) if t == child),
                    None => context.progress_token() == Some(token),
                };
                known.then_some(context)
            })
        {
            return Some(context.clone());
        }
        let mut contexts = routing
            .pending
            .values()
            .filter_map(|pending| pending.context.as_ref());
        match (contexts.next(), contexts.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }

    /// Waits for the process to exit, or stops it: stdin is closed first (a stdio server
    /// exits on end-of-file), then the whole process group is killed after a grace period.
    async fn reap(self: Arc<Self>, mut process: tokio::process::Child) {
        let id = self.owner.to_string();
        let status = tokio::select! {
            status = process.wait() => status,
            () = self.stop.cancelled() => {
                match tokio::time::timeout(EXIT_GRACE, process.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        kill_group(&process);
                        let _ = process.start_kill();
                        process.wait().await
                    }
                }
            }
        };
        // Whatever the child left behind in its group goes with it.
        kill_group(&process);
        match status {
            Ok(status) => tracing::info!(session = %id, %status, "stdio server exited"),
            Err(error) => tracing::warn!(session = %id, %error, "could not reap the stdio server"),
        }
        let _ = self.die("it exited".to_owned());
        self.exited.cancel();
    }
}

impl Child {
    /// [`reap`](Self::reap) for an in-process server: waits for its task to end, or stops it
    /// (its input is closed first, which ends an MCP server's loop; it is aborted after the
    /// grace period).
    async fn reap_in_process(self: Arc<Self>, mut serving: tokio::task::JoinHandle<()>) {
        let ended = tokio::select! {
            ended = &mut serving => ended,
            () = self.stop.cancelled() => {
                match tokio::time::timeout(EXIT_GRACE, &mut serving).await {
                    Ok(ended) => ended,
                    Err(_) => {
                        serving.abort();
                        serving.await
                    }
                }
            }
        };
        match ended {
            Ok(()) => tracing::info!(session = %self.owner, "in-process server ended"),
            Err(error) => tracing::warn!(session = %self.owner, %error, "in-process server failed"),
        }
        let _ = self.die("it ended".to_owned());
        self.exited.cancel();
    }
}

/// A notification of the child's, related to `context`'s request. A log message to a
/// 2026-07-28 request goes through [`RequestContext::log`], so the envelope's `logLevel`
/// decides (the child never heard of it).
async fn relay_notification(
    context: &RequestContext,
    method: &str,
    params: Value,
) -> Result<(), ContextError> {
    if method == "notifications/message"
        && context.era() == crate::server::Era::Modern
        && let Some(level) = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(|level| level.parse::<LogLevel>().ok())
    {
        let logger = params.get("logger").and_then(Value::as_str);
        let data = params.get("data").cloned().unwrap_or(Value::Null);
        return context.log(level, logger, data).await;
    }
    context.notify(method, params).await
}

/// Kills the child's process group (it leads its own, see `spawn`).
fn kill_group(process: &tokio::process::Child) {
    #[cfg(unix)]
    if let Some(pid) = process.id().and_then(|pid| i32::try_from(pid).ok()) {
        let _ =
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
    #[cfg(not(unix))]
    let _ = process;
}

/// Registers the waiter for the child's answer to `initialize`, which has no
/// [`RequestContext`]; dropping it unregisters it.
struct InitializeWaiter {
    child: Arc<Child>,
    id: RequestId,
}

impl InitializeWaiter {
    fn register(
        child: &Arc<Child>,
        id: RequestId,
        answer: oneshot::Sender<Result<Value, ErrorObject>>,
    ) -> Self {
        lock(&child.routing).pending.insert(
            id.clone(),
            Pending {
                context: None,
                child_token: None,
                answer,
            },
        );
        Self {
            child: Arc::clone(child),
            id,
        }
    }
}

impl Drop for InitializeWaiter {
    fn drop(&mut self) {
        lock(&self.child.routing).pending.remove(&self.id);
    }
}

/// Writes queued messages to the child's stdin, one per line, until the queue closes or the
/// child is stopped; then closes stdin, which tells a stdio server to exit.
async fn feed_stdin(
    mut stdin: impl tokio::io::AsyncWrite + Unpin,
    mut messages: mpsc::Receiver<Message>,
    stop: CancellationToken,
) {
    let mut line = Vec::new();
    loop {
        let message = tokio::select! {
            message = messages.recv() => message,
            () = stop.cancelled() => None,
        };
        let Some(message) = message else { break };
        line.clear();
        message.write_to(&mut line);
        line.push(b'\n');
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Logs the child's stderr, one line per record, tagged with its session (or principal).
async fn log_stderr(mut stderr: impl AsyncBufRead + Unpin, session: String) {
    let mut line = Vec::new();
    loop {
        line.clear();
        match stderr.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(line.trim_ascii_end());
                tracing::info!(target: "tether::gateway::stderr", session = %session, "{text}");
            }
        }
    }
}
