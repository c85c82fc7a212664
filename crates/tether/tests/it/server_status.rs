//! The status table of docs/CONTRACTS.md#status-table, row by row, against a real server over raw
//! HTTP: each refusal has its status and JSON-RPC error body (`id` null), carries `Tether-Node`,
//! and leaves the session working. docs/PROTOCOL.md rule numbers (T…) are cited per test.

use std::time::Duration;

use crate::support::server::{TestServer, assert_refused, assert_session_works, messages};
use serde_json::{Value, json};
use tether::server::ServerConfig;
use tether_testkit::raw::{RawRequest, SseItem};

const V03: &str = "2025-03-26";
const V06: &str = "2025-06-18";
const V11: &str = "2025-11-25";

fn ping(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// T2, T97: a notification is accepted with 202 and an empty body.
#[tokio::test]
async fn notification_is_202_with_empty_body() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let t = client
        .notify("notifications/roots/list_changed", None)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 202);
    assert!(t.body.is_empty());
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
    assert_session_works(&mut client).await;
}

/// T3: a response (to a server request nobody waits for any more) is accepted with 202.
#[tokio::test]
async fn response_is_202_with_empty_body() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let t = client
        .post(&json!({"jsonrpc": "2.0", "id": 99, "result": {}}))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 202);
    assert!(t.body.is_empty());
    assert_session_works(&mut client).await;
}

/// T6, T8, T9, T34, T35, T71: a request is answered with an SSE stream whose head carries
/// `Mcp-Session-Id` and the streaming headers; a 2025-11-25 session's stream starts with a
/// priming event (id, `retry`, empty data), carries each message as `event: message` with an
/// id, and ends after the response.
#[tokio::test]
async fn request_is_answered_with_an_sse_stream() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.client();
    let init = client.initialize().await.unwrap();
    let t = &init.response;
    assert_eq!(t.status, 200);
    assert!(t.is_event_stream());
    assert_eq!(t.headers.get("cache-control"), Some("no-cache"));
    assert_eq!(t.headers.get("x-accel-buffering"), Some("no"));
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
    let session = t
        .headers
        .get("mcp-session-id")
        .expect("session id on the head");
    assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    assert_eq!(init.result["protocolVersion"], V11);
    assert_eq!(init.result["serverInfo"]["name"], "server-tests");

    let (id, response) = client.post_request("ping", json!({})).await.unwrap();
    let t = response.read_to_end().await.unwrap();
    assert!(t.complete, "the response ends after the final message (T9)");
    let events: Vec<_> = t.events().collect();
    assert_eq!(events.len(), 2, "priming + response: {events:?}");
    assert_eq!(events[0].data, "", "priming event has empty data");
    assert!(
        events[0].id.ends_with(":0"),
        "priming is seq 0: {}",
        events[0].id
    );
    assert_eq!(t.retries(), vec![1000], "priming carries retry");
    assert_eq!(events[1].event_type, "message");
    let body = String::from_utf8_lossy(&t.body);
    assert!(body.contains("event: message\n"), "{body}");
    let response: Value = serde_json::from_str(&events[1].data).unwrap();
    assert_eq!(response, json!({"jsonrpc": "2.0", "id": id, "result": {}}));
}

/// T72: sessions that negotiated 2025-03-26 or 2025-06-18 get no priming event, whatever
/// `MCP-Protocol-Version` a later request carries.
#[tokio::test]
async fn older_versions_get_no_priming_event() {
    let server = TestServer::start(ServerConfig::default()).await;
    for version in [V03, V06] {
        let mut client = server.session(version).await;
        // A later request claiming 2025-11-25 does not change the session's version.
        let client11 = client.clone().with_protocol_version(V11);
        let t = client11
            .post(&ping(7))
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_eq!(t.status, 200);
        let events: Vec<_> = t.events().collect();
        assert_eq!(events.len(), 1, "{version}: only the response: {events:?}");
        assert!(!events[0].data.is_empty());
        assert!(t.retries().is_empty());
        assert_session_works(&mut client).await;
    }
}

