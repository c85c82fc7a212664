//! The built-in demo server of `tether serve`: a [`Handler`] with the tools `count` and `echo`
//! and the `logging` capability.
//!
//! `count` is the tool every resumability test and benchmark drives, so its behaviour is pinned
//! by docs/CONTRACTS.md#demo-count: n progress notifications (or, without a progress
//! token, n log messages), then the text `counted n`. This module owns the demo's tools and
//! their argument rules; it knows nothing about HTTP, sessions or streams — everything it emits
//! goes through the [`RequestContext`], like any user's handler.
//!
//! Argument errors: a call whose arguments break a tool's rules (`n` missing, negative, not an
//! integer or above [`MAX_COUNT`]; `text` missing) returns a tool result with `isError: true`
//! and a message saying what is wrong, because MCP 2025-11-25 (server/tools, "Error
//! Handling") classes input validation errors as tool execution errors, which a model can read
//! and correct. A request that is not a well-formed `tools/call` at all (no `name`,
//! `arguments` not an object) or names an unknown tool is a protocol error: JSON-RPC -32602.
//!
//! The second demo, `tether serve --demo conformance` (the official conformance suite's
//! fixtures), is the `tether-conformance` crate's, so this library carries none of them.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tether_proto::jsonrpc::{ErrorObject, INTERNAL_ERROR, Request, tool_call_params};

use crate::server::{ContextError, Handler, LogLevel, RequestContext, ServerInfo};

/// Largest `n` that `count` accepts (docs/CONTRACTS.md#demo-count). Ten million events is far
/// beyond any test or benchmark (a million already takes seconds), and the bound keeps one call
/// from keeping a session busy for hours or making a durable store write without end.
pub const MAX_COUNT: u64 = 10_000_000;

/// `serverInfo.name` of the demo server.
pub const SERVER_NAME: &str = "tether-demo";

/// The logger name `count` uses for its log messages (docs/CONTRACTS.md#demo-count).
const COUNT_LOGGER: &str = "count";

/// `count` yields to the scheduler after this many events when it does not sleep between
/// them: appending to the memory store may never suspend, and a ten-million-event loop must
/// not monopolise a runtime worker that other sessions' connections share.
const YIELD_EVERY: u64 = 256;

/// The built-in demo [`Handler`]: tools `count` and `echo`, and `logging/setLevel`.
#[derive(Debug, Clone, Default)]
pub struct DemoHandler {
    // Keeps construction to `new`/`default`, so fields can be added without breaking users.
    _private: (),
}

impl DemoHandler {
    /// The demo handler.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The `tools/list` result: every tool with its input schema.
    #[must_use]
    pub fn tools() -> Value {
        json!({
            "tools": [
                {
                    "name": "count",
                    "title": "Count",
                    "description": "Counts to n, reporting each step as a progress \
                        notification (with a progressToken) or as an info log message \
                        (without one), then returns \"counted n\".",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "n": {
                                "type": "integer",
                                "minimum": 0,
                                "maximum": MAX_COUNT,
                                "description": "How many events to emit."
                            },
                            "interval_ms": {
                                "type": "integer",
                                "minimum": 0,
                                "default": 0,
                                "description": "Milliseconds to sleep between events."
                            }
                        },
                        "required": ["n"]
                    }
                },
                {
                    "name": "echo",
                    "title": "Echo",
                    "description": "Returns the given text.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string", "description": "The text to echo."}
                        },
                        "required": ["text"]
                    }
                }
            ]
        })
    }

    async fn call_tool(
        &self,
        params: Option<&Value>,
        context: &RequestContext,
    ) -> Result<Value, ErrorObject> {
        let (name, arguments) = tool_call_params(params)?;
        match name {
            "count" => match CountArgs::parse(arguments) {
                Ok(args) => count(args, context).await,
                Err(message) => Ok(tool_error(&message)),
            },
            "echo" => match arguments.get("text").and_then(Value::as_str) {
                Some(text) => Ok(text_result(text)),
                None => Ok(tool_error("echo: `text` is required and must be a string")),
            },
            other => Err(ErrorObject::invalid_params(format!(
                "unknown tool: {other}"
            ))),
        }
    }
}

#[async_trait]
impl Handler for DemoHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: SERVER_NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: json!({"tools": {}, "logging": {}}),
            instructions: None,
        }
    }

    /// `count` may run as a task.
    fn offers_tasks(&self) -> bool {
        true
    }

    /// `count` runs as a task for a 2026-07-28 client that declares the tasks extension.
    fn task_support(&self, call: &Request) -> crate::server::TaskSupport {
        let tool = call
            .params
            .as_ref()
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str);
        if tool == Some("count") {
            crate::server::TaskSupport::Optional
        } else {
            crate::server::TaskSupport::Forbidden
        }
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        match request.method.as_str() {
            "tools/list" => Ok(Self::tools()),
            "tools/call" => self.call_tool(request.params.as_ref(), &context).await,
            "logging/setLevel" => {
                let level = request
                    .params
                    .as_ref()
                    .and_then(|p| p.get("level"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ErrorObject::invalid_params("logging/setLevel needs a string `level`")
                    })?;
                let level: LogLevel = level.parse().map_err(|_| {
                    ErrorObject::invalid_params(format!(
                        "unknown log level {level:?}; expected one of debug, info, notice, \
                         warning, error, critical, alert, emergency"
                    ))
                })?;
                context.session().set_log_level(level);
                Ok(json!({}))
            }
            // The transport answers `ping` itself; answering here too keeps the demo correct
            // under a transport that forwards it.
            "ping" => Ok(json!({})),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

/// The validated arguments of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CountArgs {
    n: u64,
    interval: Duration,
}

