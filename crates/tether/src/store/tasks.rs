//! The task store: durable records of the tasks extension's tasks (SEP-2663), the
//! `TaskStore` of the [`Stores`](super::stores::Stores) bundle.
//!
//! A [`TaskRecord`] is everything `tasks/get` answers with and everything the node running the
//! task and the nodes answering `tasks/update` and `tasks/cancel` share: status, timestamps,
//! TTL and poll interval, the result or error, the questions pending and the answers given,
//! a cancellation request, and a version that every change bumps. The rules of a change (which
//! keys an answer may fill, what a terminal task accepts, what a restart does to a running
//! task, when a task has expired) are the pure functions of this module, so every backend
//! applies the same ones and only persists and publishes; the memory backend is here, SQLite's
//! and Redis's beside their other stores. Another principal's task reads as no task at all.
//!
//! Not here: which calls become tasks, running them, or the wire shape of the methods (the
//! server's).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tether_proto::ids::{SessionId, StreamId, TaskId};
use tokio::sync::watch;

use super::error::StoreError;

/// `error.data.reason` of a task, or a request, whose process or node died while it ran
/// (also `server::SERVER_RESTARTED_REASON`).
pub const SERVER_RESTARTED: &str = "server_restarted";

/// A task's status (SEP-2663).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for answers to its `inputRequests`.
    InputRequired,
    /// Ended with a result (a tool result with `isError: true` included).
    Completed,
    /// Ended with a JSON-RPC error.
    Failed,
    /// Ended by `tasks/cancel` before completing.
    Cancelled,
}

impl TaskStatus {
    /// The wire spelling (`"input_required"`, …).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the task has ended: nothing changes it any more.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// One task, as every node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskRecord {
    /// 128 random bits; also the id of the stream holding its events.
    pub id: TaskId,
    /// The principal that created it; nobody else sees it.
    #[serde(with = "arc_str")]
    pub principal: Arc<str>,
    /// Where it stands.
    pub status: TaskStatus,
    /// A human-readable word on the status (the failure's message, for `failed`).
    pub status_message: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Time of the last change, milliseconds since the Unix epoch.
    pub last_updated_at_ms: u64,
    /// Life from creation in milliseconds, after which it may be discarded; `None`: unlimited.
    pub ttl_ms: Option<u64>,
    /// How often a client should poll, in milliseconds.
    pub poll_interval_ms: Option<u64>,
    /// The request's result, once `completed`.
    pub result: Option<Value>,
    /// The JSON-RPC error, once `failed`.
    pub error: Option<Value>,
    /// The questions waiting for an answer, by key (`{method, params}`).
    pub input_requests: Map<String, Value>,
    /// Answers received and not yet taken by the running handler, by key.
    pub input_responses: Map<String, Value>,
    /// Every key answered over the task's life (keys are never reused).
    pub answered: Vec<String>,
    /// A client asked to cancel it; the running node stops the handler.
    pub cancel_requested: bool,
    /// Bumped by every change; waiters compare it.
    pub version: u64,
    /// The event-log session that owns the task's stream (the stream whose id is the task's),
    /// when its events are kept: with the principal, what a reader of the stream needs.
    #[serde(default)]
    pub events_session: Option<SessionId>,
}

impl TaskRecord {
    /// A new `working` task of `principal`, created now.
    #[must_use]
    pub fn new(
        principal: Arc<str>,
        ttl: Option<Duration>,
        poll_interval: Option<Duration>,
    ) -> Self {
        let now = now_ms();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            id: TaskId::generate(),
            principal,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms: ttl.map(ms),
            poll_interval_ms: poll_interval.map(ms),
            result: None,
            error: None,
            input_requests: Map::new(),
            input_responses: Map::new(),
            answered: Vec::new(),
            cancel_requested: false,
            version: 1,
            events_session: None,
        }
    }

    /// A new `working` task whose events are `stream` of `session` in the event log: the
    /// task's id is the stream's.
    #[must_use]
    pub fn with_events(mut self, stream: StreamId, session: SessionId) -> Self {
        self.id = TaskId::from(stream);
        self.events_session = Some(session);
        self
    }

    /// Whether its TTL has run out at `now_ms`.
    #[must_use]
    pub fn expired_at(&self, now_ms: u64) -> bool {
        self.ttl_ms
            .is_some_and(|ttl| now_ms >= self.created_at_ms.saturating_add(ttl))
    }

    fn touch(&mut self, now_ms: u64) {
        self.version += 1;
        self.last_updated_at_ms = now_ms.max(self.last_updated_at_ms);
    }
}

