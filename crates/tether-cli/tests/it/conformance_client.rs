//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, client mode)
//! against `tether conformance-client`: `initialize`,
//! `tools_call`, `sse-retry` and `elicitation-sep1034-client-defaults` of the suite 0.1.16; and
//! the 2026-07-28 client scenarios of the suite 0.2.0-alpha.12, run with
//! `--spec-version 2026-07-28`: `tools_call`, `request-metadata`,
//! `sep-2322-client-request-state`, `http-standard-headers`, `http-custom-headers`,
//! `http-invalid-tool-headers`, `json-schema-ref-no-deref`, and
//! `json-schema-2020-12-preservation` at both versions; and every client
//! authorization scenario of 0.2.0-alpha.12: the 14 of `client --suite auth` at 2025-11-25
//! and at 2026-07-28, and the 11 that 2026-07-28 adds (resource and issuer checks, RFC 9207,
//! `offline_access`, a moved authorization server).
//!
//! Each test runs `conformance client --command "<tether> conformance-client" --scenario S
//! -o <tempdir>`. The suite's mock servers listen on all interfaces, so the run happens in a
//! fresh network namespace (`unshare -n`, or `unshare -rn` where only user namespaces are
//! allowed) whose loopback is brought up first: nothing is reachable from outside. A machine
//! that allows neither fails the test with a message; it never skips.
//!
//! How the suite reports (read from its CLI, version 0.1.16): a client run prints on stderr
//! each check as `<time> [<id>] <STATUS> <description>` (ANSI-coloured), then `Passed: P/N, F
//! failed, W warnings`, the failed and warning checks, and `✅ OVERALL: PASSED` or `❌
//! OVERALL: FAILED`; it exits 1 when a check failed or warned, the client timed out or the
//! client exited non-zero. `-o DIR` writes `DIR/<scenario>-<timestamp>/checks.json` (every
//! check with its `id` and `status`: `SUCCESS`, `FAILURE`, `WARNING`, `INFO`) and the client's
//! `stdout.txt` and `stderr.txt`. The verdict comes from `checks.json`, cross-checked against
//! the printed `Passed:` line and the exit status; a FAILURE or WARNING fails the test unless
//! `interop/conformance/client-expected-failures.txt` excuses it with a reason, which it may
//! never do for `sse-retry`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use tether_testkit::conformance::{self, Expected, strip_ansi, tail};
use tether_testkit::peers;

/// The suite's own limit on the client process (its default): a scenario takes well under a
/// second when the client behaves.
const CLIENT_TIMEOUT_MS: u64 = 30_000;

/// Bound on one suite run: the client's limit plus Node's start-up on a loaded machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The expected-failures file, relative to the workspace root.
const EXPECTED_FAILURES: &str = "interop/conformance/client-expected-failures.txt";

/// Scenarios that nothing may excuse, and the prefix of their check ids (resuming
/// streams on the server's timing is what tether is for).
const NEVER_EXPECTED: [&str; 1] = ["sse-retry"];
const NEVER_EXPECTED_CHECKS: &str = "client-sse-";

/// One suite run at a time: `sse-retry` measures the client's reconnect delay (450–700 ms
/// for the server's 500 ms), which four Node processes starting at once on two cores could
/// push out of the window.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn conformance_suite_client_initialize() -> anyhow::Result<()> {
    run_scenario("initialize").await
}

#[tokio::test]
async fn conformance_suite_client_tools_call() -> anyhow::Result<()> {
    run_scenario("tools_call").await
}

#[tokio::test]
async fn conformance_suite_client_sse_retry_waits_retry_and_resumes() -> anyhow::Result<()> {
    run_scenario("sse-retry").await
}

#[tokio::test]
async fn conformance_suite_client_elicitation_applies_schema_defaults() -> anyhow::Result<()> {
    run_scenario("elicitation-sep1034-client-defaults").await
}

// The 2026-07-28 client scenarios of the suite 0.2.0-alpha.12, each run with
// `--spec-version 2026-07-28`, so that the client is told to speak that era.

