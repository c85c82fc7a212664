//! Where `scripts/peers.sh` put the pinned MCP SDK peers, and the commands that start them.
//!
//! `scripts/peers.sh` installs into the workspace's `target/peers/` (a Python venv with the
//! Python SDK, and an `npm ci` of `interop/package.json` with the TypeScript SDK, the
//! conformance suite and a Node 22 binary). Our own small peer programs live in `interop/`.
//! This module finds those files and describes how to run them: servers as
//! [`ServerSpec`]s for the [`launcher`](crate::launcher), run-to-completion programs (the
//! interop clients, the conformance CLI) as [`PeerCommand`]s. Every lookup fails with an
//! error that says to run `scripts/peers.sh`: a test that needs a peer fails when it is
//! missing, it never skips.
//!
//! The interop servers take `--bind HOST:PORT` (the launcher appends `--bind 127.0.0.1:0`)
//! and print `peer: serving http://127.0.0.1:PORT/mcp` on stdout when listening. The stdio
//! servers ([`python_stdio_server`], [`everything_stdio_server`]) are [`PeerCommand`]s for a
//! gateway to run (`tether serve -- CMD ARGS...`, see [`PeerCommand::into_command_line`]).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::launcher::ServerSpec;

/// A program and its arguments, ready to hand to a launcher or [`std::process::Command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (without `--bind`, which the launcher appends for servers).
    pub args: Vec<String>,
}

impl PeerCommand {
    /// `(program, args)`.
    #[must_use]
    pub fn into_parts(self) -> (PathBuf, Vec<String>) {
        (self.program, self.args)
    }

    /// The program followed by its arguments, as one list: the trailing `CMD ARGS...` of a
    /// gateway such as `tether serve -- CMD ARGS...`.
    #[must_use]
    pub fn into_command_line(self) -> Vec<OsString> {
        std::iter::once(self.program.into_os_string())
            .chain(self.args.into_iter().map(OsString::from))
            .collect()
    }

    /// Appends arguments.
    #[must_use]
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A [`tokio::process::Command`] for it, killed when dropped.
    #[must_use]
    pub fn tokio_command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command.args(&self.args).kill_on_drop(true);
        command
    }

    /// Runs it to completion with stdin closed, capturing stdout and stderr; kills it after
    /// `timeout`.
    ///
    /// # Errors
    ///
    /// When it cannot be started or does not finish in time (it is killed then).
    pub async fn run(&self, timeout: Duration) -> anyhow::Result<PeerOutput> {
        let child = self
            .tokio_command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", self.program.display()))?;
        let output = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .with_context(|| format!("{self} did not finish within {timeout:?}"))??;
        Ok(PeerOutput {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

impl std::fmt::Display for PeerCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.args {
            write!(f, " {arg}")?;
        }
        Ok(())
    }
}

/// How a [`PeerCommand`] ended and what it printed.
#[derive(Debug, Clone)]
pub struct PeerOutput {
    /// The exit status.
    pub status: ExitStatus,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

impl PeerOutput {
    /// Each non-empty stdout line parsed as JSON (the interop clients print one object per
    /// line).
    ///
    /// # Errors
    ///
    /// When a line is not JSON.
    pub fn json_lines(&self) -> anyhow::Result<Vec<Value>> {
        self.stdout
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                serde_json::from_str(line)
                    .with_context(|| format!("stdout line is not JSON: {line:?}"))
            })
            .collect()
    }
}

/// The workspace root (two levels above this crate's manifest).
#[must_use]
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/tether-testkit sits two levels below the workspace root")
        .to_path_buf()
}

/// `target/peers/` in the workspace, where `scripts/peers.sh` installs.
#[must_use]
pub fn peers_dir() -> PathBuf {
    workspace_dir().join("target").join("peers")
}

/// `interop/` in the workspace: our peer programs and the npm pins.
#[must_use]
pub fn interop_dir() -> PathBuf {
    workspace_dir().join("interop")
}

fn installed(path: PathBuf, what: &str) -> anyhow::Result<PathBuf> {
    if !path.exists() {
        bail!(
            "{what} not found at {}: run scripts/peers.sh to install the pinned peers",
            path.display()
        );
    }
    Ok(path)
}

/// The Python of the peers venv (with `mcp==2.3.0`).
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python() -> anyhow::Result<PathBuf> {
    installed(
        peers_dir().join("py").join("bin").join("python"),
        "the peers Python venv",
    )
}

