//! How the nodes sharing a store hand work to each other: the [`Relay`] trait and the
//! messages it carries.
//!
//! A session's handler runs on one node, its *home*: the node that created it (and so its
//! standalone stream). Any node may receive the session's requests. A GET needs no handler,
//! so any node serves it from the shared store; a POST or DELETE received elsewhere is handed
//! to the home node as a [`Handoff`], which answers with a [`HandoffAnswer`]: for a POST with
//! requests, the id of the Request stream the home node is filling, which the receiving node
//! then serves from the store like any resume. A shared store that supports several nodes
//! implements this trait (the Redis store does); single-node stores need none.
//!
//! This module owns only the contract and the wire shape (JSON, so that nodes of different
//! builds can still talk); what a server does with a handoff is `server::handoff`'s.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tether_proto::ids::StreamId;
use tokio::sync::{mpsc, oneshot};

use super::error::StoreError;

/// Where a session's handler runs, as seen from this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionHome {
    /// On this node (also when the store does not know: the caller then serves it itself).
    Here,
    /// On another node, whose lease is current.
    Node(String),
    /// On another node whose lease has lapsed: it is gone, and with it the handler's state.
    Gone(String),
}

/// A request handed to a session's home node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Handoff {
    /// A POST for the session: its body exactly as received (already checked to be JSON) and
    /// its `Accept`.
    Post {
        /// The session, as in `Mcp-Session-Id`.
        session: String,
        /// The principal the receiving node authenticated.
        principal: String,
        /// The request's `Accept` header, if any.
        accept: Option<String>,
        /// The request body.
        body: String,
    },
    /// A DELETE of the session.
    Delete {
        /// The session, as in `Mcp-Session-Id`.
        session: String,
        /// The principal the receiving node authenticated.
        principal: String,
    },
}

/// The home node's answer to a [`Handoff`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HandoffAnswer {
    /// The POST's requests are answered on this Request stream, which the receiving node
    /// serves from the store (as SSE, or collected into a JSON body when that is the answer
    /// the client asked for).
    Stream {
        /// The stream id.
        stream: String,
    },
    /// A complete HTTP answer to pass on as it is: 202 for a POST without requests, DELETE's
    /// 200, or a refusal with its JSON-RPC error body.
    Http {
        /// The status code.
        status: u16,
        /// The answer's headers (`Content-Type`, `Retry-After`, …).
        headers: Vec<(String, String)>,
        /// The body (empty, or JSON).
        body: String,
    },
}

impl HandoffAnswer {
    /// The stream of a [`HandoffAnswer::Stream`], if its id is well formed.
    #[must_use]
    pub fn stream(&self) -> Option<StreamId> {
        match self {
            Self::Stream { stream } => StreamId::parse(stream).ok(),
            Self::Http { .. } => None,
        }
    }
}

/// A handoff addressed to this node, with the way back to the node that sent it.
#[derive(Debug)]
pub struct IncomingHandoff {
    /// What to do.
    pub handoff: Handoff,
    /// Where the answer goes; dropping it leaves the sender to its timeout.
    pub reply: oneshot::Sender<HandoffAnswer>,
}

/// Why a handoff did not reach its node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// No process of that node is listening (it died, or has not subscribed yet).
    #[error("node {0} is not listening")]
    NotListening(String),
    /// The shared store cannot be reached.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Node-to-node handoff over a shared store (see the module docs).
#[async_trait]
pub trait Relay: Send + Sync + 'static {
    /// This node's id, as the store records it.
    fn node_id(&self) -> &str;

    /// Where the handler of the session whose standalone stream is `standalone` runs.
    async fn home(&self, standalone: StreamId) -> Result<SessionHome, StoreError>;

    /// Sends `handoff` to `node`; the receiver yields its answer. It may never yield (the
    /// node died after accepting it): callers bound their wait.
    async fn hand_off(
        &self,
        node: &str,
        handoff: Handoff,
    ) -> Result<oneshot::Receiver<HandoffAnswer>, RelayError>;

    /// The handoffs addressed to this node, from now on; `None` after the first call (one
    /// server serves them).
    fn take_inbox(&self) -> Option<mpsc::UnboundedReceiver<IncomingHandoff>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoffs_and_answers_survive_their_wire_form() {
        let handoff = Handoff::Post {
            session: "s".into(),
            principal: "default".into(),
            accept: Some("application/json, text/event-stream".into()),
            body: r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.into(),
        };
        let wire = serde_json::to_string(&handoff).unwrap();
        assert_eq!(serde_json::from_str::<Handoff>(&wire).unwrap(), handoff);

        let stream = StreamId::generate();
        let answer = HandoffAnswer::Stream {
            stream: stream.as_str().to_owned(),
        };
        let wire = serde_json::to_string(&answer).unwrap();
        let back: HandoffAnswer = serde_json::from_str(&wire).unwrap();
        assert_eq!(back.stream(), Some(stream));
        let http = HandoffAnswer::Http {
            status: 404,
            headers: vec![("content-type".into(), "application/json".into())],
            body: "{}".into(),
        };
        assert_eq!(http.stream(), None);
    }
}
