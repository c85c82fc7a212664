//! How a request ends, in either era and as a task: the one path from a handler's outcome to
//! what the store keeps.
//!
//! Three steps, in this order. [`settle`] makes sure what the handler emitted is stored
//! before its answer is: a commit that failed late (`store/pipeline.rs`) lost events the
//! handler was told were queued, so the request is answered as it would have been had its
//! emit failed, after a gap-free prefix. [`store_response`] then appends the answer (a 2025
//! POST's or a 2026-07-28 request's response; a task records an outcome instead), and
//! [`complete`] ends the stream. The last two go through [`persist`], which retries while the
//! store is briefly unavailable: the node is alive, so no other node takes its streams for
//! orphans, and an answer or a completion lost to a Redis restart would leave the request
//! unanswered for good.

use std::future::Future;
use std::time::Duration;

use tether_proto::ids::StreamId;
use tether_proto::jsonrpc::Response as RpcResponse;

use super::error::ServerError;
use super::session::SessionRuntime;
use crate::store::StoreError;

/// How long a request's final response and its stream's completion are retried while the
/// store is unavailable: the default retention, past which a client could not read them
/// anyway.
const STORE_RETRY_LIMIT: Duration = Duration::from_secs(300);
/// First pause between such retries, doubled up to [`STORE_RETRY_MAX_DELAY`].
const STORE_RETRY_MIN_DELAY: Duration = Duration::from_millis(50);
/// Longest pause between such retries.
const STORE_RETRY_MAX_DELAY: Duration = Duration::from_secs(2);

/// `response` once everything the handler emitted to `related` is stored; when some of it was
/// lost, an error answering the same request in its place. `None` (a cancelled request) stays
/// `None`: there is nothing to answer, but the flush still runs so that the stream is a
/// gap-free prefix before it is completed.
pub(crate) async fn settle(
    runtime: &SessionRuntime,
    related: StreamId,
    response: Option<RpcResponse>,
) -> Option<RpcResponse> {
    let flushed = runtime.events().flush(related).await;
    match (response, flushed) {
        (Some(response), Err(error)) => {
            tracing::warn!(error = %crate::error_chain(&error), "events of a request were lost: answering with an error");
            let error = ServerError::Store(error)
                .error_object()
                .expect("a store failure has a JSON-RPC error");
            Some(RpcResponse::error(response.id().cloned(), error))
        }
        (response, _) => response,
    }
}

/// Appends `response` to `stream` and waits for it to be stored. A failure is logged (at
/// debug once the session has ended: nobody is left to read it) and returned.
pub(crate) async fn store_response(
    runtime: &SessionRuntime,
    stream: StreamId,
    response: &RpcResponse,
) -> Result<(), StoreError> {
    let bytes = runtime.response_bytes(response);
    // Flushed, so that a commit failure the pipeline reports late is seen here and the
    // response appended again, rather than lost.
    let stored = persist(runtime, || async {
        runtime.append_bytes(stream, &bytes).await?;
        runtime.events().flush(stream).await
    })
    .await;
    if let Err(error) = &stored {
        if runtime.is_closed() {
            tracing::debug!(error = %crate::error_chain(&error), "response dropped: session ended");
        } else {
            tracing::warn!(error = %crate::error_chain(&error), "response could not be stored");
        }
    }
    stored
}

/// Marks `stream` complete, which ends every writer loop reading it.
pub(crate) async fn complete(runtime: &SessionRuntime, stream: StreamId) {
    if let Err(error) = persist(runtime, || runtime.events().complete(stream)).await {
        if runtime.is_closed() {
            tracing::debug!(error = %crate::error_chain(&error), "stream not completed: session ended");
        } else {
            tracing::warn!(error = %crate::error_chain(&error), "stream could not be completed");
        }
    }
}

/// Runs a store write until it succeeds, fails for a reason other than the store being
/// unavailable, the session ends, or [`STORE_RETRY_LIMIT`] passes (module docs).
pub(crate) async fn persist<T, F, Fut>(
    runtime: &SessionRuntime,
    mut write: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + STORE_RETRY_LIMIT;
    let mut delay = STORE_RETRY_MIN_DELAY;
    loop {
        match write().await {
            Err(StoreError::Unavailable(reason))
                if !runtime.is_closed() && tokio::time::Instant::now() < deadline =>
            {
                tracing::debug!(%reason, ?delay, "store unavailable; retrying the write");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = runtime.closed().cancelled() => {}
                }
                delay = (delay * 2).min(STORE_RETRY_MAX_DELAY);
            }
            outcome => return outcome,
        }
    }
}
