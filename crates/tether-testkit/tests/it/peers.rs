//! The pinned peers from `scripts/peers.sh` work: each SDK's client completes a `count` call
//! against the other SDK's server (so a failure in a tether interop test is tether's, not a
//! broken peer), and the Node binary is Node 22.

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{
    launcher::ServerSpec,
    peers::{self, PeerCommand},
};

/// A client run includes interpreter start-up (about a second for Python on a loaded machine).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts `server`, runs `client(url)`, and checks the JSON lines it printed.
async fn client_against_server(
    server: ServerSpec,
    client: impl FnOnce(&str) -> PeerCommand,
    progress: bool,
) {
    let n = 5;
    let server = server.start().await.expect("start the peer server");
    let mut command = client(server.url());
    if !progress {
        command = command.with_args(["--no-progress"]);
    }
    let output = command.run(CLIENT_TIMEOUT).await.unwrap();
    let context = format!(
        "{command}\nstdout:\n{}\nstderr:\n{}\nserver:\n{}",
        output.stdout,
        output.stderr,
        server.logs()
    );
    assert!(output.status.success(), "{context}");
    let lines = output.json_lines().expect(&context);
    let (result, notes) = lines.split_last().expect(&context);
    assert_eq!(
        result["result"]["content"][0]["text"], "counted 5",
        "{context}"
    );
    assert_eq!(result["result"]["isError"], false, "{context}");
    let expected: Vec<Value> = (1..=n)
        .map(|i| {
            if progress {
                json!({"progress": i, "total": n})
            } else {
                json!({"log": {"index": i, "total": n}})
            }
        })
        .collect();
    assert_eq!(notes, expected, "{context}");
}

fn python_client(url: &str) -> PeerCommand {
    peers::python_client(url, 5).unwrap()
}

fn ts_client(url: &str) -> PeerCommand {
    peers::ts_client(url, 5).unwrap()
}

#[tokio::test]
async fn python_client_counts_with_progress_against_ts_server() {
    client_against_server(peers::ts_server().unwrap(), python_client, true).await;
}

#[tokio::test]
async fn python_client_receives_count_logs_from_ts_server() {
    client_against_server(peers::ts_server().unwrap(), python_client, false).await;
}

#[tokio::test]
async fn ts_client_counts_with_progress_against_python_server() {
    client_against_server(peers::python_server().unwrap(), ts_client, true).await;
}

#[tokio::test]
async fn ts_client_receives_count_logs_from_python_server() {
    client_against_server(peers::python_server().unwrap(), ts_client, false).await;
}

#[tokio::test]
async fn node_peer_binary_is_node_22() {
    let node = PeerCommand {
        program: peers::node22().unwrap(),
        args: vec!["--version".to_owned()],
    };
    let output = node.run(CLIENT_TIMEOUT).await.unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.starts_with("v22."), "{output:?}");
    assert!(peers::conformance().is_ok());
    assert!(peers::conformance_2026().is_ok());
    assert!(peers::everything_server().is_ok());
    assert!(peers::mcp_proxy().is_ok());
}
