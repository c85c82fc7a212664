//! [`OAuthProvider`]: the [`AuthProvider`] that signs in to a protected MCP server the way
//! MCP authorization describes, and keeps the client's streams going through token expiry.
//! It sends the cached token while it is good, refreshes it ahead of expiry, and on a 401
//! re-reads the resource's metadata (so a moved authorization server is noticed), then
//! refreshes or signs in again; on a 403 `insufficient_scope` it signs in again with the
//! union of the scopes granted and challenged, a bounded number of times. Refreshes and
//! sign-ins run one at a time in the process and under the cache's lock across processes,
//! each re-reading the cache first, so what another process did is used rather than redone.
//! The client sends the refused request again itself, from the same cursor.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;

use super::authorize::{
    AuthorizationRequest, FlowSecrets, authorization_url, code_from_redirect, covers,
    scope_to_request,
};
use super::cache::{RegistrationEntry, TokenCache, TokenEntry};
use super::callback::CallbackListener;
use super::challenge::BearerChallenge;
use super::config::{OAuthClientConfig, UserAgent, http_client};
use super::discovery::{
    ResourceMetadata, ServerMetadata, fetch_resource_metadata, fetch_server_metadata, first_issuer,
    resource_for,
};
use super::grant::{ClientIdentity, Grant, TokenAnswer, exchange};
use super::register::{Registration, choose, register};
use crate::client::auth::{AuthProvider, AuthRefusal};
use crate::client::error::AuthError;

/// What discovery found for the server.
#[derive(Debug, Clone)]
struct Discovered {
    resource: String,
    resource_scopes: Option<Vec<String>>,
    issuer: String,
    metadata: ServerMetadata,
}

/// What the provider remembers between requests.
#[derive(Debug, Default)]
struct FlowState {
    /// Sign-ins made for a 403 in a row that did not get the challenged scope.
    step_ups: u32,
    /// The token the last sign-in produced: if it is refused at once, signing in again will
    /// not help.
    last_signed_in: Option<String>,
}

/// Signs in to one MCP server by OAuth 2.1 and supplies its tokens
/// (docs/CONTRACTS.md#oauth-client).
pub struct OAuthProvider {
    server: Url,
    server_url: String,
    config: OAuthClientConfig,
    http: reqwest::Client,
    cache: TokenCache,
    current: Mutex<Option<Arc<TokenEntry>>>,
    flow: tokio::sync::Mutex<FlowState>,
    /// Whether the cache was read for a first token: a server that never asks for one
    /// (an open server) then costs no directory scan per request.
    cache_read: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for OAuthProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthProvider")
            .field("server", &self.server_url)
            .field("cache", &self.cache.dir())
            .finish_non_exhaustive()
    }
}

/// Unix seconds: token lifetimes are kept in the cache, across processes.
fn now() -> u64 {
    crate::store::tasks::now_ms() / 1000
}

