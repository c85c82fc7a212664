//! The conformance fixtures of `tether serve --demo conformance`: a [`Handler`] with every
//! tool, resource and prompt that the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, server mode) calls by name, plus the demo's `count`
//! and `echo`, so that one server serves both.
//!
//! Each fixture does what its scenario's description asks (`conformance list --server`, and the
//! suite's reference server for the details the descriptions leave open): fixed content for
//! `test_simple_text`, `test://static-text`, `test_simple_prompt` and the like; log messages
//! and progress notifications spaced 50 ms apart; sampling and elicitation as server→client
//! requests on the calling request's own stream ([`RequestContext::request`]);
//! `test_reconnection` closes its POST connection mid-call through
//! [`RequestContext::close_connection`] (SEP-1699 polling) and answers after the client has
//! had time to see the close, so the result reaches it on the resumed stream.
//!
//! The server capabilities the suite exercises beyond tools live here too, not in the
//! transport: resource subscriptions (tracked per session, freed when the session ends; no
//! fixture resource ever changes, so no update is ever sent), `completion/complete` (prefix
//! matches from a fixed list per argument) and `logging/setLevel` (the demo's). The client's
//! capabilities, recorded at `initialize`, decide whether sampling and elicitation are even
//! tried: a client known not to offer them gets a tool error, as the scenarios require; a
//! session this process did not initialize (a persistent store across a restart) is tried
//! anyway. This module knows nothing about HTTP, sessions' wire details or streams.

// The helpers return the handler API's own error type (`ErrorObject`, what
// `Handler::handle_request` returns) on cold paths; boxing it would only add conversions.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tether::proto::ids::SessionId;
use tether::proto::jsonrpc::{ErrorObject, INTERNAL_ERROR, Request};

use tether::demo::DemoHandler;
use tether::proto::jsonrpc::tool_call_params;
use tether::server::{
    ContextError, Era, Handler, LogLevel, RequestContext, ServerInfo, SessionContext, TaskSupport,
};

/// `serverInfo.name` of the conformance fixture server.
pub const SERVER_NAME: &str = "tether-conformance";

/// The JSON-RPC error code MCP assigns to "resource not found" (server/resources, "Error
/// Handling").
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// Most resource subscriptions one session may hold. The fixtures have three resources and a
/// template, so a session needs a handful; the bound keeps a client that subscribes to endless
/// made-up URIs from growing the server's memory without limit.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// Most completion values returned for one `completion/complete` (MCP caps the list at 100).
const MAX_COMPLETIONS: usize = 100;

/// The pause between the log messages of `test_tool_with_logging` and the progress
/// notifications of `test_tool_with_progress` (their scenarios: "after ~50ms delay"), so that
/// clients see several messages arrive during one call rather than in one burst.
const STEP_DELAY: Duration = Duration::from_millis(50);

/// How long `test_reconnection` waits after asking for its connection to close before it
/// answers. The writer acts on the close as soon as it next runs (one last read, the `retry`
/// field, the end), which takes well under a millisecond on an idle machine; the wide margin
/// covers a loaded one, so that the result is appended after the connection ended and reaches
/// the client on the resumed stream, as the scenario intends (the suite's reference server
/// waits 100 ms). Were it appended earlier, the client would still get it exactly once, on
/// the POST stream. The context offers no signal for "the closed connection has ended" that
/// could replace the wait: polling `close_connection` until it returns `false` would also
/// close the client's resumed connection if it came back between two polls.
const RECONNECTION_SETTLE: Duration = Duration::from_millis(500);

/// The logger name of the fixtures' log messages.
const LOGGER: &str = "conformance";

/// A 1×1 red PNG: the image of `test_image_content`, `test_multiple_content_types`,
/// `test_prompt_with_image` and the blob of `test://static-binary`.
const TEST_IMAGE_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A minimal WAV file (44-byte header, one silent sample): the audio of `test_audio_content`.
const TEST_AUDIO_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The `$schema` of `json_schema_2020_12_tool`'s input schema (SEP-1613).
const JSON_SCHEMA_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// `test://template/{id}/data`, split around its one variable.
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// The conformance fixture [`Handler`]: the suite's tools, resources, prompts, completions,
/// subscriptions and logging, plus the demo's `count` and `echo`.
#[derive(Debug, Default)]
pub struct ConformanceHandler {
    demo: DemoHandler,
    /// What this process knows about each live session it initialized or that subscribed.
    sessions: Mutex<HashMap<SessionId, SessionState>>,
}

