//! JSON-RPC 2.0 messages as MCP uses them: the message types, classification of a POST body
//! into messages, and compact serialization.
//!
//! This module owns the envelope: what makes bytes a request, a notification or a response
//! (docs/PROTOCOL.md#jsonrpc-messages), the batch rules (docs/PROTOCOL.md#batching), a typed error
//! for each way a body can fail with the JSON-RPC error response to send for it, and the few fields
//! the transport routes on (`initialize`, `params._meta.progressToken`, `notifications/cancelled`).
//! Unknown fields are kept, so a gateway forwards a message unchanged. It does not own protocol
//! versions (the caller turns the negotiated version into [`Batching`]), HTTP statuses, body size
//! limits (the HTTP layer bounds the body before it gets here), or what any method means.

use std::fmt;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

/// The value of the `jsonrpc` member every message must carry.
pub const JSONRPC_VERSION: &str = "2.0";

/// JSON-RPC "Parse error": the body is not valid JSON. Sent with `id` null (HTTP 400).
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request": valid JSON that is not an acceptable JSON-RPC message or batch
/// (HTTP 400).
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "Method not found": the receiver does not implement the request's method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params"; MCP also uses it for an unsupported `initialize` version and,
/// from 2026-07-28, for a resource that does not exist.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "Internal error": the receiver failed while handling a valid request.
pub const INTERNAL_ERROR: i64 = -32603;
/// The error of a request the receiver cancelled (the code the SDKs use; MCP sends no response
/// to a request the client cancelled).
pub const REQUEST_CANCELLED: i64 = -32800;

/// Method of the lifecycle request that opens a session; it must never be batched.
pub const INITIALIZE: &str = "initialize";
/// Method of the notification that reports progress on a request, keyed by its progress token.
pub const PROGRESS_NOTIFICATION: &str = "notifications/progress";
/// Method of the notification that cancels an in-flight request, named by `params.requestId`.
pub const CANCELLED_NOTIFICATION: &str = "notifications/cancelled";

/// Members a message with a `method` defines. `result` and `error` are here too: written from
/// `extra` they would turn a request into something that no longer parses as one.
const METHOD_MESSAGE_KEYS: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];
/// Members a response defines. `params` is not one of them: on a response it is an unknown
/// member and is kept in `extra` like any other.
const RESPONSE_KEYS: &[&str] = &["jsonrpc", "id", "method", "result", "error"];
/// Members an error object defines.
const ERROR_OBJECT_KEYS: &[&str] = &["code", "message", "data"];

/// An integer as peers send it for ids and progress tokens: any value from `i64::MIN` to
/// `u64::MAX`, the range serde_json reads exactly.
///
/// A number written with a fraction or an exponent (`1.5`, `1.0`, `1e3`) is not an integer
/// here, even when its value is whole: echoing it back as `1` would not be the id the peer
/// sent, and the spec asks for integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JsonInteger(
    // i128 holds both ends of the range, so equality and hashing need no normalisation.
    i128,
);

impl JsonInteger {
    /// The value as an `i64`, if it fits.
    pub fn as_i64(self) -> Option<i64> {
        i64::try_from(self.0).ok()
    }

    /// The value as a `u64`, if it is not negative.
    pub fn as_u64(self) -> Option<u64> {
        u64::try_from(self.0).ok()
    }

    fn from_number(number: &Number) -> Option<Self> {
        // Floats answer `None` to both, which is what rejects `1.0`, `1e3` and `-0`.
        number
            .as_i64()
            .map(i128::from)
            .or_else(|| number.as_u64().map(i128::from))
            .map(JsonInteger)
    }
}

impl From<i64> for JsonInteger {
    fn from(value: i64) -> Self {
        JsonInteger(value.into())
    }
}

impl From<u64> for JsonInteger {
    fn from(value: u64) -> Self {
        JsonInteger(value.into())
    }
}

impl fmt::Display for JsonInteger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for JsonInteger {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match (self.as_i64(), self.as_u64()) {
            (Some(value), _) => serializer.serialize_i64(value),
            (None, Some(value)) => serializer.serialize_u64(value),
            // The constructors keep the value within i64::MIN..=u64::MAX.
            (None, None) => unreachable!("JsonInteger out of range"),
        }
    }
}

