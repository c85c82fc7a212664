//! tether's client in the 2026-07-28 era against the tether server (first steps of the
//! modern client): `ProtocolChoice::Version(2026-07-28)` speaks stateless requests after
//! `server/discover`, a `count` call's progress arrives once each, in order, then the result;
//! `Auto` (the default) picks 2026-07-28 with tasks against a server offering task streams and
//! keeps the legacy era with tasks off; a call cut
//! before its answer (not run as a task) fails with `Error::MayHaveRun` instead of being sent
//! again; run as a task, it survives cuts and resumes from its token in a new client; a
//! `notifications/cancelled` drops the request's connection, which the server's handler sees
//! as cancellation; `server_messages` is a `subscriptions/listen` stream that is opened again
//! after a cut; a `TaskHandle` (`call_tool_as_task`, `resume_task`) reads a task's events
//! once each through cuts, waits for its outcome, cancels it, and refusals are typed.

use std::time::Duration;

use serde_json::json;
use tether::client::{Client, ClientConfig, ClientEvent, Error, ProtocolChoice};
use tether::proto::jsonrpc::Message;
use tether::proto::version::ProtocolVersion;
use tether::server::ServerConfig;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

use crate::support::client::{count_params, drain, fast_config, start_demo_server};
use crate::support::server::TestServer;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_client_pinned_to_2026_07_28_calls_count_statelessly() {
    let server = start_demo_server().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut config = fast_config(Duration::from_millis(50));
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        let client = Client::connect(&server.url, config).await.unwrap();
        assert!(client.is_modern());
        assert_eq!(client.session_id(), None, "no session in this era");
        assert!(client.server_info()["supportedVersions"].is_array());
        let stream = client
            .request("tools/call", count_params(5, 10))
            .await
            .unwrap();
        let (progress, result) = drain(stream).await;
        assert_eq!(progress, [1, 2, 3, 4, 5]);
        assert_eq!(result.unwrap(), "counted 5");
    })
    .await
    .unwrap();
}

/// `auto` (the default) with a dual-era server that offers task streams speaks 2026-07-28,
/// where a call runs as a task; with tasks off it keeps the legacy era, where a session
/// resumes a cut stream.
#[tokio::test]
async fn auto_picks_tasks_with_a_server_offering_task_streams_else_the_legacy_era() {
    let server = start_demo_server().await;
    let mut config = fast_config(Duration::from_millis(50));
    config.protocol = ClientConfig::default().protocol;
    assert_eq!(config.protocol, ProtocolChoice::Auto, "the default");
    let client = Client::connect(&server.url, config.clone()).await.unwrap();
    assert!(client.is_modern());
    assert_eq!(client.session_id(), None);
    let mut call = client
        .call_tool("count", json!({"n": 3, "interval_ms": 1}))
        .await
        .unwrap();
    let first = call.next().await.unwrap().unwrap();
    assert!(call.task_id().is_some(), "ran as a task: {first:?}");
    assert!(!call.response().await.unwrap().is_error());

    config.tasks = false;
    let client = Client::connect(&server.url, config).await.unwrap();
    assert!(!client.is_modern());
    assert!(client.session_id().is_some(), "a 2025 session");
}

/// `auto` takes the 2026-07-28 era for tasks only where they are offered and wanted: a
/// handler that runs no call as a task offers no tasks extension (`Handler::offers_tasks`),
/// so `auto` keeps its 2025 session; so does a client with `prefer_tasks` off (the bridge's)
/// against the demo, which offers task streams.
#[tokio::test]
async fn auto_keeps_the_legacy_era_where_tasks_are_not_offered_or_not_preferred() {
    let plain = TestServer::start(ServerConfig::default()).await;
    let mut config = fast_config(Duration::from_millis(50));
    config.protocol = ProtocolChoice::Auto;
    let client = Client::connect(&plain.url, config.clone()).await.unwrap();
    assert!(!client.is_modern(), "no tasks offered: the 2025 session");
    assert!(client.session_id().is_some());
    let mut pinned = config.clone();
    pinned.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
    let modern = Client::connect(&plain.url, pinned).await.unwrap();
    assert!(
        modern.server_info()["capabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_none(),
        "{}",
        modern.server_info()
    );

    let demo = start_demo_server().await;
    config.prefer_tasks = false;
    let client = Client::connect(&demo.url, config).await.unwrap();
    assert!(!client.is_modern(), "tasks not preferred: the 2025 session");
}

#[tokio::test]
async fn a_cut_modern_tool_call_fails_as_may_have_run() {
    let server = start_demo_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(600));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut config = fast_config(Duration::from_millis(50));
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        // Not as a task: a plain call, which nothing can resume.
        config.tasks = false;
        let client = Client::connect(&proxy.url_for("/mcp"), config)
            .await
            .unwrap();
        let stream = client
            .request("tools/call", count_params(200, 5))
            .await
            .unwrap();
        let (progress, result) = drain(stream).await;
        assert!(progress.len() < 200, "the cut came first");
        assert!(
            matches!(result, Err(Error::MayHaveRun { ref method }) if method == "tools/call"),
            "{result:?}"
        );
    })
    .await
    .unwrap();
}

