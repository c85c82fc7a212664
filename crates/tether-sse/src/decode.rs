//! The incremental, bounded event-stream decoder.
//!
//! This module owns the byte-level half of WHATWG HTML "Parsing an event stream" and
//! "Interpreting an event stream": BOM stripping, line splitting on CR, LF and CRLF across
//! chunk boundaries, lossy UTF-8 decoding, field processing, and the data, event type and
//! last event ID buffers. It owns the limits that bound its memory. It does no I/O and
//! knows nothing of HTTP, reconnection delays or EventSource `readyState`: the caller feeds
//! bytes in and pulls [`Item`]s out.

use std::{borrow::Cow, collections::VecDeque, fmt, mem};

use memchr::memchr2;

use crate::event::{Event, Item};

/// Default cap on the data of one event, in bytes (after UTF-8 decoding, lines joined).
///
/// MCP sends each JSON-RPC message as one event, and tool results (embedded images,
/// resource contents) can be several MiB; the Python SDK caps an event at 1 MiB, which
/// real servers exceed. 16 MiB admits any sensible message while keeping a misbehaving or
/// hostile peer from growing one event without bound.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Default cap on one line, in bytes, excluding its terminator.
///
/// A JSON-RPC message is written as a single `data:` line, so the line limit must admit
/// the largest event plus its field name; 1 KiB of headroom covers `data: ` with room to
/// spare. Any line longer than this could not fit in an event anyway.
pub const DEFAULT_MAX_LINE_BYTES: usize = DEFAULT_MAX_EVENT_BYTES + 1024;

/// Capacity kept for the incomplete-line buffer once a line completes. One large message
/// split across reads should not pin megabytes on a long-lived stream; 64 KiB holds any
/// ordinary line, so the steady state does not reallocate.
const RETAINED_LINE_CAPACITY: usize = 64 * 1024;

/// The UTF-8 byte order mark, which the UTF-8 decode algorithm strips once at the start.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The bounds a [`Decoder`] enforces. See [`DEFAULT_MAX_LINE_BYTES`] and
/// [`DEFAULT_MAX_EVENT_BYTES`] for the defaults and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_line_bytes: usize,
    max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Limits {
    /// [`DEFAULT_MAX_LINE_BYTES`] and [`DEFAULT_MAX_EVENT_BYTES`].
    pub const DEFAULT: Self = Self {
        max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
    };

    /// Sets the longest accepted line, in bytes, excluding its terminator. This also
    /// bounds the bytes the decoder holds for an incomplete line.
    #[must_use]
    pub const fn with_max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Sets the largest accepted event data, in bytes, after UTF-8 decoding and joining.
    #[must_use]
    pub const fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event_bytes = bytes;
        self
    }

    /// The longest accepted line, in bytes, excluding its terminator.
    #[must_use]
    pub const fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    /// The largest accepted event data, in bytes.
    #[must_use]
    pub const fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }
}

/// Why a [`Decoder`] stopped. Both are limit violations: the stream is well-formed SSE
/// but bigger than this decoder accepts, so the connection should be dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A line (complete, or still incomplete) is longer than [`Limits::max_line_bytes`].
    #[error("line longer than {limit} bytes")]
    LineTooLong {
        /// The limit in force.
        limit: usize,
    },
    /// An event's data is larger than [`Limits::max_event_bytes`].
    #[error("event data larger than {limit} bytes")]
    EventTooLarge {
        /// The limit in force.
        limit: usize,
    },
}

