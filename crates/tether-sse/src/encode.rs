//! Writing events and comments in the `text/event-stream` format.
//!
//! This module owns the byte layout a tether server sends: field order, line splitting of
//! multi-line data, and refusing values the format cannot carry (a line break in `event`
//! or `id` would start a new field; WHATWG ignores an `id` containing NUL). It does not
//! choose event IDs, keep-alive intervals or HTTP framing.

use bytes::{BufMut, Bytes, BytesMut};
use memchr::{memchr, memchr2};

/// Why an event or comment cannot be written. Nothing is written when this is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The event type contains CR or LF.
    #[error("event type contains a line break")]
    InvalidEventType,
    /// The ID contains CR, LF or NUL (a reader ignores an `id` containing NUL).
    #[error("event id contains a line break or nul")]
    InvalidId,
    /// The comment contains CR or LF.
    #[error("comment contains a line break")]
    InvalidComment,
}

/// One event block to write: optional `event`, `id` and `retry` fields and optional data,
/// always emitted in that order (`event`, `id`, `retry`, `data` lines) and ended by a blank
/// line.
///
/// Data is split at every CR, LF and CRLF into one `data:` line per line, so a reader gets
/// the data back with each line break normalised to LF: decoding the encoding yields the
/// same data exactly when its line breaks are LF. Empty data is written as `data: ` and is
/// dispatched as an event with empty data (as MCP priming events are). A frame *without*
/// data (say, only an `id`) is not dispatched by a reader at all; it only commits the ID
/// (and sets the reconnection time if it has `retry`).
///
/// ```
/// use tether_sse::EventFrame;
///
/// let bytes = EventFrame::with_data("{}").event("message").id("s1:7").encode().unwrap();
/// assert_eq!(&bytes[..], b"event: message\nid: s1:7\ndata: {}\n\n");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct EventFrame<'a> {
    event_type: Option<&'a str>,
    id: Option<&'a str>,
    retry: Option<u64>,
    data: Option<&'a str>,
}

impl<'a> EventFrame<'a> {
    /// A block with no fields; add some with the builder methods.
    pub const fn new() -> Self {
        Self {
            event_type: None,
            id: None,
            retry: None,
            data: None,
        }
    }

    /// A block carrying this data.
    pub const fn with_data(data: &'a str) -> Self {
        Self::new().data(data)
    }

    /// Sets the `event` field. Must not contain CR or LF.
    pub const fn event(mut self, event_type: &'a str) -> Self {
        self.event_type = Some(event_type);
        self
    }

    /// Sets the `id` field. Must not contain CR, LF or NUL. An empty ID resets the reader's
    /// last event ID, so its next reconnect sends no `Last-Event-ID`.
    pub const fn id(mut self, id: &'a str) -> Self {
        self.id = Some(id);
        self
    }

    /// Sets the `retry` field: the reader's reconnection time, in milliseconds.
    pub const fn retry(mut self, retry_ms: u64) -> Self {
        self.retry = Some(retry_ms);
        self
    }

    /// Sets the data.
    pub const fn data(mut self, data: &'a str) -> Self {
        self.data = Some(data);
        self
    }

    /// Encodes the block into new bytes.
    ///
    /// # Errors
    ///
    /// [`EncodeError::InvalidEventType`] or [`EncodeError::InvalidId`] for a value the
    /// format cannot carry.
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let mut dst = BytesMut::with_capacity(self.size_hint());
        self.encode_into(&mut dst)?;
        Ok(dst.freeze())
    }

    /// Appends the encoded block to `dst`, so a writer can reuse one buffer for many
    /// events. On error `dst` is left unchanged.
    ///
    /// # Errors
    ///
    /// As for [`encode`](Self::encode).
    pub fn encode_into(&self, dst: &mut BytesMut) -> Result<(), EncodeError> {
        if let Some(event_type) = self.event_type
            && memchr2(b'\r', b'\n', event_type.as_bytes()).is_some()
        {
            return Err(EncodeError::InvalidEventType);
        }
        if let Some(id) = self.id
            && (memchr2(b'\r', b'\n', id.as_bytes()).is_some()
                || memchr(0, id.as_bytes()).is_some())
        {
            return Err(EncodeError::InvalidId);
        }
        dst.reserve(self.size_hint());
        if let Some(event_type) = self.event_type {
            put_field(dst, b"event: ", event_type.as_bytes());
        }
        if let Some(id) = self.id {
            put_field(dst, b"id: ", id.as_bytes());
        }
        if let Some(retry) = self.retry {
            dst.put_slice(b"retry: ");
            dst.put_slice(format_u64(retry, &mut [0; 20]));
            dst.put_u8(b'\n');
        }
        if let Some(data) = self.data {
            let mut rest = data.as_bytes();
            // One `data:` line per line; CRLF counts as one break, like the reader's
            // line splitting. The space after the colon keeps a leading space in the data.
            while let Some(at) = memchr2(b'\r', b'\n', rest) {
                put_field(dst, b"data: ", &rest[..at]);
                let crlf = rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n');
                rest = &rest[at + 1 + usize::from(crlf)..];
            }
            put_field(dst, b"data: ", rest);
        }
        dst.put_u8(b'\n');
        Ok(())
    }

    /// Bytes needed for a single-line encoding; multi-line data needs a little more.
    fn size_hint(&self) -> usize {
        let field = |prefix: usize, value: Option<&str>| value.map_or(0, |v| prefix + v.len() + 1);
        field(7, self.event_type)
            + field(4, self.id)
            + self.retry.map_or(0, |_| 28)
            + field(6, self.data)
            + 1
    }
}

/// Encodes a comment line followed by a blank line: `: text\n\n` (`:\n\n` when empty).
///
/// Readers ignore comments; servers send them as keep-alives so that idle connections
/// are not dropped by proxies. The blank line makes the comment its own block, which
/// intermediaries that buffer until the end of a block pass on at once, and which a reader
/// treats as a no-op between events. The decoder reports it as
/// [`Item::Comment`](crate::Item::Comment) with the text as given.
///
/// # Errors
///
/// [`EncodeError::InvalidComment`] if `text` contains CR or LF.
pub fn encode_comment(text: &str) -> Result<Bytes, EncodeError> {
    let mut dst = BytesMut::with_capacity(text.len() + 4);
    encode_comment_into(text, &mut dst)?;
    Ok(dst.freeze())
}

/// Appends a comment as [`encode_comment`] does. On error `dst` is left unchanged.
///
/// # Errors
///
/// [`EncodeError::InvalidComment`] if `text` contains CR or LF.
pub fn encode_comment_into(text: &str, dst: &mut BytesMut) -> Result<(), EncodeError> {
    if memchr2(b'\r', b'\n', text.as_bytes()).is_some() {
        return Err(EncodeError::InvalidComment);
    }
    if text.is_empty() {
        dst.put_slice(b":\n\n");
    } else {
        dst.reserve(text.len() + 4);
        dst.put_slice(b": ");
        dst.put_slice(text.as_bytes());
        dst.put_slice(b"\n\n");
    }
    Ok(())
}

fn put_field(dst: &mut BytesMut, prefix: &[u8], value: &[u8]) {
    dst.put_slice(prefix);
    dst.put_slice(value);
    dst.put_u8(b'\n');
}

/// Decimal digits of `n` without going through `fmt`.
fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}
