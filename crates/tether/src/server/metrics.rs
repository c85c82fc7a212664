//! What operators see of a server: its counters and gauges, and `GET /metrics`, which serves
//! them in the Prometheus / OpenMetrics text format.
//!
//! Each server has a registry of its own (no process-wide recorder), so several servers in one
//! process, as in tests, do not mix their numbers. Counters are bumped where the thing happens:
//! appends in [`MeteredEvents`] (every path that stores an event goes through it), sends and
//! open streams in the writer loop, resume outcomes in the GET handler, answers by method and
//! status in a router layer. Gauges that are cheaper to compute than to maintain (sessions,
//! retained events and bytes of the sessions this node serves) are computed when scraped.
//! The `/metrics` handler itself is the endpoint's.
//!
//! Names (all prefixed `tether_`): `events_appended_total`, `event_bytes_appended_total`,
//! `events_sent_total{connection="fresh"|"resume"}`, `resumes_total{outcome="ok"|"malformed"|
//! "unknown"|"expired"}`, `responses_total{method,status}`, `modern_requests_total{method,
//! outcome="result"|"input_required"|"error"|"refused"|"disconnected"}` (2026-07-28 requests by
//! JSON-RPC method; methods outside the protocol count as `other`), `orphaned_requests_answered_total`,
//! `telemetry_spans_dropped_total` (spans the process's OpenTelemetry exporter dropped),
//! `auth_failures_total{reason}` (credentials refused, by the authenticator's reason:
//! `missing`, `insufficient_scope`, `unavailable` or why a token was invalid, such as
//! `expired` or `bad_signature`), `open_streams`, `sessions` (this node's), `sessions_stored` (the store's, all nodes),
//! `retained_events` and `retained_bytes` (of this node's sessions).

use std::sync::Arc;

use async_trait::async_trait;
use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tether_proto::ids::{EventId, SessionId, StreamId};
use tether_proto::jsonrpc::RequestId;

use super::error::ResumeRefusal;
use super::handler::PartStatus;
use crate::store::{
    EventStore, OrphanedStream, ReadBatch, SessionUsage, StoreError, StreamKind, StreamOwner,
};

/// The content type of the OpenMetrics text format.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What kind of connection an event went out on.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(crate) enum ConnectionKind {
    /// A POST's stream or a fresh GET.
    Fresh,
    /// A GET with `Last-Event-ID`.
    Resume,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    connection: ConnectionKind,
}

/// How a resume request ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(crate) enum ResumeOutcome {
    /// Served.
    Ok,
    /// Refused: not an event id.
    Malformed,
    /// Refused: no such stream for this session.
    Unknown,
    /// Refused: the events after it are gone.
    Expired,
}

/// Label values in Prometheus's lower-case style.
impl EncodeLabelValue for ConnectionKind {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Fresh => "fresh",
            Self::Resume => "resume",
        })
    }
}

impl EncodeLabelValue for ResumeOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(match self {
            Self::Ok => "ok",
            Self::Malformed => ResumeRefusal::Malformed.as_str(),
            Self::Unknown => ResumeRefusal::Unknown.as_str(),
            Self::Expired => ResumeRefusal::Expired.as_str(),
        })
    }
}

