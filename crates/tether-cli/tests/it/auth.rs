//! `tether serve --auth-token-file FILE`: every request to the MCP path needs a bearer token
//! from the file (401 with `WWW-Authenticate: Bearer` and a JSON-RPC error body otherwise,
//! `/healthz` stays open); each token's principal sees only its own sessions and streams,
//! another principal's session id or event id being answered exactly like an unknown one
//! (docs/CONTRACTS.md#status-table); `/metrics` needs a token too;
//! `tether call --bearer-token-file` gets through; a malformed token file is a usage error (exit 2)
//! that does not print the token; `--max-sessions-per-principal` bounds each principal's sessions
//! separately.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde_json::{Value, json};
use tempfile::TempDir;
use tether_testkit::launcher::{ServerProcess, ServerSpec, tether_bin};
use tether_testkit::raw::{RawClient, Transcript};

const ALICE: &str = "alice-3f9c2b7e1d";
const BOB: &str = "bob-8a41c6d0e5";

async fn server(dir: &TempDir) -> anyhow::Result<ServerProcess> {
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("# test\nalice:{ALICE}\nbob:{BOB}\n"))?;
    Ok(ServerSpec::tether_serve()?
        .args(["--store", "memory", "--max-sessions-per-principal", "1"])
        .arg("--auth-token-file")
        .arg(&tokens)
        .start()
        .await?)
}

/// A 401 as docs/CONTRACTS.md#status-table pins it.
fn assert_unauthorized(transcript: &Transcript, what: &str) -> anyhow::Result<()> {
    ensure!(
        transcript.status == 401,
        "{what}: status {}",
        transcript.status
    );
    ensure!(
        transcript.headers.get("www-authenticate") == Some("Bearer"),
        "{what}: WWW-Authenticate {:?}",
        transcript.headers.get("www-authenticate")
    );
    let body: Value =
        serde_json::from_slice(&transcript.body).with_context(|| format!("{what}: a JSON body"))?;
    ensure!(
        body["jsonrpc"] == json!("2.0") && body["error"]["code"].is_i64(),
        "{what}: a JSON-RPC error: {body}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_need_a_token_and_principals_see_only_their_own_sessions() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = server(&dir).await?;
    let url = server.url().to_owned();

    // No token, a wrong one, a prefix of a right one: 401 on every method.
    let anonymous = RawClient::new(&url)?;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "auth-test", "version": "0"}}});
    for (client, what) in [
        (anonymous.clone(), "no token"),
        (
            RawClient::new(&url)?.with_bearer_token("wrong"),
            "a wrong token",
        ),
        (
            RawClient::new(&url)?.with_bearer_token(&ALICE[..8]),
            "a prefix",
        ),
    ] {
        let post = client.send(&client.request("POST").json(&init)).await?;
        assert_unauthorized(&post.read_to_end().await?, what)?;
        let get = client.send(&client.request("GET")).await?;
        assert_unauthorized(&get.read_to_end().await?, what)?;
        let delete = client.send(&client.request("DELETE")).await?;
        assert_unauthorized(&delete.read_to_end().await?, what)?;
    }
    let metrics_url = url.replace("/mcp", "/metrics");
    let metrics = RawClient::new(&metrics_url)?;
    let refused = metrics
        .send(&metrics.request("GET"))
        .await?
        .read_to_end()
        .await?;
    assert_unauthorized(&refused, "metrics without a token")?;
    let metrics = metrics.with_bearer_token(BOB);
    let scraped = metrics
        .send(&metrics.request("GET"))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        scraped.status == 200,
        "metrics with a token: {}",
        scraped.status
    );
    let health = reqwest_free_get(&url.replace("/mcp", "/healthz")).await?;
    ensure!(
        health.status == 200,
        "healthz needs no token: {}",
        health.status
    );

    // Alice works, and reaches a call's events.
    let mut alice = RawClient::new(&url)?
        .with_bearer_token(ALICE)
        .with_timeout(Duration::from_secs(20));
    alice.initialize().await?;
    let (id, response) = alice
        .call_tool("count", json!({"n": 3}), Some(json!("a")))
        .await?;
    let transcript = response.read_to_end().await?;
    let last_event = transcript
        .last_event_id()
        .context("the call's events have ids")?
        .to_owned();
    let answer = transcript
        .messages()?
        .into_iter()
        .map(|(_, message)| message)
        .find(|message| message["id"] == json!(id))
        .context("the answer")?;
    ensure!(answer["result"]["content"][0]["text"] == json!("counted 3"));

    // Bob, with alice's session id, is told exactly what an unknown session id gets.
    let mut bob = RawClient::new(&url)?.with_bearer_token(BOB);
    bob.set_session_id(alice.session_id().map(str::to_owned));
    let mut nobody = RawClient::new(&url)?.with_bearer_token(BOB);
    nobody.set_session_id(Some("AAAAAAAAAAAAAAAAAAAAAA".to_owned()));
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let foreign = bob
        .send(&bob.request("POST").json(&list))
        .await?
        .read_to_end()
        .await?;
    let unknown = nobody
        .send(&nobody.request("POST").json(&list))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        foreign.status == 404,
        "another's session: {}",
        foreign.status
    );
    ensure!(
        (foreign.status, &foreign.body) == (unknown.status, &unknown.body),
        "same answer as an unknown session"
    );
    let resumed = bob.resume(&last_event).await?.read_to_end().await?;
    ensure!(
        resumed.status == 404,
        "another's stream: {}",
        resumed.status
    );
    let deleted = bob.delete_session().await?;
    ensure!(
        deleted.status == 404,
        "another's DELETE: {}",
        deleted.status
    );

    // One session per principal (--max-sessions-per-principal 1): alice's second is refused,
    // bob's first is not.
    let mut alice_again = RawClient::new(&url)?.with_bearer_token(ALICE);
    let refused = alice_again
        .send(&alice_again.request("POST").json(&init))
        .await?
        .read_to_end()
        .await?;
    ensure!(
        refused.status == 503,
        "alice's second session: {}",
        refused.status
    );
    alice_again.set_session_id(None);
    let mut bob_own = RawClient::new(&url)?.with_bearer_token(BOB);
    bob_own.initialize().await?;
    ensure!(bob_own.session_id().is_some(), "bob's own session");

    // Alice's session is untouched by all of that.
    let replay = alice
        .resume(&format!(
            "{}0",
            &last_event[..last_event.rfind(':').unwrap() + 1]
        ))
        .await?;
    ensure!(replay.status() == 200, "alice resumes her own stream");
    ensure!(alice.delete_session().await?.status == 200);
    server.terminate().await?;
    Ok(())
}