/// The Node 22 binary that the `node` npm package ships.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn node22() -> anyhow::Result<PathBuf> {
    installed(
        peers_dir().join("node/node_modules/node/bin/node"),
        "the Node 22 binary",
    )
}

/// `target/peers/node/node_modules`.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn node_modules() -> anyhow::Result<PathBuf> {
    installed(peers_dir().join("node/node_modules"), "the npm peers")
}

/// The `node_modules/.bin` entry point of an installed npm package's binary, e.g.
/// `conformance`, `mcp-server-everything` or `mcp-proxy`; run it with [`node22`].
///
/// # Errors
///
/// When `scripts/peers.sh` has not run or there is no such binary.
pub fn npm_bin(name: &str) -> anyhow::Result<PathBuf> {
    installed(node_modules()?.join(".bin").join(name), name)
}

fn interop_program(relative: &str) -> anyhow::Result<PathBuf> {
    let path = interop_dir().join(relative);
    ensure!(path.exists(), "missing interop program {}", path.display());
    Ok(path)
}

fn node_program(script: &str) -> anyhow::Result<PeerCommand> {
    let node = node22()?;
    // interop/ts/*.mjs resolve the SDK through this symlink, which peers.sh makes.
    installed(
        interop_dir().join("node_modules"),
        "the interop/node_modules link",
    )?;
    Ok(PeerCommand {
        program: node,
        args: vec![path_arg(&interop_program(script)?)],
    })
}

fn server_spec(command: PeerCommand) -> ServerSpec {
    ServerSpec::new(command.program).args(command.args)
}

fn python_program(script: &str) -> anyhow::Result<PeerCommand> {
    Ok(PeerCommand {
        program: python()?,
        args: vec![path_arg(&interop_program(script)?)],
    })
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `interop/python/server.py --stdio`: the Python SDK server with the `count` tool as a
/// stdio MCP server (JSON-RPC lines on stdin and stdout), for a gateway to run.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python_stdio_server() -> anyhow::Result<PeerCommand> {
    Ok(python_program("python/server.py")?.with_args(["--stdio"]))
}

/// `interop/python/server.py` for the launcher: the Python SDK server with the `count`
/// tool, an event store and `retry` (500 ms). Add flags with [`ServerSpec::arg`]:
/// `--retry-ms MS`, `--json-response`.
///
/// Its event store is shared by all sessions and the SDK names POST streams after the
/// request id, so two sessions that use the same request id share a stream key: give each
/// session's requests distinct ids when a test opens several sessions.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python_server() -> anyhow::Result<ServerSpec> {
    python_program("python/server.py").map(server_spec)
}

/// `interop/python/client.py URL N`: calls `count` with the Python SDK client and prints
/// JSON lines (`{"progress": p, "total": t}`, `{"log": data}`, `{"result": …}`). Extra
/// flags: `--interval-ms MS`, `--no-progress`, and `--tool NAME` with `--arguments JSON` to
/// call another tool (the arguments then replace `{"n": N, "interval_ms": MS}`, and `N` is
/// ignored). `--list-tools` calls `tools/list` after `initialize` and prints
/// `{"tools": [names…]}` first; `--terminate` prints `{"terminated": "<session id>",
/// "status": <HTTP status>}` last, once the DELETE that the SDK sends on close is answered
/// (the client sends that DELETE with or without the flag).
///
/// The SDK resumes a cut stream correctly once; when the resumed stream breaks too, it
/// resumes again from the first cursor, so the events in between arrive twice. Cut each
/// stream at most once.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python_client(url: &str, n: u64) -> anyhow::Result<PeerCommand> {
    Ok(python_program("python/client.py")?.with_args([url.to_owned(), n.to_string()]))
}

/// `interop/ts/server.mjs` for the launcher: the TypeScript SDK server with the `count`
/// tool, sessions, an event store per session and `retry` (500 ms). Add flags with
/// [`ServerSpec::arg`]: `--retry-ms MS`, `--json-response`.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn ts_server() -> anyhow::Result<ServerSpec> {
    node_program("ts/server.mjs").map(server_spec)
}

