//! MCP protocol versions: which ones tether speaks, negotiation, the `MCP-Protocol-Version`
//! header rule, and every behaviour that depends on the version.
//!
//! The transport keys version-dependent behaviour off one negotiated [`ProtocolVersion`] and
//! the predicates on it ([`ProtocolVersion::allows_batches`] and friends), never off string
//! comparisons scattered through the server and client (docs/DESIGN.md#protocol-scope).
//!
//! Two eras share this enum: the *legacy* versions (2025-03-26 to 2025-11-25), which open a
//! session with `initialize`, and the *modern* 2026-07-28, whose requests are stateless and
//! carry their version in a `_meta` envelope ([`crate::modern`]). [`ProtocolVersion::is_modern`]
//! tells them apart; `initialize` only ever negotiates a legacy version.
//!
//! Not here: where the negotiated version is stored (the session), the `initialize` message
//! itself ([`crate::jsonrpc`]), and the 400 body built from [`UnsupportedVersion`] (the
//! server's error mapping). 2024-11-05 is the older HTTP+SSE transport and is not served by
//! this crate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An MCP protocol version tether supports, ordered by date.
///
/// Deliberately not `#[non_exhaustive]`: adding a version should break every exhaustive
/// `match` in the workspace so that each one is reviewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProtocolVersion {
    /// 2025-03-26: first Streamable HTTP version; JSON-RPC batches allowed.
    #[serde(rename = "2025-03-26")]
    V2025_03_26,
    /// 2025-06-18: batches removed, `MCP-Protocol-Version` header added.
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    /// 2025-11-25: priming events, server-initiated close ("polling"), 403 for bad `Origin`.
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    /// 2026-07-28: stateless. No `initialize`, sessions, GET stream or `Last-Event-ID`; every
    /// request carries the `_meta` envelope ([`crate::modern`]).
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every supported version, oldest first, in both eras; also the `data.supported` list of
    /// every "unsupported version" answer (docs/CONTRACTS.md#status-table) and the
    /// `supportedVersions` of `server/discover`.
    pub const SUPPORTED: [Self; 4] = [
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];

    /// The versions `initialize` can negotiate (the legacy era), oldest first.
    pub const LEGACY: [Self; 3] = [Self::V2025_03_26, Self::V2025_06_18, Self::V2025_11_25];

    /// The newest legacy version: what `initialize` offers when the client's is unsupported.
    pub const LATEST_LEGACY: Self = Self::V2025_11_25;

    /// The modern era's version.
    pub const MODERN: Self = Self::V2026_07_28;

    /// The version a request without `MCP-Protocol-Version` is assumed to speak when nothing
    /// else says (MCP 2025-06-18, "Protocol Version Header": "the server SHOULD assume protocol
    /// version 2025-03-26"; T52).
    pub const ASSUMED_WITHOUT_HEADER: Self = Self::V2025_03_26;

    /// The version's wire spelling, e.g. `"2025-06-18"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether this is a modern-era version: stateless requests with the `_meta` envelope, no
    /// sessions, no resumable streams.
    #[must_use]
    pub const fn is_modern(self) -> bool {
        matches!(self, Self::V2026_07_28)
    }

    /// The supported version spelled exactly `value`, or [`UnsupportedVersion`].
    pub fn parse(value: &str) -> Result<Self, UnsupportedVersion> {
        Self::SUPPORTED
            .into_iter()
            .find(|v| v.as_str() == value)
            .ok_or(UnsupportedVersion)
    }

    /// The legacy (session) version spelled exactly `value`: what `initialize` negotiates, a
    /// session's `MCP-Protocol-Version` may name, and a legacy client accepts.
    pub fn parse_legacy(value: &str) -> Result<Self, UnsupportedVersion> {
        Self::LEGACY
            .into_iter()
            .find(|v| v.as_str() == value)
            .ok_or(UnsupportedVersion)
    }

    /// Whether a POST body may be a JSON-RPC batch (array).
    ///
    /// Only 2025-03-26: "MCP implementations MAY support sending JSON-RPC batches, but MUST
    /// support receiving JSON-RPC batches"; 2025-06-18 made the body "a single JSON-RPC
    /// request, notification, or response" (T11, T96).
    #[must_use]
    pub const fn allows_batches(self) -> bool {
        matches!(self, Self::V2025_03_26)
    }

    /// Whether the server starts each SSE stream with a priming event (an id, empty data).
    ///
    /// From 2025-11-25 ("The server SHOULD immediately send an SSE event consisting of an event
    /// ID and an empty data field"). Older clients JSON-parse every event and break on empty
    /// data (go-sdk #768), so the session's negotiated version decides, not a later request's
    /// header (T71, T72; docs/CONTRACTS.md#negotiated-version).
    #[must_use]
    pub const fn sends_priming_events(self) -> bool {
        matches!(self, Self::V2025_11_25)
    }

    /// Whether the server may close an SSE connection before its stream ends and expect the
    /// client to come back with `Last-Event-ID` after the `retry` it sent (SEP-1699
    /// "polling", T74). From 2025-11-25, the version that also primes streams: a client of an
    /// older version is not expected to reconnect to a POST stream closed before its response.
    #[must_use]
    pub const fn allows_polling(self) -> bool {
        matches!(self, Self::V2025_11_25)
    }

    /// Whether an SSE response opens with a bare `retry` field (docs/CONTRACTS.md#eras).
    ///
    /// The modern era has no priming event to carry the server's reconnection advice, yet its
    /// clients do reconnect: a task stream is read again after the last seq it delivered, a
    /// request safe to repeat is sent again, a listen stream is reopened. Without a `retry`
    /// they fall back to their own backoff, which starts near a second; with it they come
    /// back when the operator's `--retry-ms` says.
    #[must_use]
    pub const fn opens_streams_with_retry(self) -> bool {
        self.is_modern()
    }

    /// Whether the client must send `MCP-Protocol-Version` on every request after
    /// initialization.
    ///
    /// From 2025-06-18 ("the client MUST include the `MCP-Protocol-Version: <protocol-version>`
    /// HTTP header on all subsequent requests"; T50). The server never rejects its absence
    /// (T52, see [`check_header`]).
    #[must_use]
    pub const fn requires_protocol_version_header(self) -> bool {
        matches!(
            self,
            Self::V2025_06_18 | Self::V2025_11_25 | Self::V2026_07_28
        )
    }

    /// Whether SSE events carry `id` fields a client can resume with. Not in the modern era:
    /// "streams are not resumable", and a dual-era client must not be invited to send a
    /// `Last-Event-ID` the server ignores.
    #[must_use]
    pub const fn sends_event_ids(self) -> bool {
        !self.is_modern()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProtocolVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Which eras a server serves, as its operator chose (`tether serve --eras`,
/// docs/CONTRACTS.md#eras). The default serves both on one endpoint.
///
/// An operator picks `Legacy` when its users run dual-era clients that make plain (non-task)
/// calls, which a cut cancels in the modern era but which resume in a 2025 session; `Modern`
/// for a server that holds no sessions at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Eras {
    /// 2025 sessions and 2026-07-28 requests on one endpoint.
    #[default]
    Both,
    /// 2025 sessions only: a 2026-07-28 request is answered as a 2025-only server answers it.
    Legacy,
    /// 2026-07-28 only: `initialize` is refused as an unsupported version.
    Modern,
}

impl Eras {
    /// Every value, in the order `--help` lists them.
    pub const ALL: [Self; 3] = [Self::Both, Self::Legacy, Self::Modern];

    /// The flag's spelling: `both`, `legacy` or `modern`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Both => "both",
            Self::Legacy => "legacy",
            Self::Modern => "modern",
        }
    }

    /// Whether `initialize` opens a 2025 session.
    #[must_use]
    pub const fn serves_legacy(self) -> bool {
        matches!(self, Self::Both | Self::Legacy)
    }

    /// Whether 2026-07-28 requests are served.
    #[must_use]
    pub const fn serves_modern(self) -> bool {
        matches!(self, Self::Both | Self::Modern)
    }

    /// The versions served, oldest first: the `data.supported` of every unsupported-version
    /// answer and the `supportedVersions` of `server/discover`.
    #[must_use]
    pub const fn versions(self) -> &'static [ProtocolVersion] {
        match self {
            Self::Both => &ProtocolVersion::SUPPORTED,
            Self::Legacy => &ProtocolVersion::LEGACY,
            Self::Modern => &[ProtocolVersion::MODERN],
        }
    }

    /// [`versions`](Self::versions), spelled.
    #[must_use]
    pub fn version_strings(self) -> Vec<&'static str> {
        self.versions().iter().map(|v| v.as_str()).collect()
    }
}