/// `GET path` without the MCP headers (a load balancer's health check).
async fn reqwest_free_get(url: &str) -> anyhow::Result<Transcript> {
    let client = RawClient::new(url)?;
    client
        .send(
            &client
                .request("GET")
                .without_header("MCP-Protocol-Version")
                .without_header("Accept"),
        )
        .await?
        .read_to_end()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_call_sends_its_bearer_token() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut server = server(&dir).await?;
    let token_file = dir.path().join("alice-token");
    std::fs::write(&token_file, format!("{ALICE}\n"))?;
    let run = |with_token: bool| {
        let mut command = tokio::process::Command::new(tether_bin().expect("tether binary"));
        command.args(["call", server.url(), "count", "--args", r#"{"n": 4}"#]);
        if with_token {
            command.arg("--bearer-token-file").arg(&token_file);
        }
        command.kill_on_drop(true).output()
    };
    let output = tokio::time::timeout(Duration::from_secs(60), run(true)).await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && stdout.contains("counted 4"),
        "with the token: {} {stdout} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let output = tokio::time::timeout(Duration::from_secs(60), run(false)).await??;
    ensure!(!output.status.success(), "without a token the call fails");
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        stderr.contains("unauthorized (401)"),
        "the error says why: {stderr}"
    );
    server.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn a_malformed_token_file_is_a_usage_error_that_keeps_the_token_secret() -> anyhow::Result<()>
{
    let dir = TempDir::new()?;
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice:good-token\nbob:has a-secret space\n")?;
    for file in [tokens.clone(), dir.path().join("missing")] {
        let output = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::process::Command::new(tether_bin()?)
                .args(["serve", "--bind", "127.0.0.1:0", "--store", "memory"])
                .arg("--auth-token-file")
                .arg(&file)
                .kill_on_drop(true)
                .output(),
        )
        .await??;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            output.status.code() == Some(2),
            "exit {}: {stderr}",
            output.status
        );
        ensure!(output.stdout.is_empty(), "no ready line");
        ensure!(stderr.contains("--auth-token-file"), "{stderr}");
        ensure!(
            !stderr.contains("secret"),
            "the token is not printed: {stderr}"
        );
    }
    Ok(())
}
