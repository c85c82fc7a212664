//! `tether call` as a process against `tether serve` (docs/CONTRACTS.md#tether-call): `--json`
//! output through a fault proxy that cuts connections, a SIGKILL followed by `--resume` that
//! repeats at most the event being processed at the kill, the exit codes (tool error 1, usage
//! 2, transport failure 3, session expired 4; a cut 2026-07-28 call 3) and the progress bar under a
//! pseudo-terminal.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::Value;
use tether_testkit::launcher::{ServerProcess, ServerSpec, tether_bin};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// Bound on any one `tether call` run; generous for a loaded two-core machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

async fn start_server() -> anyhow::Result<ServerProcess> {
    Ok(ServerSpec::tether_serve()?.start().await?)
}

fn tether(args: &[&str]) -> anyhow::Result<Command> {
    let mut command = Command::new(tether_bin()?);
    command
        .arg("call")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(command)
}

/// Runs `tether call ARGS` to completion.
async fn run_call(args: &[&str]) -> anyhow::Result<Output> {
    run_call_with_env(args, &[]).await
}

/// Runs `tether call ARGS` to completion with `env` added to its environment.
pub(crate) async fn run_call_with_env(
    args: &[&str],
    env: &[(String, String)],
) -> anyhow::Result<Output> {
    let mut command = tether(args)?;
    command.envs(
        env.iter()
            .map(|(key, value)| (key.as_str(), value.as_str())),
    );
    let child = command.spawn().context("spawning tether call")?;
    tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .with_context(|| format!("tether call {args:?} did not exit"))?
        .context("waiting for tether call")
}

pub(crate) fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every stdout line must be a JSON-RPC message.
pub(crate) fn json_lines(stdout: &[u8]) -> anyhow::Result<Vec<Value>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).with_context(|| format!("not JSON: {line:?}")))
        .collect()
}

fn progress_of(message: &Value) -> Option<u64> {
    (message["method"] == "notifications/progress")
        .then(|| message["params"]["progress"].as_u64())
        .flatten()
}

/// The progress values, checking that the only other line is the final response, last.
pub(crate) fn progress_then_result(messages: &[Value], n: u64) -> anyhow::Result<Vec<u64>> {
    let (last, rest) = messages.split_last().context("no output")?;
    ensure!(
        last["result"]["content"][0]["text"] == format!("counted {n}"),
        "last line is not the result: {last}"
    );
    rest.iter()
        .map(|m| progress_of(m).with_context(|| format!("not a progress notification: {m}")))
        .collect()
}

pub(crate) fn count_args(n: u64, interval_ms: u64) -> String {
    format!(r#"{{"n":{n},"interval_ms":{interval_ms}}}"#)
}

/// With the default `--protocol auto` against `tether serve` (which serves both eras) the call
/// runs in the legacy era, where a cut stream resumes: every progress event once.
#[tokio::test]
async fn json_output_is_every_progress_once_in_order_then_the_result_across_cuts() {
    let server = start_server().await.unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let n = 200;
    let args = count_args(n, 0);
    let output = run_call(&[&url, "count", "--args", &args, "--json"])
        .await
        .unwrap();
    let report = || format!("{}\nproxy: {}", describe(&output), proxy.report());
    assert_eq!(output.status.code(), Some(0), "{}", report());
    let messages = json_lines(&output.stdout).unwrap();
    let progress =
        progress_then_result(&messages, n).unwrap_or_else(|e| panic!("{e}\n{}", report()));
    assert_eq!(progress, (1..=n).collect::<Vec<_>>(), "{}", report());
    assert!(
        proxy.counters().cuts >= 1,
        "no cut was injected: {}",
        report()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reconnecting"),
        "reconnects not reported: {}",
        report()
    );
}

/// Pinned to 2026-07-28 and not run as a task (`--no-task`), a `tools/call` whose connection is
/// cut cannot be resumed, and is not sent again (the tool may have run): exit 3, and stderr
/// says so.
#[tokio::test]
async fn a_cut_modern_tool_call_exits_3_saying_it_may_have_run() {
    let server = start_server().await.unwrap();
    // Past the short discover exchange, inside the call's stream.
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(1500));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let args = count_args(200, 5);
    let output = run_call(&[
        &url,
        "count",
        "--args",
        &args,
        "--json",
        "--protocol",
        "2026-07-28",
        "--no-task",
    ])
    .await
    .unwrap();
    let report = || format!("{}\nproxy: {}", describe(&output), proxy.report());
    assert_eq!(output.status.code(), Some(3), "{}", report());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("may have run on the server and was not sent again"),
        "{}",
        report()
    );
    let messages = json_lines(&output.stdout).unwrap();
    let progress: Vec<u64> = messages.iter().filter_map(progress_of).collect();
    assert!(progress.len() < 200, "the cut came first: {}", report());
    assert_eq!(
        progress,
        (1..=progress.len() as u64).collect::<Vec<_>>(),
        "what arrived before the cut arrived once, in order: {}",
        report()
    );
    assert!(
        !messages.iter().any(|m| m.get("result").is_some()),
        "no result after the cut: {}",
        report()
    );
}