impl fmt::Display for Eras {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--eras` value other than `both`, `legacy` or `modern`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown eras {0:?}: expected both, legacy or modern")]
pub struct UnknownEras(pub String);

impl FromStr for Eras {
    type Err = UnknownEras;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|eras| eras.as_str() == s)
            .ok_or_else(|| UnknownEras(s.to_owned()))
    }
}

/// A version string tether does not support: malformed, too old (2024-11-05), or newer than
/// 2026-07-28.
///
/// The server answers 400 with `data.supported` = [`ProtocolVersion::SUPPORTED`]
/// (docs/CONTRACTS.md#status-table); the offending value is not kept, so it cannot be echoed back
/// to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unsupported protocol version")]
#[non_exhaustive]
pub struct UnsupportedVersion;

impl UnsupportedVersion {
    /// The versions to list in the error's `data.supported`.
    #[must_use]
    pub const fn supported(&self) -> &'static [ProtocolVersion] {
        &ProtocolVersion::SUPPORTED
    }
}

/// The version the server answers an `initialize` with.
///
/// MCP lifecycle (docs/PROTOCOL.md#initialize): the client's requested version if the server
/// supports it, otherwise another version the server supports, which "SHOULD be its latest". A
/// client that cannot speak the answer disconnects; that is its decision, not ours. Only a
/// legacy version can be negotiated: `initialize` does not exist in the modern era, so an
/// `initialize` asking for 2026-07-28 gets the newest legacy version.
#[must_use]
pub fn negotiate(requested: &str) -> ProtocolVersion {
    ProtocolVersion::parse_legacy(requested).unwrap_or(ProtocolVersion::LATEST_LEGACY)
}

/// Checks a request's `MCP-Protocol-Version` header (docs/CONTRACTS.md#negotiated-version, T51,
/// T52).
///
/// - Missing: `Ok(None)`. It counts as 2025-03-26 only for deciding whether it is supported,
///   which it is, so the request proceeds under the session's version.
/// - A supported legacy version: `Ok(Some(v))`. If `v` differs from the session's negotiated
///   version the request is still accepted, and *the session's version stays in force*
///   (priming, batches); `v` is for logging only.
/// - Anything else (including an empty value, and 2026-07-28, which no session speaks): `Err`,
///   which the server answers with 400.
///
/// `header` is the field value; surrounding spaces and tabs are ignored, as RFC 9110 §5.5
/// excludes them from a field value. On `initialize` the header is optional
/// (docs/PROTOCOL.md#open-9) and negotiation uses the body's `protocolVersion` via [`negotiate`].
pub fn check_header(header: Option<&str>) -> Result<Option<ProtocolVersion>, UnsupportedVersion> {
    match header {
        None => Ok(None),
        Some(value) => ProtocolVersion::parse_legacy(value.trim_matches([' ', '\t'])).map(Some),
    }
}
