//! The client's credentials hook: [`AuthProvider`] supplies the bearer token of every request
//! and hears of every refusal (401, or 403 `insufficient_scope`), so that a provider can
//! refresh or re-authorize and the client send the request once more, from the same stream
//! cursor; [`StaticToken`] is the fixed-token provider, [`OAuthProvider`](super::oauth::OAuthProvider)
//! the OAuth 2.1 one. [`AuthError`](super::error::AuthError) is what a provider
//! fails with.

use async_trait::async_trait;

use super::error::AuthError;

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
