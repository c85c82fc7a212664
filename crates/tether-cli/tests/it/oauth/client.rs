//! `tether call`, `tether connect` and `tether auth` as OAuth clients of a protected `tether
//! serve`, against a real authorization server (oidc-provider from the npm registry, pinned
//! by interop/package.json) on loopback, with JWT access tokens bound to the resource, open
//! dynamic registration and rotating refresh tokens. The "browser" is curl with a cookie jar,
//! which follows the authorization server's redirects to the client's loopback callback.
//!
//! - a first call signs in (registering once), a second uses the cache; cache files are 0600
//!   in a 0700 directory; `auth status` lists the sign-in without its tokens; `auth logout`
//!   forgets it, after which a non-interactive call fails with exit 5;
//! - with tokens living 3 s and the server allowing no leeway, a call of many lifetimes
//!   through a fault proxy's cuts delivers every event exactly once, in both eras, and
//!   `--resume` after SIGKILL finishes the call on the cached tokens;
//! - concurrent calls whose token is due refresh it once between them (one rotating
//!   refresh token, never spent twice);
//! - `tether connect` under the Python SDK's stdio client keeps working across expiries;
//! - a forged `state`, a declined consent and an authorization server without S256 fail with
//!   exit 5 and their messages;
//! - a token revoked mid-call is refused at the next resume, and the client signs in again
//!   and continues from the same cursor; a 403 for scope signs in again for the union;
//! - another SDK's resource server (the TypeScript SDK's bearer middleware and metadata
//!   router) is signed in to the same way.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::Value;
use tempfile::TempDir;
use tether_testkit::launcher::{ServerProcess, ServerSpec, tether_bin};
use tether_testkit::peers::{self, interop_dir, python};
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
use tether_testkit::raw::{RawClient, RawRequest};
use tokio::process::Command;

/// The scope the protected server requires of every request.
const SCOPE: &str = "mcp:tools";
/// The exit code of a failed authorization (docs/CONTRACTS.md#exit-codes).
const EXIT_AUTH: i32 = 5;
/// Bound on each `tether` run.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// oidc-provider with JWT access tokens living `ttl_secs`, and `extra` flags.
async fn authorization_server(ttl_secs: u64, extra: &[&str]) -> anyhow::Result<ServerProcess> {
    Ok(peers::oidc_as()?
        .args(["--access-token-format", "jwt", "--token-ttl-secs"])
        .arg(ttl_secs.to_string())
        .args(extra)
        .start()
        .await?)
}

/// A free loopback port, for a server whose URL must be known before it starts (the
/// resource it names is the fault proxy's URL, which the client sees).
fn free_addr() -> anyhow::Result<std::net::SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// `tether serve --demo count` protected by `issuer`'s tokens, no leeway, behind a fault proxy
/// (passing everything until a plan is set); the resource is the proxy's URL.
async fn protected_behind_proxy(issuer: &str) -> anyhow::Result<(ServerProcess, FaultProxy)> {
    let addr = free_addr()?;
    let proxy = FaultProxy::start(addr, FaultPlan::pass_through()).await?;
    let resource = proxy.url_for("/mcp");
    let server = ServerSpec::tether_serve()?
        .bind_addr(addr)
        .args(["--demo", "count", "--oauth-issuer", issuer])
        .args(["--oauth-resource", &resource, "--oauth-scope", SCOPE])
        .args(["--oauth-leeway-secs", "0", "--oauth-keys-refetch-secs", "1"])
        .env("RUST_LOG", "info")
        .start()
        .await?;
    Ok((server, proxy))
}

/// What most tests run against: oidc-provider with JWTs, the protected server behind its fault
/// proxy, the URL the client uses (the proxy's), and a directory for the client's cache and
/// cookie jar. `server` is held only to keep the process up.
struct Stage {
    issuer: ServerProcess,
    server: ServerProcess,
    proxy: FaultProxy,
    url: String,
    dir: TempDir,
}

/// A [`Stage`] whose tokens live `ttl_secs`, the authorization server started with `as_flags`.
async fn stage(ttl_secs: u64, as_flags: &[&str]) -> anyhow::Result<Stage> {
    let issuer = authorization_server(ttl_secs, as_flags).await?;
    let (server, proxy) = protected_behind_proxy(issuer.url()).await?;
    let url = proxy.url_for("/mcp");
    Ok(Stage {
        issuer,
        server,
        proxy,
        url,
        dir: TempDir::new()?,
    })
}

