//! The integration tests of `tether`, one binary: a module per area. Which modules are built
//! follows the crate's features, so one `cargo test` chooses the stores and sides it tests:
//! the SQLite and Redis store suites need `sqlite` / `redis` (and `testing`, which exposes the
//! shared store suite), the server's tests `server`, the client's `client` and `server` (they
//! run against an in-process server). `support` holds what several modules share, among it
//! the one in-process [`support::server::TestServer`].

#[cfg(feature = "server")]
mod support;

#[cfg(feature = "sqlite")]
mod chaos_model;
#[cfg(feature = "server")]
mod demo;
#[cfg(all(feature = "server", feature = "sqlite", feature = "client"))]
mod example_axum_app;
#[cfg(all(
    feature = "rmcp",
    feature = "sqlite",
    feature = "redis",
    feature = "client"
))]
mod example_rmcp_server;
#[cfg(all(feature = "rmcp", feature = "sqlite"))]
mod rmcp_adapter;

#[cfg(all(feature = "client", feature = "server"))]
mod client_call;
#[cfg(all(feature = "client", feature = "server"))]
mod client_errors;
#[cfg(all(feature = "client", feature = "server"))]
mod client_hostile;
#[cfg(all(feature = "client", feature = "server"))]
mod client_modern;
#[cfg(all(feature = "client", feature = "server"))]
mod client_peers;
#[cfg(all(feature = "client", feature = "server"))]
mod client_resend;
#[cfg(all(feature = "client", feature = "server"))]
mod client_resume;
#[cfg(all(feature = "client", feature = "server"))]
mod client_session;
#[cfg(all(feature = "client", feature = "server"))]
mod client_tls;

#[cfg(feature = "server")]
mod resume_cuts;
#[cfg(feature = "server")]
mod resume_polling;
#[cfg(feature = "server")]
mod resume_repost;
#[cfg(feature = "server")]
mod resume_scope;

#[cfg(all(feature = "server", feature = "client"))]
mod server_builder;
#[cfg(feature = "server")]
mod server_count;
#[cfg(feature = "server")]
mod server_hostile;
#[cfg(feature = "server")]
mod server_metrics;
#[cfg(all(feature = "server", feature = "sqlite"))]
mod server_modern;
#[cfg(feature = "server")]
mod server_requests;
#[cfg(feature = "server")]
mod server_slow_reader;
#[cfg(feature = "server")]
mod server_status;
#[cfg(all(
    feature = "server",
    feature = "sqlite",
    feature = "redis",
    feature = "testing"
))]
mod task_streams;

mod store_memory;
#[cfg(all(feature = "redis", feature = "testing"))]
mod store_redis;
#[cfg(all(feature = "sqlite", feature = "testing"))]
mod store_sqlite;
