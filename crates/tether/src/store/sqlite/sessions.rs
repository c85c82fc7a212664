//! The SQLite [`SessionStore`]: [`SqliteSessionStore`], its records served from what the
//! writer publishes, idle expiry on the wall clock, and the file's sealing key.

use crate::lock as guard;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tether_proto::ids::SessionId;
use tokio::sync::oneshot;

use crate::store::error::StoreError;
use crate::store::session_store::{SessionRecord, SessionStore};

use super::backend::Inner;
use super::tasks::SqliteTaskStore;
use super::writer::Command;

/// The SQLite [`SessionStore`], sharing its event store's file and writer thread. Idle expiry
/// is measured on the wall clock (so it runs on across restarts), not tokio's.
pub struct SqliteSessionStore {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.inner.config.path)
            .finish_non_exhaustive()
    }
}

impl SqliteSessionStore {
    /// The task store of the same file, its tasks loaded. Make it once per open store: the
    /// tasks left unfinished by an earlier process are its to fail
    /// ([`TaskStore::fail_orphans`](crate::store::tasks::TaskStore::fail_orphans)).
    ///
    /// # Errors
    ///
    /// When the file's tasks cannot be read.
    pub fn task_store(&self) -> Result<SqliteTaskStore, StoreError> {
        SqliteTaskStore::load(Arc::clone(&self.inner))
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    /// Inserting an id that exists replaces its record and counts as activity.
    async fn insert(&self, record: SessionRecord) -> Result<(), StoreError> {
        self.inner
            .write(|reply| Command::InsertSession { record, reply })
            .await
    }

    /// From the writer's copy of the committed records: no read.
    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        Ok(guard(&self.inner.shared.records).get(id).cloned())
    }

    /// Touching an unknown session does nothing.
    /// Returns once the writer has the touch, without waiting for its commit: activity only
    /// pushes back idle expiry, which a touch lost in a crash merely brings forward, and every
    /// request touches its session, so waiting would put a commit on every request's path.
    /// The writer applies commands in order, so a later `expire_idle` sees it.
    async fn touch(&self, id: &SessionId) -> Result<(), StoreError> {
        let (reply, _answer) = oneshot::channel();
        self.inner.send(Command::Touch {
            id: id.clone(),
            reply,
        })
    }

    async fn remove(&self, id: &SessionId) -> Result<bool, StoreError> {
        let id = id.clone();
        self.inner
            .write(|reply| Command::RemoveRecord { id, reply })
            .await
    }

    async fn expire_idle(&self, idle: Duration) -> Result<Vec<SessionId>, StoreError> {
        self.inner
            .write(|reply| Command::ExpireIdle { idle, reply })
            .await
    }

    async fn count(&self) -> Result<usize, StoreError> {
        Ok(guard(&self.inner.shared.records).len())
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        Ok(guard(&self.inner.shared.records)
            .values()
            .filter(|record| &*record.principal == principal)
            .count())
    }

    /// Made when the file was created and kept in it: the same after every restart.
    async fn sealing_key(&self) -> Result<[u8; 32], StoreError> {
        Ok(self.inner.sealing_key)
    }
}
