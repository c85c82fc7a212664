//! The `tether` command: a thin layer over the `tether` library.
//!
//! `main` parses arguments and maps the outcome to the exit codes that `CONTRACTS.md` pins;
//! each subcommand will live in its own module and call the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for a usage error (CONTRACTS.md).
const EXIT_USAGE: u8 = 2;

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
    Serve(Passthrough),
    /// Call one tool and show its progress, resuming across connection cuts.
    Call(Passthrough),
    /// Bridge stdio to a remote MCP server.
    Connect(Passthrough),
    /// Measure tether against its peers.
    Bench(Passthrough),
}

/// Arguments of a subcommand that has not landed yet, accepted so that the error says which.
#[derive(Debug, clap::Args)]
struct Passthrough {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tether: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let name = match cli.command {
        Command::Serve(_) => "serve",
        Command::Call(_) => "call",
        Command::Connect(_) => "connect",
        Command::Bench(_) => "bench",
    };
    eprintln!("tether: `tether {name}` is not implemented yet; see the README for what has landed");
    Ok(ExitCode::from(EXIT_USAGE))
}
