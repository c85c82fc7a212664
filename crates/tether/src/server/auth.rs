//! Who is making a request: the [`Authenticator`] trait and its bearer-token implementation.
//!
//! Every request on the MCP path is authenticated right after the DNS-rebinding check, before
//! anything about sessions or streams is looked at, so an unauthenticated client learns
//! nothing (401 with `WWW-Authenticate: Bearer` and a JSON-RPC error body, from
//! [`ServerError::Unauthorized`](super::ServerError::Unauthorized)). The principal it yields
//! is recorded on the sessions it creates and on their streams: a session, or an event id,
//! presented by another principal is answered exactly like an unknown one
//! (docs/CONTRACTS.md#status-table). Without an authenticator every request is
//! [`ANONYMOUS_PRINCIPAL`]'s.
//!
//! [`BearerTokens`] reads the token file format of docs/CONTRACTS.md#tether-serve and compares
//! tokens in constant time, checking every configured token whatever matched, so neither the time
//! taken nor the order of the file tells which prefix of a guess was right. (A token's length is
//! not hidden; tokens should be long random strings, where that says nothing.)

use std::path::Path;
use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;
use subtle::ConstantTimeEq as _;

use crate::store::ANONYMOUS_PRINCIPAL;

/// Decides who a request comes from.
pub trait Authenticator: Send + Sync + 'static {
    /// The principal whose credentials `headers` carry, or `None` when they are missing or
    /// wrong (the request is then refused with 401).
    fn authenticate(&self, headers: &HeaderMap) -> Option<Arc<str>>;
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
    #[error("cannot read the token file {path}: {source}")]
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

impl Authenticator for BearerTokens {
    fn authenticate(&self, headers: &HeaderMap) -> Option<Arc<str>> {
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let value = values.next()?;
        if values.next().is_some() {
            // Two credentials: ambiguous, refused.
            return None;
        }
        let presented = bearer_token(value.as_bytes())?;
        let mut matched = None;
        // Every token is compared, whatever matched first: the time taken does not depend on
        // which one (if any) it was.
        for (principal, token) in &self.tokens {
            if bool::from(token.as_slice().ct_eq(presented)) {
                matched = Some(Arc::clone(principal));
            }
        }
        matched
    }
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
            tokens
                .authenticate(&headers(&[value]))
                .map(|p| p.to_string())
        };
        assert_eq!(who("Bearer s3cret-a").as_deref(), Some("alice"));
        assert_eq!(who("Bearer second-a").as_deref(), Some("alice"));
        assert_eq!(who("bearer s3cret-b").as_deref(), Some("bob"));
        assert_eq!(who("BEARER   plain-token ").as_deref(), Some("default"));
        assert_eq!(who("Bearer s3cret"), None, "a prefix is not the token");
        assert_eq!(who("Bearer s3cret-a-and-more"), None);
        assert_eq!(who("Basic s3cret-a"), None);
        assert_eq!(who("Bearer"), None);
        assert_eq!(tokens.authenticate(&HeaderMap::new()), None);
        assert_eq!(
            tokens.authenticate(&headers(&["Bearer s3cret-a", "Bearer s3cret-b"])),
            None,
            "two Authorization headers are refused"
        );
        assert!(
            !format!("{tokens:?}").contains("s3cret"),
            "Debug hides tokens"
        );
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
