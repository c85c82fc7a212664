//! The client side of the official MCP conformance suite (`tether conformance-client URL`),
//! built on [`tether::client`] like any other application.
//!
//! The suite's client mode (`conformance client --command "tether conformance-client"
//! --scenario NAME`) starts a mock server, runs this command with the server's URL and names
//! the scenario in `MCP_CONFORMANCE_SCENARIO`; the mock server records what the client did as
//! checks, and exit 0 says the client itself saw nothing wrong. Each scenario here does what
//! that scenario's server waits for: `initialize` initializes and lists tools; `tools_call`
//! calls `add_numbers`; `sse-retry` calls `test_reconnection`, whose stream the server closes
//! right after a priming event, so the library's reconnect loop must wait the server's
//! `retry` and resume with `Last-Event-ID`; `elicitation-sep1034-client-defaults` opens the
//! standalone stream (where that server sends its request) and answers `elicitation/create`
//! by accepting every default the schema proposes (SEP-1034), through a
//! [`ServerRequestHandler`].
//!
//! The suite names the protocol version in `MCP_CONFORMANCE_PROTOCOL_VERSION` (2025-11-25
//! unless run with `--spec-version`): at 2026-07-28 the client is pinned to that era
//! ([`ProtocolChoice::Version`]), else to the legacy era, so each scenario meets the client
//! its version describes. The 2026-07-28 scenarios: `request-metadata` (the `_meta`
//! envelope and version header on every request; the first request is refused with -32022
//! naming 2026-07-28, which the library sends again once); `sep-2322-client-request-state`
//! (an `input_required` round answered through a [`ServerRequestHandler`], with an unrelated
//! call made while the question is open, then the state-less and `resultType`-less tools);
//! `http-standard-headers` (every kind of named request: tools, resources, prompts);
//! `http-custom-headers` (the calls the suite lists in `MCP_CONFORMANCE_CONTEXT`, whose
//! `Mcp-Param-*` headers the library derives from the listed schemas);
//! `http-invalid-tool-headers` (every tool the library keeps after dropping those with
//! invalid `x-mcp-header` annotations is called); `json-schema-ref-no-deref` (tools are
//! listed, and no `$ref` is fetched); in both eras `json-schema-2020-12-preservation` (the
//! listed schema sent back unchanged). Every `auth/*` scenario (both revisions' `client
//! --suite auth`, and those 2026-07-28 adds) is one script: an application's, with the
//! library's [`OAuthProvider`] as its auth hook and a headless "browser" that reads the
//! authorization server's immediate redirect and delivers it to the loopback callback.
//! This module owns only the scenario scripts: sessions,
//! reconnects, headers and answering server requests are the library's; the command line
//! around them (the environment variables, exit codes) is `tether conformance-client`'s.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tether::client::oauth::{OAuthClientConfig, OAuthProvider, UserAgent};
use tether::client::{
    AuthError, Client, ClientConfig, ClientEvent, MessageStream, ProtocolChoice,
    ServerRequestHandler,
};
use tether::proto::jsonrpc::{
    ErrorObject, INVALID_PARAMS, METHOD_NOT_FOUND, Message, Request, Response,
};
use tether::proto::version::ProtocolVersion;
use tokio::task::JoinHandle;

/// The environment variable in which the suite names the scenario.
pub const SCENARIO_VAR: &str = "MCP_CONFORMANCE_SCENARIO";

/// The environment variable in which the suite names the protocol version to speak.
pub const PROTOCOL_VAR: &str = "MCP_CONFORMANCE_PROTOCOL_VERSION";

/// The environment variable in which the suite passes a scenario's context (JSON), such as
/// the tool calls `http-custom-headers` wants made.
pub const CONTEXT_VAR: &str = "MCP_CONFORMANCE_CONTEXT";

/// What the suite tells the client besides the scenario: the version and the context.
#[derive(Debug, Clone)]
pub struct Run {
    /// The era to speak, from [`PROTOCOL_VAR`].
    pub protocol: ProtocolChoice,
    /// The scenario's context, from [`CONTEXT_VAR`] (`Null` when unset).
    pub context: Value,
}