/// A JSON-RPC request id: a string or an integer, kept exactly as the peer sent it.
///
/// `"1"` and `1` are different ids (a response must echo the type too). MCP forbids `null`
/// request ids, so there is no null variant; an error response that could not read the id uses
/// [`ErrorResponseId`] instead.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// A string id, possibly empty.
    String(String),
    /// An integer id.
    Integer(JsonInteger),
}

impl RequestId {
    /// Reads an id from a JSON value: a string or an exactly-read integer, nothing else.
    pub fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => JsonInteger::from_number(n).map(RequestId::Integer),
            _ => None,
        }
    }
}

impl From<String> for RequestId {
    fn from(value: String) -> Self {
        RequestId::String(value)
    }
}

impl From<&str> for RequestId {
    fn from(value: &str) -> Self {
        RequestId::String(value.to_owned())
    }
}

impl From<i64> for RequestId {
    fn from(value: i64) -> Self {
        RequestId::Integer(value.into())
    }
}

impl From<u64> for RequestId {
    fn from(value: u64) -> Self {
        RequestId::Integer(value.into())
    }
}

impl From<JsonInteger> for RequestId {
    fn from(value: JsonInteger) -> Self {
        RequestId::Integer(value)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Quoted, so that `"1"` and `1` stay distinguishable in logs.
            RequestId::String(s) => write!(f, "{}", Value::from(s.as_str())),
            RequestId::Integer(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::String(s) => serializer.serialize_str(s),
            RequestId::Integer(n) => n.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        RequestId::from_value(&value)
            .ok_or_else(|| serde::de::Error::custom("request id must be a string or an integer"))
    }
}

/// A progress token (`params._meta.progressToken`): a string or an integer, kept exactly.
///
/// The schema types it `string | number`, but tokens are matched by equality and a
/// fractional token cannot be echoed back exactly, so, like [`RequestId`], only strings and
/// integers are tokens; any other value reads as "no token".
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProgressToken {
    /// A string token.
    String(String),
    /// An integer token.
    Integer(JsonInteger),
}

impl ProgressToken {
    /// Reads a token from a JSON value: a string or an exactly-read integer, nothing else.
    pub fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(ProgressToken::String(s.clone())),
            Value::Number(n) => JsonInteger::from_number(n).map(ProgressToken::Integer),
            _ => None,
        }
    }
}

impl From<String> for ProgressToken {
    fn from(value: String) -> Self {
        ProgressToken::String(value)
    }
}

impl From<&str> for ProgressToken {
    fn from(value: &str) -> Self {
        ProgressToken::String(value.to_owned())
    }
}

impl From<i64> for ProgressToken {
    fn from(value: i64) -> Self {
        ProgressToken::Integer(value.into())
    }
}

impl From<u64> for ProgressToken {
    fn from(value: u64) -> Self {
        ProgressToken::Integer(value.into())
    }
}

/// Clients commonly use the request's own id as its progress token.
impl From<RequestId> for ProgressToken {
    fn from(value: RequestId) -> Self {
        match value {
            RequestId::String(s) => ProgressToken::String(s),
            RequestId::Integer(n) => ProgressToken::Integer(n),
        }
    }
}

impl fmt::Display for ProgressToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgressToken::String(s) => write!(f, "{}", Value::from(s.as_str())),
            ProgressToken::Integer(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for ProgressToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ProgressToken::String(s) => serializer.serialize_str(s),
            ProgressToken::Integer(n) => n.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ProgressToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        ProgressToken::from_value(&value).ok_or_else(|| {
            serde::de::Error::custom("progress token must be a string or an integer")
        })
    }
}

/// A request: a message with a `method` and an `id`, which the receiver must answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id the response will echo.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// `params`: an object (what MCP sends), an array (JSON-RPC allows it) or `null` (some
    /// clients send it for "no params"; kept so the message forwards unchanged). `None` when the
    /// member is absent.
    pub params: Option<Value>,
    /// Top-level members JSON-RPC does not define, kept for forwarding.
    pub extra: Map<String, Value>,
}