/// Per-session state.
#[derive(Debug, Default)]
struct SessionState {
    /// The client's `capabilities` from `initialize`; `None` for a session this process did
    /// not initialize.
    client_capabilities: Option<Value>,
    /// Subscribed resource URIs.
    subscriptions: BTreeSet<String>,
}

impl SessionState {
    /// Adds a subscription (again subscribing to a URI changes nothing); the error is the
    /// message of the `-32602` that refuses one beyond [`MAX_SUBSCRIPTIONS`].
    fn subscribe(&mut self, uri: String) -> Result<(), String> {
        if self.subscriptions.len() >= MAX_SUBSCRIPTIONS && !self.subscriptions.contains(&uri) {
            return Err(format!(
                "resources/subscribe: at most {MAX_SUBSCRIPTIONS} subscriptions per session"
            ));
        }
        self.subscriptions.insert(uri);
        Ok(())
    }
}

/// A server→client feature a tool needs from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientFeature {
    Sampling,
    Elicitation,
}

impl ClientFeature {
    fn capability(self) -> &'static str {
        match self {
            Self::Sampling => "sampling",
            Self::Elicitation => "elicitation",
        }
    }
}

impl ConformanceHandler {
    /// The conformance fixture handler.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The `tools/list` result: the fixtures' tools, then the demo's.
    #[must_use]
    pub fn tools() -> Value {
        let no_arguments = || json!({"type": "object", "properties": {}});
        let mut tools = vec![
            tool(
                "test_simple_text",
                "Returns one text block.",
                no_arguments(),
            ),
            tool(
                "test_image_content",
                "Returns one image block (a 1x1 PNG).",
                no_arguments(),
            ),
            tool(
                "test_audio_content",
                "Returns one audio block (a minimal WAV).",
                no_arguments(),
            ),
            tool(
                "test_embedded_resource",
                "Returns one embedded text resource.",
                no_arguments(),
            ),
            tool(
                "test_multiple_content_types",
                "Returns a text, an image and an embedded resource block.",
                no_arguments(),
            ),
            tool(
                "test_tool_with_logging",
                "Sends three info log messages 50 ms apart, then returns.",
                no_arguments(),
            ),
            tool(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100, 50 ms apart, then returns.",
                no_arguments(),
            ),
            tool(
                "test_error_handling",
                "Always fails with a tool execution error (isError: true).",
                no_arguments(),
            ),
            tool(
                "test_reconnection",
                "Closes the SSE connection of its call mid-call (SEP-1699) and answers after \
                 the client reconnected and resumed.",
                no_arguments(),
            ),
            tool(
                "test_sampling",
                "Asks the client for an LLM completion of the prompt (sampling/createMessage) \
                 and returns its text.",
                json!({
                    "type": "object",
                    "properties": {
                        "prompt": {
                            "type": "string",
                            "description": "The prompt to send to the LLM"
                        }
                    },
                    "required": ["prompt"]
                }),
            ),
            tool(
                "test_elicitation",
                "Asks the user for a username and an email (elicitation/create) and returns \
                 the answer.",
                json!({
                    "type": "object",
                    "properties": {
                        "message": {
                            "type": "string",
                            "description": "The message to show the user"
                        }
                    },
                    "required": ["message"]
                }),
            ),
            tool(
                "test_elicitation_sep1034_defaults",
                "Elicits a form whose fields of every primitive type have defaults (SEP-1034).",
                no_arguments(),
            ),
            tool(
                "test_elicitation_sep1330_enums",
                "Elicits a form with all five enum schema variants (SEP-1330).",
                no_arguments(),
            ),
            tool(
                "json_schema_2020_12_tool",
                "Tool with JSON Schema 2020-12 features (SEP-1613).",
                // The suite's 2026-07-28 run (SEP-2106) checks that composition,
                // conditional and anchor keywords reach the client as written.
                json!({
                    "$schema": JSON_SCHEMA_2020_12,
                    "type": "object",
                    "$defs": {
                        "address": {
                            "$anchor": "addressDef",
                            "type": "object",
                            "properties": {
                                "street": {"type": "string"},
                                "city": {"type": "string"}
                            }
                        }
                    },
                    "properties": {
                        "name": {"type": "string"},
                        "address": {"$ref": "#/$defs/address"},
                        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                        "phone": {"type": "string"},
                        "email": {"type": "string"}
                    },
                    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                    "if": {
                        "properties": {"contactMethod": {"const": "phone"}},
                        "required": ["contactMethod"]
                    },
                    "then": {"required": ["phone"]},
                    "else": {"required": ["email"]},
                    "additionalProperties": false
                }),
            ),
        ];
        if let Value::Array(demo) = DemoHandler::tools()["tools"].take() {
            tools.extend(demo);
            tools.extend(crate::stateless::tools());
            tools.extend(crate::stateless::task_tools());
        }
        json!({ "tools": tools })
    }