/// T7, T34: in JSON-response mode a request gets one `application/json` response object with
/// its id, and `initialize` carries `Mcp-Session-Id`.
#[tokio::test]
async fn json_response_mode_answers_with_one_json_object() {
    let mut config = ServerConfig::default();
    config.json_response = true;
    let server = TestServer::start(config).await;
    let mut client = server.client();
    let init = client.initialize().await.unwrap();
    assert!(!init.response.is_event_stream());
    assert!(init.response.headers.get("mcp-session-id").is_some());
    let t = client
        .post(&ping(5))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert!(
        t.headers
            .get("content-type")
            .is_some_and(|v| v.starts_with("application/json"))
    );
    assert_eq!(
        t.json().unwrap(),
        json!({"jsonrpc": "2.0", "id": 5, "result": {}})
    );
    assert_session_works(&mut client).await;
}

/// T12: invalid JSON is 400 with -32700 and `id` null.
#[tokio::test]
async fn invalid_json_is_400_parse_error() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let t = client
        .send(&client.request("POST").body("{\"jsonrpc\": \"2.0\", "))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 400, -32700, &server.node_id);
    assert_session_works(&mut client).await;
}

/// T5: JSON that is not a JSON-RPC message is 400 with -32600.
#[tokio::test]
async fn non_jsonrpc_body_is_400_invalid_request() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for body in [
        json!({"hello": "world"}),
        json!(42),
        json!({"jsonrpc": "1.0", "method": "x"}),
    ] {
        let t = client
            .post(&body)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_refused(&t, 400, -32600, &server.node_id);
    }
    assert_session_works(&mut client).await;
}

/// T11: a JSON array under 2025-06-18 (and 2025-11-25) is 400 with -32600.
#[tokio::test]
async fn array_is_refused_when_the_session_forbids_batches() {
    let server = TestServer::start(ServerConfig::default()).await;
    for version in [V06, V11] {
        let mut client = server.session(version).await;
        let t = client
            .post(&json!([ping(1), ping(2)]))
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_refused(&t, 400, -32600, &server.node_id);
        assert_session_works(&mut client).await;
    }
}

/// T4, T10, T96: under 2025-03-26 a batch is accepted: requests get one response each (SSE
/// or a JSON array), a batch of notifications gets 202; a batched initialize is refused.
#[tokio::test]
async fn batches_are_accepted_under_2025_03_26() {
    for json_response in [false, true] {
        let mut config = ServerConfig::default();
        config.json_response = json_response;
        let server = TestServer::start(config).await;
        let mut client = server.session(V03).await;
        let batch = json!([
            ping(1),
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "echo", "arguments": {"text": "b"}}},
        ]);
        let t = client
            .post(&batch)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_eq!(t.status, 200, "json_response={json_response}");
        let mut responses = messages(&t);
        responses.sort_by_key(|m| m["id"].as_i64());
        assert_eq!(responses.len(), 2, "{responses:?}");
        assert_eq!(
            responses[0],
            json!({"jsonrpc": "2.0", "id": 1, "result": {}})
        );
        assert_eq!(responses[1]["result"]["content"][0]["text"], "b");
        if json_response {
            assert!(
                t.json().unwrap().is_array(),
                "a batch is answered with an array"
            );
        }

        let notifications = json!([
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 77, "result": {}},
        ]);
        let t = client
            .post(&notifications)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_eq!(t.status, 202);
        assert!(t.body.is_empty());

        let init = json!([{"jsonrpc": "2.0", "id": 3, "method": "initialize",
            "params": {"protocolVersion": V03, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}]);
        let t = client
            .post(&init)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        assert_refused(&t, 400, -32600, &server.node_id);
        assert_session_works(&mut client).await;
    }
}

