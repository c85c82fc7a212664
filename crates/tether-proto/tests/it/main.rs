//! The integration tests of `tether-proto`, one binary: a module per area.
//!
//! Property-test failures are saved by proptest's default (`SourceParallel`): next to this
//! binary's directory, as `tests/proptest-regressions/<module>.txt`.

mod backoff;
mod headers;
mod ids;
mod jsonrpc;
mod reconnect;
