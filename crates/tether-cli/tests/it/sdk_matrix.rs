//! The SDK matrix: the official SDKs against tether, both ways, each
//! through the test kit's fault proxy. Python SDK client → `tether serve`, TypeScript SDK
//! client → `tether serve` (the built-in `count` demo, memory store), tether's client →
//! Python SDK server, tether's client → TypeScript SDK server (all peers pinned by
//! `scripts/peers.sh`; a missing peer fails the test, it never skips). Every direction does
//! what a user does and asserts what the user sees: `initialize` (version 2025-11-25),
//! `tools/list` (it lists `count`), one `count` call with a progress token whose stream the
//! proxy truncates in the middle of an event and the client resumes, then DELETE. The
//! progress values must arrive exactly `1..=N`, once each, in order, then `counted N`; the
//! proxy's counters prove the cut; the resume is proven by the server's log (`tether serve`
//! logs each accepted `Last-Event-ID` at debug) or by the client's `Reconnecting` events
//! (tether's client); after DELETE a raw POST with the old `Mcp-Session-Id` gets 404.
//!
//! Where the cut falls: the proxy counts SSE events per TCP connection, and a keep-alive
//! connection may have carried `initialize`'s and `tools/list`'s events (a priming event and
//! a response each) before the call's, so every plan truncates only after the call's priming
//! event has certainly passed: an SDK client resumes only a stream that carried an event id.
//! The Python SDK resumes a cut stream once correctly but resumes a cut resumption from the
//! *first* cursor (duplicates), so its plan cuts the call's stream once, late enough that
//! the resumption is always shorter than the cut point. The TypeScript SDK and tether's client
//! resume from their latest cursor, so their plans cut every few events.
//!
//! What the SDK servers do on a resumed stream, which the assertions allow for: both keep
//! the GET open after replaying the result (tether's client closes it), and the Python SDK
//! server then sends a fresh priming event on it, which the proxy may truncate; that cut
//! needs no resume, so the last stream may count one cut more than there were resumes.
//! Both SDK servers answer 404 to a request carrying a session id after its DELETE.
//!
//! The SDK clients run the same conversation against `crates/tether/examples/rmcp_server.rs`
//! too: an rmcp server served through tether resumes for them exactly as `tether serve` does.
//!
//! `client_peers.rs` (in `tether`) keeps the tether client's harsher peer test: byte-offset
//! cuts that can land anywhere, a dozen per call, two calls per session.

use std::time::Duration;

use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, ClientEvent, ClientEvents, MessageStream};
use tether::proto::jsonrpc::{Message, Response};
use tether_testkit::launcher::{ServerProcess, ServerSpec};
use tether_testkit::peers::{self, PeerCommand};
use tether_testkit::proxy::{Counters, FaultPlan, FaultProxy, TruncateFault};
use tether_testkit::raw::RawClient;

/// Progress notifications per call: enough events that a cut falls well inside the stream.
const N: u64 = 40;

/// Pause between progress notifications: the call lasts about a second, so cuts and resumes
/// happen while the tool is still running.
const INTERVAL_MS: u64 = 20;

/// The protocol version every direction must negotiate (the first with priming events).
const VERSION: &str = "2025-11-25";

/// `retry` the servers send, in milliseconds: the SDK clients wait exactly this before a
/// resume, so it keeps the tests short.
const RETRY_MS: &str = "100";

/// Bound on one SDK client run: interpreter start-up and a second or two of tool on a loaded
/// two-core machine.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound on the tether client's whole conversation.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Events on the call's stream besides the progress notifications: the priming event and the
/// result.
const EXTRA_EVENTS: u64 = 2;

/// Events a reused keep-alive connection may have carried before the call's stream:
/// `initialize`'s and `tools/list`'s (a priming event and a response each).
const EARLIER_EVENTS: u64 = 4;