/// T38, T39: a non-initialize request without `Mcp-Session-Id` is 400 -32600; initialize
/// never needs one.
#[tokio::test]
async fn missing_session_id_is_400() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut anonymous = client.clone();
    anonymous.set_session_id(None);
    for method in ["POST", "GET", "DELETE"] {
        let mut request = anonymous.request(method);
        if method == "POST" {
            request = request.json(&ping(1));
        }
        let t = anonymous.exchange(&request).await.unwrap();
        assert_refused(&t, 400, -32600, &server.node_id);
    }
    assert_session_works(&mut client).await;
}

/// T35, docs/CONTRACTS.md#status-table: a session id that is not visible ASCII is 400 -32600.
#[tokio::test]
async fn malformed_session_id_is_400() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for bad in ["has space", "tab\there"] {
        let request = client
            .request("POST")
            .header("Mcp-Session-Id", bad)
            .json(&ping(1));
        let t = client.exchange(&request).await.unwrap();
        assert_refused(&t, 400, -32600, &server.node_id);
    }
    // Bytes outside ASCII (obs-text) are not visible ASCII either.
    let mut raw = client
        .request("POST")
        .without_header("Mcp-Session-Id")
        .json(&ping(1))
        .to_bytes();
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    raw.splice(at..at, b"\r\nMcp-Session-Id: caf\xc3\xa9".iter().copied());
    let t = client
        .send_bytes(&raw)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 400, -32600, &server.node_id);
    assert_session_works(&mut client).await;
}

/// T40: an unknown session id is 404 -32600 "session not found" on POST, GET and DELETE.
#[tokio::test]
async fn unknown_session_is_404() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut stranger = client.clone();
    stranger.set_session_id(Some("no-such-session".to_owned()));
    for method in ["POST", "GET", "DELETE"] {
        let mut request = stranger.request(method);
        if method == "POST" {
            request = request.json(&ping(1));
        }
        let t = stranger.exchange(&request).await.unwrap();
        let error = assert_refused(&t, 404, -32600, &server.node_id);
        assert_eq!(error["message"], "session not found");
    }
    assert_session_works(&mut client).await;
}

/// T51, T52, docs/CONTRACTS.md#status-table: an unsupported `MCP-Protocol-Version` is 400 -32600
/// listing the supported versions (a 2026-07-28 client without a session gets the same and can fall
/// back to initialize); a missing header or another supported version is accepted.
#[tokio::test]
async fn unsupported_protocol_version_is_400_with_supported_list() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V06).await;
    for bad in ["2026-07-28", "2024-11-05", "", "banana"] {
        for method in ["POST", "GET", "DELETE"] {
            let mut request = client.request(method).header("MCP-Protocol-Version", bad);
            if method == "POST" {
                request = request.json(&ping(1));
            }
            let t = client.exchange(&request).await.unwrap();
            let error = assert_refused(&t, 400, -32600, &server.node_id);
            assert_eq!(
                error["data"]["supported"],
                json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]),
                "every unsupported-version answer lists all four (docs/CONTRACTS.md#planned-eras)"
            );
        }
    }
    // A POST that says 2026-07-28 without a session follows the modern rules: without its
    // `_meta` envelope it is malformed (-32602), answered with its own id (server_modern.rs
    // tests that era).
    let mut modern = server.client().with_protocol_version("2026-07-28");
    modern.set_session_id(None);
    let t = modern
        .post(&ping(1))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 400);
    let body = t.json().unwrap();
    assert_eq!(body["id"], 1);
    assert_eq!(body["error"]["code"], -32602);
    // ... and can fall back to initialize.
    let mut fallback = server.client().with_protocol_version(V11);
    fallback.initialize().await.unwrap();

    // Missing header, or a supported version other than the session's: accepted (T52).
    for request in [
        client
            .request("POST")
            .without_header("MCP-Protocol-Version")
            .json(&ping(2)),
        client
            .request("POST")
            .header("MCP-Protocol-Version", V03)
            .json(&ping(3)),
    ] {
        let t = client.exchange(&request).await.unwrap();
        assert_eq!(t.status, 200);
    }
    assert_session_works(&mut client).await;
}

