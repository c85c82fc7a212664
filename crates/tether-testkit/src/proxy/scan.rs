//! Finds where to cut a server→client byte stream so that the client is left holding a partial
//! SSE event: after the K-th complete event, in the middle of the next event's first `data`
//! line (or, for an event with no `data` line, just before its terminating blank line).
//!
//! It owns only the byte-level scanning: HTTP/1.1 response framing (heads, `Content-Length`,
//! chunked bodies, several responses on one keep-alive connection), so that only the bodies of
//! `text/event-stream` responses are read as SSE, and WHATWG line splitting (§9.2.6: CRLF, LF
//! and a lone CR each end a line). It never decodes events, allocates per event, or touches a
//! socket; the forwarder in `conn` asks it how far it may forward and where to cut.
//!
//! A stream that does not start with `HTTP/` is read as bare SSE, which is what a test
//! upstream that writes events straight to the socket produces.

/// The longest HTTP response head scanned; a longer one turns scanning off for the connection
/// (nothing is cut), because a real SSE server never sends one and the bound keeps memory fixed.
const HEAD_LIMIT: usize = 16 * 1024;

/// Where the scanner is in the HTTP framing of the stream.
#[derive(Debug)]
enum Framing {
    /// Matching the first bytes against `HTTP/`; `matched` of them agreed so far.
    Detect { matched: usize },
    /// The whole stream is one SSE body (no HTTP framing).
    Bare,
    /// Reading a response head, kept whole (bounded by [`HEAD_LIMIT`]) to parse it at its end.
    Head { buf: Vec<u8> },
    /// Inside a body of `remaining` bytes.
    Length { sse: bool, remaining: u64 },
    /// Inside a chunked body.
    Chunked { sse: bool, state: Chunk },
    /// A body delimited by the connection closing.
    UntilClose { sse: bool },
    /// Something this scanner does not follow (an upgrade, a malformed or overlong head).
    Opaque,
}

/// Chunked transfer coding (RFC 9112 §7.1), read leniently: a test proxy should not be the
/// thing that rejects a server's framing.
#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// The hex size line; `ext` once a `;` started chunk extensions.
    Size { size: u64, ext: bool },
    /// Data bytes of the current chunk still to come.
    Data { remaining: u64 },
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk; `line_len` bytes of the current one seen.
    Trailer { line_len: usize },
}

const HTTP_PREFIX: &[u8] = b"HTTP/";

/// Scans server→client bytes for the truncation point of one connection.
#[derive(Debug)]
pub(super) struct SseScanner {
    framing: Framing,
    /// Absolute offset of the next byte fed.
    consumed: u64,
    /// Complete events seen so far (blocks with at least one field, ended by a blank line).
    events: u64,
    /// The number of complete events to let through before the partial one.
    keep: u64,
    /// Where the cut goes, once known.
    cut_at: Option<u64>,
    line: Line,
    /// Whether the current SSE block has a field line (comment-only blocks are not events: a
    /// keep-alive `: ping` must not count as one).
    block_has_field: bool,
    /// Whether the scanner is inside an SSE body right now.
    in_sse: bool,
}

/// The SSE line being read.
#[derive(Debug, Default)]
struct Line {
    /// Bytes in the line so far, terminator excluded.
    len: usize,
    /// Absolute offset of the line's first byte.
    start: u64,
    /// The first bytes of the line, enough to tell `data` and comments apart.
    head: [u8; 5],
    /// The previous byte was a CR, so an LF now is part of the same terminator.
    after_cr: bool,
    /// Absolute offsets of this line's bytes, recorded only once the cut is armed so that the
    /// middle of a chunked line maps back to a stream offset; bounded by the forwarder's hold
    /// limit, since those bytes are also held there.
    offsets: Vec<u64>,
}

impl Line {
    fn is_data(&self) -> bool {
        let head = &self.head[..self.len.min(5)];
        head == b"data" || head == b"data:"
    }

    fn is_comment(&self) -> bool {
        self.len > 0 && self.head[0] == b':'
    }

    fn reset(&mut self) {
        self.len = 0;
        self.offsets.clear();
    }
}

impl SseScanner {
    /// A scanner that lets `keep` complete events through and cuts inside the next one.
    pub(super) fn new(keep: u64) -> Self {
        Self {
            framing: Framing::Detect { matched: 0 },
            consumed: 0,
            events: 0,
            keep,
            cut_at: None,
            line: Line::default(),
            block_has_field: false,
            in_sse: false,
        }
    }

    /// The absolute offset to cut at, once known: the client gets the bytes before it.
    pub(super) fn cut_at(&self) -> Option<u64> {
        self.cut_at
    }

    /// How far the forwarder may send without passing a possible cut point.
    ///
    /// Once `keep` events are complete the cut lies in the current SSE line or later, so only
    /// that line is held back; bytes outside SSE bodies (other responses, framing) flow, which
    /// keeps a keep-alive connection from waiting on a cut that may never come.
    pub(super) fn safe_until(&self) -> u64 {
        match self.cut_at {
            Some(at) => at,
            None if self.armed() && self.in_sse && self.line.len > 0 => self.line.start,
            None => self.consumed,
        }
    }

