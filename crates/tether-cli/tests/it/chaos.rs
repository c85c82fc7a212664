//! The chaos run of the test command: hundreds of concurrent `count` calls against
//! `tether serve` through the fault proxy, half through tether's client and half through the
//! raw reader, with cuts, resets, stalls, slow connections, truncations and refusals drawn
//! from a seed; with SQLite the server is also SIGKILLed and restarted mid-run. Every call
//! must deliver progress 1..n exactly once and in order and then `counted n`, or fail with a
//! typed error after a gap-free prefix. With Redis, two nodes share one `redis-server` and
//! node A is SIGKILLed mid-run (a new node takes its port after A's lease). Bounded: the
//! three runs together take about two minutes. A quarter of the workers call as 2026-07-28
//! tasks read with `tasks/stream`: the same checks, and every task they learned of must end
//! in a terminal status that `tasks/get` shows.
//!
//! The seed is fixed so the suite is repeatable; `CHAOS_SEED=N` runs another one (a failure
//! prints the seed and the proxy's fault log). Long runs: the `tether-chaos` program.

use tether_testkit::chaos::{self, ChaosConfig, Report, Store};
use tether_testkit::proxy::FaultKind;

/// The seed of the suite's runs unless `CHAOS_SEED` says otherwise.
const DEFAULT_SEED: u64 = 0x7E7E_C4A0;

/// Faults of each kind a run must have injected to prove anything.
const MIN_FAULTS_PER_KIND: u64 = 20;

/// The share of calls that must complete. The rest may fail only with typed errors; most
/// are calls whose POST was hit before its first event id (nothing to resume from).
const MIN_COMPLETED: f64 = 0.95;

/// One run at a time: they share two cores with the rest of the suite.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(store: Store) -> Report {
    let seed = chaos::seed_from_env(DEFAULT_SEED).expect("CHAOS_SEED");
    run_config(ChaosConfig::new(store, seed)).await
}

async fn run_config(config: ChaosConfig) -> Report {
    let _turn = ONE_AT_A_TIME.lock().await;
    let report = chaos::run(config).await.expect("the chaos run starts");
    println!("{report}");
    report
}

fn assert_promises_kept(report: &Report, completed_share: f64) {
    let context = format!("{report}\n{}", report.fault_log);
    assert_eq!(report.lost, 0, "events lost\n{context}");
    assert_eq!(report.duplicated, 0, "events duplicated\n{context}");
    assert_eq!(report.reordered, 0, "events reordered\n{context}");
    assert_eq!(report.hung, 0, "calls hung\n{context}");
    assert_eq!(report.bad_results, 0, "wrong results\n{context}");
    assert_eq!(report.failed_untyped, 0, "untyped failures\n{context}");
    assert_eq!(report.tasks_lost, 0, "tasks lost\n{context}");
    // The task workers' calls ran as tasks, and every one is accounted for in `tasks/get`.
    assert!(
        report.task_calls >= 50 && report.tasks_created * 10 >= report.task_calls * 9,
        "too few calls ran as tasks\n{context}"
    );
    assert_eq!(
        report.tasks_terminal, report.tasks_created,
        "tasks not terminal in tasks/get\n{context}"
    );
    assert!(
        completed_share >= MIN_COMPLETED,
        "only {:.2} % of calls completed\n{context}",
        completed_share * 100.0
    );
    for kind in FaultKind::ALL {
        assert!(
            report.injected(kind) >= MIN_FAULTS_PER_KIND,
            "too few {} faults to prove anything: {}\n{context}",
            kind.name(),
            report.injected(kind)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_memory_store_every_call_exactly_once_in_order_or_typed_failure() {
    let report = run(Store::Memory).await;
    assert_promises_kept(&report, report.completed_share());
}

/// With SQLite the server is SIGKILLed and restarted on the same port and file mid-run:
/// calls in flight resume and lose nothing acknowledged, or, when their handler died with
/// the process, end with the `server_restarted` error after a gap-free prefix. Those calls
/// cannot complete on any server, so the completed share is taken over the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_sqlite_store_with_a_server_kill_loses_nothing_acknowledged() {
    let report = run(Store::Sqlite).await;
    assert_eq!(report.server_kills, 1, "the kill did not happen\n{report}");
    assert_promises_kept(&report, report.completed_share_excluding_restarts());
}

/// Two nodes on one Redis; node A is SIGKILLed mid-run and a new node takes its port once
/// A's lease has run out, and then `redis-server` itself is restarted after a short outage.
/// Calls A was running are answered `server_restarted` by node B, and A's sessions end with
/// it (the client re-initializes; its calls in flight fail with `SessionExpired`); calls whose
/// progress could not be stored while Redis was down are answered with an internal error
/// saying so (the server retries storing that answer until Redis is back). Those cannot
/// complete anywhere, so the share is taken over the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_two_nodes_with_a_node_killed_loses_nothing_acknowledged() {
    let seed = chaos::seed_from_env(DEFAULT_SEED).expect("CHAOS_SEED");
    let mut config = ChaosConfig::new(Store::Redis, seed);
    config.calls = 300;
    let report = run_config(config).await;
    // The node kill and the `redis-server` restart (`ChaosConfig::new`'s two faults).
    assert_eq!(
        report.server_kills, 2,
        "a server fault did not happen\n{report}"
    );
    assert_promises_kept(&report, report.completed_share_excluding_restarts());
}
