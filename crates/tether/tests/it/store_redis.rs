//! The Redis backend: the shared behaviour suite and the durability checks against a private
//! `redis-server` (one per test binary, a fresh key prefix per check), then what only a shared
//! store does: two nodes on one Redis, a Redis restart, concurrent writers on two nodes, and
//! node leases (a dead node's open Request streams are answered by exactly one other node).
//!
//! These tests fail, never skip, when `redis-server` is missing (`scripts/setup.sh`
//! installs it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tether::proto::ids::{SessionId, StreamId};
use tether::proto::jsonrpc::RequestId;
use tether::store::redis::{self, RedisOpenError, RedisStoreConfig};
use tether::store::suite::{Caps, Stores};
use tether::store::{
    EventStore, OrphanedStream, SessionStore, StoreError, StreamKind, StreamOwner,
};
use tether_testkit::redis::{RedisOptions, RedisServer};

/// The URL of this test binary's `redis-server`, started on first use.
///
/// Each `#[tokio::test]` has a runtime of its own that ends with the test, so the server (and
/// the tasks draining its output) live on a thread with a runtime that lasts as long as the
/// process. Statics are never dropped, so a watchdog shell kills the server and removes its
/// directory once this process is gone.
pub(crate) fn redis_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("redis-server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime for redis-server");
                runtime.block_on(async move {
                    let server = match RedisServer::start().await {
                        Ok(server) => server,
                        Err(error) => {
                            let _ = tx.send(Err(error.to_string()));
                            return;
                        }
                    };
                    let watchdog = std::process::Command::new("sh")
                        .arg("-c")
                        .arg(
                            "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
                             kill -9 \"$2\"; rm -rf \"$3\"",
                        )
                        .arg("watchdog")
                        .arg(std::process::id().to_string())
                        .arg(server.pid().to_string())
                        .arg(server.dir())
                        .spawn();
                    if let Err(error) = watchdog {
                        let _ = tx.send(Err(format!("cannot start the watchdog: {error}")));
                        return;
                    }
                    let _ = tx.send(Ok(server.url()));
                    std::future::pending::<()>().await;
                    drop(server);
                });
            })
            .expect("redis-server thread");
        match rx.recv().expect("redis-server thread answers") {
            Ok(url) => url,
            Err(error) => panic!("cannot start redis-server: {error}"),
        }
    })
}

/// A key prefix no other check uses.
pub(crate) fn fresh_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(prefix: &str) -> RedisStoreConfig {
    let mut config = RedisStoreConfig::new(redis_url());
    config.key_prefix = prefix.to_owned();
    config
}

async fn new_events(caps: Caps) -> Arc<dyn EventStore> {
    let (events, _sessions) = redis::open({
        let mut config = config(&fresh_prefix());
        config.limits.max_events_per_session = caps.max_events_per_session;
        config.limits.max_bytes_per_session = caps.max_bytes_per_session;
        config.limits.max_streams_per_session = caps.max_streams_per_session;
        config
    })
    .await
    .expect("open");
    Arc::new(events)
}

async fn new_sessions() -> Arc<dyn SessionStore> {
    let (_events, sessions) = redis::open(config(&fresh_prefix())).await.expect("open");
    Arc::new(sessions)
}

tether::store_suite!(new_events, new_sessions);

/// Opens one new key prefix, again on each call, as the same node.
fn new_opener() -> impl AsyncFn() -> Stores {
    let prefix = fresh_prefix();
    async move || {
        let (events, sessions) = redis::open(config(&prefix)).await.expect("open");
        (
            Arc::new(events) as Arc<dyn EventStore>,
            Arc::new(sessions) as Arc<dyn SessionStore>,
        )
    }
}

tether::store_suite!(durable new_opener);

async fn new_tasks() -> Arc<dyn tether::store::TaskStore> {
    let (_events, sessions) = redis::open(config(&fresh_prefix())).await.expect("open");
    Arc::new(sessions.task_store().await.expect("the tasks"))
}

tether::task_store_suite!(new_tasks);