/// A plan that truncates every connection after `after ± jitter` complete events: a few
/// events of the call's stream past its priming event whatever came before it on the
/// connection, never `initialize` or `tools/list`.
fn truncate_every(after: u64, jitter: u64) -> FaultPlan {
    assert!(
        after - jitter > EARLIER_EVENTS + 1,
        "the cut must follow the priming event"
    );
    FaultPlan::pass_through().with_truncate(TruncateFault::after_events(after).with_jitter(jitter))
}

/// A plan that truncates the call's stream once (see the module comment).
fn truncate_once() -> FaultPlan {
    let events = N + EXTRA_EVENTS;
    let (after, jitter) = (events * 3 / 4, 2);
    let fewest_cut_at = after - jitter;
    // The call's stream is cut after at least this many of its own events.
    let fewest_delivered = fewest_cut_at - EARLIER_EVENTS;
    assert!(
        fewest_delivered > 1,
        "the cut must follow the priming event"
    );
    assert!(after + jitter < events, "the cut must fall inside the call");
    // The resumption: earlier events on a reused connection, its priming event and the rest.
    let most_resumed = EARLIER_EVENTS + 1 + (events - fewest_delivered);
    assert!(
        most_resumed <= fewest_cut_at,
        "the resumption must not be cut"
    );
    FaultPlan::pass_through().with_truncate(TruncateFault::after_events(after).with_jitter(jitter))
}

// ---------------------------------------------------------------------------------------
// SDK clients → `tether serve`
// ---------------------------------------------------------------------------------------

/// An SDK client script from `interop/`.
#[derive(Clone, Copy, Debug)]
enum SdkClient {
    Python,
    TypeScript,
}

impl SdkClient {
    fn name(self) -> &'static str {
        match self {
            Self::Python => "python sdk client",
            Self::TypeScript => "typescript sdk client",
        }
    }

    /// `count` to [`N`] with a progress token, `tools/list` first, reporting the DELETE.
    fn command(self, url: &str) -> anyhow::Result<PeerCommand> {
        let client = match self {
            Self::Python => peers::python_client(url, N)?,
            Self::TypeScript => peers::ts_client(url, N)?,
        };
        Ok(client.with_args([
            "--interval-ms".to_owned(),
            INTERVAL_MS.to_string(),
            "--list-tools".to_owned(),
            "--terminate".to_owned(),
        ]))
    }

    /// The proxy's plan, and the fewest and most truncations it produces.
    fn plan(self) -> (FaultPlan, u64, u64) {
        match self {
            Self::Python => (truncate_once(), 1, 1),
            Self::TypeScript => (truncate_every(8, 2), 2, u64::MAX),
        }
    }
}

/// `tether serve` with the `count` demo and the memory store, logging session creation,
/// deletion (info) and every accepted resume (debug).
fn tether_serve() -> ServerSpec {
    ServerSpec::tether_serve()
        .expect("the tether binary")
        .args([
            "--demo",
            "count",
            "--store",
            "memory",
            "--retry-ms",
            RETRY_MS,
        ])
        // `session created` is logged by the server state, resumes and deletes by the endpoint.
        .env(
            "RUST_LOG",
            "warn,tether::server::endpoint=debug,tether::server::state=info",
        )
}

/// What an SDK client printed, in the order it must print it.
#[derive(Debug)]
struct SdkRun {
    tools: Vec<String>,
    /// `(progress, total)` per progress line.
    progress: Vec<(u64, u64)>,
    result: Value,
    /// The session id the DELETE ended.
    terminated: String,
    /// The DELETE's status.
    delete_status: u64,
}

