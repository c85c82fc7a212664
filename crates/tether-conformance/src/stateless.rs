//! The fixtures the conformance suite's 2026-07-28 server scenarios call by name
//! (`server-stateless`, `input-required-result-*`): tools that need a client capability, ask
//! the client questions (answered through `input_required` results in that era, through
//! server→client requests in a legacy session), log without being asked to, and announce list
//! changes to `subscriptions/listen` streams. They supply behaviour only: every rule of the era
//! (the envelope, headers, `resultType`, sealing `requestState`) is tether's core.

use serde_json::{Value, json};
use tether::proto::jsonrpc::{ErrorObject, INTERNAL_ERROR};
use tether::proto::modern::missing_capability;
use tether::server::{ContextError, LogLevel, RequestContext, TaskSupport};

/// The tools, for `tools/list`.
pub(crate) fn tools() -> Vec<Value> {
    let none = || json!({"type": "object", "properties": {}});
    let tool = |name: &str, description: &str| json!({"name": name, "description": description, "inputSchema": none()});
    vec![
        tool(
            "test_missing_capability",
            "Needs the client's sampling capability; without it, fails with -32021.",
        ),
        tool(
            "test_streaming_elicitation",
            "Answers at once; sends no request of its own on the response stream.",
        ),
        tool(
            "test_logging_tool",
            "Logs one info message (sent only when the request asks for logs), then returns.",
        ),
        tool(
            "test_trigger_tool_change",
            "Announces notifications/tools/list_changed to listening clients.",
        ),
        tool(
            "test_trigger_prompt_change",
            "Announces notifications/prompts/list_changed to listening clients.",
        ),
        tool(
            "test_input_required_result_elicitation",
            "Asks the user's name (key user_name) and greets them.",
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model a question (key capital_question).",
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks the client for its roots (key client_roots).",
        ),
        tool(
            "test_input_required_result_request_state",
            "Asks for a confirmation, carried across rounds in requestState.",
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks an elicitation, a sampling and a roots question at once.",
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks a name, then a colour, in two rounds.",
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation; a tampered requestState is refused.",
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks only what the request's client capabilities allow.",
        ),
    ]
}

/// The tools of the tasks extension's scenarios, for `tools/list`, with how each runs.
pub(crate) fn task_tools() -> Vec<Value> {
    let schema = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    let tool = |name: &str, description: &str, input: Value| json!({"name": name, "description": description, "inputSchema": input});
    vec![
        tool(
            "greet",
            "Greets by name at once (never a task).",
            schema(json!({"name": {"type": "string"}}), &["name"]),
        ),
        tool(
            "slow_compute",
            "Works for `seconds` (a task when the client declares the tasks extension).",
            schema(
                json!({"seconds": {"type": "integer", "default": 3},
                       "label": {"type": "string", "default": "default"}}),
                &[],
            ),
        ),
        tool(
            "failing_job",
            "A task whose tool result is an error (isError), after a second.",
            schema(json!({}), &[]),
        ),
        tool(
            "protocol_error_job",
            "A task that fails with a JSON-RPC error after half a second.",
            schema(json!({}), &[]),
        ),
        tool(
            "confirm_delete",
            "A task that asks to confirm deleting `filename`.",
            schema(json!({"filename": {"type": "string"}}), &["filename"]),
        ),
        tool(
            "multi_input",
            "A task that asks two questions at once.",
            schema(json!({}), &[]),
        ),
        tool(
            "test_tool_with_task",
            "Asks the user's name (key user_name), then greets them in a task.",
            schema(json!({}), &[]),
        ),
    ]
}

/// How tool `name` runs, given the call's `params`: `None` for the tools of this module that
/// are not tasks' (or not this module's). `test_tool_with_task` asks for the user's name in the
/// request's own rounds and becomes a task once it has it.
pub(crate) fn task_support(name: &str, params: Option<&Value>) -> Option<TaskSupport> {
    match name {
        "test_tool_with_task" => {
            let answered = params
                .and_then(|params| params.get("inputResponses"))
                .and_then(|responses| responses.get("user_name"))
                .is_some();
            Some(if answered {
                TaskSupport::Required
            } else {
                TaskSupport::Forbidden
            })
        }
        "slow_compute" => Some(TaskSupport::Optional),
        "failing_job" | "protocol_error_job" | "confirm_delete" | "multi_input" => {
            Some(TaskSupport::Required)
        }
        _ => None,
    }
}

/// Waits `duration`, or fails when the call is cancelled (`tasks/cancel`).
async fn work(context: &RequestContext, duration: std::time::Duration) -> Result<(), ErrorObject> {
    tokio::select! {
        () = tokio::time::sleep(duration) => Ok(()),
        () = context.cancelled() => Err(ErrorObject::cancelled()),
    }
}