/// Opens one new key prefix's task store, again on each call, as the same node.
fn new_task_opener() -> impl AsyncFn() -> Arc<dyn tether::store::TaskStore> {
    let prefix = fresh_prefix();
    async move || {
        let (_events, sessions) = redis::open(config(&prefix)).await.expect("open");
        Arc::new(sessions.task_store().await.expect("the tasks"))
            as Arc<dyn tether::store::TaskStore>
    }
}

tether::task_store_suite!(durable new_task_opener);

const RETRY: Duration = Duration::from_secs(1);

fn owner() -> StreamOwner {
    StreamOwner {
        principal: Arc::from("default"),
        session: SessionId::generate(),
    }
}

fn progress(n: usize) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{n}}}}}"#)
        .into_bytes()
}

/// A Request stream of `owner` on `store`, answering request `id`.
async fn request_stream(
    store: &impl EventStore,
    owner: &StreamOwner,
    id: impl Into<RequestId>,
) -> StreamId {
    store
        .create_stream(owner, StreamKind::Request, RETRY, &[id.into()])
        .await
        .unwrap()
}

/// Two nodes on one Redis and prefix, with their own node ids.
async fn two_nodes() -> (Arc<redis::RedisEventStore>, Arc<redis::RedisEventStore>) {
    let prefix = fresh_prefix();
    let (a, _) = redis::open({
        let mut config = config(&prefix);
        config.node_id = "node-a".into();
        config
    })
    .await
    .expect("open node a");
    let (b, _) = redis::open({
        let mut config = config(&prefix);
        config.node_id = "node-b".into();
        config
    })
    .await
    .expect("open node b");
    (Arc::new(a), Arc::new(b))
}

#[test]
fn defaults_are_the_memory_stores() {
    let config = RedisStoreConfig::new("redis://127.0.0.1:6379");
    assert_eq!(config.limits, tether::store::StoreLimits::default());
    assert_eq!(config.key_prefix, RedisStoreConfig::DEFAULT_KEY_PREFIX);
    assert_eq!(config.node_id, RedisStoreConfig::DEFAULT_NODE_ID);
    assert_eq!(config.node_lease, RedisStoreConfig::DEFAULT_NODE_LEASE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_errors_are_typed() {
    let error = redis::open(RedisStoreConfig::new("http://nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RedisOpenError::InvalidUrl { .. }),
        "{error:?}"
    );
    // A port nobody listens on: refused at once, within the timeout either way.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = redis::open({
        let mut config = RedisStoreConfig::new(format!("redis://127.0.0.1:{port}"));
        config.command_timeout = Duration::from_secs(2);
        config
    })
    .await
    .unwrap_err();
    assert!(matches!(error, RedisOpenError::Connect { .. }), "{error:?}");
    let error = redis::open({
        let mut config = config(&fresh_prefix());
        config.node_id = "two words".into();
        config
    })
    .await
    .unwrap_err();
    assert!(
        matches!(error, RedisOpenError::InvalidNodeId(_)),
        "{error:?}"
    );
}

/// Asserts that a waiter on `node` for events of `stream` after `after` waits while nothing
/// is new, and wakes once `change` (another node's write) has run, well under the waiters'
/// periodic re-check: through the pub/sub wake-up.
async fn waiter_wakes_on(
    node: &Arc<redis::RedisEventStore>,
    stream: StreamId,
    after: u64,
    change: impl Future<Output = ()>,
) {
    let waiter = tokio::spawn({
        let node = Arc::clone(node);
        async move { node.wait_for_more(stream, after).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while nothing is new"
    );
    change.await;
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("the waiter woke on the other node's change")
        .unwrap()
        .unwrap();
}

/// Node B reads what node A appended, and a waiter on node B wakes on node A's append and
/// completion (through the pub/sub subscriber, since B itself wrote nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_streams_and_wake_each_other() {
    let (a, b) = two_nodes().await;
    let owner = owner();
    let stream = a
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    a.append(stream, &progress(1)).await.unwrap();
    a.flush(stream).await.unwrap();
    let batch = b.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].message(), &progress(1)[..]);

    waiter_wakes_on(&b, stream, 1, async {
        a.append(stream, &progress(2)).await.unwrap();
    })
    .await;
    waiter_wakes_on(&b, stream, 2, async {
        a.complete(stream).await.unwrap();
    })
    .await;
    let batch = b.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 2);
    assert!(batch.complete);
    // Node B's writes are refused like node A's would be.
    assert_eq!(
        b.append(stream, &progress(9)).await,
        Err(StoreError::Completed)
    );
}

