//! Who is making a request: the [`Authenticator`] trait, what it yields ([`Credentials`]) or
//! refuses ([`AuthFailure`]), and its bearer-token implementation.
//!
//! Every request on the MCP path is authenticated right after the DNS-rebinding check, before
//! anything about sessions or streams is looked at, so an unauthenticated client learns
//! nothing (401 with the authenticator's `WWW-Authenticate` challenge and a JSON-RPC error
//! body, from [`ServerError::Unauthorized`](super::ServerError::Unauthorized)). A token in the
//! query string is refused whatever the authenticator (RFC 6750 §2.3 is not offered). The
//! principal it yields is recorded on the sessions it creates and on their streams: a
//! session, or an event id, presented by another principal is answered exactly like an
//! unknown one (docs/CONTRACTS.md#status-table). Without an authenticator every request is
//! [`ANONYMOUS_PRINCIPAL`]'s.
//!
//! [`BearerTokens`] reads the token file format of docs/CONTRACTS.md#tether-serve and compares
//! tokens in constant time, checking every configured token whatever matched, so neither the time
//! taken nor the order of the file tells which prefix of a guess was right. (A token's length is
//! not hidden; tokens should be long random strings, where that says nothing.) The OAuth 2.1
//! resource server is `super::oauth`'s.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use http::HeaderMap;
use http::header::AUTHORIZATION;
use subtle::ConstantTimeEq as _;

use crate::store::ANONYMOUS_PRINCIPAL;

/// What a request's credentials proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// Who it comes from: what sessions, streams and tasks are bound to.
    pub principal: Arc<str>,
    /// The scopes its token was granted, or `None` when the authenticator does not scope
    /// (a token file): then no scope is ever missing.
    pub scopes: Option<Arc<[String]>>,
    /// The OAuth client the token was issued to, when it says.
    pub client_id: Option<Arc<str>>,
}

impl Credentials {
    /// A principal without scopes or client.
    #[must_use]
    pub fn principal(principal: Arc<str>) -> Self {
        Self {
            principal,
            scopes: None,
            client_id: None,
        }
    }

    /// Whether these credentials were granted every scope of `needed` (always, when they are
    /// not scoped).
    #[must_use]
    pub fn grants(&self, needed: &[String]) -> bool {
        self.scopes
            .as_deref()
            .is_none_or(|granted| needed.iter().all(|scope| granted.contains(scope)))
    }
}

/// Why a request's credentials were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthFailure {
    /// No credentials: 401, the challenge without an error.
    Missing,
    /// Credentials that are not valid here (malformed, forged, expired, for another resource
    /// or issuer): 401 with `error="invalid_token"`. The reason is logged and counted, never
    /// sent.
    InvalidToken(&'static str),
    /// Valid credentials without these scopes: 403 with `error="insufficient_scope"`.
    InsufficientScope(Vec<String>),
    /// The credentials cannot be checked for now (the authorization server's keys were never
    /// loaded): 503.
    Unavailable,
}

impl AuthFailure {
    /// The label this failure is counted and logged under.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::InvalidToken(reason) => reason,
            Self::InsufficientScope(_) => "insufficient_scope",
            Self::Unavailable => "unavailable",
        }
    }
}

/// Decides who a request comes from.
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// What the credentials `headers` carry prove, or why they are refused.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Credentials, AuthFailure>;

    /// The `WWW-Authenticate` value that answers `failure` (RFC 6750 §3).
    fn challenge(&self, failure: &AuthFailure) -> String {
        bearer_challenge(failure, &[])
    }

    /// Every scope a `tools/call` of `tool` needs, those every request needs included, when
    /// the tool needs more than those (else none).
    fn tool_scopes(&self, _tool: &str) -> &[String] {
        &[]
    }

    /// The Protected Resource Metadata document (RFC 9728) served at the well-known URIs, if
    /// this authenticator is an OAuth resource server.
    fn resource_metadata(&self) -> Option<serde_json::Value> {
        None
    }
}

