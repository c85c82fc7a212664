//! The resumption token: what a stream's commits hand to
//! [`ClientConfig::on_resumption_token`](super::ClientConfig::on_resumption_token), so that a
//! new process can reattach with [`Client::resume`](super::Client::resume) where this one
//! stopped.

use serde::{Deserialize, Serialize};
use tether_proto::jsonrpc::RequestId;
use tether_proto::version::ProtocolVersion;

/// A persistable resumption point: enough to resume a stream with GET + `Last-Event-ID` in
/// the same session after the process restarted ([`Client::resume`](super::Client::resume)).
/// Produced after each commit: when the application asks for the next message or acks one
/// ([`MessageStream::ack`](super::MessageStream::ack)), never merely on receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumptionToken {
    /// The session's `Mcp-Session-Id`, if the server uses sessions.
    pub session_id: Option<String>,
    /// The negotiated protocol version.
    pub protocol_version: Option<ProtocolVersion>,
    /// The request whose response stream this is; `None` for the standalone stream.
    pub request_id: Option<RequestId>,
    /// The last committed event id (opaque; empty if the server cleared it). For a call that
    /// runs as a task, the last committed task event seq, in decimal (empty before the first).
    pub last_event_id: String,
    /// The task the call runs as (2026-07-28 era): [`Client::resume`](super::Client::resume)
    /// then follows the task after `last_event_id` instead of resuming a stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}