/// A reader on the node that writes a stream is served from that node's committed tail, and
/// still sees what another node does to the stream: an event it appended (which the tail
/// never held) and its completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writing_nodes_reader_sees_another_nodes_append_and_completion() {
    let (a, b) = two_nodes().await;
    let owner = owner();
    let stream = a
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .unwrap();
    a.append(stream, &progress(1)).await.unwrap();
    a.flush(stream).await.unwrap();
    let batch = a.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].message(), &progress(1)[..]);
    assert!(
        a.read_after(&owner, stream, 1, 10)
            .await
            .unwrap()
            .events
            .is_empty()
    );

    waiter_wakes_on(&a, stream, 1, async {
        b.append(stream, &progress(2)).await.unwrap();
    })
    .await;
    let batch = a.read_after(&owner, stream, 1, 10).await.unwrap();
    let seqs: Vec<u64> = batch.events.iter().map(|event| event.id.seq).collect();
    assert_eq!(seqs, [2], "B's event, which A's tail never held");
    assert_eq!(batch.events[0].message(), &progress(2)[..]);
    assert!(!batch.complete);

    waiter_wakes_on(&a, stream, 2, async {
        b.complete(stream).await.unwrap();
    })
    .await;
    let batch = a.read_after(&owner, stream, 2, 10).await.unwrap();
    assert!(batch.events.is_empty());
    assert!(batch.complete, "A's reader learns the stream ended");
    let batch = a.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 2);
    assert!(batch.complete);
}

/// Every node on one Redis and prefix seals with the same key, whichever asks first (so a
/// `requestState` sealed by one node opens on any other); another prefix has its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_one_prefix_share_a_sealing_key() {
    let prefix = fresh_prefix();
    let open = |node: &'static str| {
        let mut config = config(&prefix);
        config.node_id = node.into();
        redis::open(config)
    };
    let ((_, a), (_, b)) = (open("node-a").await.unwrap(), open("node-b").await.unwrap());
    let (key_a, key_b) = tokio::join!(a.sealing_key(), b.sealing_key());
    let key = key_a.unwrap();
    assert_eq!(key_b.unwrap(), key);
    let (_, other) = redis::open(config(&fresh_prefix())).await.unwrap();
    assert_ne!(other.sealing_key().await.unwrap(), key);
}

