//! Every way the endpoint refuses a request, and its HTTP answer, in one place.
//!
//! Each [`ServerError`] knows its status, its JSON-RPC error body (with `"id": null`: a
//! transport-level refusal answers no particular request; a refused 2026-07-28 request's own
//! id, which that era requires) and any extra headers
//! (`Retry-After`, `Allow`, `WWW-Authenticate`), and turns itself into a response through
//! axum's [`IntoResponse`]. The endpoint's handlers return `Result<_, ServerError>` and never
//! build an error body themselves, so no path can forget the body or the status
//! (docs/CONTRACTS.md#wire-behaviour; docs/CONTRIBUTING.md#errors). JSON-RPC errors *inside* a
//! stream (a handler's error result) are not here: they are ordinary responses.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tether_proto::jsonrpc::{self, ErrorObject, ParseError};
use tether_proto::version::Eras;

use super::auth::AuthFailure;
use crate::store::StoreError;
use crate::store::relay::HandoffAnswer;

/// JSON-RPC code of an unusable `Last-Event-ID` (docs/CONTRACTS.md#last-event-id-row):
/// implementation-defined server error, since no standard code fits and -32600 would blame the
/// body.
pub const RESUME_REFUSED: i64 = -32000;

/// `Retry-After` for 503 "too many sessions": sessions end by DELETE or idle expiry, which
/// takes minutes; a client retrying sooner than this only adds load.
pub const TOO_MANY_SESSIONS_RETRY_AFTER: Duration = Duration::from_secs(30);

/// `Retry-After` for 429 "too many concurrent requests": requests finish in seconds, so a
/// short pause is enough for a slot to free up.
pub const TOO_MANY_REQUESTS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// `Retry-After` in whole seconds: rounded up, so a client that waits as told is admitted,
/// and at least 1.
fn retry_after_secs(after: Duration) -> u64 {
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    secs.max(1)
}

/// `Retry-After` for 503 while shutting down: a restart or another node takes a few seconds.
pub const SHUTTING_DOWN_RETRY_AFTER: Duration = Duration::from_secs(2);

/// `Retry-After` for 503 when another node that runs the session did not take a request: a
/// node restarting or a Redis hiccup passes in seconds.
pub const HOME_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// `Retry-After` for 503 while an authorization server's keys cannot be loaded: its
/// metadata is fetched again at most this often anyway.
const AUTH_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(5);

/// `Retry-After` for 503 while the store is unavailable: Redis restarting or a failover is
/// back within seconds, and nothing was acted on, so the same request may come again.
pub const STORE_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Why a `Last-Event-ID` cannot be resumed: the `data.reason` of the 400
/// (docs/CONTRACTS.md#last-event-id-row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResumeRefusal {
    /// Not an event id of this server's shape.
    Malformed,
    /// No such stream for this session (including another session's stream: no answer
    /// reveals that another session exists).
    Unknown,
    /// The events after the id are no longer stored.
    Expired,
}

impl ResumeRefusal {
    /// The `data.reason` value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Unknown => "unknown",
            Self::Expired => "expired",
        }
    }
}

