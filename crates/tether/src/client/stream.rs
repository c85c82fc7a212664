//! One task per server stream (each POST's SSE response, the standalone GET stream): a short
//! driver loop around [`Reconnect`], and [`MessageStream`], the application's end of it.
//!
//! The task decodes SSE with [`Decoder`], skips comments (they only count as liveness) and
//! priming events (empty data is never JSON-parsed, T84), drops events whose id it has seen
//! recently (a bounded window: peers' ids are opaque and some replay the `Last-Event-ID`
//! event itself), and hands each message to the application through a bounded channel. When
//! the connection is lost before the stream is finished it asks the machine when and how to
//! reconnect (GET + `Last-Event-ID`); it is the only task touching its machine, so at most one
//! reconnect per stream is ever in flight (docs/DESIGN.md#property-6).
//!
//! # Process, then commit
//!
//! Two cursors exist per stream. The *received* cursor is the machine's: the id of the last
//! event handed to the in-process channel; in-process reconnects resume from it, which loses
//! nothing because the channel is in memory. The *committed* cursor is the application's: it
//! moves to message k's id when the application calls [`MessageStream::next`] again (having
//! processed k) or [`MessageStream::ack`]s it, and every commit that changes it fires the
//! resumption-token callback. A crash while processing k therefore leaves a token that
//! resumes before k, and k is delivered again (docs/DESIGN.md#property-5). An id that carries no
//! message (a priming event) is committed as soon as the application asks for the next
//! message past it.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use reqwest::Response;
use reqwest::header::CONTENT_TYPE;
use serde_json::json;
use tether_proto::jsonrpc::{Message, Request, RequestId, Response as RpcResponse};
use tether_proto::reconnect::{
    Action, Event as MachineEvent, Failure, GiveUpReason, Reconnect, StreamKind,
};
use tether_proto::version::ProtocolVersion;
use tether_sse::{Decoder, Item, ResponseAction, classify_response};
use tokio::sync::mpsc;

use super::config::TokenCallback;
use super::error::Error;
use super::retry::rng;
use super::session::{Client, Inner};
use super::token::ResumptionToken;
use crate::telemetry::Operation;

/// What the stream task hands to the application's end, in stream order.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "almost every delivery is a message; boxing it would cost an allocation per \
              message to shrink the rare cursor and error deliveries"
)]
pub(crate) enum Delivery {
    /// A message, with the id of the event that carried it (`None`: no id, or a JSON body).
    Message {
        message: Message,
        event_id: Option<String>,
    },
    /// An event id that carried no message (a priming event, an id-only block).
    Cursor(String),
    /// The call runs as this task from now on (its `CreateTaskResult` arrived).
    Task(String),
    /// The stream failed; nothing follows.
    Failed(Error),
}

/// The messages of one server stream, in order, each once: for a request, the related server
/// messages (progress, log messages, server requests) and then its final response; for the
/// standalone stream, server-initiated messages until the client closes.
///
/// Commit rule: the message returned by [`next`](Self::next) is committed when `next` is
/// called again, or at once by [`ack`](Self::ack). Dropping the stream commits nothing.
///
/// Server→client requests are answered by the client where it can (see
/// [`ClientConfig::request_handler`](super::ClientConfig::request_handler)): `ping` always
/// (and still yielded), others by the configured handler (then committed once answered and
/// not yielded). Any other request is yielded for [`Client::respond`](super::Client::respond).
pub struct MessageStream {
    client: Client,
    rx: mpsc::Receiver<Delivery>,
    request_id: Option<RequestId>,
    session_id: Option<String>,
    protocol_version: Option<ProtocolVersion>,
    on_token: Option<TokenCallback>,
    uncommitted: Option<String>,
    committed: Option<String>,
    pub(super) task_id: Option<String>,
    /// The request as telemetry sees it, told its outcome when the final response or the
    /// stream's error arrives.
    operation: Option<Operation>,
}

impl std::fmt::Debug for MessageStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStream")
            .field("request_id", &self.request_id)
            .field("session_id", &self.session_id)
            .field("committed", &self.committed)
            .finish_non_exhaustive()
    }
}

