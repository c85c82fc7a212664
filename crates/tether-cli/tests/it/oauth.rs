//! `tether serve --oauth-issuer URL`: tether as an OAuth 2.1 protected resource, against real
//! authorization servers installed by `scripts/peers.sh` and run on loopback: oauth2-mock-server
//! (JWTs, hostile ones included) and oidc-provider (opaque tokens, introspected).
//! What the specification obliges, one test each:
//!
//! - Protected Resource Metadata at the path-suffixed and the root well-known URI, with
//!   `resource` and `authorization_servers` exactly as configured, readable cross-origin;
//! - no token: 401 with `resource_metadata` (and the required `scope`); a token in the query
//!   string: refused;
//! - hostile tokens (`alg: none`, HS256 keyed with the public key, a tampered payload, another
//!   audience, another issuer, an unknown key, expired, not yet valid, no `exp`, oversized,
//!   malformed): 401 `invalid_token` each, nothing served, and counted by reason;
//! - the issuer's tokens accepted in both eras (`tether call`, legacy and auto), the principal
//!   being `iss` + `sub`: another subject's token cannot use the first one's session, nor get,
//!   stream or cancel its tasks;
//! - step-up: a tool that needs a scope the token lacks is 403 `insufficient_scope` naming every
//!   scope the call needs; with it, the call runs;
//! - key rotation: after the authorization server switches keys, new tokens are accepted after
//!   one refetch and tokens of the old key are refused;
//! - an issuer that cannot be reached before its keys were loaded: 503, then accepted once back;
//! - a protected `count` call through a fault proxy's cuts, in both eras, on memory, SQLite
//!   and Redis, and through the gateway: every progress event once, in order; the gateway's
//!   child never sees the token;
//! - opaque tokens (RFC 7662): active ones serve both eras with the answer's scopes; inactive,
//!   revoked and other-audience ones are refused; with answers not kept, a revocation is seen
//!   at the next request; an unreachable introspection endpoint leaves cached tokens working.

mod client;

use std::time::Duration;

use anyhow::{Context as _, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tempfile::TempDir;
use tether_testkit::launcher::{ServerProcess, ServerSpec, tether_bin};
use tether_testkit::peers;
use tether_testkit::raw::{RawClient, RawRequest, Transcript};

/// The scope every request needs.
const SCOPE: &str = "mcp";

/// The scope `count` needs besides it.
const COUNT_SCOPE: &str = "count:run";

/// The authorization server, on a port of its own.
async fn authorization_server() -> anyhow::Result<ServerProcess> {
    Ok(peers::oauth_mock_as()?.start().await?)
}

/// `tether serve --demo count` protected by `issuer`'s tokens.
async fn protected(issuer: &str) -> anyhow::Result<ServerProcess> {
    protected_on(issuer, "memory").await
}

/// [`protected`] on `store`.
async fn protected_on(issuer: &str, store: &str) -> anyhow::Result<ServerProcess> {
    Ok(ServerSpec::tether_serve()?
        .args([
            "--demo",
            "count",
            "--store",
            store,
            "--oauth-issuer",
            issuer,
        ])
        .args(["--oauth-scope", SCOPE, "--oauth-tool-scope"])
        .arg(format!("count={COUNT_SCOPE}"))
        .args(["--oauth-keys-refetch-secs", "1"])
        .env("RUST_LOG", "info")
        .start()
        .await?)
}

/// A token from `issuer` for `resource` with `scope`, its payload changed by `claims` (a null
/// removes a claim) and its header by `header`.
async fn token(
    issuer: &str,
    resource: &str,
    scope: &str,
    claims: &Value,
    header: &Value,
) -> anyhow::Result<String> {
    let form = [
        ("grant_type", "client_credentials".to_owned()),
        ("resource", resource.to_owned()),
        ("scope", scope.to_owned()),
        ("claims", claims.to_string()),
        ("header", header.to_string()),
    ]
    .iter()
    .map(|(name, value)| format!("{name}={}", urlencode(value)))
    .collect::<Vec<_>>()
    .join("&");
    let client = RawClient::new(&format!("{issuer}/token"))?;
    let request = RawRequest::new("POST", "/token")
        .header("host", authority(issuer))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form);
    let answer = client.send(&request).await?.read_to_end().await?;
    ensure!(answer.status == 200, "token endpoint: {answer:?}");
    let body: Value = serde_json::from_slice(&answer.body)?;
    body["access_token"]
        .as_str()
        .map(str::to_owned)
        .context("an access_token")
}