#[tokio::test]
async fn conformance_suite_client_2026_tools_call() -> anyhow::Result<()> {
    run_modern_scenario("tools_call").await
}

#[tokio::test]
async fn conformance_suite_client_2026_request_metadata_and_version_retry() -> anyhow::Result<()> {
    run_modern_scenario("request-metadata").await
}

#[tokio::test]
async fn conformance_suite_client_2026_request_state_round_trips() -> anyhow::Result<()> {
    run_modern_scenario("sep-2322-client-request-state").await
}

#[tokio::test]
async fn conformance_suite_client_2026_standard_headers() -> anyhow::Result<()> {
    run_modern_scenario("http-standard-headers").await
}

#[tokio::test]
async fn conformance_suite_client_2026_custom_headers_mirror_arguments() -> anyhow::Result<()> {
    run_modern_scenario("http-custom-headers").await
}

#[tokio::test]
async fn conformance_suite_client_2026_invalid_tool_headers_drop_the_tool() -> anyhow::Result<()> {
    run_modern_scenario("http-invalid-tool-headers").await
}

#[tokio::test]
async fn conformance_suite_client_2026_schema_refs_are_not_fetched() -> anyhow::Result<()> {
    run_modern_scenario("json-schema-ref-no-deref").await
}

#[tokio::test]
async fn conformance_suite_client_2026_schemas_survive_the_client_in_both_eras()
-> anyhow::Result<()> {
    run_modern_scenario("json-schema-2020-12-preservation").await?;
    run_in(
        peers::conformance_2026()?,
        &["--spec-version", "2025-11-25"],
        "json-schema-2020-12-preservation",
    )
    .await
}

// The client authorization scenarios of the suite 0.2.0-alpha.12 (`client --suite auth`),
// each run alone (`--scenario`, which also fails on a client that exits non-zero
// where the scenario does not allow it), at both revisions; and the scenarios only
// 2026-07-28 scores (in its `draft` suite), at 2026-07-28.

/// `conformance client --suite auth` of the suite 0.2.0-alpha.12: the same 14 at both
/// revisions.
const AUTH_SUITE: [&str; 14] = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

/// The authorization scenarios 2026-07-28 adds (resource and issuer checks, RFC 9207,
/// `offline_access`, a moved authorization server).
const AUTH_2026: [&str; 11] = [
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
];

