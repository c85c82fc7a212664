//! Session, stream, task and event ids: generation, strict parsing and the `<stream>:<seq>` format.
//!
//! This module owns the shapes pinned in docs/CONTRACTS.md#event-ids: a [`StreamId`] is 22
//! characters of base64url carrying 128 random bits, an [`EventId`] is `<stream>:<seq>` with a
//! canonical decimal `seq` counting from 0 (the priming event). Because the stream is spelled
//! inside every event id, the server can find a `Last-Event-ID`'s stream without other state
//! (T65). [`SessionId`] is generated the same way but parsed leniently, since peers' servers
//! issue other shapes (UUIDs, JWTs) and the spec only asks for visible ASCII (T35).
//!
//! It does not own what an id *means*: whether a stream exists, which session and principal own
//! it, or whether its events have expired is the event store's business. Reading the
//! `Last-Event-ID` header (whitespace rules) lives in [`crate::headers`]. Clients treat event
//! ids as opaque strings and never parse them with this module.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Number of random bytes behind a generated [`SessionId`] or [`StreamId`].
///
/// 128 bits: the spec asks for "cryptographically secure" session ids and T36 for at least 128
/// bits, and stream ids must stay unique across restarts and nodes without coordination.
const RANDOM_BYTES: usize = 16;

/// Fills a fresh buffer from the operating system's CSPRNG.
///
/// Failure means the OS cannot provide randomness at all; there is no sensible fallback (a
/// predictable id is a session-hijacking hole), so callers panic, as `uuid::Uuid::new_v4` does.
fn random_bytes() -> [u8; RANDOM_BYTES] {
    let mut bytes = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    bytes
}

/// Encodes 16 bytes as 22 characters of unpadded base64url.
fn encode_22(bytes: &[u8; RANDOM_BYTES]) -> [u8; StreamId::LEN] {
    let mut out = [0u8; StreamId::LEN];
    // ceil(16 * 8 / 6) = 22: the buffer is exactly the encoded length, so this cannot fail.
    let written = URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut out)
        .expect("22 bytes hold the unpadded base64 of 16 bytes");
    debug_assert_eq!(written, StreamId::LEN);
    out
}

/// The 6-bit value of a base64url (RFC 4648 §5) character, or `None` outside the alphabet.
const fn base64url_value(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// SessionId

/// An `Mcp-Session-Id` value.
///
/// Generated ids are 128 bits from the OS CSPRNG in unpadded base64url (22 characters), which
/// satisfies "globally unique and cryptographically secure" and T35/T36. Parsed ids may have
/// any shape a peer chose, as long as it is 1..=[`SessionId::MAX_LEN`] bytes of visible ASCII
/// (0x21–0x7E), the only constraint the spec puts on them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    /// Longest session id accepted, in bytes.
    ///
    /// The spec offers "a JWT" as an example id, and signed JWTs with a few claims run to
    /// several hundred bytes, so 1 KiB leaves room for real peers. The bound exists because the
    /// id is kept as a map key, written into resumption tokens and logs, and echoed on every
    /// request; it is far below the 8–16 KiB header limits of common HTTP stacks, so a value
    /// rejected here is not one an HTTP layer would already have refused.
    pub const MAX_LEN: usize = 1024;

    /// A fresh session id: 128 bits from the OS CSPRNG, 22 characters of base64url.
    ///
    /// # Panics
    ///
    /// If the operating system cannot supply random bytes (no fallback is safe).
    #[must_use]
    pub fn generate() -> Self {
        Self::from_random_bytes(random_bytes())
    }

    /// The session id whose 128 random bits are `bytes` (for injected randomness in tests).
    #[must_use]
    pub fn from_random_bytes(bytes: [u8; 16]) -> Self {
        // Same encoding as a stream id; only the parsing rules differ.
        Self(StreamId::from_random_bytes(bytes).as_str().to_owned())
    }

    /// Validates a received id: 1..=[`Self::MAX_LEN`] bytes, each visible ASCII 0x21–0x7E.
    ///
    /// Takes the header's field value as the HTTP layer delivers it (leading and trailing
    /// whitespace are not part of a field value, RFC 9110 §5.5); a space anywhere is an error.
    pub fn parse(value: &str) -> Result<Self, SessionIdError> {
        if value.is_empty() {
            return Err(SessionIdError::Empty);
        }
        if value.len() > Self::MAX_LEN {
            return Err(SessionIdError::TooLong);
        }
        // Checking bytes rejects every non-ASCII character too: UTF-8 multibyte sequences are
        // all >= 0x80.
        if !value.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
            return Err(SessionIdError::InvalidCharacter);
        }
        Ok(Self(value.to_owned()))
    }

    /// The id as sent in the header.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = SessionIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for SessionId {
    type Error = SessionIdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        // Validate in place rather than through `parse` to keep the caller's allocation.
        Self::parse(&value)?;
        Ok(Self(value))
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> Self {
        id.0
    }
}