/// `interop/oauth/mock-as.mjs` for the launcher: an authorization server (oauth2-mock-server
/// 9.3.0) on loopback, printing `as: serving http://127.0.0.1:PORT` (its issuer), with a
/// fresh RS256 key at every start; its `/token` issues what the request asks for (the
/// script's header says how).
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn oauth_mock_as() -> anyhow::Result<ServerSpec> {
    node_program("oauth/mock-as.mjs").map(server_spec)
}

/// `interop/oauth/oidc-as.mjs` for the launcher: oidc-provider 9.13.3, a production-grade
/// authorization server, on loopback, printing `as: serving http://127.0.0.1:PORT` (its
/// issuer): opaque tokens bound to the `resource` asked for, through the client credentials
/// grant of `app-a` and `app-b`, introspected by `tether-rs` and revoked by their client (the
/// script's header gives the secrets and endpoints).
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn oidc_as() -> anyhow::Result<ServerSpec> {
    node_program("oauth/oidc-as.mjs").map(server_spec)
}

/// `interop/ts/protected-server.mjs` for the launcher: the TypeScript SDK 1.32.2 as an
/// OAuth-protected MCP server (its own metadata router and bearer middleware, tokens checked
/// by introspection at `issuer`, which must be [`oidc_as`]), stateless, with the `count` tool.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn ts_protected_server(issuer: &str) -> anyhow::Result<ServerSpec> {
    node_program("ts/protected-server.mjs")
        .map(|command| server_spec(command.with_args(["--issuer", issuer])))
}

/// `interop/ts/server-2026.mjs` for the launcher: the TypeScript SDK v2 server
/// (`@modelcontextprotocol/server` 2.3.1) with the `count` tool, in the era `era` names:
/// `legacy` (2025-11-25 sessions, an event store, `retry` 500 ms), `modern` (2026-07-28 only,
/// stateless) or `both` (one endpoint; the SDK routes each request by its shape). Add
/// `--retry-ms MS` with [`ServerSpec::arg`].
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn ts_server_2026(era: &str) -> anyhow::Result<ServerSpec> {
    node_program("ts/server-2026.mjs").map(|command| server_spec(command.with_args(["--era", era])))
}

/// `interop/rmcp`'s `rmcp-peer` for the launcher: rmcp 3.11.0 (the official Rust SDK) serving
/// the `count` tool, `--era legacy` (its default session manager: 2025 sessions, and
/// 2026-07-28 requests served statelessly beside them) or `--era modern` (no sessions at
/// all). Built by `scripts/peers.sh` into `target/peers/rmcp-target`.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn rmcp_server(era: &str) -> anyhow::Result<ServerSpec> {
    let program = installed(
        peers_dir()
            .join("rmcp-target")
            .join("release")
            .join("rmcp-peer"),
        "rmcp-peer",
    )?;
    Ok(ServerSpec::new(program).args(["--era", era]))
}

/// `interop/python/client_2026.py URL N`: the Python SDK 2.3.0 client in the 2026-07-28 era
/// (`server/discover`, no `initialize`), calling `count` to N; the same JSON lines as
/// [`ts_client_2026`]. Extra flag: `--interval-ms MS`.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python_client_2026(url: &str, n: u64) -> anyhow::Result<PeerCommand> {
    Ok(python_program("python/client_2026.py")?.with_args([url.to_owned(), n.to_string()]))
}

/// `interop/python/client_auto.py URL N --library LIBRARY`: a dual-era Python client in its
/// default `auto` mode (`server/discover`, falling back to `initialize` and a 2025 session),
/// `library` `mcp` (the Python SDK 2.3.0's `Client`) or `fastmcp` (fastmcp 4.1.6's
/// `Client`), calling `count` to N; the same JSON lines as [`python_client_2026`]. Extra
/// flag: `--interval-ms MS`.
///
/// In a 2025 session it resumes a cut stream as [`python_client`] does: cut each stream at
/// most once.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn python_client_auto(url: &str, n: u64, library: &str) -> anyhow::Result<PeerCommand> {
    Ok(python_program("python/client_auto.py")?.with_args([
        url.to_owned(),
        n.to_string(),
        "--library".to_owned(),
        library.to_owned(),
    ]))
}