/// A refused request: each variant is one row of the status table of
/// docs/CONTRACTS.md#status-table.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The body is not JSON (-32700), not a JSON-RPC message, or a batch the version forbids
    /// (-32600): 400.
    #[error(transparent)]
    InvalidBody(#[from] ParseError),
    /// The request body could not be read (the client went away mid-body): 400.
    #[error("request body could not be read")]
    BodyUnreadable,
    /// A non-initialize request without `Mcp-Session-Id`: 400.
    #[error("missing Mcp-Session-Id header")]
    MissingSessionId,
    /// `Mcp-Session-Id` is not visible ASCII: 400.
    #[error("malformed Mcp-Session-Id header")]
    MalformedSessionId,
    /// Unknown, terminated or expired session, or another principal's: 404.
    #[error("session not found")]
    SessionNotFound,
    /// `MCP-Protocol-Version` names a version this server does not serve, or (under
    /// `Eras::Modern`) a legacy request arrived: 400 listing the versions the eras serve.
    #[error("unsupported MCP-Protocol-Version")]
    UnsupportedProtocolVersion(Eras),
    /// `initialize` on a server that serves the 2026-07-28 era alone: 400, the
    /// unsupported-version error listing that version (a legacy client has no way forward but
    /// to tell its user), with the request's id and the version it asked for.
    #[error("unsupported protocol version: this server serves 2026-07-28 only")]
    InitializeRefused {
        /// The `initialize` request's id.
        id: tether_proto::jsonrpc::RequestId,
        /// Its `params.protocolVersion`, when it is a string.
        requested: Option<String>,
    },
    /// `Accept` excludes every answer the server could give: 406.
    #[error("Accept must allow {needs}")]
    NotAcceptable {
        /// The media type(s) the answer needs.
        needs: &'static str,
    },
    /// POST without `Content-Type: application/json`: 415.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// An `Origin` not on the allow-list (DNS rebinding, S-SEC-1/2): 403.
    #[error("origin not allowed")]
    ForbiddenOrigin,
    /// A `Host` not on the allow-list (DNS rebinding): 403.
    #[error("host not allowed")]
    ForbiddenHost,
    /// Credentials refused by the authenticator: 401 (missing or invalid), 403 (a scope
    /// missing) or 503 (they cannot be checked for now), with its `WWW-Authenticate`.
    #[error("{}", unauthorized_message(failure))]
    Unauthorized {
        /// Why.
        failure: AuthFailure,
        /// The `WWW-Authenticate` value.
        challenge: String,
    },
    /// The body is larger than the configured limit: 413.
    #[error("request body over {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body did not arrive within the configured time: 408.
    #[error("request body not received within {timeout:?}")]
    BodyTimeout {
        /// The limit.
        timeout: Duration,
    },
    /// The server holds its maximum number of sessions: 503 with `Retry-After`.
    #[error("too many sessions")]
    TooManySessions,
    /// The session has its maximum number of requests in flight: 429 with `Retry-After`.
    #[error("too many concurrent requests in this session")]
    TooManyRequests,
    /// The principal used up its rate limit (`ServerConfig::rate_limit`): 429 with
    /// `Retry-After`, the whole seconds until it may send this again.
    #[error("rate limit reached: send this again in {}s", retry_after_secs(*.retry_after))]
    RateLimited {
        /// How long until the request would be admitted.
        retry_after: Duration,
    },
    /// An unusable `Last-Event-ID`: 400 with -32000 and `data.reason`.
    #[error("cannot resume: {}", .0.as_str())]
    ResumeRefused(ResumeRefusal),
    /// GET while GET streams are turned off: 405 with `Allow: POST, DELETE`, empty body.
    #[error("GET streams are disabled")]
    GetDisabled,
    /// The server is shutting down and cannot finish a JSON answer: 503 with `Retry-After`.
    #[error("server shutting down")]
    ShuttingDown,
    /// The session runs on another node, which did not take or answer a request handed to it
    /// in time: 503 with `Retry-After`.
    #[error("the node running this session did not answer")]
    HomeUnavailable,
    /// The event or session store failed: 503 when it is unavailable, 500 otherwise.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A 2026-07-28 request refused before it ran (its envelope, headers, version, method,
    /// answers): the status and error the modern era pins, answered with the request's id.
    #[error("{}", .0.error.message)]
    Modern(Box<ModernRefusal>),
    /// GET or DELETE in the 2026-07-28 era, which has neither: 405 with `Allow: POST`.
    #[error("the 2026-07-28 era serves POST only")]
    ModernMethodNotAllowed,
}

/// A refused 2026-07-28 request ([`ServerError::Modern`]).
#[derive(Debug)]
pub struct ModernRefusal {
    /// The request's id, echoed in the error (`None` when it could not be read).
    pub id: Option<tether_proto::jsonrpc::RequestId>,
    /// 400 or 404.
    pub status: StatusCode,
    /// The JSON-RPC error.
    pub error: ErrorObject,
}

