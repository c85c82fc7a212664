//! The SSE writer loop: the only code that puts JSON-RPC messages on a connection.
//!
//! Every SSE response — a POST's stream on first delivery, the standalone GET stream, a resume
//! after `Last-Event-ID` — is one [`Writer`] reading its stream from the event store after a
//! cursor:
//!
//! ```text
//! loop { read_after(owner, stream, cursor, READ_BATCH) → write the frames, advance the cursor;
//!        if the batch completes the stream → end the response (T9);
//!        else wait for an append, or write a keep-alive comment every `keepalive` }
//! ```
//!
//! Live delivery is replay that has caught up, so first delivery and resume cannot disagree
//! and there is no hand-off between them (docs/DESIGN.md#data-flow). The loop is driven by the
//! connection: hyper asks for the next chunk only when it can write, so a slow reader makes the
//! loop wait instead of buffering, and what piles up meanwhile is the store's to bound
//! (docs/DESIGN.md#property-4). A client that goes away drops the body and with it the loop; in
//! a legacy session the handler that produces the events is unaffected (a disconnect is not
//! cancellation, T15), while a 2026-07-28 request's guard, held by the loop, cancels it.
//!
//! Every protocol decision — priming, completion, the `retry` before a close, never closing
//! before an id went out, polling, keep-alives — is made by the pure
//! [`tether_proto::sse_writer::SseWriter`]; this loop only does its I/O: it reads what the
//! machine asks for, writes the frames it chooses, and feeds it the signals that can end a
//! connection early (the server shutting down, a handler asking to close, the connection being
//! replaced by a newer one for the same stream, the session ending, a failed read). It does
//! not choose what goes on which stream (the context does) or validate requests.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, StatusCode, header};
use tether_proto::ids::StreamId;
use tether_proto::sse_writer::{Batch, Close, Frame, SseWriter, Step, WriterConfig};
use tether_sse::{EventFrame, encode_comment};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::metrics::{ConnectionKind, Metrics, OpenStream};
use super::session::{ConnectionGuard, SessionRuntime};
use crate::store::{ReadBatch, StoredEvent};
use crate::telemetry;

/// Events read from the store per round trip. Large enough that a fast producer's backlog goes
/// out in few, large writes (one chunk per batch); small enough that one batch of typical
/// progress frames (~150 bytes) stays well under a megabyte.
pub(crate) const READ_BATCH: usize = 1024;

/// Events a resume reads before its answer starts (it must know the cursor is usable before
/// it says 200): a quarter of [`READ_BATCH`], what a durable store keeps in one chunk, so the
/// first replayed event waits for one chunk to be fetched and unpacked rather than four. The
/// reads after it take [`READ_BATCH`].
pub(crate) const FIRST_RESUME_BATCH: usize = READ_BATCH / 4;

/// The text of keep-alive comments (`: keep-alive`); readers ignore comments, proxies see
/// bytes.
const KEEPALIVE_TEXT: &str = "keep-alive";

/// `X-Accel-Buffering`: tells nginx-style proxies not to buffer the stream.
const X_ACCEL_BUFFERING: &str = "x-accel-buffering";

/// A `200 text/event-stream` response with `body`: not cached, not buffered by proxies.
pub(crate) fn event_stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(tether_proto::headers::TEXT_EVENT_STREAM),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

/// Where a writer starts.
#[derive(Debug)]
pub(crate) enum Start {
    /// A new connection to a stream: a priming event first when the session's version sends
    /// them, then the events after `cursor`.
    Fresh {
        /// The last seq already delivered by earlier connections; 0 for a stream nobody has
        /// read, which is then read from its start (its stored priming event).
        cursor: u64,
    },
    /// A resume after `Last-Event-ID` = `<stream>:<cursor>`; `first` is the batch already read
    /// to validate the id (the 400s must be decided before the 200 head is sent).
    Resume {
        /// The seq the client last saw.
        cursor: u64,
        /// The batch read after it.
        first: ReadBatch,
    },
}

/// One connection's writer loop. See the module docs.
pub(crate) struct Writer {
    runtime: Arc<SessionRuntime>,
    machine: SseWriter,
    /// The batch a resume read before answering, served to the machine's first read.
    first: Option<ReadBatch>,
    is_standalone: bool,
    connection: ConnectionGuard,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    kind: ConnectionKind,
    _open: OpenStream,
    /// Dropped with the connection: a 2026-07-28 request's, whose disconnect cancels it.
    _guard: Option<Box<dyn Send + Sync>>,
    /// A resume's span (`crate::telemetry::resume_span`), told on drop what was sent.
    resume_span: Option<tracing::Span>,
    /// Events this connection wrote.
    sent: u64,
    /// Events written before the first read that found the stream's stored end: what a
    /// resume replayed before going live.
    replayed: Option<u64>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(span) = &self.resume_span {
            telemetry::record_replayed(span, self.replayed.unwrap_or(self.sent), self.sent);
        }
    }
}

