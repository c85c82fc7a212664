//! The client's typed errors: one enum, so that an application can branch on what happened
//! (the session expired, the stream cannot be resumed, the events are gone, the budget ran
//! out) rather than on text.

use std::path::PathBuf;
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
    /// The TLS layer refused the server: its certificate was rejected (an unknown issuer, a
    /// name that does not match the URL, an expired certificate: add a private CA with
    /// [`ClientConfig::extra_root_certificates`](super::ClientConfig)), or no protocol
    /// version or cipher suite was agreed. The source is the TLS library's error. Retrying
    /// does not help.
    #[error("TLS refused the server: {}", tls_reason(.0))]
    Tls(#[source] BoxError),
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
    /// `data.reason`, e.g. `expired`, `unknown` or `malformed`
    /// (docs/CONTRACTS.md#last-event-id-row).
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
    /// The server answered 401 and the [`AuthProvider`](super::AuthProvider) had no other
    /// token for it (or there is none).
    #[error("unauthorized (401): the server refused the credentials, or none were sent")]
    Unauthorized,
    /// The [`AuthProvider`](super::AuthProvider) could not get credentials: a sign-in that
    /// failed or needs the user, an authorization server that cannot be reached, …
    #[error(transparent)]
    Auth(#[from] AuthError),
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
    /// A request's stream ended, complete, without the request's final response: the server
    /// finished it unanswered (a request it cancelled, or one it lost).
    #[error("the stream ended without a response")]
    NoResponse,
    /// The connection to a 2026-07-28 server was lost before it answered `method`, which is
    /// not safe to repeat: the server may have acted on it (a tool may have run), and nothing
    /// in this era resumes its answer. It was not sent again; run it as a task to make it
    /// survive a cut.
    #[error(
        "the connection was lost before {method} was answered; it may have run on the server and was not sent again"
    )]
    MayHaveRun {
        /// The request's method.
        method: String,
    },
    /// A 2026-07-28 server asked for input (`input_required`) that nothing answered: no
    /// [`ServerRequestHandler`](super::ServerRequestHandler) accepts `method`, or it
    /// answered with an error.
    #[error("the server asked {method}, and it was not answered: {message}")]
    QuestionDeclined {
        /// The question's method (`elicitation/create`, `sampling/createMessage`, …).
        method: String,
        /// Why.
        message: String,
    },
    /// The client was closed.
    #[error("client closed")]
    Closed,
    /// The task a call runs as is unknown to the server: it expired (its TTL ran out) or
    /// never was this principal's.
    #[error("the server no longer knows task {task_id}")]
    UnknownTask {
        /// The task's id.
        task_id: String,
    },
    /// Tasks are not on offer: the client speaks the 2025 era, its
    /// [`ClientConfig::tasks`](super::ClientConfig::tasks) is off, or the server does not
    /// advertise `what` in `server/discover`.
    #[error("the server does not offer {what}")]
    TasksNotOffered {
        /// What is missing.
        what: &'static str,
    },
    /// [`Client::call_tool_as_task`](super::Client::call_tool_as_task): the server answered
    /// the call itself instead of with a task: the tool ran directly (it does not run as a
    /// task), or the call was refused (an unknown tool, invalid arguments: an error answer).
    /// The answer is here.
    #[error("the server answered the call without a task")]
    NotATask {
        /// The server's answer.
        response: Box<tether_proto::jsonrpc::Response>,
    },
    /// The request was cancelled by the application (a 2026-07-28 request's connection is
    /// dropped, which the server takes as the cancellation).
    #[error("the request was cancelled")]
    Cancelled,
}

impl Error {
    /// Whether the same operation, tried again later, may succeed: the network failed, the
    /// server did not answer in time or was overloaded or failing (408, 425, 429, 5xx), or the
    /// reconnect budget ran out during an outage. Not for refusals that another try repeats
    /// (configuration, TLS, authorization, a protocol violation), nor for a lost session or
    /// stream, which have predicates of their own.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Network(_) | Self::Timeout | Self::BudgetExhausted { .. } => true,
            Self::Status { status, .. } => {
                matches!(status, 408 | 425 | 429) || (500..=599).contains(status)
            }
            _ => false,
        }
    }

    /// Whether the server no longer knows the session (404): the client re-initializes, and
    /// a request that was in flight must be sent again by the application if that is safe.
    #[must_use]
    pub fn is_session_expired(&self) -> bool {
        matches!(self, Self::SessionExpired)
    }

    /// Whether a lost stream cannot be resumed: the server does not resume streams, the
    /// stream never carried an event id, or the server refused the cursor (its events expired
    /// or it never issued them). What the stream would have carried is gone; nothing was
    /// delivered twice.
    #[must_use]
    pub fn is_not_resumable(&self) -> bool {
        matches!(self, Self::NotResumable | Self::EventsUnavailable { .. })
    }

    /// Whether a lost connection left it unknown if the server acted on the request
    /// ([`Error::MayHaveRun`]).
    #[must_use]
    pub fn may_have_run(&self) -> bool {
        matches!(self, Self::MayHaveRun { .. })
    }

    /// Whether the server refused the client's credentials (401 after a fresh token).
    #[must_use]
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, Self::Unauthorized)
    }

    /// A failure of the HTTP stack: [`Error::Tls`] if a TLS refusal of the server is among its
    /// causes, otherwise [`Error::Network`].
    pub(crate) fn network(error: impl Into<BoxError>) -> Self {
        let error = error.into();
        if tls_cause(&*error).is_some_and(is_refusal) {
            Self::Tls(error)
        } else {
            Self::Network(error)
        }
    }
}

