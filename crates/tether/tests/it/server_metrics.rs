//! `GET /metrics`: what an operator scraping a real server over HTTP sees after a call, a
//! resume and refused resumes — counts that match what the client saw, in the OpenMetrics text
//! format.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::server::TestServer;
use serde_json::json;
use tether::server::ServerConfig;
use tether_testkit::raw::{self, Transcript, metric_samples};

const V11: &str = "2025-11-25";

/// Scrapes `/metrics`: every sample as `name{labels}` → value.
async fn scrape(server: &TestServer) -> HashMap<String, f64> {
    let transcript = raw::get(&server.url.replace("/mcp", "/metrics"))
        .await
        .unwrap();
    assert_eq!(transcript.status, 200);
    assert!(
        transcript
            .headers
            .get("content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{:?}",
        transcript.headers.get("content-type")
    );
    let text = String::from_utf8(transcript.body).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    metric_samples(&text)
}

/// The bytes of the JSON-RPC messages in `transcript`: each event's data is one stored message,
/// byte for byte (priming events have none).
fn message_bytes(transcript: &Transcript) -> f64 {
    transcript.events().map(|e| e.data.len()).sum::<usize>() as f64
}

fn get(samples: &HashMap<String, f64>, name: &str) -> f64 {
    samples.get(name).copied().unwrap_or_else(|| {
        panic!(
            "no sample {name}; have {:?}",
            samples.keys().collect::<Vec<_>>()
        )
    })
}

#[tokio::test]
async fn metrics_count_what_clients_saw() {
    const N: u64 = 5;
    let server = TestServer::start(ServerConfig::default()).await;
    let before = scrape(&server).await;
    assert_eq!(get(&before, "tether_events_appended_total"), 0.0);
    assert_eq!(get(&before, "tether_open_streams"), 0.0);

    let mut client = server.client().with_protocol_version(V11);
    let init = client.initialize().await.unwrap();
    assert_eq!(init.initialized.status, 202, "notifications/initialized");
    let (id, response) = client
        .call_tool("count", json!({"n": N}), Some(json!("m")))
        .await
        .unwrap();
    let transcript = response.read_to_end().await.unwrap();
    let ids = transcript.event_ids();
    // The priming event, N progress notifications and the answer.
    assert_eq!(ids.len() as u64, N + 2, "{ids:?}");
    assert!(
        transcript
            .messages()
            .unwrap()
            .iter()
            .any(|(_, m)| m["id"] == json!(id))
    );

    // Resume after the second progress event: the rest, N - 2 + 1 events, are replayed.
    let resumed = client
        .resume(ids[2])
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(resumed.status, 200);
    let replayed = resumed.event_ids().len() as f64;
    assert_eq!(replayed, (N - 2 + 1) as f64);
    // Refused resumes, by reason.
    let malformed = client.resume("not-an-event-id").await.unwrap();
    assert_eq!(malformed.status(), 400);
    let unknown = client.resume("AAAAAAAAAAAAAAAAAAAAAA:3").await.unwrap();
    assert_eq!(unknown.status(), 400);

    // Connections are counted until they are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let samples = scrape(&server).await;
        if get(&samples, "tether_open_streams") == 0.0 || Instant::now() > deadline {
            break samples;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(get(&after, "tether_open_streams"), 0.0);
    // Initialize (priming + answer), the session's standalone priming event, the call.
    assert_eq!(
        get(&after, "tether_events_appended_total"),
        (2 + 1 + N + 2) as f64
    );
    // The bytes stored are the messages of those events, exactly: the initialize answer, the
    // N progress notifications and the call's answer (a priming event has no message).
    assert_eq!(
        get(&after, "tether_event_bytes_appended_total"),
        message_bytes(&init.response) + message_bytes(&transcript)
    );
    assert_eq!(
        get(&after, r#"tether_events_sent_total{connection="resume"}"#),
        replayed
    );
    assert_eq!(get(&after, r#"tether_resumes_total{outcome="ok"}"#), 1.0);
    assert_eq!(
        get(&after, r#"tether_resumes_total{outcome="malformed"}"#),
        1.0
    );
    assert_eq!(
        get(&after, r#"tether_resumes_total{outcome="unknown"}"#),
        1.0
    );
    assert_eq!(
        get(
            &after,
            r#"tether_responses_total{method="GET",status="400"}"#
        ),
        2.0
    );
    assert!(
        get(
            &after,
            r#"tether_responses_total{method="POST",status="200"}"#
        ) >= 2.0
    );
    assert_eq!(get(&after, "tether_sessions"), 1.0);
    assert_eq!(get(&after, "tether_sessions_stored"), 1.0);
    assert!(get(&after, "tether_retained_events") >= (N + 2) as f64);

    // DELETE frees what the session retained.
    assert_eq!(client.delete_session().await.unwrap().status, 200);
    let gone = scrape(&server).await;
    assert_eq!(get(&gone, "tether_sessions"), 0.0);
    assert_eq!(get(&gone, "tether_retained_events"), 0.0);
}
