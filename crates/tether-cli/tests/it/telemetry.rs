//! OpenTelemetry export (docs/TELEMETRY.md) against an OTLP receiver built on the official
//! protobuf definitions (`interop/otel/receiver.py`): `tether call` through a fault proxy is
//! one trace from the client span through the server span and the resumes; a trace the Python
//! SDK client starts runs through tether's gateway into the Python stdio server; a failed call
//! carries `error.type`; the four histograms arrive; each of the three OTLP encodings
//! delivers; a collector that hangs or fails slows and breaks nothing, and what it costs in
//! spans is counted on `/metrics`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::call::{describe, run_call_with_env as run_call};
use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use tether_testkit::launcher::{BindArg, ServerProcess, ServerSpec, tether_bin};
use tether_testkit::peers::{self, interop_dir};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tether_testkit::raw::RawClient;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// Bound on any one command; generous for a loaded two-core machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the spans of a finished request may take to reach the receiver: the server's
/// batch delay is set to 100 ms below, so this is only slack for a loaded machine.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(30);

/// OTLP span kinds.
const SERVER: u64 = 2;
const CLIENT: u64 = 3;
/// OTLP status code ERROR.
const STATUS_ERROR: u64 = 2;

/// `interop/otel/receiver.py`, running until dropped.
struct Receiver {
    _child: Child,
    http: String,
    grpc: String,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    async fn start(mode: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("otlp.jsonl");
        let mut child = Command::new(peers::python()?)
            .arg(interop_dir().join("otel/receiver.py"))
            .arg(&out)
            .args(["--mode", mode])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the OTLP receiver")?;
        let stdout = child.stdout.take().context("receiver stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("the receiver did not start")??
            .context("the receiver exited")?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name))
                .map(str::to_owned)
                .with_context(|| format!("no {name} in {line:?}"))
        };
        Ok(Self {
            http: field("http=")?,
            grpc: field("grpc=")?,
            _child: child,
            out,
            _dir: dir,
        })
    }

    /// Every span and metric received so far.
    fn received(&self) -> anyhow::Result<Vec<Value>> {
        let text = match std::fs::read_to_string(&self.out) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error.into()),
        };
        text.lines()
            .map(|line| serde_json::from_str(line).with_context(|| format!("{line:?}")))
            .collect()
    }

    fn spans(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .received()?
            .into_iter()
            .filter(|item| item["signal"] == "span")
            .collect())
    }

    /// Waits until `done` holds for what was received, and returns that.
    async fn until(
        &self,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let deadline = Instant::now() + ARRIVAL_TIMEOUT;
        loop {
            let received = self.received()?;
            if done(&received) {
                return Ok(received);
            }
            if Instant::now() > deadline {
                bail!("{what} did not arrive; received:\n{}", lines(&received));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn lines(items: &[Value]) -> String {
    items.iter().map(|item| format!("{item}\n")).collect()
}

/// The environment that makes a tether command or a Python peer export to `endpoint`.
fn otel_env(endpoint: &str, protocol: &str, service: &str) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), protocol.into()),
        ("OTEL_SERVICE_NAME".into(), service.into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL".into(), "300".into()),
    ]
}

fn with_env(mut spec: ServerSpec, env: &[(String, String)]) -> ServerSpec {
    for (key, value) in env {
        spec = spec.env(key, value);
    }
    spec
}

/// `tether serve` (the demo on its default store) exporting to `receiver` over HTTP/protobuf.
async fn exporting_server(
    receiver: &Receiver,
    extra: &[(&str, &str)],
) -> anyhow::Result<ServerProcess> {
    let mut spec = with_env(
        ServerSpec::tether_serve()?,
        &otel_env(&receiver.http, "http/protobuf", "tether-server"),
    );
    for (key, value) in extra {
        spec = spec.env(key, value);
    }
    Ok(spec.start().await?)
}

fn named<'a>(spans: &'a [Value], service: &str, name: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|span| {
            span["signal"] == "span" && span["service"] == service && span["name"] == name
        })
        .collect()
}