/// docs/CONTRACTS.md#status-table, 406 row, docs/PROTOCOL.md#open-10: `Accept` is lenient — a
/// client accepting only JSON gets JSON, `*/*` or no `Accept` gets the default — and 406 only when
/// neither answer is acceptable.
#[tokio::test]
async fn post_accept_is_lenient_and_406_when_nothing_fits() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let t = client
        .send(
            &client
                .request("POST")
                .header("Accept", "text/html")
                .json(&ping(1)),
        )
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 406, -32600, &server.node_id);

    let t = client
        .send(
            &client
                .request("POST")
                .header("Accept", "application/json")
                .json(&ping(2)),
        )
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert!(!t.is_event_stream(), "JSON for a JSON-only client");
    assert_eq!(t.json().unwrap()["id"], 2);

    for accept in [Some("*/*"), None] {
        let mut request = client.request("POST").json(&ping(3));
        request = match accept {
            Some(accept) => request.header("Accept", accept),
            None => request.without_header("Accept"),
        };
        let t = client.exchange(&request).await.unwrap();
        assert_eq!(t.status, 200);
        assert!(t.is_event_stream());
    }
    // Notifications need no answer, so their Accept is not checked.
    let t = client
        .send(
            &client
                .request("POST")
                .header("Accept", "text/html")
                .json(&json!({"jsonrpc": "2.0", "method": "notifications/x"})),
        )
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 202);
    assert_session_works(&mut client).await;
}

/// T25, docs/CONTRACTS.md#status-table, 406 row: a GET whose `Accept` excludes `text/event-stream`
/// is 406.
#[tokio::test]
async fn get_without_event_stream_accept_is_406() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let t = client
        .send(&client.request("GET").header("Accept", "application/json"))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 406, -32600, &server.node_id);
    let get = client.open_get_stream().await.unwrap();
    assert_eq!(get.status(), 200);
    assert!(get.is_event_stream());
    drop(get);
    assert_session_works(&mut client).await;
}

/// T20, docs/CONTRACTS.md#status-table, 415 row: POST without `Content-Type: application/json` is
/// 415.
#[tokio::test]
async fn wrong_content_type_is_415() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for content_type in [
        Some("text/plain"),
        Some("application/json-patch+json"),
        None,
    ] {
        let mut request = client.request("POST").json(&ping(1));
        request = match content_type {
            Some(value) => request.header("Content-Type", value),
            None => request.without_header("Content-Type"),
        };
        let t = client.exchange(&request).await.unwrap();
        assert_refused(&t, 415, -32600, &server.node_id);
    }
    let request = client
        .request("POST")
        .header("Content-Type", "Application/JSON; charset=utf-8")
        .json(&ping(2));
    let t = client.exchange(&request).await.unwrap();
    assert_eq!(t.status, 200, "parameters and case are fine");
    assert_session_works(&mut client).await;
}

/// T56, T57, T58: a present, disallowed `Origin` is 403 (error without id); none, or a
/// loopback origin, is accepted by default; a configured list replaces the default.
#[tokio::test]
async fn bad_origin_is_403() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost.evil.example:8080",
    ] {
        for method in ["POST", "GET", "DELETE"] {
            let mut request = client.request(method).header("Origin", origin);
            if method == "POST" {
                request = request.json(&ping(1));
            }
            let t = client.exchange(&request).await.unwrap();
            assert_refused(&t, 403, -32600, &server.node_id);
        }
    }
    let request = client
        .request("POST")
        .header("Origin", "http://localhost:5173")
        .json(&ping(1));
    let t = client.exchange(&request).await.unwrap();
    assert_eq!(t.status, 200);
    assert_session_works(&mut client).await;

    let mut config = ServerConfig::default();

    config.allowed_origins = vec!["https://app.example.com".to_owned()];
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let allowed = client
        .request("POST")
        .header("Origin", "https://app.example.com")
        .json(&ping(1));
    let t = client.exchange(&allowed).await.unwrap();
    assert_eq!(t.status, 200);
    let loopback = client
        .request("POST")
        .header("Origin", "http://localhost")
        .json(&ping(1));
    let t = client.exchange(&loopback).await.unwrap();
    assert_refused(&t, 403, -32600, &server.node_id);
    assert_session_works(&mut client).await;
}

