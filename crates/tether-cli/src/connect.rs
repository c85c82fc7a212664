//! `tether connect URL`: a stdio MCP server that is really a remote Streamable HTTP server,
//! reached with tether's client, so a desktop assistant that launches stdio servers gets one
//! that survives cuts, stalls and server restarts without noticing the network.
//!
//! stdin carries the local client's JSON-RPC, one message per line; stdout carries the
//! server's messages and nothing else (logs go to stderr). What happens in between is
//! [`tether::bridge`]'s (its docs say how each message is carried, in both eras). End of
//! stdin closes the session (DELETE) and exits 0. `--protocol` chooses the era as
//! `tether call` does (default `auto`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use tether::client::{ClientConfig, ProtocolChoice};
use tokio::io::BufReader;

use crate::auth::OAuthArgs;
use crate::{UsageError, remote};

/// Arguments of `tether connect`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConnectArgs {
    /// The MCP endpoint, e.g. https://example.com/mcp.
    url: String,
    /// An extra header on every request, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Send `Authorization: Bearer` with the token read from this file.
    #[arg(long, value_name = "F")]
    bearer_token_file: Option<PathBuf>,
    /// Give a stream up as dead after this long without a byte (not even a keep-alive), and
    /// resume it.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    idle_timeout_secs: u64,
    /// Give up reconnecting a stream after this long (its request then fails).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    reconnect_budget_secs: u64,
    /// The protocol era: `legacy`, `auto` or a version such as `2026-07-28`.
    #[arg(long, value_name = "ERA", default_value = "auto")]
    protocol: ProtocolChoice,
    /// OAuth, when the server asks for it and no `--bearer-token-file` is given.
    #[command(flatten)]
    oauth: OAuthArgs,
}

/// Runs `tether connect` until stdin ends.
pub(crate) fn run(args: ConnectArgs) -> anyhow::Result<ExitCode> {
    let mut config = {
        let mut config = ClientConfig::default();
        config.headers = remote::parse_headers(&args.headers)?;
        config.protocol = args.protocol;
        config
    };
    config.auth = Some(
        args.oauth
            .auth_for(&args.url, args.bearer_token_file.as_deref())?,
    );
    config.reconnect.idle_timeout = Duration::from_secs(args.idle_timeout_secs.max(1));
    config.reconnect.budget.max_elapsed = Duration::from_secs(args.reconnect_budget_secs.max(1));
    if !args.url.starts_with("http://") && !args.url.starts_with("https://") {
        return Err(UsageError(format!("{:?} is not an http(s) URL", args.url)).into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let stdin = BufReader::new(tokio::io::stdin());
    runtime.block_on(tether::bridge::run(
        &args.url,
        config,
        stdin,
        tokio::io::stdout(),
    ));
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(ExitCode::SUCCESS)
}
