//! What the client did on its own that an application may need to react to
//! ([`ClientEvent`](super::ClientEvent)), and the receiver that hands those events out ([`ClientEvents`]).

use tether_proto::jsonrpc::RequestId;
use tokio::sync::broadcast;

/// Something the client did on its own that the application may need to react to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// The server answered 404: the session is gone.
    SessionExpired {
        /// The expired session's id.
        session_id: Option<String>,
    },
    /// A new session was initialized in place of an expired one (restore subscriptions).
    Reinitialized {
        /// The new session's id.
        session_id: Option<String>,
    },
    /// Re-initializing failed; the next request tries again.
    ReinitializeFailed {
        /// Why.
        error: String,
    },
    /// A stream lost its connection (or is being resumed from a token) and is reconnecting
    /// with GET + `Last-Event-ID`; or, for a request's stream lost before any event id reached
    /// the client (`last_event_id` `None`), by sending the request again to a server that
    /// re-attaches it to its stream rather than running it twice (a tether server).
    Reconnecting {
        /// The request whose stream it is; `None` for the standalone stream.
        request_id: Option<RequestId>,
        /// The cursor sent, if any.
        last_event_id: Option<String>,
        /// Consecutive failed attempts so far.
        failures: u32,
    },
    /// A stream's GET (the standalone stream's connection, or a resume) was answered with an
    /// event stream: from now on the server can deliver on it. Some servers (the TypeScript
    /// SDK's without an event store) drop the messages they send unrelated to a request while
    /// no standalone stream is open, so an application about to provoke one waits for this.
    Connected {
        /// The request whose stream it is; `None` for the standalone stream.
        request_id: Option<RequestId>,
    },
}

/// A subscription to [`ClientEvent`](super::ClientEvent)s.
#[derive(Debug)]
pub struct ClientEvents(pub(super) broadcast::Receiver<ClientEvent>);

impl ClientEvents {
    /// The next event; `None` once the client is gone. A receiver that fell more than 64
    /// events behind skips the oldest.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        loop {
            match self.0.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// An event already received, without waiting.
    pub fn try_recv(&mut self) -> Option<ClientEvent> {
        loop {
            match self.0.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => return None,
            }
        }
    }
}