/// T60: a non-loopback `Host` is 403 by default (DNS rebinding); configured hosts are
/// accepted.
#[tokio::test]
async fn bad_host_is_403() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    for host in ["evil.example", "evil.example:80", "127.0.0.1.nip.io"] {
        let request = client.request("POST").header("Host", host).json(&ping(1));
        let t = client.exchange(&request).await.unwrap();
        assert_refused(&t, 403, -32600, &server.node_id);
    }
    let request = client
        .request("POST")
        .header("Host", "localhost:1")
        .json(&ping(1));
    let t = client.exchange(&request).await.unwrap();
    assert_eq!(t.status, 200);
    assert_session_works(&mut client).await;

    let mut config = ServerConfig::default();

    config.allowed_hosts = vec!["mcp.example.com".to_owned()];
    let server = TestServer::start(config).await;
    let mut client = server.client();
    let init = client.clone();
    let request = init
        .request("POST")
        .header("Host", "mcp.example.com")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": V11, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}));
    let t = init.exchange(&request).await.unwrap();
    assert_eq!(t.status, 200);
    client.set_session_id(t.headers.get("mcp-session-id").map(str::to_owned));
    let request = client.request("POST").json(&ping(2));
    let t = client.exchange(&request).await.unwrap();
    assert_refused(&t, 403, -32600, &server.node_id);
}

/// docs/CONTRACTS.md#status-table, 413 row: a body over the limit is 413, whether declared or
/// streamed.
#[tokio::test]
async fn body_over_the_limit_is_413() {
    let mut config = ServerConfig::default();
    config.max_body_bytes = 1024;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x".repeat(2000)}}});
    let t = client
        .post(&big)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 413, -32600, &server.node_id);

    // Chunked, without Content-Length: refused once the bytes pass the limit.
    let body = big.to_string();
    let mut chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).into_bytes();
    let mut request = client
        .request("POST")
        .header("Transfer-Encoding", "chunked")
        .to_bytes();
    request.append(&mut chunked);
    let t = client
        .send_bytes(&request)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 413, -32600, &server.node_id);
    assert_session_works(&mut client).await;
}

/// docs/CONTRACTS.md#status-table, 503 row: initialize beyond `max_sessions` is 503 with
/// `Retry-After`; after a DELETE frees a place, initialize works again.
#[tokio::test]
async fn too_many_sessions_is_503_with_retry_after() {
    let mut config = ServerConfig::default();
    config.max_sessions = 2;
    let server = TestServer::start(config).await;
    let mut first = server.session(V11).await;
    let _second = server.session(V11).await;
    let mut third = server.client();
    let params = json!({"protocolVersion": V11, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}});
    let (_, response) = third
        .post_request("initialize", params.clone())
        .await
        .unwrap();
    let t = response.read_to_end().await.unwrap();
    assert_refused(&t, 503, -32600, &server.node_id);
    let retry_after: u64 = t.headers.get("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert_session_works(&mut first).await;

    assert_eq!(first.delete_session().await.unwrap().status, 200);
    third.initialize().await.unwrap();
    assert_session_works(&mut third).await;
}

/// docs/CONTRACTS.md#status-table, 429 row: a request beyond the session's concurrency limit is 429
/// with `Retry-After`; the running one is unaffected, and once it ends requests work again.
#[tokio::test]
async fn too_many_concurrent_requests_is_429_with_retry_after() {
    let mut config = ServerConfig::default();
    config.max_concurrent_requests_per_session = 1;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let started = server.observed.started_notify.notified();
    let (wait_id, mut waiting) = client
        .call_tool("wait", json!({}), Some(json!("w")))
        .await
        .unwrap();
    started.await;
    let (_, response) = client
        .call_tool("echo", json!({"text": "x"}), None)
        .await
        .unwrap();
    let t = response.read_to_end().await.unwrap();
    assert_refused(&t, 429, -32600, &server.node_id);
    assert!(t.headers.get("retry-after").is_some());
    // ping is the transport's and needs no slot.
    let t = client
        .post(&ping(50))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": wait_id}});
    assert_eq!(client.post(&cancel).await.unwrap().status(), 202);
    while waiting.next_item().await.unwrap().is_some() {}
    assert_session_works(&mut client).await;
}

