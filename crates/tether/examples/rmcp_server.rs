//! An rmcp server, written with rmcp's API alone (its tool macros, `Peer::notify_progress`),
//! served through tether: its streams are stored before they are sent and resume across
//! cuts, on the store given, in both protocol eras.
//!
//! ```text
//! cargo run --release -p tether --all-features --example rmcp_server -- \
//!     --bind 127.0.0.1:0 --store memory|sqlite:PATH|redis://HOST:PORT[/DB] \
//!     [--eras both|legacy|modern]
//! ```
//!
//! It prints `tether: serving http://HOST:PORT/mcp` once listening. Its one tool,
//! `count {n, interval_ms}`, behaves as the demo's: n `notifications/progress` (progress 1..n,
//! total n) for the request's progress token, `interval_ms` apart, then the text result
//! `counted n`. Ctrl-C or SIGTERM shuts it down gracefully. `--transport rmcp` serves the
//! same server on rmcp's own `StreamableHttpService` instead (in memory), the baseline of
//! `scripts/bench-peers.sh`'s comparison. It logs to stderr as `tether serve` does
//! (`RUST_LOG`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, schemars, tool, tool_router};
use serde::Deserialize;
use tether::rmcp::RmcpHandler;
use tether::server::{Eras, Server};
use tether::store::{StoreLimits, Stores};

// ---- The rmcp server: nothing below knows about tether. ----

/// `count`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct CountArgs {
    /// How many progress notifications to send.
    n: u64,
    /// Milliseconds between them.
    #[serde(default)]
    interval_ms: u64,
}

/// The server (`rmcp_service_floor.rs` serves it too).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counter;

#[tool_router(server_handler)]
impl Counter {
    #[tool(description = "Counts to n, one progress notification per step")]
    async fn count(
        &self,
        Parameters(CountArgs { n, interval_ms }): Parameters<CountArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let token = context.meta.get_progress_token();
        for i in 1..=n {
            if let Some(token) = &token {
                #[allow(clippy::cast_precision_loss)] // counts are far below 2^52
                let mut progress = ProgressNotificationParam::new(token.clone(), i as f64);
                #[allow(clippy::cast_precision_loss)]
                {
                    progress.total = Some(n as f64);
                }
                context
                    .peer
                    .notify_progress(progress)
                    .await
                    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
            }
            if interval_ms > 0 {
                tokio::time::sleep(Duration::from_millis(interval_ms)).await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "counted {n}"
        ))]))
    }
}

// ---- Serving it through tether. ----

/// `--bind ADDR`, `--store memory|sqlite:PATH|redis://…`, `--eras both|legacy|modern` and
/// `--transport tether|rmcp`.
struct Args {
    bind: String,
    store: String,
    /// Which protocol eras tether serves (as `tether serve --eras`).
    eras: Eras,
    /// `rmcp`: the same server on rmcp's own `StreamableHttpService` (in memory, sessions),
    /// the baseline tether's benchmark compares with.
    rmcp_transport: bool,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut parsed = Args {
        bind: "127.0.0.1:8080".to_owned(),
        store: "memory".to_owned(),
        eras: Eras::Both,
        rmcp_transport: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bind" => parsed.bind = value,
            "--store" => parsed.store = value,
            "--eras" => parsed.eras = value.parse()?,
            "--transport" => {
                parsed.rmcp_transport = match value.as_str() {
                    "tether" => false,
                    "rmcp" => true,
                    other => return Err(format!("unknown transport {other:?}").into()),
                }
            }
            _ => {
                return Err(format!(
                    "unknown flag {flag}; expected --bind ADDR --store STORE --eras ERAS --transport T"
                )
                .into());
            }
        }
    }
    Ok(parsed)
}

async fn stores(store: &str) -> Result<Stores, Box<dyn std::error::Error>> {
    let limits = StoreLimits::default();
    Ok(match store {
        "memory" => Stores::memory(limits),
        url if url.starts_with("redis://") => Stores::redis(url, limits).await?,
        other => match other.strip_prefix("sqlite:") {
            Some(path) => Stores::sqlite(path, limits)?,
            None => return Err(format!("unknown store {other:?}").into()),
        },
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    // Logs to stderr, filtered by RUST_LOG (warnings unless set), as `tether serve` writes them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if args.rmcp_transport {
        return serve_with_rmcp(&args.bind).await;
    }
    let server = Server::builder(Arc::new(RmcpHandler::new(|| Counter)))
        .stores(stores(&args.store).await?)
        .eras(args.eras)
        .build()
        .await?;
    let listener = tokio::net::TcpListener::bind(&args.bind).await?;
    println!("tether: serving http://{}/mcp", listener.local_addr()?);
    server.serve(listener, stop_signal()).await?;
    Ok(())
}

/// The same server on rmcp's own Streamable HTTP transport (sessions in memory).
async fn serve_with_rmcp(bind: &str) -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        || Ok(Counter),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(bind).await?;
    println!("tether: serving http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_signal())
        .await?;
    Ok(())
}

/// Ctrl-C or SIGTERM: open streams then end with a `retry`, so clients come back and resume.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
