//! The client over HTTPS, through proxies, and against a server it cannot speak to, with
//! real loopback sockets: the tether router served over TLS (rustls, a private CA and a
//! `localhost`/`127.0.0.1` certificate made here by rcgen, ALPN `h2` and `http/1.1`), a
//! small forwarding proxy, and a few-line server that speaks only 2026-07-28. A middleware
//! on each server records the HTTP version and request target of every request it gets, so
//! that "HTTP/2 was used" and "it went through the proxy" are observed at the server.
//!
//! Proxies (and the platform's CA bundle) are read from the environment when a client is
//! built, and the environment is process-wide (and `set_var` is `unsafe`, which this
//! workspace forbids): those tests run their client in a child process (this test binary,
//! re-run on [`child_client`] alone) with the variables set on that child only.

use crate::support::client::drain;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, Version};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use tether::client::{Client, ClientConfig, Error, ProtocolChoice};
use tether::demo::DemoHandler;
use tether::server::Server;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Bounds every test: a client that hangs fails instead of blocking the suite.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variable that turns [`child_client`] on: the MCP URL.
const CHILD_URL: &str = "TETHER_TEST_CHILD_URL";
/// The private CA (PEM) the child trusts, for HTTPS targets.
const CHILD_CA: &str = "TETHER_TEST_CHILD_CA";
/// Set to `tls` when the child's `connect` must fail with `Error::Tls`.
const CHILD_EXPECT: &str = "TETHER_TEST_CHILD_EXPECT";

/// Every variable the proxy matcher reads; cleared on each child before the test sets its own.
const PROXY_VARS: [&str; 9] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "REQUEST_METHOD",
];

fn count_params(n: u64) -> Option<Value> {
    Some(json!({
        "name": "count",
        "arguments": {"n": n, "interval_ms": 0},
        "_meta": {"progressToken": "p"},
    }))
}

/// Connects, runs `count` with progress, checks every progress and the result, closes.
async fn count_once(url: &str, config: ClientConfig) {
    let client = Client::connect(url, config).await.unwrap();
    let stream = client.request("tools/call", count_params(5)).await.unwrap();
    let (progress, result) = drain(stream).await;
    assert_eq!(result.unwrap(), "counted 5");
    assert_eq!(progress, vec![1, 2, 3, 4, 5]);
    client.close().await.unwrap();
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    version: Version,
    method: String,
    /// The request target as received: `/mcp` from a direct client, `http://host:port/mcp`
    /// (absolute form) when a proxy forwarded it.
    target: String,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Wraps `app` in a middleware that logs every request.
fn observed(app: Router) -> (Router, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let app = app.layer(middleware::from_fn(move |request: Request, next: Next| {
        sink.lock().unwrap().push(Seen {
            version: request.version(),
            method: request.method().to_string(),
            target: request.uri().to_string(),
        });
        next.run(request)
    }));
    (app, log)
}

async fn tether_app() -> Router {
    Server::builder(Arc::new(DemoHandler::new()))
        .build()
        .await
        .expect("a server")
        .router()
}

/// A private CA and a server certificate it signed for `localhost` and `127.0.0.1`.
struct Pki {
    ca_pem: String,
    ca_der: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tether test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let leaf = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        chain: vec![leaf.der().clone()],
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

/// A TCP listener whose connections are TLS, handshaken before axum sees them.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            // A client that refuses the certificate aborts the handshake: skip it.
            let handshake = tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(tcp));
            if let Ok(Ok(tls)) = handshake.await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Serves `app` over TLS offering `alpn`; returns the port.
async fn serve_tls(app: Router, pki: &Pki, alpn: &[&[u8]]) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(pki.key.clone_key()))
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
    };
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// Serves `app` over plain HTTP; returns the port.
async fn serve_plain(app: Router) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

fn versions(log: &Log) -> Vec<Version> {
    log.lock().unwrap().iter().map(|s| s.version).collect()
}

