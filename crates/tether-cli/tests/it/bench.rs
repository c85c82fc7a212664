//! `tether bench`: a run counts only when every event arrived. A small `throughput` against a
//! spawned `tether serve` reports all its events and a rate; a server that drops an event, and
//! a URL that is not an MCP server, fail with exit code 1 and say why; `roundtrip` reports
//! calls per second and latencies for each client count, and refuses a server without
//! 2026-07-28; `tasks` reports creation latency, `tasks/get` calls/s and `tasks/stream`
//! events/s on the memory and SQLite stores, and fails on a server whose task stream loses an
//! event or that does not run `count` as a task. No timing assertions.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use serde_json::Value;

const TETHER: &str = env!("CARGO_BIN_EXE_tether");

/// Runs `tether bench ARGS…`; returns the exit code and the one JSON object on stdout.
fn bench(args: &[&str]) -> (Option<i32>, Value) {
    let output = Command::new(TETHER)
        .arg("bench")
        .args(args)
        .output()
        .expect("run tether bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|error| {
        panic!(
            "stdout is one JSON object ({error}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), json)
}

#[test]
fn throughput_against_spawned_server_reports_every_event_and_a_rate() {
    let (code, report) = bench(&[
        "throughput",
        "--spawn",
        "--n",
        "200",
        "--runs",
        "1",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["scenario"], "throughput");
    assert_eq!(report["ok"], true);
    assert_eq!(report["events_expected"], 200);
    assert!(report["events_per_sec"].as_f64().unwrap() > 0.0, "{report}");
    // The spawned server's pid is known, so its CPU time per event is reported (in 10 ms
    // ticks, so a run this short may round to 0: only its presence is checked).
    assert!(
        report["server_cpu_us_per_event"].as_f64().is_some(),
        "{report}"
    );
}

#[test]
fn a_server_that_drops_an_event_fails_the_run() {
    let url = serve_in_background(lossy_mcp_server);
    let (code, report) = bench(&["throughput", "--url", &url, "--n", "5", "--json"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["ok"], false);
    let error = report["error"].as_str().unwrap();
    assert!(
        error.contains("progress 4 arrived where 3 was expected"),
        "{error}"
    );
}

#[test]
fn a_url_that_is_not_an_mcp_server_fails_clearly() {
    let url = serve_in_background(|mut stream, _| {
        respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            &[],
            "no MCP here",
        );
    });
    let (code, report) = bench(&["throughput", "--url", &url, "--n", "5", "--json"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["ok"], false);
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("is not an MCP server"), "{error}");
}

#[test]
fn roundtrip_against_spawned_server_reports_calls_per_second_for_each_client_count() {
    let (code, report) = bench(&[
        "roundtrip",
        "--spawn",
        "--seconds",
        "0.5",
        "-c",
        "1,4",
        "--n",
        "3",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["scenario"], "roundtrip");
    assert_eq!(report["events_per_call"], 3);
    for clients in [1, 4] {
        let rate = report[format!("clients_{clients}_calls_per_sec")].as_f64();
        assert!(rate.is_some_and(|r| r > 0.0), "{report}");
        let p50 = report[format!("clients_{clients}_latency_p50_ms")]
            .as_f64()
            .unwrap();
        let p99 = report[format!("clients_{clients}_latency_p99_ms")]
            .as_f64()
            .unwrap();
        assert!(p50 > 0.0 && p50 <= p99, "{report}");
        // The spawned server's pid is known: its CPU time per call is reported.
        let cpu = report[format!("clients_{clients}_server_cpu_us_per_call")].as_f64();
        assert!(cpu.is_some_and(|c| c >= 0.0), "{report}");
    }
}

#[test]
fn roundtrip_against_a_server_without_2026_07_28_fails_clearly() {
    // A legacy server refuses server/discover without a session, as this one does.
    let url = serve_in_background(|mut stream, _| {
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: no session"}}"#;
        respond(
            &mut stream,
            "400 Bad Request",
            "application/json",
            &[],
            body,
        );
    });
    let (code, report) = bench(&["roundtrip", "--url", &url, "--seconds", "0.2", "--json"]);
    assert_eq!(code, Some(1), "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("does not serve 2026-07-28"), "{error}");
}

#[test]
fn tasks_against_spawned_servers_reports_creation_polling_and_stream_rates() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite:{}", dir.path().join("tasks.db").display());
    for store in ["memory", sqlite.as_str()] {
        let (code, report) = bench(&[
            "tasks",
            "--spawn",
            "--store",
            store,
            "--creations",
            "10",
            "-c",
            "3",
            "--seconds",
            "0.3",
            "--events",
            "300",
            "--runs",
            "1",
            "--json",
        ]);
        assert_eq!(code, Some(0), "{store}: {report}");
        assert_eq!(report["scenario"], "tasks");
        let value = |key: &str| {
            report[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {report}"))
        };
        assert!(value("create_p50_ms") > 0.0 && value("create_p50_ms") <= value("create_p99_ms"));
        assert!(value("get_p50_ms") <= value("get_p99_ms"), "{report}");
        for key in [
            "gets_per_sec",
            "stream_live_events_per_sec",
            "stream_replay_events_per_sec",
        ] {
            assert!(value(key) > 0.0, "{store}: {key}: {report}");
        }
        assert_eq!(report["stream_events"], 300);
    }
}

#[test]
fn tasks_fails_when_a_task_stream_loses_an_event_or_count_is_no_task() {
    let url = serve_in_background(|stream, body| fake_task_server(stream, &body, true));
    let args = [
        "--creations",
        "1",
        "--seconds",
        "0.1",
        "--events",
        "5",
        "--runs",
        "1",
        "--json",
    ];
    let (code, report) = bench(&[&["tasks", "--url", &url][..], &args[..]].concat());
    assert_eq!(code, Some(1), "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("events lost or repeated"), "{error}");

    let url = serve_in_background(|stream, body| fake_task_server(stream, &body, false));
    let (code, report) = bench(&[&["tasks", "--url", &url][..], &args[..]].concat());
    assert_eq!(code, Some(1), "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("did not run as a task"), "{error}");
}

/// A 2026-07-28 server: `server/discover`; `tools/call` answers with a task (`tasks` true) or
/// a plain result; `tasks/get` says completed; `tasks/stream` sends seq 0, 1, 3 (seq 2 lost).
fn fake_task_server(mut stream: TcpStream, body: &str, tasks: bool) {
    let id: Value = serde_json::from_str::<Value>(body).unwrap()["id"].clone();
    let answer = |result: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
    if body.contains("server/discover") {
        let result = r#"{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"extensions":{"io.modelcontextprotocol/tasks":{"eventStreams":{}}}},"serverInfo":{"name":"fake","version":"0"}}"#;
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &[],
            &answer(result),
        );
    } else if body.contains("tools/call") && tasks {
        let result = r#"{"resultType":"task","taskId":"t","status":"working"}"#;
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &[],
            &answer(result),
        );
    } else if body.contains("tools/call") {
        let result = r#"{"resultType":"complete","content":[{"type":"text","text":"counted 1"}]}"#;
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &[],
            &answer(result),
        );
    } else if body.contains("tasks/get") {
        let result = r#"{"resultType":"complete","taskId":"t","status":"completed"}"#;
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &[],
            &answer(result),
        );
    } else {
        let mut sse = String::new();
        for seq in [0, 1, 3] {
            let event = format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/tasks/event","params":{{"seq":{seq},"taskId":"t","type":"dev.tether.progress","payload":{{"progressToken":"bench","progress":{}}}}}}}"#,
                seq + 1
            );
            sse.push_str(&format!("data: {event}\n\n"));
        }
        sse.push_str(&format!(
            "data: {}\n\n",
            answer(r#"{"resultType":"complete"}"#)
        ));
        respond(&mut stream, "200 OK", "text/event-stream", &[], &sse);
    }
}

/// Serves each connection on a thread with `handle(stream, request body)`, one request per
/// connection; returns the endpoint URL.
fn serve_in_background(handle: fn(TcpStream, String)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let body = read_request(&stream);
                handle(stream, body);
            });
        }
    });
    url
}

/// Reads one request's head and body; returns the body.
fn read_request(stream: &TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, headers: &[&str], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

/// An MCP server whose `count` loses progress 3: initialize, notifications, DELETE answered
/// correctly; every `tools/call` streams progress 1, 2, 4, 5 and `counted 5`.
fn lossy_mcp_server(mut stream: TcpStream, body: String) {
    if body.contains("\"initialize\"") {
        let answer = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"lossy","version":"0"}}}"#;
        respond(
            &mut stream,
            "200 OK",
            "application/json",
            &["Mcp-Session-Id: lossy"],
            answer,
        );
    } else if body.contains("tools/call") {
        let id: Value = serde_json::from_str::<Value>(&body).unwrap()["id"].clone();
        let mut sse = String::new();
        for progress in [1, 2, 4, 5] {
            sse.push_str(&format!(
                "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"bench\",\"progress\":{progress},\"total\":5}}}}\n\n"
            ));
        }
        sse.push_str(&format!(
            "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"counted 5\"}}]}}}}\n\n"
        ));
        respond(&mut stream, "200 OK", "text/event-stream", &[], &sse);
    } else {
        respond(&mut stream, "202 Accepted", "text/plain", &[], "");
    }
}