impl Run {
    /// The run the suite describes with `version` ([`PROTOCOL_VAR`]) and `context`
    /// ([`CONTEXT_VAR`]), each as read from the environment.
    ///
    /// # Errors
    ///
    /// A version this client does not speak, or a context that is not JSON.
    pub fn from_env(version: Option<&str>, context: Option<&str>) -> anyhow::Result<Self> {
        let protocol = match version {
            None => ProtocolChoice::Legacy,
            Some(version) => match ProtocolVersion::parse(version) {
                Ok(version) => ProtocolChoice::Version(version),
                Err(error) => bail!("{PROTOCOL_VAR}={version:?}: {error}"),
            },
        };
        let context = match context {
            None => Value::Null,
            Some(text) => serde_json::from_str(text)
                .with_context(|| format!("{CONTEXT_VAR} is not JSON: {text:?}"))?,
        };
        Ok(Self { protocol, context })
    }
}

/// A whole scenario's limit: under the suite's default client timeout (30 s), so that a
/// stuck scenario ends with our own error on stderr rather than the suite's kill.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(25);

/// How long the closing DELETE may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The client-mode scenarios this crate plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scenario {
    /// `initialize`.
    Initialize,
    /// `tools_call`.
    ToolsCall,
    /// `sse-retry`.
    SseRetry,
    /// `elicitation-sep1034-client-defaults`.
    ElicitationDefaults,
    /// `request-metadata` (2026-07-28).
    RequestMetadata,
    /// `sep-2322-client-request-state` (2026-07-28).
    RequestState,
    /// `http-standard-headers` (2026-07-28).
    StandardHeaders,
    /// `http-custom-headers` (2026-07-28).
    CustomHeaders,
    /// `http-invalid-tool-headers` (2026-07-28).
    InvalidToolHeaders,
    /// `json-schema-ref-no-deref` (2026-07-28).
    SchemaRefNoDeref,
    /// `json-schema-2020-12-preservation`.
    SchemaPreservation,
    /// Every `auth/*` scenario (`client --suite auth`, and the 2026-07-28 ones): one script,
    /// since what they test is the library's OAuth client.
    Authorization,
}

impl Scenario {
    const ALL: [(&'static str, Self); 11] = [
        ("initialize", Self::Initialize),
        ("tools_call", Self::ToolsCall),
        ("sse-retry", Self::SseRetry),
        (
            "elicitation-sep1034-client-defaults",
            Self::ElicitationDefaults,
        ),
        ("request-metadata", Self::RequestMetadata),
        ("sep-2322-client-request-state", Self::RequestState),
        ("http-standard-headers", Self::StandardHeaders),
        ("http-custom-headers", Self::CustomHeaders),
        ("http-invalid-tool-headers", Self::InvalidToolHeaders),
        ("json-schema-ref-no-deref", Self::SchemaRefNoDeref),
        ("json-schema-2020-12-preservation", Self::SchemaPreservation),
    ];

    /// The scenario the suite names `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        if name.starts_with("auth/") {
            return Some(Self::Authorization);
        }
        Self::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, scenario)| scenario)
    }

    /// The names of every scenario, comma-separated.
    #[must_use]
    pub fn names() -> String {
        let mut names = Self::ALL.map(|(name, _)| name).to_vec();
        names.push("auth/* (every authorization scenario)");
        names.join(", ")
    }
}

/// Plays `scenario` against the mock server at `url`: `Ok` when it ran to its end.
///
/// # Errors
///
/// What went wrong, for stderr.
pub async fn play(scenario: Scenario, url: &str, run: &Run) -> anyhow::Result<()> {
    let mut config = ClientConfig::default();
    config.protocol = run.protocol;
    match scenario {
        Scenario::Initialize | Scenario::SchemaRefNoDeref => initialize(url, config).await,
        Scenario::ToolsCall => tools_call(url, config).await,
        Scenario::SseRetry => sse_retry(url, config).await,
        Scenario::ElicitationDefaults => elicitation_defaults(url, config).await,
        Scenario::RequestMetadata => request_metadata(url, config).await,
        Scenario::RequestState => request_state(url, config).await,
        Scenario::StandardHeaders => standard_headers(url, config).await,
        Scenario::CustomHeaders => custom_headers(url, config, &run.context).await,
        Scenario::InvalidToolHeaders => invalid_tool_headers(url, config).await,
        Scenario::SchemaPreservation => schema_preservation(url, config).await,
        Scenario::Authorization => authorized(url, config, run).await,
    }
}