impl Error {
    /// This error's kind as a short, stable name: the `error.type` of a client span and of
    /// `mcp.client.operation.duration` (docs/TELEMETRY.md).
    #[must_use]
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Network(_) => "network",
            Self::Tls(_) => "tls",
            Self::Timeout => "timeout",
            Self::SessionExpired => "session_expired",
            Self::NotResumable => "not_resumable",
            Self::NoStandaloneStream => "no_standalone_stream",
            Self::EventsUnavailable { .. } => "events_unavailable",
            Self::BudgetExhausted { .. } => "budget_exhausted",
            Self::Unauthorized => "unauthorized",
            Self::Auth(_) => "auth",
            Self::Status { .. } => "http_status",
            Self::LegacyTransport => "legacy_transport",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Protocol(_) => "protocol",
            Self::NoResponse => "no_response",
            Self::MayHaveRun { .. } => "may_have_run",
            Self::QuestionDeclined { .. } => "question_declined",
            Self::Closed => "closed",
            Self::UnknownTask { .. } => "unknown_task",
            Self::TasksNotOffered { .. } => "tasks_not_offered",
            Self::NotATask { .. } => "not_a_task",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the request certainly never reached the server: the connection itself could
    /// not be made (refused, unreachable, DNS), so sending it again cannot run it twice.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(self, Self::Network(error)
            if error.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_connect))
    }
}

/// What the TLS library said (for example `invalid peer certificate: UnknownIssuer`).
fn tls_reason(error: &BoxError) -> String {
    tls_cause(&**error).map_or_else(|| error.to_string(), ToString::to_string)
}

/// The rustls error among `error`'s causes, if any. An `io::Error` hides the error it wraps
/// from `source()` (it returns that error's own source), and the HTTP stack nests them
/// (`io::Error(Other, io::Error(InvalidData, rustls::Error))`), so the walk steps into an
/// `io::Error` through `get_ref` instead.
fn tls_cause<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _),
            None => error.source(),
        };
    }
    None
}

/// Whether a TLS error means the peer was refused (its certificate, or no common ground),
/// rather than a connection broken in flight (a bad record, an alert mid-stream), which a
/// reconnect may cure.
fn is_refusal(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType
            | rustls::Error::PeerIncompatible(_)
            | rustls::Error::InvalidCertRevocationList(_)
    )
}