impl OAuthProvider {
    /// A provider for the MCP endpoint `server_url`, its cache in
    /// [`OAuthClientConfig::cache_dir`] (created 0700 if absent).
    ///
    /// # Errors
    ///
    /// The URL is not `http(s)`, the cache directory cannot be made, or the HTTP client
    /// cannot be built.
    pub fn new(server_url: &str, config: OAuthClientConfig) -> Result<Self, AuthError> {
        let server = Url::parse(server_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| AuthError::Internal(format!("{server_url:?} is not an http(s) URL")))?;
        let cache = TokenCache::open(&config.cache_dir)?;
        let http = http_client(&config)?;
        Ok(Self {
            server,
            server_url: server_url.to_owned(),
            config,
            http,
            cache,
            current: Mutex::new(None),
            flow: tokio::sync::Mutex::new(FlowState::default()),
            cache_read: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Signs in now, whether or not a token is cached (`tether auth login`): asks the server
    /// without a token for its challenge, then runs the flow.
    ///
    /// # Errors
    ///
    /// As a sign-in in [`AuthProvider::refused`].
    pub async fn login(&self) -> Result<(), AuthError> {
        let challenge = self.probe().await?;
        let discovered = self
            .discover(
                challenge
                    .as_ref()
                    .and_then(|c| c.resource_metadata.as_deref()),
            )
            .await?;
        let scope = challenge.as_ref().and_then(|c| c.scope.clone());
        let mut flow = self.flow.lock().await;
        self.sign_in(&mut flow, &discovered, scope.as_deref(), None, true)
            .await?;
        Ok(())
    }

    /// Removes this server's cached tokens (`tether auth logout`); returns how many there were.
    ///
    /// # Errors
    ///
    /// The cache cannot be read or written.
    pub fn logout(&self) -> Result<usize, AuthError> {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.cache.remove(&self.server_url)
    }

    /// An unauthenticated request, for the server's challenge: `None` when it does not
    /// answer 401 with a Bearer challenge.
    async fn probe(&self) -> Result<Option<BearerChallenge>, AuthError> {
        let response = self
            .http
            .post(self.server.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| AuthError::unreachable(&self.server_url, e))?;
        if response.status().as_u16() != 401 {
            return Ok(None);
        }
        Ok(BearerChallenge::find(
            response
                .headers()
                .get_all(reqwest::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok()),
        ))
    }

    fn current(&self) -> Option<Arc<TokenEntry>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_current(&self, entry: TokenEntry) -> Arc<TokenEntry> {
        let entry = Arc::new(entry);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&entry));
        entry
    }

    fn cached(&self) -> Result<Option<TokenEntry>, AuthError> {
        self.cache
            .find(&self.server_url, self.config.client_id.as_deref())
    }

    /// The resource's metadata (fetched anew each time: the authorization server may have
    /// moved) and its authorization server's.
    async fn discover(&self, resource_metadata: Option<&str>) -> Result<Discovered, AuthError> {
        let (url, resource): (Url, ResourceMetadata) =
            fetch_resource_metadata(&self.http, &self.server, resource_metadata).await?;
        let resource_uri = resource_for(&self.server, &resource)?;
        let issuer = first_issuer(&resource, &url)?;
        let metadata = fetch_server_metadata(&self.http, &issuer).await?;
        Ok(Discovered {
            resource: resource_uri,
            resource_scopes: resource.scopes_supported,
            issuer,
            metadata,
        })
    }

    /// Refreshes `entry` under the cache lock. Another process may have refreshed already
    /// (and, with rotation, spent the refresh token this one holds): its newer entry is used.
    /// `Ok(None)` when there is no refresh token.
    async fn refresh(&self, entry: &TokenEntry) -> Result<Option<Arc<TokenEntry>>, AuthError> {
        let _lock = self.cache.lock(&self.server_url).await?;
        let now = now();
        let latest = self
            .cache
            .find(&self.server_url, Some(&entry.client.client_id))?
            .filter(|latest| latest.issuer == entry.issuer && latest.resource == entry.resource);
        let base = match latest {
            Some(latest)
                if latest.access_token != entry.access_token && !latest.refresh_due(now) =>
            {
                return Ok(Some(self.set_current(latest)));
            }
            Some(latest) => latest,
            None => entry.clone(),
        };
        let Some(refresh_token) = base.refresh_token.clone() else {
            return Ok(None);
        };
        let answer = exchange(
            &self.http,
            &base.metadata,
            &base.client,
            Grant::Refresh {
                refresh_token: &refresh_token,
            },
            &base.resource,
        )
        .await?;
        let fresh = TokenEntry {
            // A refresh answer without a refresh token keeps the old one (RFC 6749 §6).
            refresh_token: answer.refresh_token.clone().or(base.refresh_token.clone()),
            scope: answer.scope.clone().or(base.scope.clone()),
            access_token: answer.access_token,
            obtained_at: now,
            expires_at: answer.expires_in.map(|secs| now.saturating_add(secs)),
            ..base
        };
        self.cache.save(&fresh)?;
        tracing::debug!(server = %self.server_url, "oauth: token refreshed");
        Ok(Some(self.set_current(fresh)))
    }

    /// The client id at the discovered server: pre-registered, a metadata document, or a
    /// registration (kept per issuer, made once).
    async fn client_for(
        &self,
        discovered: &Discovered,
        redirect_uri: &str,
    ) -> Result<ClientIdentity, AuthError> {
        match choose(
            self.config.client_id.as_deref(),
            self.config.client_secret.as_deref(),
            self.config.client_metadata_url.as_deref(),
            &discovered.metadata,
        )? {
            Registration::PreRegistered(client) | Registration::MetadataDocument(client) => {
                Ok(client)
            }
            Registration::Dynamic { endpoint } => {
                if let Some(registered) = self.cache.registration(&discovered.issuer)? {
                    return Ok(registered.client);
                }
                let client = register(
                    &self.http,
                    &discovered.metadata,
                    &endpoint,
                    &self.config.client_name,
                    redirect_uri,
                )
                .await?;
                self.cache.save_registration(&RegistrationEntry {
                    issuer: discovered.issuer.clone(),
                    client: client.clone(),
                })?;
                Ok(client)
            }
        }
    }

    /// The scope a sign-in asks for: the configured scope, the earlier grant and the
    /// challenged scope (else the resource's `scopes_supported`), and `offline_access` when
    /// the authorization server lists it, so that it issues a refresh token (SEP-2207).
    fn scope_for(
        &self,
        discovered: &Discovered,
        earlier: Option<&str>,
        challenged: Option<&str>,
    ) -> Option<String> {
        let earlier = match (self.config.scope.as_deref(), earlier) {
            (Some(configured), Some(earlier)) => Some(format!("{configured} {earlier}")),
            (configured, earlier) => configured.or(earlier).map(str::to_owned),
        };
        let mut scope = scope_to_request(
            earlier.as_deref(),
            challenged,
            discovered.resource_scopes.as_deref(),
        );
        let offline = discovered
            .metadata
            .scopes_supported
            .as_deref()
            .is_some_and(|scopes| scopes.iter().any(|s| s == "offline_access"));
        if offline && !covers(scope.as_deref(), "offline_access") {
            scope = Some(match scope {
                Some(scope) => format!("{scope} offline_access"),
                None => "offline_access".to_owned(),
            });
        }
        scope
    }

    /// One authorization code flow, under the cache lock. A sign-in another process
    /// completed while this one waited for the lock is used instead, when it covers `scope`
    /// and is not the refused token. `force` (a login) always signs in.
    async fn sign_in(
        &self,
        flow: &mut FlowState,
        discovered: &Discovered,
        challenged: Option<&str>,
        refused: Option<&str>,
        force: bool,
    ) -> Result<Arc<TokenEntry>, AuthError> {
        let earlier = self.current().and_then(|entry| {
            (entry.issuer == discovered.issuer)
                .then(|| entry.scope.clone())
                .flatten()
        });
        let scope = self.scope_for(discovered, earlier.as_deref(), challenged);
        let _lock = self.cache.lock(&self.server_url).await?;
        if !force
            && let Some(latest) = self.cached()?
            && latest.issuer == discovered.issuer
            && Some(latest.access_token.as_str()) != refused
            && !latest.refresh_due(now())
            && covers(latest.scope.as_deref(), scope.as_deref().unwrap_or(""))
        {
            return Ok(self.set_current(latest));
        }
        let agent: &Arc<dyn UserAgent> =
            self.config
                .user_agent
                .as_ref()
                .ok_or_else(|| AuthError::InteractionRequired {
                    server: self.server_url.clone(),
                })?;
        let listener = CallbackListener::bind(self.config.callback_port).await?;
        let redirect_uri = listener.redirect_uri();
        let client = self.client_for(discovered, &redirect_uri).await?;
        let secrets = FlowSecrets::new()?;
        let url = authorization_url(
            &discovered.metadata,
            &AuthorizationRequest {
                client_id: &client.client_id,
                redirect_uri: &redirect_uri,
                resource: &discovered.resource,
                scope: scope.as_deref(),
            },
            &secrets,
        )?;
        let waiting = listener.wait(self.config.callback_timeout, |query| {
            code_from_redirect(query, &secrets, &discovered.metadata)
        });
        let (opened, code) = tokio::join!(agent.open(url.as_str()), waiting);
        opened?;
        let code = code?;
        let answer = exchange(
            &self.http,
            &discovered.metadata,
            &client,
            Grant::Code {
                code: &code,
                verifier: &secrets.verifier,
                redirect_uri: &redirect_uri,
            },
            &discovered.resource,
        )
        .await?;
        let entry = self.entry_from(discovered, client, answer, scope);
        self.cache.save(&entry)?;
        flow.last_signed_in = Some(entry.access_token.clone());
        tracing::info!(server = %self.server_url, issuer = %discovered.issuer, "oauth: signed in");
        Ok(self.set_current(entry))
    }

    fn entry_from(
        &self,
        discovered: &Discovered,
        client: ClientIdentity,
        answer: TokenAnswer,
        asked: Option<String>,
    ) -> TokenEntry {
        let now = now();
        TokenEntry {
            server_url: self.server_url.clone(),
            resource: discovered.resource.clone(),
            issuer: discovered.issuer.clone(),
            metadata: discovered.metadata.clone(),
            client,
            access_token: answer.access_token,
            refresh_token: answer.refresh_token,
            scope: answer.scope.or(asked),
            obtained_at: now,
            expires_at: answer.expires_in.map(|secs| now.saturating_add(secs)),
        }
    }

    /// A 403 `insufficient_scope`: sign in again for the union of scopes, unless the
    /// challenged ones were granted already or the step-ups are spent.
    async fn step_up(
        &self,
        flow: &mut FlowState,
        challenge: &BearerChallenge,
    ) -> Result<Arc<TokenEntry>, AuthError> {
        let challenged = challenge.scope.clone().unwrap_or_default();
        let granted = self.current().and_then(|entry| entry.scope.clone());
        if covers(granted.as_deref(), &challenged) || flow.step_ups >= self.config.max_step_ups {
            return Err(AuthError::InsufficientScope {
                scope: challenged,
                attempts: flow.step_ups,
            });
        }
        flow.step_ups += 1;
        let discovered = self
            .discover(challenge.resource_metadata.as_deref())
            .await?;
        let entry = self
            .sign_in(flow, &discovered, Some(&challenged), None, false)
            .await?;
        // Only step-ups that did not get the scope count towards the bound: a long-lived
        // client challenged for new scopes now and then is never cut off.
        if covers(entry.scope.as_deref(), &challenged) {
            flow.step_ups = 0;
        }
        Ok(entry)
    }
}

#[async_trait]
impl AuthProvider for OAuthProvider {
    async fn token(&self) -> Result<Option<String>, AuthError> {
        if let Some(entry) = self.current()
            && !entry.refresh_due(now())
        {
            return Ok(Some(entry.access_token.clone()));
        }
        let ordering = std::sync::atomic::Ordering::Relaxed;
        if self.current().is_none() && self.cache_read.load(ordering) {
            return Ok(None);
        }
        let _flow = self.flow.lock().await;
        let entry = match self.current() {
            Some(entry) => entry,
            // No token yet: a cached one, else none (the server's 401 starts the sign-in,
            // which reads the cache again).
            None => match self
                .cached()
                .inspect(|_| self.cache_read.store(true, ordering))?
            {
                Some(entry) => self.set_current(entry),
                None => return Ok(None),
            },
        };
        if !entry.refresh_due(now()) {
            return Ok(Some(entry.access_token.clone()));
        }
        match self.refresh(&entry).await {
            Ok(Some(fresh)) => Ok(Some(fresh.access_token.clone())),
            // No refresh token, or the refresh failed: the token as it is; if the server
            // refuses it, `refused` signs in again.
            Ok(None) => Ok(Some(entry.access_token.clone())),
            Err(error) => {
                tracing::warn!(server = %self.server_url, error = %crate::error_chain(&error), "oauth: refresh ahead of expiry failed");
                Ok(Some(entry.access_token.clone()))
            }
        }
    }