/// What the node running a task changes.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TaskChange {
    /// The new status.
    pub status: Option<TaskStatus>,
    /// The new status message.
    pub status_message: Option<String>,
    /// The result (with `completed`).
    pub result: Option<Value>,
    /// The error (with `failed`).
    pub error: Option<Value>,
    /// Questions to add to the pending ones.
    pub ask: Map<String, Value>,
    /// Answers the handler has taken, removed from `input_responses`.
    pub taken: Vec<String>,
}

impl TaskChange {
    /// The task ends `completed` with `result`.
    #[must_use]
    pub fn completed(result: Value) -> Self {
        Self {
            status: Some(TaskStatus::Completed),
            result: Some(result),
            ..Self::default()
        }
    }

    /// The task ends `failed` with the JSON-RPC `error` (its message as the status message).
    #[must_use]
    pub fn failed(error: Value) -> Self {
        Self {
            status: Some(TaskStatus::Failed),
            status_message: error["message"].as_str().map(str::to_owned),
            error: Some(error),
            ..Self::default()
        }
    }

    /// The task ends `cancelled`.
    #[must_use]
    pub fn cancelled() -> Self {
        Self {
            status: Some(TaskStatus::Cancelled),
            ..Self::default()
        }
    }

    /// The task asks `questions` (`{key: {method, params}}`): `input_required` until answered.
    #[must_use]
    pub fn ask(questions: Map<String, Value>) -> Self {
        Self {
            ask: questions,
            ..Self::default()
        }
    }

    /// The handler took the answers under `keys`.
    #[must_use]
    pub fn take(keys: Vec<String>) -> Self {
        Self {
            taken: keys,
            ..Self::default()
        }
    }
}

/// Applies `change` to `record` at `now_ms`; `false` (nothing changed) for a terminal task.
/// Questions whose keys were ever asked or answered are not asked again.
pub fn apply_change(record: &mut TaskRecord, change: TaskChange, now_ms: u64) -> bool {
    if record.status.is_terminal() {
        return false;
    }
    for key in &change.taken {
        record.input_responses.remove(key);
    }
    for (key, question) in change.ask {
        if !record.answered.contains(&key) {
            record.input_requests.entry(key).or_insert(question);
        }
    }
    if let Some(message) = change.status_message {
        record.status_message = Some(message);
    }
    match change.status {
        Some(status) if status.is_terminal() => {
            record.status = status;
            record.result = change.result;
            record.error = change.error;
            record.input_requests.clear();
            record.input_responses.clear();
        }
        Some(status) => record.status = status,
        None => {}
    }
    if !record.status.is_terminal() {
        record.status = if record.input_requests.is_empty() {
            TaskStatus::Working
        } else {
            TaskStatus::InputRequired
        };
    }
    record.touch(now_ms);
    true
}

/// Applies a client's `tasks/update` answers at `now_ms`: each key that is pending fills its
/// question (the question leaves `inputRequests`, the answer waits for the handler); unknown
/// and already-answered keys are ignored. Returns whether anything changed.
pub fn apply_answers(record: &mut TaskRecord, responses: Map<String, Value>, now_ms: u64) -> bool {
    if record.status.is_terminal() {
        return false;
    }
    let mut changed = false;
    for (key, answer) in responses {
        if record.input_requests.remove(&key).is_some() {
            record.answered.push(key.clone());
            record.input_responses.insert(key, answer);
            changed = true;
        }
    }
    if changed {
        if record.input_requests.is_empty() {
            record.status = TaskStatus::Working;
        }
        record.touch(now_ms);
    }
    changed
}