/// With the private CA trusted (PEM for `localhost`, DER for `127.0.0.1`), a call over
/// HTTPS completes with every progress notification, and every request travelled over
/// HTTP/2, which the server offered first in ALPN.
#[tokio::test]
async fn https_with_the_private_ca_completes_a_call_over_http2() {
    let pki = pki();
    let (app, log) = observed(tether_app().await);
    let port = serve_tls(app, &pki, &[b"h2", b"http/1.1"]).await;
    tokio::time::timeout(TEST_TIMEOUT, async {
        let pem = {
            let mut config = ClientConfig::default();
            config.extra_root_certificates = vec![pki.ca_pem.clone().into_bytes()];
            config
        };
        count_once(&format!("https://localhost:{port}/mcp"), pem).await;
        let der = {
            let mut config = ClientConfig::default();
            config.extra_root_certificates = vec![pki.ca_der.clone()];
            config
        };
        count_once(&format!("https://127.0.0.1:{port}/mcp"), der).await;
    })
    .await
    .expect("the calls finish in time");
    let versions = versions(&log);
    // Per client: initialize, initialized, the call, DELETE.
    assert!(versions.len() >= 8, "{versions:?}");
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_2),
        "{versions:?}"
    );
}

/// A TLS server that offers only `http/1.1` gets HTTP/1.1, and the call still completes.
#[tokio::test]
async fn https_to_a_server_offering_only_http1_uses_http1() {
    let pki = pki();
    let (app, log) = observed(tether_app().await);
    let port = serve_tls(app, &pki, &[b"http/1.1"]).await;
    let mut config = ClientConfig::default();
    config.extra_root_certificates = vec![pki.ca_pem.clone().into_bytes()];
    tokio::time::timeout(
        TEST_TIMEOUT,
        count_once(&format!("https://localhost:{port}/mcp"), config),
    )
    .await
    .expect("the call finishes in time");
    let versions = versions(&log);
    assert!(versions.len() >= 4, "{versions:?}");
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_11),
        "{versions:?}"
    );
}

/// Without the private CA the certificate is refused during the handshake: `connect` fails
/// at once with `Error::Tls` naming the reason, and no request reaches the server.
#[tokio::test]
async fn https_without_the_private_ca_fails_with_a_tls_error() {
    let pki = pki();
    let (app, log) = observed(tether_app().await);
    let port = serve_tls(app, &pki, &[b"h2", b"http/1.1"]).await;
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        Client::connect(
            &format!("https://localhost:{port}/mcp"),
            ClientConfig::default(),
        ),
    )
    .await
    .expect("a refused certificate fails fast, it does not hang");
    let error = result.expect_err("an unknown issuer must be refused");
    let message = error.to_string();
    assert!(matches!(error, Error::Tls(_)), "{error:?}");
    assert!(
        message.contains("certificate") && message.contains("UnknownIssuer"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(log.lock().unwrap().is_empty());
}

/// Extra roots that do not parse are a configuration error, before any connection.
#[tokio::test]
async fn unparsable_extra_roots_are_a_config_error() {
    for bad in [
        b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n".to_vec(),
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
        b"\x30\x03\x02\x01\x00".to_vec(),
    ] {
        let mut config = ClientConfig::default();
        config.extra_root_certificates = vec![bad.clone()];
        // Nothing listens there: a config error must come before any connection attempt.
        let result = tokio::time::timeout(
            TEST_TIMEOUT,
            Client::connect("https://127.0.0.1:9/mcp", config),
        )
        .await
        .unwrap();
        assert!(
            matches!(result, Err(Error::Config(_))),
            "{:?} gave {result:?}",
            String::from_utf8_lossy(&bad)
        );
    }
}

// ---- proxies ----------------------------------------------------------------------------

/// A forwarding proxy on loopback. For `CONNECT host:port` it opens a tunnel; for an
/// absolute-URI request (`POST http://host:port/mcp HTTP/1.1`, how a client talks to an HTTP
/// proxy) it connects to that host and forwards the connection's bytes unchanged, so the
/// origin sees the absolute form (servers must accept it, RFC 9112 §3.2.2) and can tell a
/// proxied request from a direct one. It logs the first request line of each connection.
struct Proxy {
    url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

async fn spawn_proxy() -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&lines);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(proxy_connection(client, Arc::clone(&log)));
        }
    });
    Proxy { url, lines }
}