/// Runs each of `scenarios` at `version`; fails naming every scenario that failed.
async fn run_auth(version: &str, scenarios: &[&str]) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for scenario in scenarios {
        if let Err(error) = run_in(
            peers::conformance_2026()?,
            &["--spec-version", version],
            scenario,
        )
        .await
        {
            failed.push(format!("{scenario}: {error:#}"));
        }
    }
    ensure!(
        failed.is_empty(),
        "{} of {} authorization scenarios failed at {version}:\n{}",
        failed.len(),
        scenarios.len(),
        failed.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn conformance_suite_client_auth_at_2025_11_25() -> anyhow::Result<()> {
    run_auth("2025-11-25", &AUTH_SUITE).await
}

#[tokio::test]
async fn conformance_suite_client_auth_at_2026_07_28() -> anyhow::Result<()> {
    run_auth("2026-07-28", &AUTH_SUITE).await?;
    run_auth("2026-07-28", &AUTH_2026).await
}

/// One check from `checks.json`.
#[derive(Debug)]
struct Check {
    id: String,
    status: String,
    message: String,
    /// The check's `details` (for `sse-retry`'s timing: `actualDelayMs` and its window).
    details: Value,
}

/// Runs one scenario of the suite 0.1.16 ([`run_in`]).
async fn run_scenario(scenario: &str) -> anyhow::Result<()> {
    run_in(peers::conformance()?, &[], scenario).await
}

/// Runs one scenario of the suite 0.2.0-alpha.12 at 2026-07-28 ([`run_in`]).
async fn run_modern_scenario(scenario: &str) -> anyhow::Result<()> {
    run_in(
        peers::conformance_2026()?,
        &["--spec-version", "2026-07-28"],
        scenario,
    )
    .await
}

/// Runs one scenario of `suite` (with `extra` arguments) in a network namespace, prints the
/// suite's summary lines, and fails on anything the expected-failures file does not excuse.
async fn run_in(suite: peers::PeerCommand, extra: &[&str], scenario: &str) -> anyhow::Result<()> {
    let expected = if NEVER_EXPECTED.contains(&scenario) {
        Vec::new()
    } else {
        expected_failures()?
    };
    let _serial = SERIAL.lock().await;
    let results = tempfile::Builder::new()
        .prefix("tether-conformance-client-")
        .tempdir()?;
    let client_command = client_command()?;
    let (program, mut args) = suite.into_parts();
    args.extend([
        "client".to_owned(),
        "--command".to_owned(),
        client_command,
        "--scenario".to_owned(),
        scenario.to_owned(),
        "--timeout".to_owned(),
        CLIENT_TIMEOUT_MS.to_string(),
        "-o".to_owned(),
        path_str(results.path())?.to_owned(),
    ]);
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let unshare = unshare_flags().await?;
    println!(
        "$ unshare {unshare} -- sh -c 'ip link set lo up && exec \"$@\"' sh {} {}",
        program.display(),
        shell_words(&args)
    );
    let output = tokio::process::Command::new("unshare")
        .arg(unshare)
        .args(["--", "sh", "-c", "ip link set lo up && exec \"$@\"", "sh"])
        .arg(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_TIMEOUT, output)
        .await
        .with_context(|| format!("the suite did not finish within {RUN_TIMEOUT:?}"))?
        .context("running unshare")?;
    let printed = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let mut summary = None;
    let mut overall = None;
    for line in printed.lines().map(strip_ansi) {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Passed: ") {
            println!("{scenario}: {line}");
            summary = Some(parse_passed(rest).with_context(|| format!("{line:?}"))?);
        } else if line.contains("OVERALL: ") {
            println!("{scenario}: {line}");
            overall = Some(line.contains("OVERALL: PASSED"));
        } else if is_verdict_line(line) || line.contains("CLIENT ") {
            // A check with a verdict (not INFO), or the suite's note that the client timed
            // out or exited with an error.
            println!("{scenario}: {line}");
        }
    }

    let context = || {
        format!(
            "conformance client --scenario {scenario} (exit {:?}); its output ends:\n{}",
            output.status.code(),
            tail(&strip_ansi(&printed), 40)
        )
    };
    let Some((passed, counted, failed, warnings)) = summary else {
        bail!("no `Passed:` line: {}", context());
    };
    let overall = overall.with_context(|| format!("no `OVERALL:` line: {}", context()))?;
    let checks = read_checks(results.path(), scenario).with_context(context)?;
    client_output(results.path(), scenario);
    if let Some(timing) = checks.iter().find(|c| c.id == "client-sse-retry-timing") {
        let ms = |name: &str| timing.details[name].as_f64().unwrap_or(f64::NAN);
        println!(
            "{scenario}: reconnected after {} ms (server retry {} ms, accepted {}..={} ms)",
            ms("actualDelayMs"),
            ms("expectedRetryMs"),
            ms("minAcceptableMs"),
            ms("maxAcceptableMs"),
        );
    }

    // The printed summary and checks.json must tell the same story.
    let count = |status: &str| checks.iter().filter(|c| c.status == status).count();
    ensure!(
        (passed, failed, warnings) == (count("SUCCESS"), count("FAILURE"), count("WARNING"))
            && counted == passed + failed,
        "the summary (passed {passed}/{counted}, failed {failed}, warnings {warnings}) \
         disagrees with checks.json {checks:?}"
    );

    let excused = |name: &str| expected.iter().find(|e| e.name == name);
    let scenario_excuse = excused(scenario);
    let mut unexcused = Vec::new();
    for check in checks
        .iter()
        .filter(|c| c.status == "FAILURE" || c.status == "WARNING")
    {
        match scenario_excuse.or_else(|| excused(&check.id)) {
            Some(excuse) => println!(
                "{scenario}: expected {} {}: {}",
                check.status, check.id, excuse.reason
            ),
            None => unexcused.push(check),
        }
    }
    ensure!(
        unexcused.is_empty(),
        "{} check(s) failed or warned:\n{}\n{}",
        unexcused.len(),
        unexcused
            .iter()
            .map(|c| format!("  {} {}: {}", c.status, c.id, c.message))
            .collect::<Vec<_>>()
            .join("\n"),
        context()
    );
    // Whatever is not a check (a timeout, a client exiting non-zero) fails the overall verdict
    // only; only an excuse of the whole scenario covers it.
    if !(overall && output.status.success()) {
        match scenario_excuse {
            Some(excuse) => println!("{scenario}: expected overall failure: {}", excuse.reason),
            None => bail!("the suite's verdict is FAILED: {}", context()),
        }
    }
    ensure!(
        passed > 0 || scenario_excuse.is_some(),
        "no check passed: {}",
        context()
    );
    // An excuse that no longer excuses anything is stale.
    for entry in &expected {
        let used = if entry.name == scenario {
            failed + warnings > 0 || !overall
        } else {
            checks
                .iter()
                .any(|c| c.id == entry.name && c.status != "SUCCESS" && c.status != "INFO")
        };
        let ours = entry.name == scenario || checks.iter().any(|c| c.id == entry.name);
        ensure!(
            !ours || used,
            "{EXPECTED_FAILURES}: {} passes now; remove its entry",
            entry.name
        );
    }
    Ok(())
}