impl MessageStream {
    pub(crate) fn new(
        client: Client,
        rx: mpsc::Receiver<Delivery>,
        request_id: Option<RequestId>,
        session_id: Option<String>,
        protocol_version: Option<ProtocolVersion>,
        on_token: Option<TokenCallback>,
    ) -> Self {
        Self {
            client,
            rx,
            request_id,
            session_id,
            protocol_version,
            on_token,
            uncommitted: None,
            committed: None,
            task_id: None,
            operation: None,
        }
    }

    /// This stream, answering the request that `operation` is.
    pub(crate) fn with_operation(mut self, operation: Operation) -> Self {
        self.operation = Some(operation);
        self
    }

    /// Commits the previously returned message, then waits for the next one. `None` once the
    /// stream is finished (after the final response, or after an error).
    ///
    /// A server request is answered here before `next` returns (or goes on past it): dropping
    /// the future while a request handler runs loses that request (it is neither answered
    /// nor committed in this process; a resume from the last token delivers it again).
    pub async fn next(&mut self) -> Option<Result<Message, Error>> {
        self.ack();
        loop {
            match self.rx.recv().await? {
                Delivery::Cursor(id) => self.commit(id),
                Delivery::Task(task) => {
                    // The token names the task as soon as it exists, before any event.
                    self.task_id = Some(task);
                    if let (Some(callback), Some(token)) = (&self.on_token, self.resumption_token())
                    {
                        callback(&token);
                    }
                }
                Delivery::Message { message, event_id } => {
                    if let Message::Request(request) = &message
                        && answer_server_request(&self.client, request).await
                    {
                        // Answered by the handler: processed, so committed; not yielded.
                        if let Some(id) = event_id {
                            self.commit(id);
                        }
                        continue;
                    }
                    if let Message::Response(response) = &message
                        && self.request_id.is_some()
                        && response.id() == self.request_id.as_ref()
                        && let Some(operation) = self.operation.take()
                    {
                        operation.answered(Some(response));
                    }
                    self.uncommitted = event_id;
                    return Some(Ok(message));
                }
                Delivery::Failed(error) => {
                    if let Some(operation) = self.operation.take() {
                        operation.failed(error.kind_name());
                    }
                    self.rx.close();
                    return Some(Err(error));
                }
            }
        }
    }

    /// Commits the message last returned by [`next`](Self::next) now, firing the
    /// resumption-token callback if its event had an id.
    pub fn ack(&mut self) {
        if let Some(id) = self.uncommitted.take() {
            self.commit(id);
        }
    }

    /// Reads to the end and returns the final response, committing every message on the way
    /// (the related messages in between are dropped; use [`next`](Self::next) to see them).
    ///
    /// # Errors
    ///
    /// The stream's error, or [`Error::NoResponse`] if it ended without one.
    pub async fn response(mut self) -> Result<RpcResponse, Error> {
        let mut last = None;
        while let Some(item) = self.next().await {
            if let Message::Response(response) = item? {
                last = Some(response);
            }
        }
        last.ok_or(Error::NoResponse)
    }

    /// The event id of the message last returned by [`next`](Self::next), until it is
    /// committed.
    pub(super) fn pending_event_id(&self) -> Option<&str> {
        self.uncommitted.as_deref()
    }

    /// Starts the committed cursor at a resumed token's event id, so that
    /// [`resumption_token`](Self::resumption_token) has it before the first new commit.
    pub(crate) fn with_committed(mut self, last_event_id: &str) -> Self {
        if !last_event_id.is_empty() {
            self.committed = Some(last_event_id.to_owned());
        }
        self
    }

    /// Starts the stream as task `task`'s (a resumed task call).
    pub(crate) fn with_task(mut self, task: &str) -> Self {
        self.task_id = Some(task.to_owned());
        self
    }

    /// The request this stream answers; `None` for the standalone stream.
    #[must_use]
    pub fn request_id(&self) -> Option<&RequestId> {
        self.request_id.as_ref()
    }

    /// The token for the last committed event id, if any event id was committed.
    #[must_use]
    pub fn resumption_token(&self) -> Option<ResumptionToken> {
        if self.committed.is_none() && self.task_id.is_none() {
            return None;
        }
        Some(ResumptionToken {
            session_id: self.session_id.clone(),
            protocol_version: self.protocol_version,
            request_id: self.request_id.clone(),
            last_event_id: self.committed.clone().unwrap_or_default(),
            task_id: self.task_id.clone(),
        })
    }