/// `HOST:PORT` of an `http://HOST:PORT[/…]` URL.
fn authority(url: &str) -> &str {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap_or(rest)
}

fn urlencode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "oauth-test", "version": "0"}}})
}

/// POSTs `initialize` with `token` (none: no header).
async fn post_initialize(url: &str, token: Option<&str>) -> anyhow::Result<Transcript> {
    let mut client = RawClient::new(url)?;
    if let Some(token) = token {
        client = client.with_bearer_token(token);
    }
    client
        .send(&client.request("POST").json(&initialize()))
        .await?
        .read_to_end()
        .await
}

fn challenge(transcript: &Transcript) -> String {
    transcript
        .headers
        .get("www-authenticate")
        .unwrap_or_default()
        .to_owned()
}

fn metadata_url(server: &ServerProcess) -> String {
    format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        server.addr()
    )
}

/// `tether call URL count` with `token`; its output and whether it succeeded.
async fn tether_call(url: &str, token: &str, protocol: &str) -> anyhow::Result<(bool, String)> {
    tether_call_with(url, token, protocol, &["--args", r#"{"n": 3}"#]).await
}

/// [`tether_call`] with other flags.
async fn tether_call_with(
    url: &str,
    token: &str,
    protocol: &str,
    flags: &[&str],
) -> anyhow::Result<(bool, String)> {
    let dir = TempDir::new()?;
    let file = dir.path().join("token");
    std::fs::write(&file, token)?;
    let output = tokio::process::Command::new(tether_bin()?)
        .args(["call", url, "count", "--protocol", protocol])
        .args(flags)
        .arg("--bearer-token-file")
        .arg(&file)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_and_the_challenge_point_clients_to_the_authorization_server()
-> anyhow::Result<()> {
    let issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let client = RawClient::new(&resource)?;
        let answer = client
            .send(
                &RawRequest::new("GET", path)
                    .header("host", authority(&resource))
                    .header("origin", "https://inspector.example"),
            )
            .await?
            .read_to_end()
            .await?;
        ensure!(answer.status == 200, "{path}: {answer:?}");
        ensure!(
            answer.headers.get("access-control-allow-origin") == Some("*"),
            "{path}: readable cross-origin: {answer:?}"
        );
        let document: Value = serde_json::from_slice(&answer.body)?;
        ensure!(document["resource"] == resource.as_str(), "{document}");
        ensure!(
            document["authorization_servers"] == json!([issuer.url()]),
            "the issuer exactly as given: {document}"
        );
        ensure!(
            document["scopes_supported"] == json!([SCOPE, COUNT_SCOPE]),
            "{document}"
        );
        ensure!(
            document["bearer_methods_supported"] == json!(["header"]),
            "{document}"
        );
    }
    let answer = post_initialize(&resource, None).await?;
    ensure!(answer.status == 401, "{answer:?}");
    ensure!(
        challenge(&answer)
            == format!(
                r#"Bearer resource_metadata="{}", scope="{SCOPE}""#,
                metadata_url(&server)
            ),
        "{answer:?}"
    );
    // A good token, but in the query string: refused.
    let good = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    let client = RawClient::new(&resource)?;
    let in_query = client
        .send(
            &RawRequest::new("POST", &format!("/mcp?access_token={good}"))
                .header("host", authority(&resource))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .json(&initialize()),
        )
        .await?
        .read_to_end()
        .await?;
    ensure!(
        in_query.status == 401 && challenge(&in_query).contains(r#"error="invalid_token""#),
        "{in_query:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tokens_are_refused_as_invalid_and_counted() -> anyhow::Result<()> {
    let issuer = authorization_server().await?;
    let other_issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    let good = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let parts: Vec<&str> = good.split('.').collect();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0])?)?;
    let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1])?)?;
    let encode = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    // HS256 keyed with the issuer's public key, as the classic confusion attack does.
    let jwks = RawClient::new(issuer.url())?
        .send(&RawRequest::new("GET", "/jwks").header("host", authority(issuer.url())))
        .await?
        .read_to_end()
        .await?;
    let hs_header = json!({"alg": "HS256", "typ": "JWT", "kid": header["kid"]});
    let hs_input = format!("{}.{}", encode(&hs_header), parts[1]);
    let hs_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &jwks.body);
    let hs_signature = URL_SAFE_NO_PAD.encode(ring::hmac::sign(&hs_key, hs_input.as_bytes()));
    let mut tampered = payload.clone();
    tampered["sub"] = json!("someone-else");
    let mut unknown_kid = header.clone();
    unknown_kid["kid"] = json!("not-a-key-of-the-issuer");

    let hostile: Vec<(&str, String)> = vec![
        (
            "alg none",
            format!(
                "{}.{}.",
                encode(&json!({"alg": "none", "typ": "JWT"})),
                parts[1]
            ),
        ),
        (
            "HS256 with the public key",
            format!("{hs_input}.{hs_signature}"),
        ),
        (
            "a tampered payload",
            format!("{}.{}.{}", parts[0], encode(&tampered), parts[2]),
        ),
        (
            "an unknown key",
            format!("{}.{}.{}", encode(&unknown_kid), parts[1], parts[2]),
        ),
        (
            "another audience",
            token(
                issuer.url(),
                "http://127.0.0.1:1/mcp",
                SCOPE,
                &json!({}),
                &json!({}),
            )
            .await?,
        ),
        (
            "another issuer",
            token(other_issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?,
        ),
        (
            "expired",
            token(
                issuer.url(),
                &resource,
                SCOPE,
                &json!({"exp": now - 600, "iat": now - 1200, "nbf": now - 1200}),
                &json!({}),
            )
            .await?,
        ),
        (
            "not yet valid",
            token(
                issuer.url(),
                &resource,
                SCOPE,
                &json!({"nbf": now + 600}),
                &json!({}),
            )
            .await?,
        ),
        (
            "without exp",
            token(
                issuer.url(),
                &resource,
                SCOPE,
                &json!({"exp": null}),
                &json!({}),
            )
            .await?,
        ),
        (
            "a typ that is not an access token",
            token(
                issuer.url(),
                &resource,
                SCOPE,
                &json!({}),
                &json!({"typ": "dpop+jwt"}),
            )
            .await?,
        ),
        ("oversized", format!("{good}{}", "A".repeat(20_000))),
        ("malformed", "not.a.jwt".to_owned()),
        ("two parts", format!("{}.{}", parts[0], parts[1])),
    ];
    for (what, hostile) in &hostile {
        let answer = post_initialize(&resource, Some(hostile)).await?;
        ensure!(
            answer.status == 401,
            "{what}: status {} {:?}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
        ensure!(
            challenge(&answer)
                == format!(
                    r#"Bearer resource_metadata="{}", error="invalid_token""#,
                    metadata_url(&server)
                ),
            "{what}: {answer:?}"
        );
        ensure!(
            answer.headers.get("mcp-session-id").is_none(),
            "{what}: nothing served"
        );
        let body: Value = serde_json::from_slice(&answer.body)?;
        ensure!(body["error"]["code"] == -32600, "{what}: {body}");
    }
    // The genuine token, after all that, works; `typ` `at+jwt` too.
    for header in [json!({}), json!({"typ": "at+jwt"})] {
        let genuine = token(issuer.url(), &resource, SCOPE, &json!({}), &header).await?;
        let answer = post_initialize(&resource, Some(&genuine)).await?;
        ensure!(answer.status == 200, "{header}: {answer:?}");
    }
    let metrics = RawClient::new(&resource)?
        .with_bearer_token(&good)
        .send(
            &RawRequest::new("GET", "/metrics")
                .header("host", authority(&resource))
                .header("authorization", &format!("Bearer {good}")),
        )
        .await?
        .read_to_end()
        .await?;
    let text = String::from_utf8_lossy(&metrics.body);
    for reason in [
        "algorithm",
        "bad_signature",
        "unknown_key",
        "audience",
        "issuer",
        "expired",
        "not_yet_valid",
        "missing_claim",
        "type",
        "malformed",
    ] {
        ensure!(
            text.contains(&format!(
                "tether_auth_failures_total{{reason=\"{reason}\"}}"
            )),
            "{reason} counted:\n{text}"
        );
    }
    ensure!(
        !server.logs().contains(&good),
        "the log never holds a token"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_tokens_serve_both_eras_with_step_up_and_principals_apart() -> anyhow::Result<()> {
    let issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    let base = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    let both = format!("{SCOPE} {COUNT_SCOPE}");
    let full = token(issuer.url(), &resource, &both, &json!({}), &json!({})).await?;
    for protocol in ["legacy", "auto"] {
        // Without the tool's scope: 403 naming every scope the call needs.
        let (ok, output) = tether_call(&resource, &base, protocol).await?;
        ensure!(!ok, "{protocol}: refused: {output}");
        ensure!(
            output.contains("403") && output.contains(&format!("needs {both}")),
            "{protocol}: {output}"
        );
        // With it: the call runs.
        let (ok, output) = tether_call(&resource, &full, protocol).await?;
        ensure!(ok, "{protocol}: {output}");
        ensure!(output.contains("counted 3"), "{protocol}: {output}");
    }
    let client = RawClient::new(&resource)?.with_bearer_token(&base);
    // The same refusal to a 2026-07-28 request, with the challenge a client steps up with.
    let step_up = client
        .exchange(&client.modern(
            2,
            "tools/call",
            json!({"name": "count", "arguments": {"n": 1}}),
            json!({}),
        ))
        .await?;
    ensure!(step_up.status == 403, "{step_up:?}");
    ensure!(
        challenge(&step_up)
            == format!(
                r#"Bearer resource_metadata="{}", error="insufficient_scope", scope="{both}""#,
                metadata_url(&server)
            ),
        "{step_up:?}"
    );
    // Another subject of the same issuer cannot use the first one's session.
    let started = post_initialize(&resource, Some(&full)).await?;
    let session = started
        .headers
        .get("mcp-session-id")
        .context("a session")?
        .to_owned();
    let mallory = token(
        issuer.url(),
        &resource,
        &both,
        &json!({"sub": "mallory"}),
        &json!({}),
    )
    .await?;
    let mut intruder = RawClient::new(&resource)?.with_bearer_token(&mallory);
    intruder.set_session_id(Some(session.clone()));
    let get = intruder
        .send(&intruder.request("GET"))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        get.status == 404,
        "another principal's session is unknown: {get:?}"
    );
    let delete = intruder
        .send(&intruder.request("DELETE"))
        .await?
        .read_to_end()
        .await?;
    ensure!(delete.status == 404, "{delete:?}");
    let mut owner = RawClient::new(&resource)?.with_bearer_token(&full);
    owner.set_session_id(Some(session));
    let delete = owner
        .send(&owner.request("DELETE"))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        delete.status == 200,
        "the owner's session still there: {delete:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_takes_one_refetch_and_retires_the_old_key() -> anyhow::Result<()> {
    let mut issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    let old = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    ensure!(post_initialize(&resource, Some(&old)).await?.status == 200);
    // A fresh key at every start: the server rotates its keys.
    issuer.restart().await?;
    let new = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    ensure!(
        post_initialize(&resource, Some(&old)).await?.status == 200,
        "the cached old key still verifies until the set is fetched again"
    );
    // Past the refetch interval, the new key's token makes tether fetch the set once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let answer = post_initialize(&resource, Some(&new)).await?;
    ensure!(
        answer.status == 200,
        "the new key after one refetch: {answer:?}"
    );
    let answer = post_initialize(&resource, Some(&old)).await?;
    ensure!(
        answer.status == 401 && challenge(&answer).contains("invalid_token"),
        "the old key is gone: {answer:?}"
    );
    Ok(())
}

#[tokio::test]
async fn oauth_and_a_token_file_together_are_a_usage_error() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let file = dir.path().join("tokens");
    std::fs::write(&file, "alice:s3cret-token\n")?;
    let output = tokio::process::Command::new(tether_bin()?)
        .args([
            "serve",
            "--oauth-issuer",
            "http://127.0.0.1:9",
            "--auth-token-file",
        ])
        .arg(&file)
        .output()
        .await?;
    ensure!(output.status.code() == Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        stderr.contains("--auth-token-file") && stderr.contains("--oauth-issuer"),
        "{stderr}"
    );
    Ok(())
}

/// A call through cuts with a token: every progress event once, in order, in both eras, on
/// the memory and SQLite stores (each resume is authenticated like the first request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_call_resumes_through_cuts_exactly_once() -> anyhow::Result<()> {
    let issuer = authorization_server().await?;
    let dir = TempDir::new()?;
    let sqlite = format!("sqlite:{}", dir.path().join("oauth.db").display());
    let redis = tether_testkit::redis::RedisServer::start().await?;
    for store in ["memory", sqlite.as_str(), redis.url().as_str()] {
        let server = protected_on(issuer.url(), store).await?;
        let resource = server.url().to_owned();
        let scopes = format!("{SCOPE} {COUNT_SCOPE}");
        let token = token(issuer.url(), &resource, &scopes, &json!({}), &json!({})).await?;
        for protocol in ["legacy", "auto"] {
            counted_through_cuts(&server, &token, protocol).await?;
        }
    }
    Ok(())
}

