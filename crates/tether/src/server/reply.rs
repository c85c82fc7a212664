//! The HTTP shapes of an accepted request's answer: `202 Accepted`, an `application/json`
//! body, or an SSE stream served by a writer loop.
//!
//! Refusals are not here: every one is a [`ServerError`](super::error::ServerError), mapped
//! to its status and body in `error`.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use tether_proto::headers::{self, MCP_SESSION_ID};

use super::dispatch::Answer;
use super::session::SessionRuntime;
use super::state::ServerState;
use super::writer::Start;

/// The HTTP answer to an accepted POST.
pub(crate) fn respond(
    state: &ServerState,
    runtime: &Arc<SessionRuntime>,
    answer: Answer,
) -> Response {
    match answer {
        Answer::Accepted => StatusCode::ACCEPTED.into_response(),
        Answer::Stream(stream) => state
            .writer(runtime, stream, Start::Fresh { cursor: 0 })
            .into_response(None),
        Answer::Json(body) => json_response(body, None),
    }
}

/// A JSON answer (`application/json`), with `Mcp-Session-Id` when it starts a session.
pub(crate) fn json_response(body: Vec<u8>, session: Option<HeaderValue>) -> Response {
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(headers::APPLICATION_JSON),
        )],
        body,
    )
        .into_response();
    if let Some(session) = session {
        response.headers_mut().insert(MCP_SESSION_ID, session);
    }
    response
}
