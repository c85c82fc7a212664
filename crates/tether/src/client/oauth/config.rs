//! How an [`OAuthProvider`](super::OAuthProvider) signs in: [`OAuthClientConfig`] with its
//! defaults, the [`UserAgent`] hook that shows the user the authorization URL, and the HTTP
//! client used to talk to authorization servers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::client::error::AuthError;

/// How long a sign-in waits for the browser's redirect, by default: long enough to type a
/// password and approve, short enough that a forgotten tab does not hold the cache lock.
pub const DEFAULT_CALLBACK_TIMEOUT: Duration = Duration::from_secs(300);

/// How many sign-ins in a row for a 403 `insufficient_scope` may fail to get the challenged
/// scope, by default, before the provider gives up with [`AuthError::InsufficientScope`].
pub const DEFAULT_MAX_STEP_UPS: u32 = 2;

/// Shows the user the authorization URL: opens a browser, prints it, or (in a test) follows
/// it. The sign-in then waits for the redirect to its loopback listener.
#[async_trait]
pub trait UserAgent: Send + Sync {
    /// Hands `url` to the user. An error ends the sign-in.
    async fn open(&self, url: &str) -> Result<(), AuthError>;
}

/// How an [`OAuthProvider`](super::OAuthProvider) signs in.
#[derive(Clone)]
#[non_exhaustive]
pub struct OAuthClientConfig {
    /// The token cache directory (docs/CONTRACTS.md#oauth-client), created 0700.
    pub cache_dir: PathBuf,
    /// A pre-registered client id; without one, a Client ID Metadata Document or Dynamic
    /// Client Registration is used.
    pub client_id: Option<String>,
    /// The pre-registered client's secret, if it has one.
    pub client_secret: Option<String>,
    /// The HTTPS URL of this client's Client ID Metadata Document, used as its client id
    /// where the authorization server takes one.
    pub client_metadata_url: Option<String>,
    /// Scopes always asked for, beside the challenged ones.
    pub scope: Option<String>,
    /// The loopback callback's port (0, the default: a free one).
    pub callback_port: u16,
    /// The redirect wait ([`DEFAULT_CALLBACK_TIMEOUT`]).
    pub callback_timeout: Duration,
    /// Shows the authorization URL; `None` forbids interaction: a sign-in that is needed
    /// fails with [`AuthError::InteractionRequired`].
    pub user_agent: Option<Arc<dyn UserAgent>>,
    /// `client_name` in a dynamic registration (default `tether`).
    pub client_name: String,
    /// Step-up sign-ins in a row that may fail to get the scope ([`DEFAULT_MAX_STEP_UPS`]).
    pub max_step_ups: u32,
    /// Roots trusted for the authorization server beside the platform's, as
    /// [`ClientConfig::extra_root_certificates`](crate::client::ClientConfig::extra_root_certificates).
    pub extra_root_certificates: Vec<Vec<u8>>,
}

impl OAuthClientConfig {
    /// The defaults, with the cache in `cache_dir` and no interaction.
    #[must_use]
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            scope: None,
            callback_port: 0,
            callback_timeout: DEFAULT_CALLBACK_TIMEOUT,
            user_agent: None,
            client_name: "tether".to_owned(),
            max_step_ups: DEFAULT_MAX_STEP_UPS,
            extra_root_certificates: Vec::new(),
        }
    }

    /// The pinned default cache directory: `$XDG_CACHE_HOME/tether/oauth`, else
    /// `~/.cache/tether/oauth`; `None` when neither variable is set.
    #[must_use]
    pub fn default_cache_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".cache"))
            })?;
        Some(base.join("tether").join("oauth"))
    }
}

impl std::fmt::Debug for OAuthClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClientConfig")
            .field("cache_dir", &self.cache_dir)
            .field("client_id", &self.client_id)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scope", &self.scope)
            .field("callback_port", &self.callback_port)
            .field("interactive", &self.user_agent.is_some())
            .finish_non_exhaustive()
    }
}

/// The HTTP client for authorization servers: redirects are not followed (a token or
/// registration request must not be replayed elsewhere, and a metadata URL that moves is
/// not the one asked for), the client's TLS roots.
pub(super) fn http_client(config: &OAuthClientConfig) -> Result<reqwest::Client, AuthError> {
    let roots = crate::client::tls::root_certificates(&config.extra_root_certificates)
        .map_err(|e| AuthError::Internal(e.to_string()))?;
    crate::client::tls::ensure_crypto_provider();
    let builder = || {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
    };
    builder()
        .tls_certs_merge(roots.clone())
        .build()
        .or_else(|_| builder().tls_certs_only(roots).build())
        .map_err(|e| AuthError::Internal(format!("http client: {e}")))
}