    /// Cuts at `at` (the forwarder's hold limit was reached before the natural cut point).
    pub(super) fn force_cut(&mut self, at: u64) {
        self.cut_at.get_or_insert(at);
    }

    /// Complete events seen before the cut.
    pub(super) fn events(&self) -> u64 {
        self.events
    }

    fn armed(&self) -> bool {
        self.events >= self.keep
    }

    /// Scans `bytes`, which follow everything fed before.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.cut_at.is_some() {
                // Nothing after the cut reaches the client; stop scanning.
                return;
            }
            let offset = self.consumed;
            self.consumed += 1;
            self.framing_byte(b, offset);
        }
    }

    fn framing_byte(&mut self, b: u8, offset: u64) {
        match &mut self.framing {
            Framing::Detect { matched } => {
                if b == HTTP_PREFIX[*matched] {
                    *matched += 1;
                    if *matched == HTTP_PREFIX.len() {
                        let mut buf = Vec::with_capacity(256);
                        buf.extend_from_slice(HTTP_PREFIX);
                        self.framing = Framing::Head { buf };
                    }
                } else {
                    // Not HTTP: the bytes matched so far were SSE all along.
                    let matched = *matched;
                    self.framing = Framing::Bare;
                    self.start_sse_body();
                    let first = offset - matched as u64;
                    for (i, &p) in HTTP_PREFIX[..matched].iter().enumerate() {
                        self.sse_byte(p, first + i as u64);
                    }
                    self.sse_byte(b, offset);
                }
            }
            Framing::Bare => self.sse_byte(b, offset),
            Framing::Head { buf } => {
                buf.push(b);
                if buf.ends_with(b"\r\n\r\n") || buf.ends_with(b"\n\n") {
                    let head = std::mem::take(buf);
                    self.framing = parse_head(&head);
                    if matches!(
                        self.framing,
                        Framing::Length { sse: true, .. }
                            | Framing::Chunked { sse: true, .. }
                            | Framing::UntilClose { sse: true }
                    ) {
                        self.start_sse_body();
                    }
                } else if buf.len() > HEAD_LIMIT {
                    self.framing = Framing::Opaque;
                }
            }
            Framing::Length { sse, remaining } => {
                let sse = *sse;
                *remaining -= 1;
                if *remaining == 0 {
                    self.framing = Framing::Head { buf: Vec::new() };
                }
                if sse {
                    self.sse_byte(b, offset);
                }
                if matches!(self.framing, Framing::Head { .. }) {
                    self.in_sse = false;
                }
            }
            Framing::Chunked { sse, state } => {
                let sse = *sse;
                let mut body_byte = false;
                let mut done = false;
                match state {
                    Chunk::Size { size, ext } => match b {
                        b'\n' if *size == 0 => *state = Chunk::Trailer { line_len: 0 },
                        b'\n' => *state = Chunk::Data { remaining: *size },
                        b';' => *ext = true,
                        _ if *ext => {}
                        _ => {
                            if let Some(d) = (b as char).to_digit(16) {
                                match size.checked_mul(16) {
                                    Some(s) => *size = s + u64::from(d),
                                    None => {
                                        self.framing = Framing::Opaque;
                                        return;
                                    }
                                }
                            }
                            // Whitespace and the CR before LF are ignored.
                        }
                    },
                    Chunk::Data { remaining } => {
                        body_byte = true;
                        *remaining -= 1;
                        if *remaining == 0 {
                            *state = Chunk::DataEnd;
                        }
                    }
                    Chunk::DataEnd => {
                        if b == b'\n' {
                            *state = Chunk::Size {
                                size: 0,
                                ext: false,
                            };
                        }
                    }
                    Chunk::Trailer { line_len } => match b {
                        b'\n' if *line_len == 0 => done = true,
                        b'\n' => *line_len = 0,
                        b'\r' => {}
                        _ => *line_len += 1,
                    },
                }
                if body_byte && sse {
                    self.sse_byte(b, offset);
                }
                if done {
                    self.framing = Framing::Head { buf: Vec::new() };
                    self.in_sse = false;
                }
            }
            Framing::UntilClose { sse } => {
                if *sse {
                    self.sse_byte(b, offset);
                }
            }
            Framing::Opaque => {}
        }
    }

    /// A new SSE body starts: its line and block state start fresh (WHATWG: each response is
    /// its own event stream), but the event count runs on across the connection.
    fn start_sse_body(&mut self) {
        self.in_sse = true;
        self.line.reset();
        self.line.after_cr = false;
        self.block_has_field = false;
    }

    fn sse_byte(&mut self, b: u8, offset: u64) {
        let line = &mut self.line;
        if line.after_cr {
            line.after_cr = false;
            if b == b'\n' {
                // The LF of a CRLF: the line already ended at the CR.
                return;
            }
        }
        match b {
            b'\r' | b'\n' => {
                line.after_cr = b == b'\r';
                self.line_end(offset);
            }
            _ => {
                if line.len == 0 {
                    line.start = offset;
                }
                if line.len < line.head.len() {
                    line.head[line.len] = b;
                }
                line.len += 1;
                if self.events >= self.keep {
                    line.offsets.push(offset);
                }
            }
        }
    }

    /// A line ended with the terminator at `offset`.
    fn line_end(&mut self, offset: u64) {
        let armed = self.armed();
        if self.line.len == 0 {
            if self.block_has_field {
                if armed {
                    // The target event had no data line: leave off its blank line.
                    self.cut_at = Some(offset);
                } else {
                    self.events += 1;
                }
            }
            self.block_has_field = false;
        } else {
            if !self.line.is_comment() {
                self.block_has_field = true;
            }
            if armed && self.line.is_data() {
                // The middle of the first data line of the target event; `len >= 4`, so at
                // least `da` of it reaches the client.
                self.cut_at = Some(self.line.offsets[self.line.len / 2]);
            }
        }
        self.line.reset();
    }
}

