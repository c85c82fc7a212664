//! tether as an OAuth 2.1 protected resource (feature `oauth`): [`OAuthResource`], an
//! [`Authenticator`] that accepts JWT access tokens issued for one canonical resource URI by
//! the configured authorization servers, and the Protected Resource Metadata (RFC 9728) that
//! tells clients where to get them.
//!
//! What the specification obliges, and where it is done: the metadata document
//! ([`OAuthResource::resource_metadata`], served at `/.well-known/oauth-protected-resource`
//! plus the endpoint's path and at the root, readable cross-origin); the 401 challenge naming
//! it (`resource_metadata`, and `scope` when scopes are required), `error="invalid_token"` for
//! a bad token, 403 `error="insufficient_scope"` naming every scope the operation needs
//! ([`OAuthResource::challenge`]); tokens validated as issued for this resource (`aud`,
//! RFC 8707) by one of these issuers, byte for byte (`token`); keys through the issuers'
//! metadata and cached (`keys`); a token that is not a JWT asked about at the introspection
//! endpoint, when one is configured (RFC 7662, `introspect`); never a token from the query
//! string (`super::auth`). The gateway never hands a client's token to a child: the token
//! stays in the request headers, which the gateway does not forward.

mod introspect;
mod keys;
mod token;
mod verdicts;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use http::HeaderMap;
use serde_json::{Value, json};

use self::introspect::Introspector;
pub use self::introspect::{DEFAULT_INTROSPECTION_CACHE, IntrospectionConfig};
use self::keys::{IssuerKeys, KeyLookup};
use self::token::{Rejection, Unverified};
use self::verdicts::{Decided, Verdicts, trust_until_expiry};
use super::auth::{AuthFailure, Authenticator, Credentials, bearer_challenge, presented_token};

/// The scope that asks for a refresh token, which a resource server does not advertise.
const OFFLINE_ACCESS: &str = "offline_access";

/// The default leeway on `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// The longest a JWT's verified verdict is kept (never past its `exp`, nor past a reload
/// of its issuer's keys): a presented-again token skips the signature check.
const JWT_TRUST: Duration = Duration::from_secs(300);

/// The default least time between two fetches of an issuer's keys.
pub const DEFAULT_REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// How tether checks access tokens.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OAuthConfig {
    /// The authorization servers whose tokens are accepted, as given (compared and listed byte
    /// for byte).
    pub issuers: Vec<String>,
    /// The canonical URI of the MCP endpoint: what tokens must name in `aud`, and the
    /// metadata's `resource`.
    pub resource: String,
    /// Scopes every request needs.
    pub required_scopes: Vec<String>,
    /// Scopes a `tools/call` of a tool needs besides the required ones.
    pub tool_scopes: HashMap<String, Vec<String>>,
    /// Leeway on `exp` and `nbf`.
    pub leeway: Duration,
    /// The least time between two fetches of one issuer's keys.
    pub refetch_interval: Duration,
    /// Where tokens that are not JWTs are introspected; without it they are refused.
    pub introspection: Option<IntrospectionConfig>,
}

impl OAuthConfig {
    /// Tokens of `issuers` for `resource`, with the default leeway and refetch interval.
    #[must_use]
    pub fn new(issuers: Vec<String>, resource: String) -> Self {
        Self {
            issuers,
            resource,
            required_scopes: Vec::new(),
            tool_scopes: HashMap::new(),
            leeway: DEFAULT_LEEWAY,
            refetch_interval: DEFAULT_REFETCH_INTERVAL,
            introspection: None,
        }
    }
}

/// What is wrong with an [`OAuthConfig`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OAuthConfigError {
    /// No issuer: no token could ever be accepted.
    #[error("at least one issuer is needed")]
    NoIssuer,
    /// An issuer, the resource or the introspection endpoint is not an `http` or `https`
    /// URL.
    #[error("{what} {url:?} is not an http(s) URL without a query or fragment")]
    NotAUrl {
        /// Which one.
        what: &'static str,
        /// The value given.
        url: String,
    },
    /// The HTTP client for the authorization servers could not be built.
    #[error("cannot build the HTTP client for the authorization servers")]
    Http(#[source] reqwest::Error),
}