/// The curl "browser" (`--oauth-open`), its cookie jar in `dir`.
fn browser(dir: &Path) -> String {
    let jar = dir.join("cookies");
    format!(
        "curl -sSL -c {jar} -b {jar} -o /dev/null",
        jar = jar.display()
    )
}

/// What a `tether` run printed and how it ended.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn text(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    fn signed_in(&self) -> bool {
        self.stderr.contains("to sign in, open")
    }

    /// The progress values of `--json` output.
    fn progress(&self) -> Vec<u64> {
        self.stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|m| m["method"] == "notifications/progress")
            .filter_map(|m| m["params"]["progress"].as_u64())
            .collect()
    }

    /// That the call exited 0 having delivered progress 1..=n once each, in order, and
    /// `counted n`; else an error carrying `context` and the run.
    fn counted(&self, n: u64, context: &str) -> anyhow::Result<()> {
        ensure!(
            self.code == Some(0)
                && self.progress() == (1..=n).collect::<Vec<_>>()
                && self.result_text() == Some(format!("counted {n}")),
            "counted {n}, every event once, in order: {context}\n{}",
            self.text()
        );
        Ok(())
    }

    fn result_text(&self) -> Option<String> {
        self.stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find_map(|m| {
                m["result"]["content"][0]["text"]
                    .as_str()
                    .map(str::to_owned)
            })
    }
}

