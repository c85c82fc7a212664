//! Decoder and encoder throughput on realistic MCP traffic, against the `sse-stream` crate.
//!
//! The stream is what a tether server writes: `event: message`, an `id` of a 22-character
//! base64url stream id and a sequence number, one ~1 KiB JSON-RPC notification on a single
//! `data:` line, and a `: keep-alive` comment now and then; about 4 MiB in all. It is fed
//! in 16 KiB chunks (a typical HTTP body read) and in 1460-byte chunks (one TCP segment
//! each, the worst realistic case); a third scenario has ~200-byte messages, the size of
//! a bare progress notification. Both decoders are first checked to produce identical
//! events. After the criterion groups, a plain timed loop prints one line per scenario
//! with both throughputs and the ratio, so the comparison survives noisy criterion runs.

use std::{
    convert::Infallible,
    hint::black_box,
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput};
use futures::{StreamExt, executor::block_on, stream};
use tether_sse::{Decoder, EventFrame, Item, encode_comment_into};

/// Roughly how many bytes of SSE the scenarios decode.
const STREAM_BYTES: usize = 4 * 1024 * 1024;
/// A keep-alive comment after this many events.
const KEEP_ALIVE_EVERY: usize = 64;
/// (name, JSON message size, chunk size). 16 KiB is a typical HTTP body read, 1460 bytes
/// one TCP segment; ~1 KiB messages are the brief's MCP shape, ~200 bytes the size of a
/// bare progress notification, where per-event costs dominate.
const SCENARIOS: [(&str, usize, usize); 3] = [
    ("1KiB-msgs/16KiB-chunks", 1024, 16 * 1024),
    ("1KiB-msgs/1460B-chunks", 1024, 1460),
    ("200B-msgs/16KiB-chunks", 200, 16 * 1024),
];

/// One event to send: (type, id, data).
struct Message {
    id: String,
    data: String,
}

fn messages(size: usize) -> Vec<Message> {
    // 22 base64url characters: 16 random bytes, as a tether stream id.
    let stream_id = "q3Zr-8Hk_T0aLw9xVb2EYg";
    let filler = "Indexing src/transport/streamable_http.rs: resolved 42 symbols, 7 references \
                  updated; cache warm, continuing with the next file in the workspace. ";
    let mut messages = Vec::new();
    let mut total = 0;
    let mut seq = 0u64;
    while total < STREAM_BYTES {
        seq += 1;
        let mut text = String::new();
        while text.len() < size.saturating_sub(200) {
            text.push_str(filler);
        }
        text.truncate(size.saturating_sub(200));
        if seq.is_multiple_of(4) {
            // LLM-written text is not all ASCII.
            text.push_str(" — état: ✓");
        }
        let data = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"tok-{seq}","progress":{seq},"total":100000,"message":"{text}"}}}}"#
        );
        let id = format!("{stream_id}:{seq}");
        total += data.len() + id.len() + 30;
        messages.push(Message { id, data });
    }
    messages
}

fn encode_all(messages: &[Message], dst: &mut BytesMut) {
    for (n, message) in messages.iter().enumerate() {
        EventFrame::with_data(&message.data)
            .event("message")
            .id(&message.id)
            .encode_into(dst)
            .expect("valid frame");
        if n % KEEP_ALIVE_EVERY == KEEP_ALIVE_EVERY - 1 {
            encode_comment_into("keep-alive", dst).expect("valid comment");
        }
    }
}

fn chunks(stream: &Bytes, size: usize) -> Vec<Bytes> {
    (0..stream.len())
        .step_by(size)
        .map(|start| stream.slice(start..stream.len().min(start + size)))
        .collect()
}

/// (type, data, id) of every event.
type Seen = Vec<(String, String, String)>;

fn decode_tether(chunks: &[Bytes], mut seen: Option<&mut Seen>) -> usize {
    let mut decoder = Decoder::new();
    let mut events = 0;
    let mut on_item = |item: Item| {
        if let Item::Event(event) = item {
            if let Some(seen) = seen.as_deref_mut() {
                seen.push((
                    event.event_type().to_owned(),
                    event.data().to_owned(),
                    event.last_event_id().to_owned(),
                ));
            }
            black_box(event);
            events += 1;
        }
    };
    for chunk in chunks {
        decoder.feed(chunk);
        while let Some(item) = decoder.next_item().expect("within limits") {
            on_item(item);
        }
    }
    decoder.finish();
    while let Some(item) = decoder.next_item().expect("within limits") {
        on_item(item);
    }
    events
}

