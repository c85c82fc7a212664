//! The WHATWG server-sent events wire format (`text/event-stream`), both directions,
//! without I/O.
//!
//! - [`Decoder`]: feed bytes as they arrive, pull [`Item`]s (events, comments, `retry`,
//!   ID-only blocks). Follows WHATWG HTML "Parsing an event stream" and "Interpreting an
//!   event stream" to the letter, with named [`Limits`] on line and event size.
//! - [`EventFrame`], [`encode_comment`]: write events and keep-alive comments as
//!   [`bytes::Bytes`], or append them to a reused [`bytes::BytesMut`].
//! - [`classify_response`]: whether an HTTP response may be read as an event stream,
//!   should stop reconnection, or fails the connection.
//!
//! This crate owns no sockets, timers, or async runtime; it does not know MCP, JSON-RPC or
//! how event IDs are formed. The tether client and server drive it.

mod decode;
mod encode;
mod event;
mod response;

pub use decode::{DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES, DecodeError, Decoder, Limits};
pub use encode::{EncodeError, EventFrame, encode_comment, encode_comment_into};
pub use event::{Event, Item};
pub use response::{FailReason, ResponseAction, classify_response};