/// The one span `service` sent under `name`; panics, showing what arrived, if not one.
fn the_span<'a>(received: &'a [Value], service: &str, name: &str) -> &'a Value {
    match named(received, service, name)[..] {
        [one] => one,
        ref spans => panic!(
            "{} spans {name:?} of {service}, not one:\n{}",
            spans.len(),
            lines(received)
        ),
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// A 2025-era `tools/call count` through a proxy that cuts its stream: the client's span and
/// the server's are one trace, the server's the child of the client's, with the MCP
/// attributes; the client's reconnects are its events; each resume is a `tether.resume`
/// span in the same trace with the events it replayed; and the four histograms arrive.
#[tokio::test]
async fn a_cut_call_is_one_trace_from_the_client_through_the_server_and_its_resumes() {
    let receiver = Receiver::start("ok").await.unwrap();
    let server = exporting_server(&receiver, &[]).await.unwrap();
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1500));
    let proxy = FaultProxy::start(server.addr(), plan).await.unwrap();
    let url = proxy.url_for("/mcp");
    let env = otel_env(&receiver.grpc, "grpc", "tether-call");
    let output = run_call(
        &[
            &url,
            "count",
            "--args",
            r#"{"n":200}"#,
            "--json",
            "--protocol",
            "legacy",
        ],
        &env,
    )
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(proxy.counters().cuts >= 1, "no cut: {}", proxy.report());

    let received = receiver
        .until(
            "the client span, the server span and the four histograms",
            |items| {
                let spans: Vec<Value> = items.to_vec();
                let metric = |name: &str| {
                    items
                        .iter()
                        .any(|i| i["signal"] == "metric" && i["name"] == name)
                };
                !named(&spans, "tether-call", "tools/call count").is_empty()
                    && !named(&spans, "tether-server", "tools/call count").is_empty()
                    && !named(&spans, "tether-server", "tether.resume").is_empty()
                    && metric("mcp.client.operation.duration")
                    && metric("mcp.client.session.duration")
                    && metric("mcp.server.operation.duration")
                    && metric("mcp.server.session.duration")
            },
        )
        .await
        .unwrap();
    let client = the_span(&received, "tether-call", "tools/call count");
    let server_span = the_span(&received, "tether-server", "tools/call count");
    let trace = &client["trace_id"];
    assert_eq!(client["kind"], CLIENT, "{client}");
    assert_eq!(client["protocol"], "grpc");
    assert_eq!(server_span["kind"], SERVER, "{server_span}");
    assert_eq!(server_span["protocol"], "http/protobuf");
    assert_eq!(
        &server_span["trace_id"],
        trace,
        "one trace:\n{}",
        lines(&received)
    );
    assert_eq!(server_span["parent_span_id"], client["span_id"]);
    for span in [client, server_span] {
        assert_eq!(attribute(span, "mcp.method.name"), "tools/call", "{span}");
        assert_eq!(attribute(span, "gen_ai.tool.name"), "count", "{span}");
        assert_eq!(
            attribute(span, "gen_ai.operation.name"),
            "execute_tool",
            "{span}"
        );
        assert_eq!(
            attribute(span, "mcp.protocol.version"),
            "2025-11-25",
            "{span}"
        );
        assert_eq!(attribute(span, "network.transport"), "tcp", "{span}");
        assert!(
            attribute(span, "error.type").is_null(),
            "a success has no error.type: {span}"
        );
    }
    assert!(attribute(client, "mcp.session.id").is_string(), "{client}");
    assert_eq!(
        attribute(client, "mcp.session.id"),
        attribute(server_span, "mcp.session.id")
    );

    let reconnects: Vec<&Value> = client["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["name"] == "tether.reconnect")
        .collect();
    assert!(
        !reconnects.is_empty(),
        "no reconnect events on the client span: {client}"
    );
    assert!(
        reconnects
            .iter()
            .any(|event| event["attributes"]["tether.resume.last_event_id"].is_string()),
        "no reconnect names its Last-Event-ID: {client}"
    );
    let resumes = named(&received, "tether-server", "tether.resume");
    for resume in &resumes {
        assert_eq!(
            &resume["trace_id"], trace,
            "a resume outside the call's trace: {resume}"
        );
        assert_eq!(resume["parent_span_id"], client["span_id"], "{resume}");
        let last = attribute(resume, "tether.resume.last_event_id")
            .as_str()
            .unwrap_or_default();
        assert!(last.contains(':'), "not an event id: {resume}");
        let replayed = attribute(resume, "tether.resume.events_replayed").as_i64();
        let sent = attribute(resume, "tether.resume.events_sent").as_i64();
        assert!(
            replayed
                .zip(sent)
                .is_some_and(|(replayed, sent)| replayed <= sent),
            "a resume replays part of what it sends: {resume}"
        );
        assert!(attribute(resume, "tether.node.id").is_string(), "{resume}");
    }
    // The stream holds the priming event (seq 0), then one event per line the call printed
    // (200 progress notifications and the result). The resume that reached the end started
    // after some seq and sent every event from there on.
    let last_seq = String::from_utf8_lossy(&output.stdout).lines().count() as i64;
    let reached = resumes
        .iter()
        .filter_map(|resume| {
            let after = attribute(resume, "tether.resume.last_event_id")
                .as_str()?
                .rsplit_once(':')?
                .1
                .parse::<i64>()
                .ok()?;
            Some(after + attribute(resume, "tether.resume.events_sent").as_i64()?)
        })
        .max();
    assert_eq!(
        reached,
        Some(last_seq),
        "no resume's count reaches the stream's end:\n{}",
        lines(&received)
    );
}