/// A task made on one node is read, answered and cancelled from another, and the first node's
/// waiter sees the other node's change: tasks/get and tasks/update work on whichever node a
/// load balancer picks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_one_node_is_served_by_another() {
    use tether::store::{TaskChange, TaskRecord, TaskStatus, TaskStore as _};
    let prefix = fresh_prefix();
    let tasks = |node: &'static str| {
        let prefix = prefix.clone();
        async move {
            let mut config = config(&prefix);
            config.node_id = node.into();
            let (_, sessions) = redis::open(config).await.unwrap();
            sessions.task_store().await.unwrap()
        }
    };
    let (a, b) = (tasks("node-a").await, tasks("node-b").await);
    let task = TaskRecord::new(Arc::from("alice"), Some(Duration::from_secs(60)), None);
    a.create(&task).await.unwrap();
    assert_eq!(b.get(&task.id, "alice").await.unwrap(), Some(task.clone()));
    let mut question = serde_json::Map::new();
    question.insert(
        "q".into(),
        serde_json::json!({"method": "elicitation/create"}),
    );
    let asked = a
        .change(&task.id, TaskChange::ask(question.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(asked.status, TaskStatus::InputRequired);
    let waiter = tokio::spawn({
        let a = Arc::new(a);
        let id = task.id;
        async move { a.wait_for_change(&id, asked.version).await }
    });
    question.insert("q".into(), serde_json::json!({"action": "accept"}));
    assert!(b.answer(&task.id, "alice", question).await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("node A saw node B's answer")
        .unwrap()
        .unwrap();
    let answered = b.get(&task.id, "alice").await.unwrap().unwrap();
    assert_eq!(answered.status, TaskStatus::Working);
    assert_eq!(
        answered.input_responses["q"],
        serde_json::json!({"action": "accept"})
    );
    assert!(b.cancel(&task.id, "alice").await.unwrap());
    assert!(
        !b.cancel(&task.id, "bob").await.unwrap(),
        "another principal's is unknown"
    );
}

/// A node that dies with a task running: once its lease has lapsed, another node's
/// `fail_orphans` ends the task `failed` / `server_restarted`, exactly once; a task it had
/// finished, and a task of a node still alive, are left as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_running_tasks_fail_once_its_lease_lapses() {
    use tether::store::{TaskChange, TaskRecord, TaskStatus, TaskStore as _};
    let prefix = fresh_prefix();
    let open = |node: &'static str| {
        let prefix = prefix.clone();
        async move {
            let mut config = config(&prefix);
            config.node_id = node.into();
            config.node_lease = Duration::from_millis(300);
            let (events, sessions) = redis::open(config).await.unwrap();
            (events, sessions.task_store().await.unwrap())
        }
    };
    let (a_events, a) = open("node-a").await;
    let (_b_events, b) = open("node-b").await;
    let (_c_events, c) = open("node-c").await;
    let new = || TaskRecord::new(Arc::from("alice"), Some(Duration::from_secs(60)), None);
    let (running, finished, alive) = (new(), new(), new());
    a.create(&running).await.unwrap();
    a.create(&finished).await.unwrap();
    a.change(
        &finished.id,
        TaskChange::completed(serde_json::json!({"ok": true})),
    )
    .await
    .unwrap();
    c.create(&alive).await.unwrap();
    assert!(
        b.fail_orphans().await.unwrap().is_empty(),
        "a live node's tasks are not orphans"
    );
    drop((a, a_events));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let failed = loop {
        let failed = b.fail_orphans().await.unwrap();
        if !failed.is_empty() || tokio::time::Instant::now() > deadline {
            break failed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        failed,
        vec![running.id],
        "only the dead node's running task"
    );
    let record = c.get(&running.id, "alice").await.unwrap().unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    assert_eq!(record.error.unwrap()["data"]["reason"], "server_restarted");
    assert_eq!(
        c.get(&finished.id, "alice").await.unwrap().unwrap().status,
        TaskStatus::Completed
    );
    assert_eq!(
        b.get(&alive.id, "alice").await.unwrap().unwrap().status,
        TaskStatus::Working
    );
    assert!(
        c.fail_orphans().await.unwrap().is_empty(),
        "a claimed orphan is not failed twice"
    );
}

/// Appends from two nodes to one stream, interleaved: seqs stay 1..=n with no gap or
/// duplicate, and every append is stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_from_two_nodes_stay_gap_free() {
    const TASKS_PER_NODE: usize = 4;
    const APPENDS: usize = 100;
    let (a, b) = two_nodes().await;
    let owner = owner();
    let stream = a
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for (node, store) in [a.clone(), b.clone()].into_iter().enumerate() {
        for task in 0..TASKS_PER_NODE {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for n in 0..APPENDS {
                    let json = format!(r#"{{"node":{node},"task":{task},"n":{n}}}"#);
                    seqs.push(store.append(stream, json.as_bytes()).await.unwrap().seq);
                }
                seqs
            }));
        }
    }
    for (n, task) in tasks.into_iter().enumerate() {
        let seqs = task.await.unwrap();
        // Node A created the stream, so its appends are pipelined and their ids predicted;
        // once node B's appends conflict, A's are stored at the next free seqs instead.
        if n >= TASKS_PER_NODE {
            assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]));
        }
    }
    a.flush(stream).await.unwrap();
    let total = (2 * TASKS_PER_NODE * APPENDS) as u64;
    let batch = b.read_after(&owner, stream, 0, usize::MAX).await.unwrap();
    let seqs: Vec<u64> = batch.events.iter().map(|event| event.id.seq).collect();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "gap-free");
    let mut bodies: Vec<&[u8]> = batch.events.iter().map(|e| e.message()).collect();
    bodies.sort_unstable();
    bodies.dedup();
    assert_eq!(bodies.len() as u64, total, "every append stored once");
    for node in 0..2 {
        for task in 0..TASKS_PER_NODE {
            let prefix = format!(r#"{{"node":{node},"task":{task},"#);
            let mine: Vec<&[u8]> = batch
                .events
                .iter()
                .map(|e| e.message())
                .filter(|m| m.starts_with(prefix.as_bytes()))
                .collect();
            let expected: Vec<String> = (0..APPENDS)
                .map(|n| format!(r#"{{"node":{node},"task":{task},"n":{n}}}"#))
                .collect();
            let expected: Vec<&[u8]> = expected.iter().map(|m| m.as_bytes()).collect();
            assert_eq!(mine, expected, "node {node} task {task}: in its order");
        }
    }
}

/// The orphans of one node are not another node's: node B opening does not report the
/// Request streams node A still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_reported_to_their_own_node_only() {
    let prefix = fresh_prefix();
    let node = |id: &str| {
        let mut config = config(&prefix);
        config.node_id = id.into();
        config
    };
    let owner = owner();
    let (a, _) = redis::open(node("node-a")).await.unwrap();
    let stream = a
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    let (b, _) = redis::open(node("node-b")).await.unwrap();
    assert_eq!(b.orphaned_streams().await.unwrap(), []);
    drop(a);
    let (a, _) = redis::open(node("node-a")).await.unwrap();
    let orphans = a.orphaned_streams().await.unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].stream, stream);
}

