//! tether's client in the 2026-07-28 era against the tether server (first steps of the
//! modern client): `ProtocolChoice::Version(2026-07-28)` speaks stateless requests after
//! `server/discover`, a `count` call's progress arrives once each, in order, then the result;
//! `Auto` against a server that also serves 2025 keeps the legacy era; a call cut before its
//! answer fails with `Error::MayHaveRun` instead of being sent again.

use std::time::Duration;

use tether::client::{Client, Error, ProtocolChoice};
use tether::proto::version::ProtocolVersion;
use tether_testkit::proxy::{ByteFault, FaultPlan, FaultProxy};

use crate::support::client::{count_params, drain, fast_config, start_demo_server};

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_client_pinned_to_2026_07_28_calls_count_statelessly() {
    let server = start_demo_server().await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut config = fast_config(Duration::from_millis(50));
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        let client = Client::connect(&server.url, config).await.unwrap();
        assert!(client.is_modern());
        assert_eq!(client.session_id(), None, "no session in this era");
        assert!(client.server_info()["supportedVersions"].is_array());
        let stream = client
            .request("tools/call", count_params(5, 10))
            .await
            .unwrap();
        let (progress, result) = drain(stream).await;
        assert_eq!(progress, [1, 2, 3, 4, 5]);
        assert_eq!(result.unwrap(), "counted 5");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn auto_keeps_the_legacy_era_with_a_dual_era_server() {
    let server = start_demo_server().await;
    let mut config = fast_config(Duration::from_millis(50));
    config.protocol = ProtocolChoice::Auto;
    let client = Client::connect(&server.url, config).await.unwrap();
    assert!(!client.is_modern());
    assert!(client.session_id().is_some(), "a 2025 session");
}

#[tokio::test]
async fn a_cut_modern_tool_call_fails_as_may_have_run() {
    let server = start_demo_server().await;
    let plan = FaultPlan::pass_through().with_cut(ByteFault::after(600));
    let proxy = FaultProxy::start(server.addr, plan).await.unwrap();
    tokio::time::timeout(TEST_TIMEOUT, async {
        let mut config = fast_config(Duration::from_millis(50));
        config.protocol = ProtocolChoice::Version(ProtocolVersion::MODERN);
        let client = Client::connect(&proxy.url_for("/mcp"), config)
            .await
            .unwrap();
        let stream = client
            .request("tools/call", count_params(200, 5))
            .await
            .unwrap();
        let (progress, result) = drain(stream).await;
        assert!(progress.len() < 200, "the cut came first");
        assert!(
            matches!(result, Err(Error::MayHaveRun { ref method }) if method == "tools/call"),
            "{result:?}"
        );
    })
    .await
    .unwrap();
}