/// Why a received `Mcp-Session-Id` value was refused (the server answers 400,
/// docs/CONTRACTS.md#status-table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionIdError {
    /// The value is empty.
    #[error("empty session id")]
    Empty,
    /// The value is longer than [`SessionId::MAX_LEN`] bytes.
    #[error("session id too long")]
    TooLong,
    /// A byte outside visible ASCII 0x21–0x7E (space, control, non-ASCII).
    #[error("session id has a character outside visible ascii")]
    InvalidCharacter,
}

// ---------------------------------------------------------------------------------------------
// StreamId

/// The id of one server→client SSE stream: 128 random bits as 22 characters of base64url.
///
/// Random rather than counted so that ids stay unique across server restarts and across the
/// nodes of a cluster sharing one event store, with no coordination. Stored as its ASCII form,
/// so it is `Copy`, displays without allocating, and orders like the string (as text keys do in
/// SQLite and Redis).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StreamId([u8; StreamId::LEN]);

impl StreamId {
    /// Length of every stream id, in characters: unpadded base64 of 16 bytes.
    pub const LEN: usize = 22;

    /// A fresh stream id from the OS CSPRNG.
    ///
    /// # Panics
    ///
    /// If the operating system cannot supply random bytes.
    #[must_use]
    pub fn generate() -> Self {
        Self::from_random_bytes(random_bytes())
    }

    /// The stream id whose 128 bits are `bytes` (for injected randomness in tests).
    #[must_use]
    pub fn from_random_bytes(bytes: [u8; 16]) -> Self {
        Self(encode_22(&bytes))
    }

    /// Strict parse: exactly 22 characters of the base64url alphabet, in canonical form.
    ///
    /// 22 characters carry 132 bits for 128 bits of data, so the last character's low 4 bits
    /// are padding and must be zero (the last character is one of `A`, `Q`, `g`, `w`).
    /// Otherwise two strings would decode to the same bytes, and a resume could name a stream
    /// with a spelling the store has never seen. The check is equivalent to "decoding and
    /// re-encoding gives back the input".
    pub fn parse(value: &str) -> Result<Self, StreamIdError> {
        let bytes: [u8; Self::LEN] = value
            .as_bytes()
            .try_into()
            .map_err(|_| StreamIdError::Length)?;
        let mut last = 0;
        for &b in &bytes {
            last = base64url_value(b).ok_or(StreamIdError::Alphabet)?;
        }
        if last & 0b1111 != 0 {
            return Err(StreamIdError::NonCanonical);
        }
        Ok(Self(bytes))
    }

    /// The id's 22 characters.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Invariant: every constructor stores base64url characters, which are ASCII.
        std::str::from_utf8(&self.0).expect("stream ids are ASCII")
    }
}

/// A task's id (the tasks extension, SEP-2663): 128 random bits as 22 characters of
/// base64url, unguessable as the extension requires and safe in the `Mcp-Name` header. It has a
/// stream id's shape because a task's events are the event log's stream of the same id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(StreamId);

impl TaskId {
    /// A fresh task id from the OS CSPRNG.
    ///
    /// # Panics
    ///
    /// If the operating system cannot supply random bytes.
    #[must_use]
    pub fn generate() -> Self {
        Self(StreamId::generate())
    }

    /// Strict parse, as [`StreamId::parse`].
    ///
    /// # Errors
    ///
    /// As for [`StreamId::parse`].
    pub fn parse(value: &str) -> Result<Self, StreamIdError> {
        StreamId::parse(value).map(Self)
    }

    /// The id's 22 characters.
    #[must_use]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The stream that holds the task's events.
    #[must_use]
    pub const fn stream(self) -> StreamId {
        self.0
    }
}

/// The task whose events are this stream.
impl From<StreamId> for TaskId {
    fn from(stream: StreamId) -> Self {
        Self(stream)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TaskId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The derived form would print 22 byte values; the string is what logs need.
        f.debug_tuple("StreamId").field(&self.as_str()).finish()
    }
}