/// Retention runs on Redis's clock: a completed stream reads as `Expired` once it is past,
/// and the background sweep removes it (usage drops) with no command touching its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_expires_completed_streams_and_the_sweep_removes_them() {
    let (events, _) = redis::open({
        let mut config = config(&fresh_prefix());
        config.limits.retention = Duration::from_millis(200);
        config
    })
    .await
    .unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    events.append(stream, b"{}").await.unwrap();
    events.complete(stream).await.unwrap();
    assert!(events.read_after(&owner, stream, 0, 10).await.is_ok());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired)
    );
    let stranger = StreamOwner {
        principal: Arc::from("mallory"),
        ..owner.clone()
    };
    assert_eq!(
        events.read_after(&stranger, stream, 0, 10).await,
        Err(StoreError::UnknownStream)
    );
    assert_eq!(
        events.append(stream, b"{}").await,
        Err(StoreError::Completed)
    );
    let usage = events.usage(&owner.session).await.unwrap();
    assert_eq!(usage.streams, 0);
}

/// While Redis is down every command fails with `Unavailable` within the command timeout
/// (none hangs, none panics); once it is back on the same port the same store works again,
/// data included (append-only file), and waiters wake through the resubscribed channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_survives_a_redis_restart() {
    let mut server = RedisOptions::new()
        .persistence(true)
        .start()
        .await
        .expect("start redis-server");
    let (events, sessions) = redis::open({
        let mut config = RedisStoreConfig::new(server.url());
        config.command_timeout = Duration::from_secs(1);
        config.key_prefix = fresh_prefix();
        config
    })
    .await
    .unwrap();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .unwrap();
    events.append(stream, &progress(1)).await.unwrap();
    events.flush(stream).await.unwrap();

    server.kill().await.unwrap();
    let started = tokio::time::Instant::now();
    let down = [
        // Pipelined: the append is queued; its commit's failure reaches the flush.
        async {
            events.append(stream, &progress(2)).await?;
            events.flush(stream).await
        }
        .await,
        events.read_after(&owner, stream, 0, 10).await.map(drop),
        events.wait_for_more(stream, 1).await,
        events.usage(&owner.session).await.map(drop),
        sessions.count().await.map(drop),
    ];
    for result in down {
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "{result:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed within the timeouts, took {:?}",
        started.elapsed()
    );

    server.restart().await.unwrap();
    // The connection manager reconnects on use; a command or two may still see the old
    // connection fail.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let id = loop {
        match events.append(stream, &progress(2)).await {
            Ok(id) => break id,
            Err(StoreError::Unavailable(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("append after restart: {error:?}"),
        }
    };
    assert_eq!(id.seq, 2, "the stream survived with its seqs");
    let batch = events.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 2);

    // Wake-ups work again: another node's append wakes this store's waiter.
    let (other, _) = redis::open({
        let mut config = events.config().clone();
        config.node_id = "other".into();
        config
    })
    .await
    .unwrap();
    let events = Arc::new(events);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut after = 2;
    loop {
        let waiter = tokio::spawn({
            let events = Arc::clone(&events);
            async move { events.wait_for_more(stream, after).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = other.append(stream, &progress(3)).await.unwrap().seq;
        match tokio::time::timeout(Duration::from_secs(1), waiter).await {
            Ok(result) => {
                result.unwrap().unwrap();
                break;
            }
            // The subscriber may still be resubscribing (its backoff runs up to 2 s).
            Err(_) if tokio::time::Instant::now() < deadline => {}
            Err(_) => panic!("no wake-up through the resubscribed channel"),
        }
    }
}

/// The lease of the nodes in the lease checks: short, so the checks are quick, and many
/// round trips long, so a live node never misses it on a loaded machine.
const LEASE: Duration = Duration::from_secs(1);

/// Node `id` on `prefix`, holding a lease of [`LEASE`].
fn leased(prefix: &str, id: &str) -> RedisStoreConfig {
    {
        let mut config = config(prefix);
        config.node_id = id.into();
        config.node_lease = LEASE;
        config
    }
}

/// Calls `orphaned_streams` on `node` until it reports something, for at most `limit`.
async fn first_orphans(node: &redis::RedisEventStore, limit: Duration) -> Vec<OrphanedStream> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let orphans = node.orphaned_streams().await.unwrap();
        if !orphans.is_empty() {
            return orphans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing reported within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A node that dies with a Request stream open: another node is not told while the dead
/// node's lease runs, then is told once, with the stream's owner and request ids, and the
/// stream is its to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_open_streams_are_reported_to_another_node_once_its_lease_lapses() {
    let prefix = fresh_prefix();
    let (a, _) = redis::open(leased(&prefix, "node-a")).await.unwrap();
    let (b, _) = redis::open(leased(&prefix, "node-b")).await.unwrap();
    let owner = owner();
    let requests = [RequestId::from(1_i64), RequestId::from("two")];
    let stream = a
        .create_stream(&owner, StreamKind::Request, RETRY, &requests)
        .await
        .unwrap();
    a.append(stream, &progress(1)).await.unwrap();
    let finished = request_stream(&a, &owner, 3_i64).await;
    a.complete(finished).await.unwrap();

    drop(a);
    let died = tokio::time::Instant::now();
    assert_eq!(
        b.orphaned_streams().await.unwrap(),
        [],
        "A's lease still runs"
    );
    let orphans = first_orphans(&b, LEASE * 5).await;
    // A renewed its lease within the last third of it before it was dropped.
    assert!(
        died.elapsed() >= LEASE / 2,
        "reported after {:?}, before the lease ran out",
        died.elapsed()
    );
    assert_eq!(
        orphans,
        [OrphanedStream {
            owner: owner.clone(),
            stream,
            requests: requests.to_vec(),
        }]
    );
    assert_eq!(b.orphaned_streams().await.unwrap(), [], "reported once");

    // B answers it as the server would; then nothing of it is left to report, on B or on a
    // node that opens later.
    b.append(
        stream,
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}"#,
    )
    .await
    .unwrap();
    b.complete(stream).await.unwrap();
    let batch = b.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 2);
    assert!(batch.complete);
    let (c, _) = redis::open(leased(&prefix, "node-c")).await.unwrap();
    assert_eq!(c.orphaned_streams().await.unwrap(), []);
    assert_eq!(b.orphaned_streams().await.unwrap(), []);
    drop(b);
    let (b, _) = redis::open(leased(&prefix, "node-b")).await.unwrap();
    assert_eq!(
        b.orphaned_streams().await.unwrap(),
        [],
        "completing the claimed stream cleared it from B's set"
    );
}

