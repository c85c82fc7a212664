//! A slow reader cannot make the server buffer without bound (docs/DESIGN.md#property-4): what a
//! session retains is bounded by the store's per-session cap, asserted through the store's
//! accounting, not RSS. When the reader falls behind what the cap keeps, its stream ends and a
//! resume is told `expired` (no silent gap, property 2).

use std::time::Duration;

use crate::support::server::{TestServer, assert_refused};
use serde_json::json;
use tether::server::ServerConfig;
use tether::store::StoreLimits;

/// The per-session byte cap under test: far below what `count` produces here
/// (~20 MB, more than loopback socket buffers hold).
const CAP: usize = 64 * 1024;

#[tokio::test]
async fn slow_reader_keeps_retained_bytes_within_the_cap() {
    let store = {
        let mut config = StoreLimits::default();
        config.max_bytes_per_session = CAP;
        config
    };
    let server = TestServer::start_with_store(ServerConfig::default(), store).await;
    let mut client = server.session("2025-11-25").await;
    let n: u64 = 200_000;
    let (_, mut response) = client
        .call_tool("count", json!({"n": n}), Some(json!("slow")))
        .await
        .unwrap();
    // Read the priming event and one message, then stop reading while the handler runs.
    let first = response.read_events(2).await.unwrap();
    let first_id = first[1].id.clone();

    let mut peak = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let usage = server.usage(&client).await;
        peak = peak.max(usage.bytes);
        assert!(usage.bytes <= CAP, "retained {} > cap {CAP}", usage.bytes);
        let finished = server
            .observed
            .counts_finished
            .load(std::sync::atomic::Ordering::SeqCst);
        if finished == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "count did not finish"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(peak > CAP / 2, "the cap was actually reached: peak {peak}");
    assert!(server.usage(&client).await.bytes <= CAP);

    // The reader wakes up: it gets what the connection already had in flight, then the
    // stream ends early — the rest was evicted — without the final response …
    let rest = response.read_to_end().await.unwrap();
    assert!(rest.complete);
    let progress: Vec<u64> = rest
        .messages()
        .unwrap()
        .iter()
        .map(|(_, m)| m["params"]["progress"].as_u64().expect("only progress"))
        .collect();
    // Everything this connection delivered, from progress 1 on, without a gap.
    let consecutive = progress.iter().zip(1..).all(|(&p, i)| p == i);
    assert!(
        consecutive,
        "no silent gap in {} progress events",
        progress.len()
    );
    assert!(
        (progress.len() as u64) < n,
        "the stream ended early, after {} of {n}",
        progress.len()
    );
    // … and resuming from where it was is an explicit `expired`, never a silent gap.
    let t = client
        .resume(&first_id)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    let error = assert_refused(&t, 400, -32000, &server.node_id);
    assert_eq!(error["data"]["reason"], "expired");
}
