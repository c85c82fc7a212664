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
//! and there is no hand-off between them (DESIGN.md, "Data flow"). The loop is driven by the
//! connection: hyper asks for the next chunk only when it can write, so a slow reader makes the
//! loop wait instead of buffering, and what piles up meanwhile is the store's to bound
//! (DESIGN.md property 4). A client that goes away drops the body and with it the loop; the
//! handler that produces the events is unaffected (a disconnect is not cancellation, T15).
//!
//! The loop ends when the stream completes, when its connection is replaced by a newer one
//! for the same stream or the session ends (nothing more to say), when the events it needs
//! expired (the client's resume then gets an explicit `expired`), or when the connection is
//! closed without ending the stream — then after a `retry` field, so that the client comes
//! back and resumes (SEP-1699 "polling", T74). There are three such closes, all here: the
//! server shuts down; a handler asks for it (`RequestContext::close_connection`); or the
//! connection has been open for `ServerConfig::poll_after`. Each does one last read first, so
//! that what is already stored goes out, and none happens before an event with an id went out
//! on the connection (T73): a resume connection that has written nothing yet first writes a
//! priming event carrying the id the client resumed from. Handler closes and `poll_after`
//! apply only to sessions that negotiated 2025-11-25, the version that defines polling; older
//! clients are never asked to poll (their POST streams SHOULD NOT close before the response).
//! It does not choose what goes on which stream (the context does) or validate requests.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, StatusCode, header};
use tether_proto::ids::{EventId, StreamId};
use tether_sse::{EventFrame, encode_comment};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::metrics::{ConnectionKind, Metrics, OpenStream};
use super::session::{ConnectionGuard, SessionRuntime};
use crate::store::{ReadBatch, StoreError};

/// Events read from the store per round trip. Large enough that a fast producer's backlog goes
/// out in few, large writes (one chunk per batch); small enough that one batch of typical
/// progress frames (~150 bytes) stays well under a megabyte.
pub(crate) const READ_BATCH: usize = 1024;

/// The text of keep-alive comments (`: keep-alive`); readers ignore comments, proxies see
/// bytes.
const KEEPALIVE_TEXT: &str = "keep-alive";

/// `X-Accel-Buffering`: tells nginx-style proxies not to buffer the stream.
const X_ACCEL_BUFFERING: &str = "x-accel-buffering";

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

/// Why a connection closes before its stream ends (always after a `retry` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    /// The server is shutting down.
    Shutdown,
    /// A handler asked for it, with this `retry` (`None`: the configured one).
    Requested(Option<Duration>),
    /// The connection has been open for `poll_after`.
    Poll,
}

/// How a [`Writer`] paces its connection: the server configuration it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacing {
    /// The default `retry`, sent with priming events and before closing a connection.
    pub(crate) retry: Duration,
    /// Keep-alive comment interval; zero turns them off.
    pub(crate) keepalive: Duration,
    /// Close the connection (with `retry` first) after this long, for sessions that poll.
    pub(crate) poll_after: Option<Duration>,
}

/// One connection's writer loop. See the module docs.
pub(crate) struct Writer {
    runtime: Arc<SessionRuntime>,
    stream: StreamId,
    cursor: u64,
    first: Option<ReadBatch>,
    priming: Option<Bytes>,
    /// The next read is the stream's first: `read_from_start`, which includes seq 0.
    from_start: bool,
    send_priming: bool,
    is_standalone: bool,
    keepalive: Duration,
    /// The configured `retry`, in milliseconds.
    retry_ms: u64,
    /// When `poll_after` closes this connection (sessions that negotiated polling only).
    poll_deadline: Option<Instant>,
    /// An event with an id went out on this connection (T73: closing early is allowed only
    /// after that).
    sent_id: bool,
    connection: ConnectionGuard,
    shutdown: CancellationToken,
    finished: bool,
    metrics: Arc<Metrics>,
    kind: ConnectionKind,
    _open: OpenStream,
}

