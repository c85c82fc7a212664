//! MCP logging vocabulary: the eight log levels of `logging/setLevel` and
//! `notifications/message` (the RFC 5424 severities), ordered so that `level >= minimum`
//! filters.
//!
//! It does not own sending log messages (the server's request context does) or the session's
//! current minimum (the server's session state).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A log message's severity (MCP `logging`, the RFC 5424 levels), ordered from least to most
/// severe so that `level >= minimum` filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum LogLevel {
    /// Detailed debugging information.
    Debug = 0,
    /// General informational messages.
    Info = 1,
    /// Normal but significant events.
    Notice = 2,
    /// Warning conditions.
    Warning = 3,
    /// Error conditions.
    Error = 4,
    /// Critical conditions.
    Critical = 5,
    /// Action must be taken immediately.
    Alert = 6,
    /// The system is unusable.
    Emergency = 7,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [Self; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    /// The minimum level of a session before the client sends `logging/setLevel`: everything
    /// is sent, as the TypeScript and Python SDK servers do; MCP leaves the default to the
    /// server, and a client that wants less says so.
    pub const DEFAULT: Self = Self::Debug;

    /// The level's MCP spelling, e.g. `"warning"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    /// The level at `index` in [`Self::ALL`] (its `as u8` value), if any: for keeping a level
    /// in an atomic.
    #[must_use]
    pub fn from_index(index: u8) -> Option<Self> {
        Self::ALL.get(usize::from(index)).copied()
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of MCP's eight log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown log level")]
#[non_exhaustive]
pub struct UnknownLogLevel;

impl FromStr for LogLevel {
    type Err = UnknownLogLevel;

    /// Parses the MCP spelling exactly (lowercase, as the schema's enum has it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|level| level.as_str() == s)
            .ok_or(UnknownLogLevel)
    }
}
