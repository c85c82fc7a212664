//! The 2026-07-28 ("modern") era's request rules, pure: the `_meta` envelope every request
//! carries, the standard request headers of SEP-2243 checked against the body, the era a POST
//! belongs to, and the modern error codes.
//!
//! A server validates a modern request in one fixed order, so that one request always gets the
//! same answer (the order the conformance suite expects, docs/PROTOCOL.md#era-2026):
//!
//! 1. `MCP-Protocol-Version` missing: -32020 (header mismatch);
//! 2. the envelope missing or malformed (no `_meta`, no `protocolVersion`, no
//!    `clientCapabilities`, a bad `logLevel`): -32602;
//! 3. a header that disagrees with the body (`MCP-Protocol-Version` against the envelope's
//!    version, `Mcp-Method` against `method`, `Mcp-Name` against `params.name`, `params.uri` or
//!    `params.taskId`): -32020;
//! 4. a version tether does not serve in this era: -32022 with `data.supported` and
//!    `data.requested`.
//!
//! [`check_request`] runs exactly those steps; what happens next (discover, listen, the
//! handler) is the server's. Nothing here reads a socket or a clock.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::jsonrpc::{ErrorObject, INVALID_PARAMS};
use crate::logging::LogLevel;
use crate::version::{Eras, ProtocolVersion};

/// `_meta` key: the request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the least severe log level the client wants for this request (optional;
/// without it no `notifications/message` is sent for the request).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Result `_meta` key: the server's name and version.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Notification and result `_meta` key on a `subscriptions/listen` stream: the listen
/// request's id.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Header: the request's JSON-RPC method (SEP-2243), lowercase as `http` spells names.
pub const MCP_METHOD: &str = "mcp-method";
/// Header: the request's target (`params.name`, `params.uri` or `params.taskId`).
pub const MCP_NAME: &str = "mcp-name";

/// -32020: a standard header is missing, malformed or disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// -32021: the request needs a client capability it did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// -32022: the request's protocol version is not served.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The tasks extension's id (SEP-2663), in client capabilities and in `server/discover`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `server/discover`, which replaces the handshake.
pub const DISCOVER: &str = "server/discover";
/// `subscriptions/listen`, which replaces the GET stream.
pub const LISTEN: &str = "subscriptions/listen";
/// The first message of a listen stream.
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// `resultType` of a final result.
pub const RESULT_COMPLETE: &str = "complete";
/// `resultType` of an `InputRequiredResult` (SEP-2322).
pub const RESULT_INPUT_REQUIRED: &str = "input_required";

/// Methods of the legacy era that do not exist in the modern one: answered -32601 (404).
pub const REMOVED_METHODS: [&str; 5] = [
    crate::jsonrpc::INITIALIZE,
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Methods whose result may be `input_required` (SEP-2322: "only `prompts/get`,
/// `resources/read` and `tools/call`").
pub const INPUT_REQUIRED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Methods whose complete result carries the caching hints `ttlMs` and `cacheScope`.
pub const CACHEABLE_METHODS: [&str; 6] = [
    DISCOVER,
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// The era a POST belongs to, from its body and its `MCP-Protocol-Version` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// A 2025 request: `initialize`, or a request in a session.
    Legacy,
    /// A 2026-07-28 request: stateless, with the `_meta` envelope.
    Modern,
}

/// The era of a POST whose message has `params`, given its `MCP-Protocol-Version` and whether
/// it names a session (`Mcp-Session-Id`).
///
/// Modern when the body carries the envelope (either of its required keys in `params._meta`),
/// whatever the headers say; or, without a session, when the header names the modern version:
/// a request that says it is modern but lacks its envelope is a malformed modern request, not
/// a legacy one missing its session. Everything else is legacy: a session's request with a
/// 2026-07-28 header is a legacy request with a version its session cannot speak.
#[must_use]
pub fn era_of(
    params: Option<&Value>,
    protocol_version_header: Option<&str>,
    has_session: bool,
) -> Era {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    if meta.is_some_and(|m| {
        m.contains_key(META_PROTOCOL_VERSION) || m.contains_key(META_CLIENT_CAPABILITIES)
    }) {
        return Era::Modern;
    }
    match protocol_version_header.map(trim_ows) {
        Some(value)
            if !has_session
                && ProtocolVersion::parse(value).is_ok_and(ProtocolVersion::is_modern) =>
        {
            Era::Modern
        }
        _ => Era::Legacy,
    }
}

/// A modern request's envelope, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The version it speaks (always a modern one once [`check_request`] accepted it).
    pub version: ProtocolVersion,
    /// `clientCapabilities`: what the client can do for this request.
    pub capabilities: Map<String, Value>,
    /// `clientInfo`, as sent.
    pub client_info: Option<Value>,
    /// `logLevel`; `None`: send no log messages for this request.
    pub log_level: Option<LogLevel>,
}

impl Envelope {
    /// Whether the client declared `capability` (a top-level key such as `"elicitation"`).
    #[must_use]
    pub fn declares(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|value| !value.is_null() && value != &Value::Bool(false))
    }

    /// Whether the client declared the extension `id` under `capabilities.extensions`.
    #[must_use]
    pub fn declares_extension(&self, id: &str) -> bool {
        self.capabilities
            .get("extensions")
            .and_then(Value::as_object)
            .is_some_and(|extensions| extensions.contains_key(id))
    }
}