/// A `tools/call` the Python SDK client starts, with its own OpenTelemetry SDK exporting,
/// continues through tether's gateway into the Python SDK stdio server behind it: three
/// services, one trace, each span the child of the one before.
#[tokio::test]
async fn a_python_sdk_trace_runs_through_the_gateway_into_the_python_stdio_server() {
    let receiver = Receiver::start("ok").await.unwrap();
    let with_otel = interop_dir().join("otel/with_otel.py");
    let python = peers::python().unwrap();
    let server_py = interop_dir().join("python/server.py");
    let spec = ServerSpec::tether_serve()
        .unwrap()
        .bind_arg(BindArg::Placeholders)
        .args([
            "--bind",
            "{bind}",
            "--",
            "env",
            "OTEL_SERVICE_NAME=python-server",
        ])
        .arg(&python)
        .arg(&with_otel)
        .arg(&server_py)
        .arg("--stdio");
    let server = with_env(
        spec,
        &otel_env(&receiver.http, "http/protobuf", "tether-gateway"),
    )
    .start()
    .await
    .unwrap();
    let client = peers::python_client(server.url(), 3)
        .unwrap()
        .into_command_line();
    let mut command = Command::new(&python);
    command
        .arg(&with_otel)
        .args(&client[1..])
        .envs(
            otel_env(&receiver.http, "http/protobuf", "python-client")
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("counted 3"),
        "{}",
        describe(&output)
    );

    let received = receiver
        .until("the spans of all three services", |items| {
            !named(items, "python-client", "MCP send tools/call count").is_empty()
                && !named(items, "tether-gateway", "tools/call count").is_empty()
                && !named(items, "python-server", "tools/call count").is_empty()
        })
        .await
        .unwrap();
    let caller = the_span(&received, "python-client", "MCP send tools/call count");
    let gateway = the_span(&received, "tether-gateway", "tools/call count");
    let tool = the_span(&received, "python-server", "tools/call count");
    assert_eq!(
        caller["trace_id"],
        gateway["trace_id"],
        "{}",
        lines(&received)
    );
    assert_eq!(
        gateway["trace_id"],
        tool["trace_id"],
        "{}",
        lines(&received)
    );
    assert_eq!(gateway["parent_span_id"], caller["span_id"]);
    assert_eq!(tool["parent_span_id"], gateway["span_id"]);
    assert_eq!(attribute(tool, "gen_ai.tool.name"), "count");
}

/// A call the server refuses: both spans carry `error.type` (the JSON-RPC code on the
/// server, which also gives `rpc.response.status_code`) and an error status.
#[tokio::test]
async fn a_failed_call_carries_error_type_on_both_sides() {
    let receiver = Receiver::start("ok").await.unwrap();
    let server = exporting_server(&receiver, &[]).await.unwrap();
    let env = otel_env(&receiver.http, "http/json", "tether-call");
    let output = run_call(
        &[
            server.url(),
            "no_such_tool",
            "--json",
            "--protocol",
            "legacy",
        ],
        &env,
    )
    .await
    .unwrap();
    assert_ne!(output.status.code(), Some(0), "{}", describe(&output));
    let received = receiver
        .until("both spans of the failed call", |items| {
            !named(items, "tether-call", "tools/call no_such_tool").is_empty()
                && !named(items, "tether-server", "tools/call no_such_tool").is_empty()
        })
        .await
        .unwrap();
    let server_span = the_span(&received, "tether-server", "tools/call no_such_tool");
    let client = the_span(&received, "tether-call", "tools/call no_such_tool");
    assert_eq!(client["protocol"], "http/json");
    let code = attribute(server_span, "rpc.response.status_code")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(code.starts_with('-'), "no JSON-RPC code: {server_span}");
    assert_eq!(
        attribute(server_span, "error.type"),
        code.as_str(),
        "{server_span}"
    );
    assert_eq!(server_span["status"], STATUS_ERROR, "{server_span}");
    assert!(attribute(client, "error.type").is_string(), "{client}");
    assert_eq!(client["status"], STATUS_ERROR, "{client}");
}

/// `tether_telemetry_spans_dropped_total` on the server's `/metrics`.
async fn spans_dropped(server: &ServerProcess) -> anyhow::Result<u64> {
    let metrics = RawClient::new(&server.url().replace("/mcp", "/metrics"))?;
    let scraped = metrics
        .send(&metrics.request("GET"))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        scraped.status == 200,
        "/metrics answered {}",
        scraped.status
    );
    let body = String::from_utf8_lossy(&scraped.body).into_owned();
    body.lines()
        .find_map(|line| line.strip_prefix("tether_telemetry_spans_dropped_total "))
        .with_context(|| format!("no dropped-spans counter in:\n{body}"))?
        .trim()
        .parse()
        .context("the counter's value")
}

