//! The [`Client`] handle's own operations: [`connect`](Client::connect) (the era chosen,
//! then `initialize` or `server/discover`), [`request`](Client::request) and
//! [`notify`](Client::notify), [`respond`](Client::respond), the standalone and
//! `subscriptions/listen` streams, and [`close`](Client::close). Tool calls are `call`'s,
//! tasks `task_handle`'s, a new process's reattachment `resume`'s.

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tether_proto::headers::ResponseKind;
use tether_proto::jsonrpc::{
    Batching, Message, Notification, Request, RequestId, Response as RpcResponse, parse_body,
};
use tether_proto::version::ProtocolVersion;
use tokio::sync::mpsc;

use super::config::{ClientConfig, ProtocolChoice};
use super::error::Error;
use super::events::ClientEvents;
use super::modern;
use super::session::{Client, Inner, read_body, response_kind};
use super::stream::{Delivery, Driver, MessageStream};
use super::transport::{self, Failed};
use crate::telemetry::Operation;
use tracing::Instrument as _;

impl Client {
    /// Connects to the MCP endpoint `url`: `initialize` (version negotiation), then
    /// `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL or header; [`Error::LegacyTransport`] or
    /// [`Error::UnsupportedVersion`] for a server this client cannot speak to; otherwise what
    /// the exchange failed with.
    pub async fn connect(url: &str, mut config: ClientConfig) -> Result<Self, Error> {
        let choice = config.protocol;
        if let ProtocolChoice::Version(version) = choice
            && !version.is_modern()
        {
            config.protocol_version = version;
        }
        let inner = Inner::build(url, config, 0)?;
        match inner.choose_era(choice).await? {
            modern::Chosen::Legacy => inner.initialize().await?,
            modern::Chosen::Initialized => {}
            modern::Chosen::Modern(discovered) => {
                inner.modern.store(true, Ordering::SeqCst);
                *inner
                    .server_result
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = discovered;
            }
        }
        Ok(Self { inner })
    }

    /// Whether the client speaks the 2026-07-28 era with this server (chosen at connect by
    /// [`ClientConfig::protocol`]): stateless requests, no session.
    #[must_use]
    pub fn is_modern(&self) -> bool {
        self.inner.modern.load(Ordering::SeqCst)
    }

    /// The server's `initialize` result (protocol version, capabilities, server info), or in
    /// the 2026-07-28 era its `server/discover` result.
    #[must_use]
    pub fn server_info(&self) -> Value {
        self.inner
            .server_result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current `Mcp-Session-Id`, if the server issued one.
    #[must_use]
    pub fn session_id(&self) -> Option<String> {
        self.inner.transport.session().id
    }

    /// The negotiated protocol version.
    #[must_use]
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        if self.is_modern() {
            return Some(ProtocolVersion::MODERN);
        }
        self.inner.transport.session().version
    }

    /// Subscribes to [`ClientEvent`](super::ClientEvent)s from now on.
    #[must_use]
    pub fn events(&self) -> ClientEvents {
        ClientEvents(self.inner.events.subscribe())
    }

    /// Sends a request; the stream yields the server messages related to it (progress, log
    /// messages, server requests), then the final response, each once and in order, across
    /// reconnects.
    ///
    /// # Errors
    ///
    /// What sending failed with; failures after the server accepted the request arrive as
    /// the stream's items.
    ///
    /// The request is a client span (`{method} {target}`, docs/TELEMETRY.md) whose trace
    /// context goes to the server in `params._meta`; its reconnects are events of that span.
    pub async fn request(
        &self,
        method: &str,
        mut params: Option<Value>,
    ) -> Result<MessageStream, Error> {
        let inner = &self.inner;
        let modern = self.is_modern();
        if !modern {
            inner.ensure_initialized().await?;
        }
        let id = RequestId::from(inner.next_id.fetch_add(1, Ordering::Relaxed));
        let session = inner.transport.session();
        let (session_id, version) = if modern {
            (None, Some(ProtocolVersion::MODERN.as_str()))
        } else {
            (
                session.id.as_deref(),
                session.version.map(ProtocolVersion::as_str),
            )
        };
        let operation = Operation::client(method, &mut params, &id, session_id, version);
        let span = operation.span().clone();
        if modern {
            let (tx, rx) = mpsc::channel(inner.config.stream_buffer.max(1));
            let exchange =
                Arc::clone(inner).modern_exchange(id.clone(), method.to_owned(), params, tx);
            tokio::spawn(exchange.instrument(span));
            return Ok(self
                .stream(rx, Some(id), &session)
                .with_operation(operation));
        }
        self.send_request(id, method, params)
            .instrument(span)
            .await
            .map(|stream| stream.with_operation(operation))
    }

