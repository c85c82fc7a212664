//! rmcp 3.11.0 serving `count {n, interval_ms}` (docs/CONTRACTS.md#demo-count) over Streamable HTTP,
//! as an interop peer for tether's tests.
//!
//! Usage: rmcp-peer [--bind ADDR] [--era legacy|modern] [--json-response] [--tasks]; ADDR defaults to
//! 127.0.0.1:0 (any free port), the era to legacy. Prints `peer: serving http://HOST:PORT/mcp`
//! once listening.
//!
//! * `legacy`: rmcp's default config (`legacy_session_mode: true`) with its `LocalSessionManager`,
//!   as in scripts/bench-peers.sh: `initialize` opens a session (`Mcp-Session-Id`) and its reply
//!   is primed with `retry: 500` (the session's request streams keep the 3 s of rmcp's
//!   `SessionConfig::sse_retry`). rmcp still routes a request carrying the complete 2026-07-28
//!   `_meta` envelope (and `server/discover`) down its stateless path, so this era answers those too.
//! * `modern`: `legacy_session_mode: false` with `NeverSessionManager`: every POST is served on
//!   its own, no session is ever created, GET and DELETE answer 405. 2026-07-28 requests
//!   (`server/discover`, per-request `_meta` envelope, `MCP-Protocol-Version`/`Mcp-Method`/
//!   `Mcp-Name` headers) are validated and answered; a 2025 `initialize` is still answered
//!   (statelessly, with no session id), since the supported versions stay rmcp's defaults.
//!
//! rmcp answers every request it serves statelessly (2026-07-28 ones in either era, all of them in
//! `modern`) as `text/event-stream`, even a lone result such as `server/discover`'s.
//! `--json-response` sets rmcp's `json_response: true`: a reply whose first message is the result
//! comes as `application/json` instead (a call that sends progress first stays SSE).
//!
//! `--tasks` adds the tasks extension (SEP-2663) with rmcp's in-memory `TaskManager`: the server
//! advertises it, and a `count` whose request declares it runs as a task (no progress: SEP-2663
//! tasks carry none), answered at once with a `CreateTaskResult`; `tasks/get`, `tasks/update` and
//! `tasks/cancel` go to the manager. rmcp has no task event streams (SEP-2694).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::task_manager::{TaskManager, TaskOptions};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
    session::{local::LocalSessionManager, never::NeverSessionManager},
};
use rmcp::{ErrorData, RoleServer, ServerHandler};

#[derive(Clone)]
struct Count {
    /// The tasks of `--tasks`, shared by every session's service.
    tasks: Option<Arc<TaskManager>>,
}

fn count_tool() -> Tool {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"n": {"type": "integer"}, "interval_ms": {"type": "integer"}},
        "required": ["n"],
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!()
    };
    let schema: JsonObject = schema;
    Tool::new("count", "Counts to n with progress", Arc::new(schema))
}

impl ServerHandler for Count {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.tasks.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        ServerConfig::new(capabilities)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.manager()?
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.manager()?
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.manager()?.cancel_task(&request.task_id)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![count_tool()]))
    }

    // Lets rmcp check SEP-2243 `Mcp-Param-*` headers of a tools/call against the schema.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == "count").then(count_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "count" {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {}", request.name),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let n = args
            .get("n")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let interval = args
            .get("interval_ms")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if let Some(tasks) = &self.tasks
            && context
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks())
        {
            let task = tasks.spawn(TaskOptions::default(), move |_task| {
                Box::pin(async move {
                    if interval > 0 {
                        tokio::time::sleep(Duration::from_millis(interval * n)).await;
                    }
                    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                        "counted {n}"
                    ))]))
                })
            });
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let token = context.meta.get_progress_token();
        for i in 1..=n {
            if let Some(token) = &token {
                let mut param = ProgressNotificationParam::new(token.clone(), i as f64);
                param.total = Some(n as f64);
                let _ = context.peer.notify_progress(param).await;
            }
            if interval > 0 {
                tokio::time::sleep(Duration::from_millis(interval)).await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("counted {n}"))]).into())
    }
}

impl Count {
    fn manager(&self) -> Result<&TaskManager, ErrorData> {
        self.tasks
            .as_deref()
            .ok_or_else(|| ErrorData::method_not_found::<rmcp::model::GetTaskMethod>())
    }
}

fn usage(message: &str) -> ! {
    eprintln!(
        "rmcp-peer: {message}\nusage: rmcp-peer [--bind ADDR] [--era legacy|modern] [--json-response] [--tasks]"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut bind = "127.0.0.1:0".to_owned();
    let mut era = "legacy".to_owned();
    let mut json_response = false;
    let mut tasks = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = args.next().unwrap_or_else(|| usage("--bind needs ADDR")),
            "--era" => {
                era = args
                    .next()
                    .unwrap_or_else(|| usage("--era needs legacy|modern"))
            }
            "--json-response" => json_response = true,
            "--tasks" => tasks = Some(Arc::new(TaskManager::new())),
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let router = match era.as_str() {
        "legacy" => {
            let config = StreamableHttpServerConfig::default()
                .with_sse_retry(Some(Duration::from_millis(500)))
                .with_json_response(json_response);
            let count = Count {
                tasks: tasks.clone(),
            };
            let service = StreamableHttpService::new(
                move || Ok(count.clone()),
                LocalSessionManager::default().into(),
                config,
            );
            axum::Router::new().nest_service("/mcp", service)
        }
        "modern" => {
            let config = StreamableHttpServerConfig::default()
                .with_legacy_session_mode(false)
                .with_json_response(json_response);
            let count = Count {
                tasks: tasks.clone(),
            };
            let service = StreamableHttpService::new(
                move || Ok(count.clone()),
                NeverSessionManager::default().into(),
                config,
            );
            axum::Router::new().nest_service("/mcp", service)
        }
        other => usage(&format!("unknown era {other}")),
    };
    let listener = tokio::net::TcpListener::bind(&bind).await.expect("bind");
    println!(
        "peer: serving http://{}/mcp",
        listener.local_addr().expect("addr")
    );
    axum::serve(listener, router).await.expect("serve");
}