/// A collector that accepts and never answers, or answers every export with a failure:
/// calls still succeed, the spans that could not go out are counted on `/metrics` rather
/// than held, `tether call` exits within its flush bound, and the server stops on SIGTERM.
#[tokio::test]
async fn a_hanging_or_failing_collector_breaks_nothing_and_its_losses_are_counted() {
    for (mode, protocol) in [
        ("hang", "grpc"),
        ("hang", "http/protobuf"),
        ("error", "http/protobuf"),
    ] {
        let receiver = Receiver::start(mode).await.unwrap();
        let endpoint = if protocol == "grpc" {
            &receiver.grpc
        } else {
            &receiver.http
        };
        let mut spec = with_env(
            ServerSpec::tether_serve().unwrap(),
            &otel_env(endpoint, protocol, "tether-server"),
        );
        // A queue of two spans, so that a few calls overflow it while exports hang.
        spec = spec.env("OTEL_BSP_MAX_QUEUE_SIZE", "2");
        let mut server = spec.start().await.unwrap();
        let env = otel_env(endpoint, protocol, "tether-call");
        for _ in 0..4 {
            let started = Instant::now();
            let output = run_call(
                &[
                    server.url(),
                    "count",
                    "--args",
                    r#"{"n":2}"#,
                    "--json",
                    "--protocol",
                    "legacy",
                ],
                &env,
            )
            .await
            .unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{mode} {protocol}: {}",
                describe(&output)
            );
            assert!(
                String::from_utf8_lossy(&output.stdout).contains("counted 2"),
                "{}",
                describe(&output)
            );
            // The flush bound is 5 s; the rest is a loaded machine's slack, far from a hang.
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "{mode} {protocol}: tether call took {:?}",
                started.elapsed()
            );
        }
        let deadline = Instant::now() + ARRIVAL_TIMEOUT;
        let dropped = loop {
            let dropped = spans_dropped(&server).await.unwrap();
            if dropped > 0 || Instant::now() > deadline {
                break dropped;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(dropped > 0, "{mode} {protocol}: no dropped span counted");
        if mode == "error" {
            assert!(receiver.spans().unwrap().is_empty());
        }
        let status = server.terminate().await.unwrap();
        assert!(
            status.success(),
            "{mode} {protocol}: serve exited {status:?}\n{}",
            server.logs()
        );
    }
}

/// An unknown `OTEL_EXPORTER_OTLP_PROTOCOL` is a usage error (exit 2) naming the value.
#[tokio::test]
async fn an_unknown_otlp_protocol_is_a_usage_error() {
    let env = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            "http://127.0.0.1:9".to_owned(),
        ),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
            "thrift".to_owned(),
        ),
    ];
    let output = run_call(&["http://127.0.0.1:9/mcp", "count"], &env)
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && stderr.contains("thrift"),
        "{stderr}"
    );
}

/// `tether connect` under the Python SDK's stdio client: the client spans of its calls reach
/// the collector, exported as it exits when the stdio client closes its stdin.
#[tokio::test]
async fn tether_connect_exports_its_spans_before_it_exits() {
    let receiver = Receiver::start("ok").await.unwrap();
    let server = ServerSpec::tether_serve().unwrap().start().await.unwrap();
    // The SDK starts a stdio server with a minimal environment of its own: `env` hands the
    // OTEL variables to `tether connect`.
    let env: Vec<String> = otel_env(&receiver.http, "http/protobuf", "tether-connect")
        .into_iter()
        // The default batch delay (5 s), so that the spans go out in the flush at exit.
        .filter(|(key, _)| key != "OTEL_BSP_SCHEDULE_DELAY")
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let mut command = Command::new(peers::python().unwrap());
    command
        .arg(interop_dir().join("python/stdio_client.py"))
        .arg("A:3:0,B:2:0")
        .arg("--")
        .arg("env")
        .args(&env)
        .arg(tether_bin().unwrap())
        .args(["connect", server.url()])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    // No waiting here: what `tether connect` exported, it exported before exiting.
    let spans = receiver.spans().unwrap();
    let calls = named(&spans, "tether-connect", "tools/call count");
    assert_eq!(calls.len(), 2, "{}", lines(&spans));
    for call in calls {
        assert_eq!(call["kind"], CLIENT, "{call}");
        assert!(attribute(call, "error.type").is_null(), "{call}");
    }
}
