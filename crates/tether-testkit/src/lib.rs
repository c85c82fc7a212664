//! Test support for tether: the fault proxy, process and peer launchers and the raw SSE stream
//! reader that every integration test shares, so that no test writes its own.
//!
//! It is only ever a dev-dependency of the other crates. Its contents arrive with the test-kit
//! issue; this crate exists now so that the workspace layout is the one `CONTRACTS.md` pins.
