//! The client's typed errors: one enum, so that an application can branch on what happened
//! (the session expired, the stream cannot be resumed, the events are gone, the budget ran
//! out) rather than on text.

use std::time::Duration;

/// A boxed error from the HTTP stack, kept as a source without exposing its type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in a client operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The [`ClientConfig`](super::ClientConfig) or URL is unusable.
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// A connection could not be made, or failed before an answer arrived.
    #[error("network error")]
    Network(#[source] BoxError),
    /// The server did not answer within [`ClientConfig::request_timeout`](super::ClientConfig).
    #[error("timed out waiting for the server")]
    Timeout,
    /// The server no longer knows the session (404). The client has re-initialized (or tried
    /// to: see [`ClientEvent`](super::ClientEvent)); a request that was in flight is lost and
    /// must be sent again by the application if it is safe to repeat.
    #[error("session expired")]
    SessionExpired,
    /// The stream was lost and cannot be resumed: the server answered 405 to the resume GET,
    /// or the stream never carried an event id to resume from.
    #[error("stream not resumable")]
    NotResumable,
    /// The server has no standalone GET stream (it answered 405).
    #[error("server has no standalone stream")]
    NoStandaloneStream,
    /// The server refused the resume cursor (400, JSON-RPC -32000): `reason` is its
    /// `data.reason`, e.g. `expired`, `unknown` or `malformed` (CONTRACTS.md).
    #[error("events unavailable: {reason}")]
    EventsUnavailable {
        /// The server's `data.reason`.
        reason: String,
    },
    /// Reconnecting failed too often or for too long (the reconnect budget).
    #[error("reconnect budget exhausted after {attempts} failed attempts over {elapsed:?}")]
    BudgetExhausted {
        /// Consecutive failed attempts.
        attempts: u32,
        /// Time since the outage began.
        elapsed: Duration,
    },
    /// The server answered 401 twice, the second time after a fresh token was asked for.
    #[error("unauthorized")]
    Unauthorized,
    /// The server answered with a status the client cannot recover from.
    #[error("server answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The response body, truncated to [`MAX_ERROR_BODY`](super::MAX_ERROR_BODY) bytes.
        body: String,
    },
    /// The server speaks only the deprecated 2024-11-05 HTTP+SSE transport.
    #[error("server speaks only the 2024-11-05 HTTP+SSE transport, not Streamable HTTP")]
    LegacyTransport,
    /// The server negotiated or offers only protocol versions this client does not speak
    /// (for example 2026-07-28 only).
    #[error("server does not speak a protocol version this client supports (it offers {offered})")]
    UnsupportedVersion {
        /// What the server offered, as it spelled it.
        offered: String,
    },
    /// The server broke the protocol (an unexpected content type, an unparsable body, an SSE
    /// stream over the decoder's limits).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The client was closed.
    #[error("client closed")]
    Closed,
}

impl Error {
    pub(crate) fn network(error: impl Into<BoxError>) -> Self {
        Self::Network(error.into())
    }
}
