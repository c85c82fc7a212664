//! `tether serve -- CMD ARGS...` in front of real stdio MCP servers, reached by the real SDK
//! clients through the test kit's fault proxy.
//!
//! The stdio servers are the Python SDK server with `count` (`interop/python/server.py
//! --stdio`) and the reference `server-everything` in stdio mode (its
//! `trigger-long-running-operation`); the clients are `interop/python/client.py` (Python SDK)
//! and `interop/ts/client.mjs` (TypeScript SDK), all pinned by `scripts/peers.sh` (a missing
//! peer fails the test, it never skips). Each client calls the long tool once; the proxy
//! truncates SSE streams in the middle of an event, and the client must print every progress
//! value `1..=total` once, in order, then the result. The proxy's counters prove the cuts
//! happened, and the gateway's log (the pid of each stdio server it started) proves that no
//! stdio server outlives `tether serve`.
//!
//! Why truncation, and why these counts: the proxy counts SSE events per TCP connection, so
//! only a stream that carries many events (the tool call's, or a resumption of it) is cut;
//! `initialize`, the `202`s and `DELETE` never are. The Python SDK resumes a cut stream once
//! correctly, but when its resumed stream is cut too it resumes again from the *first*
//! cursor and so delivers duplicates: its plan cuts after enough events that the resumed
//! stream (the rest of the call) is always shorter than the cut point. The TypeScript SDK
//! resumes from its latest cursor every time, so its plan cuts every few events.

use std::time::Duration;

use serde_json::Value;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec, wait_pids_gone};
use tether_testkit::peers::{self, PeerCommand};
use tether_testkit::proxy::{FaultPlan, FaultProxy, TruncateFault};

/// Bound on one client run: interpreter start-up, `initialize` of the stdio server (Node
/// takes about a second on a loaded two-core machine) and a few seconds of tool.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a stdio server may take to disappear after `tether serve` exited: the gateway
/// kills their process groups on shutdown, and a child whose stdin closed exits by itself.
const CHILD_EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Events on the tool call's stream besides the progress notifications: the priming event
/// and the result.
const EXTRA_EVENTS: u64 = 2;

/// A stdio server and the long tool call that the clients make against it.
struct Tool {
    /// For messages.
    name: &'static str,
    /// The stdio server's command line.
    server: fn() -> anyhow::Result<PeerCommand>,
    /// The tool to call.
    tool: &'static str,
    /// Its arguments, as JSON.
    arguments: String,
    /// The progress notifications the call sends (`1..=total`, of `total`).
    total: u64,
    /// The result's text starts with this.
    result_prefix: String,
}