    /// The `resources/list` result: the direct resources.
    #[must_use]
    pub fn resources() -> Value {
        json!({
            "resources": [
                {
                    "uri": "test://static-text",
                    "name": "static-text",
                    "title": "Static Text Resource",
                    "description": "A static text resource for testing",
                    "mimeType": "text/plain"
                },
                {
                    "uri": "test://static-binary",
                    "name": "static-binary",
                    "title": "Static Binary Resource",
                    "description": "A static binary resource (a PNG image) for testing",
                    "mimeType": "image/png"
                },
                {
                    "uri": "test://watched-resource",
                    "name": "watched-resource",
                    "title": "Watched Resource",
                    "description": "A resource to subscribe to (it never changes)",
                    "mimeType": "text/plain"
                }
            ]
        })
    }

    /// The `resources/templates/list` result.
    #[must_use]
    pub fn resource_templates() -> Value {
        json!({
            "resourceTemplates": [
                {
                    "uriTemplate": "test://template/{id}/data",
                    "name": "template",
                    "title": "Resource Template",
                    "description": "A resource template with parameter substitution",
                    "mimeType": "application/json"
                }
            ]
        })
    }

    /// The `prompts/list` result.
    #[must_use]
    pub fn prompts() -> Value {
        let argument = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
        let mut listed = json!({
            "prompts": [
                {
                    "name": "test_simple_prompt",
                    "title": "Simple Test Prompt",
                    "description": "A simple prompt without arguments"
                },
                {
                    "name": "test_prompt_with_arguments",
                    "title": "Prompt With Arguments",
                    "description": "A prompt with required arguments",
                    "arguments": [
                        argument("arg1", "First test argument"),
                        argument("arg2", "Second test argument")
                    ]
                },
                {
                    "name": "test_prompt_with_embedded_resource",
                    "title": "Prompt With Embedded Resource",
                    "description": "A prompt that includes an embedded resource",
                    "arguments": [argument("resourceUri", "URI of the resource to embed")]
                },
                {
                    "name": "test_prompt_with_image",
                    "title": "Prompt With Image",
                    "description": "A prompt that includes image content"
                }
            ]
        });
        let prompts = listed["prompts"].as_array_mut().expect("an array");
        prompts.extend(crate::stateless::prompts());
        listed
    }