/// An incremental `text/event-stream` decoder: [`feed`](Decoder::feed) it bytes as they
/// arrive, in chunks of any size, then pull [`Item`]s with
/// [`next_item`](Decoder::next_item) until it returns `Ok(None)` ("need more bytes").
/// Call [`finish`](Decoder::finish) at end of stream.
///
/// `feed` interprets every complete line at once, straight from the caller's slice (only
/// an incomplete final line is copied), and queues the resulting items; `next_item` hands
/// them out in order. [`last_event_id`](Decoder::last_event_id) and
/// [`reconnection_time`](Decoder::reconnection_time) follow the items *pulled*, so a
/// client that stops pulling part-way resumes from the last event it actually received.
///
/// Memory: besides queued items, the decoder holds at most [`Limits::max_line_bytes`] of
/// an incomplete line. A line that outgrows the limit is reported as
/// [`DecodeError::LineTooLong`] as soon as it is fed, not when it ends, and its bytes are
/// not kept. The data of the event being assembled is bounded by
/// [`Limits::max_event_bytes`].
///
/// Errors poison the decoder: the items before the offending line are still delivered,
/// then every [`next_item`](Decoder::next_item) returns the same error, and
/// [`feed`](Decoder::feed) ignores its input.
///
/// ```
/// use tether_sse::{Decoder, Item};
///
/// let mut decoder = Decoder::new();
/// decoder.feed(b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\"}\n");
/// assert_eq!(decoder.next_item(), Ok(None)); // no blank line yet
/// decoder.feed(b"\n");
/// let Some(Item::Event(event)) = decoder.next_item().unwrap() else { panic!() };
/// assert_eq!(event.data(), r#"{"jsonrpc":"2.0"}"#);
/// assert_eq!(event.last_event_id(), "7");
/// ```
pub struct Decoder {
    limits: Limits,
    /// The line being received: bytes after the last terminator fed. While `bom_pending`,
    /// a strict prefix of the BOM.
    partial: Vec<u8>,
    /// The last byte fed was a CR that ended a line: an LF starting the next chunk belongs
    /// to the same CRLF terminator (WHATWG: one line end, not two).
    pending_cr: bool,
    /// The first bytes of the stream have not yet been checked for a BOM.
    bom_pending: bool,
    finished: bool,
    state: State,
    items: VecDeque<Item>,
    /// Where interpretation stopped; returned once `items` is drained, and forever after.
    error: Option<DecodeError>,
    /// The committed last event ID as of the last item pulled.
    pulled_id: String,
    /// The reconnection time as of the last item pulled.
    pulled_retry: Option<u64>,
}

/// The buffers of "Interpreting an event stream".
struct State {
    /// The data buffer without its trailing LF: lines are joined as they arrive so that a
    /// single-line event needs exactly one allocation of exactly its size.
    data: String,
    /// Whether any `data` field was seen; distinguishes the WHATWG data buffer `"\n"`
    /// (dispatches an empty event) from `""` (dispatches nothing).
    has_data: bool,
    event_type: Option<Cow<'static, str>>,
    /// The last event ID buffer, valid only while `id_dirty`: WHATWG keeps the buffer
    /// across blocks, but once committed it equals `last_event_id`, which stands in for it.
    id_buf: String,
    /// An `id` field was processed since the last commit.
    id_dirty: bool,
    /// The committed last event ID string (WHATWG dispatch step 1).
    last_event_id: String,
    block_retry: Option<u64>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("limits", &self.limits)
            .field("buffered_len", &self.buffered_len())
            .field("queued_items", &self.items.len())
            .field("last_event_id", &self.last_event_id())
            .field("reconnection_time", &self.reconnection_time())
            .field("finished", &self.finished)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder with [`Limits::DEFAULT`].
    #[must_use]
    pub fn new() -> Self {
        Self::with_limits(Limits::DEFAULT)
    }

