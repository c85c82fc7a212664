//! Requests for a session whose handler runs on another node of a shared store.
//!
//! Both sides live here. The receiving node hands a POST or DELETE to the session's home node
//! through the store's [`Relay`] and waits, at most [`HANDOFF_TIMEOUT`], for the answer: for a
//! POST with requests, the Request stream the home node is filling, which the receiving node
//! serves from the store like any other stream (or, when the client asked for JSON, reads to
//! its end and answers with the responses); otherwise an HTTP answer it passes on unchanged.
//! The home node takes each handoff exactly as it would take the request itself (same
//! validation, same dispatch), so a session behaves the same whichever node a client reaches,
//! and every refusal is still made by [`ServerError`].
//!
//! The wait covers only taking the request (a store round trip): a request's events travel
//! through the store, so a long tool call does not hold a handoff open, and the home node
//! dying mid-call leaves an orphaned stream that a live node answers after the lease.

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::Value;
use tether_proto::headers::ResponseKind;
use tether_proto::ids::{SessionId, StreamId};
use tether_proto::jsonrpc::{Batching, Body as RpcBody, Message, parse_body};
use tokio::sync::mpsc;

use super::dispatch::{self, Answer, Recipient};
use super::error::ServerError;
use super::reply::json_response;
use super::session::SessionRuntime;
use super::state::ServerState;
use super::writer::{READ_BATCH, Start};
use crate::store::SessionRecord;
use crate::store::relay::{Handoff, HandoffAnswer, IncomingHandoff, RelayError};

/// How long a node waits for a session's home node to take a request handed to it. Taking
/// one is a store round trip, so this runs out only when the home node is stuck, shutting
/// down, or its answer was lost; the client then gets a 503 with `Retry-After`.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// A POST received for a session that runs on another node.
pub(crate) struct Post {
    pub(crate) record: SessionRecord,
    pub(crate) principal: Arc<str>,
    pub(crate) body: Bytes,
    pub(crate) accept: Option<String>,
    pub(crate) is_batch: bool,
}

/// Hands `post` to `node` and answers the client with what it says.
pub(crate) async fn post(
    state: &Arc<ServerState>,
    node: &str,
    post: Post,
) -> Result<Response, ServerError> {
    // Decided here too, so that a 406 does not need the other node.
    let kind = state.answer_kind(post.accept.as_deref());
    let handoff = Handoff::Post {
        session: post.record.id.as_str().to_owned(),
        principal: post.principal.to_string(),
        accept: post.accept,
        // The parser accepted it, so it is UTF-8.
        body: String::from_utf8_lossy(&post.body).into_owned(),
    };
    let answer = ask(state, node, handoff).await?;
    let Some(stream) = answer.stream() else {
        return Ok(http_response(answer));
    };
    let runtime = state.runtime(post.record).await?;
    match kind? {
        ResponseKind::EventStream => Ok(state
            .writer(&runtime, stream, Start::Fresh { cursor: 0 })
            .into_response(None)),
        ResponseKind::Json => collect_json(state, &runtime, stream, post.is_batch).await,
    }
}

/// Hands a DELETE of `record` to `node` and answers the client with what it says.
pub(crate) async fn delete(
    state: &Arc<ServerState>,
    node: &str,
    record: SessionRecord,
    principal: Arc<str>,
) -> Result<Response, ServerError> {
    let handoff = Handoff::Delete {
        session: record.id.as_str().to_owned(),
        principal: principal.to_string(),
    };
    let answer = ask(state, node, handoff).await?;
    // The home node dropped its state; drop what this node held for the session too.
    state.forget(&record.id);
    Ok(http_response(answer))
}

/// Sends `handoff` to `node` and waits for its answer.
async fn ask(
    state: &ServerState,
    node: &str,
    handoff: Handoff,
) -> Result<HandoffAnswer, ServerError> {
    let relay = state
        .relay
        .as_ref()
        .expect("sessions live on other nodes only with a relay");
    match relay.hand_off(node, handoff).await {
        Ok(answered) => match tokio::time::timeout(HANDOFF_TIMEOUT, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(%node, "the session's node did not answer a handoff");
                Err(ServerError::HomeUnavailable)
            }
        },
        Err(RelayError::NotListening(_)) => {
            tracing::warn!(%node, "the session's node is not listening");
            Err(ServerError::HomeUnavailable)
        }
        Err(RelayError::Store(error)) => Err(error.into()),
    }
}