/// Calls one of the task scenarios' tools, or `None` when `name` is not one.
pub(crate) async fn call_task_tool(
    name: &str,
    arguments: &serde_json::Map<String, Value>,
    context: &RequestContext,
) -> Option<Result<Value, ErrorObject>> {
    let string = |key: &str, default: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_owned()
    };
    Some(match name {
        "greet" => Ok(text(&format!("Hello, {}!", string("name", "World")))),
        "slow_compute" => {
            let seconds = arguments
                .get("seconds")
                .and_then(Value::as_u64)
                .unwrap_or(3);
            let label = string("label", "default");
            match work(context, std::time::Duration::from_secs(seconds)).await {
                Ok(()) => Ok(text(&format!(
                    "Computation \"{label}\" completed after {seconds} seconds. Result: 42."
                ))),
                Err(error) => Err(error),
            }
        }
        "failing_job" => match work(context, std::time::Duration::from_secs(1)).await {
            Ok(()) => Ok(json!({"content": [{"type": "text",
                "text": "the job failed, as it always does"}], "isError": true})),
            Err(error) => Err(error),
        },
        "protocol_error_job" => match work(context, std::time::Duration::from_millis(500)).await {
            Ok(()) => Err(ErrorObject::new(
                INTERNAL_ERROR,
                "the job hit a protocol error",
            )),
            Err(error) => Err(error),
        },
        "confirm_delete" => {
            let filename = string("filename", "file");
            let question = json!({"mode": "form", "message": format!("Delete '{filename}'?"),
                "requestedSchema": {"type": "object",
                    "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}});
            context
                .ask("confirm", "elicitation/create", question)
                .await
                .map_err(ask_failed)
                .map(|answer| match accepted(&answer, "confirm") {
                    Some(Value::Bool(true)) => text(&format!("deleted '{filename}'")),
                    _ => text(&format!("kept '{filename}'")),
                })
        }
        "multi_input" => {
            let both = |field: &str| {
                json!({"type": "object", "properties": {
                    "name": {"type": "string"}, "confirm": {"type": "boolean"}},
                    "required": [field]})
            };
            context
                .ask_all(vec![
                    (
                        "name".into(),
                        "elicitation/create".into(),
                        json!({"message": "Your name?", "requestedSchema": both("name")}),
                    ),
                    (
                        "confirm".into(),
                        "elicitation/create".into(),
                        json!({"message": "Confirm?", "requestedSchema": both("confirm")}),
                    ),
                ])
                .await
                .map_err(ask_failed)
                .map(|answers| {
                    let name = accepted(&answers[0], "name").and_then(Value::as_str);
                    let confirmed = accepted(&answers[1], "confirm").and_then(Value::as_bool);
                    text(&format!(
                        "name=\"{}\" confirmed={}",
                        name.unwrap_or(""),
                        confirmed.unwrap_or(false)
                    ))
                })
        }
        "test_tool_with_task" => context
            .ask(
                "user_name",
                "elicitation/create",
                elicitation("What is your name?", "name", "string"),
            )
            .await
            .map_err(ask_failed)
            .map(|answer| {
                let name = accepted(&answer, "name").and_then(Value::as_str);
                text(&format!(
                    "Hello, {}! (computed in task)",
                    name.unwrap_or("stranger")
                ))
            }),
        _ => return None,
    })
}

/// The prompts, for `prompts/list`.
pub(crate) fn prompts() -> Vec<Value> {
    vec![json!({
        "name": "test_input_required_result_prompt",
        "description": "Asks the user for context before building the prompt.",
    })]
}

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A question that could not be answered: a missing capability is the client's -32021,
/// cancellation propagates, the rest is internal.
fn ask_failed(error: ContextError) -> ErrorObject {
    match error {
        ContextError::MissingCapability(capability) => missing_capability(&capability),
        ContextError::Cancelled => ErrorObject::cancelled(),
        ContextError::InvalidAnswer(key) => {
            ErrorObject::invalid_params(format!("the answer `{key}` does not fit"))
        }
        other => ErrorObject::new(INTERNAL_ERROR, format!("conformance fixture: {other}")),
    }
}

fn elicitation(message: &str, field: &str, kind: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {field: {"type": kind}},
            "required": [field],
        },
    })
}

fn sampling(question: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": 100,
    })
}

/// An elicitation answer's `content[field]` when accepted.
fn accepted<'a>(answer: &'a Value, field: &str) -> Option<&'a Value> {
    (answer.get("action").and_then(Value::as_str) == Some("accept"))
        .then(|| answer.get("content")?.get(field))
        .flatten()
}