/// `Bearer` with the parameters of RFC 6750 §3 that answer `failure`, after `leading` ones
/// (such as `resource_metadata`).
pub(crate) fn bearer_challenge(failure: &AuthFailure, leading: &[(&str, String)]) -> String {
    let mut params: Vec<(&str, String)> = leading.to_vec();
    match failure {
        AuthFailure::Missing | AuthFailure::Unavailable => {}
        AuthFailure::InvalidToken(_) => params.push(("error", "invalid_token".to_owned())),
        AuthFailure::InsufficientScope(needed) => {
            params.push(("error", "insufficient_scope".to_owned()));
            params.push(("scope", needed.join(" ")));
        }
    }
    if params.is_empty() {
        return "Bearer".to_owned();
    }
    let params: Vec<String> = params
        .iter()
        // Quoted strings: the values are URLs and scope tokens, which hold no `"` or `\`.
        .map(|(name, value)| format!("{name}=\"{}\"", value.replace(['"', '\\'], "")))
        .collect();
    format!("Bearer {}", params.join(", "))
}

/// Bearer tokens, each naming a principal: `Authorization: Bearer <token>`.
pub struct BearerTokens {
    tokens: Vec<(Arc<str>, Vec<u8>)>,
}

impl std::fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        let principals: Vec<&str> = self.tokens.iter().map(|(p, _)| &**p).collect();
        f.debug_struct("BearerTokens")
            .field("principals", &principals)
            .finish()
    }
}

/// What is wrong with a token file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("cannot read the token file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `TOKEN` or `PRINCIPAL:TOKEN` with a non-empty token of visible
    /// characters.
    #[error("token file line {line}: {reason}")]
    Line {
        /// The line number, from 1.
        line: usize,
        /// What is wrong (never the token itself).
        reason: &'static str,
    },
    /// No token at all: every request would be refused.
    #[error("the token file holds no token")]
    Empty,
}

impl BearerTokens {
    /// Tokens from the text of a token file (docs/CONTRACTS.md#tether-serve): one per line, either
    /// `TOKEN` (principal [`ANONYMOUS_PRINCIPAL`]) or `PRINCIPAL:TOKEN` (split at the first `:`).
    /// Blank lines and lines starting with `#` are skipped; surrounding whitespace is trimmed.
    ///
    /// # Errors
    ///
    /// [`TokenFileError::Line`] for a malformed line, [`TokenFileError::Empty`] without tokens.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let mut tokens = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |reason| TokenFileError::Line {
                line: index + 1,
                reason,
            };
            let (principal, token) = match line.split_once(':') {
                Some((principal, token)) => (principal.trim(), token.trim()),
                None => (ANONYMOUS_PRINCIPAL, line),
            };
            if principal.is_empty() {
                return Err(error("empty principal before ':'"));
            }
            if token.is_empty() {
                return Err(error("empty token"));
            }
            // What a client can send in a header: visible ASCII, no spaces.
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(error("the token must be visible ASCII without spaces"));
            }
            tokens.push((Arc::from(principal), token.as_bytes().to_vec()));
        }
        if tokens.is_empty() {
            return Err(TokenFileError::Empty);
        }
        Ok(Self { tokens })
    }

    /// Tokens from a token file (see [`parse`](Self::parse)).
    ///
    /// # Errors
    ///
    /// As for [`parse`](Self::parse), and [`TokenFileError::Read`].
    pub fn from_file(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The principals the file names, each once, in file order.
    #[must_use]
    pub fn principals(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for (principal, _) in &self.tokens {
            if !seen.contains(&&**principal) {
                seen.push(principal);
            }
        }
        seen
    }
}

#[async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Credentials, AuthFailure> {
        let presented = presented_token(headers)?;
        let mut matched = None;
        // Every token is compared, whatever matched first: the time taken does not depend on
        // which one (if any) it was.
        for (principal, token) in &self.tokens {
            if bool::from(token.as_slice().ct_eq(presented)) {
                matched = Some(Arc::clone(principal));
            }
        }
        matched
            .map(Credentials::principal)
            .ok_or(AuthFailure::InvalidToken("unknown_token"))
    }

    /// `Bearer` alone, whatever the failure: a token file has no error codes to tell
    /// (docs/CONTRACTS.md#status-table).
    fn challenge(&self, _failure: &AuthFailure) -> String {
        "Bearer".to_owned()
    }
}