impl Writer {
    /// This writer, holding `guard` until its connection ends.
    pub(crate) fn with_guard(mut self, guard: impl Send + Sync + 'static) -> Self {
        self._guard = Some(Box::new(guard));
        self
    }

    /// This writer, serving a resume whose span is `span`: the connection runs in it, and it
    /// is told the events replayed and sent.
    pub(crate) fn with_resume_span(mut self, span: tracing::Span) -> Self {
        self.resume_span = Some(span);
        self
    }

    /// A writer for `stream` of `runtime`'s session, registered as the stream's connection
    /// (replacing any older one).
    pub(crate) fn new(
        runtime: &Arc<SessionRuntime>,
        stream: StreamId,
        start: Start,
        pacing: WriterConfig,
        shutdown: CancellationToken,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let (kind, start, first) = match start {
            Start::Fresh { cursor } => (
                ConnectionKind::Fresh,
                tether_proto::sse_writer::Start::Fresh { cursor },
                None,
            ),
            Start::Resume { cursor, first } => (
                ConnectionKind::Resume,
                tether_proto::sse_writer::Start::Resume { cursor },
                Some(first),
            ),
        };
        let machine = SseWriter::new(stream, start, runtime.version(), pacing, now());
        Self {
            runtime: Arc::clone(runtime),
            machine,
            first,
            is_standalone: stream == runtime.standalone(),
            connection: runtime.connect(stream),
            shutdown,
            metrics: Arc::clone(metrics),
            kind,
            _open: metrics.open_stream(),
            _guard: None,
            resume_span: None,
            sent: 0,
            replayed: None,
        }
    }

    /// The `200 text/event-stream` response whose body is this loop.
    pub(crate) fn into_response(self, session_header: Option<HeaderValue>) -> Response {
        let span = self.resume_span.clone().unwrap_or_else(|| {
            tracing::info_span!(
                "sse",
                session = %self.runtime.record().id,
                stream = %self.machine.stream(),
            )
        });
        // The state counts the chunks handed to hyper so far.
        let body = futures_util::stream::unfold((self, 0_u64), move |(mut writer, chunks)| {
            let span = span.clone();
            async move {
                // hyper's HTTP/1 writer keeps asking for chunks while its buffer has room
                // (about 400 KB) and writes only once the body is pending, so a resume far
                // behind would send nothing until thousands of events were encoded. Pending
                // once, right after the first chunk, puts that chunk on the wire at once; later
                // chunks fill the buffer as before, so replay keeps its large writes.
                if chunks == 1 {
                    tokio::task::yield_now().await;
                }
                let chunk = writer.next_chunk().instrument(span).await?;
                Some((
                    Ok::<_, Infallible>(chunk),
                    (writer, chunks.saturating_add(1)),
                ))
            }
        });
        let mut response = event_stream_response(Body::from_stream(body));
        let headers = response.headers_mut();
        if let Some(session) = session_header {
            headers.insert(tether_proto::headers::MCP_SESSION_ID, session);
        }
        response
    }

