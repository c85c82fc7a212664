//! The whole HTTP request path of an in-process tether server (memory stores, demo handler):
//! any method, any of the MCP headers with any value, with or without a live session's id, any
//! body. The server never panics, never answers 500, and every refusal with a body carries a
//! JSON-RPC error (docs/CONTRACTS.md#wire-behaviour); the session stays usable.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use axum::Router;
use axum::body::Body;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

#[path = "support/server.rs"]
mod server;

const HEADERS: [&str; 9] = [
    "accept",
    "content-type",
    "mcp-protocol-version",
    "mcp-session-id",
    "last-event-id",
    "origin",
    "host",
    "authorization",
    "content-length",
];
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::DELETE,
    Method::PUT,
    Method::OPTIONS,
];

#[derive(Arbitrary, Debug)]
struct Input {
    method: u8,
    /// Send the live session's id (before any fuzzed headers, which may replace it).
    with_session: bool,
    /// Send the headers a well-behaved client sends (before the fuzzed ones).
    well_formed: bool,
    headers: Vec<(u8, String)>,
    body: Vec<u8>,
}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    router: Router,
    session: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (runtime, router) = server::demo_server();
        let session = runtime.block_on(async {
            let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}"#;
            let request = Request::post("/mcp")
                .header("host", "127.0.0.1")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(Body::from(init))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.headers()["mcp-session-id"].to_str().unwrap().to_owned()
        });
        Fixture {
            runtime,
            router,
            session,
        }
    })
}

fuzz_target!(|input: Input| {
    let fixture = fixture();
    let method = METHODS[usize::from(input.method) % METHODS.len()].clone();
    let mut request = Request::builder().method(method).uri("/mcp");
    if input.well_formed {
        request = request
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
    }
    if input.with_session {
        request = request.header("mcp-session-id", fixture.session.as_str());
    }
    for (name, value) in &input.headers {
        let name = HeaderName::from_static(HEADERS[usize::from(*name) % HEADERS.len()]);
        if let Ok(value) = HeaderValue::from_str(value) {
            request = request.header(name, value);
        }
    }
    let Ok(request) = request.body(Body::from(input.body)) else {
        return;
    };
    fixture.runtime.block_on(async {
        let response = fixture.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        assert!(
            !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "server error {status}"
        );
        if status.is_client_error() || status.is_server_error() {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            if !body.is_empty() {
                let value: serde_json::Value =
                    serde_json::from_slice(&body).expect("refusal bodies are JSON");
                assert_eq!(value["jsonrpc"], "2.0", "{value}");
                assert!(value["error"]["code"].is_i64(), "{value}");
            }
        }
        // A 200 SSE body may never end (the standalone stream); it is dropped unread.
    });
});