/// Records a cancellation request at `now_ms`; `false` for a terminal task or one already
/// asked.
pub fn apply_cancel(record: &mut TaskRecord, now_ms: u64) -> bool {
    if record.status.is_terminal() || record.cancel_requested {
        return false;
    }
    record.cancel_requested = true;
    record.touch(now_ms);
    true
}

/// Ends a task whose process or node died while it ran: `failed` with -32603 and
/// `data.reason` [`SERVER_RESTARTED`]. `false` for a terminal task.
pub fn apply_restarted(record: &mut TaskRecord, now_ms: u64) -> bool {
    apply_change(
        record,
        TaskChange::failed(json!({
            "code": tether_proto::jsonrpc::INTERNAL_ERROR,
            "message": "the server running this task restarted",
            "data": {"reason": SERVER_RESTARTED},
        })),
        now_ms,
    )
}

/// `Arc<str>` as a JSON string (serde's `rc` feature is not on).
mod arc_str {
    use std::sync::Arc;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where tasks live (see the module docs). Every method that names a principal treats another
/// principal's task as missing.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task. Returns once a [`get`](Self::get) on any node would find it: a
    /// server sends `CreateTaskResult` only after this.
    async fn create(&self, record: &TaskRecord) -> Result<(), StoreError>;

    /// The task, if it exists, is `principal`'s and has not expired.
    async fn get(&self, id: &TaskId, principal: &str) -> Result<Option<TaskRecord>, StoreError>;

    /// One atomic read-modify-write of task `id` (of `principal`, when given): `update`
    /// changes the record and says whether it did, and a changed record is stored. The record
    /// as it stands after, or `None` when there is no such live task. `update` may run more
    /// than once (a shared store retries a compare-and-set), so it depends on the record alone.
    /// What the changes are is written once, in the provided methods below.
    async fn update(
        &self,
        id: &TaskId,
        principal: Option<&str>,
        update: &(dyn for<'r> Fn(&'r mut TaskRecord) -> bool + Send + Sync),
    ) -> Result<Option<TaskRecord>, StoreError>;

    /// The running node's change ([`apply_change`]); the record as it stands after it, or
    /// `None` when the task is gone.
    async fn change(
        &self,
        id: &TaskId,
        change: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError> {
        self.update(id, None, &|record| {
            apply_change(record, change.clone(), now_ms())
        })
        .await
    }

    /// A client's answers ([`apply_answers`]); `false` when there is no such task for
    /// `principal`.
    async fn answer(
        &self,
        id: &TaskId,
        principal: &str,
        responses: Map<String, Value>,
    ) -> Result<bool, StoreError> {
        let answered = self
            .update(id, Some(principal), &|record| {
                apply_answers(record, responses.clone(), now_ms())
            })
            .await?;
        Ok(answered.is_some())
    }

    /// A client's cancellation ([`apply_cancel`]); `false` when there is no such task for
    /// `principal` (a terminal task is still found: cancelling it changes nothing).
    async fn cancel(&self, id: &TaskId, principal: &str) -> Result<bool, StoreError> {
        let found = self
            .update(id, Some(principal), &|record| {
                apply_cancel(record, now_ms())
            })
            .await?;
        Ok(found.is_some())
    }

    /// Completes once the task's version is past `after`, or it is gone.
    async fn wait_for_change(&self, id: &TaskId, after: u64) -> Result<(), StoreError>;

    /// Tasks of `principal` that exist now (for the per-principal limit).
    async fn count_for(&self, principal: &str) -> Result<usize, StoreError>;

    /// Removes the tasks whose TTL ran out and returns them, so the server can free what
    /// else they held (their event streams); none where the backend expires them by itself,
    /// as Redis does (with their streams).
    async fn remove_expired(&self) -> Result<Vec<TaskRecord>, StoreError>;

    /// Ends ([`apply_restarted`]) every task an earlier process of this store left running
    /// (reported once), and, for a store shared by several nodes, every task a node whose
    /// lease has lapsed left running; the ids it ended. The server calls it when it is built
    /// and then every second.
    async fn fail_orphans(&self) -> Result<Vec<TaskId>, StoreError>;
}