/// Two live nodes polling at once after a node died: each of its open streams is reported to
/// exactly one of them, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pollers_each_orphan_is_reported_exactly_once() {
    const STREAMS: usize = 20;
    let prefix = fresh_prefix();
    let (a, _) = redis::open(leased(&prefix, "node-a")).await.unwrap();
    let mut expected = HashSet::new();
    for n in 0..STREAMS {
        // Several sessions, as a real node has.
        let owner = owner();
        let stream = request_stream(&a, &owner, n as i64).await;
        a.append(stream, &progress(n)).await.unwrap();
        expected.insert(stream);
    }
    let (b, _) = redis::open(leased(&prefix, "node-b")).await.unwrap();
    let (c, _) = redis::open(leased(&prefix, "node-c")).await.unwrap();
    drop(a);

    let found = Arc::new(AtomicUsize::new(0));
    let deadline = tokio::time::Instant::now() + LEASE * 5;
    let pollers = [b, c].map(|node| {
        let found = Arc::clone(&found);
        tokio::spawn(async move {
            let mut mine = Vec::new();
            // Polls until all were found by someone, then twice more: a duplicate would show.
            let mut extra = 2;
            while extra > 0 && tokio::time::Instant::now() < deadline {
                let orphans = node.orphaned_streams().await.unwrap();
                found.fetch_add(orphans.len(), Ordering::SeqCst);
                mine.extend(orphans.into_iter().map(|orphan| orphan.stream));
                if found.load(Ordering::SeqCst) >= STREAMS {
                    extra -= 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            mine
        })
    });
    let mut all: Vec<StreamId> = Vec::new();
    for poller in pollers {
        all.extend(poller.await.unwrap());
    }
    assert_eq!(all.len(), STREAMS, "each orphan reported once in total");
    assert_eq!(all.into_iter().collect::<HashSet<_>>(), expected);
}

/// A live node's open streams are never another node's orphans: its heartbeat keeps its
/// lease through several lease periods, and it still completes them itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_nodes_open_streams_are_never_reported() {
    let prefix = fresh_prefix();
    let (a, _) = redis::open(leased(&prefix, "node-a")).await.unwrap();
    let (b, _) = redis::open(leased(&prefix, "node-b")).await.unwrap();
    let owner = owner();
    let stream = request_stream(&a, &owner, 1_i64).await;
    let until = tokio::time::Instant::now() + LEASE * 3 + LEASE / 2;
    while tokio::time::Instant::now() < until {
        assert_eq!(b.orphaned_streams().await.unwrap(), [], "A is alive");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.append(stream, &progress(1)).await.unwrap();
    a.complete(stream).await.unwrap();
    assert_eq!(b.orphaned_streams().await.unwrap(), []);
    assert_eq!(a.orphaned_streams().await.unwrap(), []);
}

/// A node that claimed an orphan and died before answering it does not lose it: after the
/// claimer's lease, a third node is told of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_claimed_by_a_node_that_dies_passes_to_the_next() {
    let prefix = fresh_prefix();
    let (a, _) = redis::open(leased(&prefix, "node-a")).await.unwrap();
    let (b, _) = redis::open(leased(&prefix, "node-b")).await.unwrap();
    let owner = owner();
    let stream = request_stream(&a, &owner, 1_i64).await;
    drop(a);
    let claimed = first_orphans(&b, LEASE * 5).await;
    assert_eq!(claimed.len(), 1);
    let (c, _) = redis::open(leased(&prefix, "node-c")).await.unwrap();
    drop(b);
    let orphans = first_orphans(&c, LEASE * 5).await;
    assert_eq!(orphans, claimed, "the same stream, now from B");
    assert_eq!(orphans[0].stream, stream);
    assert_eq!(c.orphaned_streams().await.unwrap(), []);
}

