//! `tether conformance-client URL` (hidden): the command line around the conformance suite's
//! client scenarios ([`tether_conformance::client`]). The suite names the scenario in
//! `MCP_CONFORMANCE_SCENARIO`, the protocol version in `MCP_CONFORMANCE_PROTOCOL_VERSION` and
//! a scenario's context in `MCP_CONFORMANCE_CONTEXT`. Exit codes: 0 the scenario ran to its end, 1 it failed (the
//! error is on stderr), 2 an unknown or missing scenario.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use tether_conformance::client::{
    CONTEXT_VAR, PROTOCOL_VAR, Run, SCENARIO_TIMEOUT, SCENARIO_VAR, Scenario, play,
};

use crate::UsageError;

/// Arguments of `tether conformance-client`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConformanceClientArgs {
    /// The mock server's MCP endpoint, as the suite passes it.
    url: String,
}

/// Runs `tether conformance-client`.
pub(crate) fn run(args: ConformanceClientArgs) -> anyhow::Result<ExitCode> {
    let name = std::env::var(SCENARIO_VAR).map_err(|_| {
        UsageError(format!(
            "{SCENARIO_VAR} is not set; it names one of: {}",
            Scenario::names()
        ))
    })?;
    let scenario = Scenario::from_name(&name).ok_or_else(|| {
        UsageError(format!(
            "unknown conformance scenario {name:?}; known: {}",
            Scenario::names()
        ))
    })?;
    let run = Run::from_env(
        std::env::var(PROTOCOL_VAR).ok().as_deref(),
        std::env::var(CONTEXT_VAR).ok().as_deref(),
    )
    .map_err(|error| UsageError(format!("{error:#}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let outcome = runtime.block_on(async {
        tokio::time::timeout(SCENARIO_TIMEOUT, play(scenario, &args.url, &run))
            .await
            .with_context(|| format!("scenario {name} did not finish in {SCENARIO_TIMEOUT:?}"))?
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome.with_context(|| format!("scenario {name}"))?;
    println!("scenario {name}: done");
    Ok(ExitCode::SUCCESS)
}
