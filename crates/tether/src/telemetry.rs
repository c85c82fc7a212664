//! Telemetry in the OpenTelemetry semantic conventions for MCP: the span one request makes on
//! the server and on the client (its name and attributes), the span of a resumed stream, the
//! trace context carried in `params._meta` (and in a resume's `traceparent` header), and the
//! operation and session duration histograms.
//!
//! Spans go through `tracing`, so an application keeps its own subscriber and exporter. With
//! the `otel` feature they are linked to OpenTelemetry contexts (`tracing-opentelemetry`):
//! the trace context is injected and continued through the application's global propagator,
//! and the histograms are recorded on its global meter. Without it they are plain `tracing`
//! spans and nothing crosses a process. This module owns no exporter: `tether serve`, `call`
//! and `connect` set one up from the `OTEL_*` variables. The names are listed in
//! docs/TELEMETRY.md.

// The server uses one half of this module and the client the other (some of both, such as
// the request span); a build with only one of them leaves the other half unused.
#![cfg_attr(not(all(feature = "server", feature = "client")), allow(dead_code))]

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tether_proto::jsonrpc::{Request, RequestId, Response as RpcResponse};
use tracing::Span;
use tracing::field::Empty;

/// Spans the exporter dropped: its queue was full (the collector is slow or down) or an
/// export failed. Process-wide, like the exporter; `/metrics` serves it as
/// `tether_telemetry_spans_dropped_total`.
static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Counts `spans` that an exporter dropped; returns the total so far.
pub fn count_dropped_spans(spans: u64) -> u64 {
    SPANS_DROPPED.fetch_add(spans, Ordering::Relaxed) + spans
}

/// Spans dropped by the exporter so far (see [`count_dropped_spans`]).
#[must_use]
pub fn dropped_spans() -> u64 {
    SPANS_DROPPED.load(Ordering::Relaxed)
}

/// Which end of a request a span or a measurement belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// What a request's span is named after: the tool of `tools/call`, the prompt of
/// `prompts/get`, the resource of `resources/read`.
fn target_of<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        _ => return None,
    };
    params?.get(key)?.as_str()
}

/// `{mcp.method.name} {target}`, or the method alone; formatted only if a subscriber records
/// the span, so an unrecorded request allocates nothing for its name.
struct SpanName<'a>(&'a str, Option<&'a str>);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(target) => write!(f, "{} {target}", self.0),
            None => f.write_str(self.0),
        }
    }
}

/// The span of a request at `side`: named `{method} {target}`, with the MCP attributes that
/// are known when it starts; [`Operation::answered`] and [`Operation::failed`] add the error
/// ones.
fn request_span(
    side: Side,
    method: &str,
    params: Option<&Value>,
    id: &dyn std::fmt::Display,
    session: Option<&str>,
    version: Option<&str>,
) -> Span {
    let target = target_of(method, params);
    let (tool, prompt) = match method {
        "tools/call" => (target, None),
        "prompts/get" => (None, target),
        _ => (None, None),
    };
    let operation = (method == "tools/call").then_some("execute_tool");
    let kind = match side {
        Side::Client => "client",
        Side::Server => "server",
    };
    tracing::info_span!(
        "request",
        otel.name = %SpanName(method, target),
        otel.kind = kind,
        otel.status_code = Empty,
        mcp.method.name = method,
        mcp.session.id = session,
        mcp.protocol.version = version,
        jsonrpc.request.id = %id,
        gen_ai.tool.name = tool,
        gen_ai.prompt.name = prompt,
        gen_ai.operation.name = operation,
        network.transport = "tcp",
        network.protocol.name = "http",
        error.type = Empty,
        rpc.response.status_code = Empty,
    )
}

/// What went wrong with a request answered with `response`, in the conventions' terms: the
/// JSON-RPC error code, `tool_error` for a tool result with `isError: true`, `cancelled` for
/// no answer. `None` for success.
fn error_type(response: Option<&RpcResponse>) -> Option<String> {
    match response {
        None => Some("cancelled".to_owned()),
        Some(RpcResponse::Error(error)) => Some(error.error.code.to_string()),
        Some(RpcResponse::Result(result)) => (result.result.get("isError")
            == Some(&Value::Bool(true)))
        .then(|| "tool_error".to_owned()),
    }
}