/// docs/CONTRACTS.md#last-event-id-row: malformed → 400 -32000 `malformed`; a well-formed id of
/// no stream, or of another session's stream, → `unknown` (T76, T77).
#[tokio::test]
async fn unusable_last_event_id_is_400_with_reason() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut other = server.session(V11).await;
    let (_, response) = other.post_request("ping", json!({})).await.unwrap();
    let others_id = response.read_to_end().await.unwrap().event_ids()[0].to_owned();

    for (id, reason) in [
        ("not-an-event-id", "malformed"),
        ("AAAAAAAAAAAAAAAAAAAAAA:01", "malformed"),
        ("AAAAAAAAAAAAAAAAAAAAAA:1", "unknown"),
        (others_id.as_str(), "unknown"),
    ] {
        let t = client
            .resume(id)
            .await
            .unwrap()
            .read_to_end()
            .await
            .unwrap();
        let error = assert_refused(&t, 400, -32000, &server.node_id);
        assert_eq!(error["data"]["reason"], reason, "{id}");
    }
    // The owner can resume it.
    let (_, response) = other.post_request("ping", json!({})).await.unwrap();
    let own = response.read_to_end().await.unwrap().event_ids()[0].to_owned();
    let t = other
        .resume(&own)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert_eq!(
        messages(&t).len(),
        1,
        "the response after the priming event"
    );
    assert_session_works(&mut client).await;
}

/// T44, T45, T41: DELETE is 200 and ends the session: a second DELETE, a POST and a GET are
/// then 404.
#[tokio::test]
async fn delete_ends_the_session() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.session(V11).await;
    let t = client.delete_session().await.unwrap();
    assert_eq!(t.status, 200);
    assert!(t.body.is_empty());
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
    let t = client.delete_session().await.unwrap();
    assert_refused(&t, 404, -32600, &server.node_id);
    let t = client
        .post(&ping(1))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 404, -32600, &server.node_id);
    let t = client
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 404, -32600, &server.node_id);
    // The store freed the session's events.
    let usage = server.usage(&client).await;
    assert_eq!(usage.events, 0, "{usage:?}");
}

/// docs/CONTRACTS.md#status-table, 405 row, T29: with GET streams turned off, GET is 405 with
/// `Allow: POST, DELETE` and an empty body.
#[tokio::test]
async fn get_disabled_is_405_with_allow() {
    let mut config = ServerConfig::default();
    config.get_streams = false;
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let t = client
        .open_get_stream()
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 405);
    assert_eq!(t.headers.get("allow"), Some("POST, DELETE"));
    assert!(t.body.is_empty());
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
    assert_session_works(&mut client).await;
}

/// T41: an idle session expires and is then 404; one with a GET stream open is busy and
/// stays.
#[tokio::test]
async fn idle_sessions_expire() {
    let mut config = ServerConfig::default();
    config.session_idle = Duration::from_millis(300);
    let server = TestServer::start(config).await;
    let idle = server.session(V11).await;
    let mut busy = server.session(V11).await;
    let stream = busy.open_get_stream().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let t = idle
        .post(&ping(1))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_refused(&t, 404, -32600, &server.node_id);
    assert_eq!(server.usage(&idle).await.events, 0, "expired session freed");
    assert_session_works(&mut busy).await;
    drop(stream);
}

/// `GET /healthz` is 200 with `Tether-Node`; every answer carries `Tether-Node`.
#[tokio::test]
async fn healthz_and_tether_node() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.client();
    let t = client
        .send(&RawRequest::new("GET", "/healthz").header("Host", "127.0.0.1"))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
    // Even a method the endpoint does not serve.
    let t = client
        .send(&client.request("PUT"))
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 405);
    assert_eq!(t.headers.get("tether-node"), Some(server.node_id.as_str()));
}

