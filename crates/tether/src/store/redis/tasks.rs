//! [`RedisTaskStore`]: tasks in Redis, readable and changeable from every node.
//!
//! A task is a hash `<prefix>task:<id>` with its version (`v`) and its record as JSON (`r`),
//! expiring with its TTL. Every change is a read, the module-level rules of
//! [`crate::store::tasks`] applied to the copy, and a compare-and-set script that writes it
//! only if the version is still the one read (else the change is read and applied again), so
//! nodes changing one task at once never lose a change. A write is acknowledged by Redis before
//! it returns: a `get` on any node then finds it, which is what `CreateTaskResult` waits for.
//! The set `<prefix>task-node:<node>` names the unfinished tasks a node created: those found
//! there when the node opens again were left by its earlier process, and
//! [`TaskStore::fail_orphans`] ends them; `<prefix>task-nodes` names every node with such a
//! set, and once a node's lease (`<prefix>node:<node>`, the event store's heartbeat) has
//! lapsed, whichever live node calls `fail_orphans` next ends its unfinished tasks the same way
//! (the compare-and-set makes two claimers harmless). `<prefix>task-by:<principal>` counts a
//! principal's tasks. Waiting for a change polls the version (tasks change seldom, and a poll
//! is one small read).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tether_proto::ids::TaskId;

use super::backend::Inner;
use super::reply::{unavailable, unavailable_because};
use crate::lock as guard;
use crate::store::error::StoreError;
use crate::store::tasks::{TaskRecord, TaskStore, apply_restarted, now_ms};

/// Writes `ARGV[2]` (version) and `ARGV[3]` (record) into the hash `KEYS[1]` if its version is
/// `ARGV[1]` (`"0"`: the hash must not exist), with expiry `ARGV[4]` ms since the epoch (`"0"`:
/// none). 1 when written, 0 when the version moved.
const COMPARE_AND_SET: &str = r"
local current = redis.call('HGET', KEYS[1], 'v')
if (current or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'r', ARGV[3])
if ARGV[4] ~= '0' then redis.call('PEXPIREAT', KEYS[1], ARGV[4]) end
return 1
";

/// Attempts at a compare-and-set before the store reports contention as unavailability.
const MAX_ATTEMPTS: usize = 16;

/// How often a waiter reads the version.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// The Redis [`TaskStore`]. Made by
/// [`RedisSessionStore::task_store`](super::RedisSessionStore::task_store).
pub struct RedisTaskStore {
    inner: Arc<Inner>,
    cas: redis::Script,
    /// Unfinished tasks an earlier process of this node left, found when this store was made.
    orphans: Mutex<Vec<TaskId>>,
}

impl std::fmt::Debug for RedisTaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTaskStore")
            .field("node", &self.inner.config.node_id)
            .finish_non_exhaustive()
    }
}

impl RedisTaskStore {
    /// The task store of `inner`'s Redis, prefix and node.
    pub(super) async fn open(inner: Arc<Inner>) -> Result<Self, StoreError> {
        let node_set = inner.key("task-node", &inner.config.node_id);
        let ids: Vec<String> = inner.query(redis::cmd("SMEMBERS").arg(&node_set)).await?;
        let orphans = ids.iter().filter_map(|id| TaskId::parse(id).ok()).collect();
        Ok(Self {
            inner,
            cas: redis::Script::new(COMPARE_AND_SET),
            orphans: Mutex::new(orphans),
        })
    }

    fn task_key(&self, id: &TaskId) -> String {
        self.inner.key("task", id.as_str())
    }

    /// The task as stored, whoever it belongs to, unless it is gone or expired.
    async fn read(&self, id: &TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let text: Option<String> = self
            .inner
            .query(redis::cmd("HGET").arg(self.task_key(id)).arg("r"))
            .await?;
        let Some(text) = text else { return Ok(None) };
        let record: TaskRecord = serde_json::from_str(&text).map_err(unavailable)?;
        Ok((!record.expired_at(now_ms())).then_some(record))
    }

    /// Writes `record` if its stored version is still `expected` (0: new).
    async fn write(&self, record: &TaskRecord, expected: u64) -> Result<bool, StoreError> {
        let text = serde_json::to_string(record).expect("a task record serializes");
        let expires = record
            .ttl_ms
            .map_or(0, |ttl| record.created_at_ms.saturating_add(ttl));
        let mut invocation = self.cas.prepare_invoke();
        invocation
            .key(self.task_key(&record.id))
            .arg(expected.to_string())
            .arg(record.version.to_string())
            .arg(text)
            .arg(expires.to_string());
        let mut conn = self.inner.conn.clone();
        let written: i64 = self
            .inner
            .bounded(invocation.invoke_async(&mut conn))
            .await?
            .map_err(unavailable)?;
        if written == 1 && record.status.is_terminal() {
            let node_set = self.inner.key("task-node", &self.inner.config.node_id);
            let _: i64 = self
                .inner
                .query(redis::cmd("SREM").arg(node_set).arg(record.id.as_str()))
                .await?;
        }
        Ok(written == 1)
    }
}