/// One request as telemetry sees it, from either side: its span and, with `otel`, its
/// duration, recorded on `mcp.client.operation.duration` or `mcp.server.operation.duration`
/// once it is answered or fails, or as `cancelled` when it is dropped first.
pub(crate) struct Operation {
    span: Span,
    #[cfg(feature = "otel")]
    timing: otel::Timing,
}

impl Operation {
    fn start(
        side: Side,
        method: &str,
        params: Option<&Value>,
        id: &dyn std::fmt::Display,
        session: Option<&str>,
        version: Option<&'static str>,
    ) -> Self {
        Self {
            span: request_span(side, method, params, id, session, version),
            #[cfg(feature = "otel")]
            timing: otel::Timing::start(side, method, version),
        }
    }

    /// The client's side of a request about to be sent: its context is written into
    /// `params._meta`, so the server continues this trace.
    pub(crate) fn client(
        method: &str,
        params: &mut Option<Value>,
        id: &RequestId,
        session: Option<&str>,
        version: Option<&'static str>,
    ) -> Self {
        let operation = Self::start(Side::Client, method, params.as_ref(), id, session, version);
        inject_meta(&operation.span, params);
        operation
    }

    /// The server's side of `request`, continuing the caller's trace from its `_meta`.
    pub(crate) fn server(request: &Request, session: Option<&str>, version: &'static str) -> Self {
        let params = request.params.as_ref();
        let operation = Self::start(
            Side::Server,
            &request.method,
            params,
            &request.id,
            session,
            Some(version),
        );
        continue_from_meta(&operation.span, params);
        operation
    }

    /// The request's span.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The request ended with `response`, or (`None`) was cancelled before it: `error.type`
    /// is the JSON-RPC code, `tool_error` for a result with `isError: true`, or `cancelled`,
    /// and an error answer's code is also `rpc.response.status_code`.
    pub(crate) fn answered(self, response: Option<&RpcResponse>) {
        if let Some(RpcResponse::Error(answer)) = response {
            self.span
                .record("rpc.response.status_code", answer.error.code.to_string());
        }
        self.end(error_type(response));
    }

    /// The request failed without an answer, for the reason `error_type` names (a client
    /// error's [`kind_name`](crate::client::Error::kind_name)).
    pub(crate) fn failed(self, error_type: &str) {
        self.end(Some(error_type.to_owned()));
    }

    fn end(self, error: Option<String>) {
        if let Some(error) = &error {
            self.span.record("error.type", error.as_str());
            self.span.record("otel.status_code", "ERROR");
        }
        #[cfg(feature = "otel")]
        {
            let mut timing = self.timing;
            timing.error = error;
        }
    }
}

/// The span of a GET that resumes a stream after `last_event_id` (or a task's stream after
/// its cursor): `tether.resume`, with the node that serves it. The events it replays are
/// added by [`record_replayed`].
pub(crate) fn resume_span(last_event_id: &str, session: Option<&str>, node: &str) -> Span {
    tracing::info_span!(
        "resume",
        otel.name = "tether.resume",
        otel.kind = "server",
        mcp.session.id = session,
        tether.resume.last_event_id = last_event_id,
        tether.resume.events_replayed = Empty,
        tether.resume.events_sent = Empty,
        tether.node.id = (!node.is_empty()).then_some(node),
    )
}

/// Records on a [`resume_span`] how many stored events its connection replayed before it
/// caught up with the stream, and how many it sent in all (live ones included).
pub(crate) fn record_replayed(span: &Span, replayed: u64, sent: u64) {
    // As i64s: OpenTelemetry has no unsigned integers, and an exporter may write a u64 as
    // a string.
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.record("tether.resume.events_replayed", count(replayed));
    span.record("tether.resume.events_sent", count(sent));
}

