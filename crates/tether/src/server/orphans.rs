//! Answering the requests an earlier process left unanswered.
//!
//! With a durable store, a server that was killed mid-request leaves Request streams that
//! nothing will ever complete: their handlers died with the process. A client resuming such a
//! stream after the restart would replay what was stored and then wait forever. When it is
//! built, before any request can reach it, the server therefore asks the store for those streams
//! ([`EventStore::orphaned_streams`]), appends a JSON-RPC error for every request on them
//! that has no stored response yet, and completes them, so the resuming client gets every
//! event stored before the crash, then an answer, then the end of the stream.
//!
//! `background` runs the same sweep every second, for the streams a dead node of a shared
//! store leaves. This module owns the sweep; the error's code and reason are pinned here.

use std::collections::HashSet;

use serde_json::json;
use tether_proto::jsonrpc::{ErrorObject, INTERNAL_ERROR, Message, RequestId, Response};

use crate::stdio;
use crate::store::{EventStore, OrphanedStream, StoreError};

/// `error.data.reason` of the answer to a request whose handler died with its process (a
/// restart, or a node of a shared store that died).
pub const SERVER_RESTARTED_REASON: &str = crate::store::tasks::SERVER_RESTARTED;

/// Events read per batch while looking for the responses already stored.
const READ_BATCH: usize = 1024;

/// What [`Server::answer_orphans`](super::Server::answer_orphans) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrphanReport {
    /// Request streams found incomplete and completed.
    pub streams: usize,
    /// Requests answered with the restart error.
    pub requests: usize,
}

/// Answers and completes every orphaned Request stream of `events`.
///
/// A stream that vanished meanwhile (its session was deleted or expired) is skipped.
///
/// # Errors
///
/// Only when the store itself is unavailable.
pub(crate) async fn answer_orphans(events: &dyn EventStore) -> Result<OrphanReport, StoreError> {
    let mut report = OrphanReport::default();
    for orphan in events.orphaned_streams().await? {
        match answer_orphan(events, &orphan).await {
            Ok(answered) => {
                report.streams += 1;
                report.requests += answered;
                tracing::info!(
                    session = %orphan.owner.session,
                    stream = %orphan.stream,
                    answered,
                    "request stream left open by an earlier process: answered and completed"
                );
            }
            Err(error @ StoreError::Unavailable(_)) => return Err(error),
            Err(error) => {
                tracing::debug!(stream = %orphan.stream, error = %crate::error_chain(&error), "orphaned stream skipped");
            }
        }
    }
    if report.streams > 0 {
        tracing::info!(
            streams = report.streams,
            requests = report.requests,
            "answered requests another process left unanswered"
        );
    }
    Ok(report)
}

/// Appends the restart error for each request of `orphan` without a stored response, then
/// completes the stream. Returns how many requests it answered.
async fn answer_orphan(
    events: &dyn EventStore,
    orphan: &OrphanedStream,
) -> Result<usize, StoreError> {
    let answered = stored_response_ids(events, orphan).await?;
    let mut count = 0;
    for id in orphan.requests.iter().filter(|id| !answered.contains(*id)) {
        let message = Message::Response(restart_error(id.clone()));
        events.append(orphan.stream, &message.to_vec()).await?;
        count += 1;
    }
    events.complete(orphan.stream).await?;
    Ok(count)
}

/// The ids of the responses already stored on `orphan`'s stream. If its oldest events were
/// evicted, what is left is all anyone can still be given, so only those count.
async fn stored_response_ids(
    events: &dyn EventStore,
    orphan: &OrphanedStream,
) -> Result<HashSet<RequestId>, StoreError> {
    let mut answered = HashSet::new();
    let mut batch = match events
        .read_from_start(&orphan.owner, orphan.stream, READ_BATCH)
        .await
    {
        Err(StoreError::Expired) => return Ok(answered),
        other => other?,
    };
    loop {
        for event in &batch.events {
            // Stored messages are the server's own, one JSON-RPC message each.
            if let Some(Ok(Message::Response(response))) = stdio::parse_line(event.message())
                && let Some(id) = response.id()
            {
                answered.insert(id.clone());
            }
        }
        let Some(last) = batch.events.last() else {
            return Ok(answered);
        };
        let after = last.id.seq;
        batch = match events
            .read_after(&orphan.owner, orphan.stream, after, READ_BATCH)
            .await
        {
            Err(StoreError::Expired) => return Ok(answered),
            other => other?,
        };
    }
}

/// The answer to request `id`, whose handler died with an earlier process.
fn restart_error(id: RequestId) -> Response {
    Response::error(
        Some(id),
        ErrorObject::new(
            INTERNAL_ERROR,
            "the server process running this request stopped before it finished; its result is lost",
        )
        .with_data(json!({ "reason": SERVER_RESTARTED_REASON })),
    )
}
