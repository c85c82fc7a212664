//! Test support for tether: the fault proxy, process and peer launchers and the raw SSE stream
//! reader that every integration test shares, so that no test writes its own.
//!
//! It is only ever a dev-dependency of the other crates.
//!
//! - [`chaos`]: the chaos runner: many concurrent `count` calls through the fault proxy, every
//!   delivered sequence checked, a seeded report.
//! - [`conformance`]: the expected-failures files and output tidying the conformance-suite
//!   tests share.
//! - [`proxy`]: a loopback TCP proxy that injects faults (cuts, resets, stalls, slowness,
//!   refusals, truncation mid-event) under a seed, and counts what it did.
//! - [`launcher`]: starts `tether serve` or a peer as a child process, learns its URL from the
//!   ready line, kills and restarts it on the same port, always reaps it.
//! - [`redis`]: a private `redis-server` on a free loopback port.
//! - [`peers`]: where `scripts/peers.sh` put the pinned SDK peers, and how to start them.
//! - [`raw`]: a minimal HTTP/1.1 + SSE reader that does not use tether's client.

pub mod chaos;
pub mod conformance;
pub mod launcher;
pub mod peers;
pub mod proxy;
pub mod raw;
pub mod redis;