/// Why credentials could not be had. Every variant names what to do about it; a CLI maps
/// them all to one exit code (docs/CONTRACTS.md#oauth-client).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No Protected Resource Metadata at any of the places MCP authorization names.
    #[error("the server asks for authorization but publishes no protected resource metadata (tried {})", tried.join(", "))]
    NoResourceMetadata {
        /// The URLs tried, in order.
        tried: Vec<String>,
    },
    /// No authorization server metadata at any discovery URL.
    #[error("no metadata for the authorization server {issuer} (tried {})", tried.join(", "))]
    NoServerMetadata {
        /// The issuer.
        issuer: String,
        /// The URLs tried, in order.
        tried: Vec<String>,
    },
    /// A metadata document is unusable.
    #[error("unusable metadata from {url}: {reason}")]
    BadMetadata {
        /// Where it came from.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// An authorization server's metadata names another issuer than the one it was looked
    /// up for (RFC 8414 §3.3): refused, as a mix-up would be.
    #[error("the authorization server's metadata names issuer {found:?}, not {expected:?}")]
    IssuerMismatch {
        /// The issuer the metadata URL was built from.
        expected: String,
        /// The one the document names.
        found: String,
    },
    /// The resource metadata's `resource` does not cover the server's URL.
    #[error("the protected resource metadata is for {resource}, not for {server}")]
    ResourceMismatch {
        /// The metadata's `resource`.
        resource: String,
        /// The server's URL.
        server: String,
    },
    /// The authorization server does not offer PKCE with S256, which MCP requires.
    #[error(
        "the authorization server {issuer} does not offer PKCE with S256 (code_challenge_methods_supported), which MCP requires; refusing to sign in"
    )]
    NoS256 {
        /// The issuer.
        issuer: String,
    },
    /// No way to have a client id at this authorization server.
    #[error("cannot register with {issuer}: it has no registration_endpoint{}; pass a pre-registered client id (--oauth-client-id){}", if *.cimd_supported { "" } else { " and does not take client id metadata documents" }, if *.cimd_supported { " or a client metadata document URL (--oauth-client-metadata-url)" } else { "" })]
    RegistrationImpossible {
        /// The issuer.
        issuer: String,
        /// Whether a Client ID Metadata Document URL would be taken.
        cimd_supported: bool,
    },
    /// Dynamic Client Registration was refused.
    #[error("dynamic client registration at {issuer} refused ({status}): {body}")]
    RegistrationRefused {
        /// The issuer.
        issuer: String,
        /// The HTTP status.
        status: u16,
        /// The answer, truncated.
        body: String,
    },
    /// Signing in needs the user, and this client may not ask (no opener, or interaction
    /// forbidden).
    #[error(
        "signing in to {server} needs a browser, and interaction is off: run `tether auth login {server}` first"
    )]
    InteractionRequired {
        /// The server's URL.
        server: String,
    },
    /// The authorization server answered the flow with an error: the user declined consent
    /// (`access_denied`) or the request was refused.
    #[error("the authorization server refused: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Denied {
        /// The OAuth `error` code.
        error: String,
        /// Its `error_description`.
        description: Option<String>,
    },
    /// The redirect's `state` is not this flow's: an answer to another request, or forged.
    #[error("the authorization response's state does not match this sign-in; refused")]
    StateMismatch,
    /// RFC 9207: the redirect's `iss` is missing or names another server.
    #[error("the authorization response's iss is {}, not {expected:?}; refused", found.as_deref().map(|f| format!("{f:?}")).unwrap_or_else(|| "missing".to_owned()))]
    IssMismatch {
        /// The issuer of this flow.
        expected: String,
        /// What the response carried.
        found: Option<String>,
    },
    /// The loopback redirect listener failed or got an unusable request.
    #[error("the sign-in callback failed: {0}")]
    Callback(String),
    /// Nobody completed the sign-in in time.
    #[error("no sign-in arrived at the callback within {seconds} s")]
    CallbackTimeout {
        /// The time waited.
        seconds: u64,
    },
    /// The token endpoint refused a code or a refresh token.
    #[error("the token endpoint refused ({status}): {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    TokenRefused {
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` code (or the body, when it is not an OAuth error).
        error: String,
        /// Its `error_description`.
        description: Option<String>,
    },
    /// The server still wants scope after the step-ups allowed.
    #[error(
        "the server still requires scope {scope:?}, though it was asked for ({attempts} step-up sign-ins made)"
    )]
    InsufficientScope {
        /// The scope the last challenge named.
        scope: String,
        /// Sign-ins made for a 403 (step-ups).
        attempts: u32,
    },
    /// An authorization server or metadata URL could not be reached.
    #[error("cannot reach {url}")]
    Unreachable {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The token cache could not be read or written.
    #[error("token cache {}", path.display())]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Anything else a provider fails with.
    #[error("{0}")]
    Internal(String),
}

impl AuthError {
    pub(crate) fn unreachable(url: &str, source: impl Into<BoxError>) -> Self {
        Self::Unreachable {
            url: url.to_owned(),
            source: source.into(),
        }
    }

    pub(crate) fn cache(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Cache {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16) -> Error {
        Error::Status {
            status,
            body: String::new(),
        }
    }

    #[test]
    fn transient_failures_are_retryable_and_refusals_are_not() {
        let io = || Error::Network(Box::new(std::io::Error::other("reset")));
        for error in [
            io(),
            Error::Timeout,
            Error::BudgetExhausted {
                attempts: 3,
                elapsed: Duration::from_secs(1),
            },
            status(408),
            status(429),
            status(503),
        ] {
            assert!(error.is_retryable(), "{error}");
        }
        for error in [
            Error::Config("x".into()),
            Error::Unauthorized,
            Error::SessionExpired,
            Error::NotResumable,
            status(400),
            status(404),
            Error::Protocol("x".into()),
            Error::NoResponse,
            Error::Closed,
            Error::Cancelled,
        ] {
            assert!(!error.is_retryable(), "{error}");
        }
    }

    #[test]
    fn lost_sessions_streams_and_credentials_have_their_own_predicates() {
        assert!(Error::SessionExpired.is_session_expired());
        assert!(!Error::NotResumable.is_session_expired());
        assert!(Error::NotResumable.is_not_resumable());
        let gone = Error::EventsUnavailable {
            reason: "expired".into(),
        };
        assert!(gone.is_not_resumable());
        assert!(!gone.is_retryable());
        assert!(!Error::SessionExpired.is_not_resumable());
        assert!(Error::Unauthorized.is_unauthorized());
        assert!(!status(401).is_session_expired());
    }
}