impl Request {
    /// A request with no unknown members.
    pub fn new(id: impl Into<RequestId>, method: impl Into<String>, params: Option<Value>) -> Self {
        Request {
            id: id.into(),
            method: method.into(),
            params,
            extra: Map::new(),
        }
    }

    /// Whether this is the `initialize` request that opens a session.
    pub fn is_initialize(&self) -> bool {
        self.method == INITIALIZE
    }

    /// The request's `params._meta.progressToken`, by which its progress notifications are
    /// routed back to it. `None` if absent or not a string or integer.
    pub fn progress_token(&self) -> Option<ProgressToken> {
        let token = self.params.as_ref()?.get("_meta")?.get("progressToken")?;
        ProgressToken::from_value(token)
    }
}

/// A notification: a message with a `method` and no `id`, which the receiver must not answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// `params`, with the same rules as [`Request::params`].
    pub params: Option<Value>,
    /// Top-level members JSON-RPC does not define, kept for forwarding.
    pub extra: Map<String, Value>,
}

impl Notification {
    /// A notification with no unknown members.
    pub fn new(method: impl Into<String>, params: Option<Value>) -> Self {
        Notification {
            method: method.into(),
            params,
            extra: Map::new(),
        }
    }

    /// For a `notifications/progress`, the token (`params.progressToken`) naming the request it
    /// reports on; `None` for other methods or an unusable token.
    pub fn progress_token(&self) -> Option<ProgressToken> {
        if self.method != PROGRESS_NOTIFICATION {
            return None;
        }
        ProgressToken::from_value(self.params.as_ref()?.get("progressToken")?)
    }

    /// For a `notifications/cancelled`, the id of the request to cancel (`params.requestId`);
    /// `None` for other methods, or when absent (optional since 2025-11-25) or unusable.
    pub fn cancelled_request_id(&self) -> Option<RequestId> {
        if self.method != CANCELLED_NOTIFICATION {
            return None;
        }
        RequestId::from_value(self.params.as_ref()?.get("requestId")?)
    }
}

/// The `error` member of an error response.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorObject {
    /// The error code; JSON-RPC requires an integer.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// `data`, if the member is present (a present `null` is `Some(Value::Null)`).
    pub data: Option<Value>,
    /// Members of the error object JSON-RPC does not define, kept for forwarding.
    pub extra: Map<String, Value>,
}

impl ErrorObject {
    /// An error object with no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
            extra: Map::new(),
        }
    }

    /// The same error with `data` set.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// [`INVALID_PARAMS`] with `message`.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// [`METHOD_NOT_FOUND`] naming `method`.
    #[must_use]
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("method not found: {method}"))
    }

    /// [`REQUEST_CANCELLED`].
    #[must_use]
    pub fn cancelled() -> Self {
        Self::new(REQUEST_CANCELLED, "request cancelled")
    }
}

/// The `name` and `arguments` of a `tools/call` request's params (absent or null arguments
/// are empty), or the [`INVALID_PARAMS`] error a server answers when they are not there.
// `ErrorObject` is what a handler returns; this is a cold path, and boxing it would only add
// conversions.
#[allow(clippy::result_large_err)]
pub fn tool_call_params(
    params: Option<&Value>,
) -> Result<(&str, &Map<String, Value>), ErrorObject> {
    static NO_ARGUMENTS: std::sync::LazyLock<Map<String, Value>> =
        std::sync::LazyLock::new(Map::new);
    let params = params
        .and_then(Value::as_object)
        .ok_or_else(|| ErrorObject::invalid_params("tools/call needs params with a tool `name`"))?;
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params("tools/call needs a string `name`"))?;
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => &*NO_ARGUMENTS,
        Some(Value::Object(arguments)) => arguments,
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tools/call `arguments` must be an object",
            ));
        }
    };
    Ok((name, arguments))
}

