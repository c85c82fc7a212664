//! The rmcp adapter in process, on SQLite: a legacy session that outlives its server (a
//! restart) gets a new service that was handed the client's own handshake, kept in the
//! session store.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, tool, tool_router};
use serde_json::{Value, json};
use tether::rmcp::RmcpHandler;
use tether::server::Server;
use tether::store::{StoreLimits, Stores};
use tether_testkit::raw::RawClient;

/// An rmcp server whose one tool says who its client is, as rmcp's handshake told it.
#[derive(Debug, Clone, Copy)]
struct WhoAmI;

#[tool_router(server_handler)]
impl WhoAmI {
    #[tool(description = "The client's name and whether it declared elicitation")]
    async fn whoami(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let peer = context.peer.peer_info();
        let said = json!({
            "name": peer.as_ref().map(|info| info.client_info.name.clone()),
            "elicitation": peer.as_ref().map(|info| info.capabilities.elicitation.is_some()),
        });
        Ok(CallToolResult::success(vec![ContentBlock::text(
            said.to_string(),
        )]))
    }
}

/// A server of `WhoAmI` on the SQLite file `path`: its URL, and what stops it and ends
/// once it has stopped (its stores closed).
async fn start(path: &std::path::Path) -> (String, impl AsyncFnOnce()) {
    let stores = Stores::sqlite(path, StoreLimits::default()).expect("sqlite stores");
    let server = Server::builder(Arc::new(RmcpHandler::new(|| WhoAmI)))
        .stores(stores)
        .build()
        .await
        .expect("a server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}{}",
        listener.local_addr().unwrap(),
        server.config().path
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(listener, async move {
        let _ = stopped.await;
    }));
    let stop = async move || {
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    };
    (url, stop)
}

/// `whoami`'s answer through `client`'s session.
async fn whoami(client: &mut RawClient) -> Value {
    let (id, response) = client
        .post_request("tools/call", json!({"name": "whoami", "arguments": {}}))
        .await
        .unwrap();
    let transcript = response.read_to_end().await.unwrap();
    assert_eq!(transcript.status, 200, "{transcript:?}");
    let answer = transcript
        .messages()
        .unwrap()
        .into_iter()
        .find_map(|(_, m)| (m["id"] == json!(id)).then_some(m))
        .unwrap_or_else(|| panic!("no answer in {transcript:?}"));
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn a_session_that_outlives_its_server_gets_a_service_with_its_clients_own_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rmcp.db");
    let (before, stop) = start(&path).await;
    let mut client = RawClient::new(&before).unwrap();
    client.initialize().await.unwrap();
    // The raw client declares no capabilities; the gateway's own handshake would declare
    // elicitation, sampling and roots, under the name tether-gateway.
    let said = json!({"name": "tether-testkit-raw", "elicitation": false});
    assert_eq!(whoami(&mut client).await, said);
    stop().await;

    let (after, _stop) = start(&path).await;
    let session = client.session_id().map(str::to_owned);
    let mut client = RawClient::new(&after).unwrap();
    client.set_session_id(session);
    assert_eq!(
        whoami(&mut client).await,
        said,
        "the restarted server started the session's service with the client's handshake"
    );
}
