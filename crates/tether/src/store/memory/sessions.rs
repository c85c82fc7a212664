//! [`MemorySessionStore`]: session records in a map, with the last time each was used.
//!
//! It owns idle expiry's bookkeeping; it does not decide the idle limit (the server's config)
//! or drop a session's streams (the server calls the event store for that).

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tether_proto::ids::SessionId;
use tokio::time::Instant;

use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::map::FastMap;
use crate::store::session_store::{SessionRecord, SessionStore};

/// The in-process [`SessionStore`]. Times are `tokio::time::Instant`s, so idle expiry follows
/// tokio's clock (and paused time in tests).
#[derive(Debug, Default)]
pub struct MemorySessionStore {
    sessions: Mutex<FastMap<SessionId, Entry>>,
}

#[derive(Debug)]
struct Entry {
    record: SessionRecord,
    last_seen: Instant,
}

impl MemorySessionStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    /// Inserting an id that exists replaces its record and counts as activity.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError> {
        let entry = Entry {
            record,
            last_seen: Instant::now(),
        };
        guard(&self.sessions).insert(entry.record.id.clone(), entry);
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        Ok(guard(&self.sessions)
            .get(id)
            .map(|entry| entry.record.clone()))
    }

    /// Touching an unknown session does nothing: it expired or was deleted meanwhile, and the
    /// request's next look-up says so.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError> {
        if let Some(entry) = guard(&self.sessions).get_mut(id) {
            entry.last_seen = Instant::now();
        }
        Ok(())
    }

    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(guard(&self.sessions).remove(id).is_some())
    }

    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError> {
        let now = Instant::now();
        let mut expired = Vec::new();
        guard(&self.sessions).retain(|id, entry| {
            let keep = now.saturating_duration_since(entry.last_seen) <= idle;
            if !keep {
                expired.push(id.clone());
            }
            keep
        });
        Ok(expired)
    }

    async fn count(&self) -> Result<usize, StoreError> {
        Ok(guard(&self.sessions).len())
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        Ok(guard(&self.sessions)
            .values()
            .filter(|entry| &*entry.record.principal == principal)
            .count())
    }
}