/// The framing of the body that follows `head` (a complete response head).
fn parse_head(head: &[u8]) -> Framing {
    let Ok(text) = std::str::from_utf8(head) else {
        return Framing::Opaque;
    };
    let mut lines = text.lines();
    let status: Option<u16> = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok());
    let Some(status) = status else {
        return Framing::Opaque;
    };
    let mut sse = false;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-type") {
            sse = value
                .get(..17)
                .is_some_and(|v| v.eq_ignore_ascii_case("text/event-stream"));
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<u64>().ok();
        }
    }
    match status {
        // A protocol switch leaves HTTP behind.
        101 => Framing::Opaque,
        // Interim responses, 204 and 304 have no body (RFC 9112 §6.3).
        100..=199 | 204 | 304 => Framing::Head { buf: Vec::new() },
        _ if chunked => Framing::Chunked {
            sse,
            state: Chunk::Size {
                size: 0,
                ext: false,
            },
        },
        _ => match length {
            Some(0) => Framing::Head { buf: Vec::new() },
            Some(remaining) => Framing::Length { sse, remaining },
            None => Framing::UntilClose { sse },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::SseScanner;

    /// Feeds `stream` in pieces of `step` bytes and returns what the client would receive.
    fn truncated(stream: &[u8], keep: u64, step: usize) -> &[u8] {
        let mut scanner = SseScanner::new(keep);
        for piece in stream.chunks(step) {
            scanner.feed(piece);
            if let Some(at) = scanner.cut_at() {
                return &stream[..usize::try_from(at).unwrap()];
            }
        }
        stream
    }

    #[test]
    fn bare_lf_cuts_in_the_middle_of_the_data_line() {
        let s = b"id: 1\ndata: aaaa\n\nid: 2\ndata: bbbbbbbb\n\n";
        for step in [1, 3, 100] {
            // "data: bbbbbbbb" is 14 bytes: 7 reach the client.
            assert_eq!(
                truncated(s, 1, step),
                b"id: 1\ndata: aaaa\n\nid: 2\ndata: b"
            );
        }
    }

    #[test]
    fn crlf_and_lone_cr_end_lines() {
        let s = b"data: a\r\n\r\nid: 2\rdata: bbbb\r\rmore";
        for step in [1, 2, 100] {
            assert_eq!(truncated(s, 1, step), b"data: a\r\n\r\nid: 2\rdata:");
        }
    }

    #[test]
    fn comment_blocks_are_not_events() {
        let s = b": ping\n\ndata: a\n\n: ping\n\ndata: bbbb\n\n";
        assert_eq!(truncated(s, 1, 1), b": ping\n\ndata: a\n\n: ping\n\ndata:");
    }

    #[test]
    fn event_without_data_loses_its_blank_line() {
        let s = b"data: a\n\nid: 7\n\n";
        assert_eq!(truncated(s, 1, 1), b"data: a\n\nid: 7\n");
    }

    #[test]
    fn keep_zero_cuts_the_first_event() {
        assert_eq!(truncated(b"data: abcdef\n\n", 0, 1), b"data: ");
    }

    #[test]
    fn chunked_http_bodies_are_followed_across_responses() {
        let mut s = Vec::new();
        s.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\ndata: x\n\n\n\n\n\n\n");
        s.extend_from_slice(
            b"HTTP/1.1 200 OK\r\ncontent-type: Text/Event-Stream\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        s.extend_from_slice(b"a\r\ndata: one\n\r\n");
        s.extend_from_slice(b"6;x=y\r\n\ndata:\r\n");
        let tail = b"8\r\n six66\n\n\r\n0\r\n\r\n";
        let prefix_len = s.len();
        s.extend_from_slice(tail);
        // "data: one" ended one event; the next data line, "data: six66", is split over two
        // chunks; its 11 bytes put the cut before the 6th (the space), after the next chunk's
        // size line.
        let cut = truncated(&s, 1, 1);
        assert_eq!(cut.len(), prefix_len + 3);
        assert_eq!(truncated(&s, 1, 7), cut);
    }

    #[test]
    fn non_sse_body_is_not_scanned() {
        let s = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\ndata: x\n\nHTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(truncated(s, 0, 1), s);
    }
}
