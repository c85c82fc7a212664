//! The token cache on disk, shared by every process of one user: one entry per resource,
//! issuer and client (its tokens and the server metadata a refresh needs), one registration
//! per issuer, and a lock per server URL that is held while tokens are refreshed or signed
//! in for, so that concurrent processes refresh once (a rotating refresh token spent twice
//! revokes the grant) and sign in once. The directory is 0700 and every file in it, locks
//! and temporaries included, 0600, written whole by rename. Nothing here talks to a server.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::discovery::ServerMetadata;
use super::grant::ClientIdentity;
use crate::client::error::AuthError;

const DIRECTORY_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// One resource's tokens from one issuer for one client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TokenEntry {
    /// The MCP endpoint's URL as the client was given it (what `auth status` shows and
    /// a new process looks entries up by).
    pub(crate) server_url: String,
    /// The resource tokens are issued for (RFC 8707).
    pub(crate) resource: String,
    /// The authorization server's issuer.
    pub(crate) issuer: String,
    /// Its metadata, for refreshing without discovery.
    pub(crate) metadata: ServerMetadata,
    /// The client.
    pub(crate) client: ClientIdentity,
    pub(crate) access_token: String,
    #[serde(default)]
    pub(crate) refresh_token: Option<String>,
    /// The scope granted (as the token answer said), else as asked.
    #[serde(default)]
    pub(crate) scope: Option<String>,
    /// Unix seconds the access token was had.
    pub(crate) obtained_at: u64,
    /// Unix seconds it expires, when the answer said.
    #[serde(default)]
    pub(crate) expires_at: Option<u64>,
}

impl TokenEntry {
    /// The refresh margin: refresh ahead of expiry by min(60 s, a quarter of the token's
    /// lifetime) (docs/CONTRACTS.md#oauth-client).
    pub(crate) fn refresh_due(&self, now: u64) -> bool {
        let Some(expires_at) = self.expires_at else {
            return false;
        };
        let lifetime = expires_at.saturating_sub(self.obtained_at);
        let margin = (lifetime / 4).min(60);
        now.saturating_add(margin) >= expires_at
    }

    /// Whether the access token is past its expiry.
    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// A client registered at an issuer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RegistrationEntry {
    pub(crate) issuer: String,
    pub(crate) client: ClientIdentity,
}

/// The cache directory.
#[derive(Debug, Clone)]
pub(crate) struct TokenCache {
    dir: PathBuf,
}

/// An exclusive lock on one server's entries, released when dropped.
#[derive(Debug)]
pub(crate) struct CacheLock {
    _file: File,
}

impl TokenCache {
    /// Opens `dir`, creating it (0700) if absent and tightening it to 0700 if it was looser.
    pub(crate) fn open(dir: &Path) -> Result<Self, AuthError> {
        if let Some(parent) = dir.parent()
            && !parent.as_os_str().is_empty()
        {
            fs::create_dir_all(parent).map_err(|e| AuthError::cache(parent, e))?;
        }
        match fs::DirBuilder::new().mode(DIRECTORY_MODE).create(dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(AuthError::cache(dir, error)),
        }
        let metadata = fs::metadata(dir).map_err(|e| AuthError::cache(dir, e))?;
        if metadata.permissions().mode() & 0o777 != DIRECTORY_MODE {
            fs::set_permissions(dir, fs::Permissions::from_mode(DIRECTORY_MODE))
                .map_err(|e| AuthError::cache(dir, e))?;
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the lock of `server_url`'s entries.
    pub(crate) async fn lock(&self, server_url: &str) -> Result<CacheLock, AuthError> {
        let path = self.dir.join(format!("lock-{}", key(&[server_url])));
        tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(FILE_MODE)
                .open(&path)
                .map_err(|e| AuthError::cache(&path, e))?;
            file.lock().map_err(|e| AuthError::cache(&path, e))?;
            Ok(CacheLock { _file: file })
        })
        .await
        .map_err(|e| AuthError::Internal(format!("cache lock task: {e}")))?
    }