/// Progress events a protected `count` through cuts delivers.
const THROUGH_CUTS: u64 = 150;

/// `tether call count` with `token` through a fault proxy in front of `server`, which must
/// deliver every progress event once, in order, and the result.
async fn counted_through_cuts(
    server: &ServerProcess,
    token: &str,
    protocol: &str,
) -> anyhow::Result<()> {
    use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};
    const N: u64 = THROUGH_CUTS;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).with_jitter(1000));
    let proxy = FaultProxy::start(server.addr(), plan).await?;
    let arguments = format!(r#"{{"n": {N}, "interval_ms": 2}}"#);
    let (ok, output) = tether_call_with(
        &proxy.url_for("/mcp"),
        token,
        protocol,
        &["--args", &arguments, "--json"],
    )
    .await?;
    let context = format!("{protocol}: {}\n{output}", proxy.report());
    ensure!(ok, "{context}");
    let messages: Vec<Value> = output
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let progress: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_u64())
        .collect();
    ensure!(
        progress == (1..=N).collect::<Vec<_>>(),
        "once each, in order: {context}"
    );
    ensure!(
        messages
            .iter()
            .any(|m| m["result"]["content"][0]["text"] == format!("counted {N}")),
        "{context}"
    );
    ensure!(proxy.counters().cuts >= 1, "no cut: {context}");
    Ok(())
}

