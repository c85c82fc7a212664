//! This node's relay channel: the envelope that travels on it, its name, and the state of
//! one process's end (hand-offs awaiting answers, the inbox of hand-offs received). The
//! [`Relay`](crate::store::relay::Relay) built on it is `relay`'s.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::reply::{unavailable, unavailable_because};
use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::relay::{Handoff, HandoffAnswer, IncomingHandoff};

/// Handoffs awaiting an answer at which the map is swept of abandoned ones.
pub(super) const AWAITING_SWEEP_AT: usize = 256;

/// What travels on a relay channel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(super) enum Envelope {
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
    pub(super) node_id: String,
    pub(super) prefix: String,
    pub(super) conn: ConnectionManager,
    pub(super) command_timeout: Duration,
    pub(super) next_nonce: AtomicU64,
    pub(super) awaiting: Mutex<HashMap<u64, oneshot::Sender<HandoffAnswer>>>,
    pub(super) inbox: mpsc::UnboundedSender<IncomingHandoff>,
    pub(super) inbox_receiver: Mutex<Option<mpsc::UnboundedReceiver<IncomingHandoff>>>,
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
    pub(super) async fn publish(&self, node: &str, envelope: &Envelope) -> Result<i64, StoreError> {
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
                tracing::warn!(error = %crate::error_chain(&error), "redis relay: unreadable message ignored");
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
                        tracing::warn!(error = %crate::error_chain(&error), node = %from, "redis relay: answer not sent");
                    }
                });
            }
        }
    }
}
