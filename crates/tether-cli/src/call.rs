//! `tether call`: one tool call over [`tether::client`], with progress, resumption across
//! connection cuts and, with `--token-file`, across a killed process (`--resume F`).
//!
//! Output (docs/CONTRACTS.md#tether-call): with `--json` every message of the call goes to
//! stdout as one JSON-RPC line, notifications first and the final response last, and nothing
//! else does; without it, progress is a bar on a terminal (stderr) or plain lines otherwise
//! (stderr), and the result's text goes to stdout. Reconnects are reported on stderr.
//!
//! A line is written (and flushed) before the event that carried it is committed, and each
//! commit rewrites the token file atomically, so a kill between the two repeats exactly that
//! one event on `--resume`.

use std::fs;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether::client::{
    Client, ClientConfig, ClientEvent, Error, ProtocolChoice, ResumptionToken, ToolCall,
    ToolCallItem,
};
use tether::proto::jsonrpc::{ErrorObject, Message, Response};

use crate::auth::OAuthArgs;
use crate::{UsageError, remote};

/// Exit codes (docs/CONTRACTS.md#exit-codes).
const EXIT_TOOL_ERROR: u8 = 1;
const EXIT_TRANSPORT: u8 = 3;
const EXIT_SESSION_EXPIRED: u8 = 4;

/// How long the final DELETE of the session may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// JSON-RPC "method not found", the answer to server requests `tether call` cannot handle.
const METHOD_NOT_FOUND: i64 = -32601;

/// Arguments of `tether call`.
#[derive(Debug, clap::Args)]
pub(crate) struct CallArgs {
    /// The MCP endpoint, e.g. http://127.0.0.1:8080/mcp.
    #[arg(required_unless_present = "resume")]
    url: Option<String>,
    /// The tool to call.
    #[arg(required_unless_present = "resume")]
    tool: Option<String>,
    /// The tool's arguments, a JSON object.
    #[arg(long, value_name = "JSON")]
    args: Option<String>,
    /// Print each JSON-RPC message as received, one per line, and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// An extra header on every request, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Send `Authorization: Bearer` with the token read from this file.
    #[arg(long, value_name = "F")]
    bearer_token_file: Option<PathBuf>,
    /// After each committed event, write the resumption token to F (atomically).
    #[arg(long, value_name = "F")]
    token_file: Option<PathBuf>,
    /// Give a stream up as dead after this long without a byte (not even a keep-alive).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    idle_timeout_secs: u64,
    /// Resume the call whose token file is F (written by `--token-file`).
    #[arg(
        long,
        value_name = "F",
        conflicts_with_all = ["url", "tool", "args", "json", "headers", "bearer_token_file", "token_file"]
    )]
    resume: Option<PathBuf>,
    /// Give up reconnecting after this long (testing; the default budget is 300 s).
    #[arg(long, value_name = "SECS", hide = true)]
    reconnect_budget_secs: Option<u64>,
    /// The protocol era: `legacy` (2025, sessions), `auto` (probe `server/discover` and pick
    /// the era in which the call survives a cut: 2026-07-28 with tasks where the server offers
    /// task streams, else the 2025 era where it is served) or a version such as `2026-07-28`.
    #[arg(
        long,
        value_name = "ERA",
        default_value = "auto",
        conflicts_with = "resume"
    )]
    protocol: ProtocolChoice,
    /// Never declare the tasks extension: the call does not run as a task, even where the
    /// server would run it as one (in the 2026-07-28 era it then cannot survive a cut).
    #[arg(long, conflicts_with = "resume")]
    no_task: bool,
    /// OAuth, when the server asks for it and no `--bearer-token-file` is given (with
    /// `--resume`, the flags the call was started with are used).
    #[command(flatten)]
    oauth: OAuthArgs,
}

/// What the token file holds: everything `--resume` needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedCall {
    url: String,
    tool: String,
    json: bool,
    headers: Vec<(String, String)>,
    bearer_token_file: Option<PathBuf>,
    /// The OAuth flags (paths absolute), so that a resumed call finds the same cache.
    #[serde(default)]
    oauth: OAuthArgs,
    idle_timeout_secs: u64,
    token: ResumptionToken,
    /// The task the call runs as, if it does (docs/CONTRACTS.md#call-tasks); the same as
    /// `token.task_id`, at the top for whoever reads the file.
    #[serde(rename = "taskId", default, skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    /// The last committed task event seq, if any (the token's cursor, as a number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