/// `"<tether> conformance-client"`. The suite splits `--command` at spaces and runs it
/// through a shell, so the binary's path must be one plain word.
fn client_command() -> anyhow::Result<String> {
    let binary = env!("CARGO_BIN_EXE_tether");
    ensure!(
        binary
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)),
        "the suite cannot run {binary:?}: it splits --command at spaces and runs it in a \
         shell, so build into a target directory whose path is one plain word"
    );
    Ok(format!("{binary} conformance-client"))
}

/// The `unshare` flags that give this process a private network namespace: `-n` (root, or
/// CAP_SYS_ADMIN), else `-rn` (an unprivileged user namespace). Neither is a test failure
/// that says so.
async fn unshare_flags() -> anyhow::Result<&'static str> {
    let mut refusals = Vec::new();
    for flags in ["-n", "-rn"] {
        let probe = tokio::process::Command::new("unshare")
            .args([flags, "--", "sh", "-c", "ip link set lo up"])
            .stdin(Stdio::null())
            .output()
            .await
            .context("running `unshare` (util-linux) and `ip` (iproute2)")?;
        if probe.status.success() {
            return Ok(flags);
        }
        refusals.push(format!(
            "unshare {flags}: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    bail!(
        "cannot make a network namespace for the suite's mock servers (they listen on all \
         interfaces, so they must not run in the host's namespace); allow unshare -n or \
         unprivileged user namespaces (kernel.unprivileged_userns_clone=1). {}",
        refusals.join("; ")
    )
}

/// Reads and validates the expected-failures file: one `name  # reason` a line, where name
/// is a scenario (excusing all of it, a non-zero exit included) or a check id; every entry
/// has a reason, and none names [`NEVER_EXPECTED`] or its checks.
fn expected_failures() -> anyhow::Result<Vec<Expected>> {
    conformance::read_expected(EXPECTED_FAILURES, never_expected)
}

fn parse_expected(text: &str) -> anyhow::Result<Vec<Expected>> {
    conformance::parse_expected(text, never_expected)
}

fn never_expected(name: &str) -> bool {
    NEVER_EXPECTED.contains(&name) || name.starts_with(NEVER_EXPECTED_CHECKS)
}

/// The checks of the one `<scenario>-<timestamp>/checks.json` under `dir`.
fn read_checks(dir: &Path, scenario: &str) -> anyhow::Result<Vec<Check>> {
    let path = result_dir(dir, scenario)?.join("checks.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let list = value
        .as_array()
        .with_context(|| format!("{} is not a list", path.display()))?;
    list.iter()
        .map(|check| {
            let field = |name: &str| check[name].as_str().unwrap_or_default().to_owned();
            let check = Check {
                id: field("id"),
                status: field("status"),
                message: match field("errorMessage") {
                    message if message.is_empty() => field("description"),
                    message => message,
                },
                details: check["details"].clone(),
            };
            ensure!(
                !check.id.is_empty() && !check.status.is_empty(),
                "a check without id or status in {}: {check:?}",
                path.display()
            );
            Ok(check)
        })
        .collect()
}

fn result_dir(dir: &Path, scenario: &str) -> anyhow::Result<PathBuf> {
    // `auth/x` is written as `auth/x-<time>`.
    let (dir, scenario) = match scenario.rsplit_once('/') {
        Some((parent, name)) => (dir.join(parent), name),
        None => (dir.to_owned(), scenario),
    };
    let dir = dir.as_path();
    let prefix = format!("{scenario}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            found.push(entry.path());
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected one result directory {prefix}<time> in {}, found {found:?}",
            dir.display()
        ),
    }
}

/// Prints what the client itself said (saved by the suite), for reading a failure.
fn client_output(dir: &Path, scenario: &str) {
    let Ok(result) = result_dir(dir, scenario) else {
        return;
    };
    for name in ["stdout.txt", "stderr.txt"] {
        if let Ok(text) = std::fs::read_to_string(result.join(name))
            && !text.trim().is_empty()
        {
            println!("{scenario}: client {name}:\n{}", text.trim_end());
        }
    }
}

/// `P/N, F failed, W warnings` → `(P, N, F, W)`.
fn parse_passed(text: &str) -> anyhow::Result<(usize, usize, usize, usize)> {
    let number = |s: &str| -> anyhow::Result<usize> {
        s.split_whitespace()
            .next()
            .context("missing number")?
            .parse()
            .context("not a number")
    };
    let (ratio, rest) = text.split_once(',').context("no `,`")?;
    let (passed, counted) = ratio.split_once('/').context("no `/`")?;
    let (failed, warnings) = rest.split_once(',').context("no second `,`")?;
    ensure!(
        failed.contains("failed") && warnings.contains("warning"),
        "unexpected wording"
    );
    Ok((
        number(passed)?,
        number(counted)?,
        number(failed)?,
        number(warnings)?,
    ))
}

/// A printed check line with a verdict: `<time> [<id>] SUCCESS|FAILURE|WARNING <description>`.
fn is_verdict_line(line: &str) -> bool {
    line.split_once("] ").is_some_and(|(head, rest)| {
        head.contains('[')
            && ["SUCCESS", "FAILURE", "WARNING"]
                .iter()
                .any(|status| rest.starts_with(status))
    })
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// Arguments quoted for a shell, for the printed command line.
fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|arg| {
            if arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-=:".contains(c))
            {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn conformance_suite_expected_failures_parse_and_refuse_sse_retry() {
    let entries = parse_expected("# comment\n\ninitialize  # the mock server is wrong\n").unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].name, "initialize");
    assert_eq!(entries[0].reason, "the mock server is wrong");
    assert!(parse_expected("initialize\n").is_err(), "no reason");
    assert!(parse_expected("initialize #  \n").is_err(), "empty reason");
    assert!(parse_expected("sse-retry # no\n").is_err());
    assert!(parse_expected("client-sse-retry-timing # no\n").is_err());
    // The checked-in file itself is well formed.
    expected_failures().unwrap();
}

#[test]
fn conformance_suite_summary_line_parses() {
    assert_eq!(
        parse_passed("3/3, 0 failed, 0 warnings").unwrap(),
        (3, 3, 0, 0)
    );
    assert_eq!(
        parse_passed("0/6, 6 failed, 1 warnings").unwrap(),
        (0, 6, 6, 1)
    );
    assert!(parse_passed("3 of 3").is_err());
    assert!(is_verdict_line(
        "2026-01-01T00:00:00.000Z [client-sse-retry-timing] WARNING late"
    ));
    assert!(!is_verdict_line(
        "2026-01-01T00:00:00.000Z [server-info] INFO    Test server info"
    ));
}