#[async_trait]
impl TaskStore for RedisTaskStore {
    async fn create(&self, record: &TaskRecord) -> Result<(), StoreError> {
        if !self.write(record, 0).await? {
            return Err(unavailable_because("a task id was taken"));
        }
        let inner = &self.inner;
        let node_set = inner.key("task-node", &inner.config.node_id);
        let by_principal = inner.key("task-by", &record.principal);
        let _: i64 = inner
            .query(
                redis::cmd("SADD")
                    .arg(inner.key("task-nodes", ""))
                    .arg(&inner.config.node_id),
            )
            .await?;
        let _: i64 = inner
            .query(redis::cmd("SADD").arg(node_set).arg(record.id.as_str()))
            .await?;
        let _: i64 = inner
            .query(redis::cmd("SADD").arg(by_principal).arg(record.id.as_str()))
            .await?;
        Ok(())
    }

    async fn get(&self, id: &TaskId, principal: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self
            .read(id)
            .await?
            .filter(|record| *record.principal == *principal))
    }

    /// Retried while other nodes change the task meanwhile (a compare-and-set on its version).
    async fn update(
        &self,
        id: &TaskId,
        principal: Option<&str>,
        update: &(dyn for<'r> Fn(&'r mut TaskRecord) -> bool + Send + Sync),
    ) -> Result<Option<TaskRecord>, StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(mut record) = self.read(id).await? else {
                return Ok(None);
            };
            if principal.is_some_and(|p| *record.principal != *p) {
                return Ok(None);
            }
            let expected = record.version;
            if !update(&mut record) || self.write(&record, expected).await? {
                return Ok(Some(record));
            }
        }
        Err(unavailable_because(
            "a task kept changing under a compare-and-set",
        ))
    }

    async fn wait_for_change(&self, id: &TaskId, after: u64) -> Result<(), StoreError> {
        loop {
            let version: Option<u64> = self
                .inner
                .query(redis::cmd("HGET").arg(self.task_key(id)).arg("v"))
                .await?;
            match version {
                Some(version) if version <= after => tokio::time::sleep(WAIT_POLL).await,
                _ => return Ok(()),
            }
        }
    }

    /// Members of the principal's set whose task is gone are pruned as they are found.
    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        let inner = &self.inner;
        let by_principal = inner.key("task-by", principal);
        let ids: Vec<String> = inner
            .query(redis::cmd("SMEMBERS").arg(&by_principal))
            .await?;
        let mut live = 0;
        for id in ids {
            let exists = match TaskId::parse(&id) {
                Ok(task) => self.read(&task).await?.is_some(),
                Err(_) => false,
            };
            if exists {
                live += 1;
            } else {
                let _: i64 = inner
                    .query(redis::cmd("SREM").arg(&by_principal).arg(&id))
                    .await?;
            }
        }
        Ok(live)
    }

    /// Redis expires each task with its TTL by itself: nothing is left to remove.
    async fn remove_expired(&self) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(Vec::new())
    }

    /// This node's earlier process's tasks (once), then those of every other node whose
    /// lease has lapsed.
    async fn fail_orphans(&self) -> Result<Vec<TaskId>, StoreError> {
        let orphans = std::mem::take(&mut *guard(&self.orphans));
        let mut failed = match self.fail_all(&self.inner.config.node_id, &orphans).await {
            Ok(failed) => failed,
            Err(error) => {
                guard(&self.orphans).extend(orphans);
                return Err(error);
            }
        };
        let inner = &self.inner;
        let nodes_key = inner.key("task-nodes", "");
        let nodes: Vec<String> = inner.query(redis::cmd("SMEMBERS").arg(&nodes_key)).await?;
        for node in nodes.iter().filter(|node| **node != inner.config.node_id) {
            let alive: bool = inner
                .query(redis::cmd("EXISTS").arg(inner.key("node", node)))
                .await?;
            if alive {
                continue;
            }
            let node_set = inner.key("task-node", node);
            let ids: Vec<String> = inner.query(redis::cmd("SMEMBERS").arg(&node_set)).await?;
            let ids: Vec<TaskId> = ids.iter().filter_map(|id| TaskId::parse(id).ok()).collect();
            failed.extend(self.fail_all(node, &ids).await?);
            // A node that came back meanwhile has a lease again and keeps its set.
            let drained: i64 = inner.query(redis::cmd("SCARD").arg(&node_set)).await?;
            if drained == 0 {
                let _: i64 = inner
                    .query(redis::cmd("SREM").arg(&nodes_key).arg(node))
                    .await?;
            }
        }
        Ok(failed)
    }
}

impl RedisTaskStore {
    /// Ends each of `ids` (tasks `node` ran) as [`apply_restarted`] says, and forgets them in
    /// `node`'s set; the ids it failed (the others had ended already).
    async fn fail_all(&self, node: &str, ids: &[TaskId]) -> Result<Vec<TaskId>, StoreError> {
        let mut failed = Vec::new();
        let node_set = self.inner.key("task-node", node);
        for id in ids {
            // Whether this call, not another claimer, ended it.
            let ended = AtomicBool::new(false);
            self.update(id, None, &|record| {
                let changed = apply_restarted(record, now_ms());
                ended.store(changed, Ordering::Relaxed);
                changed
            })
            .await?;
            if ended.load(Ordering::Relaxed) {
                failed.push(*id);
            }
            let _: i64 = self
                .inner
                .query(redis::cmd("SREM").arg(&node_set).arg(id.as_str()))
                .await?;
        }
        Ok(failed)
    }
}
