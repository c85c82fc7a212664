//! The pipe between the gateway and a server it runs in this process (the rmcp adapter's
//! services): JSON-RPC messages handed over as values each way, so neither side writes or
//! parses a line, as a stdio child's pipes would need.
//!
//! The server's output is queued in the order the server says it, at the moment it says it
//! (rmcp runs each send as a task of its own, so anything decided later could reorder
//! them), and bounded: past [`OUTPUT_MESSAGES`] messages not yet taken by the gateway, the
//! server's send waits, which is how the store's pace reaches the server (backpressure). The
//! server's input ends when the gateway stops the child.

use std::pin::Pin;
use std::sync::Arc;

use tether_proto::jsonrpc::Message;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Messages the server may have said that the gateway has not routed yet before its sends
/// wait.
pub(crate) const OUTPUT_MESSAGES: usize = 1024;

/// A server the gateway runs in this process, one per session or principal, as it would run
/// a stdio child: messages in, messages out.
pub(crate) trait InProcessServer: Send + Sync {
    /// Starts one server on `pipe` and returns the task serving it, which ends when the
    /// server is done (its input ended, or it failed).
    fn serve(&self, pipe: ServerPipe) -> tokio::task::JoinHandle<()>;
}

/// The server's end of the pipe.
#[derive(Debug)]
pub(crate) struct ServerPipe {
    /// What the gateway sends the server.
    pub(crate) input: ServerInput,
    /// What the server says.
    pub(crate) output: ServerOutput,
}

/// The gateway's end of the pipe: its sender of the server's input (the child's input queue)
/// and the receiver of what the server says.
#[derive(Debug)]
pub(crate) struct GatewayEnd {
    pub(crate) input: mpsc::Sender<Message>,
    pub(crate) output: GatewayOutput,
}

/// A pipe whose input queue holds `input_queue` messages and whose input ends when `stop` is
/// cancelled.
pub(crate) fn pipe(input_queue: usize, stop: CancellationToken) -> (GatewayEnd, ServerPipe) {
    let (input_tx, input_rx) = mpsc::channel(input_queue);
    let (output_tx, output_rx) = mpsc::unbounded_channel();
    let room = Arc::new(Semaphore::new(OUTPUT_MESSAGES));
    let gateway = GatewayEnd {
        input: input_tx,
        output: GatewayOutput {
            queue: output_rx,
            room: Arc::clone(&room),
            taken: 0,
        },
    };
    let server = ServerPipe {
        input: ServerInput {
            queue: input_rx,
            stopped: Box::pin(stop.cancelled_owned()),
            closed: false,
        },
        output: ServerOutput {
            queue: output_tx,
            room,
        },
    };
    (gateway, server)
}

/// The gateway went away (the child was stopped and its output is no longer read).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the gateway no longer reads this server's output")]
pub(crate) struct PipeClosed;

/// The server's input.
pub(crate) struct ServerInput {
    queue: mpsc::Receiver<Message>,
    /// The server closed its input.
    closed: bool,
    /// Made once and polled by every `recv`: rmcp makes a new receive future each time its
    /// loop turns (once per message the service says), and a new wait on the token each time
    /// would cost more than the message.
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl std::fmt::Debug for ServerInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerInput")
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl ServerInput {
    /// The next message for the server; `None` once the child is stopped (its end of input).
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        if self.closed {
            return None;
        }
        tokio::select! {
            biased;
            () = self.stopped.as_mut() => None,
            message = self.queue.recv() => message,
        }
    }

    /// Ends the input on the server's side: nothing more is received, and the gateway's
    /// sends find the queue closed.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.queue.close();
    }
}

/// Where the server says things.
#[derive(Debug, Clone)]
pub(crate) struct ServerOutput {
    queue: mpsc::UnboundedSender<Message>,
    room: Arc<Semaphore>,
}