/// Events stored before chunks (one stream entry per frame, field `f`, and a `<stream> <seq>
/// <bytes>` append log entry each) are read in order beside chunked ones, and evicted with
/// exact usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_written_one_per_event_are_read_and_evicted_beside_chunks() {
    const CAP: usize = 6;
    let prefix = fresh_prefix();
    let (store, _sessions) = redis::open({
        let mut config = config(&prefix);
        config.limits.max_events_per_session = CAP;
        config
    })
    .await
    .unwrap();
    let owner = owner();
    let stream = request_stream(&store, &owner, 1_i64).await;

    // Seqs 1..=3 as the earlier layout wrote them.
    let client = ::redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (s, sess) = (stream.as_str(), owner.session.as_str());
    let mut bytes = 0;
    for seq in 1..=3 {
        let frame = format!("event: message\nid: {s}:{seq}\ndata: {{\"old\":{seq}}}\n\n");
        bytes += frame.len();
        let _: () = ::redis::pipe()
            .cmd("XADD")
            .arg(format!("{prefix}e:{s}"))
            .arg(format!("1-{seq}"))
            .arg("f")
            .arg(&frame)
            .cmd("RPUSH")
            .arg(format!("{prefix}a:{sess}"))
            .arg(format!("{s} {seq} {}", frame.len()))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: () = ::redis::pipe()
        .cmd("HSET")
        .arg(format!("{prefix}s:{s}"))
        .arg("next")
        .arg(4)
        .cmd("HINCRBY")
        .arg(format!("{prefix}s:{s}"))
        .arg("ev")
        .arg(3)
        .cmd("HINCRBY")
        .arg(format!("{prefix}s:{s}"))
        .arg("by")
        .arg(bytes)
        .cmd("HINCRBY")
        .arg(format!("{prefix}u:{sess}"))
        .arg("events")
        .arg(3)
        .cmd("HINCRBY")
        .arg(format!("{prefix}u:{sess}"))
        .arg("bytes")
        .arg(bytes)
        .query_async(&mut conn)
        .await
        .unwrap();
    // A store opened now starts from what Redis holds.
    drop(store);
    let (store, _sessions) = redis::open({
        let mut config = config(&prefix);
        config.limits.max_events_per_session = CAP;
        config
    })
    .await
    .unwrap();

    for n in 4..=5 {
        store.append(stream, &progress(n)).await.unwrap();
    }
    store.flush(stream).await.unwrap();
    let all = store.read_from_start(&owner, stream, 100).await.unwrap();
    let seqs: Vec<u64> = all.events.iter().map(|e| e.id.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
    assert!(all.events[2].frame.ends_with(b"{\"old\":2}\n\n"));
    // Read from inside the old entries, a few at a time.
    let batch = store.read_after(&owner, stream, 1, 2).await.unwrap();
    let seqs: Vec<u64> = batch.events.iter().map(|e| e.id.seq).collect();
    assert_eq!(seqs, vec![2, 3]);

    // Two more events over the cap evict seq 0 (a chunk) and seq 1 (an old entry).
    for n in 6..=7 {
        store.append(stream, &progress(n)).await.unwrap();
    }
    store.flush(stream).await.unwrap();
    assert_eq!(
        store.read_after(&owner, stream, 0, 100).await,
        Err(StoreError::Expired)
    );
    let kept = store.read_after(&owner, stream, 1, 100).await.unwrap();
    let seqs: Vec<u64> = kept.events.iter().map(|e| e.id.seq).collect();
    assert_eq!(seqs, vec![2, 3, 4, 5, 6, 7]);
    let usage = store.usage(&owner.session).await.unwrap();
    assert_eq!(usage.events, CAP);
    assert_eq!(
        usage.bytes,
        kept.events.iter().map(|e| e.frame.len()).sum::<usize>()
    );
}

/// The event cap evicts single events out of a chunk of many, leaving exactly the newest
/// events and their bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_part_of_a_chunk_keeps_exact_usage() {
    const CAP: usize = 10;
    let (store, _sessions) = redis::open({
        let mut config = config(&fresh_prefix());
        config.limits.max_events_per_session = CAP;
        config
    })
    .await
    .unwrap();
    let owner = owner();
    let stream = request_stream(&store, &owner, 1_i64).await;
    for n in 1..=25 {
        store.append(stream, &progress(n)).await.unwrap();
    }
    store.flush(stream).await.unwrap();
    assert_eq!(
        store.read_after(&owner, stream, 14, 100).await,
        Err(StoreError::Expired)
    );
    for after in 15..=25 {
        let batch = store.read_after(&owner, stream, after, 3).await.unwrap();
        let seqs: Vec<u64> = batch.events.iter().map(|e| e.id.seq).collect();
        let want: Vec<u64> = (after + 1..=25).take(3).collect();
        assert_eq!(seqs, want, "after {after}");
    }
    let kept = store.read_after(&owner, stream, 15, 100).await.unwrap();
    let usage = store.usage(&owner.session).await.unwrap();
    assert_eq!(usage.events, CAP);
    assert_eq!(
        usage.bytes,
        kept.events.iter().map(|e| e.frame.len()).sum::<usize>()
    );
}
