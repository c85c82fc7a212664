//! Calls a tool with progress, saving a resumption token after each committed event, and
//! resumes from a saved token when given one: the library side of `tether call`.
//!
//! ```text
//! tether serve --bind 127.0.0.1:8080 &
//! cargo run -p tether --example call_tool -- http://127.0.0.1:8080/mcp call.token
//! # interrupt it, then:
//! cargo run -p tether --example call_tool -- http://127.0.0.1:8080/mcp call.token resume
//! ```

use std::sync::Arc;

use serde_json::json;
use tether::client::{Client, ClientConfig, ResumptionToken, ToolCall, ToolCallItem};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080/mcp".to_owned());
    let token_path = args.next().unwrap_or_else(|| "call.token".to_owned());
    let resume = args.next().as_deref() == Some("resume");

    // Process, then commit: the token saved here names the last event the loop below has
    // finished with, so a crash repeats at most the event it was handling.
    let path = token_path.clone();
    let mut config = ClientConfig::default();
    config.on_resumption_token = Some(Arc::new(move |token: &ResumptionToken| {
        if let Ok(text) = serde_json::to_string(token) {
            let tmp = format!("{path}.tmp");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
    }));

    let mut call: ToolCall = if resume {
        let token: ResumptionToken = serde_json::from_str(&std::fs::read_to_string(&token_path)?)?;
        Client::resume_tool_call(&url, &token, config).await?
    } else {
        let client = Client::connect(&url, config).await?;
        client
            .call_tool("count", json!({"n": 50, "interval_ms": 100}))
            .await?
    };

    while let Some(item) = call.next().await {
        match item? {
            ToolCallItem::Progress {
                progress, total, ..
            } => println!("progress {progress} of {}", total.unwrap_or(f64::NAN)),
            ToolCallItem::Response(response) => println!("response: {response:?}"),
            other => println!("{other:?}"),
        }
    }
    call.client().clone().close().await?;
    Ok(())
}
