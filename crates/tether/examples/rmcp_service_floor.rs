//! The floor under any transport of an rmcp server: the example's `count` server
//! (`rmcp_server.rs`'s, the same code) served on a transport that does nothing but hand
//! messages over a channel, with no HTTP, no store and no serialization, timed per progress
//! event on a single-threaded and on a multi-threaded tokio runtime.
//!
//! ```text
//! cargo run --release -p tether --all-features --example rmcp_service_floor -- [--multi-thread] [--n N]
//! ```
//!
//! It prints one line per run (three runs): events, events/s and the process's CPU time per
//! event. docs/PERFORMANCE.md#rmcp uses it to tell rmcp's own cost per message from the
//! cost of what carries it.

use std::time::{Duration, Instant};

use rmcp::model::JsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::{RoleServer, ServiceExt as _};
use serde_json::json;
use tokio::sync::mpsc;

// The example's server, its very code; the rest of that file (serving it through tether) is
// not used here.
#[allow(dead_code)]
#[path = "rmcp_server.rs"]
mod rmcp_server;
use rmcp_server::Counter;

/// The least a transport can do: messages in and out over channels.
struct ChannelTransport {
    input: mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleServer>>,
    output: mpsc::UnboundedSender<TxJsonRpcMessage<RoleServer>>,
}

impl rmcp::transport::Transport<RoleServer> for ChannelTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = self
            .output
            .send(item)
            .map_err(|_| std::io::Error::other("the reader is gone"));
        async move { sent }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.input.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut multi_thread = false;
    let mut n: u64 = 200_000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--multi-thread" => multi_thread = true,
            "--n" => n = args.next().ok_or("--n needs a count")?.parse()?,
            other => {
                return Err(format!("unknown flag {other}; expected --multi-thread --n N").into());
            }
        }
    }
    let runtime = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    println!(
        "rmcp's service alone, {} runtime:",
        if multi_thread {
            "multi-threaded"
        } else {
            "single-threaded"
        }
    );
    runtime.block_on(run(n))
}

async fn run(n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let (to_service, input) = mpsc::unbounded_channel();
    let (output, mut from_service) = mpsc::unbounded_channel();
    let service = tokio::spawn(async move {
        if let Ok(running) = Counter.serve(ChannelTransport { input, output }).await {
            let _ = running.waiting().await;
        }
    });
    let send = |message: serde_json::Value| -> Result<(), Box<dyn std::error::Error>> {
        to_service.send(serde_json::from_value(message)?)?;
        Ok(())
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "floor", "version": "1"}}}),
    )?;
    from_service.recv().await.ok_or("no answer to initialize")?;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    for run in 1..=3 {
        let started = Instant::now();
        let cpu_before = process_cpu()?;
        send(
            json!({"jsonrpc": "2.0", "id": run, "method": "tools/call", "params": {
            "name": "count", "arguments": {"n": n}, "_meta": {"progressToken": "floor"}}}),
        )?;
        let mut events: u64 = 0;
        // Progress until the call's response.
        while let JsonRpcMessage::Notification(_) =
            from_service.recv().await.ok_or("the service stopped")?
        {
            events += 1;
        }
        let elapsed = started.elapsed();
        let cpu = process_cpu()? - cpu_before;
        if events != n {
            return Err(format!("{events} progress events, not {n}").into());
        }
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let (rate, cpu_per_event) = (
            events as f64 / elapsed.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / events as f64,
        );
        println!(
            "  {events} events in {elapsed:.0?}: {rate:.0} events/s, {cpu_per_event:.2} us of CPU per event"
        );
    }
    drop(to_service);
    let _ = service.await;
    Ok(())
}

/// This process's CPU time so far (user and system), from /proc (clock ticks of 10 ms).
fn process_cpu() -> Result<Duration, Box<dyn std::error::Error>> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .ok_or("no /proc/self/stat")?
        .split_whitespace()
        .collect();
    let ticks: u64 = fields.get(11).ok_or("short stat")?.parse::<u64>()?
        + fields.get(12).ok_or("short stat")?.parse::<u64>()?;
    Ok(Duration::from_millis(ticks * 10))
}
