//! The SSE frames every event store keeps, encoded once at append and the same way by every
//! backend: `event: message`, `id`, one `data` line and the blank line for a message; `id`,
//! `retry` and empty `data` for a stream's priming event. Backends own where frames live,
//! not what they look like.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tether_proto::ids::{EventId, StreamId};
use tether_sse::EventFrame;

use super::StoreError;

/// Checks that `message` fits in one `data:` line and returns it as text.
pub(crate) fn validate(message: &[u8]) -> Result<&str, StoreError> {
    if message.is_empty() {
        // Empty data is the priming event's mark; a client skips it.
        return Err(StoreError::InvalidMessage("empty"));
    }
    // The encoder would split a message at CR or LF over several `data:` lines, which a reader
    // joins with LF: the client would get a different message than the one stored.
    if message.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(StoreError::InvalidMessage("contains a line break"));
    }
    std::str::from_utf8(message).map_err(|_| StoreError::InvalidMessage("not UTF-8"))
}

/// `event: message`, `id`, one `data` line, blank line. `message` has passed [`validate`].
pub(crate) fn message_frame(id: EventId, message: &str) -> Bytes {
    let id = id.to_string();
    encode(&EventFrame::with_data(message).event("message").id(&id))
}

/// `id`, `retry` and empty `data`, which a client dispatches as an event with empty data and
/// so takes its id as the cursor (MCP 2025-11-25 priming event).
pub(crate) fn priming_frame(stream: StreamId, retry: Duration) -> Bytes {
    let retry_ms = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX);
    let id = EventId::priming(stream).to_string();
    encode(&EventFrame::with_data("").id(&id).retry(retry_ms))
}

/// The JSON-RPC message inside a frame built here, as a slice of it (no copy): the last
/// line's value, before the blank line. `data_len` is the message's length when known (the
/// memory store keeps it), else the `data` line is found by searching.
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) fn message_in(frame: &Bytes, data_len: Option<usize>) -> Bytes {
    let end = frame.len().saturating_sub(2);
    let start = match data_len {
        Some(len) => end.saturating_sub(len),
        // The data line comes last, after `event`, `id` and `retry`, none of which holds
        // "\ndata: ".
        None => frame
            .windows(7)
            .rposition(|w| w == b"\ndata: ")
            .map_or(end, |at| at + 7),
    };
    frame.slice(start.min(end)..end)
}

fn encode(frame: &EventFrame<'_>) -> Bytes {
    let mut buf = BytesMut::new();
    frame
        .encode_into(&mut buf)
        .expect("event ids and the event type hold no line break or nul");
    buf.freeze()
}
