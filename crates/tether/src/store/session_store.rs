//! The session store's contract: the [`SessionStore`] trait and the [`SessionRecord`] it
//! keeps between requests.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tether_proto::ids::{SessionId, StreamId};

use super::error::StoreError;

/// A session as the server remembers it between requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id issued on the initialize response.
    pub id: SessionId,
    /// The protocol version negotiated at initialize; it decides every version-dependent
    /// behaviour for the session's lifetime (docs/CONTRACTS.md#negotiated-version).
    pub version: tether_proto::version::ProtocolVersion,
    /// The principal that created the session; requests by any other principal get 404.
    pub principal: Arc<str>,
    /// The session's standalone (GET) stream, created with the session.
    pub standalone: StreamId,
    /// What the client said of itself at `initialize`: an object with its `clientInfo` and
    /// `capabilities` as sent (docs/CONTRACTS.md#session-client). Kept so that a handler
    /// that must start a server for the session again (the rmcp adapter after a restart)
    /// can give it the client's own handshake; `None` where the client sent neither, where
    /// they did not fit in [`MAX_SESSION_CLIENT_BYTES`], for 2026-07-28 requests, and for
    /// records stored before it was kept.
    pub client: Option<Arc<serde_json::Value>>,
}

/// The most JSON a session's [`SessionRecord::client`] may take; a client that said more
/// of itself has its session served all the same, without it.
pub const MAX_SESSION_CLIENT_BYTES: usize = 16 * 1024;

/// Where sessions live: in memory, or in the durable stores, so that sessions
/// survive a restart (SQLite) or are shared by nodes (Redis).
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Stores a new session record.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError>;
    /// Looks a session up; `None` if unknown, expired or deleted.
    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;
    /// Records activity, pushing back idle expiry.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError>;
    /// Removes a session; returns whether it existed.
    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError>;
    /// Removes and returns the sessions idle for longer than `idle`.
    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError>;
    /// How many sessions are live.
    async fn count(&self) -> Result<usize, StoreError>;
    /// Live sessions of `principal` (for the per-principal session limit).
    async fn count_for(&self, principal: &str) -> Result<usize, StoreError>;

    /// The server's sealing key: 32 random bytes made once and then kept by the store, so
    /// that every node sharing it, and the same node after a restart, seals and opens the
    /// 2026-07-28 era's `requestState` with the same key (`server::mrtr`). By default a key
    /// made once per process: right for a store that lives in one process, wrong for a shared
    /// or durable one, which overrides this.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        Ok(*process_sealing_key())
    }
}

/// The key [`SessionStore::sealing_key`] defaults to: random, made on first use, the same for
/// the rest of the process.
fn process_sealing_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0; 32];
        getrandom::fill(&mut key).expect("the operating system's CSPRNG is available");
        key
    })
}
