//! The raw reader against hand-written responses (framing it must decode exactly) and against
//! the real TypeScript and Python SDK servers from `interop/` (installed by
//! `scripts/peers.sh`): cut a `count` stream, resume it with `Last-Event-ID`, and check that
//! the union of what arrived is every event exactly once.

use std::{collections::HashSet, time::Duration};

use anyhow::Context as _;
use serde_json::{Value, json};
use tether_testkit::{
    launcher::ServerSpec,
    peers,
    raw::{RawClient, RawRequest, SseEvent, SseItem, Transcript},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
    sync::oneshot,
};

// ---------------------------------------------------------------------------------------
// Hand-written responses: the reader's own framing.

/// Serves one connection: sends `pieces` with a pause between them (so they arrive as
/// separate reads), then closes. Yields the request bytes it received.
async fn serve_once(pieces: Vec<Vec<u8>>) -> (String, oneshot::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut buf = [0; 4096];
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        for piece in pieces {
            socket.write_all(&piece).await.unwrap();
            socket.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = tx.send(request);
    });
    (url, rx)
}

fn event(id: &str, data: &str) -> SseItem {
    SseItem::Event(SseEvent {
        id: id.to_owned(),
        event_type: "message".to_owned(),
        data: data.to_owned(),
        retry: None,
    })
}

#[tokio::test]
async fn chunked_event_stream_split_anywhere_decodes_every_item() {
    let body = "id: a:0\nretry: 500\ndata: \n\n: keep-alive\nevent: message\nid: a:1\ndata: {\"x\":1}\r\n\r\nid: a:2\n\n";
    // Chunks end inside lines and inside a CRLF; one carries an extension; a trailer
    // follows the last chunk. Then the bytes go out in 5-byte pieces, so reads end inside
    // size lines and chunk terminators too.
    let mut wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nMcp-Session-Id: s1\r\n\r\n".to_vec();
    let cuts = [0, 7, 30, 31, 75, body.len()];
    for (i, range) in cuts.windows(2).enumerate() {
        let chunk = &body[range[0]..range[1]];
        let ext = if i == 0 { ";ext=1" } else { "" };
        wire.extend_from_slice(format!("{:x}{ext}\r\n{chunk}\r\n", chunk.len()).as_bytes());
    }
    wire.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    let pieces = wire.chunks(5).map(<[u8]>::to_vec).collect();
    let (url, _) = serve_once(pieces).await;
    let client = RawClient::new(&url).unwrap();
    let transcript = client
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(transcript.status, 200);
    assert_eq!(transcript.headers.get("mcp-session-id"), Some("s1"));
    assert!(transcript.complete);
    assert_eq!(transcript.body, body.as_bytes());
    assert_eq!(
        transcript.items,
        vec![
            SseItem::Retry(500),
            SseItem::Event(SseEvent {
                id: "a:0".to_owned(),
                event_type: "message".to_owned(),
                data: String::new(),
                retry: Some(500),
            }),
            SseItem::Comment("keep-alive".to_owned()),
            event("a:1", r#"{"x":1}"#),
            SseItem::LastEventId("a:2".to_owned()),
        ]
    );
    assert_eq!(transcript.last_event_id(), Some("a:2"));
    assert_eq!(
        transcript.messages().unwrap(),
        vec![("a:1".to_owned(), json!({"x": 1}))]
    );
}

#[tokio::test]
async fn content_length_and_read_to_close_bodies_end_where_the_server_says() {
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let sized = [
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
        &body[..10],
    ]
    .concat();
    let (url, _) = serve_once(vec![sized, body[10..].to_vec()]).await;
    let transcript = RawClient::new(&url)
        .unwrap()
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert!(transcript.complete);
    assert_eq!(transcript.json().unwrap()["id"], 1);
    assert_eq!(transcript.messages().unwrap().len(), 1);

    let (url, _) = serve_once(vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n".to_vec(),
        b"data: 2\n\ndata: cut off".to_vec(),
    ])
    .await;
    let transcript = RawClient::new(&url)
        .unwrap()
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert!(transcript.complete);
    let data: Vec<&str> = transcript.events().map(|e| e.data.as_str()).collect();
    assert_eq!(data, ["1", "2"], "an unterminated final event is discarded");
}