fn decode_sse_stream(chunks: &[Bytes], mut seen: Option<&mut Seen>) -> usize {
    block_on(async {
        let input = stream::iter(chunks.iter().cloned().map(Ok::<_, Infallible>));
        let mut events = sse_stream::SseByteStream::new(input);
        let mut count = 0;
        while let Some(event) = events.next().await {
            let event = event.expect("valid stream");
            if let Some(seen) = seen.as_deref_mut() {
                seen.push((
                    event.event.clone().unwrap_or_else(|| "message".into()),
                    event.data.clone().unwrap_or_default(),
                    event.id.clone().unwrap_or_default(),
                ));
            }
            black_box(event);
            count += 1;
        }
        count
    })
}

/// Median wall time of `runs` calls.
fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[runs / 2]
}

fn mib_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / time.as_secs_f64()
}

/// One decode scenario: the chunks fed, their total length and the event count.
struct Scenario {
    name: &'static str,
    chunks: Vec<Bytes>,
    len: usize,
    events: usize,
}

fn main() {
    let scenarios: Vec<Scenario> = SCENARIOS
        .iter()
        .map(|&(name, size, chunk_size)| {
            let messages = messages(size);
            let mut encoded = BytesMut::new();
            encode_all(&messages, &mut encoded);
            let stream = encoded.freeze();
            let chunks = chunks(&stream, chunk_size);
            // The comparison means nothing unless both decoders see the same events.
            let (mut ours, mut theirs) = (Seen::new(), Seen::new());
            decode_tether(&chunks, Some(&mut ours));
            decode_sse_stream(&chunks, Some(&mut theirs));
            assert_eq!(ours.len(), messages.len(), "{name}: tether-sse event count");
            assert!(ours == theirs, "{name}: tether-sse and sse-stream disagree");
            assert_eq!(ours[7].2, messages[7].id);
            assert_eq!(ours[7].1, messages[7].data);
            Scenario {
                name,
                chunks,
                len: stream.len(),
                events: messages.len(),
            }
        })
        .collect();
    let messages = messages(1024);
    let mut encoded = BytesMut::new();
    encode_all(&messages, &mut encoded);
    let len = encoded.len();

    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for Scenario {
        name, chunks, len, ..
    } in &scenarios
    {
        let mut group = criterion.benchmark_group(format!("decode/{name}"));
        group.throughput(Throughput::Bytes(*len as u64));
        group.bench_function("tether-sse", |b| b.iter(|| decode_tether(chunks, None)));
        group.bench_function("sse-stream", |b| {
            b.iter(|| decode_sse_stream(chunks, None));
        });
        group.finish();
    }
    {
        let mut group = criterion.benchmark_group("encode");
        group.throughput(Throughput::Bytes(len as u64));
        let mut dst = BytesMut::with_capacity(len);
        group.bench_function("tether-sse/encode_into", |b| {
            b.iter(|| {
                dst.clear();
                encode_all(&messages, &mut dst);
                black_box(dst.len())
            });
        });
        group.finish();
    }
    criterion.final_summary();

    // `--list`, `--test` and filters make criterion skip work; skip the summary then too.
    if std::env::args().any(|arg| arg == "--list" || arg == "--test") {
        return;
    }
    const RUNS: usize = 15;
    println!("\nsummary (median of {RUNS} runs):");
    for Scenario {
        name,
        chunks,
        len,
        events,
    } in &scenarios
    {
        let ours = median_time(RUNS, || {
            black_box(decode_tether(chunks, None));
        });
        let theirs = median_time(RUNS, || {
            black_box(decode_sse_stream(chunks, None));
        });
        println!(
            "decode {name} ({:.1} MiB, {events} events): tether-sse {:7.1} MiB/s | \
             sse-stream {:7.1} MiB/s | ratio {:.2}x",
            *len as f64 / 1048576.0,
            mib_per_s(*len, ours),
            mib_per_s(*len, theirs),
            theirs.as_secs_f64() / ours.as_secs_f64(),
        );
    }
    let mut dst = BytesMut::with_capacity(len);
    let encode = median_time(RUNS, || {
        dst.clear();
        encode_all(&messages, &mut dst);
        black_box(dst.len());
    });
    println!(
        "encode 1KiB-msgs ({:.1} MiB): tether-sse {:7.1} MiB/s",
        len as f64 / 1048576.0,
        mib_per_s(len, encode)
    );
}