fn modern_config() -> ClientConfig {
    let mut config = fast_config(Duration::from_millis(50));
    config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
    config
}

#[tokio::test]
async fn cancelling_a_modern_request_drops_it_and_the_handler_sees_it() {
    let server = TestServer::start(ServerConfig::default()).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&server.url, modern_config()).await.unwrap();
        let cancelled = server.observed.cancelled_notify.notified();
        tokio::pin!(cancelled);
        cancelled.as_mut().enable();
        let params = json!({"name": "wait", "arguments": {}, "_meta": {"progressToken": "w"}});
        let mut stream = client.request("tools/call", Some(params)).await.unwrap();
        let first = stream.next().await.unwrap().unwrap();
        assert!(
            matches!(&first, Message::Notification(n) if n.method == "notifications/progress"),
            "the handler runs: {first:?}"
        );
        let id = stream.request_id().cloned().unwrap();
        client
            .notify("notifications/cancelled", Some(json!({"requestId": id})))
            .await
            .unwrap();
        cancelled.await;
        assert!(matches!(stream.next().await, Some(Err(Error::Cancelled))));
        assert!(stream.next().await.is_none());
        // Cancelling what no longer runs is nothing.
        client
            .notify("notifications/cancelled", Some(json!({"requestId": id})))
            .await
            .unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn server_messages_listen_and_listen_again_after_a_cut() {
    let server = TestServer::start(ServerConfig::default()).await;
    let proxy = FaultProxy::start(server.addr, FaultPlan::pass_through())
        .await
        .unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&proxy.url_for("/mcp"), modern_config())
            .await
            .unwrap();
        let mut events = client.events();
        let mut listen = client.server_messages().unwrap();
        assert!(client.server_messages().is_err(), "one standalone stream");
        let acknowledged = |message: Message| match message {
            Message::Notification(n) if n.method == "notifications/subscriptions/acknowledged" => {
                n.params.unwrap()["notifications"].clone()
            }
            other => panic!("expected the acknowledgment, got {other:?}"),
        };
        let first = acknowledged(listen.next().await.unwrap().unwrap());
        assert_eq!(
            first,
            json!({"toolsListChanged": true}),
            "only what the server offers is acknowledged"
        );
        proxy.cut_open_connections();
        // Opened again: a Reconnecting event, then a new acknowledgment on the same stream.
        loop {
            if let ClientEvent::Reconnecting {
                request_id: None, ..
            } = events.recv().await.unwrap()
            {
                break;
            }
        }
        let again = acknowledged(listen.next().await.unwrap().unwrap());
        assert_eq!(again, first);
        let announce = json!({"name": "announce", "arguments": {}});
        let answer = client.request("tools/call", Some(announce)).await.unwrap();
        answer.response().await.unwrap();
        let changed = listen.next().await.unwrap().unwrap();
        assert!(
            matches!(&changed, Message::Notification(n)
                if n.method == "notifications/tools/list_changed"),
            "{changed:?}"
        );
        assert!(proxy.counters().cuts >= 1, "{}", proxy.report());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn listen_is_refused_in_the_legacy_era() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = Client::connect(&server.url, fast_config(Duration::from_millis(50)))
        .await
        .unwrap();
    assert!(!client.is_modern());
    assert!(matches!(
        client.listen(json!({"toolsListChanged": true})),
        Err(Error::Config(_))
    ));
}

/// Against a server that offers tasks and task streams, a 2026-07-28 `count` runs as a task:
/// its stream names the task at once, its events arrive through `tasks/stream` once each
/// across cuts, then the result; and a new client resumed from a token taken halfway gets the
/// rest, without sending `tools/call` again.
#[tokio::test]
async fn a_modern_call_runs_as_a_task_through_cuts_and_resumes_from_its_token() {
    use std::sync::{Arc, Mutex};
    use tether::client::ResumptionToken;
    let server = start_demo_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(2500).with_jitter(1000));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let tokens: Arc<Mutex<Vec<ResumptionToken>>> = Arc::default();
        let mut config = modern_config();
        let seen = Arc::clone(&tokens);
        config.on_resumption_token = Some(Arc::new(move |token: &ResumptionToken| {
            seen.lock().unwrap().push(token.clone());
        }));
        let client = Client::connect(&proxy.url_for("/mcp"), config)
            .await
            .unwrap();
        let stream = client
            .request("tools/call", count_params(150, 2))
            .await
            .unwrap();
        let (progress, result) = drain(stream).await;
        assert_eq!(
            progress,
            (1..=150).collect::<Vec<_>>(),
            "{}",
            proxy.report()
        );
        assert_eq!(result.unwrap(), "counted 150");
        assert!(proxy.counters().cuts >= 1, "{}", proxy.report());
        let tokens = tokens.lock().unwrap().clone();
        let first = tokens.first().unwrap();
        assert!(
            first.task_id.is_some() && first.last_event_id.is_empty(),
            "{first:?}"
        );
        // Halfway: seq 74 is progress 75.
        let halfway = tokens.iter().find(|t| t.last_event_id == "74").unwrap();
        let (_resumed, stream) = Client::resume(&server.url, halfway, modern_config())
            .await
            .unwrap();
        let (rest, result) = drain(stream).await;
        assert_eq!(rest, (76..=150).collect::<Vec<_>>());
        assert_eq!(result.unwrap(), "counted 150");
    })
    .await
    .unwrap();
}