/// Pinned to 2026-07-28 against `tether serve`, which offers tasks and task streams: the call
/// runs as a task and its events are read with `tasks/stream`, asked again with `after` after
/// each cut: every progress event once, in order, then the result.
#[tokio::test]
async fn a_modern_call_runs_as_a_task_and_survives_cuts_exactly_once() {
    let server = start_server().await.unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let n = 200;
    let args = count_args(n, 2);
    let output = run_call(&[
        &url,
        "count",
        "--args",
        &args,
        "--json",
        "--protocol",
        "2026-07-28",
    ])
    .await
    .unwrap();
    let report = || format!("{}\nproxy: {}", describe(&output), proxy.report());
    assert_eq!(output.status.code(), Some(0), "{}", report());
    let messages = json_lines(&output.stdout).unwrap();
    let progress =
        progress_then_result(&messages, n).unwrap_or_else(|e| panic!("{e}\n{}", report()));
    assert_eq!(progress, (1..=n).collect::<Vec<_>>(), "{}", report());
    assert!(
        proxy.counters().cuts >= 1,
        "no cut was injected: {}",
        report()
    );
}

/// A task call SIGKILLed and `--resume`d from its token file (which names the task): the rest
/// of the task's events, repeating at most the one in hand, then the result; `tools/call` is
/// not sent again (one count ran).
#[tokio::test]
async fn a_task_call_killed_and_resumed_delivers_the_rest() {
    let server = start_server().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("call.token");
    let n = 60;
    let first =
        kill_after_token_advanced_with(server.url(), n, &token_file, &["--protocol", "2026-07-28"])
            .await;
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&token_file).unwrap()).unwrap();
    assert!(
        saved["token"]["task_id"].is_string(),
        "the token names the task: {saved}"
    );
    let output = run_call(&["--resume", token_file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let second = progress_then_result(&json_lines(&output.stdout).unwrap(), n)
        .unwrap_or_else(|e| panic!("{e}\n{}", describe(&output)));
    let k = *first.last().unwrap();
    assert_eq!(first, (1..=k).collect::<Vec<_>>(), "before the kill");
    let start = *second.first().expect("nothing left after the kill");
    assert!(
        start == k || start == k + 1,
        "resumed at {start} after {k} was printed; first {first:?}, second {second:?}"
    );
    assert_eq!(second, (start..=n).collect::<Vec<_>>(), "after the resume");
}

/// On SQLite a task survives the server's SIGKILL as a record: after the restart it is
/// `failed` with `server_restarted`, and `--resume` delivers the events stored before the kill
/// that the first process had not committed, then the failure: exit 1, the reason on stderr.
#[tokio::test]
async fn a_task_call_killed_with_the_server_resumes_into_server_restarted() {
    let mut server = start_server().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("call.token");
    let first = kill_after_token_advanced_with(
        server.url(),
        1000,
        &token_file,
        &["--protocol", "2026-07-28"],
    )
    .await;
    server.restart().await.unwrap();
    let output = run_call(&["--resume", token_file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let lines = json_lines(&output.stdout).unwrap();
    let last = lines.last().unwrap();
    assert_eq!(
        last["error"]["data"]["reason"],
        "server_restarted",
        "{}",
        describe(&output)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reason server_restarted"),
        "{}",
        describe(&output)
    );
    // Every event once across both processes, at most the one in hand twice.
    let second: Vec<u64> = lines.iter().filter_map(progress_of).collect();
    let k = *first.last().unwrap();
    if let Some(&start) = second.first() {
        assert!(start == k || start == k + 1, "{first:?} then {second:?}");
        assert_eq!(
            second,
            (start..start + second.len() as u64).collect::<Vec<_>>()
        );
    }
}

/// With the default `--protocol auto` against a server that serves 2026-07-28 alone (the
/// TypeScript SDK v2's, stateless), the call runs in that era; a cut there is exit 3 too.
#[tokio::test]
async fn auto_against_a_2026_only_server_exits_3_when_the_call_is_cut() {
    let server = tether_testkit::peers::ts_server_2026("modern")
        .unwrap()
        .start()
        .await
        .unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(2000));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let args = count_args(200, 5);
    let output = run_call(&[&url, "count", "--args", &args, "--json"])
        .await
        .unwrap();
    let report = || format!("{}\nproxy: {}", describe(&output), proxy.report());
    assert_eq!(output.status.code(), Some(3), "{}", report());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("may have run"), "{}", report());
    let progress: Vec<u64> = json_lines(&output.stdout)
        .unwrap()
        .iter()
        .filter_map(progress_of)
        .collect();
    assert!(!progress.is_empty() && progress.len() < 200, "{}", report());
    assert_eq!(
        progress,
        (1..=progress.len() as u64).collect::<Vec<_>>(),
        "{}",
        report()
    );
}

/// Spawns a slow `count` in the 2025 era (a session; `auto` would run it as a task with
/// tether's server) writing `token_file`, reads its stdout until the token file has advanced
/// past a few events, then SIGKILLs it. Returns the progress values it printed.
async fn kill_after_token_advanced(url: &str, n: u64, token_file: &Path) -> Vec<u64> {
    kill_after_token_advanced_with(url, n, token_file, &["--protocol", "legacy"]).await
}

/// [`kill_after_token_advanced`] with `extra` arguments for `tether call`.
async fn kill_after_token_advanced_with(
    url: &str,
    n: u64,
    token_file: &Path,
    extra: &[&str],
) -> Vec<u64> {
    let args = count_args(n, 50);
    let token = token_file.to_str().unwrap();
    let mut argv = vec![
        url,
        "count",
        "--args",
        &args,
        "--json",
        "--token-file",
        token,
    ];
    argv.extend_from_slice(extra);
    let mut child: Child = tether(&argv).unwrap().spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let advanced = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let message: Value = serde_json::from_str(&line).unwrap();
            printed.push(progress_of(&message).expect("a progress line before the kill"));
            let committed = std::fs::read_to_string(token_file)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|t| {
                    t["token"]["last_event_id"]
                        .as_str()
                        .is_some_and(|id| !id.is_empty())
                });
            if committed && printed.len() >= 5 {
                return;
            }
        }
        panic!("tether call ended before its token file advanced");
    };
    tokio::time::timeout(RUN_TIMEOUT, advanced)
        .await
        .expect("the token file did not advance");
    child.start_kill().unwrap(); // SIGKILL
    // Whatever it wrote before dying is part of its output.
    while let Ok(Some(line)) = lines.next_line().await {
        let message: Value = serde_json::from_str(&line).unwrap();
        printed.push(progress_of(&message).expect("a progress line before the kill"));
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), None, "tether call was not killed: {status}");
    assert!(
        printed.len() < n as usize,
        "the call finished before the kill"
    );
    printed
}