impl ServerOutput {
    /// Queues `message` now, behind everything said before it, and returns what to wait
    /// for before saying more: at once while there is room, else until the gateway has
    /// taken enough. An error if the gateway no longer reads.
    pub(crate) fn say(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<(), PipeClosed>> + Send + 'static {
        // Each message said takes one unit of room, now or (when there is none) once the
        // gateway has given some back; the gateway gives one back per message it takes.
        let taken_now = match self.room.try_acquire() {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        let queued = self.queue.send(message).map_err(|_| PipeClosed);
        let room = (!taken_now).then(|| Arc::clone(&self.room));
        async move {
            queued?;
            if let Some(room) = room {
                room.acquire().await.map_err(|_| PipeClosed)?.forget();
            }
            Ok(())
        }
    }
}

/// Room is given back to a full output this many messages at a time (or when the gateway
/// has read all there is), so that a server held at the bound is woken once per batch, not
/// once per message.
const ROOM_BATCH: usize = 64;

/// What the server said, as the gateway reads it.
#[derive(Debug)]
pub(crate) struct GatewayOutput {
    queue: mpsc::UnboundedReceiver<Message>,
    room: Arc<Semaphore>,
    /// Messages taken whose room has not been given back yet.
    taken: usize,
}

impl GatewayOutput {
    /// The server's next message; `None` once the server is gone and all it said was read.
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        if self.queue.is_empty() {
            // Let the server's tasks run first: it says things a message at a time, each
            // through several tasks, and a reader parked at every empty queue would be
            // woken (a thread switch) for every message.
            tokio::task::yield_now().await;
        }
        let message = self.queue.recv().await?;
        self.taken += 1;
        if self.taken >= ROOM_BATCH || self.queue.is_empty() {
            self.room.add_permits(std::mem::take(&mut self.taken));
        }
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tether_proto::jsonrpc::Notification;

    fn note(n: u64) -> Message {
        Message::Notification(Notification::new("n", Some(json!({ "n": n }))))
    }

    fn number(message: &Message) -> u64 {
        match message {
            Message::Notification(n) => n.params.as_ref().unwrap()["n"].as_u64().unwrap(),
            other => panic!("not a test notification: {other:?}"),
        }
    }

    #[tokio::test]
    async fn output_keeps_the_order_said_even_when_the_waits_finish_out_of_order() {
        let (mut gateway, server) = pipe(4, CancellationToken::new());
        // Say more than there is room for; then complete the waits newest first.
        let waits: Vec<_> = (0..OUTPUT_MESSAGES as u64 + 10)
            .map(|n| server.output.say(note(n)))
            .collect();
        let mut received = Vec::new();
        for _ in 0..OUTPUT_MESSAGES + 10 {
            received.push(number(&gateway.output.recv().await.unwrap()));
        }
        for wait in waits.into_iter().rev() {
            wait.await.unwrap();
        }
        let expected: Vec<u64> = (0..OUTPUT_MESSAGES as u64 + 10).collect();
        assert_eq!(received, expected);
    }

    #[tokio::test]
    async fn a_full_output_holds_the_server_until_the_gateway_takes_a_batch() {
        let (mut gateway, server) = pipe(4, CancellationToken::new());
        for n in 0..OUTPUT_MESSAGES as u64 {
            server.output.say(note(n)).await.unwrap();
        }
        let mut held = Box::pin(server.output.say(note(9_999)));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            held.as_mut().poll(&mut cx).is_pending(),
            "room for one more than the bound"
        );
        // Room comes back a batch at a time: one message taken is not enough.
        for n in 0..ROOM_BATCH as u64 - 1 {
            assert_eq!(number(&gateway.output.recv().await.unwrap()), n);
        }
        assert!(held.as_mut().poll(&mut cx).is_pending());
        gateway.output.recv().await.unwrap();
        assert!(held.as_mut().poll(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn output_fails_once_the_gateway_is_gone_and_input_ends_on_stop() {
        let stop = CancellationToken::new();
        let (gateway, mut server) = pipe(4, stop.clone());
        gateway.input.send(note(1)).await.unwrap();
        assert_eq!(number(&server.input.recv().await.unwrap()), 1);
        stop.cancel();
        gateway.input.send(note(2)).await.unwrap();
        assert!(
            server.input.recv().await.is_none(),
            "a stopped child's input has ended"
        );
        drop(gateway);
        assert!(server.output.say(note(3)).await.is_err());
    }

    #[tokio::test]
    async fn input_the_server_closed_gives_nothing_more_and_refuses_the_gateway() {
        let (gateway, mut server) = pipe(4, CancellationToken::new());
        gateway.input.send(note(1)).await.unwrap();
        server.input.close();
        assert!(
            server.input.recv().await.is_none(),
            "closed, though one was queued"
        );
        assert!(gateway.input.send(note(2)).await.is_err());
    }
}