/// Whether a query string carries an access token (RFC 6750 §2.3), which is refused: URLs
/// end up in logs and histories.
pub(crate) fn query_carries_token(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        query.split('&').any(|pair| {
            pair.split('=')
                .next()
                .is_some_and(|name| name == "access_token")
        })
    })
}

/// The one bearer token of a request's `Authorization` header: missing without one, invalid
/// when there are two (ambiguous) or it is not `Bearer <token>`.
pub(crate) fn presented_token(headers: &HeaderMap) -> Result<&[u8], AuthFailure> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthFailure::Missing)?;
    if values.next().is_some() {
        return Err(AuthFailure::InvalidToken("two_credentials"));
    }
    bearer_token(value.as_bytes()).ok_or(AuthFailure::InvalidToken("not_bearer"))
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive, RFC 9110
/// §11.1).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    if value.len() <= SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let token = value[SCHEME.len()..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_token_file_names_principals_and_defaults_to_the_anonymous_one() {
        let tokens = BearerTokens::parse(
            "# operators\n\nalice:s3cret-a\n  bob : s3cret-b  \nplain-token\nalice:second-a\n",
        )
        .unwrap();
        assert_eq!(tokens.principals(), ["alice", "bob", ANONYMOUS_PRINCIPAL]);
        let who = |value: &str| {
            futures_util::FutureExt::now_or_never(tokens.authenticate(&headers(&[value])))
                .unwrap()
                .ok()
                .map(|credentials| credentials.principal.to_string())
        };
        assert_eq!(who("Bearer s3cret-a").as_deref(), Some("alice"));
        assert_eq!(who("Bearer second-a").as_deref(), Some("alice"));
        assert_eq!(who("bearer s3cret-b").as_deref(), Some("bob"));
        assert_eq!(who("BEARER   plain-token ").as_deref(), Some("default"));
        assert_eq!(who("Bearer s3cret"), None, "a prefix is not the token");
        assert_eq!(who("Bearer s3cret-a-and-more"), None);
        assert_eq!(who("Basic s3cret-a"), None);
        assert_eq!(who("Bearer"), None);
        let refusal = |headers: HeaderMap| {
            futures_util::FutureExt::now_or_never(tokens.authenticate(&headers))
                .unwrap()
                .unwrap_err()
        };
        assert_eq!(refusal(HeaderMap::new()), AuthFailure::Missing);
        assert_eq!(
            refusal(headers(&["Bearer s3cret-a", "Bearer s3cret-b"])),
            AuthFailure::InvalidToken("two_credentials"),
            "two Authorization headers are refused"
        );
        assert_eq!(tokens.challenge(&AuthFailure::InvalidToken("x")), "Bearer");
        assert_eq!(
            bearer_challenge(
                &AuthFailure::InsufficientScope(vec!["a".into(), "b".into()]),
                &[("resource_metadata", "http://h/.well-known/x".into())]
            ),
            r#"Bearer resource_metadata="http://h/.well-known/x", error="insufficient_scope", scope="a b""#
        );
        assert!(
            !format!("{tokens:?}").contains("s3cret"),
            "Debug hides tokens"
        );
    }

    #[test]
    fn scoped_credentials_grant_only_what_they_hold_and_unscoped_ones_everything() {
        let needed = ["a".to_owned(), "b".to_owned()];
        let mut credentials = Credentials::principal(Arc::from("p"));
        assert!(
            credentials.grants(&needed),
            "a token file's principal is not scoped"
        );
        credentials.scopes = Some(Arc::from(vec!["a".to_owned()]));
        assert!(!credentials.grants(&needed));
        assert!(credentials.grants(&needed[..1]));
        assert!(credentials.grants(&[]));
    }

    #[test]
    fn malformed_token_files_are_refused_with_the_line_and_without_the_token() {
        for (text, line) in [(":s3cr3t", 1), ("s3cr3t-ok\nalice:", 2), ("a:s3cr3t x", 1)] {
            match BearerTokens::parse(text) {
                Err(error @ TokenFileError::Line { line: at, .. }) => {
                    assert_eq!(at, line, "{text:?}");
                    assert!(!error.to_string().contains("s3cr3t"), "{error}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(matches!(
            BearerTokens::parse("# nothing\n\n"),
            Err(TokenFileError::Empty)
        ));
    }
}
