//! The sans-IO core of MCP Streamable HTTP.
//!
//! Everything here is pure: no sockets, no clock, no async runtime. Time is passed in as
//! [`std::time::Instant`] values and the randomness decisions use (backoff jitter) through an
//! injected source, so the logic is tested with virtual time and replayed exactly; generated
//! ids alone take their 128 bits from the operating system's CSPRNG. The I/O layers in the `tether` crate are thin
//! drivers around these types.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages as MCP uses them, with error classification.
//! - [`version`]: MCP protocol versions and negotiation.
//! - [`headers`]: the transport's HTTP headers, typed and validated.
//! - [`ids`]: session, stream and event ids (`<stream>:<seq>`).
//! - [`backoff`]: exponential backoff with full jitter, `retry`, `Retry-After` and budgets.
//! - [`reconnect`]: the per-stream reconnect state machine.
//! - [`sse_writer`]: the server's SSE writer decisions (priming, `retry`, polling closes,
//!   keep-alives, completion), per connection.
//! - [`logging`]: MCP's log levels.
//! - [`modern`]: the 2026-07-28 era's envelope, request headers, era choice and error codes.

pub mod backoff;
pub mod headers;
pub mod ids;
pub mod jsonrpc;
pub mod logging;
pub mod modern;
pub mod reconnect;
pub mod sse_writer;
pub mod version;
