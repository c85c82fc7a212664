//! One child of the gateway: a stdio server process (or an in-process server) with its
//! pending requests, the routing of what it writes back to the request or session it
//! belongs to, its stdin queue and stderr log, and how it is stopped.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
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
use crate::server::{ContextError, LogLevel, RequestContext, SessionContext};
use crate::stdio;

use super::config::{EXIT_GRACE, GatewayConfig, Launch, QUESTION_METHODS, STDIN_QUEUE};
use super::in_process;

/// A JSON-RPC error from the gateway itself.
pub(super) fn gateway_error(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, message)
}

/// The error for a request refused because a limit (`max_children`, `max_in_flight`) is
/// reached: `data.reason` `busy`, so a client can tell it from a failure and try later.
pub(super) fn busy(message: impl Into<String>) -> ErrorObject {
    gateway_error(message).with_data(json!({"reason": "busy"}))
}

/// The error for a request of a child that failed for reason `why`.
pub(super) fn failed(why: &str) -> ErrorObject {
    gateway_error(format!("the stdio server failed: {why}"))
}

/// A client request the child has not answered yet.
pub(super) struct Pending {
    /// `None` for `initialize`, which has no request context.
    context: Option<RequestContext>,
    /// The progress token the child was given in place of the client's (2026-07-28
    /// requests, whose tokens need not be unique across a principal's clients).
    child_token: Option<String>,
    answer: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// Whom a child serves.
#[derive(Clone)]
pub(super) enum Owner {
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
pub(super) struct Routing {
    pending: HashMap<RequestId, Pending>,
    /// Why the child is dead, once it is.
    dead: Option<String>,
}

/// One session's, or one principal's, stdio server.
pub(super) struct Child {
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
    pub(super) fn spawn(
        launch: &Launch,
        config: &GatewayConfig,
        owner: Owner,
    ) -> std::io::Result<Arc<Self>> {
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
    pub(super) fn new(owner: Owner, input: mpsc::Sender<Message>, stop: CancellationToken) -> Self {
        Self {
            owner,
            input,
            routing: Mutex::new(Routing::default()),
            stop,
            exited: CancellationToken::new(),
        }
    }

    /// [`spawn`](Self::spawn) for a process.
    pub(super) fn spawn_process(
        config: &GatewayConfig,
        owner: Owner,
    ) -> std::io::Result<Arc<Self>> {
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

    pub(super) fn is_dead(&self) -> bool {
        lock(&self.routing).dead.is_some()
    }

    /// Stops the child: closes its stdin, then kills its process group after a grace period.
    pub(super) fn stop(&self) {
        let _ = self.die("the session ended".to_owned());
        self.stop.cancel();
    }

    pub(super) async fn stopped(&self) {
        self.exited.cancelled().await;
    }

    /// Marks the child dead (once) and fails every request it has not answered. Returns
    /// whether it was alive until now.
    pub(super) fn die(&self, why: String) -> bool {
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
    pub(super) fn fail(&self, why: String) {
        let session = &self.owner;
        if self.die(why.clone()) {
            tracing::error!(%session, reason = %why, "stdio server failed");
        }
        self.stop.cancel();
    }

    /// Queues one message for the child's input (dropped if the child is gone or being
    /// stopped: a child that stops reading cannot hold a writer forever).
    pub(super) async fn send(&self, message: Message) {
        tokio::select! {
            _ = self.input.send(message) => {}
            () = self.stop.cancelled() => {}
        }
    }

    /// Sends `initialize` and waits for the answer; then `notifications/initialized`, which
    /// the transport consumed. With `negotiated` (a session's version) the request asks for it
    /// and the child must answer with it; without (a principal's child), the request's own
    /// version is asked and any 2025 version the child answers is taken.
    pub(super) async fn initialize(
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
    pub(super) async fn call(
        &self,
        mut request: Request,
        context: RequestContext,
        child_token: Option<String>,
    ) -> Result<Value, ErrorObject> {
        // The child continues the trace from this request's server span, so one trace runs
        // from the caller through the gateway into the tool.
        crate::telemetry::inject_meta(&tracing::Span::current(), &mut request.params);
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
    pub(super) async fn read_stdout(
        self: Arc<Self>,
        mut stdout: impl AsyncBufRead + Unpin,
        max: usize,
    ) {
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
                    self.fail(format!("its output: {}", crate::error_chain(&error)));
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
    pub(super) async fn read_output(self: Arc<Self>, mut output: in_process::GatewayOutput) {
        while let Some(message) = output.recv().await {
            self.route(message).await;
        }
        self.fail("its output ended".to_owned());
    }

    /// Delivers one message from the child.
    pub(super) async fn route(self: &Arc<Self>, message: Message) {
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
                    tracing::debug!(session = %self.owner, error = %crate::error_chain(&error), method = %notification.method, "notification from the stdio server dropped");
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
    pub(super) fn answer(&self, response: Response) {
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
    pub(super) fn target(&self, token: Option<&ProgressToken>) -> Option<RequestContext> {
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
    pub(super) async fn reap(self: Arc<Self>, mut process: tokio::process::Child) {
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
            Err(error) => {
                tracing::warn!(session = %id, error = %crate::error_chain(&error), "could not reap the stdio server")
            }
        }
        let _ = self.die("it exited".to_owned());
        self.exited.cancel();
    }
}

impl Child {
    /// [`reap`](Self::reap) for an in-process server: waits for its task to end, or stops it
    /// (its input is closed first, which ends an MCP server's loop; it is aborted after the
    /// grace period).
    pub(super) async fn reap_in_process(self: Arc<Self>, mut serving: tokio::task::JoinHandle<()>) {
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
            Err(error) => {
                tracing::warn!(session = %self.owner, error = %crate::error_chain(&error), "in-process server failed")
            }
        }
        let _ = self.die("it ended".to_owned());
        self.exited.cancel();
    }
}

/// A notification of the child's, related to `context`'s request. A log message to a
/// 2026-07-28 request goes through [`RequestContext::log`], so the envelope's `logLevel`
/// decides (the child never heard of it).
pub(super) async fn relay_notification(
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
pub(super) fn kill_group(process: &tokio::process::Child) {
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
pub(super) struct InitializeWaiter {
    child: Arc<Child>,
    id: RequestId,
}

impl InitializeWaiter {
    pub(super) fn register(
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
pub(super) async fn feed_stdin(
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
pub(super) async fn log_stderr(mut stderr: impl AsyncBufRead + Unpin, session: String) {
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