/// Task records in this process's memory, each with a watch its waiters follow: the memory
/// store's storage, and the SQLite store's copy of what it committed.
#[derive(Debug, Default)]
pub(crate) struct TaskMap {
    tasks: Mutex<HashMap<TaskId, (TaskRecord, watch::Sender<u64>)>>,
}

impl TaskMap {
    /// A map holding `records`.
    #[cfg(feature = "sqlite")]
    pub(crate) fn with(records: impl IntoIterator<Item = TaskRecord>) -> Self {
        let map = Self::default();
        for record in records {
            map.put(record);
        }
        map
    }

    /// Stores `record` (new, or replacing the one with its id) and wakes its waiters.
    pub(crate) fn put(&self, record: TaskRecord) {
        let version = record.version;
        let mut tasks = crate::lock(&self.tasks);
        match tasks.get_mut(&record.id) {
            Some((stored, tx)) => {
                *stored = record;
                tx.send_replace(version);
            }
            None => {
                let (tx, _) = watch::channel(version);
                tasks.insert(record.id, (record, tx));
            }
        }
    }

    /// Removes the tasks `ids`; their waiters return.
    pub(crate) fn remove(&self, ids: &[TaskId]) {
        let mut tasks = crate::lock(&self.tasks);
        for id in ids {
            // Dropping the sender ends every wait on it.
            tasks.remove(id);
        }
    }

    /// Applies `f` to the live task `id` (of `principal`, when given), under the map's lock,
    /// and wakes its waiters when the version moved.
    pub(crate) fn modify<T>(
        &self,
        id: &TaskId,
        principal: Option<&str>,
        f: impl FnOnce(&mut TaskRecord) -> T,
    ) -> Option<T> {
        let mut tasks = crate::lock(&self.tasks);
        let (record, tx) = tasks.get_mut(id)?;
        if principal.is_some_and(|p| *record.principal != *p) || record.expired_at(now_ms()) {
            return None;
        }
        let before = record.version;
        let out = f(record);
        if record.version != before {
            tx.send_replace(record.version);
        }
        Some(out)
    }

    /// The live task `id` (of `principal`, when given).
    pub(crate) fn live(&self, id: &TaskId, principal: Option<&str>) -> Option<TaskRecord> {
        self.modify(id, principal, |record| record.clone())
    }

    /// Completes once task `id`'s version is past `after`, or it is gone.
    pub(crate) async fn wait_for_change(&self, id: &TaskId, after: u64) {
        let mut rx = match crate::lock(&self.tasks).get(id) {
            Some((_, tx)) => tx.subscribe(),
            None => return,
        };
        let _ = rx.wait_for(|version| *version > after).await;
    }

    /// Live tasks of `principal`.
    pub(crate) fn count_for(&self, principal: &str) -> usize {
        let now = now_ms();
        crate::lock(&self.tasks)
            .values()
            .filter(|(record, _)| *record.principal == *principal && !record.expired_at(now))
            .count()
    }

    /// The tasks whose TTL ran out.
    pub(crate) fn expired(&self) -> Vec<TaskRecord> {
        let now = now_ms();
        crate::lock(&self.tasks)
            .values()
            .filter(|(record, _)| record.expired_at(now))
            .map(|(record, _)| record.clone())
            .collect()
    }
}

/// The in-process [`TaskStore`].
#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    tasks: TaskMap,
}

impl MemoryTaskStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl TaskStore for MemoryTaskStore {
    async fn create(&self, record: &TaskRecord) -> Result<(), StoreError> {
        self.tasks.put(record.clone());
        Ok(())
    }

