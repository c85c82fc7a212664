//! The integration tests of `tether-sse`, one binary: a module per area.
//!
//! Property-test failures are saved by proptest's default (`SourceParallel`): next to this
//! binary's directory, as `tests/proptest-regressions/<module>.txt`.

mod decoder_api;
mod limits;
mod properties;
mod whatwg;