/// The standard headers of a modern POST, as received (`None` when absent or not text).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestHeaders<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`.
    pub name: Option<&'a str>,
}

/// Why a modern request was refused before it ran; each maps to one JSON-RPC error (and HTTP
/// 400) through [`Refusal::error_object`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// -32602: the envelope is missing or malformed.
    #[error("invalid request metadata: {0}")]
    InvalidEnvelope(String),
    /// -32020: a standard header is missing, malformed or disagrees with the body.
    #[error("header mismatch: {0}")]
    HeaderMismatch(String),
    /// -32022: the version is not served (`requested` as sent).
    #[error("unsupported protocol version")]
    UnsupportedVersion {
        /// The envelope's version string.
        requested: String,
    },
}

impl Refusal {
    /// The JSON-RPC error answering this refusal on a server that serves `eras`.
    #[must_use]
    pub fn error_object(&self, eras: Eras) -> ErrorObject {
        match self {
            Self::InvalidEnvelope(_) => ErrorObject::new(INVALID_PARAMS, self.to_string()),
            Self::HeaderMismatch(_) => ErrorObject::new(HEADER_MISMATCH, self.to_string()),
            Self::UnsupportedVersion { requested } => {
                ErrorObject::new(UNSUPPORTED_PROTOCOL_VERSION, self.to_string())
                    .with_data(unsupported_version_data(eras, Some(requested)))
            }
        }
    }
}

/// `data` of an unsupported-version error, in either era: every version the server serves
/// (`eras`), and the version asked for when it is known.
#[must_use]
pub fn unsupported_version_data(eras: Eras, requested: Option<&str>) -> Value {
    let supported = eras.version_strings();
    match requested {
        Some(requested) => json!({"supported": supported, "requested": requested}),
        None => json!({"supported": supported}),
    }
}

/// The `data` of a -32021 error: the capabilities the request needed, as a `ClientCapabilities`
/// object (`{"sampling": {}}`).
#[must_use]
pub fn missing_capability(capability: &str) -> ErrorObject {
    ErrorObject::new(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("this request needs the client capability `{capability}`"),
    )
    .with_data(json!({"requiredCapabilities": {capability: {}}}))
}

/// The -32021 of a request that needs the tasks extension and did not declare it.
#[must_use]
pub fn tasks_extension_required() -> ErrorObject {
    missing_capability_object(json!({"extensions": {TASKS_EXTENSION: {}}}))
}

/// A -32021 error whose `requiredCapabilities` is `capabilities` (a `ClientCapabilities`
/// object, such as `{"extensions": {"io.modelcontextprotocol/tasks": {}}}`).
#[must_use]
pub fn missing_capability_object(capabilities: Value) -> ErrorObject {
    ErrorObject::new(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "this request needs a client capability it did not declare",
    )
    .with_data(json!({"requiredCapabilities": capabilities}))
}