    /// A decoder with the given limits.
    #[must_use]
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits,
            partial: Vec::new(),
            pending_cr: false,
            bom_pending: true,
            finished: false,
            state: State {
                data: String::new(),
                has_data: false,
                event_type: None,
                id_buf: String::new(),
                id_dirty: false,
                last_event_id: String::new(),
                block_retry: None,
            },
            items: VecDeque::new(),
            error: None,
            pulled_id: String::new(),
            pulled_retry: None,
        }
    }

    /// Starts the last event ID buffer and string at `id` instead of empty, so that events
    /// without an `id` on a resumed stream keep the cursor of the previous connection.
    ///
    /// WHATWG initialises the buffer to empty for every parsed stream; browser engines are
    /// believed to seed it like this on reconnect, and for MCP resumption it is what a
    /// client wants. The decoder does not report the seed as [`Item::LastEventId`].
    #[must_use]
    pub fn with_last_event_id(mut self, id: &str) -> Self {
        self.state.last_event_id = id.to_owned();
        self.pulled_id = id.to_owned();
        self
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Interprets bytes from the stream. Chunk boundaries may fall anywhere, even inside a
    /// CRLF, the BOM or a UTF-8 sequence. Ignored after [`finish`](Self::finish) or an
    /// error.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        if bytes.is_empty() || self.finished || self.error.is_some() {
            return;
        }
        if self.pending_cr {
            self.pending_cr = false;
            bytes = bytes.strip_prefix(b"\n").unwrap_or(bytes);
        }
        if self.bom_pending {
            // The UTF-8 decode algorithm strips one leading BOM, which may arrive split.
            let seen = self.partial.len();
            let take = (BOM.len() - seen).min(bytes.len());
            if bytes[..take] == BOM[seen..seen + take] {
                if seen + take < BOM.len() {
                    self.partial.extend_from_slice(&bytes[..take]);
                    return;
                }
                self.partial.clear();
                bytes = &bytes[take..];
            }
            // Otherwise the bytes held so far are the start of the first line.
            self.bom_pending = false;
        }
        if let Err(error) = self.interpret(bytes) {
            self.poison(error);
        }
    }

    fn interpret(&mut self, mut bytes: &[u8]) -> Result<(), DecodeError> {
        let max_line = self.limits.max_line_bytes;
        if !self.partial.is_empty() {
            // Complete the line that the previous chunks started.
            let Some(len) = find_line_end(bytes) else {
                if self.partial.len() + bytes.len() > max_line {
                    return Err(DecodeError::LineTooLong { limit: max_line });
                }
                self.partial.extend_from_slice(bytes);
                return Ok(());
            };
            if self.partial.len() + len > max_line {
                return Err(DecodeError::LineTooLong { limit: max_line });
            }
            self.partial.extend_from_slice(&bytes[..len]);
            let line = utf8(&self.partial);
            self.state
                .process_line(&line, &self.limits, &mut self.items)?;
            self.partial.clear();
            // A no-op unless the buffer has grown beyond the retained capacity.
            self.partial.shrink_to(RETAINED_LINE_CAPACITY);
            self.pending_cr = bytes[len] == b'\r' && len + 1 == bytes.len();
            bytes = &bytes[len + terminator_len(bytes, len)..];
        }
        // Validating a whole chunk in one pass is far cheaper than line by line. A chunk
        // may end inside a UTF-8 sequence, or hold invalid bytes: its valid prefix still
        // takes the fast path, and only what follows is decoded line by line, lossily.
        let (valid, rest) = match simdutf8::basic::from_utf8(bytes) {
            Ok(text) => (text, &b""[..]),
            Err(_) => {
                // Rare, so a second pass that also finds where the valid prefix ends.
                let valid_up_to = simdutf8::compat::from_utf8(bytes)
                    .map_or_else(|error| error.valid_up_to(), |_| 0);
                let (valid, rest) = bytes.split_at(valid_up_to);
                (simdutf8::basic::from_utf8(valid).unwrap_or_default(), rest)
            }
        };
        let mut text = valid;
        while let Some(len) = find_line_end(text.as_bytes()) {
            if len > max_line {
                return Err(DecodeError::LineTooLong { limit: max_line });
            }
            self.state
                .process_line(&text[..len], &self.limits, &mut self.items)?;
            text = &text[len + terminator_len(text.as_bytes(), len)..];
        }
        let mut tail = &bytes[valid.len() - text.len()..];
        if !rest.is_empty() {
            while let Some(len) = find_line_end(tail) {
                if len > max_line {
                    return Err(DecodeError::LineTooLong { limit: max_line });
                }
                self.state
                    .process_line(&utf8(&tail[..len]), &self.limits, &mut self.items)?;
                tail = &tail[len + terminator_len(tail, len)..];
            }
        }
        let consumed = bytes.len() - tail.len();
        if consumed > 0 {
            // WHATWG "Parsing an event stream": a CR ends a line whatever follows, so its
            // line has been processed already; an LF starting the next chunk completes
            // the same CRLF and must be swallowed.
            self.pending_cr = bytes[consumed - 1] == b'\r' && tail.is_empty();
        }
        if tail.len() > max_line {
            return Err(DecodeError::LineTooLong { limit: max_line });
        }
        self.partial.extend_from_slice(tail);
        Ok(())
    }

    /// Marks the end of the stream: a final line without terminator is dropped and the
    /// pending event is discarded without being dispatched and without committing its
    /// `id` (WHATWG: "any pending data must be discarded"). A CR as the last byte did end
    /// its line. Items already queued are still delivered; after them `next_item` returns
    /// `Ok(None)`.
    pub fn finish(&mut self) {
        self.finished = true;
        self.partial = Vec::new();
        self.state.discard_block();
    }

    /// Pulls the next item. `Ok(None)` means every complete line fed so far has been
    /// delivered: feed more bytes (or, after [`finish`](Self::finish), the stream is over).
    ///
    /// # Errors
    ///
    /// [`DecodeError::LineTooLong`] or [`DecodeError::EventTooLarge`] once the stream
    /// reaches a line or event beyond the [`Limits`]; items before it are delivered first.
    /// The decoder is then poisoned and returns the same error on every later call.
    pub fn next_item(&mut self) -> Result<Option<Item>, DecodeError> {
        let Some(item) = self.items.pop_front() else {
            return match &self.error {
                Some(error) => Err(error.clone()),
                None => Ok(None),
            };
        };
        match &item {
            Item::Event(event) => self.pulled_id.clone_from(&event.last_event_id),
            Item::LastEventId(id) => self.pulled_id.clone_from(id),
            Item::Retry(ms) => self.pulled_retry = Some(*ms),
            Item::Comment(_) => {}
        }
        Ok(Some(item))
    }

    /// The committed last event ID string as of the items pulled so far: what a
    /// reconnecting client sends as `Last-Event-ID` (nothing when empty). An `id` in a
    /// block not yet ended by a blank line is not committed.
    #[must_use]
    pub fn last_event_id(&self) -> &str {
        &self.pulled_id
    }

    /// The last valid `retry` value pulled, in milliseconds; `None` until the server sends
    /// one (the initial reconnection time is the caller's choice).
    #[must_use]
    pub fn reconnection_time(&self) -> Option<u64> {
        self.pulled_retry
    }

    /// How many input bytes the decoder holds: the incomplete line it is receiving
    /// (queued items are already decoded and not counted).
    #[must_use]
    pub fn buffered_len(&self) -> usize {
        self.partial.len()
    }

    fn poison(&mut self, error: DecodeError) {
        self.partial = Vec::new();
        self.state.discard_block();
        self.error = Some(error);
    }
}