/// `initialize`: the handshake (the server checks the version and `clientInfo`), then
/// `tools/list` as a first request on the session. `json-schema-ref-no-deref` is the same
/// script: the listed schema's network `$ref` must stay unfetched, and nothing here fetches.
async fn initialize(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    println!("tools/list: {} tools", tools.len());
    close(client).await
}

/// `tools_call`: `add_numbers {a: 2, b: 3}`, whose server records the call as its check.
async fn tools_call(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    let name = tool_named(&tools, "add_numbers")?;
    let result = call_tool(&client, name, json!({"a": 2, "b": 3})).await?;
    println!("{name}: {}", result_text(&result));
    close(client).await
}

/// `sse-retry` (SEP-1699): the server sends a priming event with `retry: 500` on the call's
/// stream and closes it; the result arrives only on a GET that resumes it. The waiting and
/// the `Last-Event-ID` are the library's reconnect loop
/// (docs/CONTRACTS.md#client-reconnect-timing); this script only reports the reconnects it saw.
async fn sse_retry(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    let mut events = client.events();
    let result = call_tool(&client, "test_reconnection", json!({})).await?;
    println!("test_reconnection: {}", result_text(&result));
    let mut reconnects = 0;
    while let Some(event) = events.try_recv() {
        if let ClientEvent::Reconnecting { last_event_id, .. } = event {
            reconnects += 1;
            println!("reconnected with Last-Event-ID {last_event_id:?}");
        }
    }
    if reconnects == 0 {
        bail!("the call finished without a reconnect; the scenario expects one");
    }
    close(client).await
}

/// `elicitation-sep1034-client-defaults`: the tool asks for a form whose every field has a
/// default; [`AcceptDefaults`] accepts it with those defaults. The server (the TypeScript
/// SDK's) sends that request unrelated to the call, so on the standalone stream, and drops it
/// if none is open: the stream must be open before the call.
async fn elicitation_defaults(url: &str, mut config: ClientConfig) -> anyhow::Result<()> {
    // Form mode only (MCP 2025-11-25): this client cannot open URLs.
    config.capabilities = json!({"elicitation": {"form": {}}});
    config.request_handler = Some(Arc::new(AcceptDefaults));
    let client = connect(url, config).await?;
    let _listener = listen(&client).await?;
    let tools = list_tools(&client).await?;
    let name = tool_named(&tools, "test_client_elicitation_defaults")?;
    let result = call_tool(&client, name, json!({})).await?;
    println!("{name}: {}", result_text(&result));
    close(client).await
}

/// `request-metadata`: every request's `_meta` must carry the version, capabilities and
/// client info, matching the version header; the server refuses the first request (here
/// `server/discover`, inside [`Client::connect`]) with -32022 and expects it sent again. The
/// capabilities a client may declare are all declared, so that the server checks their shape.
async fn request_metadata(url: &str, mut config: ClientConfig) -> anyhow::Result<()> {
    config.capabilities = json!({"roots": {}, "sampling": {}, "elicitation": {"form": {}}});
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    println!("tools/list: {} tools", tools.len());
    close(client).await
}

/// `sep-2322-client-request-state`: `test_mrtr_echo_state` answers `input_required` with an
/// elicitation and a `requestState`; while [`ConfirmAll`] holds the question open it calls
/// `test_mrtr_unrelated`, which must carry neither answers nor state; the library then sends
/// the call again under a new id with the answer and the exact state. `test_mrtr_no_state`
/// asks without a state (the retry must carry none), and `test_mrtr_no_result_type` answers
/// without `resultType`, which means complete.
async fn request_state(url: &str, mut config: ClientConfig) -> anyhow::Result<()> {
    let confirm = Arc::new(ConfirmAll {
        client: OnceLock::new(),
        unrelated: "test_mrtr_unrelated",
    });
    config.capabilities = json!({"elicitation": {"form": {}}});
    config.request_handler = Some(Arc::clone(&confirm) as Arc<dyn ServerRequestHandler>);
    let client = connect(url, config).await?;
    let _ = confirm.client.set(client.clone());
    let tools = list_tools(&client).await?;
    for name in [
        "test_mrtr_echo_state",
        "test_mrtr_no_state",
        "test_mrtr_no_result_type",
    ] {
        let name = tool_named(&tools, name)?;
        let result = call_tool(&client, name, json!({})).await?;
        println!("{name}: {}", result_text(&result));
    }
    close(client).await
}

