//! `tether serve --config FILE`: two real stdio servers behind one endpoint, the Python SDK's
//! (`interop/python/server.py --stdio`, tool `count`) as upstream `py` and the TypeScript
//! SDK's reference `server-everything` (tools `echo`, `get-sum`, …) as upstream `ts`.
//!
//! Merged lists with prefixes and each call reaching its own upstream, in both eras (tether's
//! client); `tether call` through the fault proxy exactly once, in both eras; an upstream
//! killed mid-call failing only that call while the session and the other upstream carry
//! on, and its next call starting it again; deny rules hiding and refusing a tool; a reload
//! (file change and SIGHUP) adding and removing an upstream, telling the session with
//! `list_changed`, and a bad new file keeping the old; the file's errors naming file, line
//! and key; `[serve]` setting flags, the command line winning.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tempfile::TempDir;
use tether::client::{Client, ClientConfig, ProtocolChoice};
use tether::proto::jsonrpc::{Message, Response};
use tether::proto::version::ProtocolVersion;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec, tether_bin};
use tether_testkit::peers::{self, PeerCommand};
use tether_testkit::proxy::{FaultPlan, FaultProxy, TruncateFault};

use crate::call::{count_args, describe, json_lines, progress_then_result, run_call_with_env};

/// How long a reload may take to be seen: the file is read every second.
const RELOAD_WAIT: Duration = Duration::from_secs(15);

/// A TOML string.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string")
}

/// An `[[upstream]]` table running `command`, with `extra` lines.
fn upstream(name: &str, command: PeerCommand, extra: &str) -> String {
    let (program, args) = command.into_parts();
    let words: Vec<String> = std::iter::once(program.display().to_string())
        .chain(args)
        .map(|word| quoted(&word))
        .collect();
    format!(
        "[[upstream]]\nname = {}\ncommand = [{}]\n{extra}\n",
        quoted(name),
        words.join(", ")
    )
}

fn py(extra: &str) -> String {
    upstream(
        "py",
        peers::python_stdio_server().expect("the Python peer"),
        extra,
    )
}

fn ts(extra: &str) -> String {
    upstream(
        "ts",
        peers::everything_stdio_server().expect("server-everything"),
        extra,
    )
}

/// A config file in a new directory.
fn config_file(text: &str) -> anyhow::Result<(TempDir, PathBuf)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text)?;
    Ok((dir, path))
}

/// `tether serve --config PATH` on a free port, memory store.
async fn gateway(path: &Path) -> anyhow::Result<ServerProcess> {
    Ok(ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--config"])
        .arg(path)
        .env("RUST_LOG", "warn,tether::gateway=info,tether=info")
        .ready_timeout(Duration::from_secs(60))
        .start()
        .await?)
}

fn client_config(protocol: ProtocolChoice) -> ClientConfig {
    let mut config = ClientConfig::default();
    config.protocol = protocol;
    config.reconnect.backoff.base = Duration::from_millis(50);
    config.reconnect.backoff.cap = Duration::from_millis(500);
    config
}

async fn connect(server: &ServerProcess, protocol: ProtocolChoice) -> anyhow::Result<Client> {
    Ok(Client::connect(server.url(), client_config(protocol)).await?)
}

/// The final answer of `method`: its result, or its error as `Err`.
async fn ask(client: &Client, method: &str, params: Value) -> anyhow::Result<Result<Value, Value>> {
    let stream = client.request(method, Some(params)).await?;
    Ok(match stream.response().await? {
        Response::Result(answer) => Ok(answer.result),
        Response::Error(error) => Err(serde_json::to_value(&error.error)?),
    })
}