/// `count` to 30, one every 30 ms.
fn python_count() -> Tool {
    let n = 30;
    Tool {
        name: "python stdio server",
        server: peers::python_stdio_server,
        tool: "count",
        arguments: format!(r#"{{"n": {n}, "interval_ms": 30}}"#),
        total: n,
        result_prefix: format!("counted {n}"),
    }
}

/// `trigger-long-running-operation`: 20 steps in 3 s.
fn everything_long_operation() -> Tool {
    let steps = 20;
    Tool {
        name: "server-everything (stdio)",
        server: peers::everything_stdio_server,
        tool: "trigger-long-running-operation",
        arguments: format!(r#"{{"duration": 3, "steps": {steps}}}"#),
        total: steps,
        result_prefix: "Long running operation completed".to_owned(),
    }
}

/// An SDK client and how many cuts of one stream it survives.
#[derive(Clone, Copy)]
enum Sdk {
    Python,
    TypeScript,
}

impl Sdk {
    fn name(self) -> &'static str {
        match self {
            Self::Python => "python sdk client",
            Self::TypeScript => "typescript sdk client",
        }
    }

    /// The client calling `tool` at `url`.
    fn command(self, url: &str, tool: &Tool) -> anyhow::Result<PeerCommand> {
        // N is ignored when --arguments is given.
        let client = match self {
            Self::Python => peers::python_client(url, 0)?,
            Self::TypeScript => peers::ts_client(url, 0)?,
        };
        Ok(client.with_args([
            "--tool".to_owned(),
            tool.tool.to_owned(),
            "--arguments".to_owned(),
            tool.arguments.clone(),
        ]))
    }

    /// The proxy's plan for a call that sends `total` progress notifications, and the fewest
    /// truncations it must produce.
    fn plan(self, total: u64) -> (FaultPlan, u64) {
        let events = total + EXTRA_EVENTS;
        match self {
            // One cut. The call's stream is cut after at least `after - jitter - 2` of its
            // events (its connection may have carried `initialize`'s priming event and
            // response first); the resumed stream, on a connection that may have carried
            // those two, holds the rest plus its own priming event, and must not reach a
            // cut.
            Self::Python => {
                let (after, jitter) = (events * 3 / 4, 2);
                let fewest_cut_at = after - jitter;
                let most_resumed = events - (fewest_cut_at - 2) + 1 + 2;
                assert!(most_resumed <= fewest_cut_at, "no plan for {total} events");
                assert!(after + jitter < events, "no plan for {total} events");
                let fault = TruncateFault::after_events(after).with_jitter(jitter);
                (FaultPlan::pass_through().with_truncate(fault), 1)
            }
            // A cut every few events, on the call's stream and on each resumption.
            Self::TypeScript => {
                let fault = TruncateFault::after_events(6).with_jitter(2);
                (FaultPlan::pass_through().with_truncate(fault), 2)
            }
        }
    }
}

/// `tether serve --retry-ms 100 -- <the stdio server>`, logging at info so that the pids of
/// the stdio servers it starts appear in its log.
fn gateway_spec(stdio_server: PeerCommand) -> anyhow::Result<ServerSpec> {
    // `--bind` goes before `--`: appended after the stdio server's arguments it would be one
    // of them.
    Ok(ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--retry-ms", "100", "--"])
        .args(stdio_server.into_command_line())
        .env("RUST_LOG", "warn,tether::gateway=info"))
}

/// The pids in the gateway's `stdio server started … pid=N` log lines.
fn started_pids(logs: &str) -> Vec<u32> {
    logs.lines()
        .filter(|line| line.contains("stdio server started"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("pid=")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// One `{"progress": p, "total": t}` line.
type Progress = (u64, u64);

/// What the client printed: the progress values (with their totals) and the result, checking
/// that the result comes last and that nothing but log lines is mixed in.
fn progress_and_result(lines: &[Value]) -> Result<(Vec<Progress>, &Value), String> {
    let (last, rest) = lines.split_last().ok_or("no output")?;
    let result = last
        .get("result")
        .ok_or_else(|| format!("the last line is not the result: {last}"))?;
    let mut progress = Vec::new();
    for line in rest {
        if let Some(p) = line.get("progress") {
            let value = p.as_u64().ok_or_else(|| format!("bad progress: {line}"))?;
            let total = line["total"]
                .as_u64()
                .ok_or_else(|| format!("bad total: {line}"))?;
            progress.push((value, total));
        } else if line.get("log").is_none() {
            return Err(format!("unexpected line before the result: {line}"));
        }
    }
    Ok((progress, result))
}

/// Starts the gateway in front of `tool`'s stdio server and the proxy in front of the
/// gateway, runs `sdk`'s client through the proxy and checks what it printed, the proxy's
/// counters and that no stdio server is left once the gateway stopped.
async fn long_call_through_cuts(tool: Tool, sdk: Sdk) {
    let what = format!("{} -> proxy -> tether serve -> {}", sdk.name(), tool.name);
    let stdio_server = (tool.server)().expect("the stdio server peer");
    let mut server: ServerProcess = gateway_spec(stdio_server)
        .unwrap()
        .start()
        .await
        .expect("start tether serve as a gateway");
    let (plan, min_faults) = sdk.plan(tool.total);
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let command = sdk.command(&proxy.url_for("/mcp"), &tool).unwrap();
    let output = command.run(CLIENT_TIMEOUT).await;

    let logs = server.logs();
    let status = server.terminate().await;
    eprintln!("{what}: {}", proxy.report());
    let context = |output: &str| {
        format!(
            "{what}\n{command}\n{output}\nproxy: {}\ngateway:\n{logs}",
            proxy.report()
        )
    };
    let output = output.unwrap_or_else(|e| panic!("{e:#}\n{}", context("")));
    let context = context(&format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        output.status, output.stdout, output.stderr
    ));
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "tether serve did not exit 0 on SIGTERM: {status:?}\n{context}"
    );
    assert!(output.status.success(), "the client failed\n{context}");

    let lines = output.json_lines().expect(&context);
    let (progress, result) =
        progress_and_result(&lines).unwrap_or_else(|e| panic!("{e}\n{context}"));
    let expected: Vec<Progress> = (1..=tool.total).map(|p| (p, tool.total)).collect();
    assert_eq!(
        progress, expected,
        "progress not exactly 1..={} once, in order\n{context}",
        tool.total
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&tool.result_prefix),
        "result {result} does not start with {:?}\n{context}",
        tool.result_prefix
    );
    assert_ne!(result["isError"], true, "{context}");

    let counters = proxy.counters();
    assert!(
        counters.truncations >= min_faults,
        "expected at least {min_faults} truncations: {counters:?}\n{context}"
    );
    if matches!(sdk, Sdk::Python) {
        assert_eq!(counters.truncations, 1, "the plan cuts once\n{context}");
    }

    let pids = started_pids(&server.logs());
    assert!(
        !pids.is_empty(),
        "no `stdio server started` log line\n{context}"
    );
    let alive = wait_pids_gone(&pids, CHILD_EXIT_TIMEOUT).await;
    assert!(
        alive.is_empty(),
        "stdio servers {alive:?} outlived tether serve\n{context}"
    );
}

#[tokio::test]
async fn python_stdio_server_count_reaches_python_client_once_across_a_cut() {
    long_call_through_cuts(python_count(), Sdk::Python).await;
}

#[tokio::test]
async fn python_stdio_server_count_reaches_typescript_client_once_across_cuts() {
    long_call_through_cuts(python_count(), Sdk::TypeScript).await;
}

#[tokio::test]
async fn everything_stdio_long_operation_reaches_python_client_once_across_a_cut() {
    long_call_through_cuts(everything_long_operation(), Sdk::Python).await;
}

#[tokio::test]
async fn everything_stdio_long_operation_reaches_typescript_client_once_across_cuts() {
    long_call_through_cuts(everything_long_operation(), Sdk::TypeScript).await;
}