/// The `id` of an error response, which need not name a request.
///
/// JSON-RPC 2.0 answers a request whose id could not be read with `"id": null`; MCP 2025-11-25
/// instead lets the member be omitted. Both arrive in practice, and a gateway forwarding an
/// error should not turn one into the other, so they are kept apart. (An empty-string id, as
/// the C# SDK sends in that case, is an ordinary [`RequestId::String`].)
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorResponseId {
    /// The id of the request this error answers.
    Id(RequestId),
    /// `"id": null`.
    Null,
    /// No `id` member.
    Absent,
}

impl ErrorResponseId {
    /// The request this error answers, if it names one.
    pub fn request_id(&self) -> Option<&RequestId> {
        match self {
            ErrorResponseId::Id(id) => Some(id),
            ErrorResponseId::Null | ErrorResponseId::Absent => None,
        }
    }
}

/// `Some(id)` names the request; `None` is `"id": null`, what JSON-RPC 2.0 and every MCP
/// version accept.
impl From<Option<RequestId>> for ErrorResponseId {
    fn from(value: Option<RequestId>) -> Self {
        value.map_or(ErrorResponseId::Null, ErrorResponseId::Id)
    }
}

/// A successful response: `result` for the request named by `id`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultResponse {
    /// The id of the request this answers; a result always names its request.
    pub id: RequestId,
    /// The result; MCP results are objects, but any value is kept as sent.
    pub result: Value,
    /// Top-level members JSON-RPC does not define, kept for forwarding.
    pub extra: Map<String, Value>,
}

/// An error response.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorResponse {
    /// The id of the request this answers, or why there is none.
    pub id: ErrorResponseId,
    /// The error.
    pub error: ErrorObject,
    /// Top-level members JSON-RPC does not define, kept for forwarding.
    pub extra: Map<String, Value>,
}

/// A response: exactly one of `result` or `error` (T95). The two shapes are separate types, as
/// in the 2025-11-25 schema, because only an error may lack an id.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// `result`.
    Result(ResultResponse),
    /// `error`.
    Error(ErrorResponse),
}

impl Response {
    /// A successful response to request `id`.
    pub fn success(id: RequestId, result: Value) -> Self {
        Response::Result(ResultResponse {
            id,
            result,
            extra: Map::new(),
        })
    }

    /// An error response; `None` for `id` writes `"id": null`, for a request whose id could
    /// not be read.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Response::Error(ErrorResponse {
            id: id.into(),
            error,
            extra: Map::new(),
        })
    }

    /// The id of the request this answers, if it names one.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Response::Result(response) => Some(&response.id),
            Response::Error(response) => response.id.request_id(),
        }
    }

    /// Whether this is an error response.
    pub fn is_error(&self) -> bool {
        matches!(self, Response::Error(_))
    }

    /// Compact single-line JSON; see [`Message::write_to`].
    pub fn to_vec(&self) -> Vec<u8> {
        to_vec(self)
    }
}

/// One JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response, successful or not.
    Response(Response),
}

impl Message {
    /// Classifies a parsed JSON value (docs/PROTOCOL.md#jsonrpc-messages): `method` and `id` make a
    /// request, `method` alone a notification, no `method` and exactly one of `result` or `error` a
    /// response. `"jsonrpc": "2.0"` is required.
    pub fn from_value(value: Value) -> Result<Self, MessageError> {
        classify(value).map_err(|invalid| invalid.error)
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(request) => Some(&request.method),
            Message::Notification(notification) => Some(&notification.method),
            Message::Response(_) => None,
        }
    }

    /// A request's id, or the id of the request a response answers.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request(request) => Some(&request.id),
            Message::Notification(_) => None,
            Message::Response(response) => response.id(),
        }
    }

    /// Whether this is the `initialize` request.
    pub fn is_initialize(&self) -> bool {
        matches!(self, Message::Request(request) if request.is_initialize())
    }

    /// Whether this is a request, which the receiver must answer.
    pub fn is_request(&self) -> bool {
        matches!(self, Message::Request(_))
    }

    /// Compact JSON on a single line; see [`Message::write_to`].
    pub fn to_vec(&self) -> Vec<u8> {
        to_vec(self)
    }

    /// Appends the message as compact JSON to `out`, reusing its allocation.
    ///
    /// serde_json's compact writer escapes control characters inside strings and puts no
    /// whitespace between tokens, so the output never contains a raw CR or LF and can go in a
    /// single SSE `data:` line as is. Members come out as `jsonrpc`, `id`, `method`, `params`
    /// (or `result`/`error`), then unknown members in the order they were read.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        write_to(self, out);
    }
}