/// An OAuth 2.1 resource server (module docs).
#[derive(Debug)]
pub struct OAuthResource {
    config: OAuthConfig,
    issuers: Vec<IssuerKeys>,
    introspector: Option<Introspector>,
    /// Tokens already decided.
    verdicts: Verdicts,
    /// Per tool, the required scopes and the tool's own: what its challenge names.
    tool_scopes: HashMap<String, Vec<String>>,
    metadata_url: String,
    /// The Protected Resource Metadata document, fixed by the configuration.
    metadata: Value,
}

impl OAuthResource {
    /// A resource server for `config`; keys are fetched on first use.
    ///
    /// # Errors
    ///
    /// [`OAuthConfigError`] for a configuration that could never accept a token.
    pub fn new(config: OAuthConfig) -> Result<Self, OAuthConfigError> {
        if config.issuers.is_empty() {
            return Err(OAuthConfigError::NoIssuer);
        }
        for (what, url) in config
            .issuers
            .iter()
            .map(|url| ("issuer", url))
            .chain([("resource", &config.resource)])
            .chain(
                config
                    .introspection
                    .iter()
                    .map(|introspection| ("introspection endpoint", &introspection.endpoint)),
            )
        {
            let ok = (url.starts_with("https://") || url.starts_with("http://"))
                && !url.contains(['?', '#']);
            if !ok {
                return Err(OAuthConfigError::NotAUrl {
                    what,
                    url: url.clone(),
                });
            }
        }
        crate::client::tls::ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(OAuthConfigError::Http)?;
        let issuers = config
            .issuers
            .iter()
            .map(|issuer| IssuerKeys::new(issuer.clone(), http.clone(), config.refetch_interval))
            .collect();
        let introspector = config
            .introspection
            .clone()
            .map(|introspection| Introspector::new(introspection, http.clone()));
        let tool_scopes = config
            .tool_scopes
            .iter()
            .map(|(tool, own)| {
                let mut all = config.required_scopes.clone();
                add_new(&mut all, own);
                (tool.clone(), all)
            })
            .collect();
        // The required scopes, then the tools' own in the tools' order, so the document does
        // not change with the map's.
        let mut supported = config.required_scopes.clone();
        let mut tools: Vec<_> = config.tool_scopes.iter().collect();
        tools.sort();
        for (_, own) in tools {
            add_new(&mut supported, own);
        }
        // 2026-07-28: `offline_access` is the client's to ask for, never advertised.
        supported.retain(|scope| scope != OFFLINE_ACCESS);
        let metadata = json!({
            "resource": config.resource,
            "authorization_servers": config.issuers,
            "scopes_supported": supported,
            "bearer_methods_supported": ["header"],
        });
        let metadata_url = metadata_url(&config.resource);
        Ok(Self {
            config,
            issuers,
            introspector,
            verdicts: Verdicts::default(),
            tool_scopes,
            metadata_url,
            metadata,
        })
    }

    /// Where the metadata document is, for the resource: the well-known segment inserted
    /// between the host and the path (RFC 9728 §3.1).
    #[must_use]
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// Which keys are loaded: changes whenever an issuer's keys are loaded again.
    fn key_epoch(&self) -> u64 {
        self.issuers.iter().map(IssuerKeys::loads).sum()
    }

    /// The verdict on a token not decided yet (see [`Decided`]).
    async fn decide(&self, token: &str) -> Decided {
        let leeway = self.config.leeway.as_secs();
        let now = crate::store::tasks::now_ms() / 1000;
        match token::inspect(token) {
            Ok(unverified) => {
                let decided = self.verify(token, &unverified, now).await;
                if let Ok((Err(rejection), _)) = &decided {
                    // The token's issuer and key id, never the token.
                    tracing::info!(
                        reason = rejection.as_str(),
                        iss = unverified.issuer,
                        kid = unverified.kid,
                        "access token refused"
                    );
                }
                decided
            }
            // Not a JWT at all: an opaque token, which only its issuer can judge.
            Err(Rejection::Malformed) if let Some(introspector) = &self.introspector => {
                let decided = introspector
                    .check(
                        token,
                        &self.config.issuers,
                        &self.config.resource,
                        now,
                        leeway,
                    )
                    .await;
                if let Ok((Err(rejection), _)) = &decided {
                    tracing::info!(reason = rejection.as_str(), "opaque access token refused");
                }
                decided
            }
            Err(rejection) => {
                tracing::info!(reason = rejection.as_str(), "access token refused");
                Ok((Err(rejection), Duration::ZERO))
            }
        }
    }