/// `interop/ts/client.mjs URL N`: calls `count` with the TypeScript SDK client and prints
/// the same JSON lines as [`python_client`]. Extra flags: `--interval-ms MS`,
/// `--no-progress`, `--tool NAME` with `--arguments JSON`, `--list-tools` and `--terminate`
/// as for [`python_client`] (it ends the session with `terminateSession()`, with or without
/// `--terminate`), and `--bearer-token-file FILE` (the token sent on every request).
///
/// It resumes every cut stream (up to 5 failed reconnects in a row), so it survives several
/// cuts of one call.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn ts_client(url: &str, n: u64) -> anyhow::Result<PeerCommand> {
    Ok(node_program("ts/client.mjs")?.with_args([url.to_owned(), n.to_string()]))
}

/// `interop/ts/client-2026.mjs URL N`: the TypeScript SDK v2 client (`@modelcontextprotocol/
/// client` 2.3.1) pinned to 2026-07-28: `server/discover` instead of `initialize`, `tools/list`,
/// then `count` to N with a progress callback. JSON lines: `{"event":"connected",…}`,
/// `{"event":"tools","names":[…]}`, one `{"event":"progress",…}` per notification,
/// `{"event":"result","text":…}`. Extra flags: `--interval-ms MS`; `--elicit`, which declares
/// elicitation and calls `test_input_required_result_elicitation`, answering its
/// `input_required` result with the name `Alice` (`{"event":"elicited",…}` then a result line
/// with `"tool"`); `--auto`, which negotiates (`server/discover`, falling back to
/// `initialize`) instead of pinning. Exit 1 after an `{"event":"error",…}` line.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn ts_client_2026(url: &str, n: u64) -> anyhow::Result<PeerCommand> {
    Ok(node_program("ts/client-2026.mjs")?.with_args([url.to_owned(), n.to_string()]))
}

/// The official conformance suite CLI (`conformance server --url …`, `conformance client
/// --command …`), version 0.1.16, run by Node 22: the 2025 era's scenarios.
///
/// Both pinned suites install a `conformance` command into `node_modules/.bin`, so each is
/// run from its own package's entry point, never through that shared name.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn conformance() -> anyhow::Result<PeerCommand> {
    suite("@modelcontextprotocol/conformance")
}

/// The conformance suite 0.2.0-alpha.12 (npm alias `conformance-2026`), run by Node 22: the
/// one that checks the 2026-07-28 era (`--requirements 2026-07-28`), and 2025-11-25 at its
/// own wire (`--requirements 2025-11-25`).
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn conformance_2026() -> anyhow::Result<PeerCommand> {
    suite("conformance-2026")
}

fn suite(package: &str) -> anyhow::Result<PeerCommand> {
    let entry = installed(
        node_modules()?.join(package).join("dist").join("index.js"),
        package,
    )?;
    Ok(PeerCommand {
        program: node22()?,
        args: vec![path_arg(&entry)],
    })
}

/// The reference server `@modelcontextprotocol/server-everything streamableHttp`, run by
/// Node 22. It listens on env `PORT` (default 3001) on all interfaces and prints no ready line
/// of ours: confine it (see docs/PEERS.md#confine) before starting it.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn everything_server() -> anyhow::Result<PeerCommand> {
    Ok(PeerCommand {
        program: node22()?,
        args: vec![
            path_arg(&npm_bin("mcp-server-everything")?),
            "streamableHttp".to_owned(),
        ],
    })
}

/// The reference server `@modelcontextprotocol/server-everything stdio`, run by Node 22: a
/// stdio MCP server, for a gateway to run. Its `trigger-long-running-operation` tool
/// (`{"duration": SECS, "steps": N}`) sends progress `1..=N` of total `N`, evenly spread,
/// then the text `Long running operation completed. …`. It prints a start-up line on stderr.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn everything_stdio_server() -> anyhow::Result<PeerCommand> {
    Ok(PeerCommand {
        program: node22()?,
        args: vec![
            path_arg(&npm_bin("mcp-server-everything")?),
            "stdio".to_owned(),
        ],
    })
}

/// `mcp-proxy` (a stdio-to-Streamable-HTTP gateway), run by Node 22. Usage:
/// `--port P --host 127.0.0.1 --server stream -- CMD ARGS...`.
///
/// # Errors
///
/// When `scripts/peers.sh` has not run.
pub fn mcp_proxy() -> anyhow::Result<PeerCommand> {
    Ok(PeerCommand {
        program: node22()?,
        args: vec![path_arg(&npm_bin("mcp-proxy")?)],
    })
}
