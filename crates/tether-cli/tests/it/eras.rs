//! `tether serve --eras`: the operator's choice of protocol eras, as the clients that meet it
//! see it. Dual-era clients in their default `auto` mode (the Python SDK 2.3.0's `Client`,
//! fastmcp 4.1.6's `Client`, the TypeScript SDK v2 client with `auto`) adopt 2026-07-28 from a
//! server of both eras, where a cut cancels a plain call; against `--eras legacy` they fall back
//! to a 2025 session, and there a `count` call through a fault proxy that cuts its stream
//! delivers every progress event once, in order. `--eras modern` refuses `initialize` with the
//! unsupported-version answer naming only 2026-07-28. The gateway (`tether serve -- CMD`)
//! takes the same flag. The peers are pinned by
//! `scripts/peers.sh`; a missing one fails the test.

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec};
use tether_testkit::peers::{self, PeerCommand};
use tether_testkit::proxy::{FaultPlan, FaultProxy, TruncateFault};
use tether_testkit::raw::RawClient;

/// Progress notifications per call.
const N: u64 = 40;

/// Milliseconds between progress notifications.
const INTERVAL_MS: u64 = 10;

/// Bound on one peer client's run.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// SSE events that may precede the call's own on a reused connection: `initialize`'s and
/// `tools/list`'s priming event and response (`server/discover` is answered with JSON).
const EARLIER_EVENTS: u64 = 4;

/// `tether serve --demo count --store memory --retry-ms 100 --eras ERAS`.
async fn tether_serve(eras: &str) -> ServerProcess {
    ServerSpec::tether_serve()
        .expect("the tether binary")
        .args([
            "--demo",
            "count",
            "--store",
            "memory",
            "--retry-ms",
            "100",
            "--eras",
            eras,
        ])
        .start()
        .await
        .expect("start tether serve")
}

/// A dual-era client in its `auto` mode.
#[derive(Clone, Copy, Debug)]
enum AutoClient {
    PythonSdk,
    Fastmcp,
    TypeScriptV2,
}

impl AutoClient {
    const ALL: [Self; 3] = [Self::PythonSdk, Self::Fastmcp, Self::TypeScriptV2];

    fn command(self, url: &str) -> PeerCommand {
        let interval = ["--interval-ms".to_owned(), INTERVAL_MS.to_string()];
        match self {
            Self::PythonSdk => peers::python_client_auto(url, N, "mcp"),
            Self::Fastmcp => peers::python_client_auto(url, N, "fastmcp"),
            Self::TypeScriptV2 => peers::ts_client_2026(url, N)
                .map(|command| command.with_args(["--auto".to_owned()])),
        }
        .expect("the peer (scripts/peers.sh)")
        .with_args(interval)
    }

    /// A plan that truncates the call's stream: the Python clients resume a cut stream
    /// correctly once (a second cut replays from the first cursor), so theirs is cut once,
    /// three quarters in; the TypeScript client resumes every cut, so every connection is
    /// cut after 8 ± 2 events.
    fn plan(self) -> FaultPlan {
        let (after, jitter) = match self {
            Self::PythonSdk | Self::Fastmcp => ((N + 2) * 3 / 4, 2),
            Self::TypeScriptV2 => (8, 2),
        };
        assert!(
            after - jitter > EARLIER_EVENTS + 1,
            "after the priming event"
        );
        FaultPlan::pass_through()
            .with_truncate(TruncateFault::after_events(after).with_jitter(jitter))
    }
}