/// The federated tool names.
async fn tool_names(client: &Client) -> anyhow::Result<Vec<String>> {
    let listed = ask(client, "tools/list", json!({}))
        .await?
        .map_err(|error| anyhow::anyhow!("tools/list failed: {error}"))?;
    Ok(listed["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect())
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .map_or_else(|| result.to_string(), str::to_owned)
}

async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<Result<Value, Value>> {
    ask(
        client,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_upstreams_are_merged_with_prefixes_and_each_call_reaches_its_own_in_both_eras() {
    let (_dir, path) = config_file(&format!("{}{}", py(""), ts(""))).unwrap();
    let server = gateway(&path).await.unwrap();
    for protocol in [
        ProtocolChoice::Legacy,
        ProtocolChoice::Version(ProtocolVersion::MODERN),
    ] {
        let client = connect(&server, protocol).await.unwrap();
        let names = tool_names(&client).await.unwrap();
        for expected in ["py_count", "ts_echo", "ts_get-sum"] {
            assert!(
                names.iter().any(|n| n == expected),
                "{protocol:?}: {expected} missing from {names:?}"
            );
        }
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("py_") || n.starts_with("ts_")),
            "{protocol:?}: every name is prefixed: {names:?}"
        );
        let counted = call(&client, "py_count", json!({"n": 3, "interval_ms": 0}))
            .await
            .unwrap();
        assert_eq!(text_of(&counted.unwrap()), "counted 3", "{protocol:?}");
        let echoed = call(&client, "ts_echo", json!({"message": "hello"}))
            .await
            .unwrap();
        assert_eq!(text_of(&echoed.unwrap()), "Echo: hello", "{protocol:?}");
        let summed = call(&client, "ts_get-sum", json!({"a": 2, "b": 40}))
            .await
            .unwrap();
        assert!(text_of(&summed.unwrap()).contains("42"), "{protocol:?}");
        // A name no upstream has, and an unprefixed one, are unknown tools.
        for unknown in ["count", "zz_count", "py_"] {
            let refused = call(&client, unknown, json!({}))
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(refused["code"], -32602, "{protocol:?} {unknown}: {refused}");
        }
    }
    let discover = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let info = discover.server_info();
    assert_eq!(info["serverInfo"]["name"], "tether-gateway", "{info}");
    assert_eq!(info["capabilities"]["tools"]["listChanged"], true, "{info}");
}

/// `tether call` of each upstream's long tool through a proxy that cuts its streams: every
/// progress value once, in order, then the result; in the 2025 era (a resumed stream) and in
/// 2026-07-28 (a task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_call_reaches_an_upstream_exactly_once_through_cuts_in_both_eras() {
    let (_dir, path) = config_file(&format!("{}{}", py(""), ts(""))).unwrap();
    let server = gateway(&path).await.unwrap();
    // Streams of many events are truncated mid-event, and resumed; `initialize` and
    // `server/discover` (whose answers carry the upstreams' long instructions) never are.
    let plan =
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(12).with_jitter(4));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let n = 150;
    let args = count_args(n, 2);
    for protocol in ["2025-11-25", "2026-07-28"] {
        let cuts_before = proxy.counters().truncations;
        let output = run_call_with_env(
            &[
                &url,
                "py_count",
                "--args",
                &args,
                "--json",
                "--protocol",
                protocol,
            ],
            &[],
        )
        .await
        .unwrap();
        let report = || {
            format!(
                "{protocol}: {}\nproxy: {}",
                describe(&output),
                proxy.report()
            )
        };
        assert_eq!(output.status.code(), Some(0), "{}", report());
        let messages = json_lines(&output.stdout).unwrap();
        let progress =
            progress_then_result(&messages, n).unwrap_or_else(|e| panic!("{e}\n{}", report()));
        assert_eq!(progress, (1..=n).collect::<Vec<_>>(), "{}", report());
        assert!(
            proxy.counters().truncations > cuts_before,
            "no cut: {}",
            report()
        );
    }
    // server-everything's long operation: 20 steps in 2 s, through the same cuts.
    let steps = 20;
    let cuts_before = proxy.counters().truncations;
    let output = run_call_with_env(
        &[
            &url,
            "ts_trigger-long-running-operation",
            "--args",
            &format!(r#"{{"duration": 2, "steps": {steps}}}"#),
            "--json",
        ],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let messages = json_lines(&output.stdout).unwrap();
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    assert_eq!(
        progress,
        (1..=steps).collect::<Vec<_>>(),
        "{}",
        describe(&output)
    );
    assert!(
        proxy.counters().truncations > cuts_before,
        "no cut: {}",
        proxy.report()
    );
    let last = messages.last().unwrap();
    assert!(
        text_of(&last["result"]).starts_with("Long running operation completed"),
        "{}",
        describe(&output)
    );
}

/// The pids of the processes whose parent is `parent` and whose command line holds `marker`.
fn children_of(parent: u32, marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) state ppid …`: the fields after the last `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_killed_mid_call_fails_only_that_call_and_starts_again_on_next_use() {
    let (_dir, path) = config_file(&format!("{}{}", py(""), ts(""))).unwrap();
    let server = gateway(&path).await.unwrap();
    let client = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let session = client.session_id();
    let long = {
        let stream = client
            .request(
                "tools/call",
                Some(json!({"name": "py_count", "arguments": {"n": 100, "interval_ms": 100}, "_meta": {"progressToken": "k"}})),
            )
            .await
            .unwrap();
        tokio::spawn(async move {
            let mut stream = stream;
            let mut progress = 0;
            while let Some(message) = stream.next().await {
                match message.unwrap() {
                    Message::Notification(_) => progress += 1,
                    Message::Response(response) => return (progress, response),
                    Message::Request(_) => {}
                }
            }
            panic!("the call's stream ended without an answer");
        })
    };
    // The session's Python child, once the call is under way.
    let mut victims = Vec::new();
    for _ in 0..100 {
        victims = children_of(server.pid(), "server.py");
        if !victims.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        victims.len(),
        1,
        "one Python child: {victims:?}\n{}",
        server.logs()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &victims[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (progress, answer) = tokio::time::timeout(Duration::from_secs(30), long)
        .await
        .expect("the killed call is answered")
        .unwrap();
    let Response::Error(error) = answer else {
        panic!("the killed call succeeded: {answer:?}");
    };
    assert!(
        (1..100).contains(&progress),
        "progress before the kill: {progress}"
    );
    assert_eq!(error.error.code, -32603, "{:?}", error.error);
    assert!(
        error.error.message.contains("upstream \"py\"") && error.error.message.contains("failed"),
        "the error names the upstream: {:?}",
        error.error
    );
    // The other upstream never noticed, the session is the same, and `py` starts again.
    let echoed = call(&client, "ts_echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(text_of(&echoed.unwrap()), "Echo: still here");
    let counted = call(&client, "py_count", json!({"n": 2, "interval_ms": 0}))
        .await
        .unwrap();
    assert_eq!(text_of(&counted.unwrap()), "counted 2", "{}", server.logs());
    assert_eq!(client.session_id(), session, "no re-initialization");
    let again = children_of(server.pid(), "server.py");
    assert!(
        again.len() == 1 && again[0] != victims[0],
        "a new Python child: {again:?}"
    );
    let failed = metric(
        &server,
        r#"tether_upstream_requests_total{upstream="py",outcome="error"} "#,
    )
    .await;
    assert_eq!(failed, Some(1.0), "the killed call is py's one failure");
    let health = ops_text(&server, "/healthz").await;
    assert!(
        health.contains("upstream py: up, 1 children")
            && health.contains("upstream ts: up, 1 children"),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_allow_rules_hide_tools_from_the_list_and_refuse_their_calls() {
    let text = format!(
        "{}{}",
        py("deny_tools = [\"count\"]"),
        ts("allow_tools = [\"echo\", \"get-*\"]\ndeny_tools = [\"get-env\"]")
    );
    let (_dir, path) = config_file(&text).unwrap();
    let server = gateway(&path).await.unwrap();
    for protocol in [
        ProtocolChoice::Legacy,
        ProtocolChoice::Version(ProtocolVersion::MODERN),
    ] {
        let client = connect(&server, protocol).await.unwrap();
        let names = tool_names(&client).await.unwrap();
        assert!(
            names.iter().any(|n| n == "ts_echo"),
            "{protocol:?}: {names:?}"
        );
        assert!(
            names.iter().any(|n| n == "ts_get-sum"),
            "{protocol:?}: {names:?}"
        );
        for hidden in [
            "py_count",
            "ts_get-env",
            "ts_trigger-long-running-operation",
        ] {
            assert!(
                !names.iter().any(|n| n == hidden),
                "{protocol:?}: {hidden} shown: {names:?}"
            );
            let refused = call(&client, hidden, json!({})).await.unwrap().unwrap_err();
            assert_eq!(refused["code"], -32602, "{protocol:?} {hidden}: {refused}");
            assert!(
                refused["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("unknown tool"),
                "{protocol:?}: a denied tool looks absent: {refused}"
            );
        }
        let echoed = call(&client, "ts_echo", json!({"message": "ok"}))
            .await
            .unwrap();
        assert_eq!(text_of(&echoed.unwrap()), "Echo: ok");
    }
}

/// The next message on the standalone stream whose method is `method`.
async fn wait_for(stream: &mut tether::client::MessageStream, method: &str) -> anyhow::Result<()> {
    tokio::time::timeout(RELOAD_WAIT, async {
        while let Some(message) = stream.next().await {
            if let Message::Notification(n) = message?
                && n.method == method
            {
                return Ok(());
            }
        }
        anyhow::bail!("the standalone stream ended")
    })
    .await
    .with_context(|| format!("no {method} within {RELOAD_WAIT:?}"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_upstreams_tells_the_session_and_a_bad_file_keeps_the_old() {
    let (_dir, path) = config_file(&py("")).unwrap();
    let server = gateway(&path).await.unwrap();
    let client = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let mut messages = client.server_messages().unwrap();
    let names = tool_names(&client).await.unwrap();
    assert!(names.iter().all(|n| n.starts_with("py_")), "{names:?}");

    // The file changes: `ts` is added, and the live session hears of it.
    std::fs::write(&path, format!("{}{}", py(""), ts(""))).unwrap();
    wait_for(&mut messages, "notifications/tools/list_changed")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.logs()));
    let names = tool_names(&client).await.unwrap();
    assert!(names.iter().any(|n| n == "ts_echo"), "added: {names:?}");
    let echoed = call(&client, "ts_echo", json!({"message": "new"}))
        .await
        .unwrap();
    assert_eq!(text_of(&echoed.unwrap()), "Echo: new", "{}", server.logs());

    // A bad file is refused, logged, and the upstreams in use are kept.
    std::fs::write(&path, format!("{}{}", py(""), py(""))).unwrap();
    let deadline = tokio::time::Instant::now() + RELOAD_WAIT;
    while !server.logs().contains("config not reloaded") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refusal logged:\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        server.logs().contains("two upstreams are named"),
        "{}",
        server.logs()
    );
    let echoed = call(&client, "ts_echo", json!({"message": "kept"}))
        .await
        .unwrap();
    assert_eq!(text_of(&echoed.unwrap()), "Echo: kept");

    // SIGHUP reloads too: `ts` removed (the file written with the same mtime second would
    // also be seen by its content; the signal makes it at once).
    std::fs::write(&path, py("")).unwrap();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for(&mut messages, "notifications/tools/list_changed")
        .await
        .unwrap();
    let names = tool_names(&client).await.unwrap();
    assert!(
        names.iter().all(|n| n.starts_with("py_")),
        "removed: {names:?}"
    );
    let refused = call(&client, "ts_echo", json!({"message": "gone"}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused["code"], -32602, "{refused}");
    let counted = call(&client, "py_count", json!({"n": 1, "interval_ms": 0}))
        .await
        .unwrap();
    assert_eq!(text_of(&counted.unwrap()), "counted 1");
    assert!(
        server.logs().contains("config reloaded"),
        "{}",
        server.logs()
    );
}

/// Runs `tether serve ARGS` expecting it to exit at once.
async fn serve_exits(args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(tether_bin().unwrap())
        .arg("serve")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("tether serve exits")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_config_files_exit_2_naming_the_file_line_and_key() {
    let command = "command = [\"true\"]";
    let cases = [
        (
            format!("[[upstream]]\nname = \"a\"\n{command}\nrestart = \"always\"\n"),
            4,
            "restart",
        ),
        (
            format!(
                "[[upstream]]\nname = \"a\"\n{command}\n\n[[upstream]]\nname = \"a_b\"\n{command}\n"
            ),
            6,
            "collide",
        ),
        (
            "[[upstream]]\nname = \"remote\"\nurl = \"ftp://127.0.0.1:9/mcp\"\n".to_owned(),
            3,
            "url",
        ),
        (
            format!("[serve]\nstore = \"postgres://x\"\n\n[[upstream]]\nname = \"a\"\n{command}\n"),
            2,
            "store",
        ),
        (
            format!("[serve]\ncolour = \"blue\"\n\n[[upstream]]\nname = \"a\"\n{command}\n"),
            2,
            "colour",
        ),
        (
            format!("[serve]\njson-response = \"yes\"\n\n[[upstream]]\nname = \"a\"\n{command}\n"),
            2,
            "json-response",
        ),
    ];
    for (text, line, key) in cases {
        let (dir, path) = config_file(&text).unwrap();
        let output =
            serve_exits(&["--bind", "127.0.0.1:0", "--config", path.to_str().unwrap()]).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}\n{stderr}");
        let at = format!("{}:{line}:", path.display());
        assert!(
            stderr.contains(&at) && stderr.contains(key),
            "{text}\nwanted {at} and {key}: {stderr}"
        );
        drop(dir);
    }
    let (_dir, path) = config_file(&format!("[[upstream]]\nname = \"a\"\n{command}\n")).unwrap();
    let output = serve_exits(&["--config", path.to_str().unwrap(), "--", "true"]).await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_table_sets_flags_and_the_command_line_wins() {
    let text = format!(
        "[serve]\npath = \"/from-file\"\nstore = \"memory\"\n\n{}",
        py("")
    );
    let (_dir, path) = config_file(&text).unwrap();
    let spec = ServerSpec::tether_serve()
        .unwrap()
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--config"])
        .arg(&path);
    let data_dir = spec.data_dir().unwrap().to_owned();
    let server = spec.start().await.unwrap();
    assert!(server.url().ends_with("/from-file"), "{}", server.url());
    let client = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    assert!(
        tool_names(&client)
            .await
            .unwrap()
            .iter()
            .any(|n| n == "py_count")
    );
    // `store = "memory"`: the default SQLite file was never made.
    assert!(!data_dir.join("tether.db").exists(), "the store is memory");
    drop(client);
    drop(server);
    let server = ServerSpec::tether_serve()
        .unwrap()
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--path", "/from-flag", "--config"])
        .arg(&path)
        .start()
        .await
        .unwrap();
    assert!(server.url().ends_with("/from-flag"), "{}", server.url());
    ensure_serves(&server).await.unwrap();
}

async fn ensure_serves(server: &ServerProcess) -> anyhow::Result<()> {
    let client = connect(server, ProtocolChoice::Legacy).await?;
    let names = tool_names(&client).await?;
    ensure!(names.iter().any(|n| n == "py_count"), "{names:?}");
    Ok(())
}

/// The `progress` values of the progress notifications a call's stream carried (rmcp writes
/// them as floats), and its final answer.
async fn progress_and_answer(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<(Vec<u64>, Result<Value, Value>)> {
    let params = json!({"name": tool, "arguments": arguments, "_meta": {"progressToken": "p"}});
    let mut stream = client.request("tools/call", Some(params)).await?;
    let mut progress = Vec::new();
    while let Some(message) = stream.next().await {
        match message? {
            Message::Notification(n) if n.method == "notifications/progress" => {
                let value = n.params.unwrap_or_default()["progress"]
                    .as_f64()
                    .context("a progress value")?;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                progress.push(value as u64);
            }
            Message::Response(Response::Result(answer)) => {
                return Ok((progress, Ok(answer.result)));
            }
            Message::Response(Response::Error(error)) => {
                return Ok((progress, Err(serde_json::to_value(&error.error)?)));
            }
            _ => {}
        }
    }
    anyhow::bail!("the stream ended without an answer")
}

/// Three remote upstreams beside a stdio one: rmcp 3.11.0 over HTTP, a `tether serve` demo
/// that requires a bearer token (which only the upstream's own `bearer_token_file` holds:
/// the caller sends none), and one nobody listens at. Tools of the reachable ones are merged
/// and called in both eras, a call's progress reaches the caller exactly once through cuts,
/// and the unreachable one fails only its own calls, typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_upstreams_are_reached_through_tethers_client_with_their_own_credentials() {
    let rmcp = peers::rmcp_server("legacy").unwrap().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("demo.tokens"), "gateway:s3cret-token\n").unwrap();
    std::fs::write(dir.path().join("demo.token"), "s3cret-token\n").unwrap();
    let demo = ServerSpec::tether_serve()
        .unwrap()
        .args(["--store", "memory", "--auth-token-file"])
        .arg(dir.path().join("demo.tokens"))
        .start()
        .await
        .unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let text = format!(
        "{}[[upstream]]\nname = \"rs\"\nurl = {}\n\n[[upstream]]\nname = \"demo\"\nurl = {}\nbearer_token_file = \"demo.token\"\n\n[[upstream]]\nname = \"gone\"\nurl = {}\n",
        py(""),
        quoted(rmcp.url()),
        quoted(demo.url()),
        quoted(&nobody)
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    let server = gateway(&path).await.unwrap();
    let plan =
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(12).with_jitter(4));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();

    let cut = Client::connect(
        &proxy.url_for("/mcp"),
        client_config(ProtocolChoice::Legacy),
    )
    .await
    .unwrap();
    let n = 120;
    let (progress, answer) =
        progress_and_answer(&cut, "rs_count", json!({"n": n, "interval_ms": 2}))
            .await
            .unwrap();
    assert_eq!(text_of(&answer.unwrap()), format!("counted {n}"));
    assert_eq!(
        progress,
        (1..=n).collect::<Vec<_>>(),
        "proxy: {}",
        proxy.report()
    );
    assert!(
        proxy.counters().truncations >= 1,
        "no cut: {}",
        proxy.report()
    );

    for protocol in [
        ProtocolChoice::Legacy,
        ProtocolChoice::Version(ProtocolVersion::MODERN),
    ] {
        let client = connect(&server, protocol).await.unwrap();
        let names = tool_names(&client).await.unwrap();
        for expected in ["py_count", "rs_count", "demo_count", "demo_echo"] {
            assert!(
                names.iter().any(|n| n == expected),
                "{protocol:?}: {expected} missing: {names:?}\n{}",
                server.logs()
            );
        }
        assert!(!names.iter().any(|n| n.starts_with("gone_")), "{names:?}");
        let counted = call(&client, "rs_count", json!({"n": 3})).await.unwrap();
        assert_eq!(text_of(&counted.unwrap()), "counted 3", "{protocol:?}");
        let counted = call(&client, "demo_count", json!({"n": 2, "interval_ms": 0}))
            .await
            .unwrap();
        assert_eq!(
            text_of(&counted.unwrap()),
            "counted 2",
            "{protocol:?}: the upstream's token was sent"
        );
        let failed = call(&client, "gone_count", json!({}))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(failed["code"], -32603, "{protocol:?}: {failed}");
        assert!(
            failed["message"]
                .as_str()
                .unwrap_or("")
                .contains("upstream \"gone\""),
            "{protocol:?}: {failed}"
        );
        assert_eq!(
            failed["data"]["reason"], "unreachable",
            "{protocol:?}: {failed}"
        );
        let counted = call(&client, "py_count", json!({"n": 1, "interval_ms": 0}))
            .await
            .unwrap();
        assert_eq!(text_of(&counted.unwrap()), "counted 1", "{protocol:?}");
    }
    // Operators see each upstream: the dead one down with why, the others up.
    let health = ops_text(&server, "/healthz").await;
    assert!(health.starts_with("ok\n"), "{health}");
    assert!(health.contains("upstream rs: up"), "{health}");
    assert!(health.contains("upstream py: up"), "{health}");
    assert!(health.contains("upstream gone: down: "), "{health}");
    assert_eq!(
        metric(&server, r#"tether_upstream_up{upstream="gone"} "#).await,
        Some(0.0)
    );
    assert_eq!(
        metric(&server, r#"tether_upstream_up{upstream="rs"} "#).await,
        Some(1.0)
    );
    let gone = metric(
        &server,
        r#"tether_upstream_requests_total{upstream="gone",outcome="error"} "#,
    )
    .await;
    assert!(gone >= Some(2.0), "every gone_count failed: {gone:?}");
    let rs = metric(
        &server,
        r#"tether_upstream_requests_total{upstream="rs",outcome="ok"} "#,
    )
    .await;
    assert!(rs >= Some(3.0), "rs answered: {rs:?}");
}

/// The body of `GET path` (`/metrics`, `/healthz`) on the gateway.
async fn ops_text(server: &ServerProcess, path: &str) -> String {
    let raw = tether_testkit::raw::RawClient::new(server.url()).unwrap();
    let answer = raw
        .send(
            &tether_testkit::raw::RawRequest::new("GET", path)
                .header("host", &server.addr().to_string()),
        )
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{path}");
    String::from_utf8_lossy(&answer.body).into_owned()
}

/// The value of the `/metrics` line that starts with `series` (name and labels).
async fn metric(server: &ServerProcess, series: &str) -> Option<f64> {
    ops_text(server, "/metrics")
        .await
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// `tether_rate_limited_total` on the gateway's `/metrics`.
async fn rate_limited(server: &ServerProcess) -> u64 {
    let text = ops_text(server, "/metrics").await;
    text.lines()
        .find_map(|line| line.strip_prefix("tether_rate_limited_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no tether_rate_limited_total in {text}"))
}

/// `rate-limit = "2/2s"` in `[serve]`: a third call at once gets 429 with `Retry-After` and
/// a JSON-RPC error, having run nothing; tether's client waits it out and every call of a
/// quick run succeeds, while the gateway counts the refusals it waited through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_answers_429_with_retry_after_and_tethers_client_waits_and_succeeds() {
    let text = format!("[serve]\nrate-limit = \"2/2s\"\n\n{}", py(""));
    let (_dir, path) = config_file(&text).unwrap();
    let server = gateway(&path).await.unwrap();
    let mut raw = tether_testkit::raw::RawClient::new(server.url())
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    raw.initialize().await.unwrap();
    let mut statuses = Vec::new();
    let mut refusal = None;
    for _ in 0..3 {
        let (_, response) = raw
            .call_tool("py_count", json!({"n": 1, "interval_ms": 0}), None)
            .await
            .unwrap();
        let transcript = response.read_to_end().await.unwrap();
        statuses.push(transcript.status);
        if transcript.status == 429 {
            refusal = Some(transcript);
        }
    }
    assert_eq!(statuses, [200, 200, 429]);
    let refusal = refusal.unwrap();
    let after: u64 = refusal
        .headers
        .get("Retry-After")
        .and_then(|value| value.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=2).contains(&after), "Retry-After {after}");
    let body = refusal.json().unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rate limit"),
        "{body}"
    );
    // Neither ping nor a resume is limited.
    let pinged = raw
        .post_request("ping", json!({}))
        .await
        .unwrap()
        .1
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(pinged.status, 200);

    let before = rate_limited(&server).await;
    assert_eq!(before, 1);
    let client = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    for i in 0..5 {
        let counted = call(&client, "py_count", json!({"n": 1, "interval_ms": 0}))
            .await
            .unwrap();
        assert_eq!(text_of(&counted.unwrap()), "counted 1", "call {i}");
    }
    let legacy = rate_limited(&server).await;
    assert!(
        legacy > before,
        "five calls in a row at 2 per 2 s were refused at least once, and waited out"
    );
    // A 2026-07-28 request is limited alike, and waited out alike.
    let modern = connect(&server, ProtocolChoice::Version(ProtocolVersion::MODERN))
        .await
        .unwrap();
    for i in 0..4 {
        let counted = call(&modern, "py_count", json!({"n": 1, "interval_ms": 0}))
            .await
            .unwrap();
        assert_eq!(text_of(&counted.unwrap()), "counted 1", "modern call {i}");
    }
    assert!(
        rate_limited(&server).await > legacy,
        "modern calls were limited too"
    );
}

/// `children = "shared"`: every caller's requests, two legacy sessions' and a 2026-07-28
/// client's, go to one Python child, which sees the gateway's ids and progress tokens; two
/// calls at once with the same request id and progress token each get their own progress,
/// and a session's end leaves the child to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_upstream_serves_every_caller_from_one_child() {
    let (_dir, path) = config_file(&format!("{}{}", py("children = \"shared\""), ts(""))).unwrap();
    let server = gateway(&path).await.unwrap();
    let a = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let b = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let modern = connect(&server, ProtocolChoice::Version(ProtocolVersion::MODERN))
        .await
        .unwrap();
    let n = 20;
    let arguments = json!({"n": n, "interval_ms": 20});
    let (first, second, third) = tokio::join!(
        progress_and_answer(&a, "py_count", arguments.clone()),
        progress_and_answer(&b, "py_count", arguments.clone()),
        progress_and_answer(&modern, "py_count", arguments.clone()),
    );
    for (who, run) in [("a", first), ("b", second), ("modern", third)] {
        let (progress, answer) = run.unwrap();
        assert_eq!(text_of(&answer.unwrap()), format!("counted {n}"), "{who}");
        assert_eq!(
            progress,
            (1..=n).collect::<Vec<_>>(),
            "{who}: its own progress, once"
        );
    }
    let children = children_of(server.pid(), "server.py");
    assert_eq!(
        children.len(),
        1,
        "one Python child for everyone: {children:?}"
    );
    a.close().await.unwrap();
    let counted = call(&b, "py_count", json!({"n": 1, "interval_ms": 0}))
        .await
        .unwrap();
    assert_eq!(text_of(&counted.unwrap()), "counted 1");
    assert_eq!(
        children_of(server.pid(), "server.py"),
        children,
        "the same child"
    );
    // The other upstream, a child per session, is unaffected.
    let echoed = call(&b, "ts_echo", json!({"message": "x"})).await.unwrap();
    assert_eq!(text_of(&echoed.unwrap()), "Echo: x");
}

/// Two nodes sharing one Redis, each loading the same file: a legacy session made on node A,
/// whose children run there, is called through node B; B hands the POSTs to A, and the calls
/// of both upstreams complete with every progress event once, while no child ever starts on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_nodes_a_call_posted_to_the_node_without_the_child_completes_once() {
    let redis = tether_testkit::redis::RedisServer::start().await.unwrap();
    let (_dir, path) = config_file(&format!("{}{}", py(""), ts(""))).unwrap();
    let node = |name: &'static str| {
        ServerSpec::tether_serve()
            .unwrap()
            .bind_arg(BindArg::Placeholders)
            .args([
                "--bind",
                "{bind}",
                "--store",
                &redis.url(),
                "--node-id",
                name,
                "--config",
            ])
            .arg(&path)
            .ready_timeout(Duration::from_secs(60))
            .start()
    };
    let a = node("node-a").await.unwrap();
    let b = node("node-b").await.unwrap();
    let mut on_a = tether_testkit::raw::RawClient::new(a.url())
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    on_a.initialize().await.unwrap();
    let mut on_b = tether_testkit::raw::RawClient::new(b.url())
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let n = 10;
    let (_, response) = on_b
        .call_tool(
            "py_count",
            json!({"n": n, "interval_ms": 20}),
            Some(json!("t")),
        )
        .await
        .unwrap();
    assert_eq!(response.headers().get("tether-node"), Some("node-b"));
    let transcript = response.read_to_end().await.unwrap();
    assert_eq!(transcript.status, 200, "{transcript:?}");
    let messages: Vec<Value> = transcript
        .messages()
        .unwrap()
        .into_iter()
        .map(|(_, message)| message)
        .collect();
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    assert_eq!(progress, (1..=n).collect::<Vec<_>>(), "{messages:?}");
    assert_eq!(
        text_of(&messages.last().unwrap()["result"]),
        format!("counted {n}")
    );
    let (_, echoed) = on_b
        .call_tool("ts_echo", json!({"message": "via b"}), None)
        .await
        .unwrap();
    let echoed = echoed.read_to_end().await.unwrap();
    let answer = echoed.messages().unwrap().pop().unwrap().1;
    assert_eq!(text_of(&answer["result"]), "Echo: via b", "{answer}");
    assert_eq!(
        children_of(a.pid(), "server.py").len(),
        1,
        "the session's child, on A"
    );
    assert!(children_of(b.pid(), "server.py").is_empty(), "none on B");
}

/// The TypeScript SDK v2 client's JSON lines: the version it settled on, the tools it
/// listed, its progress values and its result text.
async fn ts_v2(url: &str, n: u64, extra: &[&str]) -> (String, Vec<String>, Vec<u64>, String) {
    let command = peers::ts_client_2026(url, n).unwrap().with_args(
        ["--tool", "py_count", "--interval-ms", "10"]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned()),
    );
    let output = command.run(Duration::from_secs(90)).await.unwrap();
    let context = format!("{command}\n{}\n{}", output.stdout, output.stderr);
    assert!(output.status.success(), "{context}");
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
    let tools = event("tools").next().expect(&context)["names"]
        .as_array()
        .expect(&context)
        .iter()
        .filter_map(|name| name.as_str().map(str::to_owned))
        .collect();
    let progress = event("progress")
        .map(|line| line["progress"].as_u64().expect(&context))
        .collect();
    let result = event("result").next().expect(&context)["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (version, tools, progress, result)
}

/// The TypeScript SDK v2 client through the federation: pinned to 2026-07-28 it lists the
/// merged tools and counts through the Python upstream; in `auto` mode against a gateway
/// whose `[serve]` says `eras = "legacy"` it takes a 2025 session, and through a proxy that
/// truncates its streams every few events it gets every progress value once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_v2_client_counts_through_the_federation_in_both_eras() {
    let n = 30;
    let (_dir, path) = config_file(&format!("{}{}", py(""), ts(""))).unwrap();
    let server = gateway(&path).await.unwrap();
    let (version, tools, progress, result) = ts_v2(server.url(), n, &[]).await;
    assert_eq!(version, "2026-07-28");
    assert!(
        tools.iter().any(|t| t == "py_count") && tools.iter().any(|t| t == "ts_echo"),
        "{tools:?}"
    );
    assert_eq!(progress, (1..=n).collect::<Vec<_>>());
    assert_eq!(result, format!("counted {n}"));

    let text = format!("[serve]\neras = \"legacy\"\n\n{}{}", py(""), ts(""));
    let (_legacy_dir, legacy_path) = config_file(&text).unwrap();
    let legacy = gateway(&legacy_path).await.unwrap();
    let plan =
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(8).with_jitter(2));
    let proxy = FaultProxy::start(legacy.addr(), plan).await.unwrap();
    let (version, _, progress, result) = ts_v2(&proxy.url_for("/mcp"), n, &["--auto"]).await;
    let context = proxy.report();
    assert_eq!(version, "2025-11-25", "{context}");
    assert_eq!(
        progress,
        (1..=n).collect::<Vec<_>>(),
        "once each, in order: {context}"
    );
    assert_eq!(result, format!("counted {n}"), "{context}");
    assert!(proxy.counters().truncations >= 1, "no cut: {context}");
}

/// Limits per upstream: `max_in_flight = 1` refuses a second call while the first runs, with
/// -32603 and `data.reason` `busy`, and serves the next once it ended; `max_children = 1`
/// refuses a second session's child (that session's other upstreams serve it), until the
/// first session ends and frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_per_upstream_refuse_as_busy_and_free_up() {
    let text = format!("{}{}", py("max_in_flight = 1\nmax_children = 1"), ts(""));
    let (_dir, path) = config_file(&text).unwrap();
    let server = gateway(&path).await.unwrap();
    let a = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let long = a
        .request(
            "tools/call",
            Some(json!({"name": "py_count", "arguments": {"n": 10, "interval_ms": 100}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = call(&a, "py_count", json!({"n": 1, "interval_ms": 0}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused["code"], -32603, "{refused}");
    assert_eq!(refused["data"]["reason"], "busy", "{refused}");
    let Response::Result(done) = long.response().await.unwrap() else {
        panic!("the first call was answered");
    };
    assert_eq!(text_of(&done.result), "counted 10");
    let counted = call(&a, "py_count", json!({"n": 1, "interval_ms": 0}))
        .await
        .unwrap();
    assert_eq!(text_of(&counted.unwrap()), "counted 1", "free again");

    // A second session: `py` has its one child already, `ts` serves it.
    let b = connect(&server, ProtocolChoice::Legacy).await.unwrap();
    let refused = call(&b, "py_count", json!({"n": 1, "interval_ms": 0}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused["data"]["reason"], "busy", "{refused}");
    let echoed = call(&b, "ts_echo", json!({"message": "b"})).await.unwrap();
    assert_eq!(text_of(&echoed.unwrap()), "Echo: b");
    a.close().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let counted = loop {
        let answer = call(&b, "py_count", json!({"n": 1, "interval_ms": 0}))
            .await
            .unwrap();
        if answer.is_ok() || tokio::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        text_of(&counted.unwrap()),
        "counted 1",
        "the child freed by a's end"
    );
}
