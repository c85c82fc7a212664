//! The transport's HTTP headers: names, media types, `Accept` and `Content-Type` matching,
//! and reading `Last-Event-ID`.
//!
//! Everything here works on header *values* as `&str`, already split from their names by an
//! HTTP library; header names are case-insensitive (RFC 9110 §5.1, T46) and that matching is
//! the HTTP layer's job, so the name constants are lowercase, as `http::HeaderName::from_static`
//! requires, with the spec's spellings in [`spelled`] for messages. This module does not own
//! the `MCP-Protocol-Version` rule ([`crate::version::check_header`]), the `Mcp-Session-Id`
//! value rules ([`crate::ids::SessionId`]), nor the statuses a failed check maps to (the
//! server's error mapping, docs/CONTRACTS.md#status-table). Multiple field lines of one header must
//! be joined with `", "` by the caller before they reach this module (RFC 9110 §5.3).

use crate::ids::{EventId, EventIdError};

/// `Mcp-Session-Id`: the session, issued on the `initialize` response (lowercase form).
pub const MCP_SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`: the negotiated version, on requests after `initialize` (lowercase).
pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Last-Event-ID`: the cursor a resume GET carries (lowercase form).
pub const LAST_EVENT_ID: &str = "last-event-id";
/// `Tether-Node`: which node served a response (docs/CONTRACTS.md#tether-serve, lowercase form).
pub const TETHER_NODE: &str = "tether-node";

/// The header names as the spec and docs/CONTRACTS.md spell them, for error messages and logs.
///
/// On the wire any case is the same header (T46); HTTP/2 and HTTP/3 even require lowercase.
pub mod spelled {
    /// `Mcp-Session-Id` (2025-11-25 spells it `MCP-Session-Id`; same header).
    pub const MCP_SESSION_ID: &str = "Mcp-Session-Id";
    /// `MCP-Protocol-Version`.
    pub const MCP_PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
    /// `Last-Event-ID`.
    pub const LAST_EVENT_ID: &str = "Last-Event-ID";
    /// `Tether-Node`.
    pub const TETHER_NODE: &str = "Tether-Node";
}

/// `application/json`: a single JSON-RPC message (or a 2025-03-26 batch).
pub const APPLICATION_JSON: &str = "application/json";
/// `text/event-stream`: an SSE stream.
pub const TEXT_EVENT_STREAM: &str = "text/event-stream";

/// The `Accept` value a client sends on every POST: both answers it must handle (T19).
pub const CLIENT_POST_ACCEPT: &str = "application/json, text/event-stream";
/// The `Accept` value a client sends on a GET, fresh or resuming (T26, T86).
pub const CLIENT_GET_ACCEPT: &str = "text/event-stream";

/// HTTP optional whitespace (RFC 9110 §5.6.3): spaces and horizontal tabs.
fn trim_ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

// ---------------------------------------------------------------------------------------------
// Last-Event-ID

/// Reads a resume request's `Last-Event-ID` value as one of this server's [`EventId`]s.
///
/// Leading and trailing spaces and tabs are trimmed: RFC 9110 §5.5 says they are not part of a
/// field value, HTTP libraries differ in whether they already stripped them, and an event id
/// can never contain whitespace, so no valid id is lost. Everything else is the strict
/// [`EventId`] grammar; any error is answered 400 with `data.reason = "malformed"`
/// (docs/CONTRACTS.md#last-event-id-row). An empty value (a client whose last event id string was
/// empty) is malformed too, since a well-behaved client omits the header then (T87).
pub fn parse_last_event_id(value: &str) -> Result<EventId, EventIdError> {
    trim_ows(value).parse()
}

/// The `Last-Event-ID` value a client sends to resume after the event id `last`, or `None`
/// when the header must be omitted.
///
/// Clients treat ids as opaque (peers issue other shapes), so `last` is sent back exactly as
/// received. It is omitted when empty (WHATWG: no header for an empty last event id; T87) or
/// when it cannot be a header value: a control character other than tab, or surrounding
/// whitespace that HTTP would strip and so change the id. Non-ASCII ids are sent as their
/// UTF-8 bytes (RFC 9110 `obs-text`), which needs the HTTP library's bytes constructor.
#[must_use]
pub fn client_last_event_id(last: &str) -> Option<&str> {
    let sendable = !last.is_empty()
        && trim_ows(last).len() == last.len()
        && !last.chars().any(|c| c.is_control() && c != '\t');
    sendable.then_some(last)
}