/// Parses `{"tools"}`, `{"progress"}`…, `{"result"}`, `{"terminated"}`: nothing else, in
/// this order.
fn parse_sdk_run(lines: &[Value]) -> Result<SdkRun, String> {
    let mut lines = lines.iter();
    let mut next = |what: &str| lines.next().ok_or_else(|| format!("no {what} line"));
    let tools = next("tools")?;
    let tools = tools["tools"]
        .as_array()
        .ok_or_else(|| format!("the first line is not the tool list: {tools}"))?
        .iter()
        .map(|name| name.as_str().unwrap_or_default().to_owned())
        .collect();
    let mut progress = Vec::new();
    let result = loop {
        let line = next("result")?;
        if let Some(result) = line.get("result") {
            break result.clone();
        }
        let (Some(p), Some(total)) = (line["progress"].as_u64(), line["total"].as_u64()) else {
            return Err(format!("unexpected line before the result: {line}"));
        };
        progress.push((p, total));
    };
    let terminated = next("terminated")?;
    let session = terminated["terminated"]
        .as_str()
        .ok_or_else(|| format!("no terminated session id: {terminated}"))?;
    if let Some(extra) = lines.next() {
        return Err(format!("unexpected line after the DELETE: {extra}"));
    }
    Ok(SdkRun {
        tools,
        progress,
        result,
        terminated: session.to_owned(),
        delete_status: terminated["status"].as_u64().unwrap_or_default(),
    })
}

/// The lines of `tether serve`'s log about `session` that contain `what`.
fn log_lines<'a>(logs: &'a str, session: &str, what: &str) -> Vec<&'a str> {
    let field = format!("session={session}");
    logs.lines()
        .filter(|line| line.contains(what) && line.split_whitespace().any(|w| w == field))
        .collect()
}

/// Starts `tether serve` and the proxy, runs `sdk`'s client through the proxy and checks
/// every step of the conversation.
async fn sdk_client_against_tether_serve(sdk: SdkClient) {
    sdk_client_against(sdk, tether_serve(), "tether serve").await;
}

/// An SDK client through the proxy to the server `spec` starts (`tether serve`, or a program
/// that serves with tether and logs as it does), as the module docs say.
async fn sdk_client_against(sdk: SdkClient, spec: ServerSpec, server_name: &str) {
    let what = format!("{} -> proxy -> {server_name}", sdk.name());
    let mut server = spec.start().await.expect("start the server");
    let (plan, fewest_cuts, most_cuts) = sdk.plan();
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let command = sdk.command(&proxy.url_for("/mcp")).unwrap();
    let output = command.run(CLIENT_TIMEOUT).await;

    let context = |output: &str| {
        format!(
            "{what}\n{command}\n{output}\nproxy: {}\ntether serve:\n{}",
            proxy.report(),
            server.logs()
        )
    };
    let output = output.unwrap_or_else(|e| panic!("{e:#}\n{}", context("")));
    let context = context(&format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        output.status, output.stdout, output.stderr
    ));
    eprintln!("{what}: {}", proxy.report());
    assert!(output.status.success(), "the client failed\n{context}");
    let lines = output.json_lines().expect(&context);
    let run = parse_sdk_run(&lines).unwrap_or_else(|e| panic!("{e}\n{context}"));

    // initialize: one session, at the version with priming events.
    let logs = server.logs();
    let session = run.terminated.as_str();
    let created = log_lines(&logs, session, "session created");
    assert!(
        created.len() == 1 && created[0].contains(&format!("version={VERSION}")),
        "session {session} not created once at {VERSION}: {created:?}\n{context}"
    );
    assert_eq!(
        logs.matches("session created").count(),
        1,
        "one session expected\n{context}"
    );

    // tools/list.
    assert!(
        run.tools.iter().any(|t| t == "count"),
        "tools/list lacks count: {:?}\n{context}",
        run.tools
    );

    // The call: every progress value once, in order, then the result.
    assert_progress_and_result(&run.progress, &run.result, &context);

    // The cut and its resume.
    let counters = proxy.counters();
    assert_cuts(&counters, fewest_cuts, most_cuts, &context);
    let resumes = log_lines(&logs, session, ": resume ").len() as u64;
    assert!(
        resumes >= counters.truncations,
        "{} cuts but the server accepted {resumes} resumes\n{context}",
        counters.truncations
    );

    // DELETE: answered 200, the server forgot the session.
    assert_eq!(run.delete_status, 200, "DELETE's status\n{context}");
    assert_eq!(
        log_lines(&logs, session, "session deleted").len(),
        1,
        "no `session deleted` for {session}\n{context}"
    );
    let answer = post_with_session(&server, session).await;
    assert_eq!(answer.0, 404, "POST after DELETE: {answer:?}\n{context}");
    assert_eq!(
        answer.1["error"]["code"], -32600,
        "POST after DELETE: {answer:?}\n{context}"
    );

    let status = server.terminate().await;
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "{server_name} did not exit 0 on SIGTERM: {status:?}\n{context}"
    );
}