/// Validates a modern request (see the module docs for the order): its envelope, its headers
/// against its body, and its version.
///
/// # Errors
///
/// The first [`Refusal`] in that order.
pub fn check_request(
    method: &str,
    params: Option<&Value>,
    headers: RequestHeaders<'_>,
) -> Result<Envelope, Refusal> {
    let Some(header_version) = headers.protocol_version.map(trim_ows) else {
        return Err(Refusal::HeaderMismatch(
            "the MCP-Protocol-Version header is required".into(),
        ));
    };
    let meta = params
        .and_then(|p| p.get("_meta"))
        .ok_or_else(|| Refusal::InvalidEnvelope("params._meta is required".into()))?
        .as_object()
        .ok_or_else(|| Refusal::InvalidEnvelope("params._meta must be an object".into()))?;
    let requested = match meta.get(META_PROTOCOL_VERSION) {
        Some(Value::String(version)) => version.as_str(),
        Some(_) => {
            return Err(Refusal::InvalidEnvelope(format!(
                "{META_PROTOCOL_VERSION} must be a string"
            )));
        }
        None => {
            return Err(Refusal::InvalidEnvelope(format!(
                "{META_PROTOCOL_VERSION} is required"
            )));
        }
    };
    let capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
        Some(Value::Object(capabilities)) => capabilities.clone(),
        Some(_) => {
            return Err(Refusal::InvalidEnvelope(format!(
                "{META_CLIENT_CAPABILITIES} must be an object"
            )));
        }
        None => {
            return Err(Refusal::InvalidEnvelope(format!(
                "{META_CLIENT_CAPABILITIES} is required"
            )));
        }
    };
    let log_level = match meta.get(META_LOG_LEVEL) {
        None | Some(Value::Null) => None,
        Some(Value::String(level)) => Some(level.parse::<LogLevel>().map_err(|_| {
            Refusal::InvalidEnvelope(format!("{META_LOG_LEVEL} is not a log level"))
        })?),
        Some(_) => {
            return Err(Refusal::InvalidEnvelope(format!(
                "{META_LOG_LEVEL} must be a string"
            )));
        }
    };
    let client_info = meta.get(META_CLIENT_INFO).cloned();
    if header_version != requested {
        return Err(Refusal::HeaderMismatch(
            "the MCP-Protocol-Version header does not match the request's protocolVersion".into(),
        ));
    }
    check_method_header(method, headers.method)?;
    check_name_header(method, params, headers.name)?;
    let version = ProtocolVersion::parse(requested)
        .ok()
        .filter(|v| v.is_modern())
        .ok_or_else(|| Refusal::UnsupportedVersion {
            requested: requested.to_owned(),
        })?;
    Ok(Envelope {
        version,
        capabilities,
        client_info,
        log_level,
    })
}

/// `Mcp-Method` must be present and equal to the body's method (values are case-sensitive).
fn check_method_header(method: &str, header: Option<&str>) -> Result<(), Refusal> {
    match header.map(trim_ows) {
        None => Err(Refusal::HeaderMismatch(
            "the Mcp-Method header is required".into(),
        )),
        Some(value) if value == method => Ok(()),
        Some(_) => Err(Refusal::HeaderMismatch(
            "the Mcp-Method header does not match the request's method".into(),
        )),
    }
}

/// The body value `Mcp-Name` must equal for `method`, or `None` when the method takes no
/// `Mcp-Name`. A required name missing from the body is the handler's -32602, not a header
/// problem, so it reads as no requirement here.
fn name_in_body<'a>(method: &str, params: Option<&'a Value>) -> Option<Option<&'a str>> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/stream" => "taskId",
        _ => return None,
    };
    Some(params.and_then(|p| p.get(field)).and_then(Value::as_str))
}

/// `Mcp-Name`, for the methods that name a target, must be present and equal to it after
/// decoding.
fn check_name_header(
    method: &str,
    params: Option<&Value>,
    header: Option<&str>,
) -> Result<(), Refusal> {
    let Some(expected) = name_in_body(method, params) else {
        return Ok(());
    };
    let Some(header) = header else {
        return Err(Refusal::HeaderMismatch(format!(
            "the Mcp-Name header is required for {method}"
        )));
    };
    let value = decode_header_value(header)
        .ok_or_else(|| Refusal::HeaderMismatch("the Mcp-Name header is not valid base64".into()))?;
    match expected {
        Some(expected) if expected == value => Ok(()),
        None => Ok(()),
        Some(_) => Err(Refusal::HeaderMismatch(format!(
            "the Mcp-Name header does not match the {method} request's target"
        ))),
    }
}