impl From<ResumeRefusal> for ResumeOutcome {
    fn from(refusal: ResumeRefusal) -> Self {
        match refusal {
            ResumeRefusal::Malformed => Self::Malformed,
            ResumeRefusal::Unknown => Self::Unknown,
            ResumeRefusal::Expired => Self::Expired,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: ResumeOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamOutcomeLabels {
    upstream: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModernLabels {
    method: &'static str,
    outcome: &'static str,
}

/// The methods `modern_requests_total` names; anything else is `other`, so that a client
/// cannot grow the label set.
const MODERN_METHODS: [&str; 11] = [
    "server/discover",
    "subscriptions/listen",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "notifications/cancelled",
];

/// How a 2026-07-28 request ended, for `modern_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModernOutcome {
    /// A complete result.
    Result,
    /// An `input_required` result.
    InputRequired,
    /// A JSON-RPC error from the handler or the transport.
    Error,
    /// Refused before it ran (envelope, headers, version, method).
    Refused,
    /// The client went away before the answer: cancelled.
    Disconnected,
}

impl ModernOutcome {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Result => "result",
            Self::InputRequired => "input_required",
            Self::Error => "error",
            Self::Refused => "refused",
            Self::Disconnected => "disconnected",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResponseLabels {
    pub(crate) method: String,
    pub(crate) status: u16,
}

/// A server's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    events_appended: Counter,
    bytes_appended: Counter,
    events_sent: Family<ConnectionLabels, Counter>,
    resumes: Family<OutcomeLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    modern_requests: Family<ModernLabels, Counter>,
    auth_failures: Family<ReasonLabels, Counter>,
    orphans_answered: Counter,
    rate_limited: Counter,
    upstream_up: Family<UpstreamLabels, Gauge>,
    upstream_children: Family<UpstreamLabels, Gauge>,
    upstream_requests: Family<UpstreamOutcomeLabels, Counter>,
    /// Follows [`crate::telemetry::dropped_spans`], process-wide, under a lock so that two
    /// scrapes at once cannot both add the same drops.
    spans_dropped: std::sync::Mutex<Counter>,
    open_streams: Gauge,
    sessions: Gauge,
    sessions_stored: Gauge,
    retained_events: Gauge,
    retained_bytes: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        /// Registers `metric` under `name` and hands it back.
        fn add<M: Clone + prometheus_client::registry::Metric>(
            registry: &mut Registry,
            name: &str,
            help: &str,
            metric: M,
        ) -> M {
            registry.register(name, help, metric.clone());
            metric
        }
        let mut registry = Registry::with_prefix("tether");
        let r = &mut registry;
        Self {
            events_appended: add(
                r,
                "events_appended",
                "Events stored (each is stored before it is sent)",
                Counter::default(),
            ),
            bytes_appended: add(
                r,
                "event_bytes_appended",
                "Bytes of JSON-RPC messages stored",
                Counter::default(),
            ),
            events_sent: add(
                r,
                "events_sent",
                "Events written to connections, by the kind of connection",
                Family::default(),
            ),
            resumes: add(
                r,
                "resumes",
                "GET requests with Last-Event-ID, by outcome",
                Family::default(),
            ),
            responses: add(
                r,
                "responses",
                "Answers on the MCP path, by method and status",
                Family::default(),
            ),
            modern_requests: add(
                r,
                "modern_requests",
                "2026-07-28 requests, by JSON-RPC method and how they ended",
                Family::default(),
            ),
            auth_failures: add(
                r,
                "auth_failures",
                "Requests whose credentials were refused, by reason",
                Family::default(),
            ),
            orphans_answered: add(
                r,
                "orphaned_requests_answered",
                "Requests a dead process left unanswered, answered with an error",
                Counter::default(),
            ),
            rate_limited: add(
                r,
                "rate_limited",
                "POSTs refused with 429 because their principal was past its rate limit",
                Counter::default(),
            ),
            upstream_up: add(
                r,
                "upstream_up",
                "Whether each upstream of the handler (a gateway's) can serve now: 1 or 0",
                Family::default(),
            ),
            upstream_children: add(
                r,
                "upstream_children",
                "Children or connections each upstream holds open",
                Family::default(),
            ),
            upstream_requests: add(
                r,
                "upstream_requests",
                "Requests each upstream answered, by outcome (ok, error)",
                Family::default(),
            ),
            spans_dropped: std::sync::Mutex::new(add(
                r,
                "telemetry_spans_dropped",
                "Spans the OpenTelemetry exporter dropped (queue full or export failed), process-wide",
                Counter::default(),
            )),
            open_streams: add(r, "open_streams", "SSE connections open", Gauge::default()),
            sessions: add(
                r,
                "sessions",
                "Sessions this node holds state for",
                Gauge::default(),
            ),
            sessions_stored: add(
                r,
                "sessions_stored",
                "Sessions in the session store (all nodes sharing it)",
                Gauge::default(),
            ),
            retained_events: add(
                r,
                "retained_events",
                "Events retained for the sessions this node holds",
                Gauge::default(),
            ),
            retained_bytes: add(
                r,
                "retained_bytes",
                "Bytes retained for the sessions this node holds",
                Gauge::default(),
            ),
            registry,
        }
    }
}

impl Metrics {
    pub(crate) fn event_sent(&self, connection: ConnectionKind, events: u64) {
        self.events_sent
            .get_or_create(&ConnectionLabels { connection })
            .inc_by(events);
    }

    pub(crate) fn resume(&self, outcome: ResumeOutcome) {
        self.resumes.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Credentials refused; `reason` is one of a fixed set of the authenticator's labels.
    pub(crate) fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    pub(crate) fn rate_limited(&self) {
        self.rate_limited.inc();
    }

    pub(crate) fn orphans_answered(&self, requests: u64) {
        self.orphans_answered.inc_by(requests);
    }

    /// Counts an open SSE connection until the guard is dropped.
    pub(crate) fn open_stream(self: &Arc<Self>) -> OpenStream {
        self.open_streams.inc();
        OpenStream(Arc::clone(self))
    }
}

/// An SSE connection counted in `open_streams`.
pub(crate) struct OpenStream(Arc<Metrics>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.dec();
    }
}

impl Metrics {
    /// Counts one answer on the MCP path.
    pub(crate) fn count_response(&self, labels: ResponseLabels) {
        self.responses.get_or_create(&labels).inc();
    }

    pub(crate) fn modern_request(&self, method: &str, outcome: ModernOutcome) {
        let method = MODERN_METHODS
            .into_iter()
            .find(|known| *known == method)
            .unwrap_or("other");
        self.modern_requests
            .get_or_create(&ModernLabels {
                method,
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// The registry in the OpenMetrics text format, with the gauges computed at scrape time:
    /// this node's sessions, the store's (`None` when the store could not say) and what this
    /// node's sessions retain.
    pub(crate) fn render(
        &self,
        sessions: usize,
        stored: Option<usize>,
        retained: SessionUsage,
        parts: &[PartStatus],
    ) -> String {
        // Set whole at each scrape: an upstream a reload removed disappears with it.
        self.upstream_up.clear();
        self.upstream_children.clear();
        self.upstream_requests.clear();
        for part in parts {
            let upstream = || UpstreamLabels {
                upstream: part.name.clone(),
            };
            self.upstream_up
                .get_or_create(&upstream())
                .set(i64::from(part.up));
            self.upstream_children
                .get_or_create(&upstream())
                .set(gauge_value(part.children as u64));
            for (outcome, count) in [("ok", part.answered), ("error", part.failed)] {
                self.upstream_requests
                    .get_or_create(&UpstreamOutcomeLabels {
                        upstream: part.name.clone(),
                        outcome,
                    })
                    .inc_by(count);
            }
        }
        self.sessions.set(gauge_value(sessions as u64));
        if let Some(stored) = stored {
            self.sessions_stored.set(gauge_value(stored as u64));
        }
        self.retained_events
            .set(gauge_value(retained.events as u64));
        self.retained_bytes.set(gauge_value(retained.bytes as u64));
        {
            let counter = crate::lock(&self.spans_dropped);
            let dropped = crate::telemetry::dropped_spans();
            counter.inc_by(dropped.saturating_sub(counter.get()));
        }
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &self.registry)
            .expect("writing to a String cannot fail");
        body
    }
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The event store as the server uses it: every append counted.
pub(crate) struct MeteredEvents {
    pub(crate) inner: Arc<dyn EventStore>,
    pub(crate) metrics: Arc<Metrics>,
}

#[async_trait]
impl EventStore for MeteredEvents {
    async fn create_stream(
        &self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: std::time::Duration,
        requests: &[RequestId],
    ) -> Result<StreamId, StoreError> {
        let stream = self
            .inner
            .create_stream(owner, kind, retry, requests)
            .await?;
        // The priming event.
        self.metrics.events_appended.inc();
        Ok(stream)
    }

    async fn append(&self, stream: StreamId, message: &[u8]) -> Result<EventId, StoreError> {
        let id = self.inner.append(stream, message).await?;
        self.metrics.events_appended.inc();
        self.metrics.bytes_appended.inc_by(message.len() as u64);
        Ok(id)
    }

    async fn flush(&self, stream: StreamId) -> Result<(), StoreError> {
        self.inner.flush(stream).await
    }

    async fn complete(&self, stream: StreamId) -> Result<(), StoreError> {
        self.inner.complete(stream).await
    }

    async fn read_after(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        after: u64,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.inner.read_after(owner, stream, after, limit).await
    }

    async fn read_from_start(
        &self,
        owner: &StreamOwner,
        stream: StreamId,
        limit: usize,
    ) -> Result<ReadBatch, StoreError> {
        self.inner.read_from_start(owner, stream, limit).await
    }

    async fn wait_for_more(&self, stream: StreamId, after: u64) -> Result<(), StoreError> {
        self.inner.wait_for_more(stream, after).await
    }

    async fn remove_session(&self, session: &SessionId) -> Result<(), StoreError> {
        self.inner.remove_session(session).await
    }

    async fn usage(&self, session: &SessionId) -> Result<SessionUsage, StoreError> {
        self.inner.usage(session).await
    }

    async fn orphaned_streams(&self) -> Result<Vec<OrphanedStream>, StoreError> {
        self.inner.orphaned_streams().await
    }
}