/// `http-standard-headers`: one request of each kind that has a standard header to check:
/// each listed tool called, each listed resource read, each listed prompt got.
async fn standard_headers(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    for tool in list_tools(&client).await? {
        let name = tool["name"]
            .as_str()
            .context("a listed tool without a name")?;
        let result = call_tool(&client, name, json!({})).await?;
        println!("{name}: {}", result_text(&result));
    }
    let resources = list(&client, "resources/list", "resources").await?;
    for resource in resources {
        let uri = resource["uri"]
            .as_str()
            .context("a listed resource without a uri")?;
        request_result(&client, "resources/read", json!({"uri": uri})).await?;
        println!("resources/read {uri}: done");
    }
    for prompt in list(&client, "prompts/list", "prompts").await? {
        let name = prompt["name"]
            .as_str()
            .context("a listed prompt without a name")?;
        request_result(&client, "prompts/get", json!({"name": name})).await?;
        println!("prompts/get {name}: done");
    }
    close(client).await
}

/// `http-custom-headers`: the tool calls of the context (`toolCalls`, each `{name,
/// arguments}`) after a `tools/list`, from which the library learns which arguments go into
/// `Mcp-Param-*` headers.
async fn custom_headers(url: &str, config: ClientConfig, context: &Value) -> anyhow::Result<()> {
    let Some(calls) = context["toolCalls"].as_array() else {
        bail!("{CONTEXT_VAR} has no toolCalls array: {context}");
    };
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    for call in calls {
        let name = call["name"]
            .as_str()
            .context("a context tool call without a name")?;
        let name = tool_named(&tools, name)?;
        let result = call_tool(&client, name, call["arguments"].clone()).await?;
        println!("{name}: {}", result_text(&result));
    }
    close(client).await
}

/// `http-invalid-tool-headers`: every tool the library keeps from `tools/list` is called
/// (with a placeholder for each required string argument): only the valid one may be.
async fn invalid_tool_headers(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    println!(
        "tools kept: {:?}",
        tools
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect::<Vec<_>>()
    );
    for tool in &tools {
        let name = tool["name"]
            .as_str()
            .context("a listed tool without a name")?;
        let arguments: Map<String, Value> = tool["inputSchema"]["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|key| (key.to_owned(), Value::from("conformance")))
            .collect();
        let result = call_tool(&client, name, Value::Object(arguments)).await?;
        println!("{name}: {}", result_text(&result));
    }
    close(client).await
}

/// `json-schema-2020-12-preservation`: the `inputSchema` of `json_schema_2020_12_tool`, as the
/// library handed it over, sent back through `json_schema_echo`: every 2020-12 keyword must
/// have survived the client (`$schema`, `$defs`, `$anchor`, composition and conditionals).
async fn schema_preservation(url: &str, config: ClientConfig) -> anyhow::Result<()> {
    let client = connect(url, config).await?;
    let tools = list_tools(&client).await?;
    let focal = tool_named(&tools, "json_schema_2020_12_tool")?;
    let schema = tools
        .iter()
        .find(|tool| tool["name"] == focal)
        .map(|tool| tool["inputSchema"].clone())
        .unwrap_or_default();
    let echo = tool_named(&tools, "json_schema_echo")?;
    let result = call_tool(&client, echo, json!({"schema": schema})).await?;
    println!("{echo}: {}", result_text(&result));
    close(client).await
}

/// The Client ID Metadata Document URL the suite's `auth/basic-cimd` expects as the client id
/// where the authorization server takes one (it does not fetch it).
pub const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// How long a sign-in may wait for its callback: the suite's authorization server redirects
/// at once.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(10);

/// The suite's "browser": it GETs the authorization URL without following the redirect (the
/// suite's authorization server answers at once with a 302 to the redirect URI), then
/// delivers that redirect to the provider's loopback callback, as a browser would.
struct Headless;

#[async_trait]
impl UserAgent for Headless {
    async fn open(&self, url: &str) -> Result<(), AuthError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            AuthError::Callback(format!("the authorization request {what}: {e}"))
        };
        // Built here, not before: the TLS provider is the one the OAuth provider installs.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| failed("had no HTTP client", &e))?;
        let answer = http
            .get(url)
            .send()
            .await
            .map_err(|e| failed("failed", &e))?;
        let location = answer
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| failed("was not redirected", &answer.status()))?
            .to_owned();
        println!("authorization redirected to the callback");
        // The callback's page says how the sign-in went; the provider has the outcome.
        let _ = http.get(&location).send().await;
        Ok(())
    }
}