async fn proxy_connection(
    mut client: TcpStream,
    log: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut chunk).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line =
        String::from_utf8_lossy(&head[..head.windows(2).position(|w| w == b"\r\n").unwrap()])
            .into_owned();
    log.lock().unwrap().push(line.clone());
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut upstream;
    if method == "CONNECT" {
        upstream = TcpStream::connect(target).await?;
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        upstream.write_all(&head[end..]).await?;
    } else {
        let authority = target
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default();
        upstream = TcpStream::connect(authority).await?;
        upstream.write_all(&head).await?;
    }
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// The client half of the tests that need their own environment, run in a child process with
/// the variables set by the parent test: a call (or, with [`CHILD_EXPECT`] `tls`, a
/// refused `connect`). Ignored in an ordinary run, so that it is not counted as a pass there;
/// the parent runs it with `--ignored`.
#[tokio::test]
#[ignore = "the client half of the proxy and no-CA tests, run by them in a child process"]
async fn child_client() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let config = {
        let mut config = ClientConfig::default();
        config.extra_root_certificates = std::env::var(CHILD_CA)
            .ok()
            .map(String::into_bytes)
            .into_iter()
            .collect();
        config
    };
    if std::env::var(CHILD_EXPECT).is_ok_and(|e| e == "tls") {
        let result = tokio::time::timeout(TEST_TIMEOUT, Client::connect(&url, config))
            .await
            .expect("connect fails in time");
        assert!(matches!(result, Err(Error::Tls(_))), "{result:?}");
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, count_once(&url, config))
        .await
        .expect("the call finishes in time");
}

/// Runs [`child_client`] in a child process against `url`, with no proxy variables but
/// those of `env`, and without the variables named in `unset`; panics with its output if it
/// failed.
async fn run_child(url: &str, ca_pem: Option<&str>, env: &[(&str, &str)], unset: &[&str]) {
    // The child test's name in this binary: its module path without the crate's name.
    let child = concat!(module_path!(), "::child_client");
    let child = child.split_once("::").map_or(child, |(_, name)| name);
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", child, "--ignored", "--nocapture"])
        .env(CHILD_URL, url)
        .kill_on_drop(true);
    for var in PROXY_VARS.iter().chain(unset) {
        command.env_remove(var);
    }
    if let Some(pem) = ca_pem {
        command.env(CHILD_CA, pem);
    }
    command.envs(env.iter().copied());
    let output = tokio::time::timeout(TEST_TIMEOUT, command.output())
        .await
        .expect("the child finishes in time")
        .unwrap();
    assert!(
        output.status.success(),
        "child with {env:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The filter matched the child test (a typo would run nothing and pass).
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("1 passed"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// `HTTP_PROXY` (and its lower-case spelling) sends plain-HTTP requests through the proxy:
/// the proxy saw absolute-URI requests for the server, and every request the server got
/// came in that form, so none bypassed the proxy.
#[tokio::test]
async fn http_proxy_carries_plain_http_requests() {
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY"] {
        let (app, log) = observed(tether_app().await);
        let port = serve_plain(app).await;
        let proxy = spawn_proxy().await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        run_child(&url, None, &[(var, &proxy.url)], &[]).await;
        let lines = proxy.lines.lock().unwrap().clone();
        assert!(!lines.is_empty(), "{var}: the proxy saw nothing");
        assert!(
            lines
                .iter()
                .all(|l| l.ends_with(&format!("{url} HTTP/1.1"))),
            "{var}: {lines:?}"
        );
        let seen = log.lock().unwrap().clone();
        assert!(seen.len() >= 4, "{var}: {seen:?}");
        assert!(
            seen.iter().all(|s| s.target == url),
            "{var}: a request bypassed the proxy: {seen:?}"
        );
    }
}

/// `HTTPS_PROXY` tunnels HTTPS with `CONNECT`; TLS (and HTTP/2) stay end to end.
#[tokio::test]
async fn https_proxy_tunnels_https_with_connect() {
    let pki = pki();
    let (app, log) = observed(tether_app().await);
    let port = serve_tls(app, &pki, &[b"h2", b"http/1.1"]).await;
    let proxy = spawn_proxy().await;
    let url = format!("https://localhost:{port}/mcp");
    run_child(&url, Some(&pki.ca_pem), &[("HTTPS_PROXY", &proxy.url)], &[]).await;
    let lines = proxy.lines.lock().unwrap().clone();
    assert!(!lines.is_empty(), "the proxy saw nothing");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("CONNECT localhost:{port} "))),
        "{lines:?}"
    );
    let versions = versions(&log);
    assert!(versions.len() >= 4, "{versions:?}");
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_2),
        "{versions:?}"
    );
}