#[tokio::test]
async fn requests_carry_the_mcp_headers_and_raw_requests_carry_only_what_was_asked() {
    let (url, request) = serve_once(vec![
        b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_vec(),
    ])
    .await;
    let mut client = RawClient::new(&url).unwrap();
    client.set_session_id(Some("sess-1".to_owned()));
    let transcript = client
        .resume("a:7")
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(transcript.status, 202);
    let request = String::from_utf8(request.await.unwrap()).unwrap();
    assert!(request.starts_with("GET /mcp HTTP/1.1\r\n"), "{request}");
    for line in [
        "Accept: text/event-stream",
        "MCP-Protocol-Version: 2025-11-25",
        "Mcp-Session-Id: sess-1",
        "Last-Event-ID: a:7",
    ] {
        assert!(
            request.contains(&format!("{line}\r\n")),
            "{line} missing in {request}"
        );
    }

    let (url, request) = serve_once(vec![
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
    ])
    .await;
    let client = RawClient::new(&url).unwrap();
    let bad = client
        .request("POST")
        .without_header("Content-Type")
        .header("X-Odd", "1")
        .body("{not json");
    let transcript = client
        .send(&bad)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(transcript.status, 400);
    let request = String::from_utf8(request.await.unwrap()).unwrap();
    assert!(
        !request.to_ascii_lowercase().contains("content-type"),
        "{request}"
    );
    assert!(
        request.contains("X-Odd: 1\r\nContent-Length: 9\r\n\r\n"),
        "{request}"
    );
    assert_eq!(
        RawRequest::new("GET", "/").to_bytes(),
        b"GET / HTTP/1.1\r\n\r\n"
    );
}

#[tokio::test]
async fn a_silent_stream_times_out_without_losing_the_connection() {
    let (url, _) = serve_once(vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: hi\n\n".to_vec(),
        Vec::new(),
    ])
    .await;
    let mut response = RawClient::new(&url)
        .unwrap()
        .open_get_stream()
        .await
        .unwrap();
    assert_eq!(
        response.next_item().await.unwrap(),
        Some(SseItem::Comment("hi".to_owned()))
    );
    assert_eq!(
        response
            .next_item_within(Duration::from_millis(1))
            .await
            .unwrap(),
        None,
        "nothing more arrived yet"
    );
    // Then the server closes: the body ends.
    assert_eq!(response.next_item().await.unwrap(), None);
    assert!(response.transcript().complete);
}

// ---------------------------------------------------------------------------------------
// Real SDK servers.

async fn start(spec: ServerSpec) -> tether_testkit::launcher::ServerProcess {
    spec.start().await.expect("start the peer server")
}

fn progress_of(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_u64().expect("integer progress"))
        .collect()
}

/// initialize → `count` n=20 → read 5 events → drop the connection → GET with the last id:
/// the union is progress 1..=20 then the result, and every event id arrives once.
async fn cut_and_resume(spec: ServerSpec, interval_ms: u64) -> anyhow::Result<()> {
    let server = start(spec).await;
    let mut client = RawClient::new(server.url())?;
    let init = client.initialize().await?;
    assert_eq!(init.initialized.status, 202, "notifications/initialized");
    assert!(init.initialized.body.is_empty());
    assert!(client.session_id().is_some(), "sessions are on");
    assert_eq!(init.result["protocolVersion"], "2025-11-25");

    let (id, mut first) = client
        .call_tool(
            "count",
            json!({"n": 20, "interval_ms": interval_ms}),
            Some(json!("tok")),
        )
        .await?;
    assert_eq!(first.status(), 200);
    assert!(first.is_event_stream());
    assert_eq!(first.read_events(5).await?.len(), 5);
    let first: Transcript = first.into_transcript(); // the cut
    let priming = first.events().next().context("priming event")?;
    assert!(
        priming.data.is_empty() && !priming.id.is_empty(),
        "{priming:?}"
    );
    assert_eq!(first.retries(), [500]);
    let last = first
        .last_event_id()
        .context("an id to resume from")?
        .to_owned();

    let mut second = client.resume(&last).await?;
    assert_eq!(second.status(), 200, "{:?}", second.transcript());
    let response = second.read_until_response(id).await?;
    let second = second.into_transcript();
    let response = response.with_context(|| format!("no response after resume: {second:?}"))?;
    assert_eq!(response["result"]["content"][0]["text"], "counted 20");

    let mut ids = HashSet::new();
    for event in first.events().chain(second.events()) {
        assert!(ids.insert(&event.id), "event id {} arrived twice", event.id);
    }
    let messages: Vec<Value> = first
        .messages()?
        .into_iter()
        .chain(second.messages()?)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(progress_of(&messages), (1..=20).collect::<Vec<_>>());
    assert_eq!(
        messages.len(),
        21,
        "progress 1..=20 and the response: {messages:#?}"
    );
    assert_eq!(messages.last(), Some(&response));
    for m in &messages[..20] {
        assert_eq!(m["params"]["progressToken"], "tok");
        assert_eq!(m["params"]["total"], 20);
    }
    Ok(())
}