/// Every `auth/*` scenario: the library's [`OAuthProvider`] does what the scenario's servers
/// test (discovery, registration, PKCE, scopes, `iss`, step-up); the script is what any
/// application does: connect, list the tools, call `test-tool` (the step-up scenarios refuse
/// that call for scope), close. A pre-registered client comes from the context's `client_id`
/// and `client_secret`; the client offers [`CLIENT_METADATA_URL`] as its metadata document.
/// The token cache is a fresh directory, removed at the end.
async fn authorized(url: &str, mut config: ClientConfig, run: &Run) -> anyhow::Result<()> {
    let cache = std::env::temp_dir().join(format!(
        "tether-conformance-oauth-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let mut oauth = OAuthClientConfig::new(&cache);
    oauth.client_metadata_url = Some(CLIENT_METADATA_URL.to_owned());
    oauth.client_id = run.context["client_id"].as_str().map(str::to_owned);
    oauth.client_secret = run.context["client_secret"].as_str().map(str::to_owned);
    oauth.callback_timeout = SIGN_IN_TIMEOUT;
    oauth.user_agent = Some(Arc::new(Headless));
    config.auth = Some(Arc::new(
        OAuthProvider::new(url, oauth).context("the OAuth provider")?,
    ));
    let outcome = async {
        let client = connect(url, config).await?;
        let tools = list_tools(&client).await?;
        let name = tool_named(&tools, "test-tool")?;
        let result = call_tool(&client, name, json!({})).await?;
        println!("{name}: {}", result_text(&result));
        close(client).await
    }
    .await;
    let _ = std::fs::remove_dir_all(&cache);
    outcome
}

async fn connect(url: &str, config: ClientConfig) -> anyhow::Result<Client> {
    let mut config = config;
    config.client_name = "tether-conformance-client".to_owned();
    let client = Client::connect(url, config)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let info = client.server_info();
    println!(
        "connected: server {} {}, protocol {}, session {}",
        info["serverInfo"]["name"].as_str().unwrap_or("?"),
        info["serverInfo"]["version"].as_str().unwrap_or("?"),
        client
            .protocol_version()
            .map_or("?", |version| version.as_str()),
        client.session_id().as_deref().unwrap_or("(none)"),
    );
    Ok(client)
}

/// Opens the standalone stream and reads it in a task, so that the configured handler
/// answers the server requests it carries; returns once the server has answered the GET
/// with a stream.
async fn listen(client: &Client) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let mut events = client.events();
    let mut stream = client.server_messages()?;
    let reader = client.clone();
    let mut task = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            answer_leftover(&reader, message?).await?;
        }
        Ok(())
    });
    let connected = async {
        while let Some(event) = events.recv().await {
            if let ClientEvent::Connected { request_id: None } = event {
                return;
            }
        }
    };
    tokio::select! {
        () = connected => {
            println!("standalone stream open");
            Ok(task)
        }
        ended = &mut task => match ended {
            Ok(Err(error)) => Err(error.context("the standalone stream")),
            _ => bail!("the standalone stream ended before it opened"),
        },
    }
}

/// Ends the session (DELETE); the mock servers that have no sessions answer 404 or 405,
/// which the library counts as done.
async fn close(client: Client) -> anyhow::Result<()> {
    tokio::time::timeout(CLOSE_TIMEOUT, client.close())
        .await
        .context("closing the session timed out")?
        .context("closing the session")
}

/// `tools/list`'s tools.
async fn list_tools(client: &Client) -> anyhow::Result<Vec<Value>> {
    list(client, "tools/list", "tools").await
}

/// The array `key` of a list request's result.
async fn list(client: &Client, method: &str, key: &str) -> anyhow::Result<Vec<Value>> {
    let stream = client
        .request(method, None)
        .await
        .context(method.to_owned())?;
    let result = final_result(client, stream)
        .await
        .context(method.to_owned())?;
    match result.get(key) {
        Some(Value::Array(items)) => Ok(items.clone()),
        _ => bail!("{method}: the result has no `{key}` array: {result}"),
    }
}