impl FromStr for StreamId {
    type Err = StreamIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for StreamId {
    type Error = StreamIdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<StreamId> for String {
    fn from(id: StreamId) -> Self {
        id.as_str().to_owned()
    }
}

/// Why a string is not a [`StreamId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamIdError {
    /// Not exactly [`StreamId::LEN`] bytes.
    #[error("stream id is not 22 characters")]
    Length,
    /// A character outside the base64url alphabet `A-Z a-z 0-9 - _`.
    #[error("stream id has a character outside base64url")]
    Alphabet,
    /// The last character has non-zero padding bits (not the canonical encoding).
    #[error("stream id is not canonical base64url")]
    NonCanonical,
}

// ---------------------------------------------------------------------------------------------
// EventId

/// An SSE event id as tether's server issues it: `<stream>:<seq>`.
///
/// `seq` counts from [`EventId::PRIMING_SEQ`] within its stream; a resume from `n` replays
/// `seq > n` of `stream` (docs/CONTRACTS.md#event-ids). The text form is canonical:
/// [`EventId::from_str`] accepts exactly the strings [`Display`](fmt::Display) produces, so an id
/// maps to one string and back, and store keys never alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventId {
    /// The stream this event belongs to.
    pub stream: StreamId,
    /// Position in the stream, from 0.
    pub seq: u64,
}

impl EventId {
    /// Sequence number of a stream's priming event (an id with empty data, MCP 2025-11-25),
    /// which is stored like any other event so that a cut right after it is resumable.
    pub const PRIMING_SEQ: u64 = 0;

    /// Longest display form, in bytes: 22 (stream) + 1 (`:`) + 20 (digits of `u64::MAX`).
    pub const MAX_LEN: usize = StreamId::LEN + 1 + 20;

    /// The event `seq` of `stream`.
    #[must_use]
    pub const fn new(stream: StreamId, seq: u64) -> Self {
        Self { stream, seq }
    }

    /// The priming event of `stream` (seq [`Self::PRIMING_SEQ`]).
    #[must_use]
    pub const fn priming(stream: StreamId) -> Self {
        Self::new(stream, Self::PRIMING_SEQ)
    }

    /// The next event of the same stream, or `None` if `seq` is `u64::MAX`.
    #[must_use]
    pub const fn next(self) -> Option<Self> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(Self::new(self.stream, seq)),
            None => None,
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.stream, self.seq)
    }
}

impl FromStr for EventId {
    type Err = EventIdError;

    /// Strict parse of `<stream>:<seq>`; nothing is trimmed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(EventIdError::Empty);
        }
        let (stream, seq) = s.split_once(':').ok_or(EventIdError::MissingSeparator)?;
        if seq.contains(':') {
            return Err(EventIdError::ExtraSeparator);
        }
        let stream = StreamId::parse(stream)?;
        Ok(Self::new(stream, parse_seq(seq)?))
    }
}

/// Canonical decimal `u64`: ASCII digits only, no sign, no leading zero except `0` itself.
///
/// `u64::from_str` alone would accept `+7` and `007`, which display as `7`: two spellings of
/// one cursor.
fn parse_seq(seq: &str) -> Result<u64, EventIdError> {
    if seq.is_empty() {
        return Err(EventIdError::EmptySeq);
    }
    if !seq.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EventIdError::SeqNotDecimal);
    }
    if seq.len() > 1 && seq.starts_with('0') {
        return Err(EventIdError::SeqLeadingZero);
    }
    // Only digits remain, so the one way `parse` can fail is overflow.
    seq.parse().map_err(|_| EventIdError::SeqOverflow)
}

impl TryFrom<String> for EventId {
    type Error = EventIdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<EventId> for String {
    fn from(id: EventId) -> Self {
        id.to_string()
    }
}

/// Why a string is not an [`EventId`].
///
/// The server answers every variant the same way (400, `data.reason = "malformed"`,
/// docs/CONTRACTS.md#last-event-id-row); the variants exist for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventIdError {
    /// The string is empty.
    #[error("empty event id")]
    Empty,
    /// No `:` between stream and sequence number.
    #[error("event id has no ':'")]
    MissingSeparator,
    /// More than one `:`.
    #[error("event id has more than one ':'")]
    ExtraSeparator,
    /// The part before `:` is not a valid stream id.
    #[error("event id has a bad stream id")]
    Stream(#[from] StreamIdError),
    /// Nothing after `:`.
    #[error("event id has an empty sequence number")]
    EmptySeq,
    /// The sequence number has a character other than an ASCII digit (sign, space, letter).
    #[error("event id sequence number is not decimal digits")]
    SeqNotDecimal,
    /// The sequence number has a leading zero (`007`), a second spelling of `7`.
    #[error("event id sequence number has a leading zero")]
    SeqLeadingZero,
    /// The sequence number does not fit in a `u64`.
    #[error("event id sequence number overflows u64")]
    SeqOverflow,
}