    /// The 2025 era's part of [`request`](Self::request), run in the request's span: POSTs it
    /// and hands its answer, an SSE stream (whose driver runs in the same span) or a JSON
    /// body, to a stream.
    async fn send_request(
        &self,
        id: RequestId,
        method: &str,
        params: Option<Value>,
    ) -> Result<MessageStream, Error> {
        let span = tracing::Span::current();
        let inner = &self.inner;
        let body = Message::from(Request::new(id.clone(), method, params)).to_vec();
        let buffer = inner.config.stream_buffer.max(1);
        // Kept only for a server that re-attaches a request sent again (see
        // `transport::Session::reattaches`): no other may be sent it twice.
        let resend = inner.transport.session().reattaches.then(|| body.clone());
        let (response, session) = match inner.post(body).await {
            Ok(answered) => answered,
            // Lost before any answer: the request may or may not have reached the server. One
            // that re-attaches can be sent it again without running it twice; the stream task
            // does that, with backoff, as it would after losing the stream before its first id.
            Err(Error::Network(_) | Error::Timeout) if resend.is_some() => {
                let session = inner.transport.session();
                let (tx, rx) = mpsc::channel(buffer);
                let driver =
                    Driver::new(Arc::clone(inner), Some(id.clone()), session.generation, tx)
                        .resending(resend);
                tokio::spawn(driver.run(None).instrument(span));
                return Ok(self.stream(rx, Some(id), &session));
            }
            Err(error) => return Err(error),
        };
        let kind = response_kind(&response);
        match (response.status().as_u16(), kind) {
            (200, Some(ResponseKind::EventStream)) => {
                let (tx, rx) = mpsc::channel(buffer);
                let driver =
                    Driver::new(Arc::clone(inner), Some(id.clone()), session.generation, tx)
                        .resending(resend);
                tokio::spawn(driver.run(Some(response)).instrument(span));
                Ok(self.stream(rx, Some(id), &session))
            }
            (200, Some(ResponseKind::Json)) => {
                let bytes = read_body(response, inner.transport.request_timeout()).await?;
                let messages = parse_body(&bytes, Batching::Allowed)
                    .map_err(|e| Error::Protocol(format!("JSON answer: {e}")))?
                    .into_messages();
                let (tx, rx) = mpsc::channel(messages.len().max(1));
                for message in messages {
                    let _ = tx.try_send(Delivery::Message {
                        message,
                        event_id: None,
                    });
                }
                Ok(self.stream(rx, Some(id), &session))
            }
            (status, _) => Err(Error::Protocol(format!(
                "request answered {status} without a JSON or SSE body"
            ))),
        }
    }

