//! A 2026-07-28 request through the whole HTTP path of an in-process server (memory stores,
//! demo handler): any method (`tasks/*` included), envelope, `logLevel`, `requestState`,
//! `inputResponses`, listen filter, task id and standard headers. The server never panics and never answers 500; every refusal
//! with a body is a JSON-RPC error that echoes the request's id (docs/CONTRACTS.md#modern-status-table).
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tower::ServiceExt as _;

#[path = "support/server.rs"]
mod server;

const METHODS: [&str; 12] = [
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "server/discover",
    "subscriptions/listen",
    "tools/list",
    "tools/call",
    "resources/read",
    "prompts/get",
    "initialize",
    "ping",
    "unknown/method",
];

#[derive(Arbitrary, Debug)]
struct Input {
    method: u8,
    /// A method of its own instead of one of [`METHODS`].
    other_method: Option<String>,
    version: Option<String>,
    capabilities: Option<String>,
    log_level: Option<String>,
    request_state: Option<String>,
    input_responses: Option<String>,
    notifications: Option<String>,
    name: Option<String>,
    task_id: Option<String>,
    method_header: Option<String>,
    name_header: Option<String>,
    version_header: Option<String>,
}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    router: Router,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (runtime, router) = server::demo_server();
        Fixture { runtime, router }
    })
}

/// `text` as JSON when it parses, else as a string.
fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

fuzz_target!(|input: Input| {
    let fixture = fixture();
    let method = input
        .other_method
        .clone()
        .unwrap_or_else(|| METHODS[usize::from(input.method) % METHODS.len()].to_owned());
    let mut meta = serde_json::Map::new();
    if let Some(version) = &input.version {
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            value(version),
        );
    }
    if let Some(capabilities) = &input.capabilities {
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            value(capabilities),
        );
    }
    if let Some(level) = &input.log_level {
        meta.insert("io.modelcontextprotocol/logLevel".into(), value(level));
    }
    let mut params = json!({"_meta": meta});
    for (field, text) in [
        ("requestState", &input.request_state),
        ("inputResponses", &input.input_responses),
        ("notifications", &input.notifications),
        ("name", &input.name),
        ("taskId", &input.task_id),
    ] {
        if let Some(text) = text {
            params[field] = value(text);
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, text) in [
        ("mcp-protocol-version", &input.version_header),
        ("mcp-method", &input.method_header),
        ("mcp-name", &input.name_header),
    ] {
        if let Some(text) = text
            && let Ok(header) = http::HeaderValue::from_str(text)
        {
            request = request.header(name, header);
        }
    }
    let Ok(request) = request.body(Body::from(body.to_string())) else {
        return;
    };
    fixture.runtime.block_on(async {
        let response = fixture.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        assert!(
            !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "server error {status}"
        );
        let json = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        if status.is_client_error() || json {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            if !body.is_empty() {
                let value: Value = serde_json::from_slice(&body).expect("JSON answers are JSON");
                assert_eq!(value["jsonrpc"], "2.0", "{value}");
                if status.is_client_error() {
                    assert!(value["error"]["code"].is_i64(), "{value}");
                }
                if !value["id"].is_null() {
                    assert_eq!(value["id"], 9, "{value}");
                }
            }
        }
        // A 200 SSE body (a listen stream) may never end; it is dropped unread.
    });
});