/// The result of one request.
async fn request_result(client: &Client, method: &str, params: Value) -> anyhow::Result<Value> {
    let stream = client
        .request(method, Some(params))
        .await
        .context(method.to_owned())?;
    final_result(client, stream)
        .await
        .context(method.to_owned())
}

/// The name of the listed tool `name`, or an error listing what the server offers.
fn tool_named<'a>(tools: &[Value], name: &'a str) -> anyhow::Result<&'a str> {
    if tools.iter().any(|tool| tool["name"] == name) {
        return Ok(name);
    }
    let offered: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    bail!("the server lists no tool {name:?} (it lists {offered:?})")
}

/// Calls a tool and returns its result; a tool error (`isError`) is an error here, since
/// every scenario's tool is meant to succeed.
async fn call_tool(client: &Client, name: &str, arguments: Value) -> anyhow::Result<Value> {
    let call = client
        .call_tool(name, arguments)
        .await
        .with_context(|| format!("calling {name}"))?;
    let response = call
        .response()
        .await
        .with_context(|| format!("calling {name}"))?;
    let result = into_result(response).with_context(|| format!("calling {name}"))?;
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        bail!("{name} returned a tool error: {}", result_text(&result));
    }
    Ok(result)
}

/// Reads a request's stream to its final response and returns the result. Server requests
/// the library does not answer itself are refused (no scenario sends one unasked).
async fn final_result(client: &Client, mut stream: MessageStream) -> anyhow::Result<Value> {
    while let Some(message) = stream.next().await {
        match message? {
            Message::Response(response) => return into_result(response),
            other => answer_leftover(client, other).await?,
        }
    }
    bail!("the stream ended without a response")
}

/// Handles a message that neither the library nor [`AcceptDefaults`] consumed: server
/// requests other than `ping` (already answered) are refused; the rest is logged.
async fn answer_leftover(client: &Client, message: Message) -> anyhow::Result<()> {
    match message {
        Message::Request(request) if request.method != "ping" => {
            eprintln!("refusing server request {}", request.method);
            let error = ErrorObject::new(
                METHOD_NOT_FOUND,
                format!("this client does not handle {}", request.method),
            );
            client
                .respond(Response::error(Some(request.id), error))
                .await?;
        }
        Message::Request(_) => {}
        Message::Notification(notification) => {
            eprintln!("notification: {}", notification.method);
        }
        Message::Response(response) => {
            eprintln!("unexpected response to {:?}", response.id());
        }
    }
    Ok(())
}

fn into_result(response: Response) -> anyhow::Result<Value> {
    match response {
        Response::Result(result) => Ok(result.result),
        Response::Error(error) => bail!(
            "JSON-RPC error {}: {}",
            error.error.code,
            error.error.message
        ),
    }
}

/// The text contents of a tool result, joined; or the whole result if it has none.
fn result_text(result: &Value) -> String {
    let texts: Vec<&str> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["text"].as_str())
        .collect();
    if texts.is_empty() {
        result.to_string()
    } else {
        texts.join(" ")
    }
}

/// Answers `elicitation/create` as a non-interactive user who accepts what the form proposes:
/// every field whose schema has a usable `default` gets it (SEP-1034). A form with a required
/// field and no default cannot be filled without a person, so it is declined, as is URL mode
/// (this client opens no browser).
struct AcceptDefaults;

#[async_trait]
impl ServerRequestHandler for AcceptDefaults {
    fn accepts(&self, request: &Request) -> bool {
        request.method == "elicitation/create"
    }

    async fn handle(&self, request: &Request) -> Result<Value, ErrorObject> {
        match elicit_defaults(request.params.as_ref().unwrap_or(&Value::Null)) {
            Ok(result) => {
                println!("elicitation/create answered: {result}");
                Ok(result)
            }
            Err(why) => {
                println!("elicitation/create refused: {why}");
                Err(ErrorObject::new(INVALID_PARAMS, why))
            }
        }
    }
}

/// Answers `elicitation/create` by accepting with every boolean field of the form set to
/// `true` (a user confirming), after calling the tool `unrelated` through the client (set once
/// connected), so that another request is made while a question is open.
struct ConfirmAll {
    client: OnceLock<Client>,
    unrelated: &'static str,
}

#[async_trait]
impl ServerRequestHandler for ConfirmAll {
    fn accepts(&self, request: &Request) -> bool {
        request.method == "elicitation/create"
    }