/// The gateway protects a stdio server the same way, and never passes the client's token
/// on (the specification forbids token passthrough): the child's environment and everything
/// it reads on stdin are recorded and searched for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_protects_its_child_and_never_hands_it_the_token() -> anyhow::Result<()> {
    use tether_testkit::launcher::BindArg;
    let issuer = authorization_server().await?;
    let dir = TempDir::new()?;
    let (program, args) = peers::python_stdio_server()?.into_parts();
    // The child: record the environment and stdin, then run the Python SDK's stdio server.
    let record = r#"env > "$0/env"; tee -a "$0/stdin" | exec "$@""#;
    let server = ServerSpec::tether_serve()?
        .bind_arg(BindArg::Placeholders)
        .args(["--bind", "{bind}", "--store", "memory", "--retry-ms", "100"])
        .args(["--oauth-issuer", issuer.url(), "--oauth-scope", SCOPE])
        .args(["--", "sh", "-c", record])
        .arg(dir.path())
        .arg(program)
        .args(args)
        .start()
        .await?;
    let resource = server.url().to_owned();
    let answer = post_initialize(&resource, None).await?;
    ensure!(
        answer.status == 401 && challenge(&answer).contains("resource_metadata="),
        "{answer:?}"
    );
    let token = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    for protocol in ["legacy", "auto"] {
        counted_through_cuts(&server, &token, protocol).await?;
    }
    let stdin = std::fs::read_to_string(dir.path().join("stdin"))?;
    let env = std::fs::read_to_string(dir.path().join("env"))?;
    ensure!(
        stdin.contains("tools/call"),
        "the child was called: {stdin}"
    );
    // The signature is the part no other field repeats.
    let signature = token.rsplit('.').next().context("a JWT")?;
    for (what, seen) in [("stdin", &stdin), ("environment", &env)] {
        ensure!(
            !seen.contains(signature) && !seen.contains(&token),
            "the token reached the child's {what}"
        );
    }
    Ok(())
}

