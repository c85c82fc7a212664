//! Logging and OpenTelemetry export for `tether serve`, `call` and `connect`: the `tracing`
//! subscriber (stderr, `RUST_LOG`) and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, an
//! OpenTelemetry layer with OTLP span and metric exporters configured by the standard
//! `OTEL_*` variables (docs/TELEMETRY.md).
//!
//! Export never slows a request: spans are queued to the SDK's batch processor, whose own
//! thread exports them, and the queue is bounded. What does not fit, or what an export fails
//! to deliver, is counted (`tether::telemetry::count_dropped_spans`, on `/metrics`) and
//! logged at most once in [`DROP_REPORT_EVERY`]. [`Telemetry::shutdown`] flushes within a
//! bound, so a command never hangs on an unreachable collector.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::UsageError;

/// The variable whose presence turns export on (the OTLP exporter's own).
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `grpc`, `http/protobuf` (the default, as the OTLP exporter specification says) or
/// `http/json`.
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// The batch processor's queue (the SDK's variable and default), which the drop counter
/// mirrors.
const MAX_QUEUE: &str = "OTEL_BSP_MAX_QUEUE_SIZE";
const MAX_QUEUE_DEFAULT: usize = 2048;
/// How often a growing drop count is logged.
pub(crate) const DROP_REPORT_EVERY: Duration = Duration::from_secs(30);
/// The longest a command waits for its last spans and metrics to be exported.
pub(crate) const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// What the OpenTelemetry layer sees: the spans `tether::telemetry` makes (a request's, a
/// resume's), not the crate's internal ones, and as their events tether's log lines at
/// `info` and above (a reconnect, a warning).
fn exported() -> tracing_subscriber::filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|metadata| {
        if metadata.is_span() {
            metadata.target() == "tether::telemetry"
        } else {
            metadata.target().starts_with("tether") && *metadata.level() <= tracing::Level::INFO
        }
    })
}

/// The export pipeline while it runs; [`shutdown`](Self::shutdown) flushes it.
pub(crate) struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    /// Drives the gRPC exporter's connections, and reports drops.
    runtime: tokio::runtime::Runtime,
}

/// The OTLP protocol `OTEL_EXPORTER_OTLP_PROTOCOL` names.
fn protocol(value: Option<&str>) -> Result<Protocol, UsageError> {
    match value.map(str::trim) {
        None | Some("" | "http/protobuf") => Ok(Protocol::HttpBinary),
        Some("grpc") => Ok(Protocol::Grpc),
        Some("http/json") => Ok(Protocol::HttpJson),
        Some(other) => Err(UsageError(format!(
            "{PROTOCOL}={other:?} is not one of grpc, http/protobuf, http/json"
        ))),
    }
}

/// Sets up logging to stderr (`RUST_LOG`, else `default`) and, when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OpenTelemetry export.
///
/// # Errors
///
/// A usage error for an unknown `OTEL_EXPORTER_OTLP_PROTOCOL`; what building an exporter
/// failed with.
pub(crate) fn init(default: &str) -> anyhow::Result<Option<Telemetry>> {
    let endpoint = std::env::var(ENDPOINT)
        .ok()
        .filter(|e| !e.trim().is_empty());
    let Some(endpoint) = endpoint else {
        logging(default);
        return Ok(None);
    };
    let telemetry = Telemetry::start(protocol(std::env::var(PROTOCOL).ok().as_deref())?)
        .with_context(|| format!("exporting OpenTelemetry to {ENDPOINT}={endpoint}"))?;
    let tracer = telemetry.tracer.tracer("tether");
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_filter(exported());
    tracing_subscriber::registry()
        .with(log_layer(default))
        .with(otel)
        .init();
    Ok(Some(telemetry))
}

/// Sets up logging to stderr alone (`RUST_LOG`, else `default`), for the subcommands that
/// export nothing.
pub(crate) fn logging(default: &str) {
    tracing_subscriber::registry()
        .with(log_layer(default))
        .init();
}

/// Log lines on stderr, filtered by `RUST_LOG` (else `default`).
fn log_layer<S>(default: &str) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .unwrap_or_else(|error| {
                eprintln!("tether: ignoring RUST_LOG={directives:?}: {error}");
                EnvFilter::new(default)
            }),
        _ => EnvFilter::new(default),
    };
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colour codes only for a person watching; log files and test rings get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter)
}