impl From<Request> for Message {
    fn from(value: Request) -> Self {
        Message::Request(value)
    }
}

impl From<Notification> for Message {
    fn from(value: Notification) -> Self {
        Message::Notification(value)
    }
}

impl From<Response> for Message {
    fn from(value: Response) -> Self {
        Message::Response(value)
    }
}

/// Compact JSON, as [`Message::write_to`] writes it.
impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // serde_json only ever writes UTF-8.
        f.write_str(&String::from_utf8_lossy(&self.to_vec()))
    }
}

/// Whether a POST body may be a JSON array of messages.
///
/// Only 2025-03-26 allows batches (docs/PROTOCOL.md#batching); the caller derives this from the
/// negotiated version so that this module stays free of version types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Batching {
    /// A JSON array of messages is accepted (2025-03-26).
    Allowed,
    /// Only a single message is accepted (every other version).
    Forbidden,
}

/// A parsed POST body.
#[derive(Clone, Debug, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a Body lives for one POST and is never stored in bulk; boxing the common single \
              message would cost an allocation per request to save a few hundred bytes of stack"
)]
pub enum Body {
    /// A single message.
    Single(Message),
    /// A non-empty batch, in the order sent. Requests and responses may be mixed: the
    /// 2025-03-26 transport text lists them as separate body shapes, but answering a mixed
    /// batch is no harder than a pure one, so it is not rejected.
    Batch(Vec<Message>),
}

impl Body {
    /// The messages, one for a single message.
    pub fn messages(&self) -> &[Message] {
        match self {
            Body::Single(message) => std::slice::from_ref(message),
            Body::Batch(messages) => messages,
        }
    }

    /// The messages, one for a single message.
    pub fn into_messages(self) -> Vec<Message> {
        match self {
            Body::Single(message) => vec![message],
            Body::Batch(messages) => messages,
        }
    }

    /// Whether any message is a request, i.e. whether the POST needs a response body rather
    /// than 202 (T2-T4).
    pub fn has_requests(&self) -> bool {
        self.messages().iter().any(Message::is_request)
    }

    /// Compact single-line JSON: an object, or an array for a batch.
    pub fn to_vec(&self) -> Vec<u8> {
        to_vec(self)
    }
}

/// Why a JSON value is not a JSON-RPC message. All of these are [`INVALID_REQUEST`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The value is not a JSON object.
    #[error("not a json object")]
    NotAnObject,
    /// `jsonrpc` is missing or not `"2.0"`.
    #[error("jsonrpc must be \"2.0\"")]
    InvalidVersion,
    /// `method` is not a string.
    #[error("method must be a string")]
    InvalidMethod,
    /// `id` is not a string or an integer (a fraction, a bool, an object or an array).
    #[error("id must be a string or an integer")]
    InvalidId,
    /// A request's `id` is `null`; MCP forbids null request ids (T93). It is not read as a
    /// notification, which would leave the sender waiting for an answer that never comes.
    #[error("request id must not be null")]
    NullRequestId,
    /// `params` is not an object, an array or `null`.
    #[error("params must be an object or an array")]
    InvalidParams,
    /// A message with a `method` also has `result` or `error`.
    #[error("a message with a method must not have result or error")]
    MethodWithResponse,
    /// A response has both `result` and `error` (T95).
    #[error("a response must not have both result and error")]
    ResultAndError,
    /// No `method`, `result` or `error`: not any kind of message.
    #[error("no method, result or error")]
    Unclassifiable,
    /// A result response without an `id`, or with `"id": null`; only errors may lack one.
    #[error("a result response must have an id")]
    ResultWithoutId,
    /// `error` is not an object with an integer `code` and a string `message` (T95).
    #[error("error must have an integer code and a string message")]
    InvalidErrorObject,
}

