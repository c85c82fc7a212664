//! Wake-ups for [`EventStore::wait_for_more`](crate::store::event_store::EventStore::wait_for_more) across
//! nodes: one pub/sub subscriber connection per store, and the local watchers it wakes.
//!
//! Every script that changes a stream (append, complete, removal, eviction) publishes the
//! stream id on `<prefix>wake`. The store's one subscriber task reads that channel and bumps a
//! generation counter of the streams someone in this process waits on; waiters never hold a
//! Redis connection of their own. Pub/sub delivers at most once, so a waiter registers its
//! watch *before* it checks the stream's state (a change after the check bumps the counter it
//! already holds), and re-checks at least every [`RECHECK`] anyway. When the subscription is
//! lost the task wakes every waiter (they re-check), reconnects with backoff, resubscribes and
//! wakes everyone again, since messages published in between are lost.
//!
//! The same connection also listens on this node's relay channel (see `relay.rs`): the task
//! hands every message to a [`Listener`], which routes it by channel.
//!
//! This module does not decide whether a wait is over: the store checks the stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use tether_proto::ids::StreamId;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::lock as guard;

/// How often a waiter re-checks its stream even without a wake-up: a bound on how long a lost
/// pub/sub message (or a half-open subscriber connection) can delay a reader. Short enough to
/// be a hiccup, long enough that idle waiters cost Redis almost nothing.
pub(super) const RECHECK: Duration = Duration::from_secs(5);

/// Pause before the first resubscription attempt; doubled after each failure up to
/// [`RESUBSCRIBE_MAX_DELAY`].
const RESUBSCRIBE_MIN_DELAY: Duration = Duration::from_millis(50);

/// Longest pause between resubscription attempts while Redis is down.
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(2);

/// The streams this process waits on, each with a generation counter bumped on every
/// wake-up.
#[derive(Default)]
pub(super) struct Watchers {
    streams: Mutex<HashMap<StreamId, watch::Sender<u64>>>,
}

impl Watchers {
    /// Registers interest in `stream`: every wake-up of it after this call changes the
    /// returned registration's value.
    pub(super) fn register(self: &Arc<Self>, stream: StreamId) -> Registration {
        let receiver = guard(&self.streams)
            .entry(stream)
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe();
        Registration {
            watchers: Arc::clone(self),
            stream,
            receiver: Some(receiver),
        }
    }

    /// Wakes the waiters of `stream`, if any.
    pub(super) fn wake(&self, stream: StreamId) {
        if let Some(sender) = guard(&self.streams).get(&stream) {
            sender.send_modify(|generation| *generation = generation.wrapping_add(1));
        }
    }

    /// Wakes every waiter (they re-check their streams).
    pub(super) fn wake_all(&self) {
        for sender in guard(&self.streams).values() {
            sender.send_modify(|generation| *generation = generation.wrapping_add(1));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        guard(&self.streams).len()
    }
}

/// One waiter's interest in a stream; dropping it (also mid-wait: cancel-safe) unregisters.
pub(super) struct Registration {
    watchers: Arc<Watchers>,
    stream: StreamId,
    receiver: Option<watch::Receiver<u64>>,
}

impl Registration {
    /// Marks the current generation seen: a wake-up after this makes [`changed`] return.
    ///
    /// [`changed`]: Self::changed
    pub(super) fn mark_seen(&mut self) {
        if let Some(receiver) = &mut self.receiver {
            receiver.borrow_and_update();
        }
    }

    /// Waits for a wake-up after the last [`mark_seen`](Self::mark_seen), or `limit`.
    pub(super) async fn changed(&mut self, limit: Duration) {
        if let Some(receiver) = &mut self.receiver {
            // The sender lives while any registration does, so an error cannot happen; if it
            // did, the caller re-checks, which is always safe.
            let _ = tokio::time::timeout(limit, receiver.changed()).await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Under the map's lock, so no registration of this stream can start in between: the
        // last one out removes the entry.
        let mut streams = guard(&self.watchers.streams);
        drop(self.receiver.take());
        if streams
            .get(&self.stream)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            streams.remove(&self.stream);
        }
    }
}

/// What the subscriber task does with what it hears.
pub(super) trait Listener: Send + Sync + 'static {
    /// A message arrived on `channel`.
    fn message(&self, channel: &str, payload: &[u8]);
    /// Messages may have been lost: the subscription dropped, or was just restored.
    fn gap(&self);
}

/// Subscribes to `channels` on a connection of its own, within `limit`.
pub(super) async fn subscribe(
    client: &redis::Client,
    channels: &[String],
    limit: Duration,
) -> Result<redis::aio::PubSub, String> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        for channel in channels {
            pubsub.subscribe(channel).await?;
        }
        redis::RedisResult::Ok(pubsub)
    };
    match tokio::time::timeout(limit, connect).await {
        Ok(Ok(pubsub)) => Ok(pubsub),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// The subscriber task: passes every message on `channels` to `listener`, and tells it of
/// every gap (the subscription lost, then restored). Ends when `cancel` fires.
pub(super) async fn run_subscriber(
    client: redis::Client,
    channels: Vec<String>,
    first: redis::aio::PubSub,
    listener: Arc<dyn Listener>,
    connect_timeout: Duration,
    cancel: CancellationToken,
) {
    let mut pubsub = Some(first);
    loop {
        if let Some(subscribed) = pubsub.take() {
            let mut messages = subscribed.into_on_message();
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    message = messages.next() => {
                        let Some(message) = message else { break };
                        listener.message(message.get_channel_name(), message.get_payload_bytes());
                    }
                }
            }
            tracing::warn!("redis store: subscription lost; resubscribing");
        }
        // Whatever was published while we were not listening is lost.
        listener.gap();
        let mut delay = RESUBSCRIBE_MIN_DELAY;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            match subscribe(&client, &channels, connect_timeout).await {
                Ok(subscribed) => {
                    tracing::info!("redis store: subscription restored");
                    pubsub = Some(subscribed);
                    listener.gap();
                    break;
                }
                Err(error) => {
                    tracing::debug!(%error, "redis store: resubscribing failed");
                    delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_registration_sees_wakes_after_it_and_unregisters_on_drop() {
        let watchers = Arc::new(Watchers::default());
        let stream = StreamId::generate();
        let mut first = watchers.register(stream);
        let second = watchers.register(stream);
        first.mark_seen();
        watchers.wake(stream);
        tokio::time::timeout(
            Duration::from_secs(1),
            first.changed(Duration::from_secs(60)),
        )
        .await
        .expect("woken");
        drop(first);
        assert_eq!(watchers.len(), 1, "still registered by the second");
        drop(second);
        assert_eq!(watchers.len(), 0, "the last one out removes the entry");
    }
}
