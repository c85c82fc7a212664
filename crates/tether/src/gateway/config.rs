//! What a gateway runs and how ([`GatewayConfig`]), what its children are (`Launch`),
//! and the bounds every child shares.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use super::in_process::InProcessServer;

/// Default for [`GatewayConfig::initialize_timeout`]: generous for a server started through
/// `npx` or `uvx` on a cold cache.
pub const DEFAULT_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default for [`GatewayConfig::max_line_bytes`]: the SSE event limit of `tether-sse`, so any
/// message the child may write can also be sent.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long a child may take to exit after its stdin closed before its process group is
/// killed.
pub(super) const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What the gateway's children are.
#[derive(Clone)]
pub(crate) enum Launch {
    /// A process running [`GatewayConfig::program`], spoken to over its stdio.
    Process,
    /// A server in this process, handed messages as values (`in_process`).
    #[cfg_attr(
        not(feature = "rmcp"),
        expect(
            dead_code,
            reason = "only the rmcp adapter launches in-process servers"
        )
    )]
    InProcess(Arc<dyn InProcessServer>),
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Process => "Process",
            Self::InProcess(_) => "InProcess",
        })
    }
}

/// The server→client requests a 2026-07-28 client answers, as `input_required` questions.
pub(super) const QUESTION_METHODS: [&str; 3] =
    ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Messages queued for a child's input before writers wait.
pub(super) const STDIN_QUEUE: usize = 64;

/// What the gateway runs and how.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// The stdio server's program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long the child may take to answer `initialize`.
    pub initialize_timeout: Duration,
    /// The longest line the child may write to stdout.
    pub max_line_bytes: usize,
}

impl GatewayConfig {
    /// Runs `program` with `args`, with the default limits.
    pub fn new(program: impl Into<OsString>, args: impl IntoIterator<Item = OsString>) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().collect(),
            initialize_timeout: DEFAULT_INITIALIZE_TIMEOUT,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}