/// Records a session's whole life on `mcp.client.session.duration` or
/// `mcp.server.session.duration`.
pub(crate) fn record_session(side: Side, version: Option<&str>, lived: std::time::Duration) {
    #[cfg(feature = "otel")]
    otel::record_session(side, version, lived.as_secs_f64());
    #[cfg(not(feature = "otel"))]
    let _ = (side, version, lived);
}

/// The fields that carry a trace context, in `_meta` and in headers alike (W3C Trace
/// Context and Baggage).
const CONTEXT_FIELDS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// Parents `span` on the trace context in `params._meta` (`traceparent`, `tracestate`,
/// `baggage`), if it carries a valid one; the span then continues the caller's trace.
fn continue_from_meta(span: &Span, params: Option<&Value>) {
    let Some(Value::Object(meta)) = params.and_then(|params| params.get("_meta")) else {
        return;
    };
    continue_from(span, |key| meta.get(key).and_then(Value::as_str));
}

/// Parents `span` on the trace context that `get` reads by field name (a request's
/// headers, say), if it carries a valid one.
pub(crate) fn continue_from<'a>(span: &Span, get: impl Fn(&str) -> Option<&'a str>) {
    let fields: Vec<(&str, &str)> = CONTEXT_FIELDS
        .iter()
        .filter_map(|key| get(key).map(|value| (*key, value)))
        .collect();
    if fields.is_empty() {
        return;
    }
    #[cfg(feature = "otel")]
    otel::continue_from(span, &fields);
    #[cfg(not(feature = "otel"))]
    let _ = (span, fields);
}