    async fn call_tool(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let (name, arguments) = tool_call_params(request.params.as_ref())?;
        match name {
            "test_simple_text" => Ok(content(vec![text(
                "This is a simple text response for testing.",
            )])),
            "test_image_content" => Ok(content(vec![image()])),
            "test_audio_content" => Ok(content(vec![json!({
                "type": "audio",
                "data": TEST_AUDIO_BASE64,
                "mimeType": "audio/wav"
            })])),
            "test_embedded_resource" => Ok(content(vec![embedded_text(
                "test://embedded-resource",
                "text/plain",
                "This is an embedded resource content.",
            )])),
            "test_multiple_content_types" => Ok(content(vec![
                text("Multiple content types test:"),
                image(),
                embedded_text(
                    "test://mixed-content-resource",
                    "application/json",
                    &json!({"test": "data", "value": 123}).to_string(),
                ),
            ])),
            "test_tool_with_logging" => with_logging(&context).await,
            "test_tool_with_progress" => with_progress(&context).await,
            "test_error_handling" => Ok(tool_error(
                "This tool intentionally returns an error for testing",
            )),
            "test_reconnection" => Ok(reconnection(&context).await),
            "test_sampling" => match string_argument(arguments, "prompt") {
                Ok(prompt) => self.sampling(prompt, &context).await,
                Err(message) => Ok(tool_error(&message)),
            },
            "test_elicitation" => match string_argument(arguments, "message") {
                Ok(message) => {
                    let schema = json!({
                        "type": "object",
                        "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}
                        },
                        "required": ["username", "email"]
                    });
                    self.elicit(message, schema, "User response", &context)
                        .await
                }
                Err(message) => Ok(tool_error(&message)),
            },
            "test_elicitation_sep1034_defaults" => {
                self.elicit(
                    "Please review and update the form fields with defaults",
                    sep1034_schema(),
                    "Elicitation completed",
                    &context,
                )
                .await
            }
            "test_elicitation_sep1330_enums" => {
                self.elicit(
                    "Please select options from the enum fields",
                    sep1330_schema(),
                    "Elicitation completed",
                    &context,
                )
                .await
            }
            "json_schema_2020_12_tool" => Ok(content(vec![text(&format!(
                "JSON Schema 2020-12 tool called with: {}",
                Value::Object(arguments.clone())
            ))])),
            "count" | "echo" => self.demo.handle_request(request, context).await,
            other => {
                if let Some(outcome) = crate::stateless::call(other, &context).await {
                    return outcome;
                }
                match crate::stateless::call_task_tool(other, arguments, &context).await {
                    Some(outcome) => outcome,
                    None => Err(ErrorObject::invalid_params(format!(
                        "unknown tool: {other}"
                    ))),
                }
            }
        }
    }

    /// Whether the session's client is known not to offer `feature`.
    fn lacks(&self, session: &SessionContext, feature: ClientFeature) -> bool {
        let sessions = lock(&self.sessions);
        let capabilities = sessions
            .get(session.session_id())
            .and_then(|state| state.client_capabilities.as_ref());
        capabilities.is_some_and(|capabilities| capabilities.get(feature.capability()).is_none())
    }

    /// `test_sampling`: one `sampling/createMessage` round trip on the call's stream.
    async fn sampling(&self, prompt: &str, context: &RequestContext) -> Result<Value, ErrorObject> {
        if self.lacks(context.session(), ClientFeature::Sampling) {
            return Ok(tool_error(
                "test_sampling: the client does not support sampling (no `sampling` capability)",
            ));
        }
        let params = json!({
            "messages": [
                {"role": "user", "content": {"type": "text", "text": prompt}}
            ],
            "maxTokens": 100
        });
        match context.request("sampling/createMessage", params).await {
            Ok(result) => {
                let reply = sampled_text(&result).unwrap_or("(no text in the sampling result)");
                Ok(content(vec![text(&format!("LLM response: {reply}"))]))
            }
            Err(error) => round_trip_failed("test_sampling", "sampling", error),
        }
    }

    /// The elicitation tools: one `elicitation/create` round trip on the call's stream, and a
    /// text block `<label>: action=…, content=…` with the answer.
    async fn elicit(
        &self,
        message: &str,
        requested_schema: Value,
        label: &str,
        context: &RequestContext,
    ) -> Result<Value, ErrorObject> {
        if self.lacks(context.session(), ClientFeature::Elicitation) {
            return Ok(tool_error(
                "elicitation: the client does not support elicitation (no `elicitation` \
                 capability)",
            ));
        }
        let params = json!({"message": message, "requestedSchema": requested_schema});
        match context.request("elicitation/create", params).await {
            Ok(result) => {
                let action = result
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)");
                let answer = result.get("content").cloned().unwrap_or_else(|| json!({}));
                Ok(content(vec![text(&format!(
                    "{label}: action={action}, content={answer}"
                ))]))
            }
            Err(error) => round_trip_failed("elicitation", "elicitation", error),
        }
    }

    fn subscribe(&self, session: &SessionContext, uri: String) -> Result<Value, ErrorObject> {
        lock(&self.sessions)
            .entry(session.session_id().clone())
            .or_default()
            .subscribe(uri)
            .map_err(ErrorObject::invalid_params)?;
        Ok(json!({}))
    }

    fn unsubscribe(&self, session: &SessionContext, uri: &str) -> Value {
        if let Some(state) = lock(&self.sessions).get_mut(session.session_id()) {
            state.subscriptions.remove(uri);
        }
        json!({})
    }

    /// The URIs `session` is subscribed to, in order.
    #[must_use]
    pub fn subscriptions(&self, session: &SessionId) -> Vec<String> {
        lock(&self.sessions)
            .get(session)
            .map(|state| state.subscriptions.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Handler for ConformanceHandler {
    fn server_info(&self) -> ServerInfo {
        ServerInfo {
            name: SERVER_NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: json!({
                "tools": {"listChanged": true},
                "resources": {"subscribe": true},
                "prompts": {"listChanged": true},
                "logging": {},
                "completions": {}
            }),
            instructions: None,
        }
    }

    async fn initialize(
        &self,
        request: &Request,
        session: SessionContext,
    ) -> Result<Value, ErrorObject> {
        let capabilities = request
            .params
            .as_ref()
            .and_then(|params| params.get("capabilities"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        lock(&self.sessions)
            .entry(session.session_id().clone())
            .or_default()
            .client_capabilities = Some(capabilities);
        Ok(self.server_info().initialize_result(&session))
    }

    fn offers_tasks(&self) -> bool {
        true
    }

    fn task_support(&self, call: &Request) -> TaskSupport {
        let params = call.params.as_ref();
        let tool = params
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        match tool {
            // The demo's counter runs as a task when the client can follow one.
            "count" => TaskSupport::Optional,
            other => crate::stateless::task_support(other, params).unwrap_or_default(),
        }
    }

    fn session_closed(&self, session: &SessionId) {
        lock(&self.sessions).remove(session);
    }

    async fn shutdown(&self) {
        lock(&self.sessions).clear();
    }

    async fn handle_request(
        &self,
        request: Request,
        context: RequestContext,
    ) -> Result<Value, ErrorObject> {
        match request.method.as_str() {
            "tools/list" => Ok(Self::tools()),
            "tools/call" => self.call_tool(request, context).await,
            "resources/list" => Ok(Self::resources()),
            "resources/templates/list" => Ok(Self::resource_templates()),
            "resources/read" => {
                read_resource(uri_param(&request, "resources/read")?, context.era())
            }
            "resources/subscribe" => {
                let uri = uri_param(&request, "resources/subscribe")?.to_owned();
                self.subscribe(context.session(), uri)
            }
            "resources/unsubscribe" => Ok(self.unsubscribe(
                context.session(),
                uri_param(&request, "resources/unsubscribe")?,
            )),
            "prompts/list" => Ok(Self::prompts()),
            "prompts/get" => {
                let name = request
                    .params
                    .as_ref()
                    .and_then(|params| params.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match crate::stateless::get_prompt(name, &context).await {
                    Some(outcome) => outcome,
                    None => get_prompt(request.params.as_ref()),
                }
            }
            "completion/complete" => complete(request.params.as_ref()),
            // `logging/setLevel` and `ping` are the demo's.
            "logging/setLevel" | "ping" => self.demo.handle_request(request, context).await,
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tools that take time

/// `test_tool_with_logging`: three info messages, 50 ms apart.
async fn with_logging(context: &RequestContext) -> Result<Value, ErrorObject> {
    let steps = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    for (i, step) in steps.into_iter().enumerate() {
        if i > 0 {
            pause(context).await?;
        }
        context
            .log(LogLevel::Info, Some(LOGGER), json!(step))
            .await
            .map_err(emit_failed)?;
    }
    Ok(content(vec![text(
        "Tool with logging executed successfully",
    )]))
}

/// `test_tool_with_progress`: progress 0, 50, 100 of 100, 50 ms apart (nothing without a
/// progress token, but the same delays).
async fn with_progress(context: &RequestContext) -> Result<Value, ErrorObject> {
    const TOTAL: f64 = 100.0;
    for (i, step) in [0.0, 50.0, TOTAL].into_iter().enumerate() {
        if i > 0 {
            pause(context).await?;
        }
        let message = format!("Completed step {step} of {TOTAL}");
        context
            .progress(step, Some(TOTAL), Some(&message))
            .await
            .map_err(emit_failed)?;
    }
    let token = context
        .progress_token()
        .map_or_else(|| "none".to_owned(), |token| json!(token).to_string());
    Ok(content(vec![text(&format!(
        "Progress reported 0, 50 and 100 of 100 (progress token {token})"
    ))]))
}

/// `test_reconnection`: closes the connection carrying this call's stream, then answers once
/// the close went out (see [`RECONNECTION_SETTLE`]). Sessions that cannot poll (versions
/// before 2025-11-25, JSON-response mode) get the answer at once on their open connection.
async fn reconnection(context: &RequestContext) -> Value {
    if context.close_connection(None) {
        tokio::select! {
            () = tokio::time::sleep(RECONNECTION_SETTLE) => {}
            () = context.cancelled() => {}
        }
    }
    content(vec![text(
        "Reconnection test completed successfully. If you received this, the client properly \
         reconnected after stream closure.",
    )])
}

/// Waits [`STEP_DELAY`], or fails at once when the request is cancelled.
async fn pause(context: &RequestContext) -> Result<(), ErrorObject> {
    tokio::select! {
        () = tokio::time::sleep(STEP_DELAY) => Ok(()),
        () = context.cancelled() => Err(emit_failed(ContextError::Cancelled)),
    }
}

// ---------------------------------------------------------------------------------------------
// Resources, prompts, completions

/// The string `params.uri` of a resources request.
fn uri_param<'a>(request: &'a Request, method: &str) -> Result<&'a str, ErrorObject> {
    request
        .params
        .as_ref()
        .and_then(|params| params.get("uri"))
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params(format!("{method} needs a string `uri`")))
}

/// The `id` of a `test://template/{id}/data` URI (one non-empty path segment).
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(TEMPLATE_PREFIX)?
        .strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// A resource's contents; an unknown one is -32002 in a legacy session and, since 2026-07-28
/// removed that code, -32602 with `data.uri` in the modern era.
fn read_resource(uri: &str, era: Era) -> Result<Value, ErrorObject> {
    let contents = match uri {
        "test://static-text" => json!({
            "uri": uri,
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource."
        }),
        "test://static-binary" => json!({
            "uri": uri,
            "mimeType": "image/png",
            "blob": TEST_IMAGE_BASE64
        }),
        "test://watched-resource" => json!({
            "uri": uri,
            "mimeType": "text/plain",
            "text": "Watched resource content"
        }),
        _ => match template_id(uri) {
            Some(id) => json!({
                "uri": uri,
                "mimeType": "application/json",
                "text": json!({
                    "id": id,
                    "templateTest": true,
                    "data": format!("Data for ID: {id}")
                })
                .to_string()
            }),
            None => {
                let code = match era {
                    Era::Legacy => RESOURCE_NOT_FOUND,
                    Era::Modern => tether::proto::jsonrpc::INVALID_PARAMS,
                };
                return Err(ErrorObject::new(code, format!("resource not found: {uri}"))
                    .with_data(json!({ "uri": uri })));
            }
        },
    };
    Ok(json!({ "contents": [contents] }))
}

fn get_prompt(params: Option<&Value>) -> Result<Value, ErrorObject> {
    let name = params
        .and_then(|params| params.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params("prompts/get needs a string `name`"))?;
    let arguments = params.and_then(|params| params.get("arguments"));
    let argument = |key: &str| -> Result<&str, ErrorObject> {
        arguments
            .and_then(|arguments| arguments.get(key))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ErrorObject::invalid_params(format!("{name}: argument `{key}` is required"))
            })
    };
    let user = |content: Value| json!({"role": "user", "content": content});
    let messages = match name {
        "test_simple_prompt" => vec![user(text("This is a simple prompt for testing."))],
        "test_prompt_with_arguments" => {
            let (arg1, arg2) = (argument("arg1")?, argument("arg2")?);
            vec![user(text(&format!(
                "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
            )))]
        }
        "test_prompt_with_embedded_resource" => vec![
            user(embedded_text(
                argument("resourceUri")?,
                "text/plain",
                "Embedded resource content for testing.",
            )),
            user(text("Please process the embedded resource above.")),
        ],
        "test_prompt_with_image" => {
            vec![user(image()), user(text("Please analyze the image above."))]
        }
        other => {
            return Err(ErrorObject::invalid_params(format!(
                "unknown prompt: {other}"
            )));
        }
    };
    Ok(json!({ "messages": messages }))
}

/// `completion/complete`: the candidates of the referenced argument that start with the typed
/// value. An unknown prompt or template is an error; an argument without candidates completes
/// to nothing.
fn complete(params: Option<&Value>) -> Result<Value, ErrorObject> {
    let reference = params
        .and_then(|params| params.get("ref"))
        .ok_or_else(|| ErrorObject::invalid_params("completion/complete needs a `ref`"))?;
    let argument = params
        .and_then(|params| params.get("argument"))
        .ok_or_else(|| ErrorObject::invalid_params("completion/complete needs an `argument`"))?;
    let (Some(argument_name), Some(typed)) = (
        argument.get("name").and_then(Value::as_str),
        argument.get("value").and_then(Value::as_str),
    ) else {
        return Err(ErrorObject::invalid_params(
            "completion/complete: `argument` needs string `name` and `value`",
        ));
    };
    let candidates: &[&str] = match (
        reference.get("type").and_then(Value::as_str),
        reference.get("name").and_then(Value::as_str),
        reference.get("uri").and_then(Value::as_str),
    ) {
        (Some("ref/prompt"), Some("test_prompt_with_arguments"), _) => match argument_name {
            "arg1" => &["paris", "park", "party", "test", "testValue1"],
            "arg2" => &["world", "testValue2"],
            _ => &[],
        },
        (Some("ref/prompt"), Some("test_prompt_with_embedded_resource"), _) => {
            match argument_name {
                "resourceUri" => &["test://static-text", "test://static-binary"],
                _ => &[],
            }
        }
        (Some("ref/prompt"), Some("test_simple_prompt" | "test_prompt_with_image"), _) => &[],
        (Some("ref/resource"), _, Some("test://template/{id}/data")) => match argument_name {
            "id" => &["1", "2", "3", "123"],
            _ => &[],
        },
        (Some("ref/prompt"), Some(name), _) => {
            return Err(ErrorObject::invalid_params(format!(
                "unknown prompt: {name}"
            )));
        }
        (Some("ref/resource"), _, Some(uri)) => {
            return Err(ErrorObject::invalid_params(format!(
                "unknown resource template: {uri}"
            )));
        }
        _ => {
            return Err(ErrorObject::invalid_params(
                "completion/complete: `ref` must be a ref/prompt with a `name` or a \
                 ref/resource with a `uri`",
            ));
        }
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|candidate| candidate.starts_with(typed))
        .take(MAX_COMPLETIONS)
        .collect();
    Ok(json!({
        "completion": {"values": values, "total": values.len(), "hasMore": false}
    }))
}

// ---------------------------------------------------------------------------------------------
// Elicitation schemas

/// SEP-1034: a default for every primitive type.
fn sep1034_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": {
                "type": "boolean",
                "description": "Verification status",
                "default": true
            }
        },
        "required": []
    })
}

