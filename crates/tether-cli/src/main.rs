//! The `tether` command: a thin layer over the `tether` library.
//!
//! `main` parses arguments, sets up logging (stderr, `RUST_LOG`) and OpenTelemetry export
//! (`telemetry`, when the `OTEL_*` variables ask for it) and maps the outcome to the
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
mod telemetry;

use std::{fmt, process::ExitCode};

use clap::{CommandFactory as _, Parser, Subcommand};

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
    // `tether serve --config FILE`: the file's `[serve]` table becomes flags the command
    // line does not give, before the real parse.
    let (argv, expansion) =
        match serve::config_file::expand_argv(std::env::args_os().collect(), Cli::command()) {
            Ok(expanded) => expanded,
            Err(error) => {
                eprintln!("tether: {error}");
                return ExitCode::from(EXIT_USAGE);
            }
        };
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => match expansion.locate(&error) {
            Some(located) => {
                eprintln!("tether: {located}");
                return ExitCode::from(EXIT_USAGE);
            }
            None => error.exit(),
        },
    };
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
        Command::Serve(args) => exporting("info", || serve::run(*args)),
        Command::Call(args) => exporting("warn", || call::run(*args)),
        Command::Connect(args) => exporting("warn", || connect::run(*args)),
        #[cfg(feature = "conformance")]
        Command::ConformanceClient(args) => {
            telemetry::logging("warn");
            conformance_client::run(args)
        }
        Command::Auth(args) => {
            telemetry::logging("warn");
            auth::run(*args)
        }
        Command::Bench(args) => {
            telemetry::logging("warn");
            tether_cli::bench::run(*args)
        }
    }
}

/// Runs a subcommand with logging (`default` unless `RUST_LOG` says otherwise) and, when the
/// `OTEL_*` variables ask for it, OpenTelemetry export, flushed before returning.
fn exporting(
    default: &str,
    subcommand: impl FnOnce() -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let telemetry = telemetry::init(default)?;
    let outcome = subcommand();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    outcome
}