async fn tether(args: &[&str]) -> anyhow::Result<Run> {
    let output = tokio::time::timeout(
        RUN_TIMEOUT,
        Command::new(tether_bin()?)
            .args(args)
            .env("RUST_LOG", "tether=info")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("tether did not finish")??;
    Ok(Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// `tether call URL count {n, interval_ms} --json` with the OAuth flags for `dir`.
async fn call_count(
    url: &str,
    dir: &Path,
    n: u64,
    interval_ms: u64,
    extra: &[&str],
) -> anyhow::Result<Run> {
    let arguments = format!(r#"{{"n": {n}, "interval_ms": {interval_ms}}}"#);
    let cache = dir.join("cache");
    let open = browser(dir);
    let mut args = vec!["call", url, "count", "--json", "--args", &arguments];
    let cache = cache.to_str().context("a UTF-8 path")?;
    args.extend(["--oauth-cache", cache, "--oauth-open", &open]);
    args.extend(extra);
    tether(&args).await
}

/// `tether auth login URL` with the cache in `dir`/cache and the curl browser.
async fn sign_in(url: &str, dir: &Path) -> anyhow::Result<()> {
    let cache = dir.join("cache");
    let login = tether(&[
        "auth",
        "login",
        url,
        "--oauth-cache",
        cache.to_str().context("a UTF-8 path")?,
        "--oauth-open",
        &browser(dir),
    ])
    .await?;
    ensure!(login.code == Some(0), "{}", login.text());
    ensure!(login.stdout.contains("signed in"), "{}", login.text());
    Ok(())
}

/// The authorization server's counters: grants by type, refused grants, registrations.
async fn counters(issuer: &str) -> anyhow::Result<Value> {
    let client = RawClient::new(&format!("{issuer}/test/counters"))?;
    let answer = client
        .send(
            &RawRequest::new("GET", "/test/counters")
                .header("host", issuer.trim_start_matches("http://")),
        )
        .await?
        .read_to_end()
        .await?;
    ensure!(answer.status == 200, "{answer:?}");
    Ok(serde_json::from_slice(&answer.body)?)
}

fn grants(counters: &Value, kind: &str) -> u64 {
    counters["grants"][kind].as_u64().unwrap_or(0)
}

fn mode(path: &Path) -> anyhow::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_call_signs_in_and_later_ones_use_the_cache() -> anyhow::Result<()> {
    let Stage {
        issuer,
        server: _server,
        proxy: _proxy,
        url,
        dir,
    } = stage(600, &[]).await?;

    let first = call_count(&url, dir.path(), 3, 0, &[]).await?;
    first.counted(3, "the first call")?;
    ensure!(
        first.signed_in(),
        "the first call signs in: {}",
        first.text()
    );
    let after_first = counters(issuer.url()).await?;
    ensure!(after_first["registrations"] == 1, "{after_first}");
    ensure!(
        grants(&after_first, "authorization_code") == 1,
        "{after_first}"
    );

    let second = call_count(&url, dir.path(), 3, 0, &["--oauth-non-interactive"]).await?;
    second.counted(3, "the second call")?;
    ensure!(
        !second.signed_in(),
        "the second call uses the cache: {}",
        second.text()
    );
    let after_second = counters(issuer.url()).await?;
    ensure!(
        after_second["registrations"] == 1 && grants(&after_second, "authorization_code") == 1,
        "no new registration or sign-in: {after_second}"
    );

    // The cache: 0700, every file in it 0600, no token in `auth status`.
    let cache = dir.path().join("cache");
    ensure!(mode(&cache)? == 0o700, "cache dir mode {:o}", mode(&cache)?);
    let mut files = 0;
    for entry in std::fs::read_dir(&cache)? {
        let path = entry?.path();
        ensure!(
            mode(&path)? == 0o600,
            "{} is {:o}",
            path.display(),
            mode(&path)?
        );
        files += 1;
    }
    ensure!(
        files >= 3,
        "a token entry, a registration and a lock: {files}"
    );
    let cache_flag = cache.to_str().context("utf-8")?;
    let status = tether(&["auth", "status", "--json", "--oauth-cache", cache_flag]).await?;
    ensure!(status.code == Some(0), "{}", status.text());
    let listed: Value = serde_json::from_str(status.stdout.lines().next().unwrap_or(""))
        .with_context(|| status.text())?;
    ensure!(listed["server_url"] == url.as_str(), "{listed}");
    ensure!(listed["issuer"] == issuer.url(), "{listed}");
    ensure!(listed["refreshable"] == true, "{listed}");
    ensure!(
        !status.stdout.contains("eyJ"),
        "status never prints a token: {}",
        status.stdout
    );

    let logout = tether(&["auth", "logout", &url, "--oauth-cache", cache_flag]).await?;
    ensure!(
        logout.code == Some(0) && logout.stdout.contains("removed 1"),
        "{}",
        logout.text()
    );
    let refused = call_count(&url, dir.path(), 3, 0, &["--oauth-non-interactive"]).await?;
    ensure!(refused.code == Some(EXIT_AUTH), "{}", refused.text());
    ensure!(
        refused.stderr.contains("interaction is off")
            && refused.stderr.contains("tether auth login"),
        "{}",
        refused.text()
    );
    Ok(())
}

/// Events of the long call: at 60 ms each, about 4 token lifetimes.
const LONG_CALL: u64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_outliving_its_tokens_resumes_through_cuts_exactly_once() -> anyhow::Result<()> {
    let Stage {
        issuer,
        server: _server,
        proxy,
        url,
        dir,
    } = stage(3, &[]).await?;
    sign_in(&url, dir.path()).await?;
    proxy.set_plan(FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1000)))?;
    for protocol in ["legacy", "auto"] {
        let before = counters(issuer.url()).await?;
        let run = call_count(
            &url,
            dir.path(),
            LONG_CALL,
            60,
            &["--protocol", protocol, "--oauth-non-interactive"],
        )
        .await?;
        let context = format!("{protocol}: {}\n{}", proxy.report(), run.text());
        run.counted(LONG_CALL, &context)?;
        let after = counters(issuer.url()).await?;
        let refreshes = grants(&after, "refresh_token") - grants(&before, "refresh_token");
        ensure!(
            refreshes >= 2,
            "the call outlived several tokens: {refreshes} refreshes; {context}"
        );
        ensure!(
            after["grant_errors"] == 0,
            "no refresh token spent twice: {after}"
        );
    }
    ensure!(proxy.counters().cuts >= 2, "{}", proxy.report());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_a_new_process_uses_the_cached_tokens() -> anyhow::Result<()> {
    let Stage {
        issuer: _issuer,
        server: _server,
        proxy: _proxy,
        url,
        dir,
    } = stage(3, &[]).await?;
    let token_file = dir.path().join("call.json");
    let cache = dir.path().join("cache");
    let open = browser(dir.path());
    let mut first = Command::new(tether_bin()?)
        .args([
            "call",
            &url,
            "count",
            "--json",
            "--args",
            r#"{"n": 100, "interval_ms": 60}"#,
        ])
        .arg("--token-file")
        .arg(&token_file)
        .arg("--oauth-cache")
        .arg(&cache)
        .args(["--oauth-open", &open])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // Until some events are committed, then SIGKILL.
    let mut stdout = tokio::io::BufReader::new(first.stdout.take().context("stdout")?);
    let mut seen = Vec::new();
    tokio::time::timeout(RUN_TIMEOUT, async {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        while seen.len() < 30 {
            line.clear();
            if stdout.read_line(&mut line).await? == 0 {
                break;
            }
            if let Ok(message) = serde_json::from_str::<Value>(&line)
                && let Some(p) = message["params"]["progress"].as_u64()
            {
                seen.push(p);
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("the first call stalled")??;
    first.start_kill()?;
    first.wait().await?;
    ensure!(seen.len() == 30, "{seen:?}");
    // Past the token's lifetime before resuming.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let resumed = tether(&["call", "--resume", token_file.to_str().context("utf-8")?]).await?;
    ensure!(resumed.code == Some(0), "{}", resumed.text());
    ensure!(
        !resumed.signed_in(),
        "the cached tokens serve the resume: {}",
        resumed.text()
    );
    let rest = resumed.progress();
    let last = *seen.last().context("progress")?;
    // The token file is written after each commit; the event before the kill may repeat once.
    let from = rest.first().copied().context("progress after resuming")?;
    ensure!(
        from == last || from == last + 1,
        "resumed at {from} after {last}: {}",
        resumed.text()
    );
    ensure!(
        rest == (from..=100).collect::<Vec<_>>(),
        "the rest, once each: {}",
        resumed.text()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_refresh_a_due_token_once() -> anyhow::Result<()> {
    const TTL: u64 = 12;
    let Stage {
        issuer,
        server: _server,
        proxy: _proxy,
        url,
        dir,
    } = stage(TTL, &[]).await?;
    sign_in(&url, dir.path()).await?;
    // Due: within min(60 s, TTL / 4) = 3 s of expiry, and not yet expired.
    tokio::time::sleep(Duration::from_secs(TTL - 2)).await;
    let before = counters(issuer.url()).await?;
    let call = || call_count(&url, dir.path(), 2, 0, &["--oauth-non-interactive"]);
    let (a, b, c) = tokio::join!(call(), call(), call());
    for run in [a, b, c] {
        run?.counted(2, "one of three concurrent calls")?;
    }
    let after = counters(issuer.url()).await?;
    ensure!(
        grants(&after, "refresh_token") - grants(&before, "refresh_token") == 1,
        "one refresh among three processes: {before} -> {after}"
    );
    ensure!(after["grant_errors"] == 0, "{after}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_connect_keeps_working_across_token_expiries() -> anyhow::Result<()> {
    let Stage {
        issuer,
        server: _server,
        proxy: _proxy,
        url,
        dir,
    } = stage(3, &[]).await?;
    let cache = dir.path().join("cache");
    let cache = cache.to_str().context("utf-8")?;
    sign_in(&url, dir.path()).await?;
    // Three calls of 4 s with pauses: every one spans an expiry.
    let output = tokio::time::timeout(
        RUN_TIMEOUT,
        Command::new(python()?)
            .arg(interop_dir().join("python/stdio_client.py"))
            .arg("A:40:100,B:40:100,C:40:100")
            .arg("--")
            .arg(tether_bin()?)
            .args([
                "connect",
                &url,
                "--oauth-cache",
                cache,
                "--oauth-non-interactive",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("the stdio client did not finish")??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for call in ["A", "B", "C"] {
        let progress: Vec<u64> = lines
            .iter()
            .filter(|l| l["call"] == call)
            .filter_map(|l| l["progress"].as_u64())
            .collect();
        ensure!(
            progress == (1..=40).collect::<Vec<_>>(),
            "call {call}: {stdout}\n{stderr}"
        );
        ensure!(
            lines
                .iter()
                .any(|l| l["call"] == call && l["result"] == "counted 40"),
            "call {call}: {stdout}\n{stderr}"
        );
    }
    let refreshes = grants(&counters(issuer.url()).await?, "refresh_token");
    ensure!(
        refreshes >= 2,
        "the tokens expired and were refreshed: {refreshes}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_state_a_declined_consent_and_no_s256_fail_with_exit_5() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    // A "browser" that answers the callback itself, with another state.
    let forger = dir.path().join("forge.py");
    std::fs::write(
        &forger,
        "import sys, urllib.parse, urllib.request\n\
         q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(sys.argv[1]).query))\n\
         try:\n    urllib.request.urlopen(q['redirect_uri'] + '?code=forged&state=not-yours').read()\n\
         except Exception:\n    pass\n",
    )?;
    let python = python()?;
    let forge = format!("{} {}", python.display(), forger.display());
    let cases: [(&[&str], Option<&str>, &str); 3] = [
        (&[], Some(forge.as_str()), "state does not match"),
        (&["--deny-consent"], None, "access_denied"),
        (&["--hide-s256"], None, "does not offer PKCE with S256"),
    ];
    for (as_flags, opener, message) in cases {
        let Stage {
            issuer,
            server: _server,
            url,
            proxy: _proxy,
            dir: case,
        } = stage(600, as_flags).await?;
        let open = opener.map_or_else(|| browser(case.path()), str::to_owned);
        let cache = case.path().join("cache");
        let run = tether(&[
            "call",
            &url,
            "count",
            "--oauth-cache",
            cache.to_str().context("utf-8")?,
            "--oauth-open",
            &open,
        ])
        .await?;
        ensure!(run.code == Some(EXIT_AUTH), "{as_flags:?}: {}", run.text());
        ensure!(
            run.stderr.contains(message),
            "{as_flags:?}: {message:?} in {}",
            run.text()
        );
        let seen = counters(issuer.url()).await?;
        ensure!(
            grants(&seen, "authorization_code") == 0,
            "{as_flags:?}: no code was exchanged: {seen}"
        );
        if as_flags == ["--hide-s256"] {
            ensure!(
                seen["registrations"] == 0,
                "refused before registering: {seen}"
            );
        }
    }
    Ok(())
}

/// `tether serve` behind a fault proxy accepting `issuer`'s opaque tokens by introspection,
/// answers never kept (a revocation is seen at the next request), `count` needing `mcp:admin`
/// when `tool_scope` says so.
async fn introspecting_behind_proxy(
    issuer: &str,
    dir: &Path,
    tool_scope: bool,
) -> anyhow::Result<(ServerProcess, FaultProxy)> {
    let addr = free_addr()?;
    let proxy = FaultProxy::start(addr, FaultPlan::pass_through()).await?;
    let resource = proxy.url_for("/mcp");
    let secret = dir.join("introspection-secret");
    std::fs::write(&secret, "tether-rs-secret\n")?;
    let mut spec = ServerSpec::tether_serve()?
        .bind_addr(addr)
        .args(["--demo", "count", "--oauth-issuer", issuer])
        .args(["--oauth-resource", &resource, "--oauth-scope", SCOPE])
        .arg("--oauth-introspection-url")
        .arg(format!("{issuer}/token/introspection"))
        .args(["--oauth-introspection-client-id", "tether-rs"])
        .arg("--oauth-introspection-secret-file")
        .arg(&secret)
        .args(["--oauth-introspection-cache-secs", "0"])
        .env("RUST_LOG", "info");
    if tool_scope {
        spec = spec.args(["--oauth-tool-scope", "count=mcp:admin"]);
    }
    Ok((spec.start().await?, proxy))
}

/// The one token entry in the cache `dir`.
fn cached_entry(dir: &Path) -> anyhow::Result<Value> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("token-") && name.ends_with(".json") {
            return Ok(serde_json::from_slice(&std::fs::read(&path)?)?);
        }
    }
    anyhow::bail!("no token entry in {}", dir.display())
}

/// The token is revoked at the authorization server in the middle of a call (oidc-provider
/// then revokes every token of the grant, the refresh token too); the server refuses it at
/// the next resume after a cut; the client's refresh is refused, it signs in again, and the
/// stream goes on from the same cursor: every event once. Tokens live 10 minutes, so nothing
/// is due ahead of expiry: the refusal alone drives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_refused_for_a_revoked_token_signs_in_again_and_continues() -> anyhow::Result<()> {
    const N: u64 = 150;
    let issuer = peers::oidc_as()?.start().await?;
    let dir = TempDir::new()?;
    let (_server, proxy) = introspecting_behind_proxy(issuer.url(), dir.path(), false).await?;
    let url = proxy.url_for("/mcp");
    let cache = dir.path().join("cache");
    let open = browser(dir.path());
    sign_in(&url, dir.path()).await?;
    let entry = cached_entry(&cache)?;
    let (token, client_id) = (
        entry["access_token"]
            .as_str()
            .context("a token")?
            .to_owned(),
        entry["client"]["client_id"]
            .as_str()
            .context("a client")?
            .to_owned(),
    );
    proxy.set_plan(FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1000)))?;
    let arguments = format!(r#"{{"n": {N}, "interval_ms": 30}}"#);
    let mut call = Command::new(tether_bin()?)
        .args([
            "call",
            &url,
            "count",
            "--json",
            "--args",
            &arguments,
            "--oauth-open",
            &open,
        ])
        .arg("--oauth-cache")
        .arg(&cache)
        .env("RUST_LOG", "tether=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdout = tokio::io::BufReader::new(call.stdout.take().context("stdout")?);
    let mut progress = Vec::new();
    let mut result = None;
    let mut revoked = false;
    tokio::time::timeout(RUN_TIMEOUT, async {
        use tokio::io::AsyncBufReadExt as _;
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line).await? == 0 {
                break;
            }
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if let Some(p) = message["params"]["progress"].as_u64() {
                progress.push(p);
            }
            if let Some(text) = message["result"]["content"][0]["text"].as_str() {
                result = Some(text.to_owned());
            }
            if progress.len() == 20 && !revoked {
                let body =
                    format!("token={token}&token_type_hint=access_token&client_id={client_id}");
                let raw = RawClient::new(&format!("{}/token/revocation", issuer.url()))?;
                let answer = raw
                    .send(
                        &RawRequest::new("POST", "/token/revocation")
                            .header("host", issuer.url().trim_start_matches("http://"))
                            .header("content-type", "application/x-www-form-urlencoded")
                            .body(body),
                    )
                    .await?
                    .read_to_end()
                    .await?;
                ensure!(answer.status == 200, "revocation: {answer:?}");
                revoked = true;
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("the call stalled")??;
    let status = call.wait().await?;
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(
        &mut call.stderr.take().context("stderr")?,
        &mut stderr,
    )
    .await?;
    let context = format!(
        "{}\nprogress {progress:?}\n{stderr}\n--- authorization server\n{}",
        proxy.report(),
        issuer.logs()
    );
    ensure!(status.success() && revoked, "{context}");
    ensure!(
        progress == (1..=N).collect::<Vec<_>>(),
        "every event once: {context}"
    );
    ensure!(result == Some(format!("counted {N}")), "{context}");
    let seen = counters(issuer.url()).await?;
    ensure!(
        grants(&seen, "authorization_code") == 2 && seen["grant_errors"] == 1,
        "the refusal was met by a refused refresh and a second sign-in: {seen}"
    );
    ensure!(
        cached_entry(&cache)?["access_token"] != token.as_str(),
        "a new token is cached"
    );
    Ok(())
}

/// A tool that needs a scope the token lacks: 403 `insufficient_scope`, and the client signs
/// in again asking for the union of the scopes it had and the challenged ones (a refresh
/// cannot widen scope); the call then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_for_scope_signs_in_again_with_the_union_of_scopes() -> anyhow::Result<()> {
    let issuer = peers::oidc_as()?.start().await?;
    let dir = TempDir::new()?;
    let (_server, proxy) = introspecting_behind_proxy(issuer.url(), dir.path(), true).await?;
    let url = proxy.url_for("/mcp");
    let run = call_count(&url, dir.path(), 3, 0, &[]).await?;
    run.counted(3, "a call needing mcp:admin")?;
    let seen = counters(issuer.url()).await?;
    ensure!(
        grants(&seen, "authorization_code") == 2,
        "a sign-in, then a step-up: {seen}"
    );
    let scope = cached_entry(&dir.path().join("cache"))?["scope"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    for wanted in [SCOPE, "mcp:admin"] {
        ensure!(
            scope.split(' ').any(|s| s == wanted),
            "{wanted} in {scope:?}"
        );
    }
    Ok(())
}

/// Another SDK's resource server: the TypeScript SDK's `requireBearerAuth` and metadata
/// router in front of its stateless server. `tether call` signs in through the same
/// authorization server and calls `count`, in both eras' choice (`legacy`, and `auto`, whose
/// probe that server answers as a 2025 server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdks_protected_server_is_signed_in_to() -> anyhow::Result<()> {
    let issuer = peers::oidc_as()?.start().await?;
    let server = peers::ts_protected_server(issuer.url())?.start().await?;
    let dir = TempDir::new()?;
    for (protocol, signs_in) in [("legacy", true), ("auto", false)] {
        let run = call_count(server.url(), dir.path(), 3, 0, &["--protocol", protocol]).await?;
        let context = format!("{protocol}: {}\n--- server\n{}", run.text(), server.logs());
        run.counted(3, &context)?;
        ensure!(
            run.signed_in() == signs_in,
            "sign in once, then the cache: {context}"
        );
    }
    Ok(())
}
