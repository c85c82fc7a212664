//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, server mode)
//! against `tether serve --demo conformance`: with 0.1.16, every active scenario and the
//! pending `server-sse-polling` on its own; with 0.2.0-alpha.12, the frozen requirement sets of
//! both eras (`--requirements 2026-07-28` and `--requirements 2025-11-25`), where every scored
//! scenario must pass with nothing excused (the `Not scored` ones, such as the tasks
//! extension's, are shown and not counted): each against the server of both eras, and each
//! against a server of its era alone (`--eras modern`, `--eras legacy`).
//!
//! Each test starts its own server (`--store memory`, port 0), runs the suite's CLI with
//! `-o <tempdir>` so that its result files never land in the checkout, prints the suite's
//! summary lines, and fails on any failed check that `interop/conformance/
//! server-expected-failures.txt` does not excuse with a reason. For
//! [`NEVER_EXPECTED`] scenarios nothing is excused and a WARNING is a failure too.
//!
//! How the suite reports (read from its CLI, version 0.1.16): a suite run prints `=== SUMMARY
//! ===`, one `✓|✗ <scenario>: P passed, F failed` line per scenario and `Total: P passed, F
//! failed`, and exits 1 on any failure; a single scenario prints its checks and `Passed: P/N,
//! F failed, W warnings`. Neither summary shows which checks warned, so the verdict comes from
//! the result files: one directory `server-<scenario>-<timestamp>` per scenario run, holding
//! `checks.json`, the list of checks with their `status` (`SUCCESS`, `FAILURE`, `WARNING`,
//! `INFO`). The printed summary is cross-checked against them, and a scenario the summary
//! lists as failed without a result file (it crashed) counts as failed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use tether_testkit::conformance::{self, Expected, strip_ansi, tail};
use tether_testkit::launcher::{ServerProcess, ServerSpec};
use tether_testkit::peers;

/// Bound on one suite run. The active suite takes about two seconds on an idle machine (a few
/// scenarios wait 100–200 ms on purpose); the margin is for a loaded two-core machine running
/// other tests and Node's start-up.
const SUITE_TIMEOUT: Duration = Duration::from_secs(300);

/// The expected-failures file, relative to the workspace root.
const EXPECTED_FAILURES: &str = "interop/conformance/server-expected-failures.txt";

/// Scenarios that may never be excused, and whose WARNINGs are failures: they are
/// what tether is for (resumable streams) and what keeps a local server safe.
const NEVER_EXPECTED: [&str; 4] = [
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "server-stateless",
];

/// One check of one scenario, as `checks.json` has it.
#[derive(Debug, Clone)]
struct Check {
    id: String,
    status: String,
    message: String,
}

/// Everything one suite invocation reported.
#[derive(Debug, Default)]
struct SuiteRun {
    /// The checks of each scenario that wrote a result file.
    checks: BTreeMap<String, Vec<Check>>,
    /// `(passed, failed)` of each scenario from the printed summary (suite runs only).
    summary: BTreeMap<String, (usize, usize)>,
    /// `(passed, failed)` of the printed `Total:` line (suite runs only).
    total: Option<(usize, usize)>,
    /// The printed scenario count of a suite run (`Running active suite (N scenarios)`).
    announced: Option<usize>,
    /// The scenarios a `--requirements` run reports under `Not scored for <revision>`: run,
    /// shown, never counted (0.2.0-alpha.12).
    not_scored: std::collections::BTreeSet<String>,
}

/// A check that counts against the server.
#[derive(Debug)]
struct Failure {
    scenario: String,
    check: String,
    status: String,
    message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} / {}: {} {}",
            self.scenario, self.check, self.status, self.message
        )
    }
}

/// Reads and validates the expected-failures file: every entry has a reason and none names a
/// [`NEVER_EXPECTED`] scenario.
fn expected_failures() -> anyhow::Result<Vec<Expected>> {
    conformance::read_expected(EXPECTED_FAILURES, never_expected)
}

fn parse_expected(text: &str) -> anyhow::Result<Vec<Expected>> {
    conformance::parse_expected(text, never_expected)
}

fn never_expected(name: &str) -> bool {
    NEVER_EXPECTED.contains(&name)
}

