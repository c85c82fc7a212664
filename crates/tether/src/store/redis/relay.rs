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

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use tether_proto::ids::StreamId;
use tokio::sync::{mpsc, oneshot};

use super::backend::Inner;
use super::relay_channel::{AWAITING_SWEEP_AT, Envelope};
use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::relay::{
    Handoff, HandoffAnswer, IncomingHandoff, Relay, RelayError, SessionHome,
};

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