/// Why a POST body was rejected. Each variant knows its JSON-RPC error code ([`Self::code`])
/// and the error response to send ([`Self::error_response`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The body is not valid JSON ([`PARSE_ERROR`], T12). This includes nesting deeper than
    /// serde_json's recursion limit of 128.
    #[error("invalid json: {0}")]
    InvalidJson(serde_json::Error),
    /// The body is a single value that is not a JSON-RPC message ([`INVALID_REQUEST`]).
    #[error("invalid message: {error}")]
    InvalidMessage {
        /// What is wrong with it.
        error: MessageError,
        /// The id of the request it appears to be, when one could be read; the error response
        /// echoes it so the sender can fail that request instead of waiting for it.
        id: Option<RequestId>,
    },
    /// A batch member is not a JSON-RPC message ([`INVALID_REQUEST`]). The whole batch is
    /// rejected rather than answered member by member: the transport answers a POST with one
    /// HTTP status.
    #[error("invalid batch member {index}: {error}")]
    InvalidBatchMember {
        /// Position of the member in the batch, from 0.
        index: usize,
        /// What is wrong with it.
        error: MessageError,
    },
    /// `[]` ([`INVALID_REQUEST`]); a batch must hold at least one message.
    #[error("empty batch")]
    EmptyBatch,
    /// A JSON array where the protocol version allows only a single message
    /// ([`INVALID_REQUEST`], T11).
    #[error("batches are not allowed in this protocol version")]
    BatchForbidden,
    /// A batch containing `initialize` ([`INVALID_REQUEST`]); 2025-03-26: "the initialize
    /// request MUST NOT be part of a JSON-RPC batch" (T96).
    #[error("initialize must not be batched")]
    InitializeInBatch {
        /// Position of the `initialize` message in the batch, from 0.
        index: usize,
    },
}

impl ParseError {
    /// The JSON-RPC error code: [`PARSE_ERROR`] for invalid JSON, [`INVALID_REQUEST`] for
    /// everything else.
    pub fn code(&self) -> i64 {
        match self {
            ParseError::InvalidJson(_) => PARSE_ERROR,
            ParseError::InvalidMessage { .. }
            | ParseError::InvalidBatchMember { .. }
            | ParseError::EmptyBatch
            | ParseError::BatchForbidden
            | ParseError::InitializeInBatch { .. } => INVALID_REQUEST,
        }
    }

    /// The id the error response echoes: the id of a single message that has a `method` and a
    /// readable id. Everything else gets `null` ("if there was an error in detecting the id, it
    /// MUST be Null", JSON-RPC 2.0 §5): invalid JSON has no id, a batch gets one answer for all
    /// its members, and the id on a response-shaped message names a request of the *receiver*,
    /// so echoing it would answer the wrong request.
    pub fn request_id(&self) -> Option<&RequestId> {
        match self {
            ParseError::InvalidMessage { id, .. } => id.as_ref(),
            _ => None,
        }
    }

    /// The JSON-RPC error response to send: [`Self::code`], this error's `Display` as the
    /// message, and the id from [`Self::request_id`] or `null`.
    pub fn error_response(&self) -> Response {
        Response::error(
            self.request_id().cloned(),
            ErrorObject::new(self.code(), self.to_string()),
        )
    }
}

/// Parses a POST body into one message or, where `batching` allows it, a batch.
///
/// Invalid JSON is [`ParseError::InvalidJson`] ([`PARSE_ERROR`]); everything else that fails is
/// an [`INVALID_REQUEST`] variant. Hostile nesting needs no limit here: serde_json refuses to
/// nest deeper than 128 levels (its recursion limit), so `[[[[…` is an `InvalidJson` error, not
/// a stack overflow. The body's size is the HTTP layer's limit.
pub fn parse_body(bytes: &[u8], batching: Batching) -> Result<Body, ParseError> {
    let value: Value = serde_json::from_slice(bytes).map_err(ParseError::InvalidJson)?;
    let Value::Array(items) = value else {
        return classify(value)
            .map(Body::Single)
            .map_err(|invalid| ParseError::InvalidMessage {
                error: invalid.error,
                id: invalid.id,
            });
    };
    if batching == Batching::Forbidden {
        return Err(ParseError::BatchForbidden);
    }
    if items.is_empty() {
        return Err(ParseError::EmptyBatch);
    }
    let mut messages = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let message = classify(item).map_err(|invalid| ParseError::InvalidBatchMember {
            index,
            error: invalid.error,
        })?;
        // By method name, so that a stray `initialize` notification is refused too: the rule
        // exists to keep session setup out of batches.
        if message.method() == Some(INITIALIZE) {
            return Err(ParseError::InitializeInBatch { index });
        }
        messages.push(message);
    }
    Ok(Body::Batch(messages))
}