    /// Sends a notification (202 expected).
    ///
    /// # Errors
    ///
    /// What sending failed with.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        if self.is_modern() {
            // This era defines no client→server notifications over HTTP: a cancellation is
            // the request's connection dropped, and nothing else has anything to send.
            if method == "notifications/cancelled" {
                let request = params
                    .as_ref()
                    .and_then(|params| params.get("requestId"))
                    .and_then(RequestId::from_value);
                if let Some(request) = request {
                    self.inner.cancel_modern(&request);
                }
            }
            return Ok(());
        }
        self.inner.ensure_initialized().await?;
        let body = Message::from(Notification::new(method, params)).to_vec();
        self.inner.post(body).await.map(drop)
    }

    /// Answers a server→client request received on a stream (202 expected).
    ///
    /// # Errors
    ///
    /// What sending failed with.
    pub async fn respond(&self, response: RpcResponse) -> Result<(), Error> {
        let body = Message::Response(response).to_vec();
        self.inner.post(body).await.map(drop)
    }

    /// Opens the standalone GET stream of server-initiated messages. It follows the session
    /// across re-initializations; if the server has none (405) it yields
    /// [`Error::NoStandaloneStream`]. One per client.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if it is already open.
    pub fn server_messages(&self) -> Result<MessageStream, Error> {
        if self.inner.standalone_open.swap(true, Ordering::SeqCst) {
            return Err(Error::Config(
                "the standalone stream is already open".to_owned(),
            ));
        }
        if self.is_modern() {
            return self.listen(json!({
                "toolsListChanged": true,
                "promptsListChanged": true,
                "resourcesListChanged": true,
            }));
        }
        let session = self.inner.transport.session();
        let (tx, rx) = mpsc::channel(self.inner.config.stream_buffer.max(1));
        let driver = Driver::new(Arc::clone(&self.inner), None, session.generation, tx);
        tokio::spawn(driver.run(None));
        Ok(self.stream(rx, None, &session))
    }

    /// In the 2026-07-28 era, opens a `subscriptions/listen` stream with `filter` (its
    /// `notifications` object: `toolsListChanged`, `resourceSubscriptions`, …): the stream
    /// yields the server's `notifications/subscriptions/acknowledged`, then the notifications,
    /// and is opened again after a cut or a graceful end (with a new acknowledgment; what the
    /// server sent in between is lost, since this era cannot resume). Dropping the stream
    /// closes it. Several may be open at once.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] in the legacy era, whose server messages come from
    /// [`server_messages`](Self::server_messages).
    pub fn listen(&self, filter: Value) -> Result<MessageStream, Error> {
        if !self.is_modern() {
            return Err(Error::Config(
                "subscriptions/listen is a 2026-07-28 request; this client speaks the 2025 era \
                 (use server_messages)"
                    .to_owned(),
            ));
        }
        let (tx, rx) = mpsc::channel(self.inner.config.stream_buffer.max(1));
        tokio::spawn(Arc::clone(&self.inner).modern_listen(filter, tx));
        Ok(self.stream(rx, None, &self.inner.transport.session()))
    }

    /// Ends the session: stops every stream task and sends DELETE (2xx, 404 and 405 all mean
    /// done). Clones share the session, so closing one closes it for every clone; closing
    /// again is harmless (the server answers 404).
    ///
    /// # Errors
    ///
    /// What the DELETE failed with.
    pub async fn close(&self) -> Result<(), Error> {
        self.inner.shutdown.cancel();
        if self.inner.transport.session().id.is_none() {
            return Ok(());
        }
        // DELETE is idempotent: a connection lost under it (a pooled connection the network
        // cut) is retried once on a fresh one.
        let (response, _) = match self.inner.transport.delete().await {
            Err(Error::Network(_)) => self.inner.transport.delete().await?,
            other => other?,
        };
        match response.status().as_u16() {
            200..=299 | 404 | 405 => Ok(()),
            _ => Err(Failed::read(response).await.into_error()),
        }
    }

    /// The application's end of a stream task's deliveries, committing under `session`.
    pub(super) fn stream(
        &self,
        rx: mpsc::Receiver<Delivery>,
        request_id: Option<RequestId>,
        session: &transport::Session,
    ) -> MessageStream {
        MessageStream::new(
            self.clone(),
            rx,
            request_id,
            session.id.clone(),
            session.version,
            self.inner.config.on_resumption_token.clone(),
        )
    }
}
