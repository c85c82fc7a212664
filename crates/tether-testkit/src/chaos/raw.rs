//! The chaos workers that use the raw reader and do their own GET + `Last-Event-ID`
//! resumes, so that a server bug cannot hide behind the client's deduplication.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether::proto::backoff::{RandomSource, SplitMix64};

use super::{
    Call, Ctx, Outcome, RAW_BACKOFF_CAP, RECONNECT_ATTEMPTS, RECONNECT_ELAPSED, SETUP_ATTEMPTS,
    Tracker, check_result, error_outcome, finish, setup_failed, take_call, within_deadline,
};
use crate::raw::{RawClient, RawResponse, SseItem};

pub(super) async fn raw_worker(ctx: Arc<Ctx>, worker: usize) -> anyhow::Result<()> {
    let mut raws = Vec::new();
    for url in &ctx.urls {
        raws.push(RawClient::new(url)?.with_timeout(Duration::from_secs(5)));
    }
    let mut rng =
        SplitMix64::new(ctx.config.seed ^ (worker as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut attempts = 0;
    while let Err(error) = raws[0].initialize().await {
        setup_failed(worker, &mut attempts, error).await?;
    }
    // One session, reachable through every node (a shared store serves it anywhere).
    let session = raws[0].session_id().map(str::to_owned);
    for raw in &mut raws[1..] {
        raw.set_session_id(session.clone());
    }
    while let Some((call, mut tracker)) = take_call(&ctx, &ctx.tally.raw_calls).await {
        let outcome = within_deadline(
            &ctx,
            raw_call(&ctx, &mut raws, &mut rng, call, &mut tracker),
        )
        .await;
        finish(&ctx, call.index, "raw", &tracker, outcome);
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), raws[0].delete_session()).await;
    Ok(())
}

/// How reading one connection of a raw stream ended.
pub(super) enum Read {
    Done(Outcome),
    Lost(String),
}

/// A raw stream's resume state.
pub(super) struct RawStream {
    request_id: i64,
    cursor: Option<String>,
    retry: Duration,
    /// When the current loss was noticed; cleared by the first message after it.
    lost_at: Option<Instant>,
}

pub(super) async fn raw_call(
    ctx: &Ctx,
    raws: &mut [RawClient],
    rng: &mut SplitMix64,
    call: Call,
    tracker: &mut Tracker,
) -> Outcome {
    let Call { index, n, .. } = call;
    let arguments = call.arguments();
    // Any node takes the POST; the request id is the session's next, whichever node it goes
    // through, so every node's client is moved past it.
    let node = (rng.next_u64() % raws.len() as u64) as usize;
    let token = json!(format!("raw-{index}"));
    let mut sent = post_count(raws, node, &arguments, &token).await;
    if matches!(&sent, Ok((_, response)) if response.status() == 404) {
        // The session is gone (it died with its node): a new one, and the POST once more,
        // which is what tether's client does with a request the server never accepted.
        if let Err(error) = new_session(raws).await {
            return Outcome::BeforeStream(format!("no new session after a 404: {error:#}"));
        }
        sent = post_count(raws, node, &arguments, &token).await;
    }
    let (request_id, mut response) = match sent {
        Ok(sent) => sent,
        Err(error) => return Outcome::BeforeStream(format!("{error:#}")),
    };
    if response.status() != 200 || !response.is_event_stream() {
        return Outcome::Typed(format!(
            "POST answered {} {:?}",
            response.status(),
            response.header("content-type")
        ));
    }
    let mut stream = RawStream {
        request_id,
        cursor: None,
        retry: ctx.retry,
        lost_at: None,
    };
    let mut failures: u32 = 0;
    let mut outage_since: Option<Instant> = None;
    loop {
        let progress_before = tracker.events;
        let cursor_before = stream.cursor.clone();
        match read_raw(ctx, &mut response, &mut stream, index, n, tracker).await {
            Read::Done(outcome) => return outcome,
            Read::Lost(why) => {
                if stream.cursor.is_none() {
                    return Outcome::BeforeStream(format!("lost before the priming event: {why}"));
                }
                stream.lost_at.get_or_insert_with(Instant::now);
                if tracker.events > progress_before || stream.cursor != cursor_before {
                    failures = 0;
                    outage_since = None;
                }
            }
        }
        // Reconnect: the server's retry first, then doubling to the cap, until one opens.
        let since = *outage_since.get_or_insert_with(Instant::now);
        response = loop {
            let backoff = ctx
                .retry
                .max(Duration::from_millis(1))
                .saturating_mul(1 << failures.min(16))
                .min(RAW_BACKOFF_CAP);
            let wait = if failures == 0 {
                stream.retry
            } else {
                stream.retry.max(backoff)
            };
            tokio::time::sleep(wait).await;
            if failures >= RECONNECT_ATTEMPTS || since.elapsed() > RECONNECT_ELAPSED {
                return Outcome::Typed(format!(
                    "budget exhausted after {failures} attempts over {:?}",
                    since.elapsed()
                ));
            }
            ctx.tally.reconnects.fetch_add(1, Ordering::SeqCst);
            // Resume on any node: the store is shared.
            let node = (rng.next_u64() % raws.len() as u64) as usize;
            if (rng.next_u64() % 1_000_000) as f64 / 1e6 < ctx.config.refuse_resume_probability {
                ctx.proxies[node].refuse_next(1);
            }
            let cursor = stream.cursor.clone().unwrap_or_default();
            match raws[node].resume(&cursor).await {
                Ok(resumed) if resumed.status() == 200 && resumed.is_event_stream() => {
                    break resumed;
                }
                Ok(resumed) if matches!(resumed.status(), 429 | 500..=599) => failures += 1,
                Ok(resumed) => {
                    let status = resumed.status();
                    let body = resumed
                        .read_to_end()
                        .await
                        .map(|t| String::from_utf8_lossy(&t.body).into_owned())
                        .unwrap_or_default();
                    return Outcome::Typed(format!("resume answered {status}: {body}"));
                }
                Err(_) => failures += 1,
            }
        };
    }
}

/// POSTs `count` through node `node`, keeping every node's client on the session's next
/// request id.
pub(super) async fn post_count(
    raws: &mut [RawClient],
    node: usize,
    arguments: &Value,
    token: &Value,
) -> anyhow::Result<(i64, RawResponse)> {
    let sent = raws[node]
        .call_tool("count", arguments.clone(), Some(token.clone()))
        .await;
    let used = raws[node].next_request_id();
    for (i, raw) in raws.iter_mut().enumerate() {
        while i != node && raw.next_request_id() < used {}
    }
    sent
}

/// Initializes a new session (through any node that answers) for every node's client.
pub(super) async fn new_session(raws: &mut [RawClient]) -> anyhow::Result<()> {
    let mut last = None;
    for attempt in 0..SETUP_ATTEMPTS {
        let node = attempt as usize % raws.len();
        // `initialize` must not name the dead session.
        raws[node].set_session_id(None);
        match raws[node].initialize().await {
            Ok(_) => {
                let session = raws[node].session_id().map(str::to_owned);
                let used = raws[node].next_request_id();
                for raw in raws.iter_mut() {
                    raw.set_session_id(session.clone());
                    while raw.next_request_id() < used {}
                }
                return Ok(());
            }
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt")))
}

/// Reads one connection of a raw stream until the call's answer, or the connection's loss.
pub(super) async fn read_raw(
    ctx: &Ctx,
    response: &mut RawResponse,
    stream: &mut RawStream,
    index: u64,
    n: u64,
    tracker: &mut Tracker,
) -> Read {
    loop {
        let item = match response.next_item_within(ctx.config.idle_timeout).await {
            Ok(Some(Some(item))) => item,
            Ok(Some(None)) => return Read::Lost("clean close".to_owned()),
            Ok(None) => return Read::Lost("idle".to_owned()),
            Err(error) => return Read::Lost(format!("{error:#}")),
        };
        let event = match item {
            SseItem::Event(event) => event,
            SseItem::Retry(ms) => {
                stream.retry = Duration::from_millis(ms);
                continue;
            }
            SseItem::LastEventId(id) => {
                stream.cursor = (!id.is_empty()).then_some(id);
                continue;
            }
            SseItem::Comment(_) => continue,
        };
        if !event.id.is_empty() {
            stream.cursor = Some(event.id.clone());
        }
        let message = match event.json() {
            Ok(Some(message)) => message,
            Ok(None) => continue,
            Err(error) => return Read::Done(Outcome::Untyped(format!("{error:#}"))),
        };
        if let Some(lost_at) = stream.lost_at.take() {
            ctx.tally.latency(lost_at);
        }
        if message["method"] == "notifications/progress" {
            match message["params"]["progress"].as_u64() {
                Some(value) => tracker.progress(value),
                None => {
                    return Read::Done(Outcome::Untyped(format!("bad progress {message}")));
                }
            }
            continue;
        }
        if message["id"] == json!(stream.request_id) {
            if let Some(result) = message.get("result") {
                check_result(ctx, index, n, result);
                return Read::Done(Outcome::Completed);
            }
            if let Some(error) = message.get("error") {
                return Read::Done(error_outcome(error));
            }
        }
        return Read::Done(Outcome::Untyped(format!("unexpected message {message}")));
    }
}