    /// Verifies the JWT `token`, whose header and claimed issuer `unverified` read, at `now`
    /// (seconds since the epoch). A refusal is not kept: forged tokens are cheap to make, and
    /// each would take a place.
    async fn verify(&self, token: &str, unverified: &Unverified, now: u64) -> Decided {
        let refused = |rejection| Ok((Err(rejection), Duration::ZERO));
        let Some(issuer) = self
            .issuers
            .iter()
            .find(|keys| keys.issuer() == unverified.issuer)
        else {
            return refused(Rejection::Issuer);
        };
        let set = match issuer.lookup(unverified.kid.as_deref()).await {
            KeyLookup::Found(set) => set,
            KeyLookup::Unavailable => return Err(AuthFailure::Unavailable),
        };
        let key = match token::key_for(&set, unverified) {
            Ok(key) => key,
            Err(rejection) => return refused(rejection),
        };
        let leeway = self.config.leeway.as_secs();
        match token::verify(token, unverified, key, &self.config.resource, leeway) {
            Ok((credentials, exp)) => {
                let trust = trust_until_expiry(JWT_TRUST, Some(exp.saturating_add(leeway)), now);
                Ok((Ok(credentials), trust))
            }
            Err(rejection) => refused(rejection),
        }
    }

    /// `credentials`, if they hold the scopes every request needs.
    fn require_scopes(&self, credentials: Credentials) -> Result<Credentials, AuthFailure> {
        if credentials.grants(&self.config.required_scopes) {
            Ok(credentials)
        } else {
            Err(AuthFailure::InsufficientScope(
                self.config.required_scopes.clone(),
            ))
        }
    }
}

#[async_trait]
impl Authenticator for OAuthResource {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Credentials, AuthFailure> {
        let token = presented_token(headers)?;
        let malformed = || {
            tracing::info!(
                reason = Rejection::Malformed.as_str(),
                "access token refused"
            );
            AuthFailure::InvalidToken(Rejection::Malformed.as_str())
        };
        if token.len() > token::MAX_TOKEN_BYTES {
            return Err(malformed());
        }
        let token = std::str::from_utf8(token).map_err(|_| malformed())?;
        let key = Verdicts::key(token);
        let epoch = self.key_epoch();
        let verdict = match self.verdicts.get(&key, epoch) {
            Some(verdict) => verdict,
            None => {
                let (verdict, trust) = self.decide(token).await?;
                self.verdicts.keep(key, epoch, verdict.clone(), trust);
                verdict
            }
        };
        let credentials =
            verdict.map_err(|rejection| AuthFailure::InvalidToken(rejection.as_str()))?;
        self.require_scopes(credentials)
    }

    fn challenge(&self, failure: &AuthFailure) -> String {
        let mut leading = vec![("resource_metadata", self.metadata_url.clone())];
        if matches!(failure, AuthFailure::Missing) && !self.config.required_scopes.is_empty() {
            leading.push(("scope", self.config.required_scopes.join(" ")));
        }
        bearer_challenge(failure, &leading)
    }

    fn tool_scopes(&self, tool: &str) -> &[String] {
        self.tool_scopes.get(tool).map_or(&[], Vec::as_slice)
    }

    fn resource_metadata(&self) -> Option<Value> {
        Some(self.metadata.clone())
    }
}

/// Appends to `scopes` those of `more` it does not hold yet.
fn add_new(scopes: &mut Vec<String>, more: &[String]) {
    for scope in more {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
}

/// `resource`'s metadata URL: `https://host/.well-known/oauth-protected-resource/mcp` for
/// `https://host/mcp`.
fn metadata_url(resource: &str) -> String {
    let (origin, path) = keys::split_origin(resource);
    format!("{origin}/.well-known/oauth-protected-resource{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_segment() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }
}