impl Writer {
    /// A writer for `stream` of `runtime`'s session, registered as the stream's connection
    /// (replacing any older one).
    pub(crate) fn new(
        runtime: &Arc<SessionRuntime>,
        stream: StreamId,
        start: Start,
        pacing: Pacing,
        shutdown: CancellationToken,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let kind = match start {
            Start::Fresh { .. } => ConnectionKind::Fresh,
            Start::Resume { .. } => ConnectionKind::Resume,
        };
        let send_priming = runtime.version().sends_priming_events();
        let retry_ms = millis(pacing.retry);
        let (cursor, first, priming, from_start) = match start {
            // A stream nobody has read yet: its first read includes the stored priming event.
            Start::Fresh { cursor: 0 } => (0, None, None, true),
            // A fresh GET after earlier connections took events 1..=cursor: it is still a new
            // SSE stream to the client, so it is primed (T71), with the id of the last event
            // delivered, which is where a resume must start.
            Start::Fresh { cursor } => {
                let priming = send_priming.then(|| {
                    let id = EventId::new(stream, cursor).to_string();
                    EventFrame::with_data("")
                        .id(&id)
                        .retry(retry_ms)
                        .encode()
                        .expect("event ids have no line breaks")
                });
                (cursor, None, priming, false)
            }
            Start::Resume { cursor, first } => (cursor, Some(first), None, false),
        };
        Self {
            runtime: Arc::clone(runtime),
            stream,
            cursor,
            first,
            priming,
            from_start,
            send_priming,
            is_standalone: stream == runtime.standalone(),
            keepalive: pacing.keepalive,
            retry_ms,
            // Polling is the session's version's to allow, like priming (both are 2025-11-25).
            poll_deadline: pacing
                .poll_after
                .filter(|_| polls(runtime))
                .map(|after| Instant::now() + after),
            sent_id: false,
            connection: runtime.connect(stream),
            shutdown,
            finished: false,
            metrics: Arc::clone(metrics),
            kind,
            _open: metrics.open_stream(),
        }
    }

    /// The `200 text/event-stream` response whose body is this loop.
    pub(crate) fn into_response(self, session_header: Option<HeaderValue>) -> Response {
        let span = tracing::info_span!(
            "sse",
            session = %self.runtime.record().id,
            stream = %self.stream,
        );
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
        let mut response = Response::new(Body::from_stream(body));
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(tether_proto::headers::TEXT_EVENT_STREAM),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
        if let Some(session) = session_header {
            headers.insert(tether_proto::headers::MCP_SESSION_ID, session);
        }
        response
    }