/// Progress exactly `(1..=N, N)` in order and the result `counted N`.
fn assert_progress_and_result(progress: &[(u64, u64)], result: &Value, context: &str) {
    let expected: Vec<(u64, u64)> = (1..=N).map(|p| (p, N)).collect();
    assert_eq!(
        progress, expected,
        "progress not exactly 1..={N} once, in order\n{context}"
    );
    assert_eq!(
        result["content"][0]["text"],
        format!("counted {N}"),
        "result {result}\n{context}"
    );
    assert_ne!(result["isError"], true, "result {result}\n{context}");
}

/// The proxy truncated between `fewest` and `most` streams and injected nothing else.
fn assert_cuts(counters: &Counters, fewest: u64, most: u64, context: &str) {
    assert!(
        (fewest..=most).contains(&counters.truncations),
        "expected {fewest}..={most} truncations: {counters:?}\n{context}"
    );
    assert_eq!(
        (counters.cuts, counters.resets, counters.refused),
        (0, 0, 0),
        "{context}"
    );
}

/// A raw `tools/list` POST straight to `server` with `Mcp-Session-Id: session`: the status
/// and the JSON body (`null` if there is none).
async fn post_with_session(server: &ServerProcess, session: &str) -> (u16, Value) {
    let mut raw = RawClient::new(server.url()).unwrap();
    raw.set_session_id(Some(session.to_owned()));
    let (_, response) = raw.post_request("tools/list", json!({})).await.unwrap();
    let transcript = response.read_to_end().await.unwrap();
    (transcript.status, transcript.json().unwrap_or(Value::Null))
}

#[tokio::test]
async fn sdk_matrix_python_client_to_tether_serve() {
    sdk_client_against_tether_serve(SdkClient::Python).await;
}

#[tokio::test]
async fn sdk_matrix_typescript_client_to_tether_serve() {
    sdk_client_against_tether_serve(SdkClient::TypeScript).await;
}

/// `crates/tether/examples/rmcp_server.rs` (an rmcp `#[tool_router]` server served through
/// tether) on the memory store, as `cargo test --workspace --all-features` built it, logging
/// as `tether serve` does.
fn rmcp_example() -> ServerSpec {
    let tether = tether_testkit::launcher::tether_bin().expect("the tether binary");
    let example = tether
        .parent()
        .expect("target/<profile>")
        .join("examples")
        .join("rmcp_server");
    assert!(
        example.is_file(),
        "{} is missing: `cargo test --workspace --all-features` builds it",
        example.display()
    );
    ServerSpec::new(example).args(["--store", "memory"]).env(
        "RUST_LOG",
        "warn,tether::server::endpoint=debug,tether::server::state=info",
    )
}

#[tokio::test]
async fn sdk_matrix_python_client_to_the_rmcp_example() {
    sdk_client_against(SdkClient::Python, rmcp_example(), "the rmcp example").await;
}

#[tokio::test]
async fn sdk_matrix_typescript_client_to_the_rmcp_example() {
    sdk_client_against(SdkClient::TypeScript, rmcp_example(), "the rmcp example").await;
}

// ---------------------------------------------------------------------------------------
// tether's client → SDK servers
// ---------------------------------------------------------------------------------------

/// Short backoff: the servers' `retry` sets the first wait anyway.
fn client_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.reconnect.backoff.base = Duration::from_millis(50);
    config.reconnect.backoff.cap = Duration::from_millis(500);
    config
}

