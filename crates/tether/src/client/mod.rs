//! The MCP Streamable HTTP client whose streams survive disconnects.
//!
//! [`Client::connect`] initializes a session; [`Client::request`] POSTs a request and returns
//! a [`MessageStream`] of the server messages related to it and then its final response;
//! [`Client::server_messages`] opens the standalone GET stream; [`Client::close`] ends the
//! session with DELETE. Every SSE stream is driven by its own task around
//! [`tether_proto::reconnect::Reconnect`]: lost connections are resumed with GET +
//! `Last-Event-ID` on the timing of docs/CONTRACTS.md#client-reconnect-timing, replayed events are
//! deduplicated, and each message reaches the application once, in order. The commit rule (process,
//! then commit) is documented on [`MessageStream`] and in the `stream` module.
//!
//! Statuses: a 404 means the session is gone: the client re-initializes (same capabilities),
//! emits [`ClientEvent`]s, and fails the requests that were in flight with
//! [`Error::SessionExpired`] (a request whose POST itself got the 404 was never accepted and
//! is sent again once on the new session). 405 on a resume is [`Error::NotResumable`]; the
//! 400 for an unusable cursor is [`Error::EventsUnavailable`] naming the reason; 429 and 503
//! are retried after `Retry-After` (as a floor) within the reconnect budget; other 4xx are
//! [`Error::Status`].
//!
//! [`Client::call_tool`] wraps `tools/call` with a progress token ([`ToolCall`]); a
//! [`ResumptionToken`] saved by [`ClientConfig::on_resumption_token`] serializes, and
//! [`Client::resume`] in a new process reattaches to its session and stream and delivers the
//! rest of the call. [`Client::call_tool_as_task`] hands a task's [`TaskHandle`] to the
//! application instead (status, wait, events), and [`Client::resume_task`] rebuilds it.
//!
//! Server→client requests: `ping` is answered by the client itself; set
//! [`ClientConfig::request_handler`] (a [`ServerRequestHandler`]) to answer the others
//! (sampling, elicitation, …) on every stream, or answer them with [`Client::respond`].
//!
//! TLS is rustls with the *ring* provider: if the process has no default
//! [`rustls::crypto::CryptoProvider`], [`Client::connect`] installs ring's. Certificates are
//! checked against the platform's roots (on Linux the system CA bundle, or `SSL_CERT_FILE` /
//! `SSL_CERT_DIR` when set) plus [`ClientConfig::extra_root_certificates`]; a refused
//! certificate fails with [`Error::Tls`]. Without any platform roots (no CA bundle) only the
//! extra roots are trusted, with a warning. HTTP/2 is used when the server offers it in ALPN
//! (`h2`), HTTP/1.1 otherwise; plain `http://` is HTTP/1.1.
//!
//! Proxies come from the environment when the client is built (each [`Client::connect`]):
//! `HTTP_PROXY` for `http://` URLs (sent as absolute-URI requests), `HTTPS_PROXY` for
//! `https://` URLs (a `CONNECT` tunnel; TLS stays end to end), `ALL_PROXY` for both when the
//! specific one is unset, and `NO_PROXY` (comma-separated host names, domain suffixes, IP
//! addresses or CIDR ranges, or `*`) to bypass them. Each upper-case name wins over its
//! lower-case spelling when both are set; `HTTP_PROXY` is ignored when `REQUEST_METHOD` is
//! set (CGI). Loopback addresses are not bypassed implicitly: list them in `NO_PROXY`.

mod auth;
mod call;
mod config;
mod error;
mod events;
mod handle;
mod handler;
mod modern;
pub mod oauth;
mod resume;
mod retry;
mod session;
mod stream;
mod task_handle;
mod tasks;
pub(crate) mod tls;
mod token;
mod transport;

pub use auth::{AuthProvider, AuthRefusal, MAX_AUTH_RETRIES, StaticToken};
pub use call::{ToolCall, ToolCallItem};
pub use config::{
    ClientConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEDUP_WINDOW, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STREAM_BUFFER, MAX_ERROR_BODY, ProtocolChoice, TokenCallback,
};
pub use error::{AuthError, BoxError, Error};
pub use events::{ClientEvent, ClientEvents};
pub use handler::ServerRequestHandler;
pub use modern::MAX_INPUT_ROUNDS;
pub use session::Client;
pub use stream::MessageStream;
pub use task_handle::{TaskEvent, TaskEvents, TaskHandle, TaskState, TaskStatus};
pub use token::ResumptionToken;
