//! The library side of the `tether` command: what the binary does that other programs may
//! want to run too. So far that is [`bench`], the load generator behind `tether bench`; the
//! binary's other subcommands stay modules of `main.rs`, thin layers over the `tether`
//! library itself.

pub mod bench;