impl Telemetry {
    fn start(protocol: Protocol) -> anyhow::Result<Self> {
        // The HTTP exporters' client is built on rustls with no provider of its own; tether
        // uses ring's throughout.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tether-otel")
            .enable_all()
            .build()
            .context("starting the exporter's runtime")?;
        // The gRPC channel spawns its connection on the runtime current when it is built.
        let _entered = runtime.enter();
        let spans = match protocol {
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build(),
            http => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(http)
                .build(),
        }
        .context("building the span exporter")?;
        let metrics = match protocol {
            Protocol::Grpc => opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .build(),
            http => opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(http)
                .build(),
        }
        .context("building the metric exporter")?;
        let capacity = std::env::var(MAX_QUEUE)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or(MAX_QUEUE_DEFAULT);
        let pending = Arc::new(AtomicUsize::new(0));
        let batches = BatchSpanProcessor::builder(Counted {
            inner: spans,
            pending: Arc::clone(&pending),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(capacity)
                .build(),
        )
        .build();
        let resource = resource();
        let tracer = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                inner: batches,
                pending,
                capacity,
            })
            .with_resource(resource.clone())
            .build();
        let meter = SdkMeterProvider::builder()
            .with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(metrics).build())
            .with_resource(resource)
            .build();
        opentelemetry::global::set_text_map_propagator(
            opentelemetry::propagation::TextMapCompositePropagator::new(vec![
                Box::new(TraceContextPropagator::new()),
                Box::new(BaggagePropagator::new()),
            ]),
        );
        opentelemetry::global::set_tracer_provider(tracer.clone());
        opentelemetry::global::set_meter_provider(meter.clone());
        runtime.spawn(report_drops());
        Ok(Self {
            tracer,
            meter,
            runtime,
        })
    }

    /// Exports what is still queued and stops, waiting at most [`FLUSH_WITHIN`]: an
    /// unreachable or silent collector costs that much at exit, never a hang.
    pub(crate) fn shutdown(self) {
        let Self {
            tracer,
            meter,
            runtime,
        } = self;
        let (done, finished) = std::sync::mpsc::channel();
        // A thread of its own: the SDK's shutdown blocks on its exporter threads.
        let flushing = std::thread::Builder::new()
            .name("tether-otel-flush".to_owned())
            .spawn(move || {
                let _ = tracer.shutdown_with_timeout(FLUSH_WITHIN);
                let _ = meter.shutdown_with_timeout(FLUSH_WITHIN);
                let _ = done.send(());
            });
        if flushing.is_ok() && finished.recv_timeout(FLUSH_WITHIN).is_err() {
            eprintln!(
                "tether: OpenTelemetry export did not finish within {}s; \
                 the rest is dropped",
                FLUSH_WITHIN.as_secs()
            );
        }
        runtime.shutdown_background();
    }
}

/// The resource every span and metric is reported under: the SDK's (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), named `tether` when neither names the service.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = opentelemetry_sdk::Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("tether").build()
    }
}

/// Logs the drop count when it grew, at most once per [`DROP_REPORT_EVERY`].
async fn report_drops() {
    let mut reported = 0;
    loop {
        tokio::time::sleep(DROP_REPORT_EVERY).await;
        let dropped = tether::telemetry::dropped_spans();
        if dropped > reported {
            tracing::warn!(
                dropped_spans = dropped,
                "OpenTelemetry export is behind or failing: spans were dropped"
            );
            reported = dropped;
        }
    }
}

/// The batch processor behind a bound it can see: a span that would overflow its queue is
/// dropped here and counted, which the SDK's processor would do without telling anyone.
/// `pending` counts the spans handed on and not yet through an export.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    pending: Arc<AtomicUsize>,
    capacity: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            tether::telemetry::count_dropped_spans(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what each export took off the queue, and what it failed to
/// deliver as dropped.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.pending.fetch_sub(spans, Ordering::AcqRel);
        if result.is_err() {
            tether::telemetry::count_dropped_spans(spans as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_is_one_of_three_and_defaults_to_http_protobuf() {
        assert!(matches!(protocol(None), Ok(Protocol::HttpBinary)));
        assert!(matches!(protocol(Some("")), Ok(Protocol::HttpBinary)));
        assert!(matches!(
            protocol(Some("http/protobuf")),
            Ok(Protocol::HttpBinary)
        ));
        assert!(matches!(protocol(Some("grpc")), Ok(Protocol::Grpc)));
        assert!(matches!(
            protocol(Some("http/json")),
            Ok(Protocol::HttpJson)
        ));
        let refused = protocol(Some("thrift")).expect_err("refused");
        assert!(refused.0.contains("\"thrift\""), "{}", refused.0);
    }
}
