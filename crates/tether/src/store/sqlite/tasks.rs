//! [`SqliteTaskStore`]: tasks in the same SQLite file as the events and sessions, written by
//! the same writer thread.
//!
//! Each task is one row (`tasks(id, record)`, the record as JSON). Reads never touch the file:
//! the store keeps every record in a [`TaskMap`], loaded when the store is made and replaced
//! after each commit, so a `tasks/get` costs a map look-up. Changes are read-modify-write under one
//! async lock (tasks change seldom; a commit each is fine), applied with the module-level rules
//! of [`crate::store::tasks`], committed by the writer, and only then visible and published to
//! waiters: what `get` returns is durable, which is what `CreateTaskResult` waits for. The
//! tasks that were not terminal when the store opened belong to a process that died: they are
//! the ones [`TaskStore::fail_orphans`] ends.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::params;
use tether_proto::ids::TaskId;

use super::backend::Inner;
use super::writer::Command;
use crate::lock as guard;
use crate::store::error::{StoreError, StoreFailure};
use crate::store::tasks::{TaskMap, TaskRecord, TaskStore, apply_restarted, now_ms};

/// The SQLite [`TaskStore`]. Made by
/// [`SqliteSessionStore::task_store`](super::SqliteSessionStore::task_store).
pub struct SqliteTaskStore {
    inner: Arc<Inner>,
    /// Every task in the file, as last committed, with its waiters' watch.
    tasks: TaskMap,
    /// Tasks found unfinished when the store opened, not yet failed.
    orphans: Mutex<Vec<TaskId>>,
    /// One read-modify-write at a time.
    writing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SqliteTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTaskStore")
            .field("path", &self.inner.config.path)
            .finish_non_exhaustive()
    }
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(StoreFailure::new(error))
}

impl SqliteTaskStore {
    /// Loads the file's tasks.
    pub(super) fn load(inner: Arc<Inner>) -> Result<Self, StoreError> {
        let conn = super::schema::open_reader(&inner.config.path).map_err(unavailable)?;
        let mut statement = conn
            .prepare("SELECT record FROM tasks")
            .map_err(unavailable)?;
        let rows = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(unavailable)?;
        let mut records = Vec::new();
        for row in rows {
            let text = row.map_err(unavailable)?;
            records.push(serde_json::from_str::<TaskRecord>(&text).map_err(unavailable)?);
        }
        let orphans = records
            .iter()
            .filter(|record| !record.status.is_terminal())
            .map(|record| record.id)
            .collect();
        Ok(Self {
            inner,
            tasks: TaskMap::with(records),
            orphans: Mutex::new(orphans),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// Commits `records` (written whole) and `removed` in one transaction of the writer, then
    /// makes them visible and wakes their waiters.
    async fn commit(
        &self,
        records: Vec<TaskRecord>,
        removed: Vec<TaskId>,
    ) -> Result<(), StoreError> {
        let rows: Vec<(String, String)> = records
            .iter()
            .map(|record| {
                let text = serde_json::to_string(record).expect("a task record serializes");
                (record.id.to_string(), text)
            })
            .collect();
        let gone: Vec<String> = removed.iter().map(ToString::to_string).collect();
        self.inner
            .write(move |reply| {
                Command::Run(Box::new(move |conn| {
                    for (id, text) in &rows {
                        conn.prepare_cached(
                            "INSERT INTO tasks (id, record) VALUES (?1, ?2)
                             ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                        )?
                        .execute(params![id, text])?;
                    }
                    for id in &gone {
                        conn.prepare_cached("DELETE FROM tasks WHERE id = ?1")?
                            .execute(params![id])?;
                    }
                    Ok(super::writer::answer(reply, Ok(())))
                }))
            })
            .await?;
        for record in records {
            self.tasks.put(record);
        }
        self.tasks.remove(&removed);
        Ok(())
    }
}

#[async_trait]
impl TaskStore for SqliteTaskStore {
    /// Returns after the commit: a `get` then finds it, in this process and after a restart.
    async fn create(&self, record: &TaskRecord) -> Result<(), StoreError> {
        let _writing = self.writing.lock().await;
        self.commit(vec![record.clone()], Vec::new()).await
    }

    async fn get(&self, id: &TaskId, principal: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.tasks.live(id, Some(principal)))
    }

    /// Changes a copy; a changed copy is committed before the answer.
    async fn update(
        &self,
        id: &TaskId,
        principal: Option<&str>,
        update: &(dyn for<'r> Fn(&'r mut TaskRecord) -> bool + Send + Sync),
    ) -> Result<Option<TaskRecord>, StoreError> {
        let _writing = self.writing.lock().await;
        let Some(mut record) = self.tasks.live(id, principal) else {
            return Ok(None);
        };
        if update(&mut record) {
            self.commit(vec![record.clone()], Vec::new()).await?;
        }
        Ok(Some(record))
    }

    async fn wait_for_change(&self, id: &TaskId, after: u64) -> Result<(), StoreError> {
        self.tasks.wait_for_change(id, after).await;
        Ok(())
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        Ok(self.tasks.count_for(principal))
    }

    async fn remove_expired(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let _writing = self.writing.lock().await;
        let expired = self.tasks.expired();
        if !expired.is_empty() {
            let ids = expired.iter().map(|record| record.id).collect();
            self.commit(Vec::new(), ids).await?;
        }
        Ok(expired)
    }

    async fn fail_orphans(&self) -> Result<Vec<TaskId>, StoreError> {
        let _writing = self.writing.lock().await;
        let orphans = std::mem::take(&mut *guard(&self.orphans));
        let now = now_ms();
        let mut failed = Vec::new();
        for id in &orphans {
            if let Some(mut record) = self.tasks.live(id, None)
                && apply_restarted(&mut record, now)
            {
                failed.push(record);
            }
        }
        let ids = failed.iter().map(|record| record.id).collect();
        if let Err(error) = self.commit(failed, Vec::new()).await {
            // Not failed after all: the next call tries again.
            guard(&self.orphans).extend(orphans);
            return Err(error);
        }
        Ok(ids)
    }
}
