//! The integration tests of `tether-testkit`, one binary: a module per part of the kit.

mod launcher;
mod peers;
mod proxy;
mod raw;
mod redis;