/// A header value as SEP-2243 encodes it: surrounding spaces and tabs dropped, and a value
/// written `=?base64?<standard base64>?=` decoded (the sentinel is case-sensitive; anything
/// else is literal). `None` when the sentinel holds invalid base64 or non-UTF-8 bytes.
#[must_use]
pub fn decode_header_value(value: &str) -> Option<String> {
    let value = trim_ows(value);
    match value
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// `value` as a header value the way SEP-2243 asks a client to send it: as is when it is
/// printable ASCII without surrounding spaces (and does not look like the sentinel), else
/// `=?base64?<standard base64 of its UTF-8>?=`. [`decode_header_value`] undoes it.
#[must_use]
pub fn encode_header_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && trim_ows(value) == value
        && !value.starts_with("=?");
    if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

/// The `Mcp-Name` a client sends with `method` and `params`: the tool or prompt name, the
/// resource URI or the task id, encoded ([`encode_header_value`]); `None` for methods that
/// name no target.
#[must_use]
pub fn name_header(method: &str, params: Option<&Value>) -> Option<String> {
    name_in_body(method, params)
        .flatten()
        .map(encode_header_value)
}

/// The `_meta` envelope of a client's 2026-07-28 request: `version`, `capabilities`,
/// `client_info`, merged over whatever `_meta` the request already has (a progress token).
pub fn add_envelope(
    params: &mut Value,
    version: ProtocolVersion,
    capabilities: &Value,
    client_info: &Value,
) {
    if !params.is_object() {
        *params = Value::Object(Map::new());
    }
    let meta = params
        .as_object_mut()
        .expect("an object")
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let meta = meta.as_object_mut().expect("an object");
    meta.insert(META_PROTOCOL_VERSION.into(), Value::from(version.as_str()));
    meta.insert(META_CLIENT_CAPABILITIES.into(), capabilities.clone());
    meta.insert(META_CLIENT_INFO.into(), client_info.clone());
}

/// The prefix of the header a tool argument is mirrored into (SEP-2243): `Mcp-Param-{name}`.
pub const PARAM_HEADER_PREFIX: &str = "Mcp-Param-";

/// Largest magnitude of an integer argument that may be mirrored into a header: the safe
/// integer range of an IEEE 754 double (2^53 − 1), which the spec requires.
pub const MAX_HEADER_INTEGER: u64 = (1 << 53) - 1;

/// One `x-mcp-header` annotation of a tool's `inputSchema`: where the argument sits (its
/// chain of `properties` keys) and the name part of its `Mcp-Param-{name}` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The property names from the schema root to the annotated property.
    pub path: Vec<String>,
    /// The annotation's value: the header is [`PARAM_HEADER_PREFIX`] followed by it.
    pub name: String,
}