/// Runs `tether call`.
pub(crate) fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    let (saved, arguments, token_file) = plan(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let resuming = args.resume.is_some();
    let code = runtime.block_on(call(saved, arguments, token_file, resuming, &args));
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Checks the arguments: the call to make (its token not yet known), its arguments, the
/// token file.
fn plan(args: &CallArgs) -> anyhow::Result<(SavedCall, Value, Option<PathBuf>)> {
    if let Some(path) = &args.resume {
        let text = fs::read_to_string(path)
            .map_err(|e| UsageError(format!("--resume {}: {e}", path.display())))?;
        let saved: SavedCall = serde_json::from_str(&text).map_err(|e| {
            UsageError(format!(
                "--resume {}: not a token file: {e}",
                path.display()
            ))
        })?;
        return Ok((saved, Value::Null, Some(path.clone())));
    }
    let (Some(url), Some(tool)) = (args.url.clone(), args.tool.clone()) else {
        return Err(UsageError("URL and TOOL are required without --resume".to_owned()).into());
    };
    let arguments = match &args.args {
        None => Value::Object(serde_json::Map::new()),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => return Err(UsageError("--args must be a JSON object".to_owned()).into()),
            Err(e) => return Err(UsageError(format!("--args is not JSON: {e}")).into()),
        },
    };
    let headers = remote::parse_headers(&args.headers)?;
    let bearer_token_file = match &args.bearer_token_file {
        None => None,
        Some(path) => Some(
            fs::canonicalize(path)
                .map_err(|e| UsageError(format!("--bearer-token-file {}: {e}", path.display())))?,
        ),
    };
    let saved = SavedCall {
        url,
        tool,
        json: args.json,
        headers,
        bearer_token_file,
        oauth: args.oauth.absolute()?,
        idle_timeout_secs: args.idle_timeout_secs,
        token: ResumptionToken {
            session_id: None,
            protocol_version: None,
            request_id: None,
            last_event_id: String::new(),
            task_id: None,
        },
        task_id: None,
        seq: None,
    };
    Ok((saved, arguments, args.token_file.clone()))
}

fn config(
    saved: &SavedCall,
    args: &CallArgs,
    token_file: Option<PathBuf>,
) -> anyhow::Result<ClientConfig> {
    let mut config = ClientConfig::default();
    config.protocol = args.protocol;
    config.tasks = !args.no_task;
    config.headers.clone_from(&saved.headers);
    config.reconnect.idle_timeout = Duration::from_secs(saved.idle_timeout_secs.max(1));
    if let Some(secs) = args.reconnect_budget_secs {
        config.reconnect.budget.max_elapsed = Duration::from_secs(secs);
    }
    config.auth = Some(
        saved
            .oauth
            .auth_for(&saved.url, saved.bearer_token_file.as_deref())?,
    );
    if let Some(path) = token_file {
        let template = saved.clone();
        config.on_resumption_token = Some(Arc::new(move |token: &ResumptionToken| {
            let mut saved = template.clone();
            saved.token = token.clone();
            saved.task_id.clone_from(&token.task_id);
            saved.seq = token
                .task_id
                .as_ref()
                .and_then(|_| token.last_event_id.parse().ok());
            if let Err(error) = write_atomically(&path, &saved) {
                tracing::warn!(%error, path = %path.display(), "writing the token file failed");
            }
        }));
    }
    Ok(config)
}

/// Writes `saved` to a temporary file beside `path` (mode 0600: it may name headers), then
/// renames it over `path`.
fn write_atomically(path: &Path, saved: &SavedCall) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    serde_json::to_writer(&mut file, saved)?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

async fn call(
    saved: SavedCall,
    arguments: Value,
    token_file: Option<PathBuf>,
    resuming: bool,
    args: &CallArgs,
) -> anyhow::Result<ExitCode> {
    let config = config(&saved, args, token_file)?;
    let started = if resuming {
        eprintln!(
            "tether: resuming from event {:?}",
            saved.token.last_event_id
        );
        Client::resume_tool_call(&saved.url, &saved.token, config).await
    } else {
        match Client::connect(&saved.url, config).await {
            Ok(client) => client.call_tool(&saved.tool, arguments).await,
            Err(error) => Err(error),
        }
    };
    let mut call = match started {
        Ok(call) => call,
        Err(error) => return Ok(failed(&error, None)),
    };
    let bar = (!saved.json && std::io::stderr().is_terminal()).then(new_bar);
    let reporter = tokio::spawn(report_reconnects(call.client().events(), bar.clone()));
    let outcome = drive(&mut call, saved.json, bar.as_ref()).await;
    reporter.abort();
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let code = match outcome {
        Ok(code) => code,
        Err(error) => return Ok(failed(&error, bar.as_ref())),
    };
    let client = call.client().clone();
    drop(call);
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, client.close()).await;
    Ok(code)
}

