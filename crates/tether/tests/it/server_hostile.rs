//! Hostile clients over real sockets: a request head sent one byte at a time (slowloris), a
//! body that never ends, hundreds of connections that say nothing, more connections than the
//! server takes, too many header fields, JSON nested 100 000 deep, and garbage after a valid
//! request. Each is cut off or
//! refused by a named limit (`ConnectionLimits`, `ServerConfig::body_read_timeout`), and a
//! well-behaved client's session keeps working throughout. (A GET stream that is never read
//! is `server_slow_reader.rs`'s.)

use std::time::{Duration, Instant};

use crate::support::server::{TestServer, assert_session_works};
use serde_json::{Value, json};
use tether::server::ServerConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const V11: &str = "2025-11-25";
const HEAD_TIMEOUT: Duration = Duration::from_millis(500);
const BODY_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a test waits for the server to act on a limit before calling it a failure:
/// generous, since the machine is shared; never a measured duration.
const PATIENCE: Duration = Duration::from_secs(15);

async fn server(max_connections: usize) -> TestServer {
    server_with(max_connections, HEAD_TIMEOUT).await
}

async fn server_with(max_connections: usize, head_timeout: Duration) -> TestServer {
    let mut config = ServerConfig::default();
    config.connections.header_read_timeout = head_timeout;
    config.connections.max_connections = max_connections;
    config.body_read_timeout = BODY_TIMEOUT;
    TestServer::start(config).await
}

fn addr(server: &TestServer) -> String {
    server
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Reads until the server closes the connection (or `PATIENCE` runs out: a failure); returns
/// what it sent.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut received)).await;
    match read {
        Ok(_) => received,
        Err(_) => panic!(
            "the server kept the connection open; got {:?}",
            String::from_utf8_lossy(&received)
        ),
    }
}

#[tokio::test]
async fn a_request_head_sent_byte_by_byte_is_cut_off() {
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let mut slow = TcpStream::connect(addr(&server)).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nX-Slow: {}\r\n",
        addr(&server),
        "a".repeat(200)
    );
    let started = Instant::now();
    let mut closed_after = None;
    for byte in head.bytes() {
        if slow.write_all(&[byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > PATIENCE {
            break;
        }
    }
    // Either a write failed already, or the read sees the close.
    if closed_after.is_none() {
        let _ = read_until_closed(&mut slow).await;
    }
    assert!(
        started.elapsed() < PATIENCE,
        "cut off before the head was complete"
    );
    assert_session_works(&mut client).await;
}

#[tokio::test]
async fn a_body_that_never_ends_gets_408_and_the_session_stays() {
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let mut stalled = TcpStream::connect(addr(&server)).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {V11}\r\n\
         Mcp-Session-Id: {}\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{{\"jsonrpc\"",
        addr(&server),
        client.session_id().unwrap()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let answer = String::from_utf8(read_until_closed(&mut stalled).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["jsonrpc"], json!("2.0"), "{body}");
    assert!(body["error"]["code"].is_i64(), "{body}");
    assert_session_works(&mut client).await;
}

#[tokio::test]
async fn silent_connections_are_closed_and_others_keep_being_served() {
    const SILENT: usize = 300;
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let mut silent = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        silent.push(TcpStream::connect(addr(&server)).await.unwrap());
    }
    assert_session_works(&mut client).await;
    for stream in &mut silent {
        assert!(
            read_until_closed(stream).await.is_empty(),
            "closed without a word"
        );
    }
    assert_session_works(&mut client).await;
}

/// A connection kept alive after a complete exchange and then left idle is closed like a
/// silent one (hyper's head timer runs while it waits for the next request), so idle
/// keep-alive connections cannot hold the connection slots.
#[tokio::test]
async fn kept_alive_connections_left_idle_are_closed() {
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let mut idle = TcpStream::connect(addr(&server)).await.unwrap();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {V11}\r\n\
         Mcp-Session-Id: {}\r\nContent-Length: {}\r\n\r\n{ping}",
        addr(&server),
        client.session_id().unwrap(),
        ping.len()
    );
    idle.write_all(request.as_bytes()).await.unwrap();
    // The answer (an SSE stream that ends with the result), then nothing: the server must
    // close the connection by itself, within the head timeout plus patience.
    let received = String::from_utf8(read_until_closed(&mut idle).await).unwrap();
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    assert!(
        received.contains(r#""id":1"#),
        "the ping was answered: {received}"
    );
    assert!(
        !received.to_ascii_lowercase().contains("connection: close"),
        "the server offered to keep the connection: {received}"
    );
    assert_session_works(&mut client).await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_at_once() {
    const LIMIT: usize = 20;
    // Held connections must not time out while the test runs.
    let server = server_with(LIMIT, Duration::from_secs(60)).await;
    let mut held = Vec::new();
    for _ in 0..LIMIT {
        held.push(TcpStream::connect(addr(&server)).await.unwrap());
    }
    // Give the server time to accept them all, so the next one is the one over the limit.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(addr(&server)).await.unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", addr(&server));
    let _ = over.write_all(request.as_bytes()).await;
    let answer = read_until_closed(&mut over).await;
    assert!(
        answer.is_empty(),
        "over the limit: closed unanswered, got {:?}",
        String::from_utf8_lossy(&answer)
    );
    // Once the held connections are gone, the server takes new ones again.
    drop(held);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut fresh = TcpStream::connect(addr(&server)).await.unwrap();
        let _ = fresh.write_all(request.as_bytes()).await;
        let answer = read_until_closed_or_answered(&mut fresh).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server never took connections again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads the first response's head (or until close).
async fn read_until_closed_or_answered(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0_u8; 1024];
    let _ = tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    received.extend_from_slice(&buf[..n]);
                    if received.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn too_many_header_fields_get_431() {
    let server = server(1024).await;
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    let mut request = format!("GET /mcp HTTP/1.1\r\nHost: {}\r\n", addr(&server));
    for i in 0..200 {
        request.push_str(&format!("X-Filler-{i}: x\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = String::from_utf8_lossy(&read_until_closed(&mut stream).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test]
async fn garbage_after_a_valid_request_ends_that_connection_only() {
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {V11}\r\n\
         Mcp-Session-Id: {}\r\nContent-Length: {}\r\n\r\n{body}\x00\x01\x02 GARBAGE \x7f\r\n\r\n",
        addr(&server),
        client.session_id().unwrap(),
        body.len()
    );
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = String::from_utf8_lossy(&read_until_closed(&mut stream).await).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the valid request is answered: {answer}"
    );
    assert!(answer.contains("\"id\":99"), "{answer}");
    assert_session_works(&mut client).await;
}

#[tokio::test]
async fn deeply_nested_json_is_refused_without_harm() {
    let server = server(1024).await;
    let mut client = server.session(V11).await;
    let depth = 100_000;
    let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let request = client.request("POST").body(body.into_bytes());
    let refused = client
        .send(&request)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(refused.status, 400);
    let error: Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(error["error"]["code"], json!(-32700), "{error}");
    assert_session_works(&mut client).await;
}

#[tokio::test]
async fn a_response_over_the_event_size_limit_becomes_an_error() {
    let mut config = ServerConfig::default();
    config.max_event_bytes = 2048;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let (id, mut response) = client
        .call_tool("echo", json!({"text": "x".repeat(4096)}), None)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer = response.read_until_response(id).await.unwrap().unwrap();
    assert_eq!(answer["error"]["code"], json!(-32603), "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"],
        json!("too_large"),
        "{answer}"
    );
    assert_eq!(answer["error"]["data"]["limit"], json!(2048), "{answer}");
    assert_session_works(&mut client).await;
}
