//! The stdio gateway: any stdio MCP server behind tether's resumable Streamable HTTP.
//!
//! [`StdioGateway`] is a [`Handler`](crate::server::Handler) that runs one child process per legacy session (started
//! by `initialize`, stopped by DELETE, idle expiry, a failure or shutdown) and relays JSON-RPC
//! between the session and the child's stdin and stdout, one message per line. What the
//! child says goes through the request contexts, so it is stored before it is sent and a
//! client that loses its connection resumes without a gap, although the child knows nothing
//! of HTTP.
//!
//! Routing of the child's output: a response goes to the request with its id (the client's
//! ids are passed through unchanged: ids are unique per session and direction); a progress
//! notification to the request that carries its `progressToken`; any other notification and
//! any server→client request to the one request in flight if there is exactly one, otherwise
//! to the session's standalone stream. The client's answers to server→client requests are
//! written back to the child under the child's own ids; cancellations of client requests
//! become `notifications/cancelled` to the child.
//!
//! 2026-07-28 clients have no session: their requests go to one child per principal, started
//! on the principal's first request (`server/discover` included, which answers with the
//! child's own identity and capabilities) with the legacy handshake at the latest 2025
//! version, declaring elicitation, sampling and roots, and reused. Their ids and progress
//! tokens need not be unique across a principal's clients, so the child sees the gateway's
//! (`tether-m<n>`, `tether-p<n>`) and the client its own. A server→client request the child
//! sends while serving one becomes that request's `input_required` result (the client's retry
//! runs the call again, and the child's question is then answered at once from the retry) or,
//! in a task, the task's `inputRequests`, answered by `tasks/update`; every `tools/call` may
//! run as a task. What has no 2026-07-28 equivalent is answered, refused or dropped: the
//! child's `ping` is answered by the gateway, a request other than the three questions gets
//! -32601, a question outside any client request (or beside several) gets an error, a
//! notification outside any request is dropped (docs/CONTRACTS.md#gateway-modern). A principal's child that dies fails its requests in
//! flight, and the next request starts a new one.
//!
//! The rmcp adapter's children are servers in this process instead (`Launch::InProcess`),
//! handed messages as values over a bounded, ordered pipe (`in_process`) and routed by the
//! same code; a legacy session that outlived its in-process server (a restart) gets a new one
//! on its next request, started with the client's own handshake as the session store kept it.
//!
//! [`FederatedGateway`] puts many stdio servers behind one endpoint, one `StdioGateway` per
//! upstream (`federation`); there a session's child that dies is started again on the
//! session's next request instead of ending the session.
//!
//! A child that exits, writes a line that is not a JSON-RPC message (or longer than
//! [`GatewayConfig::max_line_bytes`]) or does not answer `initialize` in time fails its
//! session: the requests in flight get JSON-RPC errors and the session answers 404 from then
//! on, with a log line saying why. A child that floods its output is slowed to the store's
//! pace: the next line is read only after the previous message was stored. The child's stderr
//! goes to the log, tagged with its session. Children run in their own process group, which
//! is killed when the session ends; if tether itself dies, their stdin reaches end-of-file.

mod child;
mod config;
mod federation;
#[cfg_attr(
    not(feature = "rmcp"),
    expect(
        dead_code,
        reason = "only the rmcp adapter serves on the in-process pipe"
    )
)]
mod in_process;
mod merge;
#[cfg(feature = "client")]
mod remote;
mod stdio_gateway;

#[cfg(feature = "rmcp")]
pub(crate) use in_process::InProcessServer;
#[cfg(feature = "rmcp")]
pub(crate) use in_process::{PipeClosed, ServerInput, ServerOutput, ServerPipe};

#[cfg(feature = "rmcp")]
pub(crate) use config::Launch;
#[cfg(feature = "client")]
pub use config::RemoteConfig;
pub use config::{
    ChildScope, DEFAULT_INITIALIZE_TIMEOUT, DEFAULT_MAX_LINE_BYTES, DEFAULT_SEPARATOR,
    FederationConfig, FederationError, GatewayConfig, NameFilter, UpstreamConfig, UpstreamServer,
};
pub use federation::{FederatedGateway, Reloaded};
#[cfg(feature = "client")]
pub use remote::{REMOTE_CONNECT_WITHIN, REMOTE_DOWN_FOR, RemoteGateway};
pub use stdio_gateway::StdioGateway;
