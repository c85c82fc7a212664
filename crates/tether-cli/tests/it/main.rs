//! The integration tests of `tether-cli`, one binary: a module per command or area. They run
//! the `tether` binary (`CARGO_BIN_EXE_tether`) as a child process; `fixtures/` holds the
//! scripts they start under it.
//!
//! The `conformance_suite_*` tests run the MCP conformance suite; `scripts/test.sh` runs them
//! in a stage of their own (`--test it -- conformance_suite_`) and skips them elsewhere.

mod auth;
mod bench;
mod call;
mod chaos;
mod conformance_client;
mod conformance_server;
mod connect;
mod eras;
mod federation;
mod gateway_faults;
mod gateway_modern;
mod gateway_peers;
mod oauth;
mod restart;
mod sdk_matrix;
mod sdk_matrix_modern;
mod serve;
mod telemetry;
mod two_nodes;