    /// Every token entry (unreadable files are skipped with a warning).
    pub(crate) fn entries(&self) -> Result<Vec<TokenEntry>, AuthError> {
        let mut entries = Vec::new();
        let listing = fs::read_dir(&self.dir).map_err(|e| AuthError::cache(&self.dir, e))?;
        for item in listing {
            let item = item.map_err(|e| AuthError::cache(&self.dir, e))?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with("token-") && name.ends_with(".json")) {
                continue;
            }
            match read_json::<TokenEntry>(&item.path()) {
                Ok(Some(entry)) => entries.push(entry),
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(path = %item.path().display(), error = %error, "unreadable token cache entry skipped")
                }
            }
        }
        Ok(entries)
    }

    /// The newest entry for `server_url` (and `client_id`, when one is configured).
    pub(crate) fn find(
        &self,
        server_url: &str,
        client_id: Option<&str>,
    ) -> Result<Option<TokenEntry>, AuthError> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|entry| entry.server_url == server_url)
            .filter(|entry| client_id.is_none_or(|id| entry.client.client_id == id))
            .max_by_key(|entry| entry.obtained_at))
    }

    /// Writes `entry` (replacing the one for its resource, issuer and client).
    pub(crate) fn save(&self, entry: &TokenEntry) -> Result<(), AuthError> {
        self.write_json(&token_file_name(entry), entry)
    }

    /// Removes every entry for `server_url`; returns how many there were.
    pub(crate) fn remove(&self, server_url: &str) -> Result<usize, AuthError> {
        let mut removed = 0;
        for entry in self.entries()? {
            if entry.server_url == server_url {
                let path = self.dir.join(token_file_name(&entry));
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(AuthError::cache(path, error)),
                }
            }
        }
        Ok(removed)
    }

    /// The client registered at `issuer`, if any.
    pub(crate) fn registration(
        &self,
        issuer: &str,
    ) -> Result<Option<RegistrationEntry>, AuthError> {
        read_json(&self.dir.join(format!("client-{}.json", key(&[issuer]))))
    }

    /// Keeps the client registered at its issuer.
    pub(crate) fn save_registration(&self, entry: &RegistrationEntry) -> Result<(), AuthError> {
        self.write_json(&format!("client-{}.json", key(&[&entry.issuer])), entry)
    }

    /// Writes `value` to `name` whole: a 0600 temporary in the directory, synced, renamed.
    fn write_json(&self, name: &str, value: &impl Serialize) -> Result<(), AuthError> {
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| AuthError::Internal(e.to_string()))?;
        let temporary = self.dir.join(format!(".tmp-{}", hex(&nonce)));
        let target = self.dir.join(name);
        let bytes = serde_json::to_vec_pretty(value)
            .map_err(|e| AuthError::Internal(format!("encoding a cache entry: {e}")))?;
        let written = (|| {
            let mut file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(FILE_MODE)
                .open(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&temporary, &target)
        })();
        if let Err(error) = written {
            let _ = fs::remove_file(&temporary);
            return Err(AuthError::cache(target, error));
        }
        Ok(())
    }
}

/// `Ok(None)` when the file does not exist.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, AuthError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(AuthError::cache(path, error)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        AuthError::cache(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}

/// An entry's file: one per resource, issuer and client.
fn token_file_name(entry: &TokenEntry) -> String {
    format!(
        "token-{}.json",
        key(&[&entry.resource, &entry.issuer, &entry.client.client_id])
    )
}

/// A file-name key for `parts`: the first 16 bytes of their SHA-256, hex.
fn key(parts: &[&str]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(part.as_bytes());
        context.update(&[0]);
    }
    hex(&context.finish().as_ref()[..16])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What `tether auth status` shows of one cached sign-in; never a token.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct CachedSignIn {
    /// The MCP endpoint.
    pub server_url: String,
    /// The resource the tokens are for.
    pub resource: String,
    /// The authorization server.
    pub issuer: String,
    /// The client id used.
    pub client_id: String,
    /// The scope granted.
    pub scope: Option<String>,
    /// When the access token expires (Unix seconds), if known.
    pub expires_at: Option<u64>,
    /// Whether a refresh token is held.
    pub refreshable: bool,
}