    /// The next bytes to write, or `None` to end the response.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(priming) = self.priming.take() {
            tracing::debug!(seq = self.cursor, "priming event written");
            self.sent_id = true;
            return Some(priming);
        }
        loop {
            if self.finished {
                return None;
            }
            // Checked before every read, not only when idle: a busy stream would otherwise
            // never notice that it was replaced.
            if self.connection.token().is_cancelled() {
                tracing::debug!("connection closed: replaced or session ended");
                return None;
            }
            // Closing (shutdown, a handler's request, `poll_after`): one last read, so that
            // what is already stored still goes out, then the `retry` and the end.
            let closing = self.closing();
            let batch = match self.first.take() {
                Some(batch) => batch,
                None => {
                    let events = self.runtime.events();
                    let owner = self.runtime.owner();
                    let read = if std::mem::take(&mut self.from_start) {
                        events.read_from_start(owner, self.stream, READ_BATCH).await
                    } else {
                        events
                            .read_after(owner, self.stream, self.cursor, READ_BATCH)
                            .await
                    };
                    match read {
                        Ok(batch) => batch,
                        Err(error) => return self.end_on(&error),
                    }
                }
            };
            let read_any = !batch.events.is_empty();
            let mut frames = Vec::with_capacity(batch.events.len());
            for event in &batch.events {
                self.cursor = event.id.seq;
                if event.is_priming() && !self.send_priming {
                    continue;
                }
                frames.push(&event.frame);
                self.sent_id = true;
            }
            if !frames.is_empty() {
                self.metrics.event_sent(self.kind, frames.len() as u64);
            }
            if read_any {
                tracing::debug!(
                    seq = self.cursor,
                    events = batch.events.len(),
                    "events written"
                );
            }
            let mut tail = None;
            if batch.complete {
                // T9: the stream's last event (its final response) is in this chunk; the
                // response ends after it.
                self.finished = true;
            } else if let Some(close) = closing {
                tail = Some(self.close_with_retry(close));
            }
            let chunk = concat(&frames, tail);
            if !chunk.is_empty() {
                if self.is_standalone {
                    self.runtime.advance_standalone_cursor(self.cursor);
                }
                return Some(chunk);
            }
            if self.finished || read_any {
                continue;
            }
            // Drained: wait for an append, sending a comment whenever the stream stays quiet
            // for `keepalive` so that proxies and clients see the connection alive.
            tokio::select! {
                biased;
                // Back to the top, which reads once more and closes.
                () = self.shutdown.cancelled() => {}
                () = self.connection.token().cancelled() => {
                    tracing::debug!("connection closed: replaced or session ended");
                    return None;
                }
                // Back to the top, which reads once more and closes with `retry`.
                () = self.connection.close_requested().cancelled() => {}
                () = until(self.poll_deadline) => {}
                more = self.runtime.events().wait_for_more(self.stream, self.cursor) => {
                    if let Err(error) = more {
                        return self.end_on(&error);
                    }
                }
                () = keepalive(self.keepalive) => {
                    return Some(encode_comment(KEEPALIVE_TEXT).expect("no line breaks"));
                }
            }
        }
    }

    /// Whether this connection is to close now, and why.
    fn closing(&self) -> Option<Close> {
        if self.shutdown.is_cancelled() {
            Some(Close::Shutdown)
        } else if self.connection.close_requested().is_cancelled() {
            Some(Close::Requested(self.connection.close_retry()))
        } else if self
            .poll_deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            Some(Close::Poll)
        } else {
            None
        }
    }

    /// The last bytes of a connection closed before its stream ended: a `retry` field tells
    /// the client when to come back, and the stream stays resumable from the last id it got
    /// (SEP-1699 polling, T74, T75).
    fn close_with_retry(&mut self, close: Close) -> Bytes {
        tracing::debug!(
            ?close,
            seq = self.cursor,
            "closing the connection with retry"
        );
        self.finished = true;
        let retry_ms = match close {
            Close::Requested(Some(retry)) => millis(retry),
            _ => self.retry_ms,
        };
        let frame = if !self.sent_id && self.send_priming {
            // T73: close only after an event with an id went out on this connection. A resume
            // that has written nothing yet gets a priming event with the id the client resumed
            // from, which changes nothing for it and keeps the rule literal.
            let id = EventId::new(self.stream, self.cursor).to_string();
            EventFrame::with_data("").id(&id).retry(retry_ms).encode()
        } else {
            EventFrame::new().retry(retry_ms).encode()
        };
        frame.expect("event ids have no line breaks")
    }

    /// The store cannot continue this stream. The connection ends; a client that resumes
    /// learns why from the 400 (`expired`, `unknown`), never from a silently short stream.
    fn end_on(&mut self, error: &StoreError) -> Option<Bytes> {
        if self.runtime.is_closed() {
            tracing::debug!(%error, "stream ended with its session");
        } else {
            tracing::warn!(%error, seq = self.cursor, "stream cannot continue");
        }
        self.finished = true;
        None
    }
}

/// One chunk of `frames` then `tail`: the stored frame itself when it is alone (no copy),
/// else one buffer of the exact size, so that a batch goes to the socket in one write.
fn concat(frames: &[&Bytes], tail: Option<Bytes>) -> Bytes {
    match (frames, tail) {
        ([], tail) => tail.unwrap_or_default(),
        ([frame], None) => Bytes::clone(frame),
        (frames, tail) => {
            let tail = tail.unwrap_or_default();
            let size = frames.iter().map(|frame| frame.len()).sum::<usize>() + tail.len();
            let mut chunk = BytesMut::with_capacity(size);
            for frame in frames {
                chunk.extend_from_slice(frame);
            }
            chunk.extend_from_slice(&tail);
            chunk.freeze()
        }
    }
}

/// Whether `runtime`'s session may be asked to poll (SEP-1699): it negotiated the version that
/// defines server-initiated closes, which is also the one that primes its streams.
pub(crate) fn polls(runtime: &SessionRuntime) -> bool {
    runtime.version().sends_priming_events()
}

/// A duration as SSE `retry` milliseconds (saturating).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Completes at `deadline`; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Sleeps for one keep-alive interval; a zero interval turns keep-alives off (never fires),
/// rather than writing comments in a busy loop.
async fn keepalive(interval: Duration) {
    if interval.is_zero() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(interval).await;
}