/// T98: `ping` is answered by the transport with `{}` (SSE and JSON).
#[tokio::test]
async fn ping_is_answered_by_the_transport() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.session(V11).await;
    let t = client
        .send(
            &client
                .request("POST")
                .header("Accept", "application/json")
                .json(&ping(9)),
        )
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(
        t.json().unwrap(),
        json!({"jsonrpc": "2.0", "id": 9, "result": {}})
    );
}

/// T27, T28, T31, T33: the standalone GET stream carries messages unrelated to any request
/// (never a response); a second GET replaces the first, whose body ends; each message is
/// delivered on one connection only.
#[tokio::test]
async fn standalone_stream_and_second_get_replaces_the_first() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let mut first = client.open_get_stream().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("cache-control").is_some());
    let priming = first.next_event().await.unwrap().unwrap();
    assert_eq!(priming.data, "", "a new GET stream is primed (T71)");

    let (id, response) = client
        .call_tool("announce", json!({"text": "one"}), None)
        .await
        .unwrap();
    let t = response.read_to_end().await.unwrap();
    let on_post = messages(&t);
    assert_eq!(
        on_post.len(),
        1,
        "only the response on the POST stream: {on_post:?}"
    );
    assert_eq!(on_post[0]["id"], id);
    let event = first.next_event().await.unwrap().unwrap();
    let message: Value = serde_json::from_str(&event.data).unwrap();
    assert_eq!(message["method"], "notifications/test/announce");
    assert_eq!(message["params"]["text"], "one");
    assert!(
        message.get("id").is_none(),
        "never a response on a fresh GET (T27)"
    );

    let mut second = client.open_get_stream().await.unwrap();
    assert_eq!(second.status(), 200);
    // The older connection is closed by the server.
    loop {
        match first.next_item().await.unwrap() {
            None => break,
            Some(SseItem::Event(event)) => panic!("nothing more on the replaced stream: {event:?}"),
            Some(_) => {}
        }
    }
    let primed = second.next_event().await.unwrap().unwrap();
    assert_eq!(primed.data, "");
    assert_eq!(primed.id, event.id, "primed with the last delivered id");
    client
        .call_tool("announce", json!({"text": "two"}), None)
        .await
        .unwrap()
        .1
        .read_to_end()
        .await
        .unwrap();
    let event = second.next_event().await.unwrap().unwrap();
    let message: Value = serde_json::from_str(&event.data).unwrap();
    assert_eq!(message["params"]["text"], "two", "not 'one' again");
    assert_session_works(&mut client).await;
}

/// T74 (graceful shutdown): open streams get a `retry` field and end; `serve` returns.
#[tokio::test]
async fn graceful_shutdown_closes_streams_with_retry() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    assert_eq!(get.next_event().await.unwrap().unwrap().data, "");
    server.stop().await.unwrap();
    let mut saw_retry = false;
    while let Some(item) = get.next_item().await.unwrap() {
        saw_retry |= matches!(item, SseItem::Retry(1000));
    }
    assert!(
        saw_retry,
        "retry before close: {:?}",
        get.transcript().items
    );
}

/// docs/CONTRACTS.md#keep-alive: a quiet stream gets a keep-alive comment every `keepalive`.
#[tokio::test]
async fn quiet_streams_get_keepalive_comments() {
    let mut config = ServerConfig::default();
    config.keepalive = Duration::from_millis(100);
    let server = TestServer::start(config).await;
    let mut client = server.session(V11).await;
    let mut get = client.open_get_stream().await.unwrap();
    let started = std::time::Instant::now();
    let mut comments = 0;
    while comments < 3 {
        match get.next_item().await.unwrap() {
            Some(SseItem::Comment(text)) => {
                assert_eq!(text, "keep-alive");
                comments += 1;
            }
            Some(_) => {}
            None => panic!("the stream ended"),
        }
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_session_works(&mut client).await;
}
