//! `examples/axum_app.rs`, run as a user runs it: an axum application with routes of its own
//! that mounts tether at `/mcp` on a SQLite file. Its own `/healthz` answers, tether's ops
//! routes are not mounted, and `count` works end to end through tether's client; SIGINT
//! shuts it down cleanly, and a restart on the same file serves again.

use std::time::Duration;

use tether::client::{Client, ClientConfig};
use tether_testkit::raw::RawClient;

use crate::support::client::{count_params, drain};
use crate::support::example::{self, Example};

/// Starts the example on the SQLite file `db`.
fn start(db: &std::path::Path) -> (Example, String) {
    let db = db.to_str().expect("a UTF-8 path");
    example::start("axum_app", &["--bind", "127.0.0.1:0", "--db", db])
}

async fn get(url: &str) -> (u16, String) {
    let client = RawClient::new(url).expect("a loopback URL");
    let answer = client
        .exchange(&client.request("GET"))
        .await
        .expect("an answer");
    (answer.status, String::from_utf8(answer.body).expect("text"))
}

async fn count(url: &str, n: u64) -> (Vec<u64>, String) {
    let client = Client::connect(url, ClientConfig::default())
        .await
        .expect("initialize");
    let stream = client
        .request("tools/call", count_params(n, 0))
        .await
        .expect("tools/call");
    let (progress, result) = tokio::time::timeout(Duration::from_secs(30), drain(stream))
        .await
        .expect("the call finishes");
    client.close().await.expect("DELETE");
    (progress, result.expect("a result"))
}

fn interrupt(example: &mut Example) -> std::process::ExitStatus {
    let child = &mut example.0;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the example did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_example_mounts_tether_beside_its_own_routes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let (mut child, url) = start(&db);
    let base = url.strip_suffix("/mcp").unwrap();

    assert_eq!(
        get(&format!("{base}/healthz")).await,
        (200, "app: ok".to_owned())
    );
    let (status, _) = get(&format!("{base}/metrics")).await;
    assert_eq!(
        status, 404,
        "tether's ops routes are not mounted by the example"
    );
    let (progress, result) = count(&url, 5).await;
    assert_eq!(progress, [1, 2, 3, 4, 5]);
    assert_eq!(result, "counted 5");

    assert!(
        interrupt(&mut child).success(),
        "SIGINT is a clean shutdown"
    );
    assert!(db.exists(), "the SQLite file is where --db says");

    // The same file serves again after the restart.
    let (mut child, url) = start(&db);
    let (progress, result) = count(&url, 3).await;
    assert_eq!(progress, [1, 2, 3]);
    assert_eq!(result, "counted 3");
    assert!(interrupt(&mut child).success());
}