/// What the user of tether's client saw during one conversation.
#[derive(Debug, Default)]
struct TetherRun {
    server_info: Value,
    tools: Vec<String>,
    progress: Vec<(u64, u64)>,
    result: Value,
    /// Messages of the call that are neither progress nor its result.
    other: Vec<String>,
    /// The `Last-Event-ID`s the client resumed the call with.
    resumed_from: Vec<Option<String>>,
    session: String,
}

/// The progress notifications and the result of a `tools/call` stream.
async fn collect_call(mut stream: MessageStream, run: &mut TetherRun) {
    while let Some(item) = stream.next().await {
        match item.expect("the call's stream fails") {
            Message::Notification(note) if note.method == "notifications/progress" => {
                let params = note.params.unwrap_or_default();
                run.progress.push((
                    params["progress"].as_u64().unwrap_or_default(),
                    params["total"].as_u64().unwrap_or_default(),
                ));
            }
            Message::Response(Response::Result(r)) if run.result.is_null() => {
                run.result = r.result;
            }
            other => run.other.push(format!("{other:?}")),
        }
    }
}

/// The call's reconnects so far.
fn drain_reconnects(events: &mut ClientEvents) -> Vec<Option<String>> {
    std::iter::from_fn(|| events.try_recv())
        .filter_map(|event| match event {
            ClientEvent::Reconnecting {
                request_id: Some(_),
                last_event_id,
                ..
            } => Some(last_event_id),
            _ => None,
        })
        .collect()
}