    /// The next bytes to write, or `None` to end the response.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            // Checked before every step, not only when idle: a busy stream would otherwise
            // never notice that it was replaced or that the server is closing it.
            self.feed_signals();
            match self.machine.step(now()) {
                Step::End => return None,
                Step::Write(frame) => return Some(encode(frame)),
                Step::Read { from_start, after } => {
                    let (read, limit) = match self.first.take() {
                        Some(batch) => (Ok(batch), FIRST_RESUME_BATCH),
                        None => {
                            let events = self.runtime.events();
                            let owner = self.runtime.owner();
                            let stream = self.machine.stream();
                            let read = if from_start {
                                events.read_from_start(owner, stream, READ_BATCH).await
                            } else {
                                events.read_after(owner, stream, after, READ_BATCH).await
                            };
                            (read, READ_BATCH)
                        }
                    };
                    let batch = match read {
                        Ok(batch) => batch,
                        Err(error) => {
                            if self.runtime.is_closed() {
                                tracing::debug!(error = %crate::error_chain(&error), "stream ended with its session");
                            } else {
                                tracing::warn!(error = %crate::error_chain(&error), seq = after, "stream cannot continue");
                            }
                            self.machine.on_store_failed();
                            continue;
                        }
                    };
                    let caught_up = batch.events.len() < limit || batch.complete;
                    let chunk = self.write_batch(&batch);
                    if caught_up && self.replayed.is_none() {
                        self.replayed = Some(self.sent);
                    }
                    if let Some(chunk) = chunk {
                        return Some(chunk);
                    }
                }
                Step::Wait { deadline } => self.wait(deadline).await,
            }
        }
    }

    /// The machine's plan for `batch`, as one chunk (`None` when it writes nothing).
    fn write_batch(&mut self, batch: &ReadBatch) -> Option<Bytes> {
        let seqs = match (batch.events.first(), batch.events.last()) {
            (Some(first), Some(last)) => Some(first.id.seq..=last.id.seq),
            _ => None,
        };
        let plan = self.machine.on_batch(
            &Batch {
                seqs,
                complete: batch.complete,
            },
            now(),
        );
        let events = &batch.events[usize::from(plan.skip_first)..];
        if !events.is_empty() {
            self.metrics.event_sent(self.kind, events.len() as u64);
            self.sent += events.len() as u64;
            tracing::debug!(
                seq = self.machine.cursor(),
                events = events.len(),
                "events written"
            );
        }
        if let Some(close) = self.machine.closing().filter(|_| plan.tail.is_some()) {
            tracing::debug!(
                ?close,
                seq = self.machine.cursor(),
                "closing the connection with retry"
            );
        }
        let tail = plan.tail.map(encode);
        let chunk = concat(events, tail);
        if chunk.is_empty() {
            return None;
        }
        if self.is_standalone {
            self.runtime
                .advance_standalone_cursor(self.machine.cursor());
        }
        Some(chunk)
    }

    /// The signals that can end this connection early, as the machine's inputs.
    fn feed_signals(&mut self) {
        if self.connection.token().is_cancelled() {
            tracing::debug!("connection closed: replaced or session ended");
            self.machine.on_replaced();
        } else if self.shutdown.is_cancelled() {
            self.machine.on_close(Close::Shutdown);
        } else if self.connection.close_requested().is_cancelled() {
            self.machine
                .on_close(Close::Requested(self.connection.close_retry()));
        }
    }

    /// Waits for an append, a signal or `deadline`, whichever comes first.
    async fn wait(&mut self, deadline: Option<std::time::Instant>) {
        tokio::select! {
            biased;
            // Signals are fed at the top of the loop.
            () = self.shutdown.cancelled() => {}
            () = self.connection.token().cancelled() => {}
            () = self.connection.close_requested().cancelled() => {}
            () = until(deadline) => {}
            more = self.runtime.events().wait_for_more(self.machine.stream(), self.machine.cursor()) => {
                match more {
                    Ok(()) => self.machine.on_more(),
                    Err(error) => {
                        tracing::debug!(error = %crate::error_chain(&error), "stream cannot continue");
                        self.machine.on_store_failed();
                    }
                }
            }
        }
    }
}

/// A frame the machine chose, as SSE bytes.
fn encode(frame: Frame) -> Bytes {
    match frame {
        Frame::Priming { id, retry_ms } => {
            tracing::debug!(seq = id.seq, "priming event written");
            EventFrame::with_data("")
                .id(&id.to_string())
                .retry(retry_ms)
                .encode()
                .expect("event ids have no line breaks")
        }
        Frame::Retry { retry_ms } => EventFrame::new()
            .retry(retry_ms)
            .encode()
            .expect("a retry field has no line breaks"),
        Frame::KeepAlive => encode_comment(KEEPALIVE_TEXT).expect("no line breaks"),
    }
}

/// One chunk of the events' frames then `tail`: the stored frame itself when it is alone (no
/// copy), else one buffer of the exact size, so that a batch goes to the socket in one write.
fn concat(events: &[StoredEvent], tail: Option<Bytes>) -> Bytes {
    match (events, tail) {
        ([], tail) => tail.unwrap_or_default(),
        ([event], None) => event.frame.clone(),
        (events, tail) => {
            let tail = tail.unwrap_or_default();
            let size = events.iter().map(|event| event.frame.len()).sum::<usize>() + tail.len();
            let mut chunk = BytesMut::with_capacity(size);
            for event in events {
                chunk.extend_from_slice(&event.frame);
            }
            chunk.extend_from_slice(&tail);
            chunk.freeze()
        }
    }
}

/// The machine's clock: tokio's, so that tests with paused time drive it too.
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// Completes at `deadline`; never without one.
async fn until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(Instant::from_std(deadline)).await,
        None => std::future::pending().await,
    }
}