    async fn refused(&self, refusal: &AuthRefusal) -> Result<Option<String>, AuthError> {
        let challenge = BearerChallenge::find(refusal.www_authenticate.iter().map(String::as_str))
            .unwrap_or_default();
        let mut flow = self.flow.lock().await;
        // Another request replaced the refused token while this one waited.
        if let Some(current) = self.current()
            && refusal.token.as_deref() != Some(current.access_token.as_str())
            && !current.expired(now())
            && refusal.token.is_some()
        {
            return Ok(Some(current.access_token.clone()));
        }
        if refusal.status == 403 {
            if !challenge.is_insufficient_scope() {
                return Ok(None);
            }
            let entry = self.step_up(&mut flow, &challenge).await?;
            return Ok(Some(entry.access_token.clone()));
        }
        // The token a sign-in for this very request produced, refused too: signing in
        // again would loop.
        if refusal.attempt > 0 && refusal.token.is_some() && refusal.token == flow.last_signed_in {
            return Ok(None);
        }
        let discovered = match self.discover(challenge.resource_metadata.as_deref()).await {
            // A 401 that names no metadata, from a server that publishes none: not an OAuth
            // server (a static token's, say). Nothing to sign in to; the 401 is the answer.
            Err(AuthError::NoResourceMetadata { .. }) if challenge.resource_metadata.is_none() => {
                tracing::debug!(server = %self.server_url, "oauth: a 401 without protected resource metadata");
                return Ok(None);
            }
            discovered => discovered?,
        };
        let candidate = match self.current() {
            Some(current) if current.issuer == discovered.issuer => Some((*current).clone()),
            _ => self
                .cached()?
                .filter(|entry| entry.issuer == discovered.issuer),
        };
        if let Some(candidate) = candidate {
            if refusal.token.as_deref() != Some(candidate.access_token.as_str())
                && !candidate.expired(now())
            {
                return Ok(Some(self.set_current(candidate).access_token.clone()));
            }
            match self.refresh(&candidate).await {
                Ok(Some(fresh))
                    if refusal.token.as_deref() != Some(fresh.access_token.as_str()) =>
                {
                    return Ok(Some(fresh.access_token.clone()));
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::info!(server = %self.server_url, error = %error, "oauth: refresh refused; signing in again");
                }
            }
        }
        let entry = self
            .sign_in(
                &mut flow,
                &discovered,
                challenge.scope.as_deref(),
                refusal.token.as_deref(),
                false,
            )
            .await?;
        Ok(Some(entry.access_token.clone()))
    }
}