/// An authorization server that cannot be reached before any key was loaded: 503 with
/// `Retry-After`, never a hang or a crash; once it is back, tokens are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_issuer_is_a_503_until_it_is_back() -> anyhow::Result<()> {
    let mut issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    let early = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    issuer.kill().await?;
    let answer = post_initialize(&resource, Some(&early)).await?;
    ensure!(answer.status == 503, "{answer:?}");
    ensure!(answer.headers.get("retry-after").is_some(), "{answer:?}");
    issuer.restart().await?;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    let answer = post_initialize(&resource, Some(&fresh)).await?;
    ensure!(
        answer.status == 200,
        "accepted once the issuer is back: {answer:?}"
    );
    Ok(())
}

/// The tool scope of the introspection tests, which oidc-provider grants on request.
const ADMIN_SCOPE: &str = "mcp:admin";

/// `tether serve --demo count` accepting `issuer`'s opaque tokens through its introspection
/// endpoint, as the client `tether-rs`, answers trusted for `cache_secs`.
async fn introspecting(
    issuer: &str,
    dir: &TempDir,
    cache_secs: u64,
) -> anyhow::Result<ServerProcess> {
    let secret = dir
        .path()
        .join(format!("introspection-secret-{cache_secs}"));
    std::fs::write(&secret, "tether-rs-secret\n")?;
    Ok(ServerSpec::tether_serve()?
        .args(["--demo", "count", "--oauth-issuer", issuer])
        .args(["--oauth-scope", "mcp:tools", "--oauth-tool-scope"])
        .arg(format!("count={ADMIN_SCOPE}"))
        .arg("--oauth-introspection-url")
        .arg(format!("{issuer}/token/introspection"))
        .args(["--oauth-introspection-client-id", "tether-rs"])
        .arg("--oauth-introspection-secret-file")
        .arg(&secret)
        .args(["--oauth-introspection-cache-secs", &cache_secs.to_string()])
        .env("RUST_LOG", "info")
        .start()
        .await?)
}