impl CountArgs {
    /// Checks `count`'s arguments; the error is the message for an `isError` result.
    fn parse(arguments: &Map<String, Value>) -> Result<Self, String> {
        let n = match arguments.get("n") {
            None | Some(Value::Null) => {
                return Err(format!(
                    "count: `n` is required (an integer from 0 to {MAX_COUNT})"
                ));
            }
            Some(value) => non_negative_integer("n", value)?,
        };
        if n > MAX_COUNT {
            return Err(format!("count: `n` must be at most {MAX_COUNT}, got {n}"));
        }
        let interval_ms = match arguments.get("interval_ms") {
            None | Some(Value::Null) => 0,
            Some(value) => non_negative_integer("interval_ms", value)?,
        };
        Ok(Self {
            n,
            interval: Duration::from_millis(interval_ms),
        })
    }
}

/// A JSON integer ≥ 0. `3.0` counts as an integer, as in JSON Schema.
fn non_negative_integer(name: &str, value: &Value) -> Result<u64, String> {
    if let Some(n) = value.as_u64() {
        return Ok(n);
    }
    let as_float = value.as_f64();
    let negative = value.as_i64().is_some() || as_float.is_some_and(|f| f < 0.0);
    if negative {
        return Err(format!("count: `{name}` must be >= 0, got {value}"));
    }
    match as_float {
        // Integral floats up to 2^53 are exact; larger ones exceed every limit anyway.
        Some(f) if f.fract() == 0.0 && f < 9_007_199_254_740_992.0 => Ok(f as u64),
        _ => Err(format!("count: `{name}` must be an integer, got {value}")),
    }
}

/// Runs `count` (docs/CONTRACTS.md#demo-count): events 1..=n, then `counted n`.
async fn count(args: CountArgs, context: &RequestContext) -> Result<Value, ErrorObject> {
    let CountArgs { n, interval } = args;
    let with_progress = context.progress_token().is_some();
    // n ≤ MAX_COUNT < 2^53, so every step is exact as an f64.
    let total = n as f64;
    for i in 1..=n {
        let emitted = if with_progress {
            // Fails with `Cancelled` once the request is cancelled: no check of our own, as
            // each takes a lock and this is the loop every benchmark drives.
            context.progress(i as f64, Some(total), None).await
        } else if context.is_cancelled() {
            // A log message below the session's level is not emitted, so nothing else would
            // notice.
            return Err(ErrorObject::cancelled());
        } else {
            context
                .log(
                    LogLevel::Info,
                    Some(COUNT_LOGGER),
                    json!({"index": i, "total": n}),
                )
                .await
        };
        emitted.map_err(context_error)?;
        if i == n {
            break;
        }
        if interval.is_zero() {
            if i % YIELD_EVERY == 0 {
                tokio::task::yield_now().await;
            }
        } else {
            // Cancellation wakes the sleep, so a long interval does not delay the stop.
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = context.cancelled() => return Err(ErrorObject::cancelled()),
            }
        }
    }
    if context.is_cancelled() {
        return Err(ErrorObject::cancelled());
    }
    Ok(text_result(&format!("counted {n}")))
}

/// A successful tool result with one text block.
fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A tool result reporting a tool execution error (MCP `isError: true`).
fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// The context could not emit (the session ended, the store failed): the call cannot keep its
/// promise of n events, so it fails rather than returning `counted n`.
fn context_error(error: ContextError) -> ErrorObject {
    match error {
        ContextError::Cancelled => ErrorObject::cancelled(),
        other => ErrorObject::new(INTERNAL_ERROR, format!("count: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Result<CountArgs, String> {
        CountArgs::parse(value.as_object().unwrap())
    }

    #[test]
    fn count_arguments() {
        assert_eq!(
            args(json!({"n": 3})),
            Ok(CountArgs {
                n: 3,
                interval: Duration::ZERO
            })
        );
        assert_eq!(
            args(json!({"n": 2.0, "interval_ms": 5})),
            Ok(CountArgs {
                n: 2,
                interval: Duration::from_millis(5)
            })
        );
        assert_eq!(args(json!({"n": MAX_COUNT})).map(|a| a.n), Ok(MAX_COUNT));
        assert!(args(json!({})).unwrap_err().contains("`n` is required"));
        assert!(args(json!({"n": -1})).unwrap_err().contains(">= 0"));
        assert!(args(json!({"n": -1.5})).unwrap_err().contains(">= 0"));
        assert!(args(json!({"n": 1.5})).unwrap_err().contains("integer"));
        assert!(args(json!({"n": "3"})).unwrap_err().contains("integer"));
        assert!(
            args(json!({"n": MAX_COUNT + 1}))
                .unwrap_err()
                .contains("at most")
        );
        assert!(
            args(json!({"n": 1, "interval_ms": -2}))
                .unwrap_err()
                .contains("`interval_ms` must be >= 0")
        );
    }
}
