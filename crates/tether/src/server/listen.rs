//! The accept loop of [`Server::serve`](super::Server::serve): TCP connections, the limits that
//! keep hostile ones from exhausting the server, and graceful shutdown.
//!
//! It replaces `axum::serve`, which leaves hyper without a timer, so hyper's header read
//! timeout never fires: a client sending its request head one byte a minute (slowloris), or
//! opening connections and sending nothing, would hold a task and a file descriptor forever.
//! Here every connection must send its first byte within
//! [`ConnectionLimits::header_read_timeout`] and then its request head within the same time
//! (hyper's timer, which starts at the first byte of each request), and at most
//! [`ConnectionLimits::max_connections`] are served at once: past that, new connections are
//! closed as soon as they are accepted, so the ones already open keep working. Request bodies
//! are bounded in size and time by the endpoint (`read_body`), not here. A kept-alive
//! connection idle between requests is not timed out (clients' pools keep them on purpose);
//! the connection limit bounds what idle ones can hold.
//!
//! Shutdown: stop accepting, tell every connection to finish its current exchange
//! (`graceful_shutdown`; the writer loops end their streams with a `retry` on the same signal),
//! and wait for all of them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::ConnectionLimits;

/// After a failed `accept` (out of file descriptors, typically), wait this long before the
/// next: retrying at once would spin while nothing can change.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then shuts down gracefully;
/// `on_shutdown` runs when the signal arrives, before the connections are told.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_shutdown: impl FnOnce(),
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, max = limits.max_connections, "connection closed: too many open");
            drop(stream);
            continue;
        };
        // Every SSE event is a small write that must leave at once: Nagle's algorithm would
        // hold progress events and keep-alives back waiting for an ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(error = %crate::error_chain(&error), "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let closing = closing.clone();
        connections.spawn(async move {
            let _slot = slot;
            // hyper's head timer starts with the first byte; a connection that never sends
            // one would wait forever. (`readable()` can report a fresh socket ready before any
            // data; a peek waits for a byte, or for the end.)
            let mut first = [0_u8; 1];
            let first_byte =
                tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first));
            if !matches!(first_byte.await, Ok(Ok(1))) {
                tracing::debug!(%peer, "connection closed: nothing sent");
                return;
            }
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_headers(limits.max_headers);
            builder.http2().timer(TokioTimer::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, error = %crate::error_chain(&*error), "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down");
    on_shutdown();
    closing.cancel();
    connections.close();
    connections.wait().await;
}
