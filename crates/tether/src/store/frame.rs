//! The SSE frames every event store keeps, encoded once at append and the same way by every
//! backend: `event: message`, `id`, one `data` line and the blank line for a message; `id`,
//! `retry` and empty `data` for a stream's priming event. Backends own where frames live,
//! not what they look like.

use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use tether_proto::ids::{EventId, StreamId};
use tether_sse::EventFrame;

use super::error::StoreError;

/// Checks that `message` fits in one `data:` line and returns it as text.
pub(crate) fn validate(message: &[u8]) -> Result<&str, StoreError> {
    if message.is_empty() {
        // Empty data is the priming event's mark; a client skips it.
        return Err(StoreError::InvalidMessage("empty"));
    }
    // The encoder would split a message at CR or LF over several `data:` lines, which a reader
    // joins with LF: the client would get a different message than the one stored.
    if memchr::memchr2(b'\r', b'\n', message).is_some() {
        return Err(StoreError::InvalidMessage("contains a line break"));
    }
    std::str::from_utf8(message).map_err(|_| StoreError::InvalidMessage("not UTF-8"))
}

/// `event: message`, `id`, one `data` line, blank line. `message` has passed [`validate`].
pub(crate) fn message_frame(id: EventId, message: &str) -> Bytes {
    let mut frame = BytesMut::with_capacity(message_frame_capacity(message));
    write_message_frame(&mut frame, id, message);
    frame.freeze()
}

/// Appends [`message_frame`]'s bytes to `out`, which must have
/// [`message_frame_capacity`] spare bytes, so that a store can cut many frames out of one
/// allocation.
///
/// The layout [`EventFrame`] writes (a test holds them equal), written directly: this runs
/// for every event, and a validated message and an id need none of the encoder's checks or
/// line splitting.
pub(crate) fn write_message_frame(out: &mut BytesMut, id: EventId, message: &str) {
    out.put_slice(b"event: message\nid: ");
    // `id`'s Display, without the formatting machinery.
    out.put_slice(id.stream.as_str().as_bytes());
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(id.seq).as_bytes());
    out.put_slice(b"\ndata: ");
    out.put_slice(message.as_bytes());
    out.put_slice(b"\n\n");
}

/// The most bytes [`message_frame`] writes for `message`: the fields' names and line breaks
/// (28) and the longest event id (22-character stream id, `:`, 20-digit seq) around it.
pub(crate) const fn message_frame_capacity(message: &str) -> usize {
    28 + 22 + 1 + 20 + message.len()
}

/// Where the message starts in a frame [`message_frame`] built for `message`.
pub(crate) fn message_at(frame: &[u8], message: &str) -> usize {
    frame.len() - 2 - message.len()
}

/// The first page [`FramePages`] writes frames into.
const MIN_PAGE: usize = 512;

/// The largest page: a busy stream allocates once per this many bytes of frames.
const MAX_PAGE: usize = 16 * 1024;

/// Message frames of one stream written into shared pages: one allocation per page instead
/// of one per frame (and a reference count shared by the page's frames, instead of one set up
/// when a frame is first read), for a stream of small events: progress. Pages start small and
/// double, so a stream of two events keeps a few hundred bytes, and a busy one allocates once
/// per [`MAX_PAGE`]. A page lives until the last of its frames is dropped; since a stream's
/// frames leave in order, what a stream holds beyond its frames' bytes is its oldest page's
/// released part, its current page's unused part, and less than a frame at the end of each
/// page. Frames larger than a page get an allocation of their own.
#[derive(Debug)]
pub(crate) struct FramePages {
    /// The unused end of an allocation shared with the stream's recent frames.
    page: BytesMut,
    /// The size of the last page allocated; each new page doubles it, up to [`MAX_PAGE`].
    page_size: usize,
}

impl Default for FramePages {
    fn default() -> Self {
        Self {
            page: BytesMut::new(),
            page_size: MIN_PAGE / 2,
        }
    }
}

impl FramePages {
    /// [`message_frame`]'s bytes, written into the current page and cut from it.
    pub(crate) fn message_frame(&mut self, id: EventId, message: &str) -> Bytes {
        let capacity = message_frame_capacity(message);
        if capacity > MAX_PAGE {
            return message_frame(id, message);
        }
        // After `split`, the page's capacity is what is left of it.
        if self.page.capacity() < capacity {
            self.page_size = (self.page_size * 2).min(MAX_PAGE);
            self.page = BytesMut::with_capacity(self.page_size.max(capacity));
        }
        write_message_frame(&mut self.page, id, message);
        self.page.split().freeze()
    }
}

/// `id`, `retry` and empty `data`, which a client dispatches as an event with empty data and
/// so takes its id as the cursor (MCP 2025-11-25 priming event).
pub(crate) fn priming_frame(stream: StreamId, retry: Duration) -> Bytes {
    let retry_ms = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX);
    let id = EventId::priming(stream).to_string();
    encode(&EventFrame::with_data("").id(&id).retry(retry_ms))
}

/// Where the JSON-RPC message starts in a frame built here: the last line's value, before the
/// blank line (its end, for a priming event's empty data).
pub(crate) fn message_start(frame: &[u8]) -> usize {
    // The data line comes last, after `event`, `id` and `retry`, none of which holds
    // "\ndata: ", and the message is one line: the first match is the data line's, a few
    // dozen bytes in.
    let end = frame.len().saturating_sub(2);
    memchr::memmem::find(frame, b"\ndata: ").map_or(end, |at| at + 7)
}

fn encode(frame: &EventFrame<'_>) -> Bytes {
    let mut buf = BytesMut::new();
    frame
        .encode_into(&mut buf)
        .expect("event ids and the event type hold no line break or nul");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_frames_are_what_the_encoder_writes() {
        let stream = StreamId::generate();
        for (seq, message) in [
            (1, r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            (u64::MAX, "{}"),
            (42, r#"{"text":"caf\u00e9 \u2014 ünïcode"}"#),
        ] {
            let id = EventId::new(stream, seq);
            let expected = encode(
                &EventFrame::with_data(message)
                    .event("message")
                    .id(&id.to_string()),
            );
            let frame = message_frame(id, message);
            assert_eq!(frame, expected);
            assert!(frame.len() <= message_frame_capacity(message));
        }
    }
}