/// The `x-mcp-header` annotations of a tool's `inputSchema`, or why the tool definition is
/// invalid and must be dropped from `tools/list` (SEP-2243): an annotation that is empty, not
/// an HTTP token (`1*tchar`), not a string, on a property whose `type` is not `string`,
/// `integer` or `boolean` (`number` is not allowed), repeated case-insensitively, or anywhere
/// but a chain of `properties` keys from the root (under `items`, `oneOf`, `$ref`'d `$defs`,
/// `if`/`then`/`else` and the like).
///
/// # Errors
///
/// The reason, for the warning a client logs when it drops the tool.
pub fn param_headers(input_schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    visit_schema(input_schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for header in &found {
        if !seen.insert(header.name.to_ascii_lowercase()) {
            return Err(format!(
                "x-mcp-header {:?} appears more than once (case-insensitively)",
                header.name
            ));
        }
    }
    Ok(found)
}

/// JSON Schema keywords whose values are subschemas (directly, in an array, or in a map), other
/// than `properties`: an annotation under any of them is not statically reachable.
const SUBSCHEMA_KEYWORDS: [&str; 18] = [
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "dependentSchemas",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
];

fn visit_schema(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    found: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Value::Object(object) = schema else {
        if let Value::Array(items) = schema {
            for item in items {
                visit_schema(item, path, false, found)?;
            }
        }
        return Ok(());
    };
    if let Some(annotation) = object.get("x-mcp-header") {
        if !reachable || path.is_empty() {
            return Err(format!(
                "x-mcp-header {annotation} is not on a property reachable through `properties` alone"
            ));
        }
        found.push(ParamHeader {
            path: path.clone(),
            name: checked_annotation(annotation, object)?,
        });
    }
    if let Some(Value::Object(properties)) = object.get("properties") {
        for (name, property) in properties {
            path.push(name.clone());
            visit_schema(property, path, reachable, found)?;
            path.pop();
        }
    }
    for keyword in SUBSCHEMA_KEYWORDS.iter().copied().chain(["else"]) {
        match object.get(keyword) {
            Some(Value::Object(map))
                if matches!(
                    keyword,
                    "patternProperties" | "dependentSchemas" | "$defs" | "definitions"
                ) =>
            {
                for subschema in map.values() {
                    visit_schema(subschema, path, false, found)?;
                }
            }
            Some(subschema) => visit_schema(subschema, path, false, found)?,
            None => {}
        }
    }
    Ok(())
}

/// The annotation's header name, checked against the property it sits on.
fn checked_annotation(annotation: &Value, property: &Map<String, Value>) -> Result<String, String> {
    let Some(name) = annotation.as_str() else {
        return Err(format!("x-mcp-header {annotation} is not a string"));
    };
    if name.is_empty() {
        return Err("x-mcp-header is empty".to_owned());
    }
    if !name.bytes().all(is_tchar) {
        return Err(format!(
            "x-mcp-header {name:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)"
        ));
    }
    match property.get("type").and_then(Value::as_str) {
        Some("string" | "integer" | "boolean") => Ok(name.to_owned()),
        other => Err(format!(
            "x-mcp-header {name:?} is on a property of type {}; only string, integer and boolean may be mirrored",
            other.map_or_else(|| "(none)".to_owned(), |t| format!("{t:?}"))
        )),
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// The `Mcp-Param-*` headers of a `tools/call` with `arguments`, for a tool annotated with
/// `headers`: each present value converted (a string as is, an integer in decimal, a boolean
/// as `true`/`false`) and encoded like every header value ([`encode_header_value`]; an empty
/// string stays empty). A value that is absent, `null`, or not of its declared kind (an
/// integer beyond [`MAX_HEADER_INTEGER`] included) gets no header: the server's check then
/// reports the disagreement rather than the client inventing a value.
#[must_use]
pub fn param_header_values(headers: &[ParamHeader], arguments: &Value) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|header| {
            let value = header
                .path
                .iter()
                .try_fold(arguments, |value, key| value.get(key))?;
            let text = match value {
                Value::String(text) if text.is_empty() => String::new(),
                Value::String(text) => encode_header_value(text),
                Value::Bool(flag) => flag.to_string(),
                Value::Number(number) => header_integer(number)?,
                _ => return None,
            };
            Some((format!("{PARAM_HEADER_PREFIX}{}", header.name), text))
        })
        .collect()
}

/// An integer argument in decimal, if it is one within the safe range (`42.0` counts).
fn header_integer(number: &serde_json::Number) -> Option<String> {
    if let Some(n) = number.as_i64() {
        return (n.unsigned_abs() <= MAX_HEADER_INTEGER).then(|| n.to_string());
    }
    if let Some(n) = number.as_u64() {
        return (n <= MAX_HEADER_INTEGER).then(|| n.to_string());
    }
    let f = number.as_f64()?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let fits = f.fract() == 0.0 && f.abs() <= MAX_HEADER_INTEGER as f64;
    #[allow(clippy::cast_possible_truncation)]
    fits.then(|| (f as i64).to_string())
}

/// Requests a client may send again, under a new id, when their connection was lost before
/// the answer: they change nothing on the server (a `tools/call` may have run, so it is not
/// one of them).
pub const SAFE_TO_REPEAT: [&str; 10] = [
    DISCOVER,
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "tasks/get",
    "ping",
];

/// `value` without leading and trailing spaces and tabs (RFC 9110 §5.5).
fn trim_ows(value: &str) -> &str {
    value.trim_matches([' ', '\t'])
}

/// Marks a result as modern: `resultType` (`"complete"` unless the result already says), the
/// server's identity in `_meta`, and for the [cacheable methods](CACHEABLE_METHODS) the
/// caching hints `ttlMs` and `cacheScope`, defaulting to "immediately stale, this caller only"
/// (`0`, `"private"`) when the handler set none: a hint that can never serve one user's data to
/// another.
pub fn complete_result(method: &str, result: &mut Value, server_info: &Value) {
    let Value::Object(object) = result else {
        return;
    };
    object
        .entry("resultType")
        .or_insert_with(|| Value::from(RESULT_COMPLETE));
    let is_complete = object.get("resultType").and_then(Value::as_str) == Some(RESULT_COMPLETE);
    if is_complete && CACHEABLE_METHODS.contains(&method) {
        object.entry("ttlMs").or_insert_with(|| Value::from(0));
        object
            .entry("cacheScope")
            .or_insert_with(|| Value::from("private"));
    }
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.entry(META_SERVER_INFO)
            .or_insert_with(|| server_info.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_encode_only_what_must_be_and_decode_back() {
        for plain in ["get_weather", "file:///a/b.txt", "x y"] {
            assert_eq!(encode_header_value(plain), plain);
        }
        for awkward in ["caf\u{e9}", " padded", "line\nbreak", "=?base64?x?=", ""] {
            let encoded = encode_header_value(awkward);
            assert!(encoded.starts_with("=?base64?"), "{awkward:?} -> {encoded}");
            assert_eq!(decode_header_value(&encoded).as_deref(), Some(awkward));
        }
        assert_eq!(
            name_header("tools/call", Some(&json!({"name": "t\u{fc}r"}))).as_deref(),
            Some("=?base64?dMO8cg==?=")
        );
        assert_eq!(name_header("tools/list", Some(&json!({"name": "x"}))), None);
    }

    #[test]
    fn annotated_properties_reachable_through_properties_become_param_headers() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limits": {"type": "object", "properties": {
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
            }},
            "query": {"type": "string"},
        }});
        let headers = param_headers(&schema).unwrap();
        assert_eq!(
            headers,
            vec![
                ParamHeader {
                    path: vec!["region".into()],
                    name: "Region".into()
                },
                ParamHeader {
                    path: vec!["limits".into(), "priority".into()],
                    name: "Priority".into()
                },
            ]
        );
        let arguments = json!({"region": " padded", "limits": {"priority": 42}, "query": "q"});
        assert_eq!(
            param_header_values(&headers, &arguments),
            vec![
                (
                    "Mcp-Param-Region".to_owned(),
                    "=?base64?IHBhZGRlZA==?=".to_owned()
                ),
                ("Mcp-Param-Priority".to_owned(), "42".to_owned()),
            ]
        );
    }

    #[test]
    fn each_invalid_annotation_rejects_the_tool() {
        let tool = |property: Value| json!({"type": "object", "properties": {"p": property}});
        let invalid = [
            tool(json!({"type": "string", "x-mcp-header": ""})),
            tool(json!({"type": "object", "x-mcp-header": "Data"})),
            tool(json!({"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"})),
            tool(json!({"type": "null", "x-mcp-header": "Nil"})),
            tool(json!({"type": "number", "x-mcp-header": "Score"})),
            tool(json!({"x-mcp-header": "Untyped"})),
            tool(json!({"type": "string", "x-mcp-header": "My Region"})),
            tool(json!({"type": "string", "x-mcp-header": "Region:Primary"})),
            tool(json!({"type": "string", "x-mcp-header": "R\u{e9}gion"})),
            tool(json!({"type": "string", "x-mcp-header": "Region\t1"})),
            tool(json!({"type": "string", "x-mcp-header": 7})),
            tool(json!({"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}})),
            tool(json!({"oneOf": [{"type": "string", "x-mcp-header": "Either"}]})),
            json!({"type": "object", "$defs": {"d": {"type": "string", "x-mcp-header": "Def"}}}),
            json!({"type": "string", "x-mcp-header": "Root"}),
            json!({"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "MyField"},
                "b": {"type": "string", "x-mcp-header": "myfield"},
            }}),
        ];
        for schema in invalid {
            assert!(param_headers(&schema).is_err(), "accepted {schema}");
        }
        assert_eq!(param_headers(&json!({"type": "object"})), Ok(Vec::new()));
    }

    #[test]
    fn param_values_convert_by_kind_and_omit_what_is_missing() {
        let headers: Vec<ParamHeader> = ["s", "e", "b", "i", "f", "big", "n", "absent", "wrong"]
            .iter()
            .map(|key| ParamHeader {
                path: vec![(*key).to_owned()],
                name: key.to_uppercase(),
            })
            .collect();
        let arguments = json!({
            "s": "us-west1", "e": "", "b": false, "i": -7, "f": 42.0,
            "big": 9_007_199_254_740_992_u64, "n": null, "wrong": [1],
        });
        assert_eq!(
            param_header_values(&headers, &arguments),
            vec![
                ("Mcp-Param-S".to_owned(), "us-west1".to_owned()),
                ("Mcp-Param-E".to_owned(), String::new()),
                ("Mcp-Param-B".to_owned(), "false".to_owned()),
                ("Mcp-Param-I".to_owned(), "-7".to_owned()),
                ("Mcp-Param-F".to_owned(), "42".to_owned()),
            ]
        );
    }

    #[test]
    fn the_envelope_joins_the_request_s_own_meta() {
        let mut params = json!({"name": "count", "_meta": {"progressToken": 7}});
        add_envelope(
            &mut params,
            ProtocolVersion::MODERN,
            &json!({"roots": {}}),
            &json!({"name": "t", "version": "1"}),
        );
        let meta = &params["_meta"];
        assert_eq!(meta["progressToken"], 7);
        assert_eq!(meta[META_PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({"roots": {}}));
        let mut empty = Value::Null;
        add_envelope(&mut empty, ProtocolVersion::MODERN, &json!({}), &json!({}));
        assert!(empty["_meta"].is_object());
    }

    fn envelope(version: &str) -> Value {
        json!({"_meta": {
            META_PROTOCOL_VERSION: version,
            META_CLIENT_CAPABILITIES: {},
        }})
    }

    fn headers<'a>(version: &'a str, method: &'a str) -> RequestHeaders<'a> {
        RequestHeaders {
            protocol_version: Some(version),
            method: Some(method),
            name: None,
        }
    }

    #[test]
    fn the_era_comes_from_the_envelope_or_a_modern_header() {
        assert_eq!(
            era_of(Some(&envelope("2026-07-28")), None, false),
            Era::Modern
        );
        assert_eq!(
            era_of(Some(&envelope("2025-11-25")), Some("2025-11-25"), true),
            Era::Modern,
            "the envelope wins over a session id"
        );
        assert_eq!(era_of(None, Some(" 2026-07-28 "), false), Era::Modern);
        assert_eq!(
            era_of(None, Some("2026-07-28"), true),
            Era::Legacy,
            "a session's request with the modern header"
        );
        assert_eq!(
            era_of(Some(&json!({})), Some("2025-11-25"), false),
            Era::Legacy
        );
        assert_eq!(era_of(None, None, false), Era::Legacy);
        assert_eq!(era_of(None, Some("v999"), false), Era::Legacy);
    }

    #[test]
    fn a_valid_request_yields_its_envelope() {
        let mut params = envelope("2026-07-28");
        params["_meta"][META_LOG_LEVEL] = json!("warning");
        params["_meta"][META_CLIENT_CAPABILITIES] = json!({"elicitation": {}});
        let envelope = check_request(
            "tools/list",
            Some(&params),
            headers("2026-07-28", "tools/list"),
        )
        .expect("valid");
        assert_eq!(envelope.version, ProtocolVersion::V2026_07_28);
        assert_eq!(envelope.log_level, Some(LogLevel::Warning));
        assert!(envelope.declares("elicitation"));
        assert!(!envelope.declares("sampling"));
    }

    #[test]
    fn the_checks_run_in_the_documented_order() {
        // 1: no version header, even with a broken envelope.
        let none = RequestHeaders::default();
        assert!(matches!(
            check_request("server/discover", None, none),
            Err(Refusal::HeaderMismatch(_))
        ));
        // 2: the envelope before the header comparison.
        let params = json!({"_meta": {META_CLIENT_CAPABILITIES: {}}});
        assert!(matches!(
            check_request(
                "server/discover",
                Some(&params),
                headers("2026-07-28", "server/discover")
            ),
            Err(Refusal::InvalidEnvelope(_))
        ));
        // 3: header and body disagree, before the version is looked at.
        assert!(matches!(
            check_request(
                "server/discover",
                Some(&envelope("v999.0.0")),
                headers("2026-07-28", "server/discover")
            ),
            Err(Refusal::HeaderMismatch(_))
        ));
        // 4: an agreed but unserved version.
        let refusal = check_request(
            "server/discover",
            Some(&envelope("v999.0.0")),
            headers("v999.0.0", "server/discover"),
        )
        .unwrap_err();
        let error = refusal.error_object(Eras::Both);
        assert_eq!(error.code, UNSUPPORTED_PROTOCOL_VERSION);
        let data = error.data.expect("data");
        assert_eq!(data["requested"], "v999.0.0");
        assert_eq!(
            data["supported"],
            json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
        );
        // A server serving 2026-07-28 alone names only that version.
        let data = refusal.error_object(Eras::Modern).data.expect("data");
        assert_eq!(data["supported"], json!(["2026-07-28"]));
        // A legacy version inside a modern envelope is not served by the modern rules.
        assert!(matches!(
            check_request(
                "tools/list",
                Some(&envelope("2025-11-25")),
                headers("2025-11-25", "tools/list")
            ),
            Err(Refusal::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn envelope_fields_of_the_wrong_type_are_invalid_params() {
        for meta in [
            json!("text"),
            json!({META_PROTOCOL_VERSION: 7, META_CLIENT_CAPABILITIES: {}}),
            json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: []}),
            json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
                   META_LOG_LEVEL: "loud"}),
            json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {},
                   META_LOG_LEVEL: 3}),
        ] {
            let params = json!({"_meta": meta});
            let refusal = check_request(
                "tools/list",
                Some(&params),
                headers("2026-07-28", "tools/list"),
            )
            .unwrap_err();
            assert_eq!(
                refusal.error_object(Eras::Both).code,
                INVALID_PARAMS,
                "{meta}"
            );
        }
    }

    #[test]
    fn method_headers_are_case_sensitive_and_trimmed() {
        let params = envelope("2026-07-28");
        assert!(
            check_request(
                "tools/list",
                Some(&params),
                headers("2026-07-28", " tools/list\t")
            )
            .is_ok()
        );
        for wrong in [Some("TOOLS/LIST"), Some("tools/call"), None] {
            let headers = RequestHeaders {
                protocol_version: Some("2026-07-28"),
                method: wrong,
                name: None,
            };
            assert!(matches!(
                check_request("tools/list", Some(&params), headers),
                Err(Refusal::HeaderMismatch(_))
            ));
        }
    }

    #[test]
    fn name_headers_name_the_target_plain_or_in_base64() {
        let mut params = envelope("2026-07-28");
        params["name"] = json!("héllo tool");
        let check = |name: Option<&str>| {
            check_request(
                "tools/call",
                Some(&params),
                RequestHeaders {
                    protocol_version: Some("2026-07-28"),
                    method: Some("tools/call"),
                    name,
                },
            )
        };
        assert!(check(Some("héllo tool")).is_ok());
        assert!(check(Some("=?base64?aMOpbGxvIHRvb2w=?=")).is_ok());
        for wrong in [
            None,
            Some("other"),
            Some("=?base64?not base64?="),
            Some("=?BASE64?aMOpbGxvIHRvb2w=?="),
        ] {
            assert!(
                matches!(check(wrong), Err(Refusal::HeaderMismatch(_))),
                "{wrong:?}"
            );
        }
        let mut read = envelope("2026-07-28");
        read["uri"] = json!("demo://a");
        let ok = check_request(
            "resources/read",
            Some(&read),
            RequestHeaders {
                protocol_version: Some("2026-07-28"),
                method: Some("resources/read"),
                name: Some("  demo://a "),
            },
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn complete_results_gain_result_type_server_info_and_cache_hints() {
        let info = json!({"name": "t", "version": "1"});
        let mut list = json!({"tools": []});
        complete_result("tools/list", &mut list, &info);
        assert_eq!(list["resultType"], "complete");
        assert_eq!(list["ttlMs"], 0);
        assert_eq!(list["cacheScope"], "private");
        assert_eq!(list["_meta"][META_SERVER_INFO], info);

        let mut call = json!({"content": [], "ttlMs": 5});
        complete_result("tools/call", &mut call, &info);
        assert_eq!(call["resultType"], "complete");
        assert_eq!(call["ttlMs"], 5, "the handler's fields are kept");
        assert!(call.get("cacheScope").is_none(), "tools/call is not cached");

        let mut asked = json!({"resultType": "input_required", "requestState": "s"});
        complete_result("resources/read", &mut asked, &info);
        assert!(
            asked.get("ttlMs").is_none(),
            "no cache hints on input_required"
        );
    }
}