    async fn handle(&self, request: &Request) -> Result<Value, ErrorObject> {
        let failed = |error: anyhow::Error| ErrorObject::new(INVALID_PARAMS, format!("{error:#}"));
        let client = self
            .client
            .get()
            .ok_or_else(|| ErrorObject::new(INVALID_PARAMS, "asked before connecting"))?;
        let result = call_tool(client, self.unrelated, json!({}))
            .await
            .map_err(failed)?;
        println!("{} (while asked): {}", self.unrelated, result_text(&result));
        let params = request.params.as_ref().unwrap_or(&Value::Null);
        let content: Map<String, Value> = params["requestedSchema"]["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, schema)| schema["type"] == "boolean")
            .map(|(name, _)| (name.clone(), Value::Bool(true)))
            .collect();
        println!("elicitation/create answered: {content:?}");
        Ok(json!({"action": "accept", "content": content}))
    }
}

/// The `elicitation/create` result for `params` under [`AcceptDefaults`]'s policy, or why
/// the params are invalid.
fn elicit_defaults(params: &Value) -> Result<Value, String> {
    let decline = Ok(json!({"action": "decline"}));
    // MCP 2025-11-25: `mode` absent means form.
    if params.get("mode").and_then(Value::as_str).unwrap_or("form") != "form" {
        return decline;
    }
    let Some(properties) = params["requestedSchema"]["properties"].as_object() else {
        return Err("requestedSchema.properties is not an object".to_owned());
    };
    let content: Map<String, Value> = properties
        .iter()
        .filter_map(|(name, schema)| {
            let default = schema.get("default")?;
            fits(schema, default).then(|| (name.clone(), default.clone()))
        })
        .collect();
    let required = params["requestedSchema"]["required"].as_array();
    let missing = required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|name| !content.contains_key(name));
    if missing {
        return decline;
    }
    Ok(json!({"action": "accept", "content": content}))
}

/// Whether `value` is valid for a form field's primitive `schema` (string, number, integer,
/// boolean, single- or multi-select enum): a default the server's own schema rejects is not
/// sent back.
fn fits(schema: &Value, value: &Value) -> bool {
    let in_enum = |value: &Value, schema: &Value| match schema.get("enum") {
        Some(Value::Array(options)) => options.contains(value),
        _ => true,
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => value.is_string() && in_enum(value, schema),
        Some("number") => value.is_number(),
        Some("integer") => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        Some("boolean") => value.is_boolean(),
        Some("array") => value
            .as_array()
            .is_some_and(|items| items.iter().all(|item| in_enum(item, &schema["items"]))),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(properties: Value, required: Value) -> Value {
        json!({"requestedSchema": {"type": "object", "properties": properties, "required": required}})
    }

    #[test]
    fn every_known_scenario_name_parses_and_others_do_not() {
        for (name, scenario) in Scenario::ALL {
            assert_eq!(Scenario::from_name(name), Some(scenario));
        }
        assert_eq!(Scenario::from_name("tools-call"), None);
    }

    #[test]
    fn elicitation_accepts_each_primitive_default() {
        let params = schema(
            json!({
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
                "nickname": {"type": "string"},
            }),
            json!([]),
        );
        assert_eq!(
            elicit_defaults(&params).unwrap(),
            json!({"action": "accept", "content": {
                "name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": true,
            }})
        );
    }

    #[test]
    fn elicitation_drops_defaults_that_break_their_own_schema() {
        let params = schema(
            json!({
                "status": {"type": "string", "enum": ["active"], "default": "gone"},
                "age": {"type": "integer", "default": 1.5},
                "flag": {"type": "boolean", "default": "yes"},
            }),
            json!([]),
        );
        assert_eq!(
            elicit_defaults(&params).unwrap(),
            json!({"action": "accept", "content": {}})
        );
    }

    #[test]
    fn elicitation_declines_a_required_field_without_default_and_url_mode() {
        let params = schema(json!({"email": {"type": "string"}}), json!(["email"]));
        assert_eq!(
            elicit_defaults(&params).unwrap(),
            json!({"action": "decline"})
        );
        let url = json!({"mode": "url", "url": "https://example.com", "elicitationId": "1"});
        assert_eq!(elicit_defaults(&url).unwrap(), json!({"action": "decline"}));
    }
}