/// Reads Request stream `stream` to its end and answers with its responses as JSON.
async fn collect_json(
    state: &ServerState,
    runtime: &SessionRuntime,
    stream: StreamId,
    is_batch: bool,
) -> Result<Response, ServerError> {
    let mut cursor = 0;
    let mut responses = Vec::new();
    loop {
        let batch = state
            .events
            .read_after(runtime.owner(), stream, cursor, READ_BATCH)
            .await?;
        for event in &batch.events {
            cursor = event.id.seq;
            let message = serde_json::from_slice::<Value>(event.message())
                .ok()
                .and_then(|value| Message::from_value(value).ok());
            if let Some(Message::Response(response)) = message {
                responses.push(response);
            }
        }
        if batch.complete {
            break;
        }
        tokio::select! {
            waited = state.events.wait_for_more(stream, cursor) => waited?,
            () = state.shutdown.cancelled() => return Err(ServerError::ShuttingDown),
        }
    }
    Ok(match dispatch::json_body(&responses, is_batch) {
        Some(body) => json_response(body, None),
        None => StatusCode::ACCEPTED.into_response(),
    })
}

/// An HTTP answer from another node as this node's response.
fn http_response(answer: HandoffAnswer) -> Response {
    let HandoffAnswer::Http {
        status,
        headers,
        body,
    } = answer
    else {
        return ServerError::HomeUnavailable.into_response();
    };
    let mut response = body.into_response();
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    // `String::into_response` set `text/plain`; the other node says what it is.
    response.headers_mut().remove(http::header::CONTENT_TYPE);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Takes the handoffs other nodes send this node, each in a task of its own, until the
/// server is dropped.
pub(crate) async fn serve(
    state: Weak<ServerState>,
    mut inbox: mpsc::UnboundedReceiver<IncomingHandoff>,
) {
    while let Some(incoming) = inbox.recv().await {
        let Some(state) = state.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let answer = take(&state, incoming.handoff)
                .await
                .unwrap_or_else(ServerError::into_handoff_answer);
            let _ = incoming.reply.send(answer);
        });
    }
}

/// Does what a handoff asks, as this node would for the request itself.
async fn take(state: &Arc<ServerState>, handoff: Handoff) -> Result<HandoffAnswer, ServerError> {
    if state.shutdown.is_cancelled() {
        return Err(ServerError::ShuttingDown);
    }
    match handoff {
        Handoff::Post {
            session,
            principal,
            accept,
            body,
        } => {
            let record = state.record_of(&session_id(&session)?, &principal).await?;
            let batching = if record.version.allows_batches() {
                Batching::Allowed
            } else {
                Batching::Forbidden
            };
            let runtime = state.local_session(record).await?;
            let raw = body;
            let body = parse_body(raw.as_bytes(), batching)?;
            let is_batch = matches!(body, RpcBody::Batch(_));
            let answer = dispatch::post(
                state,
                &runtime,
                raw.as_bytes(),
                body.into_messages(),
                accept.as_deref(),
                is_batch,
                Recipient::Node,
            )
            .await?;
            Ok(match answer {
                Answer::Stream(stream) => HandoffAnswer::Stream {
                    stream: stream.as_str().to_owned(),
                },
                Answer::Accepted => empty_answer(StatusCode::ACCEPTED),
                Answer::Json(body) => HandoffAnswer::Http {
                    status: StatusCode::OK.as_u16(),
                    headers: vec![(
                        http::header::CONTENT_TYPE.to_string(),
                        tether_proto::headers::APPLICATION_JSON.to_owned(),
                    )],
                    body: String::from_utf8_lossy(&body).into_owned(),
                },
            })
        }
        Handoff::Delete { session, principal } => {
            let record = state.record_of(&session_id(&session)?, &principal).await?;
            if !state.terminate(&record.id).await? {
                return Err(ServerError::SessionNotFound);
            }
            tracing::info!(session = %record.id, "session deleted (handed over)");
            Ok(empty_answer(StatusCode::OK))
        }
    }
}

fn session_id(text: &str) -> Result<SessionId, ServerError> {
    SessionId::parse(text).map_err(|_| ServerError::MalformedSessionId)
}

fn empty_answer(status: StatusCode) -> HandoffAnswer {
    HandoffAnswer::Http {
        status: status.as_u16(),
        headers: Vec::new(),
        body: String::new(),
    }
}