fn new_bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Reads the call to its end, printing as it goes; the exit code of a finished call.
async fn drive(
    call: &mut ToolCall,
    json: bool,
    bar: Option<&ProgressBar>,
) -> Result<ExitCode, Error> {
    let mut code = None;
    while let Some(message) = call.next_message().await {
        let message = message?;
        if json {
            let mut out = std::io::stdout().lock();
            // A closed stdout is not worth failing the call over.
            let _ = out.write_all(&message.to_vec());
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
        if let Message::Request(request) = &message
            && request.method != "ping"
        {
            let answer = Response::error(
                Some(request.id.clone()),
                ErrorObject::new(METHOD_NOT_FOUND, "tether call handles no server requests"),
            );
            call.client().respond(answer).await?;
        }
        let item = ToolCallItem::from_message(message);
        if item.is_tool_error() {
            code = Some(ExitCode::from(EXIT_TOOL_ERROR));
        }
        if !json {
            show(&item, bar);
        }
        if let ToolCallItem::Response(response) = item {
            if let Response::Error(error) = &response {
                if json {
                    // stdout has the answer as JSON; stderr says what it means.
                    eprintln!("{}", error_line(error));
                }
                code = Some(ExitCode::from(EXIT_TOOL_ERROR));
            }
            code.get_or_insert(ExitCode::SUCCESS);
        }
    }
    code.ok_or(Error::NoResponse)
}

/// The stderr line for an error answer: its code, message and `data.reason`.
fn error_line(error: &tether::proto::jsonrpc::ErrorResponse) -> String {
    let reason = error
        .error
        .data
        .as_ref()
        .and_then(|data| data.get("reason"))
        .and_then(Value::as_str)
        .map(|reason| format!(" (reason {reason})"))
        .unwrap_or_default();
    format!(
        "tether: the server answered error {}: {}{reason}",
        error.error.code, error.error.message
    )
}

/// Shows one item without `--json`: progress on the bar or as a plain stderr line, the
/// result's text on stdout.
fn show(item: &ToolCallItem, bar: Option<&ProgressBar>) {
    match item {
        ToolCallItem::Progress {
            progress,
            total,
            message,
        } => match bar {
            Some(bar) => {
                if let Some(total) = total {
                    bar.set_length(*total as u64);
                }
                bar.set_position(*progress as u64);
                if let Some(message) = message {
                    bar.set_message(message.clone());
                }
            }
            None => {
                let total = total.map(|t| format!("/{t}")).unwrap_or_default();
                let message = message
                    .as_deref()
                    .map(|m| format!(" {m}"))
                    .unwrap_or_default();
                eprintln!("progress {progress}{total}{message}");
            }
        },
        ToolCallItem::Notification(n) => {
            let line = format!(
                "{}: {}",
                n.method,
                n.params.as_ref().map(Value::to_string).unwrap_or_default()
            );
            match bar {
                Some(bar) => bar.println(line),
                None => eprintln!("{line}"),
            }
        }
        ToolCallItem::Response(Response::Result(result)) => {
            let mut out = std::io::stdout().lock();
            let content = result.result.get("content").and_then(Value::as_array);
            for part in content.into_iter().flatten() {
                let _ = match part.get("text").and_then(Value::as_str) {
                    Some(text) => writeln!(out, "{text}"),
                    None => writeln!(out, "{part}"),
                };
            }
            let _ = out.flush();
        }
        ToolCallItem::Response(Response::Error(error)) => eprintln!("{}", error_line(error)),
        _ => {}
    }
}

/// Reports reconnects on stderr (above the bar, if there is one).
async fn report_reconnects(mut events: tether::client::ClientEvents, bar: Option<ProgressBar>) {
    while let Some(event) = events.recv().await {
        let line = match event {
            ClientEvent::Reconnecting {
                last_event_id,
                failures,
                ..
            } => {
                let from = last_event_id
                    .map_or_else(|| "the start".to_owned(), |id| format!("event {id}"));
                format!("tether: reconnecting from {from} (failed attempts so far: {failures})")
            }
            ClientEvent::SessionExpired { .. } => "tether: the session expired".to_owned(),
            _ => continue,
        };
        match &bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Prints why the call failed and picks its exit code.
fn failed(error: &Error, bar: Option<&ProgressBar>) -> ExitCode {
    let line = format!("tether: call failed: {}", tether::error_chain(error));
    match bar {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
    match error {
        Error::Auth(error) => crate::auth::auth_failed(error),
        Error::SessionExpired => ExitCode::from(EXIT_SESSION_EXPIRED),
        Error::Config(_) => ExitCode::from(crate::EXIT_USAGE),
        _ => ExitCode::from(EXIT_TRANSPORT),
    }
}
