//! Classifying an HTTP response the way an EventSource-style client must.
//!
//! This module owns one decision from WHATWG HTML "Processing model" (server-sent
//! events): given a response's status and `Content-Type`, read it as an event stream, stop
//! reconnecting, or fail the connection. It does not follow redirects (the HTTP client
//! does that before), make requests, or decide delays.

/// What to do with a response to an event-stream request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseAction {
    /// `200` with `text/event-stream`: decode the body; reconnect when it ends.
    ReadStream,
    /// `204 No Content`: the server asks the client to stop reconnecting.
    StopReconnecting,
    /// Fail the connection and do not reconnect.
    Fail(FailReason),
}

/// Why a response fails the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailReason {
    /// A status other than 200 and 204 (a redirect that reached here was not followed).
    Status,
    /// A 200 whose `Content-Type` is missing or not `text/event-stream`.
    ContentType,
}

/// Classifies a response from its status code and `Content-Type` header value.
///
/// WHATWG: a 200 with `Content-Type: text/event-stream` is read, MIME parameters (such as
/// `charset`) ignored; "a client can be told to stop reconnecting using the HTTP 204 No
/// Content response code"; a 200 with another or no `Content-Type`, and "any other HTTP
/// response code", fail the connection, which then does not reconnect. The MIME type is
/// compared case-insensitively, after trimming HTTP whitespace.
///
/// ```
/// use tether_sse::{classify_response, FailReason, ResponseAction};
///
/// assert_eq!(
///     classify_response(200, Some("Text/Event-Stream; charset=utf-8")),
///     ResponseAction::ReadStream
/// );
/// assert_eq!(classify_response(204, None), ResponseAction::StopReconnecting);
/// assert_eq!(
///     classify_response(200, Some("application/json")),
///     ResponseAction::Fail(FailReason::ContentType)
/// );
/// ```
#[must_use]
pub fn classify_response(status: u16, content_type: Option<&str>) -> ResponseAction {
    match status {
        200 if content_type.is_some_and(is_event_stream) => ResponseAction::ReadStream,
        200 => ResponseAction::Fail(FailReason::ContentType),
        204 => ResponseAction::StopReconnecting,
        _ => ResponseAction::Fail(FailReason::Status),
    }
}

fn is_event_stream(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default();
    // HTTP whitespace per the Fetch standard: tab, LF, CR, space.
    essence
        .trim_matches([' ', '\t', '\r', '\n'])
        .eq_ignore_ascii_case("text/event-stream")
}
