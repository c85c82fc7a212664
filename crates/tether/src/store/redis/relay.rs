//! The Redis store's [`Relay`]: handoffs between nodes over pub/sub.
//!
//! Every node listens on `<prefix>relay:<node id>` (on the store's one subscriber connection,
//! see `wake.rs`). A handoff is published there as JSON with the sender's node id and a nonce;
//! the home node answers on the sender's channel with the same nonce. `PUBLISH` reports how
//! many subscribers received a message, so a handoff to a node that is not listening fails at
//! once instead of waiting for an answer that cannot come. Pub/sub delivers at most once: an
//! answer lost to a dropped subscription leaves the sender to its timeout, and the client to
//! retry, which is why only the quick part of a POST (creating its stream) waits for an
//! answer; the events themselves travel through the store.
//!
//! A session's home is the `node` recorded with its standalone stream by the create script,
//! and it is alive while that node's lease key exists (see the module docs of `mod.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tether_proto::ids::StreamId;
use tokio::sync::{mpsc, oneshot};

use super::{Inner, guard, unavailable, unavailable_because};
use crate::store::StoreError;
use crate::store::relay::{
    Handoff, HandoffAnswer, IncomingHandoff, Relay, RelayError, SessionHome,
};

/// Handoffs awaiting an answer at which the map is swept of abandoned ones.
const AWAITING_SWEEP_AT: usize = 256;

/// What travels on a relay channel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Envelope {
    Handoff {
        from: String,
        nonce: u64,
        handoff: Handoff,
    },
    Answer {
        nonce: u64,
        answer: HandoffAnswer,
    },
}

/// The relay channel of `node`.
pub(super) fn channel(prefix: &str, node: &str) -> String {
    format!("{prefix}relay:{node}")
}

/// The relay's state in one process: handoffs sent and awaiting answers, and the inbox of
/// handoffs received.
pub(super) struct RelayState {
    node_id: String,
    prefix: String,
    conn: ConnectionManager,
    command_timeout: Duration,
    next_nonce: AtomicU64,
    awaiting: Mutex<HashMap<u64, oneshot::Sender<HandoffAnswer>>>,
    inbox: mpsc::UnboundedSender<IncomingHandoff>,
    inbox_receiver: Mutex<Option<mpsc::UnboundedReceiver<IncomingHandoff>>>,
}

impl RelayState {
    pub(super) fn new(
        node_id: String,
        prefix: String,
        conn: ConnectionManager,
        command_timeout: Duration,
    ) -> Self {
        let (inbox, receiver) = mpsc::unbounded_channel();
        Self {
            node_id,
            prefix,
            conn,
            command_timeout,
            next_nonce: AtomicU64::new(0),
            awaiting: Mutex::default(),
            inbox,
            inbox_receiver: Mutex::new(Some(receiver)),
        }
    }

    /// Publishes `envelope` on `node`'s channel; returns how many subscribers received it.
    async fn publish(&self, node: &str, envelope: &Envelope) -> Result<i64, StoreError> {
        let payload = serde_json::to_string(envelope).expect("envelopes serialize");
        let mut conn = self.conn.clone();
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel(&self.prefix, node)).arg(payload);
        let command = publish.query_async::<i64>(&mut conn);
        tokio::time::timeout(self.command_timeout, command)
            .await
            .map_err(|_| {
                unavailable_because(format!(
                    "redis did not answer within {:?}",
                    self.command_timeout
                ))
            })?
            .map_err(unavailable)
    }

    /// A message on this node's relay channel.
    pub(super) fn heard(self: &Arc<Self>, payload: &[u8]) {
        let envelope = match serde_json::from_slice::<Envelope>(payload) {
            Ok(envelope) => envelope,
            Err(error) => {
                tracing::warn!(%error, "redis relay: unreadable message ignored");
                return;
            }
        };
        match envelope {
            Envelope::Answer { nonce, answer } => {
                if let Some(waiting) = guard(&self.awaiting).remove(&nonce) {
                    let _ = waiting.send(answer);
                }
            }
            Envelope::Handoff {
                from,
                nonce,
                handoff,
            } => {
                let (reply, answered) = oneshot::channel();
                if self.inbox.send(IncomingHandoff { handoff, reply }).is_err() {
                    return;
                }
                let state = Arc::clone(self);
                tokio::spawn(async move {
                    // Dropped unanswered (the server is shutting down): the sender times out.
                    let Ok(answer) = answered.await else { return };
                    let envelope = Envelope::Answer { nonce, answer };
                    if let Err(error) = state.publish(&from, &envelope).await {
                        tracing::warn!(%error, node = %from, "redis relay: answer not sent");
                    }
                });
            }
        }
    }
}

/// The [`Relay`] of a Redis store (see [`super::RedisEventStore::relay`]).
pub struct RedisRelay {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRelay")
            .field("node_id", &self.inner.config.node_id)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Relay for RedisRelay {
    fn node_id(&self) -> &str {
        &self.inner.config.node_id
    }

    async fn home(&self, standalone: StreamId) -> Result<SessionHome, StoreError> {
        let inner = &self.inner;
        let reply = inner
            .run(&inner.scripts.session_home, &[&standalone.as_str()])
            .await?;
        let node = match reply.values.first() {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        };
        // A stream without a node (gone, or written by an older build) is served here.
        if node.is_empty() || node == inner.config.node_id {
            return Ok(SessionHome::Here);
        }
        if reply.int(1)? == 1 {
            Ok(SessionHome::Node(node))
        } else {
            Ok(SessionHome::Gone(node))
        }
    }

    async fn hand_off(
        &self,
        node: &str,
        handoff: Handoff,
    ) -> Result<oneshot::Receiver<HandoffAnswer>, RelayError> {
        let relay = &self.inner.relay;
        let nonce = relay.next_nonce.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        {
            let mut awaiting = guard(&relay.awaiting);
            // Senders that stopped waiting (timed out) leave their entry behind; sweep them
            // out before the map grows.
            if awaiting.len() >= AWAITING_SWEEP_AT {
                awaiting.retain(|_, waiting| !waiting.is_closed());
            }
            awaiting.insert(nonce, answer);
        }
        let envelope = Envelope::Handoff {
            from: relay.node_id.clone(),
            nonce,
            handoff,
        };
        let sent = relay.publish(node, &envelope).await;
        if !matches!(sent, Ok(n) if n > 0) {
            guard(&relay.awaiting).remove(&nonce);
        }
        match sent {
            Ok(0) => Err(RelayError::NotListening(node.to_owned())),
            Ok(_) => Ok(answered),
            Err(error) => Err(error.into()),
        }
    }

    fn take_inbox(&self) -> Option<mpsc::UnboundedReceiver<IncomingHandoff>> {
        guard(&self.inner.relay.inbox_receiver).take()
    }
}
