//! Two `tether serve` processes sharing one Redis (`--store redis://…`), with no sticky
//! sessions: a call started by a POST to node A, cut, is resumed with GET on node B (the
//! `Tether-Node` header proves which node answered) and receives the rest of the stream,
//! following it live while A is still producing, each event once and in order; a POST for
//! the same session sent to node B is served; and when node A dies, node B answers the call
//! A was running, on the stream B serves, after A's lease.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde_json::json;
use tether_testkit::launcher::{ServerProcess, ServerSpec};
use tether_testkit::raw::RawClient;
use tether_testkit::redis::RedisServer;

const N: u64 = 60;
const INTERVAL_MS: u64 = 30;
const READ_ON_A: usize = 10;

/// The node lease of both nodes, in seconds (`--node-lease-secs`).
const LEASE_SECS: u64 = 2;

async fn node(redis: &RedisServer, name: &str) -> anyhow::Result<ServerProcess> {
    Ok(ServerSpec::tether_serve()?
        .args([
            "--store",
            &redis.url(),
            "--node-id",
            name,
            "--retry-ms",
            "100",
            "--node-lease-secs",
            &LEASE_SECS.to_string(),
        ])
        .start()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_started_on_one_node_is_resumed_live_on_the_other() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let mut a = node(&redis, "node-a").await?;
    let mut b = node(&redis, "node-b").await?;

    let mut on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(20));
    on_a.initialize().await?;
    let (id, mut response) = on_a
        .call_tool(
            "count",
            json!({"n": N, "interval_ms": INTERVAL_MS}),
            Some(json!("two-nodes")),
        )
        .await?;
    ensure!(response.header("tether-node") == Some("node-a"));
    // The priming event and the first progress events, then the connection is dropped.
    let seen = response.read_events(READ_ON_A + 1).await?;
    let cursor = seen.last().context("events on A")?.id.clone();
    drop(response);

    let mut on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(20));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let resumed_at = Instant::now();
    let resumed = on_b.resume(&cursor).await?;
    ensure!(resumed.status() == 200, "resume on B: {}", resumed.status());
    ensure!(
        resumed.header("tether-node") == Some("node-b"),
        "served by node B: {:?}",
        resumed.header("tether-node")
    );
    let transcript = resumed.read_to_end().await?;
    let took = resumed_at.elapsed();
    let messages = transcript.messages()?;
    let (last, progress) = messages.split_last().context("messages on B")?;
    let progress: Vec<u64> = progress
        .iter()
        .filter_map(|(_, m)| m["params"]["progress"].as_u64())
        .collect();
    let expected: Vec<u64> = (READ_ON_A as u64 + 1..=N).collect();
    ensure!(
        progress == expected,
        "the rest, once each, in order: {progress:?}"
    );
    ensure!(last.1["id"] == json!(id), "{last:?}");
    ensure!(
        last.1["result"]["content"][0]["text"] == json!(format!("counted {N}")),
        "{last:?}"
    );
    // Most of the call was still to come when B took over: B followed A live rather than
    // replaying a finished stream.
    let remaining = Duration::from_millis(INTERVAL_MS * (N - READ_ON_A as u64) / 2);
    ensure!(
        took >= remaining,
        "B delivered the rest as A produced it ({took:?}, at least {remaining:?})"
    );

    // The session is served by B too.
    let (id, mut response) = on_b.call_tool("count", json!({"n": 3}), None).await?;
    ensure!(response.status() == 200, "POST on B: {}", response.status());
    ensure!(response.header("tether-node") == Some("node-b"));
    let answer = response
        .read_until_response(id)
        .await?
        .context("an answer on B")?;
    ensure!(
        answer["result"]["content"][0]["text"] == json!("counted 3"),
        "{answer}"
    );
    a.terminate().await?;
    b.terminate().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_node_dies_another_answers_its_open_call_after_the_lease() -> anyhow::Result<()> {
    let redis = RedisServer::start().await?;
    let mut a = node(&redis, "node-a").await?;
    let mut b = node(&redis, "node-b").await?;
    let mut on_a = RawClient::new(a.url())?.with_timeout(Duration::from_secs(30));
    on_a.initialize().await?;
    let (id, mut response) = on_a
        .call_tool(
            "count",
            json!({"n": 100_000, "interval_ms": 20}),
            Some(json!("dies")),
        )
        .await?;
    let seen = response.read_events(6).await?;
    let cursor = seen.last().context("events on A")?.id.clone();
    drop(response);
    let mut on_b = RawClient::new(b.url())?.with_timeout(Duration::from_secs(30));
    on_b.set_session_id(on_a.session_id().map(str::to_owned));
    let resumed = on_b.resume(&cursor).await?;
    ensure!(resumed.status() == 200, "resume on B: {}", resumed.status());
    ensure!(resumed.header("tether-node") == Some("node-b"));

    let killed = Instant::now();
    a.kill().await?;
    let transcript = resumed.read_to_end().await?;
    let took = killed.elapsed();
    ensure!(transcript.complete, "B ends the stream");
    let messages = transcript.messages()?;
    let (last, progress) = messages.split_last().context("messages on B")?;
    let progress: Vec<u64> = progress
        .iter()
        .filter_map(|(_, m)| m["params"]["progress"].as_u64())
        .collect();
    let expected: Vec<u64> = (6..6 + progress.len() as u64).collect();
    ensure!(
        progress == expected,
        "a gap-free continuation: {progress:?}"
    );
    ensure!(
        last.1["id"] == json!(id),
        "the answer to the call: {last:?}"
    );
    ensure!(
        last.1["error"]["data"]["reason"] == json!("server_restarted"),
        "a JSON-RPC error: {last:?}"
    );
    ensure!(
        took >= Duration::from_secs(LEASE_SECS) / 2,
        "not before A's lease ran out ({took:?})"
    );
    b.terminate().await?;
    Ok(())
}