impl ServerError {
    /// A refused 2026-07-28 request.
    pub(crate) fn modern(
        id: Option<tether_proto::jsonrpc::RequestId>,
        status: StatusCode,
        error: ErrorObject,
    ) -> Self {
        Self::Modern(Box::new(ModernRefusal { id, status, error }))
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidBody(_)
            | Self::BodyUnreadable
            | Self::MissingSessionId
            | Self::MalformedSessionId
            | Self::UnsupportedProtocolVersion(_)
            | Self::InitializeRefused { .. }
            | Self::ResumeRefused(_) => StatusCode::BAD_REQUEST,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::ForbiddenOrigin | Self::ForbiddenHost => StatusCode::FORBIDDEN,
            Self::Unauthorized { failure, .. } => match failure {
                AuthFailure::InsufficientScope(_) => StatusCode::FORBIDDEN,
                AuthFailure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            },
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::TooManySessions | Self::ShuttingDown | Self::HomeUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::TooManyRequests
            | Self::RateLimited { .. }
            | Self::Store(StoreError::TooManyStreams) => StatusCode::TOO_MANY_REQUESTS,
            Self::GetDisabled | Self::ModernMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Modern(refusal) => refusal.status,
            Self::Store(StoreError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON-RPC error of the body, or `None` for an empty body (405).
    #[must_use]
    pub fn error_object(&self) -> Option<ErrorObject> {
        let object = match self {
            // The parser classified it: -32700 for invalid JSON, -32600 otherwise.
            Self::InvalidBody(error) => ErrorObject::new(error.code(), error.to_string()),
            Self::UnsupportedProtocolVersion(eras) => {
                ErrorObject::new(jsonrpc::INVALID_REQUEST, self.to_string())
                    .with_data(tether_proto::modern::unsupported_version_data(*eras, None))
            }
            Self::InitializeRefused { requested, .. } => {
                ErrorObject::new(jsonrpc::INVALID_REQUEST, self.to_string()).with_data(
                    tether_proto::modern::unsupported_version_data(
                        Eras::Modern,
                        requested.as_deref(),
                    ),
                )
            }
            Self::Modern(refusal) => refusal.error.clone(),
            Self::ResumeRefused(reason) => ErrorObject::new(RESUME_REFUSED, self.to_string())
                .with_data(json!({"reason": reason.as_str()})),
            Self::GetDisabled | Self::ModernMethodNotAllowed => return None,
            Self::Store(_) | Self::HomeUnavailable => {
                ErrorObject::new(jsonrpc::INTERNAL_ERROR, self.to_string())
            }
            _ => ErrorObject::new(jsonrpc::INVALID_REQUEST, self.to_string()),
        };
        Some(object)
    }

    /// Headers the answer carries besides `Content-Type`.
    #[must_use]
    pub fn extra_headers(&self) -> Vec<(header::HeaderName, HeaderValue)> {
        let retry_after = |after: Duration| {
            (
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(after)),
            )
        };
        match self {
            Self::TooManySessions => vec![retry_after(TOO_MANY_SESSIONS_RETRY_AFTER)],
            Self::RateLimited { retry_after: after } => vec![retry_after(*after)],
            Self::TooManyRequests | Self::Store(StoreError::TooManyStreams) => {
                vec![retry_after(TOO_MANY_REQUESTS_RETRY_AFTER)]
            }
            Self::ShuttingDown => vec![retry_after(SHUTTING_DOWN_RETRY_AFTER)],
            Self::HomeUnavailable => vec![retry_after(HOME_UNAVAILABLE_RETRY_AFTER)],
            Self::Store(StoreError::Unavailable(_)) => {
                vec![retry_after(STORE_UNAVAILABLE_RETRY_AFTER)]
            }
            Self::GetDisabled => vec![(header::ALLOW, HeaderValue::from_static("POST, DELETE"))],
            Self::ModernMethodNotAllowed => {
                vec![(header::ALLOW, HeaderValue::from_static("POST"))]
            }
            Self::Unauthorized { failure, challenge } => {
                let challenge = HeaderValue::from_str(challenge)
                    .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
                let mut headers = vec![(header::WWW_AUTHENTICATE, challenge)];
                if *failure == AuthFailure::Unavailable {
                    headers.push(retry_after(AUTH_UNAVAILABLE_RETRY_AFTER));
                }
                headers
            }
            _ => Vec::new(),
        }
    }

    /// The body: a JSON-RPC error response with `"id": null` (a modern request's own id, or a
    /// refused `initialize`'s), or nothing.
    fn body(&self) -> Option<Vec<u8>> {
        let id = match self {
            Self::Modern(refusal) => refusal.id.as_ref().map_or(Value::Null, |id| json!(id)),
            Self::InitializeRefused { id, .. } => json!(id),
            _ => Value::Null,
        };
        self.error_object().map(|error| {
            let response: Value = json!({"jsonrpc": "2.0", "id": id, "error": error});
            serde_json::to_vec(&response).expect("a JSON value always serializes")
        })
    }
}

/// The message of a refusal of credentials: what the client can act on, never the reason an
/// invalid token was refused (that is logged and counted).
fn unauthorized_message(failure: &AuthFailure) -> String {
    match failure {
        AuthFailure::Missing => "authorization required".to_owned(),
        AuthFailure::InvalidToken(_) => "invalid token".to_owned(),
        AuthFailure::InsufficientScope(needed) => {
            format!("insufficient scope: needs {}", needed.join(" "))
        }
        AuthFailure::Unavailable => "credentials cannot be checked now".to_owned(),
    }
}

impl ServerError {
    /// This refusal as the answer to a request another node handed over, for that node to
    /// pass on unchanged (see `super::handoff`).
    pub(crate) fn into_handoff_answer(self) -> HandoffAnswer {
        let mut headers: Vec<(String, String)> = self
            .extra_headers()
            .into_iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let body = self.body().map_or_else(String::new, |body| {
            headers.push((
                header::CONTENT_TYPE.to_string(),
                tether_proto::headers::APPLICATION_JSON.to_owned(),
            ));
            String::from_utf8(body).expect("serde_json writes UTF-8")
        });
        HandoffAnswer::Http {
            status: self.status().as_u16(),
            headers,
            body,
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(status = status.as_u16(), error = %self, "request failed");
        } else {
            tracing::debug!(status = status.as_u16(), error = %self, "request refused");
        }
        let mut response = match self.body() {
            Some(body) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(tether_proto::headers::APPLICATION_JSON),
                )],
                body,
            )
                .into_response(),
            None => ().into_response(),
        };
        *response.status_mut() = status;
        response.headers_mut().extend(self.extra_headers());
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unauthorized(failure: AuthFailure) -> ServerError {
        ServerError::Unauthorized {
            failure,
            challenge: "Bearer".into(),
        }
    }

    #[test]
    fn every_refusal_has_its_status_and_code() {
        let cases = [
            (ServerError::MissingSessionId, 400, Some(-32600)),
            (ServerError::SessionNotFound, 404, Some(-32600)),
            (
                ServerError::UnsupportedProtocolVersion(Eras::Both),
                400,
                Some(-32600),
            ),
            (ServerError::NotAcceptable { needs: "x" }, 406, Some(-32600)),
            (ServerError::UnsupportedMediaType, 415, Some(-32600)),
            (ServerError::ForbiddenOrigin, 403, Some(-32600)),
            (unauthorized(AuthFailure::Missing), 401, Some(-32600)),
            (
                unauthorized(AuthFailure::InvalidToken("x")),
                401,
                Some(-32600),
            ),
            (
                unauthorized(AuthFailure::InsufficientScope(vec!["s".into()])),
                403,
                Some(-32600),
            ),
            (unauthorized(AuthFailure::Unavailable), 503, Some(-32600)),
            (ServerError::PayloadTooLarge { limit: 1 }, 413, Some(-32600)),
            (ServerError::TooManySessions, 503, Some(-32600)),
            (ServerError::TooManyRequests, 429, Some(-32600)),
            (
                ServerError::RateLimited {
                    retry_after: Duration::from_millis(1500),
                },
                429,
                Some(-32600),
            ),
            (
                ServerError::ResumeRefused(ResumeRefusal::Expired),
                400,
                Some(-32000),
            ),
            (ServerError::GetDisabled, 405, None),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
            assert_eq!(error.error_object().map(|e| e.code), code, "{error}");
        }
    }

    #[test]
    fn unsupported_version_lists_the_supported_ones() {
        let data = |eras| {
            ServerError::UnsupportedProtocolVersion(eras)
                .error_object()
                .unwrap()
                .data
                .unwrap()
        };
        assert_eq!(
            data(Eras::Both),
            json!({"supported": ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]})
        );
        assert_eq!(
            data(Eras::Legacy),
            json!({"supported": ["2025-03-26", "2025-06-18", "2025-11-25"]})
        );
        assert_eq!(data(Eras::Modern), json!({"supported": ["2026-07-28"]}));
    }

    #[test]
    fn a_refused_initialize_echoes_its_id_and_version() {
        let refused = ServerError::InitializeRefused {
            id: tether_proto::jsonrpc::RequestId::from(7_i64),
            requested: Some("2025-11-25".into()),
        };
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_slice(&refused.body().unwrap()).unwrap();
        assert_eq!(body["id"], 7);
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(
            body["error"]["data"],
            json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
        );
    }

    #[test]
    fn retry_after_and_allow_headers() {
        let headers = ServerError::TooManySessions.extra_headers();
        assert_eq!(headers[0].0, header::RETRY_AFTER);
        assert_eq!(headers[0].1, "30");
        let headers = ServerError::GetDisabled.extra_headers();
        assert_eq!(headers[0].1, "POST, DELETE");
        let headers = unauthorized(AuthFailure::Missing).extra_headers();
        assert_eq!(headers[0].1, "Bearer");
        // Rounded up: waiting as told is enough.
        let limited = |millis| {
            ServerError::RateLimited {
                retry_after: Duration::from_millis(millis),
            }
            .extra_headers()[0]
                .1
                .clone()
        };
        assert_eq!(limited(1500), "2");
        assert_eq!(limited(2000), "2");
        assert_eq!(limited(10), "1");
    }
}