/// A classification failure, with the id to echo if one could be read.
struct Invalid {
    error: MessageError,
    id: Option<RequestId>,
}

impl From<MessageError> for Invalid {
    fn from(error: MessageError) -> Self {
        Invalid { error, id: None }
    }
}

/// What the `id` member held.
enum IdMember {
    Absent,
    Null,
    Id(RequestId),
    Invalid,
}

fn classify(value: Value) -> Result<Message, Invalid> {
    let Value::Object(mut object) = value else {
        return Err(MessageError::NotAnObject.into());
    };
    // shift_remove rather than remove: with preserve_order, remove would swap the last unknown
    // member into the gap and forwarding would reorder them.
    let id = match object.shift_remove("id") {
        None => IdMember::Absent,
        Some(Value::Null) => IdMember::Null,
        Some(value) => RequestId::from_value(&value).map_or(IdMember::Invalid, IdMember::Id),
    };
    let Some(method) = object.shift_remove("method") else {
        return classify_response(object, id).map_err(Invalid::from);
    };
    // From here on the message looks like a request or notification, so a readable id is worth
    // echoing in the error (see ParseError::request_id).
    let echo = match &id {
        IdMember::Id(id) => Some(id.clone()),
        _ => None,
    };
    let invalid = |error| Invalid {
        error,
        id: echo.clone(),
    };
    check_version(&mut object).map_err(invalid)?;
    let Value::String(method) = method else {
        return Err(invalid(MessageError::InvalidMethod));
    };
    if object.contains_key("result") || object.contains_key("error") {
        return Err(invalid(MessageError::MethodWithResponse));
    }
    let params = match object.shift_remove("params") {
        None => None,
        // null is accepted for interop: some clients send `"params": null` for "no params".
        Some(params @ (Value::Object(_) | Value::Array(_) | Value::Null)) => Some(params),
        Some(_) => return Err(invalid(MessageError::InvalidParams)),
    };
    match id {
        IdMember::Absent => Ok(Message::Notification(Notification {
            method,
            params,
            extra: object,
        })),
        IdMember::Id(id) => Ok(Message::Request(Request {
            id,
            method,
            params,
            extra: object,
        })),
        // A null id is what JSON-RPC 2.0 once allowed; python-sdk#2057 shows the harm of
        // reading it as a notification (the sender gets 202 and waits forever).
        IdMember::Null => Err(invalid(MessageError::NullRequestId)),
        IdMember::Invalid => Err(invalid(MessageError::InvalidId)),
    }
}

fn classify_response(
    mut object: Map<String, Value>,
    id: IdMember,
) -> Result<Message, MessageError> {
    check_version(&mut object)?;
    let id = match id {
        IdMember::Absent => ErrorResponseId::Absent,
        IdMember::Null => ErrorResponseId::Null,
        IdMember::Id(id) => ErrorResponseId::Id(id),
        IdMember::Invalid => return Err(MessageError::InvalidId),
    };
    let response = match (object.shift_remove("result"), object.shift_remove("error")) {
        (Some(_), Some(_)) => return Err(MessageError::ResultAndError),
        (None, None) => return Err(MessageError::Unclassifiable),
        (Some(result), None) => Response::Result(ResultResponse {
            id: match id {
                ErrorResponseId::Id(id) => id,
                ErrorResponseId::Null | ErrorResponseId::Absent => {
                    return Err(MessageError::ResultWithoutId);
                }
            },
            result,
            extra: object,
        }),
        (None, Some(error)) => Response::Error(ErrorResponse {
            id,
            error: parse_error_object(error)?,
            extra: object,
        }),
    };
    Ok(Message::Response(response))
}