#[tokio::test]
async fn ts_server_resume_after_cut_delivers_each_event_once_while_running() {
    cut_and_resume(peers::ts_server().unwrap(), 20)
        .await
        .unwrap();
}

#[tokio::test]
async fn ts_server_resume_after_cut_delivers_each_event_once_after_finishing() {
    cut_and_resume(peers::ts_server().unwrap(), 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn python_server_resume_after_cut_delivers_each_event_once_while_running() {
    cut_and_resume(peers::python_server().unwrap(), 20)
        .await
        .unwrap();
}

#[tokio::test]
async fn python_server_resume_after_cut_delivers_each_event_once_after_finishing() {
    cut_and_resume(peers::python_server().unwrap(), 0)
        .await
        .unwrap();
}

/// `--json-response`: a request gets one `application/json` body, a notification a bare 202.
async fn json_mode(spec: ServerSpec) -> anyhow::Result<()> {
    let server = start(spec.arg("--json-response")).await;
    let mut client = RawClient::new(server.url())?;
    let init = client.initialize().await?;
    assert!(!init.response.is_event_stream(), "{:?}", init.response);
    assert_eq!(init.initialized.status, 202);
    assert!(init.initialized.body.is_empty());

    let (id, mut call) = client
        .call_tool("count", json!({"n": 3}), Some(json!(7)))
        .await?;
    assert_eq!(call.status(), 200);
    let content_type = call.header("content-type").unwrap_or_default().to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let response = call.read_until_response(id).await?.context("a response")?;
    assert_eq!(response["result"]["content"][0]["text"], "counted 3");
    assert!(call.transcript().complete);
    Ok(())
}

#[tokio::test]
async fn ts_server_json_mode_answers_with_one_json_body() {
    json_mode(peers::ts_server().unwrap()).await.unwrap();
}

#[tokio::test]
async fn python_server_json_mode_answers_with_one_json_body() {
    json_mode(peers::python_server().unwrap()).await.unwrap();
}

/// Without a progressToken `count` logs instead; DELETE ends the session (404 after).
async fn log_messages_then_delete(spec: ServerSpec) -> anyhow::Result<()> {
    let server = start(spec).await;
    let mut client = RawClient::new(server.url())?;
    client.initialize().await?;
    let (id, mut call) = client.call_tool("count", json!({"n": 2}), None).await?;
    call.read_until_response(id).await?.context("a response")?;
    let messages: Vec<Value> = call
        .into_transcript()
        .messages()?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let logs: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 2, "{messages:#?}");
    for (i, log) in logs.iter().enumerate() {
        assert_eq!(log["params"]["level"], "info");
        assert_eq!(log["params"]["logger"], "count");
        assert_eq!(log["params"]["data"], json!({"index": i + 1, "total": 2}));
    }

    let deleted = client.delete_session().await?;
    assert_eq!(deleted.status, 200, "{deleted:?}");
    let (_, after) = client.call_tool("count", json!({"n": 1}), None).await?;
    assert_eq!(after.status(), 404, "{:?}", after.read_to_end().await?);
    Ok(())
}

#[tokio::test]
async fn ts_server_logs_without_progress_token_and_forgets_deleted_sessions() {
    log_messages_then_delete(peers::ts_server().unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn python_server_logs_without_progress_token_and_forgets_deleted_sessions() {
    log_messages_then_delete(peers::python_server().unwrap())
        .await
        .unwrap();
}