    fn commit(&mut self, id: String) {
        if self.committed.as_ref() == Some(&id) {
            return;
        }
        self.committed = Some(id);
        if let (Some(callback), Some(token)) = (&self.on_token, self.resumption_token()) {
            callback(&token);
        }
    }
}

/// A bounded set of recently seen event ids, oldest evicted first.
struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
    cap: usize,
}

impl Seen {
    fn new(cap: usize) -> Self {
        Self {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if self.set.insert(id.to_owned()) {
            self.order.push_back(id.to_owned());
            if self.order.len() > self.cap
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }
}

/// One live connection of a stream.
struct Conn {
    response: Response,
    decoder: Decoder,
    /// The last event id dispatched on this connection: an event whose id differs carried an
    /// `id` field (the decoder starts empty per connection, so a replayed event is compared
    /// against the seen window, not against the previous connection's cursor).
    prev_id: String,
}

impl Conn {
    fn new(response: Response) -> Self {
        Self {
            response,
            decoder: Decoder::new(),
            prev_id: String::new(),
        }
    }
}

/// Whether the driver goes on.
enum Flow {
    Continue,
    Stop,
}

/// The stream task.
pub(crate) struct Driver {
    inner: Arc<Inner>,
    machine: Reconnect,
    request_id: Option<RequestId>,
    generation: u64,
    tx: mpsc::Sender<Delivery>,
    seen: Seen,
    /// Why the last attempt was refused, for when the machine gives up with `Fatal`.
    refusal: Option<Error>,
    got_final: bool,
    /// The request of a POST stream that may be sent again ([`resending`](Self::resending)).
    resend: Option<Vec<u8>>,
}

impl Driver {
    /// A driver for a POST answered with an SSE stream, or for the standalone stream
    /// (`request_id` `None`, `first` `None`).
    pub(crate) fn new(
        inner: Arc<Inner>,
        request_id: Option<RequestId>,
        generation: u64,
        tx: mpsc::Sender<Delivery>,
    ) -> Self {
        let now = Instant::now();
        let config = inner.config.reconnect;
        let machine = if request_id.is_some() {
            Reconnect::post_stream(config, rng(), now)
        } else {
            Reconnect::standalone(config, rng(), now)
        };
        let seen = Seen::new(inner.config.dedup_window);
        Self {
            inner,
            machine,
            request_id,
            generation,
            tx,
            seen,
            refusal: None,
            got_final: false,
            resend: None,
        }
    }

    /// Lets this POST stream send `request` (its body) again if the stream is lost before any
    /// event id reached it; the caller passes one only for a server that answers a request
    /// sent again with its first stream (`transport::Session::reattaches`). Without one such
    /// a loss stays [`Error::NotResumable`].
    pub(crate) fn resending(mut self, request: Option<Vec<u8>>) -> Self {
        if request.is_some() {
            self.machine = self.machine.resend_before_first_id();
            self.resend = request;
        }
        self
    }

    /// A driver resuming the POST stream of `request_id` from a persisted cursor (a
    /// [`ResumptionToken`] in a new process): its first step is GET + `Last-Event-ID`.
    pub(crate) fn resuming(
        inner: Arc<Inner>,
        request_id: RequestId,
        last_event_id: &str,
        generation: u64,
        tx: mpsc::Sender<Delivery>,
    ) -> Self {
        let mut driver = Self::new(inner, Some(request_id), generation, tx);
        driver.machine = Reconnect::resume(
            StreamKind::Post,
            last_event_id,
            driver.inner.config.reconnect,
            rng(),
            Instant::now(),
        );
        driver
    }

    /// Runs until the stream is finished, failed, or its [`MessageStream`] was dropped.
    pub(crate) async fn run(mut self, first: Option<Response>) {
        let mut conn = first.map(Conn::new);
        let shutdown = self.inner.shutdown.clone();
        // The application dropping its end stops the task (and with it the connection).
        let consumer = self.tx.clone();
        loop {
            let flow = tokio::select! {
                flow = self.step(&mut conn) => flow,
                () = consumer.closed() => Flow::Stop,
                () = shutdown.cancelled() => Flow::Stop,
            };
            if let Flow::Stop = flow {
                return;
            }
        }
    }

    async fn step(&mut self, conn: &mut Option<Conn>) -> Flow {
        match self.machine.poll(Instant::now()) {
            Action::Wait { until } => {
                tokio::time::sleep_until(until.into()).await;
                Flow::Continue
            }
            Action::Connect { last_event_id } => {
                self.inner.emit(super::events::ClientEvent::Reconnecting {
                    request_id: self.request_id.clone(),
                    last_event_id: last_event_id.clone(),
                    failures: self.machine.failures(),
                });
                // An event of the request's span (docs/TELEMETRY.md).
                tracing::info!(
                    tether.reconnect.failures = self.machine.failures(),
                    tether.resume.last_event_id = last_event_id.as_deref(),
                    "tether.reconnect"
                );
                *conn = self.connect(last_event_id).await;
                Flow::Continue
            }
            // This driver reports every attempt's outcome before polling again.
            Action::Connecting => Flow::Continue,
            Action::Streaming => match conn {
                Some(live) => {
                    let flow = self.read(live).await;
                    if !matches!(self.machine.poll(Instant::now()), Action::Streaming) {
                        *conn = None;
                    }
                    flow
                }
                None => {
                    self.machine.on_failure(Instant::now(), Failure::Network);
                    Flow::Continue
                }
            },
            Action::Done => {
                if self.machine.kind() == StreamKind::Post && !self.got_final {
                    // 204 on a resume: the server will not send the response.
                    self.fail(Error::NotResumable).await;
                }
                Flow::Stop
            }
            Action::GiveUp(reason) => self.give_up(reason).await,
        }
    }

    async fn give_up(&mut self, reason: GiveUpReason) -> Flow {
        let standalone = self.machine.kind() == StreamKind::Standalone;
        let error = match reason {
            GiveUpReason::SessionExpired => {
                if let Err(error) = self.inner.reinitialize(self.generation).await {
                    tracing::warn!(error = %crate::error_chain(&error), "re-initialization failed");
                }
                if standalone {
                    // The standalone stream belongs to the session, not to a request: carry
                    // on with the new session's.
                    let generation = self.inner.transport.session().generation;
                    let tx = self.tx.clone();
                    *self = Self::new(Arc::clone(&self.inner), None, generation, tx);
                    return Flow::Continue;
                }
                Error::SessionExpired
            }
            GiveUpReason::NotResumable if standalone => Error::NoStandaloneStream,
            GiveUpReason::NotResumable => Error::NotResumable,
            GiveUpReason::BudgetExhausted { attempts, elapsed } => {
                Error::BudgetExhausted { attempts, elapsed }
            }
            GiveUpReason::Fatal { status } => self.refusal.take().unwrap_or(Error::Status {
                status,
                body: String::new(),
            }),
            other => Error::Protocol(other.to_string()),
        };
        self.fail(error).await;
        Flow::Stop
    }

    async fn fail(&mut self, error: Error) {
        let _ = self.tx.send(Delivery::Failed(error)).await;
    }

    /// One connection attempt: GET, with `Last-Event-ID` when the machine has a cursor; for a
    /// POST stream without one, its request sent again.
    async fn connect(&mut self, last_event_id: Option<String>) -> Option<Conn> {
        if self.machine.kind() == StreamKind::Post && last_event_id.is_none() {
            return self.send_again().await;
        }
        if self.inner.transport.session().generation != self.generation {
            // Another stream found the session gone and replaced it; this stream's events
            // belonged to the old session.
            self.machine
                .on_failure(Instant::now(), status_failure(404, None));
            return None;
        }
        let deadline = self.machine.idle_deadline();
        let result = tokio::select! {
            result = self.inner.transport.get(last_event_id.as_deref()) => result,
            () = sleep_until(deadline) => Err(Error::Timeout),
        };
        let now = Instant::now();
        let response = match result {
            Ok((response, _)) => response,
            Err(Error::Timeout) => {
                self.machine.on_failure(now, Failure::Timeout);
                return None;
            }
            Err(_) => {
                self.machine.on_failure(now, Failure::Network);
                return None;
            }
        };
        self.open(response).await
    }

    /// A POST stream lost before any event id, reconnected by sending its request again: the
    /// server answers with the stream already answering it, from its start (replayed events
    /// already delivered are dropped as seen). A 404 has made `Inner::post` re-initialize
    /// and send it on the new session, where it runs afresh; 429 and 503 it waits out.
    async fn send_again(&mut self) -> Option<Conn> {
        let Some(request) = self.resend.clone() else {
            // The machine asks for this only when `resending` allowed it.
            self.machine
                .on_failure(Instant::now(), status_failure(405, None));
            return None;
        };
        let deadline = self.machine.idle_deadline();
        let result = tokio::select! {
            result = self.inner.post(request) => result,
            () = sleep_until(deadline) => Err(Error::Timeout),
        };
        let now = Instant::now();
        match result {
            Ok((response, session)) => {
                self.generation = session.generation;
                self.open(response).await
            }
            Err(Error::Timeout) => {
                self.machine.on_failure(now, Failure::Timeout);
                None
            }
            Err(Error::Network(_)) => {
                self.machine.on_failure(now, Failure::Network);
                None
            }
            Err(Error::SessionExpired) => {
                self.machine.on_failure(now, status_failure(404, None));
                None
            }
            Err(refused) => {
                // Refused for a reason that sending again cannot fix (401, 400, a budget run
                // out on 429/503): the call fails with it.
                self.refusal = Some(refused);
                self.machine.on_failure(now, status_failure(400, None));
                None
            }
        }
    }

    /// Reads the answer to a connection attempt: a live stream, or a failure for the machine.
    async fn open(&mut self, response: Response) -> Option<Conn> {
        let now = Instant::now();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        match classify_response(status, content_type) {
            ResponseAction::ReadStream => {
                self.machine.on_connected(now);
                self.inner.emit(super::events::ClientEvent::Connected {
                    request_id: self.request_id.clone(),
                });
                Some(Conn::new(response))
            }
            ResponseAction::StopReconnecting => {
                self.machine.on_failure(now, status_failure(204, None));
                None
            }
            ResponseAction::Fail(_) if status == 200 => {
                self.refusal = Some(Error::Protocol(format!(
                    "stream answered with content type {content_type:?}"
                )));
                self.machine.on_failure(now, status_failure(200, None));
                None
            }
            ResponseAction::Fail(_) => {
                let failed = super::transport::Failed::read(response).await;
                let retry_after = failed.retry_after;
                self.refusal = Some(failed.into_error());
                self.machine
                    .on_failure(Instant::now(), status_failure(status, retry_after));
                None
            }
        }
    }

    /// Reads one chunk (or detects idleness) and delivers what it completes.
    async fn read(&mut self, conn: &mut Conn) -> Flow {
        let deadline = self.machine.idle_deadline();
        let chunk = tokio::select! {
            chunk = conn.response.chunk() => chunk,
            () = sleep_until(deadline) => {
                // No bytes, not even a keep-alive, for the idle timeout: a half-open
                // connection. Dropping the response closes it.
                tracing::debug!("stream idle; reconnecting");
                self.machine.on_failure(Instant::now(), Failure::Idle);
                return Flow::Continue;
            }
        };
        match chunk {
            Ok(Some(bytes)) => {
                self.machine.on_bytes(Instant::now());
                conn.decoder.feed(&bytes);
                self.drain(conn).await
            }
            Ok(None) => {
                // A partial event at the end is discarded without committing its id (T115).
                conn.decoder.finish();
                let flow = self.drain(conn).await;
                self.machine.on_failure(Instant::now(), Failure::CleanClose);
                flow
            }
            Err(error) => {
                tracing::debug!(error = %crate::error_chain(&error), "stream connection lost");
                conn.decoder.finish();
                let flow = self.drain(conn).await;
                self.machine.on_failure(Instant::now(), Failure::Network);
                flow
            }
        }
    }

    /// Delivers every complete item the decoder holds, in order.
    async fn drain(&mut self, conn: &mut Conn) -> Flow {
        loop {
            if matches!(self.machine.poll(Instant::now()), Action::Done) {
                return Flow::Continue;
            }
            let item = match conn.decoder.next_item() {
                Ok(Some(item)) => item,
                Ok(None) => return Flow::Continue,
                Err(error) => {
                    self.fail(Error::Protocol(error.to_string())).await;
                    return Flow::Stop;
                }
            };
            match item {
                Item::Comment(_) => self.machine.on_bytes(Instant::now()),
                Item::Retry(ms) => self.machine.on_event(
                    Instant::now(),
                    MachineEvent {
                        retry: Some(std::time::Duration::from_millis(ms)),
                        ..MachineEvent::default()
                    },
                ),
                Item::LastEventId(id) => {
                    conn.prev_id.clone_from(&id);
                    if self.tx.send(Delivery::Cursor(id.clone())).await.is_err() {
                        return Flow::Stop;
                    }
                    self.machine
                        .on_event(Instant::now(), MachineEvent::priming(&id));
                }
                Item::Event(event) => {
                    let id = event.last_event_id();
                    let new_id = (id != conn.prev_id).then(|| id.to_owned());
                    conn.prev_id = id.to_owned();
                    if self.deliver(event, new_id).await.is_err() {
                        return Flow::Stop;
                    }
                }
            }
        }
    }

    /// Delivers one dispatched event, then reports it to the machine.
    async fn deliver(
        &mut self,
        event: tether_sse::Event,
        new_id: Option<String>,
    ) -> Result<(), ()> {
        let id = new_id.as_deref();
        // A replayed event already delivered (T32's exactly-once across resumes).
        if let Some(id) = id.filter(|id| !id.is_empty())
            && self.seen.contains(id)
        {
            self.machine.on_bytes(Instant::now());
            return Ok(());
        }
        // T84: a priming event (or any empty data) is never JSON-parsed; its id still counts.
        // Only `message` events (the WHATWG default type) carry JSON-RPC
        // (docs/PROTOCOL.md#open-11).
        let message = if event.data().is_empty() || event.event_type() != "message" {
            None
        } else {
            match serde_json::from_str(event.data()).map(Message::from_value) {
                Ok(Ok(message)) => Some(message),
                _ => {
                    tracing::warn!(id, "skipping an event that is not a JSON-RPC message");
                    None
                }
            }
        };
        let Some(message) = message else {
            if let Some(id) = id {
                self.tx
                    .send(Delivery::Cursor(id.to_owned()))
                    .await
                    .map_err(drop)?;
                self.seen.insert(id);
            }
            self.machine.on_event(
                Instant::now(),
                MachineEvent {
                    id,
                    ..MachineEvent::default()
                },
            );
            return Ok(());
        };
        let is_final = matches!(
            (&message, &self.request_id),
            (Message::Response(response), Some(request)) if response.id() == Some(request)
        );
        self.tx
            .send(Delivery::Message {
                message,
                event_id: id.filter(|id| !id.is_empty()).map(str::to_owned),
            })
            .await
            .map_err(drop)?;
        if let Some(id) = id {
            self.seen.insert(id);
        }
        self.got_final |= is_final;
        let mut report = MachineEvent::message(id);
        if is_final {
            report = report.final_response();
        }
        // Time spent waiting for the application to take the message is not idleness.
        let now = Instant::now();
        self.machine.on_bytes(now);
        self.machine.on_event(now, report);
        Ok(())
    }
}

const fn status_failure(code: u16, retry_after: Option<std::time::Duration>) -> Failure {
    Failure::Status { code, retry_after }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Answers `request` if the client answers it itself: `ping` built in, else through the
/// configured [`ServerRequestHandler`](super::ServerRequestHandler). Returns whether the request was consumed (answered by
/// the handler, so the caller does not yield it); a `ping` is answered but not consumed.
/// Failing to send an answer is logged, not returned: the stream goes on, and the server's
/// side times out or gives up on its own.
async fn answer_server_request(client: &Client, request: &Request) -> bool {
    let (result, consumed) = if request.method == "ping" {
        (Ok(json!({})), false)
    } else {
        match &client.inner.config.request_handler {
            Some(handler) if handler.accepts(request) => (handler.handle(request).await, true),
            _ => return false,
        }
    };
    let answer = match result {
        Ok(result) => RpcResponse::success(request.id.clone(), result),
        Err(error) => RpcResponse::error(Some(request.id.clone()), error),
    };
    if let Err(error) = client.respond(answer).await {
        tracing::warn!(error = %crate::error_chain(&error), method = %request.method, "answering a server request failed");
    }
    consumed
}
