//! One authorization server's signing keys: found through its metadata (RFC 8414
//! `/.well-known/oauth-authorization-server`, then OpenID discovery when that is a 404),
//! cached, and fetched again when a token names a `kid` the cache lacks, at most once per
//! [`IssuerKeys::refetch_interval`], so forged `kid`s cannot make tether hammer the server.
//!
//! An outage keeps what was loaded: tokens signed with cached keys keep working; while no key
//! was ever loaded, [`KeyLookup::Unavailable`] (503).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use crate::client::oauth::wire::{MAX_ANSWER_BYTES, read_limited};

/// How long one metadata or JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What looking up a key found.
#[derive(Debug)]
pub(crate) enum KeyLookup {
    /// The key set that holds it (or the freshest one, when it holds none).
    Found(Arc<JwkSet>),
    /// No key set could ever be loaded.
    Unavailable,
}

#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: String,
}

/// The keys of one issuer.
#[derive(Debug)]
pub(crate) struct IssuerKeys {
    issuer: String,
    http: reqwest::Client,
    refetch_interval: Duration,
    keys: RwLock<Option<Arc<JwkSet>>>,
    /// When the last fetch started; held while fetching, so concurrent misses fetch once.
    last_fetch: Mutex<Option<Instant>>,
    /// Distinct key sets loaded so far.
    loads: AtomicU64,
}

impl IssuerKeys {
    pub(crate) fn new(issuer: String, http: reqwest::Client, refetch_interval: Duration) -> Self {
        Self {
            issuer,
            http,
            refetch_interval,
            keys: RwLock::new(None),
            last_fetch: Mutex::new(None),
            loads: AtomicU64::new(0),
        }
    }

    pub(crate) fn issuer(&self) -> &str {
        &self.issuer
    }

    /// How many distinct key sets were loaded so far: a verdict reached under other keys is
    /// stale.
    pub(crate) fn loads(&self) -> u64 {
        self.loads.load(Ordering::Acquire)
    }

    /// The key set holding `kid` (`None`: any set), fetching it again if the cached one does
    /// not hold it and the last fetch is older than the refetch interval.
    pub(crate) async fn lookup(&self, kid: Option<&str>) -> KeyLookup {
        let holds = |set: &JwkSet| kid.is_none_or(|kid| set.find(kid).is_some());
        if let Some(set) = self.keys.read().await.clone()
            && holds(&set)
        {
            return KeyLookup::Found(set);
        }
        let mut last = self.last_fetch.lock().await;
        // Another request may have fetched while this one waited for the lock.
        if let Some(set) = self.keys.read().await.clone()
            && holds(&set)
        {
            return KeyLookup::Found(set);
        }
        if last.is_none_or(|at| at.elapsed() >= self.refetch_interval) {
            *last = Some(Instant::now());
            match self.fetch().await {
                Ok(set) => {
                    tracing::info!(issuer = %self.issuer, keys = set.keys.len(), "authorization server keys loaded");
                    let mut keys = self.keys.write().await;
                    if keys.as_deref() != Some(&set) {
                        *keys = Some(Arc::new(set));
                        self.loads.fetch_add(1, Ordering::Release);
                    }
                }
                Err(error) => {
                    tracing::warn!(issuer = %self.issuer, %error, "authorization server keys not loaded");
                }
            }
        }
        match self.keys.read().await.clone() {
            Some(set) => KeyLookup::Found(set),
            None => KeyLookup::Unavailable,
        }
    }

    /// The issuer's key set, through its metadata.
    async fn fetch(&self) -> Result<JwkSet, String> {
        let metadata = self.metadata().await?;
        if metadata.issuer != self.issuer {
            return Err(format!(
                "its metadata names the issuer {:?}, not {:?}",
                metadata.issuer, self.issuer
            ));
        }
        self.get_json(&metadata.jwks_uri)
            .await?
            .ok_or_else(|| format!("{} answered 404", metadata.jwks_uri))
    }

    async fn metadata(&self) -> Result<Metadata, String> {
        for url in metadata_urls(&self.issuer) {
            if let Some(metadata) = self.get_json(&url).await? {
                return Ok(metadata);
            }
        }
        Err("no metadata at the RFC 8414 or OpenID discovery URLs (404)".to_owned())
    }

    /// `url`'s JSON, or `None` on a 404 (the next discovery URL is tried).
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<Option<T>, String> {
        let response = self
            .http
            .get(url)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(format!("{url}: status {}", response.status()));
        }
        // Bounded: a metadata document or key set is a few KiB.
        let bytes = read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| format!("{url}: {error}"))
    }
}

/// The metadata URLs of `issuer`, in the order RFC 8414 §3.1 and OpenID discovery give:
/// the well-known segment inserted before the issuer's path, then OpenID's appended to it.
pub(crate) fn metadata_urls(issuer: &str) -> [String; 2] {
    let (origin, path) = split_origin(issuer);
    [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ]
}

/// `https://host:port` and the rest (`/tenant`, or empty, without a trailing `/`) of a URL.
pub(super) fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    match url[after_scheme..].find('/') {
        Some(at) => {
            let (origin, path) = url.split_at(after_scheme + at);
            (origin, path.trim_end_matches('/'))
        }
        None => (url, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_insert_the_well_known_segment_before_the_path() {
        assert_eq!(
            metadata_urls("https://as.example.com/tenant1"),
            [
                "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://as.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("http://127.0.0.1:9000"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration",
            ]
        );
    }
}