/// SEP-1330: the five enum variants.
fn sep1330_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}
                    ]
                }
            }
        },
        "required": []
    })
}

// ---------------------------------------------------------------------------------------------
// Content and errors

fn tool(name: &str, description: &str, input_schema: Value) -> Value {
    json!({"name": name, "description": description, "inputSchema": input_schema})
}

fn content(blocks: Vec<Value>) -> Value {
    json!({ "content": blocks })
}

fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn image() -> Value {
    json!({"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"})
}

fn embedded_text(uri: &str, mime_type: &str, body: &str) -> Value {
    json!({
        "type": "resource",
        "resource": {"uri": uri, "mimeType": mime_type, "text": body}
    })
}

/// A tool result reporting a tool execution error (MCP `isError: true`).
fn tool_error(message: &str) -> Value {
    json!({"content": [text(message)], "isError": true})
}

/// A required string argument; the error is the message for an `isError` result.
fn string_argument<'a>(arguments: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{name}` is required and must be a string"))
}

/// The text of a `sampling/createMessage` result: `content` is one block, or (2025-11-25, with
/// tools) a list of blocks whose first text block counts.
fn sampled_text(result: &Value) -> Option<&str> {
    let content = result.get("content")?;
    match content {
        Value::Array(blocks) => blocks
            .iter()
            .find_map(|block| block.get("text").and_then(Value::as_str)),
        block => block.get("text").and_then(Value::as_str),
    }
}