/// `tether serve --demo conformance --store memory --eras ERAS --bind 127.0.0.1:0`.
async fn start_server(eras: &str) -> anyhow::Result<ServerProcess> {
    let server = ServerSpec::tether_serve()?
        .args(["--demo", "conformance", "--store", "memory", "--eras", eras])
        .start()
        .await?;
    Ok(server)
}

/// Runs `conformance server --url URL ARGS -o <tempdir>` against a fresh server, prints the
/// suite's summary lines and reads its result files.
async fn run_suite(args: &[&str]) -> anyhow::Result<SuiteRun> {
    run_suite_with(peers::conformance()?, args).await
}

/// [`run_suite`] with the given suite (0.1.16, or [`peers::conformance_2026`]), against a
/// server of both eras.
async fn run_suite_with(suite: peers::PeerCommand, args: &[&str]) -> anyhow::Result<SuiteRun> {
    run_suite_on("both", suite, args).await
}

/// [`run_suite_with`] against `tether serve --eras ERAS`.
async fn run_suite_on(
    eras: &str,
    suite: peers::PeerCommand,
    args: &[&str],
) -> anyhow::Result<SuiteRun> {
    let mut server = start_server(eras).await?;
    let results = tempfile::Builder::new()
        .prefix("tether-conformance-")
        .tempdir()?;
    let mut command_args = vec!["server", "--url", server.url()];
    command_args.extend_from_slice(args);
    let results_arg = results
        .path()
        .to_str()
        .context("temp dir path is not UTF-8")?;
    command_args.extend_from_slice(&["-o", results_arg]);
    let command = suite.with_args(command_args);
    println!("$ {command}");
    let output = command.run(SUITE_TIMEOUT).await?;
    let printed = format!("{}\n{}", output.stdout, output.stderr);

    let mut run = SuiteRun::default();
    let mut in_not_scored = false;
    for line in printed.lines().map(strip_ansi) {
        let line = line.trim();
        if line.starts_with("Not scored for ") {
            println!("{line}");
            in_not_scored = true;
            continue;
        }
        if in_not_scored
            && let Some(rest) = line.strip_prefix("✓ ").or_else(|| line.strip_prefix("✗ "))
            && let Some((scenario, _reason)) = rest.split_once(" (")
        {
            println!("not scored: {line}");
            run.not_scored.insert(scenario.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("Total: ") {
            println!("{line}");
            run.total = Some(passed_failed(rest).with_context(|| format!("{line:?}"))?);
        } else if let Some(rest) = line.strip_prefix("✓ ").or_else(|| line.strip_prefix("✗ ")) {
            println!("{line}");
            let (scenario, counts) = rest
                .split_once(": ")
                .with_context(|| format!("summary line {line:?}"))?;
            let counts = passed_failed(counts).with_context(|| format!("{line:?}"))?;
            run.summary.insert(scenario.to_owned(), counts);
        } else if line.starts_with("Passed: ")
            || (line.starts_with("Running ") && line.contains(" suite ("))
        {
            println!("{line}");
            if let Some(count) = line
                .split_once(" suite (")
                .and_then(|(_, rest)| rest.split_once(' '))
                .and_then(|(n, _)| n.parse().ok())
            {
                run.announced = Some(count);
            }
        } else if line.contains("] ")
            && ["SUCCESS", "WARNING", "FAILURE"]
                .iter()
                .any(|status| line.contains(status))
        {
            // A single scenario's check lines with a verdict (not the INFO ones).
            println!("{line}");
        }
    }
    run.checks = read_results(results.path())?;
    let logs = server.logs();
    server.terminate().await.context("stopping tether serve")?;

    // The printed summary and the result files must tell the same story.
    for (scenario, &(passed, failed)) in &run.summary {
        if let Some(checks) = run.checks.get(scenario) {
            let count = |status: &str| checks.iter().filter(|c| c.status == status).count();
            ensure!(
                (count("SUCCESS"), count("FAILURE")) == (passed, failed),
                "{scenario}: summary says {passed} passed, {failed} failed, checks.json {checks:?}"
            );
        } else {
            ensure!(failed > 0, "{scenario}: in the summary but no result file");
        }
    }
    if let Some((passed, failed)) = run.total {
        let sum = run
            .summary
            .values()
            .fold((0, 0), |(p, f), &(dp, df)| (p + dp, f + df));
        ensure!(
            sum == (passed, failed),
            "Total {passed}/{failed} vs lines {sum:?}"
        );
    }
    if let Some(announced) = run.announced {
        ensure!(
            run.summary.len() == announced,
            "{announced} scenarios announced, {} summarized",
            run.summary.len()
        );
    }
    let any_failure = run.summary.values().any(|&(_, failed)| failed > 0)
        || run
            .checks
            .values()
            .flatten()
            .any(|check| check.status == "FAILURE");
    ensure!(
        output.status.success() || any_failure,
        "the suite exited {} without a failed check\nstdout:\n{}\nstderr:\n{}",
        output.status,
        output.stdout,
        output.stderr
    );
    if any_failure {
        println!("tether serve log (tail):\n{}", tail(&logs, 80));
    }
    Ok(run)
}

/// `P passed, F failed[, …]`.
fn passed_failed(text: &str) -> anyhow::Result<(usize, usize)> {
    let mut parts = text.split(", ");
    let mut number = |word: &str| -> anyhow::Result<usize> {
        let part = parts.next().context("too few counts")?;
        let n = part
            .strip_suffix(word)
            .with_context(|| format!("{part:?} is not `N{word}`"))?;
        Ok(n.trim().parse()?)
    };
    Ok((number(" passed")?, number(" failed")?))
}

/// The checks of every scenario result directory under `dir`.
fn read_results(dir: &Path) -> anyhow::Result<BTreeMap<String, Vec<Check>>> {
    let mut results = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let scenario = scenario_of(&name).with_context(|| format!("result dir {name:?}"))?;
        let path = entry.path().join("checks.json");
        let json: Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        let checks = json
            .as_array()
            .with_context(|| format!("{} is not a list", path.display()))?
            .iter()
            .map(|check| Check {
                id: check["id"].as_str().unwrap_or("?").to_owned(),
                status: check["status"].as_str().unwrap_or("?").to_owned(),
                message: check["errorMessage"]
                    .as_str()
                    .or_else(|| check["description"].as_str())
                    .unwrap_or("")
                    .to_owned(),
            })
            .collect();
        ensure!(
            results.insert(scenario.to_owned(), checks).is_none(),
            "{scenario} has two result dirs"
        );
    }
    Ok(results)
}

/// The scenario of a result dir `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`.
fn scenario_of(dir_name: &str) -> Option<&str> {
    let rest = dir_name.strip_prefix("server-")?;
    // The timestamp holds five dashes, and one more separates it from the scenario.
    let mut parts = rest.rsplitn(7, '-');
    let timestamp_end = parts.next()?;
    let scenario = parts.nth(5)?;
    (timestamp_end.ends_with('Z') && !scenario.is_empty()).then_some(scenario)
}

/// The checks that count against the server, excused or not (a not-scored scenario's never
/// do).
fn failures(run: &SuiteRun) -> Vec<Failure> {
    let mut failures = Vec::new();
    for (scenario, checks) in run
        .checks
        .iter()
        .filter(|(scenario, _)| !run.not_scored.contains(*scenario))
    {
        let strict = NEVER_EXPECTED.contains(&scenario.as_str());
        for check in checks {
            if check.status == "FAILURE" || (strict && check.status == "WARNING") {
                failures.push(Failure {
                    scenario: scenario.clone(),
                    check: check.id.clone(),
                    status: check.status.clone(),
                    message: check.message.clone(),
                });
            }
        }
    }
    for (scenario, &(_, failed)) in &run.summary {
        if failed > 0 && !run.checks.contains_key(scenario) && !run.not_scored.contains(scenario) {
            failures.push(Failure {
                scenario: scenario.clone(),
                check: scenario.clone(),
                status: "FAILURE".to_owned(),
                message: "the scenario did not run to completion (no result file)".to_owned(),
            });
        }
    }
    failures
}

/// Fails on every failure the expected-failures file does not excuse.
fn judge(run: &SuiteRun) -> anyhow::Result<()> {
    let expected = expected_failures()?;
    let mut unexcused = Vec::new();
    for failure in failures(run) {
        let excuse = expected
            .iter()
            .filter(|_| !NEVER_EXPECTED.contains(&failure.scenario.as_str()))
            .find(|e| e.name == failure.scenario || e.name == failure.check);
        match excuse {
            Some(excuse) => println!("expected failure: {failure} ({})", excuse.reason),
            None => unexcused.push(failure),
        }
    }
    if !unexcused.is_empty() {
        let list: Vec<String> = unexcused.iter().map(ToString::to_string).collect();
        bail!(
            "{} conformance failure(s) not in {EXPECTED_FAILURES}:\n  {}",
            list.len(),
            list.join("\n  ")
        );
    }
    Ok(())
}

/// Every active scenario of the suite passes (or fails only as the expected-failures file
/// says, with its reason).
#[tokio::test]
async fn conformance_suite_active_scenarios_pass() -> anyhow::Result<()> {
    let run = run_suite(&["--suite", "active"]).await?;
    ensure!(
        run.total.is_some() && !run.summary.is_empty(),
        "no suite summary was printed"
    );
    // The pending polling scenario runs on its own; `server-stateless` exists from 0.2.0.
    for scenario in NEVER_EXPECTED
        .iter()
        .filter(|s| !["server-sse-polling", "server-stateless"].contains(*s))
    {
        ensure!(
            run.checks.contains_key(*scenario),
            "{scenario} did not run in the active suite: {:?}",
            run.summary.keys()
        );
    }
    judge(&run)
}

/// The pending `server-sse-polling` (SEP-1699) passes without a warning: `test_reconnection`
/// closes its POST connection after the priming event and a `retry`, and the result arrives
/// on the stream resumed with `Last-Event-ID`.
#[tokio::test]
async fn conformance_suite_server_sse_polling_passes() -> anyhow::Result<()> {
    let run = run_suite(&["--scenario", "server-sse-polling"]).await?;
    let checks = run
        .checks
        .get("server-sse-polling")
        .context("server-sse-polling wrote no result")?;
    let passed = checks.iter().filter(|c| c.status == "SUCCESS").count();
    println!(
        "server-sse-polling: {passed} passed, {} failed, {} warnings",
        checks.iter().filter(|c| c.status == "FAILURE").count(),
        checks.iter().filter(|c| c.status == "WARNING").count()
    );
    judge(&run)?;
    // The close really happened mid-call: the suite reports the resume as SUCCESS only when
    // the POST stream ended without the result and the GET with Last-Event-ID delivered it
    // (an INFO instead means the result came on the POST stream).
    let resumed = checks
        .iter()
        .find(|c| c.id == "server-sse-disconnect-resume")
        .context("no server-sse-disconnect-resume check")?;
    ensure!(resumed.status == "SUCCESS", "{resumed:?}");
    Ok(())
}

/// A `--requirements` run of the suite 0.2.0-alpha.12: every scored scenario passes, with no
/// expected-failures file and no warning in the scenarios that may never fail, and `scored`
/// scenarios are among those that ran and counted.
async fn requirements_pass(revision: &str, eras: &str, scored: &[&str]) -> anyhow::Result<()> {
    let suite = peers::conformance_2026()?;
    let run = run_suite_on(eras, suite, &["--requirements", revision]).await?;
    ensure!(
        run.total.is_some() && !run.summary.is_empty(),
        "no suite summary was printed"
    );
    for scenario in scored {
        ensure!(
            run.checks.contains_key(*scenario) && !run.not_scored.contains(*scenario),
            "{scenario} did not run as a scored scenario: {:?}",
            run.summary.keys()
        );
    }
    let failures: Vec<String> = failures(&run).iter().map(ToString::to_string).collect();
    let counted = run.summary.len() - run.not_scored.len();
    println!(
        "{revision} on --eras {eras}: {counted} scored scenarios, {} not scored",
        run.not_scored.len()
    );
    ensure!(
        failures.is_empty(),
        "{} failure(s) in scored scenarios of --requirements {revision} on --eras {eras}:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
    Ok(())
}

/// The 2026-07-28 requirements (SEP-2575 stateless requests, SEP-2322 input-required results,
/// SEP-2549 caching hints) against the same server that serves the 2025 sessions.
#[tokio::test]
async fn conformance_suite_requirements_2026_07_28_pass() -> anyhow::Result<()> {
    requirements_pass("2026-07-28", "both", &SCORED_2026).await
}

/// The same 2026-07-28 requirements against a server that serves that era alone
/// (`--eras modern`: `initialize` refused, no sessions).
#[tokio::test]
async fn conformance_suite_requirements_2026_07_28_pass_on_modern_only() -> anyhow::Result<()> {
    requirements_pass("2026-07-28", "modern", &SCORED_2026).await
}

/// Scenarios the 2026-07-28 requirement runs must score.
const SCORED_2026: [&str; 7] = [
    "server-stateless",
    "caching",
    "input-required-result-tampered-state",
    "input-required-result-multi-round",
    "tools-call-with-progress",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
];

/// Scenarios the 2025-11-25 requirement runs must score.
const SCORED_2025: [&str; 4] = [
    "server-initialize",
    "tools-call-with-progress",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
];

/// The 2025-11-25 requirements of the same suite version, at their own (session) wire.
#[tokio::test]
async fn conformance_suite_requirements_2025_11_25_pass() -> anyhow::Result<()> {
    requirements_pass("2025-11-25", "both", &SCORED_2025).await
}

/// The same 2025-11-25 requirements against a server that serves sessions alone
/// (`--eras legacy`: a 2026-07-28 request answered as a 2025-only server answers it).
#[tokio::test]
async fn conformance_suite_requirements_2025_11_25_pass_on_legacy_only() -> anyhow::Result<()> {
    requirements_pass("2025-11-25", "legacy", &SCORED_2025).await
}

/// The tasks extension's ten scenarios of 0.2.0-alpha.12 (unscored extension scenarios, so
/// each runs by name): none fails or warns, against the server that serves everything else.
#[tokio::test]
async fn conformance_suite_task_scenarios_pass() -> anyhow::Result<()> {
    const SCENARIOS: [&str; 10] = [
        "tasks-lifecycle",
        "tasks-capability-negotiation",
        "tasks-wire-fields",
        "tasks-request-state-removal",
        "tasks-mrtr-input",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
        "tasks-status-notifications",
        "tasks-required-task-error",
        "tasks-mrtr-composition",
    ];
    let mut problems = Vec::new();
    for scenario in SCENARIOS {
        let run = run_suite_with(peers::conformance_2026()?, &["--scenario", scenario]).await?;
        let checks = run
            .checks
            .get(scenario)
            .with_context(|| format!("{scenario} wrote no result"))?;
        let passed = checks.iter().filter(|c| c.status == "SUCCESS").count();
        println!("{scenario}: {passed} passed of {}", checks.len());
        problems.extend(
            checks
                .iter()
                .filter(|c| c.status == "FAILURE" || c.status == "WARNING")
                .map(|c| format!("{scenario} / {}: {} {}", c.id, c.status, c.message)),
        );
    }
    ensure!(
        problems.is_empty(),
        "task scenarios:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

/// The expected-failures file parses, gives a reason for every entry, and never lists the
/// scenarios that may not fail.
#[test]
fn conformance_suite_expected_failures_file_is_valid() -> anyhow::Result<()> {
    expected_failures()?;
    assert!(parse_expected("tools-call-audio  # no audio yet\n").is_ok());
    assert!(parse_expected("tools-call-audio\n").is_err());
    assert!(parse_expected("tools-call-audio  #   \n").is_err());
    assert!(parse_expected("dns-rebinding-protection  # no\n").is_err());
    assert_eq!(
        scenario_of("server-tools-call-with-logging-2026-11-30T05-17-07-295Z"),
        Some("tools-call-with-logging")
    );
    assert_eq!(passed_failed("40 passed, 0 failed").unwrap(), (40, 0));
    assert_eq!(
        passed_failed("3 passed, 1 failed, 2 warnings").unwrap(),
        (3, 1)
    );
    Ok(())
}