/// Removes `jsonrpc`, which must be `"2.0"`; serialization writes it back.
fn check_version(object: &mut Map<String, Value>) -> Result<(), MessageError> {
    match object.shift_remove("jsonrpc") {
        Some(Value::String(version)) if version == JSONRPC_VERSION => Ok(()),
        _ => Err(MessageError::InvalidVersion),
    }
}

fn parse_error_object(value: Value) -> Result<ErrorObject, MessageError> {
    let Value::Object(mut object) = value else {
        return Err(MessageError::InvalidErrorObject);
    };
    // `as_i64` is None for floats and for integers beyond i64, both invalid codes.
    let code = object
        .shift_remove("code")
        .as_ref()
        .and_then(Value::as_i64)
        .ok_or(MessageError::InvalidErrorObject)?;
    let Some(Value::String(message)) = object.shift_remove("message") else {
        return Err(MessageError::InvalidErrorObject);
    };
    Ok(ErrorObject {
        code,
        message,
        data: object.shift_remove("data"),
        extra: object,
    })
}

/// Writes the members in `extra` that `owned` does not name. A member of `extra` that the
/// message's own fields also write would appear twice (receivers disagree on which copy wins)
/// or change what the message is, so the typed field wins and the stray member is dropped.
fn serialize_extra<M: SerializeMap>(
    map: &mut M,
    extra: &Map<String, Value>,
    owned: &[&str],
) -> Result<(), M::Error> {
    for (key, value) in extra {
        if !owned.contains(&key.as_str()) {
            map.serialize_entry(key, value)?;
        }
    }
    Ok(())
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("method", &self.method)?;
        if let Some(params) = &self.params {
            map.serialize_entry("params", params)?;
        }
        serialize_extra(&mut map, &self.extra, METHOD_MESSAGE_KEYS)?;
        map.end()
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("method", &self.method)?;
        if let Some(params) = &self.params {
            map.serialize_entry("params", params)?;
        }
        serialize_extra(&mut map, &self.extra, METHOD_MESSAGE_KEYS)?;
        map.end()
    }
}

impl Serialize for ErrorObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("code", &self.code)?;
        map.serialize_entry("message", &self.message)?;
        if let Some(data) = &self.data {
            map.serialize_entry("data", data)?;
        }
        serialize_extra(&mut map, &self.extra, ERROR_OBJECT_KEYS)?;
        map.end()
    }
}

impl Serialize for ResultResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("result", &self.result)?;
        serialize_extra(&mut map, &self.extra, RESPONSE_KEYS)?;
        map.end()
    }
}

impl Serialize for ErrorResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", JSONRPC_VERSION)?;
        match &self.id {
            ErrorResponseId::Id(id) => map.serialize_entry("id", id)?,
            ErrorResponseId::Null => map.serialize_entry("id", &())?,
            ErrorResponseId::Absent => {}
        }
        map.serialize_entry("error", &self.error)?;
        serialize_extra(&mut map, &self.extra, RESPONSE_KEYS)?;
        map.end()
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Response::Result(response) => response.serialize(serializer),
            Response::Error(response) => response.serialize(serializer),
        }
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(request) => request.serialize(serializer),
            Message::Notification(notification) => notification.serialize(serializer),
            Message::Response(response) => response.serialize(serializer),
        }
    }
}

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Body::Single(message) => message.serialize(serializer),
            Body::Batch(messages) => messages.serialize(serializer),
        }
    }
}

fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_to(value, &mut out);
    out
}

fn write_to<T: Serialize>(value: &T, out: &mut Vec<u8>) {
    // Cannot fail: writing to a Vec has no I/O errors, every map key above is a string, and a
    // `Value` cannot hold a non-finite float.
    serde_json::to_writer(out, value).expect("serializing a JSON-RPC message cannot fail");
}