/// `call_tool_as_task` hands the task to the application: its events arrive through
/// `events()` once each, in seq order, across cuts (each carrying one progress notification);
/// `wait()` gives the outcome and `status()` says it completed. A handle rebuilt in a new
/// client from a token committed halfway reads only the events after it.
#[tokio::test]
async fn a_task_handle_reads_events_through_cuts_waits_and_resumes_from_a_token() {
    use tether::client::{TaskEvent, TaskState};
    let server = start_demo_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(2500).with_jitter(1000));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&proxy.url_for("/mcp"), modern_config())
            .await
            .unwrap();
        let task = client
            .call_tool_as_task("count", json!({"n": 120, "interval_ms": 2}))
            .await
            .unwrap();
        assert_eq!(task.task_id().len(), 22, "{}", task.task_id());
        let mut events = task.events().unwrap();
        let mut seqs = Vec::new();
        let mut progress = Vec::new();
        let mut halfway = None;
        while let Some(event) = events.next().await {
            let TaskEvent { seq, message, .. } = event.unwrap();
            seqs.push(seq);
            let Message::Notification(n) = message else {
                panic!("a task event carries a notification: {message:?}")
            };
            assert_eq!(n.method, "notifications/progress");
            progress.push(n.params.unwrap()["progress"].as_u64().unwrap());
            if seq == 60 {
                events.ack();
                halfway = events.resumption_token();
                assert_eq!(events.last_committed(), Some(60));
            }
        }
        assert_eq!(seqs, (0..120).collect::<Vec<_>>(), "{}", proxy.report());
        assert_eq!(progress, (1..=120).collect::<Vec<_>>());
        assert!(proxy.counters().cuts >= 1, "{}", proxy.report());
        let outcome = task.wait().await.unwrap();
        let tether::proto::jsonrpc::Response::Result(result) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(result.result["content"][0]["text"], "counted 120");
        assert_eq!(task.status().await.unwrap().state, TaskState::Completed);

        let halfway = halfway.unwrap();
        assert_eq!(halfway.task_id.as_deref(), Some(task.task_id()));
        let resumed = Client::resume_task(&server.url, &halfway, modern_config())
            .await
            .unwrap();
        let mut rest = resumed.events().unwrap();
        let mut seqs = Vec::new();
        while let Some(event) = rest.next().await {
            seqs.push(event.unwrap().seq);
        }
        assert_eq!(seqs, (61..120).collect::<Vec<_>>());
        assert!(!resumed.wait().await.unwrap().is_error());
    })
    .await
    .unwrap();
}

/// A cancelled task ends `cancelled`, its outcome an error saying so; a tool that does not run
/// as a task is `NotATask` with its answer; a legacy-era client has no tasks to offer.
#[tokio::test]
async fn a_task_handle_cancels_and_refusals_are_typed() {
    use tether::client::TaskState;
    let server = start_demo_server().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let client = Client::connect(&server.url, modern_config()).await.unwrap();
        let task = client
            .call_tool_as_task("count", json!({"n": 10_000, "interval_ms": 10}))
            .await
            .unwrap();
        let status = task.status().await.unwrap();
        assert!(!status.state.is_terminal(), "{status:?}");
        task.cancel().await.unwrap();
        let outcome = task.wait().await.unwrap();
        let tether::proto::jsonrpc::Response::Error(error) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(error.error.data.unwrap()["reason"], "cancelled");
        assert_eq!(task.status().await.unwrap().state, TaskState::Cancelled);

        let direct = client
            .call_tool_as_task("echo", json!({"text": "hi"}))
            .await
            .unwrap_err();
        let Error::NotATask { response } = direct else {
            panic!("{direct:?}")
        };
        assert!(!response.is_error(), "{response:?}");

        let legacy = Client::connect(&server.url, fast_config(Duration::from_millis(50)))
            .await
            .unwrap();
        assert!(matches!(
            legacy.call_tool_as_task("count", json!({"n": 1})).await,
            Err(Error::TasksNotOffered { .. })
        ));
    })
    .await
    .unwrap();
}