/// Every sign-in cached in `cache_dir`, newest first.
///
/// # Errors
///
/// The cache cannot be read.
pub fn cached_sign_ins(cache_dir: &std::path::Path) -> Result<Vec<CachedSignIn>, AuthError> {
    let cache = TokenCache::open(cache_dir)?;
    let mut entries = cache.entries()?;
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.obtained_at));
    Ok(entries
        .into_iter()
        .map(|entry| CachedSignIn {
            server_url: entry.server_url,
            resource: entry.resource,
            issuer: entry.issuer,
            client_id: entry.client.client_id,
            scope: entry.scope,
            expires_at: entry.expires_at,
            refreshable: entry.refresh_token.is_some(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::oauth::grant::TokenAuthMethod;

    fn entry(server: &str, client: &str, obtained_at: u64) -> TokenEntry {
        TokenEntry {
            server_url: server.to_owned(),
            resource: server.to_owned(),
            issuer: "https://as".to_owned(),
            metadata: serde_json::from_value(serde_json::json!({
                "issuer": "https://as",
                "authorization_endpoint": "https://as/a",
                "token_endpoint": "https://as/t",
            }))
            .unwrap(),
            client: ClientIdentity {
                client_id: client.to_owned(),
                client_secret: Some("secret".to_owned()),
                auth_method: TokenAuthMethod::ClientSecretBasic,
            },
            access_token: format!("at-{obtained_at}"),
            refresh_token: Some("rt".to_owned()),
            scope: None,
            obtained_at,
            expires_at: Some(obtained_at + 3600),
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[tokio::test]
    async fn entries_round_trip_with_owner_only_modes_everywhere() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("deep/tether/oauth");
        let cache = TokenCache::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        cache.save(&entry("http://a/mcp", "c1", 10)).unwrap();
        cache.save(&entry("http://a/mcp", "c1", 20)).unwrap();
        cache.save(&entry("http://a/mcp", "c2", 15)).unwrap();
        cache.save(&entry("http://b/mcp", "c1", 30)).unwrap();
        cache
            .save_registration(&RegistrationEntry {
                issuer: "https://as".to_owned(),
                client: entry("x", "c9", 0).client,
            })
            .unwrap();
        let _lock = cache.lock("http://a/mcp").await.unwrap();
        // One entry per resource, issuer and client: the second save replaced the first.
        assert_eq!(cache.entries().unwrap().len(), 3);
        assert_eq!(
            cache
                .find("http://a/mcp", None)
                .unwrap()
                .unwrap()
                .access_token,
            "at-20"
        );
        assert_eq!(
            cache
                .find("http://a/mcp", Some("c2"))
                .unwrap()
                .unwrap()
                .access_token,
            "at-15"
        );
        assert!(cache.find("http://c/mcp", None).unwrap().is_none());
        assert_eq!(
            cache
                .registration("https://as")
                .unwrap()
                .unwrap()
                .client
                .client_id,
            "c9"
        );
        assert!(cache.registration("https://other").unwrap().is_none());
        for file in fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        assert_eq!(cache.remove("http://a/mcp").unwrap(), 2);
        assert_eq!(cache.entries().unwrap().len(), 1);
    }

    #[test]
    fn a_looser_existing_directory_is_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("oauth");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        TokenCache::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn refresh_is_due_a_quarter_of_the_lifetime_or_a_minute_before_expiry() {
        let mut token = entry("s", "c", 1000);
        // An hour's token: 60 s ahead.
        assert!(!token.refresh_due(1000 + 3600 - 61));
        assert!(token.refresh_due(1000 + 3600 - 60));
        // A 20 s token: 5 s ahead.
        token.expires_at = Some(1020);
        assert!(!token.refresh_due(1014));
        assert!(token.refresh_due(1015));
        assert!(!token.expired(1019));
        assert!(token.expired(1020));
        token.expires_at = None;
        assert!(!token.refresh_due(u64::MAX));
    }

    #[tokio::test]
    async fn the_lock_excludes_another_holder_until_dropped() {
        let root = tempfile::tempdir().unwrap();
        let cache = TokenCache::open(root.path()).unwrap();
        let first = cache.lock("http://a/mcp").await.unwrap();
        let second = tokio::spawn({
            let cache = cache.clone();
            async move { cache.lock("http://a/mcp").await.map(|_| ()) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!second.is_finished(), "the second lock waited");
        // Another server's lock is independent.
        cache.lock("http://b/mcp").await.unwrap();
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), second)
            .await
            .expect("the lock was released")
            .unwrap()
            .unwrap();
    }
}