/// initialize, tools/list, `count` with a progress token, DELETE.
async fn tether_conversation(url: &str) -> anyhow::Result<TetherRun> {
    let client = Client::connect(url, client_config()).await?;
    let mut run = TetherRun {
        server_info: client.server_info(),
        session: client.session_id().unwrap_or_default(),
        ..TetherRun::default()
    };
    let mut events = client.events();
    let listed = client
        .request("tools/list", Some(json!({})))
        .await?
        .response()
        .await?;
    let Response::Result(listed) = listed else {
        anyhow::bail!("tools/list failed: {listed:?}");
    };
    run.tools = listed.result["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| tool["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let params = json!({
        "name": "count",
        "arguments": {"n": N, "interval_ms": INTERVAL_MS},
        "_meta": {"progressToken": "matrix"},
    });
    collect_call(client.request("tools/call", Some(params)).await?, &mut run).await;
    run.resumed_from = drain_reconnects(&mut events);
    client.close().await?;
    Ok(run)
}

/// Starts the SDK server `spec` and the proxy, runs tether's client through the proxy and
/// checks every step; `server_name` is the SDK server's `serverInfo.name`.
async fn tether_client_against_sdk_server(spec: ServerSpec, peer: &str, server_name: &str) {
    let what = format!("tether client -> proxy -> {peer}");
    let mut server = spec.args(["--retry-ms", RETRY_MS]).start().await.unwrap();
    let proxy = FaultProxy::start(server.addr(), truncate_every(8, 2))
        .await
        .unwrap();
    let outcome =
        tokio::time::timeout(TEST_TIMEOUT, tether_conversation(&proxy.url_for("/mcp"))).await;
    let context = format!(
        "{what}\nproxy: {}\n{peer}:\n{}",
        proxy.report(),
        server.logs()
    );
    eprintln!("{what}: {}", proxy.report());
    let run = outcome
        .unwrap_or_else(|_| panic!("timed out\n{context}"))
        .unwrap_or_else(|e| panic!("{e:#}\n{context}"));
    let context = format!("{context}\nrun: {run:?}");

    // initialize.
    assert_eq!(run.server_info["protocolVersion"], VERSION, "{context}");
    assert_eq!(
        run.server_info["serverInfo"]["name"], server_name,
        "{context}"
    );
    assert!(!run.session.is_empty(), "no session id\n{context}");

    // tools/list.
    assert!(
        run.tools.iter().any(|t| t == "count"),
        "tools/list lacks count\n{context}"
    );

    // The call.
    assert_progress_and_result(&run.progress, &run.result, &context);
    assert!(run.other.is_empty(), "unexpected messages\n{context}");

    // The cuts, and a resume with a later cursor for each cut before the result. The last
    // stream may be cut after the result, which needs no resume: the Python SDK server sends
    // a fresh priming event after a resumed stream's result and keeps the stream open.
    let counters = proxy.counters();
    assert_cuts(&counters, 2, u64::MAX, &context);
    let resumes = run.resumed_from.len() as u64;
    assert!(
        resumes >= 2 && (resumes..=resumes + 1).contains(&counters.truncations),
        "{} cuts but {resumes} resumes\n{context}",
        counters.truncations
    );
    assert!(
        run.resumed_from.iter().all(Option::is_some)
            && run.resumed_from.windows(2).all(|w| w[0] != w[1]),
        "a resume without a cursor or from the same cursor twice\n{context}"
    );

    // DELETE (Client::close): the SDK server forgot the session.
    let answer = post_with_session(&server, &run.session).await;
    assert_eq!(answer.0, 404, "POST after DELETE: {answer:?}\n{context}");
    assert!(
        answer.1["error"].is_object(),
        "POST after DELETE: {answer:?}\n{context}"
    );

    server.terminate().await.unwrap();
}

#[tokio::test]
async fn sdk_matrix_tether_client_to_python_server() {
    tether_client_against_sdk_server(
        peers::python_server().unwrap(),
        "python sdk server",
        "tether-interop-python",
    )
    .await;
}

#[tokio::test]
async fn sdk_matrix_tether_client_to_typescript_server() {
    tether_client_against_sdk_server(
        peers::ts_server().unwrap(),
        "typescript sdk server",
        "tether-interop-ts",
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// The TypeScript SDK v2 client, pinned to 2026-07-28 → `tether serve`
// ---------------------------------------------------------------------------------------

/// The TypeScript SDK v2 client pinned to the 2026-07-28 era against `tether serve --demo
/// conformance` (which also serves 2025 sessions): discovery without `initialize`,
/// `tools/list`, `count` with every progress notification once and in order, then an
/// elicitation answered through an `input_required` result and the SDK's retry.
#[tokio::test]
async fn sdk_matrix_typescript_v2_client_pinned_to_2026_07_28() {
    let mut server = ServerSpec::tether_serve()
        .expect("the tether binary")
        .args(["--demo", "conformance", "--store", "memory"])
        .start()
        .await
        .expect("start tether serve");
    let command = peers::ts_client_2026(server.url(), N).unwrap().with_args([
        "--interval-ms".to_owned(),
        "5".to_owned(),
        "--elicit".to_owned(),
    ]);
    let output = command.run(CLIENT_TIMEOUT).await.expect("the client ran");
    let context = format!(
        "{command}\n{}\n{}\ntether serve:\n{}",
        output.stdout,
        output.stderr,
        server.logs()
    );
    assert!(output.status.success(), "{context}");
    let lines: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("{line}\n{context}")))
        .collect();
    let event = |name: &'static str| lines.iter().filter(move |line| line["event"] == name);
    let connected = event("connected").next().expect(&context);
    assert_eq!(connected["protocolVersion"], "2026-07-28", "{context}");
    let tools = event("tools").next().expect(&context);
    assert!(
        tools["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "count"),
        "{context}"
    );
    let progress: Vec<u64> = event("progress")
        .map(|line| line["progress"].as_u64().unwrap())
        .collect();
    assert_eq!(progress, (1..=N).collect::<Vec<_>>(), "{context}");
    let results: Vec<&Value> = event("result").collect();
    assert_eq!(results[0]["text"], format!("counted {N}"), "{context}");
    assert_eq!(
        event("elicited").next().expect(&context)["message"],
        "What is your name?"
    );
    assert_eq!(results[1]["text"], "Hello, Alice!", "{context}");
    server.terminate().await.unwrap();
}