/// Writes `span`'s trace context into `params._meta` (replacing one already there), so the
/// receiver continues this trace. Nothing is written when the span is not being exported.
pub(crate) fn inject_meta(span: &Span, params: &mut Option<Value>) {
    #[cfg(feature = "otel")]
    {
        let fields = otel::context_fields(span);
        if fields.is_empty() {
            return;
        }
        let params = params.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
        let Value::Object(params) = params else {
            return;
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(meta) = meta {
            for (key, value) in fields {
                meta.insert(key, Value::String(value));
            }
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, params);
}

/// `span`'s trace context as header name and value pairs, for a GET that resumes a stream
/// on the span's behalf. Empty when the span is not being exported.
pub(crate) fn context_headers(span: &Span) -> Vec<(String, String)> {
    #[cfg(feature = "otel")]
    return otel::context_fields(span);
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        Vec::new()
    }
}

#[cfg(feature = "otel")]
mod otel {
    //! The OpenTelemetry side of the module: contexts through the global propagator, and
    //! the histograms on the global meter, made once.

    use std::sync::OnceLock;
    use std::time::Instant;

    use opentelemetry::KeyValue;
    use opentelemetry::metrics::Histogram;
    use opentelemetry::propagation::{Extractor, Injector};
    use opentelemetry::trace::TraceContextExt as _;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    use super::Side;

    /// The conventions' advised bucket boundaries for MCP durations, in seconds.
    const BOUNDARIES: [f64; 14] = [
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ];

    struct Instruments {
        client_operation: Histogram<f64>,
        server_operation: Histogram<f64>,
        client_session: Histogram<f64>,
        server_session: Histogram<f64>,
    }

    fn instruments() -> &'static Instruments {
        static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
        INSTRUMENTS.get_or_init(|| {
            let meter = opentelemetry::global::meter("tether");
            let histogram = |name: &'static str, description: &'static str| {
                meter
                    .f64_histogram(name)
                    .with_unit("s")
                    .with_description(description)
                    .with_boundaries(BOUNDARIES.to_vec())
                    .build()
            };
            Instruments {
                client_operation: histogram(
                    "mcp.client.operation.duration",
                    "How long a request took, from the client's side",
                ),
                server_operation: histogram(
                    "mcp.server.operation.duration",
                    "How long a request took, from the server's side",
                ),
                client_session: histogram(
                    "mcp.client.session.duration",
                    "How long a client's session lasted",
                ),
                server_session: histogram(
                    "mcp.server.session.duration",
                    "How long a session lasted on the server",
                ),
            }
        })
    }

    /// A request's duration, recorded when dropped: with `error` as `error.type`, which
    /// stays `cancelled` unless the request ended otherwise.
    pub(super) struct Timing {
        side: Side,
        method: String,
        version: Option<&'static str>,
        started: Instant,
        pub(super) error: Option<String>,
    }

    impl Timing {
        pub(super) fn start(side: Side, method: &str, version: Option<&'static str>) -> Self {
            Self {
                side,
                method: method.to_owned(),
                version,
                started: Instant::now(),
                error: Some("cancelled".to_owned()),
            }
        }
    }

    impl Drop for Timing {
        fn drop(&mut self) {
            let mut attributes = vec![KeyValue::new(
                "mcp.method.name",
                std::mem::take(&mut self.method),
            )];
            if let Some(version) = self.version {
                attributes.push(KeyValue::new("mcp.protocol.version", version));
            }
            if let Some(error) = self.error.take() {
                attributes.push(KeyValue::new("error.type", error));
            }
            let histogram = match self.side {
                Side::Client => &instruments().client_operation,
                Side::Server => &instruments().server_operation,
            };
            histogram.record(self.started.elapsed().as_secs_f64(), &attributes);
        }
    }

    pub(super) fn record_session(side: Side, version: Option<&str>, seconds: f64) {
        let attributes: Vec<KeyValue> = version
            .map(|version| KeyValue::new("mcp.protocol.version", version.to_owned()))
            .into_iter()
            .collect();
        let histogram = match side {
            Side::Client => &instruments().client_session,
            Side::Server => &instruments().server_session,
        };
        histogram.record(seconds, &attributes);
    }

    struct Reader<'a>(&'a [(&'a str, &'a str)]);

    impl Extractor for Reader<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(key))
                .map(|(_, value)| *value)
        }
        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(name, _)| *name).collect()
        }
    }

    pub(super) fn continue_from(span: &Span, fields: &[(&str, &str)]) {
        let context = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Reader(fields))
        });
        if context.span().span_context().is_valid() {
            // Fails only for a span no OpenTelemetry layer sees: nothing to parent then.
            let _ = span.set_parent(context);
        }
    }

    struct Fields(Vec<(String, String)>);

    impl Injector for Fields {
        fn set(&mut self, key: &str, value: String) {
            self.0.push((key.to_owned(), value));
        }
    }

    pub(super) fn context_fields(span: &Span) -> Vec<(String, String)> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return Vec::new();
        }
        let mut fields = Fields(Vec::new());
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut fields);
        });
        fields.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn name(method: &str, params: Option<&Value>) -> String {
        SpanName(method, target_of(method, params)).to_string()
    }

    #[test]
    fn a_span_is_named_after_the_method_and_its_target() {
        let params = json!({"name": "count", "arguments": {}});
        assert_eq!(name("tools/call", Some(&params)), "tools/call count");
        let read = json!({"uri": "file:///a"});
        assert_eq!(
            name("resources/read", Some(&read)),
            "resources/read file:///a"
        );
        assert_eq!(name("tools/list", None), "tools/list");
        // A name that is not a string names nothing.
        let odd = json!({"name": 7});
        assert_eq!(name("tools/call", Some(&odd)), "tools/call");
    }

    #[test]
    fn the_error_type_is_the_code_a_tool_error_or_cancelled() {
        use tether_proto::jsonrpc::ErrorObject;
        let id = RequestId::from(1_i64);
        let failed = RpcResponse::error(Some(id.clone()), ErrorObject::new(-32602, "bad"));
        assert_eq!(error_type(Some(&failed)).as_deref(), Some("-32602"));
        let tool = RpcResponse::success(id.clone(), json!({"isError": true, "content": []}));
        assert_eq!(error_type(Some(&tool)).as_deref(), Some("tool_error"));
        let fine = RpcResponse::success(id, json!({"content": []}));
        assert_eq!(error_type(Some(&fine)), None);
        assert_eq!(error_type(None).as_deref(), Some("cancelled"));
    }

    #[test]
    fn dropped_spans_add_up() {
        let before = dropped_spans();
        let total = count_dropped_spans(3);
        assert!(total >= before + 3);
        assert!(dropped_spans() >= before + 3);
    }
}