/// A server→client round trip that did not produce an answer: the client's refusal is the
/// tool's error (a model can read it); cancellation and a closed session propagate.
fn round_trip_failed(tool: &str, what: &str, error: ContextError) -> Result<Value, ErrorObject> {
    match error {
        ContextError::Remote(remote) => Ok(tool_error(&format!(
            "{tool}: the client refused {what}: {} ({})",
            remote.message, remote.code
        ))),
        other => Err(emit_failed(other)),
    }
}

/// The context could not emit or wait: a cancelled request ends (its outcome is discarded,
/// MCP cancellation), anything else is an internal error.
fn emit_failed(error: ContextError) -> ErrorObject {
    match error {
        ContextError::Cancelled => ErrorObject::cancelled(),
        other => ErrorObject::new(INTERNAL_ERROR, format!("conformance fixture: {other}")),
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked: each critical section
/// here is a few map operations with no await inside.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use tether::proto::jsonrpc::INVALID_PARAMS;

    use super::*;

    #[test]
    fn subscriptions_are_bounded() {
        let mut state = SessionState::default();
        for i in 0..MAX_SUBSCRIPTIONS {
            state.subscribe(format!("test://r/{i}")).unwrap();
        }
        // Subscribing again to a held URI is fine; a new one is refused.
        state.subscribe("test://r/0".to_owned()).unwrap();
        let refused = state.subscribe("test://one-too-many".to_owned());
        assert!(refused.unwrap_err().contains("at most"));
        assert_eq!(state.subscriptions.len(), MAX_SUBSCRIPTIONS);
    }

    #[test]
    fn template_ids() {
        assert_eq!(template_id("test://template/123/data"), Some("123"));
        assert_eq!(template_id("test://template//data"), None);
        assert_eq!(template_id("test://template/1/2/data"), None);
        assert_eq!(template_id("test://static-text"), None);
    }

    #[test]
    fn resources_read_and_miss() {
        let read = read_resource("test://template/123/data", Era::Legacy).unwrap();
        let body = read["contents"][0]["text"].as_str().unwrap();
        assert!(body.contains("\"id\":\"123\""), "{body}");
        let error = read_resource("test://nothing", Era::Legacy).unwrap_err();
        assert_eq!(error.code, RESOURCE_NOT_FOUND);
        // 2026-07-28 removed -32002: a missing resource is -32602 with its URI.
        let error = read_resource("test://nothing", Era::Modern).unwrap_err();
        assert_eq!(error.code, INVALID_PARAMS);
        assert_eq!(error.data.unwrap()["uri"], "test://nothing");
    }

    #[test]
    fn completions_filter_by_prefix() {
        let params = json!({
            "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": "par"}
        });
        let result = complete(Some(&params)).unwrap();
        assert_eq!(
            result["completion"]["values"],
            json!(["paris", "park", "party"])
        );
        let unknown = json!({
            "ref": {"type": "ref/prompt", "name": "nope"},
            "argument": {"name": "a", "value": ""}
        });
        assert_eq!(complete(Some(&unknown)).unwrap_err().code, INVALID_PARAMS);
    }

    #[test]
    fn prompts_substitute_arguments() {
        let params = json!({
            "name": "test_prompt_with_arguments",
            "arguments": {"arg1": "a", "arg2": "b"}
        });
        let result = get_prompt(Some(&params)).unwrap();
        assert_eq!(
            result["messages"][0]["content"]["text"],
            json!("Prompt with arguments: arg1='a', arg2='b'")
        );
        let missing = json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a"}});
        assert_eq!(get_prompt(Some(&missing)).unwrap_err().code, INVALID_PARAMS);
    }

    #[test]
    fn every_tool_has_a_description_and_schema() {
        let tools = ConformanceHandler::tools();
        let tools = tools["tools"].as_array().unwrap();
        assert!(tools.iter().any(|tool| tool["name"] == "count"));
        for tool in tools {
            assert!(tool["description"].is_string(), "{tool}");
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        }
    }

    #[test]
    fn sampled_text_shapes() {
        assert_eq!(
            sampled_text(&json!({"content": {"type": "text", "text": "hi"}})),
            Some("hi")
        );
        assert_eq!(
            sampled_text(&json!({"content": [{"type": "text", "text": "hi"}]})),
            Some("hi")
        );
        assert_eq!(sampled_text(&json!({})), None);
    }
}