impl State {
    /// WHATWG "Interpreting an event stream", one line (without its terminator).
    fn process_line(
        &mut self,
        line: &str,
        limits: &Limits,
        items: &mut VecDeque<Item>,
    ) -> Result<(), DecodeError> {
        let bytes = line.as_bytes();
        if bytes.is_empty() {
            if let Some(item) = self.dispatch() {
                items.push_back(item);
            }
            return Ok(());
        }
        if bytes[0] == b':' {
            items.push_back(Item::Comment(strip_one_space(&line[1..]).to_owned()));
            return Ok(());
        }
        // Split on the first colon; a line without one is a field with an empty value.
        // Every known field name is at most `MAX_NAME` bytes, so only that many bytes
        // are searched: a longer name is unknown whatever follows, and taking the whole
        // line as the name (more than `MAX_NAME` bytes) matches no field below.
        const MAX_NAME: usize = 5;
        let head = &bytes[..bytes.len().min(MAX_NAME + 1)];
        let (name, value) = match head.iter().position(|&byte| byte == b':') {
            Some(colon) => (&line[..colon], strip_one_space(&line[colon + 1..])),
            None => (line, ""),
        };
        // Field names are compared literally, with no case folding; unknown ones are ignored.
        match name {
            "data" => self.push_data(value, limits.max_event_bytes)?,
            "event" => self.set_event_type(value),
            // "If the field value does not contain U+0000 NULL, then set the last event
            // ID buffer to the field value. Otherwise, ignore the field."
            "id" if !contains_nul(value) => {
                self.id_buf.clear();
                self.id_buf.push_str(value);
                self.id_dirty = true;
            }
            "retry" => {
                if let Some(ms) = parse_retry(value.as_bytes()) {
                    self.block_retry = Some(ms);
                    items.push_back(Item::Retry(ms));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn push_data(&mut self, value: &str, max_event_bytes: usize) -> Result<(), DecodeError> {
        let separator = usize::from(self.has_data);
        if self.data.len() + separator + value.len() > max_event_bytes {
            return Err(DecodeError::EventTooLarge {
                limit: max_event_bytes,
            });
        }
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
        Ok(())
    }

    fn set_event_type(&mut self, value: &str) {
        self.event_type = match value {
            "" => None,
            // MCP servers name every event `message`: no allocation for it.
            "message" => Some(Cow::Borrowed("message")),
            _ => Some(Cow::Owned(value.to_owned())),
        };
    }

    /// WHATWG "dispatch the event", at a blank line.
    fn dispatch(&mut self) -> Option<Item> {
        // Step 1: commit the last event ID buffer, whether or not an event fires.
        let mut id_changed = false;
        if self.id_dirty {
            // Only a block without data reports the change; an event carries its ID.
            id_changed = !self.has_data && self.last_event_id != self.id_buf;
            // `id_buf` is only read while dirty, so swapping commits without a copy.
            mem::swap(&mut self.last_event_id, &mut self.id_buf);
            self.id_dirty = false;
        }
        let event_type = self.event_type.take();
        let retry = self.block_retry.take();
        if !self.has_data {
            // Step 2: an empty data buffer fires nothing (but the type is cleared).
            return id_changed.then(|| Item::LastEventId(self.last_event_id.clone()));
        }
        self.has_data = false;
        Some(Item::Event(Event::from_parts(
            event_type,
            mem::take(&mut self.data),
            self.last_event_id.clone(),
            retry,
        )))
    }

    /// Forgets the block being read, including an uncommitted `id`.
    fn discard_block(&mut self) {
        self.data = String::new();
        self.has_data = false;
        self.event_type = None;
        self.block_retry = None;
        self.id_dirty = false;
    }
}

/// The first CR or LF. Most lines of an MCP stream are short (`event: message`, an `id`,
/// the blank line), where a scalar look at the first bytes beats setting up `memchr2`.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const SCALAR_HEAD: usize = 16;
    let head = &bytes[..bytes.len().min(SCALAR_HEAD)];
    if let Some(at) = head.iter().position(|&byte| byte == b'\n' || byte == b'\r') {
        return Some(at);
    }
    memchr2(b'\n', b'\r', &bytes[head.len()..]).map(|at| at + head.len())
}

/// "If value starts with a U+0020 SPACE character, remove it from value." Only one.
fn strip_one_space(value: &str) -> &str {
    value.strip_prefix(' ').unwrap_or(value)
}

/// Whether `value` contains U+0000. IDs are short: a branch-free scan beats a `memchr`
/// call.
fn contains_nul(value: &str) -> bool {
    value.bytes().fold(false, |found, byte| found | (byte == 0))
}

/// 2 for a CRLF at `bytes[at]`, else 1.
fn terminator_len(bytes: &[u8], at: usize) -> usize {
    if bytes[at] == b'\r' && bytes.get(at + 1) == Some(&b'\n') {
        2
    } else {
        1
    }
}

/// UTF-8 decode without error mode: invalid sequences become U+FFFD. Decoding line by
/// line equals decoding the whole stream because terminators and `:` are ASCII, which
/// also ends any truncated sequence before them.
fn utf8(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// WHATWG: "If the field value consists of only ASCII digits, then interpret the field
/// value as an integer in base ten". A value beyond `u64` milliseconds (585 million years)
/// is ignored like any other invalid value rather than clamped.
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |ms, &byte| {
        if !byte.is_ascii_digit() {
            return None;
        }
        ms.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
    })
}