/// `NO_PROXY` naming the server's address bypasses the proxy for it: the proxy sees
/// nothing and the server gets ordinary origin-form requests. Loopback is not exempt by
/// itself: without `NO_PROXY` the same requests go through the proxy (the test above).
#[tokio::test]
async fn no_proxy_bypasses_the_proxy() {
    for no_proxy in [
        ("NO_PROXY", "127.0.0.1"),
        ("no_proxy", "example.invalid, 127.0.0.0/8"),
    ] {
        let (app, log) = observed(tether_app().await);
        let port = serve_plain(app).await;
        let proxy = spawn_proxy().await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        run_child(
            &url,
            None,
            &[
                ("HTTP_PROXY", &proxy.url),
                ("ALL_PROXY", &proxy.url),
                no_proxy,
            ],
            &[],
        )
        .await;
        assert!(
            proxy.lines.lock().unwrap().is_empty(),
            "{no_proxy:?}: {:?}",
            proxy.lines.lock().unwrap()
        );
        let seen = log.lock().unwrap().clone();
        assert!(seen.len() >= 4, "{no_proxy:?}: {seen:?}");
        assert!(
            seen.iter().all(|s| s.target == "/mcp"),
            "{no_proxy:?}: {seen:?}"
        );
    }
}

// ---- no platform roots --------------------------------------------------------------------

/// On a system without a CA bundle (a minimal container; here `SSL_CERT_FILE` names an
/// empty file) the client still works: plain HTTP as usual, HTTPS to a server the extra
/// roots cover, and HTTPS to one they do not is refused with `Error::Tls`.
#[tokio::test]
async fn without_platform_roots_http_and_extra_roots_still_work() {
    let no_roots: &[(&str, &str)] = &[("SSL_CERT_FILE", "/dev/null")];
    let unset = &["SSL_CERT_DIR"];
    let plain = serve_plain(tether_app().await).await;
    run_child(
        &format!("http://127.0.0.1:{plain}/mcp"),
        None,
        no_roots,
        unset,
    )
    .await;

    let pki = pki();
    let port = serve_tls(tether_app().await, &pki, &[b"h2", b"http/1.1"]).await;
    let url = format!("https://localhost:{port}/mcp");
    run_child(&url, Some(&pki.ca_pem), no_roots, unset).await;
    let refused = [no_roots, &[(CHILD_EXPECT, "tls")]].concat();
    run_child(&url, None, &refused, unset).await;
}

// ---- a server this client cannot speak to ------------------------------------------------

/// A server that speaks only 2026-07-28 refuses the `initialize` POST with 400 and
/// `-32022` UnsupportedProtocolVersion listing what it supports (docs/PROTOCOL.md#stateless-http,
/// docs/PROTOCOL.md#error-codes): `connect` fails with `UnsupportedVersion` naming that version,
/// after that one POST (no legacy probe, no retry).
#[tokio::test]
async fn a_server_speaking_only_2026_07_28_is_refused_with_unsupported_version() {
    let refuse = |body: axum::Json<Value>| async move {
        let error = json!({
            "jsonrpc": "2.0",
            "id": body.0.get("id").cloned().unwrap_or(Value::Null),
            "error": {
                "code": -32022,
                "message": "Unsupported protocol version",
                "data": {
                    "supported": ["2026-07-28"],
                    "requested": body.0["params"]["protocolVersion"],
                },
            },
        });
        (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
    };
    let app: Router = Router::new().route(
        "/mcp",
        post(refuse).fallback(|| async { StatusCode::METHOD_NOT_ALLOWED.into_response() }),
    );
    let (app, log) = observed(app);
    let port = serve_plain(app).await;
    let result = tokio::time::timeout(
        TEST_TIMEOUT,
        Client::connect(&format!("http://127.0.0.1:{port}/mcp"), {
            // The 2025 client alone: `Auto` would probe `server/discover` first.
            let mut config = ClientConfig::default();
            config.protocol = ProtocolChoice::Legacy;
            config
        }),
    )
    .await
    .expect("connect fails in time");
    match result {
        Err(Error::UnsupportedVersion { offered }) => assert_eq!(offered, "2026-07-28"),
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    let seen = log.lock().unwrap().clone();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST"], "{seen:?}");
}