/// Calls tool `name`, or `None` when it is not one of these.
pub(crate) async fn call(
    name: &str,
    context: &RequestContext,
) -> Option<Result<Value, ErrorObject>> {
    Some(match name {
        "test_missing_capability" => {
            if context.client_declares("sampling") {
                Ok(text("sampling is available"))
            } else {
                Err(missing_capability("sampling"))
            }
        }
        "test_streaming_elicitation" => Ok(text("streamed without a request of its own")),
        "test_logging_tool" => {
            let logged = context
                .log(
                    LogLevel::Info,
                    Some("conformance"),
                    json!("test_logging_tool ran"),
                )
                .await;
            logged.map_err(ask_failed).map(|()| text("logged"))
        }
        "test_trigger_tool_change" => context
            .notify_subscribers("notifications/tools/list_changed", json!({}))
            .await
            .map_err(ask_failed)
            .map(|()| text("tools/list_changed announced")),
        "test_trigger_prompt_change" => context
            .notify_subscribers("notifications/prompts/list_changed", json!({}))
            .await
            .map_err(ask_failed)
            .map(|()| text("prompts/list_changed announced")),
        "test_input_required_result_elicitation" => context
            .ask(
                "user_name",
                "elicitation/create",
                elicitation("What is your name?", "name", "string"),
            )
            .await
            .map_err(ask_failed)
            .map(
                |answer| match accepted(&answer, "name").and_then(Value::as_str) {
                    Some(name) => text(&format!("Hello, {name}!")),
                    None => text("Hello, stranger!"),
                },
            ),
        "test_input_required_result_sampling" => context
            .ask(
                "capital_question",
                "sampling/createMessage",
                sampling("What is the capital of France?"),
            )
            .await
            .map_err(ask_failed)
            .map(|answer| {
                let said = answer["content"]["text"].as_str().unwrap_or("(no text)");
                text(&format!("The model said: {said}"))
            }),
        "test_input_required_result_list_roots" => context
            .ask("client_roots", "roots/list", json!({}))
            .await
            .map_err(ask_failed)
            .map(|answer| {
                let roots = answer["roots"].as_array().map_or(0, Vec::len);
                text(&format!("The client has {roots} root(s)."))
            }),
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => context
            .ask(
                "confirm",
                "elicitation/create",
                elicitation("Please confirm", "ok", "boolean"),
            )
            .await
            .map_err(ask_failed)
            .map(|answer| match accepted(&answer, "ok") {
                Some(Value::Bool(true)) => text("state-ok: confirmed"),
                _ => text("state-ok: not confirmed"),
            }),
        "test_input_required_result_multiple_inputs" => context
            .ask_all(vec![
                (
                    "user_name".into(),
                    "elicitation/create".into(),
                    elicitation("What is your name?", "name", "string"),
                ),
                (
                    "greeting".into(),
                    "sampling/createMessage".into(),
                    sampling("Say hello."),
                ),
                ("client_roots".into(), "roots/list".into(), json!({})),
            ])
            .await
            .map_err(ask_failed)
            .map(|answers| text(&format!("{} answers received", answers.len()))),
        "test_input_required_result_multi_round" => {
            let first = context
                .ask(
                    "step1",
                    "elicitation/create",
                    elicitation("What is your name?", "name", "string"),
                )
                .await;
            match first {
                Err(error) => Err(ask_failed(error)),
                Ok(name) => context
                    .ask(
                        "step2",
                        "elicitation/create",
                        elicitation("What is your favourite colour?", "color", "string"),
                    )
                    .await
                    .map_err(ask_failed)
                    .map(|color| {
                        let name = accepted(&name, "name").and_then(Value::as_str);
                        let color = accepted(&color, "color").and_then(Value::as_str);
                        text(&format!(
                            "{} likes {}",
                            name.unwrap_or("someone"),
                            color.unwrap_or("no colour")
                        ))
                    }),
            }
        }
        "test_input_required_result_capabilities" => {
            let mut questions = Vec::new();
            if context.client_declares("sampling") {
                questions.push((
                    "question".to_owned(),
                    "sampling/createMessage".to_owned(),
                    sampling("Pick a number."),
                ));
            }
            if context.client_declares("elicitation") {
                questions.push((
                    "name".to_owned(),
                    "elicitation/create".to_owned(),
                    elicitation("What is your name?", "name", "string"),
                ));
            }
            if context.client_declares("roots") {
                questions.push(("roots".to_owned(), "roots/list".to_owned(), json!({})));
            }
            if questions.is_empty() {
                Err(missing_capability("sampling"))
            } else {
                context
                    .ask_all(questions)
                    .await
                    .map_err(ask_failed)
                    .map(|answers| text(&format!("{} answers received", answers.len())))
            }
        }
        _ => return None,
    })
}

/// Gets prompt `name`, or `None` when it is not one of these.
pub(crate) async fn get_prompt(
    name: &str,
    context: &RequestContext,
) -> Option<Result<Value, ErrorObject>> {
    if name != "test_input_required_result_prompt" {
        return None;
    }
    Some(
        context
            .ask(
                "user_context",
                "elicitation/create",
                elicitation("What context should the prompt use?", "context", "string"),
            )
            .await
            .map_err(ask_failed)
            .map(|answer| {
                let context = accepted(&answer, "context")
                    .and_then(Value::as_str)
                    .unwrap_or("none");
                json!({"messages": [{"role": "user", "content": {
                    "type": "text", "text": format!("Use this context: {context}")}}]})
            }),
    )
}
