//! The client's session handling against real tether servers: a server restart (memory
//! store) during a call, servers without GET streams (405), JSON answers, DELETE on close.

use crate::support::client::{count_params, fast_config, start_server};

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether::client::{Client, ClientConfig, ClientEvent, ClientEvents, Error};
use tether::demo::DemoHandler;
use tether::proto::jsonrpc::{Message, Response};
use tether::server::ServerConfig;
use tether_testkit::launcher::ServerSpec;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

fn result_text(response: &Response) -> String {
    match response {
        Response::Result(r) => r.result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Response::Error(e) => panic!("error response {e:?}"),
    }
}

/// The next event about the session itself, passing over the reconnect attempts that the
/// cut before it produces.
async fn next_session_event(events: &mut ClientEvents) -> Option<ClientEvent> {
    loop {
        match events.recv().await {
            Some(ClientEvent::Reconnecting { .. }) => continue,
            other => return other,
        }
    }
}

/// `tether serve` (memory store) is killed and restarted during a call: the resume GET gets
/// 404, the call fails with `SessionExpired`, the client re-initializes on its own (observable
/// as events), and the next call succeeds on the new session.
#[tokio::test]
async fn server_restart_during_a_call_expires_it_and_the_client_reinitializes() {
    let spec = ServerSpec::tether_serve()
        .unwrap()
        .args(["--store", "memory", "--retry-ms", "100"]);
    let mut server = spec.start().await.unwrap();
    let client = Client::connect(server.url(), fast_config(Duration::from_millis(100)))
        .await
        .unwrap();
    let old_session = client.session_id();
    assert!(old_session.is_some());
    let mut events = client.events();
    let mut stream = client
        .request("tools/call", count_params(100_000, 5))
        .await
        .unwrap();
    for _ in 0..5 {
        assert!(matches!(
            stream.next().await,
            Some(Ok(Message::Notification(_)))
        ));
    }
    server.restart().await.unwrap();
    let failure = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Some(error),
                None => return None,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the call hangs; server logs:\n{}", server.logs()));
    assert!(
        matches!(failure, Some(Error::SessionExpired)),
        "{failure:?}"
    );
    assert!(stream.next().await.is_none());

    assert_eq!(
        next_session_event(&mut events).await,
        Some(ClientEvent::SessionExpired {
            session_id: old_session.clone()
        })
    );
    let Some(ClientEvent::Reinitialized { session_id }) = next_session_event(&mut events).await
    else {
        panic!("no re-initialization event");
    };
    assert!(session_id.is_some() && session_id != old_session);
    assert_eq!(client.session_id(), session_id);

    let response = client
        .request("tools/call", count_params(3, 0))
        .await
        .unwrap()
        .response()
        .await
        .unwrap();
    assert_eq!(result_text(&response), "counted 3");
    client.close().await.unwrap();
}

/// T88: a server without GET streams answers the resume with 405: the cut call fails with
/// `NotResumable`, and the standalone stream reports that there is none.
#[tokio::test]
async fn without_get_streams_a_cut_call_is_not_resumable() {
    let mut config = ServerConfig::default();
    config.get_streams = false;
    config.retry = Duration::from_millis(50);
    let server = start_server(config, Arc::new(DemoHandler::new())).await;
    let addr = server.addr;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(3000).at_most(1));
    let proxy = FaultProxy::start(addr, plan).await.unwrap();
    let client = Client::connect(
        &proxy.url_for("/mcp"),
        fast_config(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let mut stream = client
        .request("tools/call", count_params(1000, 0))
        .await
        .unwrap();
    let failure = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Some(error),
                None => return None,
            }
        }
    })
    .await
    .expect("the call hangs");
    assert!(matches!(failure, Some(Error::NotResumable)), "{failure:?}");
    assert_eq!(proxy.counters().cuts, 1);

    let mut standalone = client.server_messages().unwrap();
    let item = tokio::time::timeout(Duration::from_secs(10), standalone.next())
        .await
        .unwrap();
    assert!(
        matches!(item, Some(Err(Error::NoStandaloneStream))),
        "{item:?}"
    );
}

/// T21, T7: a JSON-mode server answers with `application/json`; `count`'s progress goes to
/// the standalone stream, in order.
#[tokio::test]
async fn json_answers_and_the_standalone_stream() {
    let mut config = ServerConfig::default();
    config.json_response = true;
    let server = start_server(config, Arc::new(DemoHandler::new())).await;
    let addr = server.addr;
    let client = Client::connect(&format!("http://{addr}/mcp"), legacy_config())
        .await
        .unwrap();
    let mut events = client.events();
    let mut standalone = client.server_messages().unwrap();
    assert!(
        client.server_messages().is_err(),
        "one standalone stream per client"
    );
    // The tool's progress goes to the GET stream only once it is open.
    tokio::time::timeout(Duration::from_secs(10), async {
        while !matches!(
            events.recv().await,
            Some(ClientEvent::Connected { request_id: None })
        ) {}
    })
    .await
    .expect("the standalone stream connects");
    let response = client
        .request("tools/call", count_params(20, 0))
        .await
        .unwrap()
        .response()
        .await
        .unwrap();
    assert_eq!(result_text(&response), "counted 20");
    for expected in 1..=20 {
        let message = tokio::time::timeout(Duration::from_secs(10), standalone.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let Message::Notification(note) = message else {
            panic!("{message:?}")
        };
        assert_eq!(note.params.unwrap()["progress"], json!(expected));
    }
    client
        .notify("notifications/cancelled", Some(json!({"requestId": 999})))
        .await
        .unwrap();
    client.close().await.unwrap();
}

/// DELETE ends the session: a second client reusing its id would get 404; here, the closed
/// client's session is gone from the server (a fresh request on a new client still works).
#[tokio::test]
async fn close_deletes_the_session() {
    let server = start_server(ServerConfig::default(), Arc::new(DemoHandler::new())).await;
    let addr = server.addr;
    let url = format!("http://{addr}/mcp");
    let client = Client::connect(&url, legacy_config()).await.unwrap();
    let session = client.session_id().unwrap();
    client.close().await.unwrap();
    let http = reqwest_free_probe(addr, &session).await;
    assert!(http.starts_with("HTTP/1.1 404"), "{http}");
}

/// Clones share the session: closing one (it takes `&self`) ends the stream another clone
/// holds and deletes the session on the server.
#[tokio::test]
async fn closing_a_clone_closes_the_session_for_every_clone() {
    let server = start_server(ServerConfig::default(), Arc::new(DemoHandler::new())).await;
    let addr = server.addr;
    let client = Client::connect(&format!("http://{addr}/mcp"), legacy_config())
        .await
        .unwrap();
    let session = client.session_id().unwrap();
    let mut standalone = client.server_messages().unwrap();
    let clone = client.clone();
    clone.close().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), standalone.next())
        .await
        .expect("the original's stream ends");
    assert!(
        !matches!(ended, Some(Ok(_))),
        "no message after close: {ended:?}"
    );
    let http = reqwest_free_probe(addr, &session).await;
    assert!(http.starts_with("HTTP/1.1 404"), "{http}");
    client.close().await.unwrap();
}

/// The 2025 era, which these tests are about (`auto` picks 2026-07-28 with this server).
fn legacy_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.protocol = tether::client::ProtocolChoice::Legacy;
    config
}

/// A raw POST with the closed session's id, read with the test kit's raw client.
async fn reqwest_free_probe(addr: std::net::SocketAddr, session: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    socket.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}