    async fn get(&self, id: &TaskId, principal: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.tasks.live(id, Some(principal)))
    }

    async fn update(
        &self,
        id: &TaskId,
        principal: Option<&str>,
        update: &(dyn for<'r> Fn(&'r mut TaskRecord) -> bool + Send + Sync),
    ) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.tasks.modify(id, principal, |record| {
            update(record);
            record.clone()
        }))
    }

    async fn wait_for_change(&self, id: &TaskId, after: u64) -> Result<(), StoreError> {
        self.tasks.wait_for_change(id, after).await;
        Ok(())
    }

    async fn count_for(&self, principal: &str) -> Result<usize, StoreError> {
        Ok(self.tasks.count_for(principal))
    }

    async fn remove_expired(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let expired = self.tasks.expired();
        let ids: Vec<TaskId> = expired.iter().map(|record| record.id).collect();
        self.tasks.remove(&ids);
        Ok(expired)
    }

    /// A memory store starts empty with its process: nothing to fail.
    async fn fail_orphans(&self) -> Result<Vec<TaskId>, StoreError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(method: &str) -> Value {
        json!({"method": method, "params": {}})
    }

    fn asked(keys: &[&str]) -> Map<String, Value> {
        keys.iter()
            .map(|key| ((*key).to_owned(), question("elicitation/create")))
            .collect()
    }

    #[test]
    fn questions_make_a_task_input_required_until_every_one_is_answered() {
        let mut task = TaskRecord::new(Arc::from("p"), None, None);
        assert!(apply_change(
            &mut task,
            TaskChange::ask(asked(&["a", "b"])),
            1
        ));
        assert_eq!(task.status, TaskStatus::InputRequired);
        let mut answers = Map::new();
        answers.insert("a".into(), json!({"action": "accept"}));
        answers.insert("unknown".into(), json!({"ignored": true}));
        assert!(apply_answers(&mut task, answers.clone(), 2));
        assert_eq!(task.status, TaskStatus::InputRequired, "b is still pending");
        assert_eq!(task.input_requests.keys().collect::<Vec<_>>(), ["b"]);
        assert!(
            !apply_answers(&mut task, answers, 3),
            "a is answered already"
        );
        let mut b = Map::new();
        b.insert("b".into(), json!({"action": "decline"}));
        assert!(apply_answers(&mut task, b, 4));
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.input_responses.len(), 2);
        // A key answered once is never asked again.
        apply_change(&mut task, TaskChange::ask(asked(&["a"])), 5);
        assert_eq!(task.status, TaskStatus::Working);
        apply_change(&mut task, TaskChange::take(vec!["a".into(), "b".into()]), 6);
        assert!(task.input_responses.is_empty());
    }

    #[test]
    fn a_terminal_task_changes_no_more() {
        let mut task = TaskRecord::new(Arc::from("p"), None, None);
        let version = task.version;
        assert!(apply_change(
            &mut task,
            TaskChange::completed(json!({"content": []})),
            1
        ));
        assert!(task.version > version);
        assert_eq!(task.status, TaskStatus::Completed);
        let done = task.clone();
        assert!(!apply_change(&mut task, TaskChange::cancelled(), 2));
        assert!(!apply_cancel(&mut task, 2));
        assert!(!apply_restarted(&mut task, 2));
        assert!(!apply_answers(&mut task, asked(&["a"]), 2));
        assert_eq!(task, done);
    }

    #[test]
    fn a_restart_fails_a_running_task_with_its_reason() {
        let mut task = TaskRecord::new(Arc::from("p"), None, None);
        assert!(apply_restarted(&mut task, 9));
        assert_eq!(task.status, TaskStatus::Failed);
        assert_eq!(
            task.error.as_ref().unwrap()["data"]["reason"],
            SERVER_RESTARTED
        );
        assert!(task.status_message.is_some());
    }

    #[test]
    fn the_ttl_counts_from_creation() {
        let mut task = TaskRecord::new(Arc::from("p"), Some(Duration::from_millis(50)), None);
        task.created_at_ms = 1_000;
        assert!(!task.expired_at(1_049));
        assert!(task.expired_at(1_050));
        task.ttl_ms = None;
        assert!(!task.expired_at(u64::MAX));
    }

    #[test]
    fn statuses_spell_as_the_extension_does() {
        for (status, text) in [
            (TaskStatus::Working, "working"),
            (TaskStatus::InputRequired, "input_required"),
            (TaskStatus::Completed, "completed"),
            (TaskStatus::Failed, "failed"),
            (TaskStatus::Cancelled, "cancelled"),
        ] {
            assert_eq!(status.as_str(), text);
            assert_eq!(serde_json::to_value(status).unwrap(), json!(text));
        }
    }
}
