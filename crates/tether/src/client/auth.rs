//! The client's credentials hook: [`AuthProvider`] supplies the bearer token of every request
//! and hears of every refusal (401, or 403 `insufficient_scope`), so that a provider can
//! refresh or re-authorize and the client send the request once more, from the same stream
//! cursor; [`StaticToken`] is the fixed-token provider, [`OAuthProvider`](super::oauth::OAuthProvider)
//! the OAuth 2.1 one. [`AuthError`] is what a provider fails with.

use std::path::PathBuf;

use async_trait::async_trait;

use super::error::BoxError;

/// A request the server refused for its credentials.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AuthRefusal {
    /// 401, or 403 with `error="insufficient_scope"`.
    pub status: u16,
    /// Every `WWW-Authenticate` value of the answer.
    pub www_authenticate: Vec<String>,
    /// The token the refused request carried, if any.
    pub token: Option<String>,
    /// How many times this request was refused before (0 the first time).
    pub attempt: u32,
}

/// Supplies the bearer token sent as `Authorization: Bearer …`. The client asks before every
/// request, so a provider keeps its token rather than fetching one each time.
#[async_trait]
pub trait AuthProvider: Send + Sync {
    /// The token for the next request, or `None` for no `Authorization` header.
    async fn token(&self) -> Result<Option<String>, AuthError>;

    /// The server refused a request for its credentials. Return the token to send it once
    /// more with, or `None` to let the refusal reach the caller (as
    /// [`Error::Unauthorized`](super::Error::Unauthorized) or the 403's status). The client
    /// asks at most [`MAX_AUTH_RETRIES`] times per request. The default gives up.
    async fn refused(&self, refusal: &AuthRefusal) -> Result<Option<String>, AuthError> {
        let _ = refusal;
        Ok(None)
    }
}

/// How many refusals of one request the client takes to its [`AuthProvider`] before it lets
/// the refusal through: a refresh, a new authorization and a step-up, with one to spare.
pub const MAX_AUTH_RETRIES: u32 = 4;

/// A fixed bearer token: sent as is, and never refreshed.
#[derive(Debug, Clone)]
pub struct StaticToken(pub String);

#[async_trait]
impl AuthProvider for StaticToken {
    async fn token(&self) -> Result<Option<String>, AuthError> {
        Ok(Some(self.0.clone()))
    }
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