/// Runs `client` against `url`; returns the version it negotiated, its progress values and
/// its result text, or what it printed when it failed.
async fn run(client: AutoClient, url: &str) -> Result<(String, Vec<u64>, String), String> {
    let command = client.command(url);
    let output = command.run(RUN_TIMEOUT).await.expect("the client ran");
    let context = format!(
        "{client:?}: {command}\n{}\n{}",
        output.stdout, output.stderr
    );
    if !output.status.success() {
        return Err(context);
    }
    let lines: Vec<Value> = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("{line}\n{context}")))
        .collect();
    let event = |name: &'static str| lines.iter().filter(move |line| line["event"] == name);
    let version = event("connected").next().expect(&context)["protocolVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let progress = event("progress")
        .map(|line| line["progress"].as_u64().expect(&context))
        .collect();
    let result = event("result").next().expect(&context)["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok((version, progress, result))
}

#[tokio::test]
async fn dual_era_clients_resume_through_cuts_against_legacy_only() {
    let server = tether_serve("legacy").await;
    for client in AutoClient::ALL {
        let proxy = FaultProxy::start(server.addr(), client.plan())
            .await
            .unwrap();
        let outcome = run(client, &proxy.url_for("/mcp")).await;
        let context = format!("{client:?}; proxy: {}", proxy.report());
        let (version, progress, result) = outcome.unwrap_or_else(|e| panic!("{e}\n{context}"));
        assert_eq!(version, "2025-11-25", "a 2025 session: {context}");
        assert_eq!(
            progress,
            (1..=N).collect::<Vec<_>>(),
            "once each, in order: {context}"
        );
        assert_eq!(result, format!("counted {N}"), "{context}");
        assert!(
            proxy.counters().truncations >= 1,
            "no cut was injected: {context}"
        );
    }
}

/// The contrast that makes `--eras legacy` worth having: from a server of both eras the same
/// clients, unchanged, adopt 2026-07-28 (where a cut cancels a plain call).
#[tokio::test]
async fn dual_era_clients_adopt_2026_07_28_from_a_server_of_both_eras() {
    let server = tether_serve("both").await;
    for client in AutoClient::ALL {
        let (version, progress, result) = run(client, server.url())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(version, "2026-07-28", "{client:?}");
        assert_eq!(progress, (1..=N).collect::<Vec<_>>(), "{client:?}");
        assert_eq!(result, format!("counted {N}"), "{client:?}");
    }
}

#[tokio::test]
async fn modern_only_refuses_initialize_and_a_2025_client_gets_its_error() {
    let server = tether_serve("modern").await;
    assert_initialize_refused(server.url()).await;
    // The Python SDK's 2025 client cannot start a session, and says so.
    let command = peers::python_client(server.url(), 1).unwrap();
    let output = command.run(RUN_TIMEOUT).await.expect("the client ran");
    assert!(
        !output.status.success(),
        "{}\n{}",
        output.stdout,
        output.stderr
    );
    // A dual-era client is served in the 2026-07-28 era.
    let (version, progress, _) = run(AutoClient::PythonSdk, server.url())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(version, "2026-07-28");
    assert_eq!(progress, (1..=N).collect::<Vec<_>>());
}

/// `tether serve --eras ERAS -- <the Python SDK's stdio server>` (memory store).
async fn gateway(eras: &str) -> ServerProcess {
    let (program, args) = peers::python_stdio_server()
        .expect("the Python peer (scripts/peers.sh)")
        .into_parts();
    ServerSpec::tether_serve()
        .expect("the tether binary")
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--retry-ms", "100"])
        .args(["--eras", eras, "--"])
        .args([program.display().to_string()])
        .args(args)
        .start()
        .await
        .expect("start tether serve -- CMD")
}

/// The gateway takes `--eras` as the demo does: in front of a stdio server, `legacy` keeps a
/// dual-era client in a 2025 session whose cut stream resumes, and `modern` discovers only
/// 2026-07-28 and refuses `initialize`.
#[tokio::test]
async fn the_gateway_serves_the_eras_it_is_given() {
    let server = gateway("legacy").await;
    let client = AutoClient::Fastmcp;
    let proxy = FaultProxy::start(server.addr(), client.plan())
        .await
        .unwrap();
    let outcome = run(client, &proxy.url_for("/mcp")).await;
    let context = format!("proxy: {}", proxy.report());
    let (version, progress, result) = outcome.unwrap_or_else(|e| panic!("{e}\n{context}"));
    assert_eq!(version, "2025-11-25", "a 2025 session: {context}");
    assert_eq!(progress, (1..=N).collect::<Vec<_>>(), "{context}");
    assert_eq!(result, format!("counted {N}"), "{context}");
    assert!(proxy.counters().truncations >= 1, "no cut: {context}");

    let server = gateway("modern").await;
    let raw = RawClient::new(server.url()).unwrap();
    let found = raw
        .exchange(&raw.modern(1, "server/discover", json!({}), json!({})))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        found["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{found}"
    );
    assert_initialize_refused(server.url()).await;
}

/// A 2025 `initialize` at `url` is refused with the unsupported-version answer naming only
/// 2026-07-28: a 400, code -32600, never an `InitializeResult`.
async fn assert_initialize_refused(url: &str) {
    let mut raw = RawClient::new(url).unwrap();
    let (_, response) = raw
        .post_request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "old", "version": "1"}}),
        )
        .await
        .unwrap();
    let answer = response.read_to_end().await.unwrap();
    assert_eq!(answer.status, 400, "{answer:?}");
    let body = answer.json().unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(
        body["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{body}"
    );
    assert_eq!(body["error"]["data"]["requested"], "2025-11-25", "{body}");
    assert!(body.get("result").is_none(), "{body}");
}