// ---------------------------------------------------------------------------------------------
// Content-Type

/// Splits a media type value into its `type/subtype` essence, dropping parameters and OWS.
fn essence(value: &str) -> &str {
    let before_params = value.split_once(';').map_or(value, |(essence, _)| essence);
    trim_ows(before_params)
}

/// Whether a `Content-Type` value is `application/json`, with any parameters.
///
/// Case-insensitive (RFC 9110 §8.3.1), surrounding whitespace tolerated; `charset` and other
/// parameters are ignored (JSON is UTF-8 anyway, RFC 8259 §8.1). Not JSON for this purpose:
/// `application/json-patch+json`, `application/problem+json`, `text/json` (T6, T20).
#[must_use]
pub fn is_json_content_type(value: &str) -> bool {
    essence(value).eq_ignore_ascii_case(APPLICATION_JSON)
}

/// Whether a `Content-Type` value is `text/event-stream`, with any parameters (T6, T25).
#[must_use]
pub fn is_event_stream_content_type(value: &str) -> bool {
    essence(value).eq_ignore_ascii_case(TEXT_EVENT_STREAM)
}

/// The two bodies a Streamable HTTP request can be answered with (S-POST-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseKind {
    /// One JSON-RPC message, `application/json`.
    Json,
    /// An SSE stream, `text/event-stream`.
    EventStream,
}

impl ResponseKind {
    /// The media type this kind is sent with.
    #[must_use]
    pub const fn media_type(self) -> &'static str {
        match self {
            Self::Json => APPLICATION_JSON,
            Self::EventStream => TEXT_EVENT_STREAM,
        }
    }

    /// Classifies a response's `Content-Type` (client side, T6, T21): `None` for anything
    /// other than the two media types the spec allows.
    #[must_use]
    pub fn from_content_type(value: &str) -> Option<Self> {
        if is_json_content_type(value) {
            Some(Self::Json)
        } else if is_event_stream_content_type(value) {
            Some(Self::EventStream)
        } else {
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Accept

/// Whether the server may send an answer of `kind` to a request with this `Accept` value.
///
/// The lenient server rule (docs/PROTOCOL.md#open-10): the answer is acceptable when `Accept`
/// accepts its media type, by name or through `*/*` or `type/*`; a client need not list both
/// types. A missing header accepts anything. Relative preferences (q-values other than 0) do
/// not change the server's choice of JSON or SSE; q=0 excludes. The caller answers 406 on
/// `false`.
#[must_use]
pub fn server_accepts(accept: Option<&str>, kind: ResponseKind) -> bool {
    Accept::new(accept).accepts(kind.media_type())
}

/// A request's `Accept` header, matched per RFC 9110 §12.5.1.
///
/// Parsing is lazy and allocation-free: [`Accept::accepts`] scans the value. Rules, where the
/// RFC leaves room:
///
/// - Missing header: everything is acceptable (RFC 9110 §12.5.1). An empty or all-whitespace
///   value is treated the same, as "no preference": it is what HTTP libraries send when a
///   caller clears the header, and a lenient server should not 406 it.
/// - Media ranges: `type/subtype`, `type/*`, `*/*`, case-insensitive. The most specific range
///   that matches decides; among equally specific ranges the highest weight wins.
/// - Parameters other than `q` are ignored, so `application/json;charset=utf-8` matches
///   `application/json` (leniency; the RFC would make it more specific and not match a
///   parameterless type). A malformed parameter is ignored too.
/// - `q`: `0`..`1` with up to three decimals; `q=0` means "not acceptable". A range whose
///   weight does not parse (`q=2`, `q=high`) is skipped as if absent: guessing a weight could
///   turn an intended refusal into acceptance.
/// - A malformed range (no `/`, a non-token type, `*/json`) is skipped; a present header with
///   no usable range accepts nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept<'a> {
    /// `None` when any media type is acceptable.
    value: Option<&'a str>,
}

impl<'a> Accept<'a> {
    /// Wraps a request's `Accept` field value (`None` when the header is missing).
    #[must_use]
    pub fn new(header: Option<&'a str>) -> Self {
        Self {
            value: header.filter(|v| !trim_ows(v).is_empty()),
        }
    }

    /// Whether `media_type` (`type/subtype`, parameters ignored) is acceptable.
    #[must_use]
    pub fn accepts(&self, media_type: &str) -> bool {
        self.quality(media_type) > 0
    }

    /// The weight, in thousandths, the header gives `media_type`: 1000 when any type is
    /// acceptable, 0 when not acceptable.
    fn quality(&self, media_type: &str) -> u16 {
        let Some(value) = self.value else {
            return QVALUE_ONE;
        };
        let Some((ty, subtype)) = split_media_type(essence(media_type)) else {
            return 0;
        };
        // (specificity, weight) of the best match so far.
        let mut best: Option<(u8, u16)> = None;
        for element in split_unquoted(value, b',') {
            let Some(range) = MediaRange::parse(element) else {
                continue;
            };
            let Some(specificity) = range.specificity_for(ty, subtype) else {
                continue;
            };
            best = match best {
                Some((s, q)) if s > specificity || (s == specificity && q >= range.q) => {
                    Some((s, q))
                }
                _ => Some((specificity, range.q)),
            };
        }
        best.map_or(0, |(_, q)| q)
    }
}

/// A weight of 1, in thousandths.
const QVALUE_ONE: u16 = 1000;

/// One element of an `Accept` list.
struct MediaRange<'a> {
    ty: &'a str,
    subtype: &'a str,
    /// Weight in thousandths, 0..=1000.
    q: u16,
}

