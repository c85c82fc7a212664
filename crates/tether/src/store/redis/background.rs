//! The Redis store's background work: what the subscriber hears routed to waiters and the
//! relay, the commit loop that sends pipelined appends in batches, the node's heartbeat and
//! the retention sweep.

use std::sync::Arc;
use std::time::Duration;

use tether_proto::ids::StreamId;
use tokio_util::sync::CancellationToken;

use crate::store::pipeline::Queued;

use super::backend::{Commit, Inner};
use super::config::{MAX_SWEEP_PERIOD, SWEEP_LIMIT};
use super::relay_channel::RelayState;
use super::wake::{Listener, Watchers};

/// Routes what the subscriber hears: stream ids on the wake channel to the local waiters,
/// the rest (this node's relay channel) to the relay.
pub(super) struct Heard {
    pub(super) wake_channel: String,
    pub(super) watchers: Arc<Watchers>,
    pub(super) relay: Arc<RelayState>,
}

impl Listener for Heard {
    fn message(&self, channel: &str, payload: &[u8]) {
        if channel != self.wake_channel {
            self.relay.heard(payload);
            return;
        }
        let stream = std::str::from_utf8(payload)
            .ok()
            .and_then(|id| StreamId::parse(id).ok());
        if let Some(stream) = stream {
            self.watchers.wake(stream);
        }
    }

    fn gap(&self) {
        // Every waiter re-checks its stream; lost relay answers are left to their timeouts.
        self.watchers.wake_all();
    }
}

/// Most pipelined appends sent in one script call.
pub(super) const MAX_APPENDS_PER_CALL: usize = 1024;

/// Most frame bytes sent in one script call.
pub(super) const MAX_BYTES_PER_CALL: usize = 4 * 1024 * 1024;

/// Commits what the pipeline queued: everything waiting, in order, as one APPEND_MANY call
/// (one round trip for many appends of many streams), completions after the appends before
/// them. One call at a time, so each stream's frames reach Redis in seq order.
pub(super) async fn commit_loop(
    inner: std::sync::Weak<Inner>,
    mut queued: tokio::sync::mpsc::UnboundedReceiver<Commit>,
) {
    let mut appends: Vec<Queued> = Vec::new();
    while let Some(first) = queued.recv().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let mut next = Some(first);
        let mut bytes = 0;
        while let Some(commit) = next.take() {
            match commit {
                // Frames queued behind a failed commit are dropped (store/pipeline.rs).
                Commit::Append(append) if append.lane.failure().is_some() => {}
                Commit::Append(append) if append.lane.is_demoted() => {
                    inner.append_many(std::mem::take(&mut appends)).await;
                    bytes = 0;
                    inner.append_demoted(&append).await;
                }
                Commit::Append(append) => {
                    bytes += append.frame.len();
                    appends.push(append);
                    if appends.len() >= MAX_APPENDS_PER_CALL || bytes >= MAX_BYTES_PER_CALL {
                        inner.append_many(std::mem::take(&mut appends)).await;
                        bytes = 0;
                    }
                }
                Commit::Complete {
                    stream,
                    lane,
                    reply,
                } => {
                    inner.append_many(std::mem::take(&mut appends)).await;
                    bytes = 0;
                    let result = match lane.failure() {
                        Some(failure) => Err(failure),
                        None => inner.complete_now(stream).await,
                    };
                    let _ = reply.send(result);
                }
            }
            next = queued.try_recv().ok();
        }
        inner.append_many(std::mem::take(&mut appends)).await;
    }
}

pub(super) async fn sweep_loop(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let period = inner.upgrade().map_or(MAX_SWEEP_PERIOD, |inner| {
        (inner.config.limits.retention / 10).clamp(Duration::from_millis(10), MAX_SWEEP_PERIOD)
    });
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let limit = SWEEP_LIMIT.to_string();
        if let Err(error) = inner.run(&inner.scripts.sweep, &[&limit]).await {
            tracing::debug!(error = %crate::error_chain(&error), "redis store: retention sweep failed");
        }
    }
}

/// Renews this node's lease every third of it until the store is dropped. The key is left to
/// expire, not deleted, when the store closes: a crashed node cannot delete it either, and
/// the other nodes treat both alike.
pub(super) async fn heartbeat_loop(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let Some(period) = inner.upgrade().map(|inner| inner.config.node_lease / 3) else {
        return;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let renewed = inner
            .run(
                &inner.scripts.heartbeat,
                &[&inner.config.node_id, &inner.lease_ms()],
            )
            .await;
        if let Err(error) = renewed {
            // Two failures in a row are still within the lease; past it, other nodes answer
            // this node's running requests as orphans.
            tracing::warn!(error = %crate::error_chain(&error), node = %inner.config.node_id, "redis store: heartbeat failed");
        }
    }
}