/// A form POST to `issuer`'s `path` as `client` (secret `<client>-secret`, HTTP Basic).
async fn as_client(
    issuer: &str,
    path: &str,
    client: &str,
    form: &[(&str, &str)],
) -> anyhow::Result<Transcript> {
    use base64::engine::general_purpose::STANDARD;
    let basic = STANDARD.encode(format!("{client}:{client}-secret"));
    let body = form
        .iter()
        .map(|(name, value)| format!("{name}={}", urlencode(value)))
        .collect::<Vec<_>>()
        .join("&");
    let raw = RawClient::new(&format!("{issuer}{path}"))?;
    raw.send(
        &RawRequest::new("POST", path)
            .header("host", authority(issuer))
            .header("authorization", &format!("Basic {basic}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body),
    )
    .await?
    .read_to_end()
    .await
}

/// An opaque token oidc-provider issues to `client` for `resource` with `scope`.
async fn opaque_token(
    issuer: &str,
    client: &str,
    resource: &str,
    scope: &str,
) -> anyhow::Result<String> {
    let form = [
        ("grant_type", "client_credentials"),
        ("resource", resource),
        ("scope", scope),
    ];
    let answer = as_client(issuer, "/token", client, &form).await?;
    ensure!(answer.status == 200, "token endpoint: {answer:?}");
    let body: Value = serde_json::from_slice(&answer.body)?;
    let token = body["access_token"].as_str().context("an access_token")?;
    ensure!(token.split('.').count() != 3, "opaque, not a JWT: {token}");
    Ok(token.to_owned())
}

/// RFC 7009: `client` revokes its `token`.
async fn revoke(issuer: &str, client: &str, token: &str) -> anyhow::Result<()> {
    let answer = as_client(issuer, "/token/revocation", client, &[("token", token)]).await?;
    ensure!(answer.status == 200, "revocation: {answer:?}");
    Ok(())
}

/// Opaque tokens of a production-grade authorization server (oidc-provider), checked by
/// RFC 7662 introspection: an active token for this resource serves both eras with the scopes
/// the answer lists (step-up included); an inactive, revoked or other-audience token is 401
/// `invalid_token`; each client is a principal of its own; with answers not kept, a
/// revocation is seen at the next request; an authorization server that goes away leaves cached tokens
/// working and makes new ones 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_at_the_authorization_server() -> anyhow::Result<()> {
    let mut issuer = peers::oidc_as()?.start().await?;
    let dir = TempDir::new()?;
    let server = introspecting(issuer.url(), &dir, 60).await?;
    let resource = server.url().to_owned();
    let both = format!("mcp:tools {ADMIN_SCOPE}");
    let full = opaque_token(issuer.url(), "app-a", &resource, &both).await?;
    let base = opaque_token(issuer.url(), "app-a", &resource, "mcp:tools").await?;
    for protocol in ["legacy", "auto"] {
        let (ok, output) = tether_call(&resource, &full, protocol).await?;
        ensure!(ok && output.contains("counted 3"), "{protocol}: {output}");
        let (ok, output) = tether_call(&resource, &base, protocol).await?;
        ensure!(
            !ok && output.contains("403") && output.contains(&format!("needs {both}")),
            "{protocol}: step-up named: {output}"
        );
    }
    // Refused as invalid, without serving anything: a token the server never issued, one
    // for another resource, one revoked before it was first used.
    let elsewhere = opaque_token(
        issuer.url(),
        "app-a",
        "https://elsewhere.example/mcp",
        &both,
    )
    .await?;
    let revoked = opaque_token(issuer.url(), "app-a", &resource, &both).await?;
    revoke(issuer.url(), "app-a", &revoked).await?;
    for (what, token) in [
        (
            "never issued",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ),
        ("another audience", elsewhere.as_str()),
        ("revoked", revoked.as_str()),
    ] {
        let answer = post_initialize(&resource, Some(token)).await?;
        ensure!(
            answer.status == 401 && challenge(&answer).contains(r#"error="invalid_token""#),
            "{what}: {answer:?}"
        );
        ensure!(answer.headers.get("mcp-session-id").is_none(), "{what}");
    }
    // Each client is a principal: app-b cannot reach app-a's session.
    let started = post_initialize(&resource, Some(&full)).await?;
    let session = started
        .headers
        .get("mcp-session-id")
        .context("a session")?
        .to_owned();
    let other = opaque_token(issuer.url(), "app-b", &resource, &both).await?;
    let mut intruder = RawClient::new(&resource)?.with_bearer_token(&other);
    intruder.set_session_id(Some(session));
    let get = intruder
        .send(&intruder.request("GET"))
        .await?
        .read_to_end()
        .await?;
    ensure!(get.status == 404, "another client's session: {get:?}");

    // Answers not cached: a revocation takes effect at the next request.
    let uncached = introspecting(issuer.url(), &dir, 0).await?;
    let token = opaque_token(issuer.url(), "app-a", uncached.url(), "mcp:tools").await?;
    let answer = post_initialize(uncached.url(), Some(&token)).await?;
    ensure!(answer.status == 200, "{answer:?}");
    revoke(issuer.url(), "app-a", &token).await?;
    let answer = post_initialize(uncached.url(), Some(&token)).await?;
    ensure!(answer.status == 401, "revoked: {answer:?}");

    // The authorization server goes away: the cached answer keeps `full` working; a token the
    // server has not seen yet cannot be judged, so 503 and not a verdict.
    let unseen = opaque_token(issuer.url(), "app-a", &resource, &both).await?;
    issuer.kill().await?;
    let (ok, output) = tether_call(&resource, &full, "auto").await?;
    ensure!(ok && output.contains("counted 3"), "cached: {output}");
    let answer = post_initialize(&resource, Some(&unseen)).await?;
    ensure!(
        answer.status == 503 && answer.headers.get("retry-after").is_some(),
        "{answer:?}"
    );
    Ok(())
}

/// The TypeScript SDK's client (1.32.2) with a bearer token: its call of `count` through an
/// OAuth-protected `tether serve` survives cuts (its own GET + `Last-Event-ID` resumes carry
/// the token too) and delivers every progress event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_client_with_a_token_resumes_exactly_once() -> anyhow::Result<()> {
    use tether_testkit::proxy::{FaultPlan, FaultProxy, TruncateFault};
    const N: u64 = 40;
    let issuer = authorization_server().await?;
    let server = ServerSpec::tether_serve()?
        .args(["--demo", "count", "--store", "memory", "--retry-ms", "100"])
        .args(["--oauth-issuer", issuer.url(), "--oauth-scope", SCOPE])
        .start()
        .await?;
    let resource = server.url().to_owned();
    let token = token(issuer.url(), &resource, SCOPE, &json!({}), &json!({})).await?;
    let dir = TempDir::new()?;
    let file = dir.path().join("token");
    std::fs::write(&file, &token)?;
    let plan =
        FaultPlan::pass_through().with_truncate(TruncateFault::after_events(10).with_jitter(2));
    let proxy = FaultProxy::start(server.addr(), plan).await?;
    let client = peers::ts_client(&proxy.url_for("/mcp"), N)?.with_args([
        "--interval-ms".to_owned(),
        "10".to_owned(),
        "--bearer-token-file".to_owned(),
        file.display().to_string(),
    ]);
    let output = client.run(Duration::from_secs(60)).await?;
    let context = format!("{}\n{output:?}", proxy.report());
    let lines = output.json_lines()?;
    let progress: Vec<u64> = lines
        .iter()
        .filter_map(|line| line["progress"].as_u64())
        .collect();
    ensure!(
        progress == (1..=N).collect::<Vec<_>>(),
        "once each, in order: {context}"
    );
    ensure!(
        lines
            .iter()
            .any(|line| line["result"]["content"][0]["text"] == format!("counted {N}")),
        "{context}"
    );
    ensure!(proxy.counters().truncations >= 1, "no cut: {context}");
    // Without the token, the same client is refused before anything runs.
    let refused = peers::ts_client(&resource, N)?
        .run(Duration::from_secs(30))
        .await?;
    ensure!(
        !refused.status.success() && refused.json_lines()?.is_empty(),
        "{refused:?}"
    );
    Ok(())
}

/// Tasks belong to the token's principal: another subject of the same issuer asking
/// `tasks/get`, `tasks/stream` or `tasks/cancel` about the first one's task is told it is
/// unknown; the owner reads the task's stream to the end; a request without a token is 401
/// before any task is looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_task_streams_belong_to_the_tokens_principal() -> anyhow::Result<()> {
    use tether_testkit::raw::task_meta;
    let issuer = authorization_server().await?;
    let server = protected(issuer.url()).await?;
    let resource = server.url().to_owned();
    let both = format!("{SCOPE} {COUNT_SCOPE}");
    let alice = token(
        issuer.url(),
        &resource,
        &both,
        &json!({"sub": "alice"}),
        &json!({}),
    )
    .await?;
    let mallory = token(
        issuer.url(),
        &resource,
        &both,
        &json!({"sub": "mallory"}),
        &json!({}),
    )
    .await?;
    let owner = RawClient::new(&resource)?.with_bearer_token(&alice);
    let intruder = RawClient::new(&resource)?.with_bearer_token(&mallory);
    let anonymous = RawClient::new(&resource)?;
    let mut meta = task_meta();
    meta["progressToken"] = json!("p");
    let call = owner.modern(
        1,
        "tools/call",
        json!({"name": "count", "arguments": {"n": 5, "interval_ms": 20}}),
        meta,
    );
    let created = owner.exchange(&call).await?.json()?;
    ensure!(created["result"]["resultType"] == "task", "{created}");
    let task = created["result"]["taskId"]
        .as_str()
        .context("a task id")?
        .to_owned();
    for (id, method) in [(2, "tasks/get"), (3, "tasks/stream"), (4, "tasks/cancel")] {
        let request = intruder.modern(id, method, json!({"taskId": task}), task_meta());
        let answer = intruder.exchange(&request).await?.json()?;
        ensure!(
            answer["error"]["message"] == "unknown task",
            "{method} by another subject: {answer}"
        );
        let request = anonymous.modern(id, method, json!({"taskId": task}), task_meta());
        let answer = anonymous.exchange(&request).await?;
        ensure!(answer.status == 401, "{method} without a token: {answer:?}");
    }
    let stream = owner.modern(5, "tasks/stream", json!({"taskId": task}), task_meta());
    let events = owner.exchange(&stream).await?;
    ensure!(events.status == 200, "{events:?}");
    let text = String::from_utf8_lossy(&events.body);
    // Every `"progress":N` of the stream's events, in the order they came.
    let progress: Vec<u64> = text
        .split("\"progress\":")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    ensure!(
        progress == (1..=5).collect::<Vec<_>>(),
        "the owner's stream: each progress once, in order: {text}"
    );
    let get = owner.modern(6, "tasks/get", json!({"taskId": task}), task_meta());
    let status = owner.exchange(&get).await?.json()?;
    ensure!(
        status["result"]["status"] == "completed",
        "the owner's task, not cancelled by the intruder: {status}"
    );
    Ok(())
}