#[tokio::test]
async fn resume_after_sigkill_delivers_the_rest_repeating_at_most_the_event_in_hand() {
    let server = start_server().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("call.token");
    let n = 60;
    let first = kill_after_token_advanced(server.url(), n, &token_file).await;
    let output = run_call(&["--resume", token_file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let second = progress_then_result(&json_lines(&output.stdout).unwrap(), n)
        .unwrap_or_else(|e| panic!("{e}\n{}", describe(&output)));
    let k = *first.last().unwrap();
    assert_eq!(first, (1..=k).collect::<Vec<_>>(), "before the kill");
    let start = *second.first().expect("nothing left after the kill");
    // Process, then commit: the event printed last before the kill may come again, no other.
    assert!(
        start == k || start == k + 1,
        "resumed at {start} after {k} was printed; first {first:?}, second {second:?}"
    );
    assert_eq!(second, (start..=n).collect::<Vec<_>>(), "after the resume");
}

#[tokio::test]
async fn a_tool_error_exits_1() {
    let server = start_server().await.unwrap();
    let output = run_call(&[server.url(), "count", "--args", r#"{"n":-1}"#])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("must be >= 0"), "{}", describe(&output));
}

#[tokio::test]
async fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["http://127.0.0.1:1/mcp"][..],
        &["http://127.0.0.1:1/mcp", "count", "--args", "[1]"][..],
        &["http://127.0.0.1:1/mcp", "count", "--args", "{not json"][..],
        &["--resume", "/nonexistent/tether-token"][..],
        &["--resume", "/tmp/x", "http://127.0.0.1:1/mcp", "count"][..],
    ] {
        let output = run_call(args).await.unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            describe(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}: {}", describe(&output));
    }
}

#[tokio::test]
async fn a_session_gone_at_resume_exits_4() {
    // In memory, so that the restarted server has forgotten the session.
    let mut server = ServerSpec::tether_serve()
        .unwrap()
        .args(["--store", "memory"])
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("call.token");
    kill_after_token_advanced(server.url(), 1000, &token_file).await;
    // Same address, fresh memory store: the session is unknown (404).
    server.restart().await.unwrap();
    let output = run_call(&["--resume", token_file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", describe(&output));
}

/// On the default (SQLite) store the session survives a SIGKILL of the server; the call that
/// was running did not, and `tether call --resume` reports the server's answer saying so.
#[tokio::test]
async fn a_call_killed_with_the_server_resumes_into_its_restart_error() {
    let mut server = start_server().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("call.token");
    kill_after_token_advanced(server.url(), 1000, &token_file).await;
    server.restart().await.unwrap();
    let output = run_call(&["--resume", token_file.to_str().unwrap()])
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    // The resumed call keeps the original's `--json`: its last line is the answer.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["error"]["data"]["reason"],
        "server_restarted",
        "{}",
        describe(&output)
    );
}

#[tokio::test]
async fn an_exhausted_reconnect_budget_exits_3() {
    let mut server = start_server().await.unwrap();
    let args = count_args(1000, 50);
    let mut child = tether(&[
        server.url(),
        "count",
        "--args",
        &args,
        "--json",
        "--reconnect-budget-secs",
        "3",
    ])
    .unwrap()
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(RUN_TIMEOUT, lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_some(), "no progress before the server went away");
    // The server goes away for good: every reconnect is refused until the budget runs out.
    server.kill().await.unwrap();
    while let Ok(Some(_)) = lines.next_line().await {}
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("budget"), "{}", describe(&output));
}

/// The progress bar path: stderr is a terminal under `script` (util-linux). Without `script`
/// the test fails rather than skips: a skipped test would pass without checking anything.
#[tokio::test]
async fn the_progress_bar_runs_under_a_pseudo_terminal() {
    let script = Path::new("/usr/bin/script");
    assert!(
        script.is_file(),
        "no /usr/bin/script (util-linux; Debian's bsdutils) to make a pseudo-terminal: \
         scripts/setup.sh installs it"
    );
    let server = start_server().await.unwrap();
    let bin = tether_bin().unwrap();
    let inner = format!(
        "{} call {} count --args '{}'",
        bin.display(),
        server.url(),
        count_args(10, 20)
    );
    let child = Command::new(script)
        .args(["-qefc", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let seen = String::from_utf8_lossy(&output.stdout);
    assert!(seen.contains("counted 10"), "{}", describe(&output));
    // On a terminal progress is the bar, not plain lines.
    assert!(!seen.contains("progress 1/"), "{}", describe(&output));
}
