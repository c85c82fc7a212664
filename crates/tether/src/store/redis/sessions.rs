//! The Redis [`SessionStore`]: [`RedisSessionStore`], its records and idle expiry on Redis's
//! clock, and the sealing key every node shares.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Value;
use tether_proto::ids::{SessionId, StreamId};
use tether_proto::version::ProtocolVersion;

use crate::store::error::StoreError;
use crate::store::session_store::{SessionRecord, SessionStore};

use super::backend::Inner;
use super::reply::{unavailable, unavailable_because};
use super::tasks::RedisTaskStore;

/// The Redis [`SessionStore`], sharing its event store's connection. Idle expiry is measured
/// on Redis's clock, so every node agrees on it.
pub struct RedisSessionStore {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("url", &self.inner.config.url)
            .field("key_prefix", &self.inner.config.key_prefix)
            .finish_non_exhaustive()
    }
}

impl RedisSessionStore {
    /// The task store of the same Redis, prefix and node. Make it once per open store: the
    /// tasks this node's earlier process left unfinished are its to fail
    /// ([`TaskStore::fail_orphans`](crate::store::tasks::TaskStore::fail_orphans)).
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached.
    pub async fn task_store(&self) -> Result<RedisTaskStore, StoreError> {
        RedisTaskStore::open(Arc::clone(&self.inner)).await
    }
}

#[async_trait]
impl SessionStore for RedisSessionStore {
    /// Inserting an id that exists replaces its record and counts as activity.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError> {
        let inner = &*self.inner;
        let version = record.version.to_string();
        let client = record
            .client
            .as_deref()
            .map(serde_json::Value::to_string)
            .unwrap_or_default();
        inner
            .run(
                &inner.scripts.session_insert,
                &[
                    &record.id.as_str(),
                    &version,
                    &&*record.principal,
                    &record.standalone.as_str(),
                    &client.as_str(),
                ],
            )
            .await?;
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let inner = &*self.inner;
        let (version, principal, standalone, client): (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = inner
            .query(
                redis::cmd("HMGET")
                    .arg(inner.key("sess", id.as_str()))
                    .arg("v")
                    .arg("p")
                    .arg("st")
                    .arg("c"),
            )
            .await?;
        let (Some(version), Some(principal), Some(standalone)) = (version, principal, standalone)
        else {
            return Ok(None);
        };
        Ok(Some(SessionRecord {
            id: id.clone(),
            version: ProtocolVersion::parse(&version).map_err(unavailable)?,
            principal: Arc::from(principal),
            standalone: StreamId::parse(&standalone).map_err(unavailable)?,
            client: client
                .map(|text| serde_json::from_str(&text).map_err(unavailable))
                .transpose()?
                .map(Arc::new),
        }))
    }

    /// Touching an unknown session does nothing.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError> {
        let inner = &*self.inner;
        inner
            .run(&inner.scripts.session_touch, &[&id.as_str()])
            .await?;
        Ok(())
    }

    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError> {
        let inner = &*self.inner;
        let reply = inner
            .run(&inner.scripts.session_remove, &[&id.as_str()])
            .await?;
        Ok(reply.int(0)? > 0)
    }

    /// Atomic across nodes: each expired session is returned by exactly one caller.
    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError> {
        let inner = &*self.inner;
        let idle_ms = u64::try_from(idle.as_millis())
            .unwrap_or(u64::MAX)
            .to_string();
        let reply = inner
            .run(&inner.scripts.session_expire_idle, &[&idle_ms])
            .await?;
        let Some(Value::Array(ids)) = reply.values.first() else {
            return Ok(Vec::new());
        };
        Ok(ids
            .iter()
            .filter_map(|id| match id {
                Value::BulkString(id) => std::str::from_utf8(id)
                    .ok()
                    .and_then(|id| SessionId::parse(id).ok()),
                _ => None,
            })
            .collect())
    }

    async fn count(&self) -> Result<usize, StoreError> {
        let inner = &*self.inner;
        let count: usize = inner
            .query(redis::cmd("ZCARD").arg(format!("{}seen", inner.config.key_prefix)))
            .await?;
        Ok(count)
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        let inner = &*self.inner;
        let count: usize = inner
            .query(redis::cmd("SCARD").arg(inner.key("ps", principal)))
            .await?;
        Ok(count)
    }

    /// One key for every node: the first node to ask makes it (`SET NX`), every node reads
    /// the one that won.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        let inner = &*self.inner;
        let key = format!("{}sealing_key", inner.config.key_prefix);
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).expect("the operating system's CSPRNG is available");
        // `OK` when this node made it, nil when another one had.
        let _made: Option<String> = inner
            .query(redis::cmd("SET").arg(&key).arg(&fresh[..]).arg("NX"))
            .await?;
        let stored: Vec<u8> = inner.query(redis::cmd("GET").arg(&key)).await?;
        stored
            .try_into()
            .map_err(|_| unavailable_because("the stored sealing key is not 32 bytes".to_owned()))
    }
}