impl<'a> MediaRange<'a> {
    /// Parses `type/subtype *( OWS ";" OWS parameter )`; `None` if the range must be skipped.
    fn parse(element: &'a str) -> Option<Self> {
        let mut parts = split_unquoted(element, b';');
        let (ty, subtype) = split_media_type(trim_ows(parts.next()?))?;
        if ty == "*" && subtype != "*" {
            return None;
        }
        let mut q = QVALUE_ONE;
        for param in parts {
            let Some((name, value)) = param.split_once('=') else {
                continue;
            };
            if trim_ows(name).eq_ignore_ascii_case("q") {
                q = parse_qvalue(trim_ows(value))?;
                // RFC 9110: the weight ends the media range's parameters.
                break;
            }
        }
        Some(Self { ty, subtype, q })
    }

    /// How specifically this range matches `ty/subtype` (2 exact, 1 `type/*`, 0 `*/*`), or
    /// `None` if it does not match.
    fn specificity_for(&self, ty: &str, subtype: &str) -> Option<u8> {
        if self.ty == "*" {
            Some(0)
        } else if !self.ty.eq_ignore_ascii_case(ty) {
            None
        } else if self.subtype == "*" {
            Some(1)
        } else if self.subtype.eq_ignore_ascii_case(subtype) {
            Some(2)
        } else {
            None
        }
    }
}

/// Splits `type/subtype` into two RFC 9110 tokens.
fn split_media_type(essence: &str) -> Option<(&str, &str)> {
    let (ty, subtype) = essence.split_once('/')?;
    (is_token(ty) && is_token(subtype)).then_some((ty, subtype))
}

/// RFC 9110 §5.6.2 `token`: one or more `tchar`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// RFC 9110 §12.4.2 `qvalue`: `0[.ddd]` or `1[.000]`, in thousandths.
fn parse_qvalue(s: &str) -> Option<u16> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Right-pad to three digits: "0.5" is 500 thousandths.
    let mut thousandths = 0u16;
    for i in 0..3 {
        let digit = frac.as_bytes().get(i).map_or(0, |b| b - b'0');
        thousandths = thousandths * 10 + u16::from(digit);
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(QVALUE_ONE),
        _ => None,
    }
}

/// Splits `s` at `sep` bytes that are outside quoted strings (RFC 9110 §5.6.4), so that
/// `a;x="1,2", b` splits at the last comma only. `sep` must be ASCII.
fn split_unquoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let current = rest?;
        let mut in_quotes = false;
        let mut escaped = false;
        for (i, b) in current.bytes().enumerate() {
            if escaped {
                escaped = false;
            } else if in_quotes && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = !in_quotes;
            } else if b == sep && !in_quotes {
                // `sep` is ASCII, so `i` and `i + 1` are char boundaries.
                rest = Some(&current[i + 1..]);
                return Some(&current[..i]);
            }
        }
        rest = None;
        Some(current)
    })
}
