//! The `tether` command: a thin layer over the `tether` library.
//!
//! `main` parses arguments, sets up logging (stderr, `RUST_LOG`) and maps the outcome to the
//! exit codes that docs/CONTRACTS.md#exit-codes pins: 0 success, 2 usage error (including a flag
//! value clap cannot check), 1 any other failure; `call` returns its own codes (3 transport
//! failure, 4 session expired, 5 authorization failed). Each subcommand lives in its own module and calls the library.

mod auth;
mod call;
#[cfg(feature = "conformance")]
mod conformance_client;
mod connect;
mod remote;
mod serve;

use std::{fmt, io::IsTerminal as _, process::ExitCode};

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Exit code for a usage error (docs/CONTRACTS.md#exit-codes).
pub(crate) const EXIT_USAGE: u8 = 2;

/// MCP Streamable HTTP whose streams survive disconnects.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the demo MCP server, or a stdio MCP server, over resumable Streamable HTTP.
    Serve(Box<serve::ServeArgs>),
    /// Call one tool and show its progress, resuming across connection cuts.
    Call(Box<call::CallArgs>),
    /// Bridge stdio to a remote MCP server, surviving cuts and restarts.
    Connect(Box<connect::ConnectArgs>),
    /// Sign in to a protected MCP server ahead of time, sign out, or list the sign-ins.
    Auth(Box<auth::AuthArgs>),
    /// Measure an MCP server (tether or a peer): throughput, fanout, resume, idle, store.
    Bench(Box<tether_cli::bench::BenchArgs>),
    /// Play the client side of one conformance-suite scenario (`MCP_CONFORMANCE_SCENARIO`).
    #[cfg(feature = "conformance")]
    #[command(hide = true)]
    ConformanceClient(conformance_client::ConformanceClientArgs),
}

/// A usage error found after parsing (a flag combination or value clap cannot check): printed
/// like any error, but exits with [`EXIT_USAGE`] as clap's own errors do.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tether: {error:#}");
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => {
            init_logging("info");
            serve::run(*args)
        }
        Command::Call(args) => {
            init_logging("warn");
            call::run(*args)
        }
        Command::Connect(args) => {
            init_logging("warn");
            connect::run(*args)
        }
        #[cfg(feature = "conformance")]
        Command::ConformanceClient(args) => {
            init_logging("warn");
            conformance_client::run(args)
        }
        Command::Auth(args) => {
            init_logging("warn");
            auth::run(*args)
        }
        Command::Bench(args) => {
            init_logging("warn");
            tether_cli::bench::run(*args)
        }
    }
}

/// Sends `tracing` output to stderr (stdout carries only what a subcommand promises, such as
/// `serve`'s ready line), filtered by `RUST_LOG`, else by `default`.
fn init_logging(default: &str) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .unwrap_or_else(|error| {
                eprintln!("tether: ignoring RUST_LOG={directives:?}: {error}");
                EnvFilter::new(default)
            }),
        _ => EnvFilter::new(default),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person watching; log files and test rings get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
