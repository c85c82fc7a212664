//! Resume costs end to end: is replaying a stream from the event store at least as fast as
//! delivering it the first time, and how soon does a resume answer?
//!
//! tether's server never writes a message to a connection directly: the handler appends it to
//! the [`EventStore`] and one writer loop per connection reads the stream after its cursor, so
//! first delivery and resume after `Last-Event-ID` are the same loop
//! (docs/DESIGN.md#data-flow). The aims this bench checks: replay at least as fast as first
//! delivery, and the first replayed event within 2 ms with 100 000 events stored.
//!
//! Scenarios, all over real loopback sockets against `Server::serve` with the demo handler
//! (no mocks):
//!
//! - `http/first_delivery`: one `count {n: 100 000, interval_ms: 0}` with a progress token,
//!   the whole SSE response read; events/s from sending the POST to the end of the body.
//!   Producer (the handler appending), store and writer loop all run.
//! - `http/replay_from_start`: the same 100 000 events + result already stored (a completed
//!   stream in its own session, with a per-session cap raised above the default 100 000),
//!   resumed with `Last-Event-ID: <stream>:0` and read to the end: only store reads and the
//!   writer loop run.
//! - `first_replayed_event/{near_start,near_end}`: time from sending the resume GET (on an
//!   already open connection) to the first replayed event decoded, with `Last-Event-ID`
//!   `<stream>:0` (all 100 001 events still to come) and `<stream>:99990` (11 to come). The
//!   client then drops the response, which is a cut.
//! - `store/{append,read_after}`: [`MemoryEventStore`] alone, no HTTP: 100 000 appends of
//!   pre-serialized progress messages, and reading them back in the writer's batch size, to
//!   tell store cost from HTTP cost.
//! - `store/{sqlite_append_concurrent,sqlite_read_after}` (with feature `sqlite`): the same on
//!   `SqliteEventStore` over a temporary file, the appends from 50 concurrent tasks (one stream
//!   each), so the writer thread's group commit shares transactions between them. The summary
//!   prints both backends on one line.
//! - `store/{redis_append_concurrent,redis_read_after}` (with feature `redis`): the same on
//!   `RedisEventStore` against a private `redis-server` on loopback (the test kit's), the
//!   appends from 50 concurrent tasks sharing the store's one pipelined connection. The
//!   summary's store line adds it.
//!
//! The measuring client is reqwest (hyper, as fast as HTTP clients in the dependency graph
//! get) feeding tether's own [`tether::sse::Decoder`], on its own current-thread runtime; the
//! server has its own multi-thread runtime. Every timed run checks that it saw exactly the
//! expected events with contiguous seqs of one stream and the final `counted 100000`, so a run
//! that lost events cannot look fast. Before timing, the events are checked message by message
//! with the test kit's raw HTTP reader (an independent client): first delivery and replay carry
//! the same messages.
//!
//! After the criterion groups a summary is printed from timed loops of its own (medians), so
//! the replay/first-delivery ratio, measured in one run on one machine, is there even when
//! criterion's numbers are noisy. Its last line is the client check: the same two streams read
//! without decoding (checked by body length and final result instead), the decoder alone on a
//! captured body, and the test kit's raw reader. When reading without decoding is much faster,
//! the decoding client, not the server, bounds the headline number (so far only for replay,
//! which makes the headline ratio a lower bound). Run with
//! `cargo bench -p tether --bench resume -- --warm-up-time 1 --measurement-time 3`.

use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use serde_json::{Value, json};
use tether::demo::DemoHandler;
use tether::proto::ids::{SessionId, StreamId};
use tether::server::{HEALTHZ_PATH, Server};
use tether::sse::{Decoder, Item};
use tether::store::{
    ANONYMOUS_PRINCIPAL, EventStore, MemoryEventStore, StoreLimits, Stores, StreamKind, StreamOwner,
};
use tether_testkit::raw::{PROTOCOL_VERSION, RawClient, Transcript};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// Progress events per `count` stream (the aim: "100 000 events stored").
const EVENTS: u64 = 100_000;

/// Events a session may retain: one 100 000-event stream plus its result, priming events and
/// the `initialize` stream. The default cap (100 000) would evict the oldest of them.
const SESSION_EVENT_CAP: usize = 250_000;

/// Bytes a session may retain: 100 000 progress frames are about 15 MB.
const SESSION_BYTE_CAP: usize = 256 * 1024 * 1024;

/// The progress token of every `count` call.
const TOKEN: &str = "bench";

/// Where the near-end resume starts: 10 progress events and the result remain after it.
const NEAR_END_SEQ: u64 = EVENTS - 10;

/// Events the writer reads per store round trip (the server's `READ_BATCH`).
const READ_BATCH: usize = 256;

/// Runs of each throughput scenario behind the summary's medians.
const SUMMARY_RUNS: usize = 5;

/// First-event latencies behind the summary's percentiles, per resume position.
const LATENCY_SAMPLES: usize = 200;

/// What one SSE response delivered, checked as it arrives: one stream, seqs contiguous from
/// the first expected one, and the last event's data (the JSON-RPC result).
#[derive(Debug)]
struct Tally {
    stream: String,
    next_seq: u64,
    events: u64,
    last_data: String,
    /// Body bytes fed.
    bytes: usize,
}

impl Tally {
    fn starting_at(seq: u64) -> Self {
        Self {
            stream: String::new(),
            next_seq: seq,
            events: 0,
            last_data: String::new(),
            bytes: 0,
        }
    }

    fn event(&mut self, event: tether::sse::Event) {
        let id = event.last_event_id();
        let (stream, seq) = id
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("event id {id:?} is not <stream>:<seq>"));
        if self.stream.is_empty() {
            stream.clone_into(&mut self.stream);
        } else {
            assert_eq!(stream, self.stream, "an event of another stream");
        }
        let seq: u64 = seq.parse().expect("seq is decimal");
        assert_eq!(seq, self.next_seq, "seqs must be contiguous");
        self.next_seq += 1;
        self.events += 1;
        self.last_data = event.into_data();
    }

    /// Feeds `bytes` and takes every event the decoder completed.
    fn feed(&mut self, decoder: &mut Decoder, bytes: &[u8]) {
        self.bytes += bytes.len();
        decoder.feed(bytes);
        while let Some(item) = decoder.next_item().expect("valid SSE") {
            if let Item::Event(event) = item {
                self.event(event);
            }
        }
    }

    /// Asserts a complete `count` stream: `events` events ending with seq `EVENTS + 1`, the
    /// result `counted EVENTS`.
    fn assert_count_result(&self, events: u64) {
        assert_eq!(self.events, events, "events received");
        assert_eq!(self.next_seq, EVENTS + 2, "last seq is the result's");
        assert!(
            self.last_data.contains(&format!("counted {EVENTS}")),
            "last event is the result: {}",
            self.last_data
        );
    }
}

/// A server on `127.0.0.1:0` with its own runtime, and a client runtime beside it.
struct Fixture {
    server_rt: Runtime,
    client_rt: Runtime,
    base: String,
    url: String,
    http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The session holding the stored 100 000-event stream that replays read.
    stored_session: String,
    /// That stream's id.
    stored_stream: String,
    /// Body lengths of the last checked first delivery and replay, for the client check.
    first_delivery_len: Cell<usize>,
    replay_len: Cell<usize>,
}

impl Fixture {
    fn start() -> Self {
        // reqwest is built with `rustls-no-provider`; plain http needs no TLS, but building a
        // client needs a provider installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server_rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("server")
            .build()
            .expect("server runtime");
        let client_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let (addr, shutdown, serving) = server_rt.block_on(async {
            let mut limits = StoreLimits::default();
            limits.max_events_per_session = SESSION_EVENT_CAP;
            limits.max_bytes_per_session = SESSION_BYTE_CAP;
            let server = Server::builder(Arc::new(DemoHandler::new()))
                .stores(Stores::memory(limits))
                .build()
                .await
                .expect("a server");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("local addr");
            let (tx, rx) = oneshot::channel::<()>();
            let serving = tokio::spawn(server.serve(listener, async move {
                let _ = rx.await;
            }));
            (addr, tx, serving)
        });
        let base = format!("http://{addr}");
        let url = format!("{base}{}", tether::server::DEFAULT_PATH);
        let http = client_rt.block_on(async {
            reqwest::Client::builder()
                .no_proxy()
                .http1_only()
                .tcp_nodelay(true)
                .build()
                .expect("reqwest client")
        });
        let mut fixture = Self {
            server_rt,
            client_rt,
            base,
            url,
            http,
            shutdown: Some(shutdown),
            serving: Some(serving),
            stored_session: String::new(),
            stored_stream: String::new(),
            first_delivery_len: Cell::new(0),
            replay_len: Cell::new(0),
        };
        fixture.store_and_verify();
        fixture
    }

    /// A new session, initialized with the raw reader.
    fn session(&self) -> RawClient {
        self.client_rt.block_on(async {
            let mut client = RawClient::new(&self.url).expect("url");
            let init = client.initialize().await.expect("initialize");
            assert_eq!(init.initialized.status, 202);
            client
        })
    }

    fn delete(&self, client: &RawClient) {
        self.client_rt.block_on(async {
            let t = client.delete_session().await.expect("delete");
            assert_eq!(t.status, 200);
        });
    }

    /// Runs `count` in the stored session and checks, message by message with the raw reader,
    /// both its first delivery and a replay of it; keeps the stream for the replays.
    fn store_and_verify(&mut self) {
        let mut client = self.session();
        let first = self.client_rt.block_on(async {
            let (id, response) = client
                .call_tool("count", json!({"n": EVENTS}), Some(json!(TOKEN)))
                .await
                .expect("count");
            assert_eq!(response.status(), 200);
            assert!(response.is_event_stream());
            let t = response.read_to_end().await.expect("count stream");
            assert_count_transcript(&t, id, 0);
            t
        });
        let stream = first.event_ids()[0]
            .rsplit_once(':')
            .expect("event id")
            .0
            .to_owned();
        let replay = self.client_rt.block_on(async {
            let response = client.resume(&format!("{stream}:0")).await.expect("resume");
            assert_eq!(response.status(), 200);
            response.read_to_end().await.expect("replay stream")
        });
        assert_eq!(
            messages(&replay),
            messages(&first)[..],
            "replay carries exactly the messages first delivered"
        );
        client
            .session_id()
            .expect("session id")
            .clone_into(&mut self.stored_session);
        self.stored_stream = stream;
    }

    fn post_count(&self, session: &str) -> reqwest::RequestBuilder {
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "count",
                "arguments": {"n": EVENTS, "interval_ms": 0},
                "_meta": {"progressToken": TOKEN},
            },
        });
        self.http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .header("Mcp-Session-Id", session)
            .body(body.to_string())
    }

    fn resume(&self, seq: u64) -> reqwest::RequestBuilder {
        self.http
            .get(&self.url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .header("Mcp-Session-Id", &self.stored_session)
            .header("Last-Event-ID", format!("{}:{seq}", self.stored_stream))
    }

    /// One first delivery in a fresh session (created and deleted untimed): time from sending
    /// the POST to the end of its body.
    fn first_delivery(&self) -> Duration {
        let client = self.session();
        let session = client.session_id().expect("session id").to_owned();
        let elapsed = self.client_rt.block_on(async {
            let start = Instant::now();
            let response = self.post_count(&session).send().await.expect("POST count");
            let tally = read_sse(response, Tally::starting_at(0)).await;
            let elapsed = start.elapsed();
            // Priming event, EVENTS progress events, the result.
            tally.assert_count_result(EVENTS + 2);
            self.first_delivery_len.set(tally.bytes);
            elapsed
        });
        self.delete(&client);
        elapsed
    }

    /// One replay of the stored stream from its start: time from sending the GET to the end
    /// of its body.
    fn replay(&self) -> Duration {
        self.client_rt.block_on(async {
            let start = Instant::now();
            let response = self.resume(0).send().await.expect("resume");
            let tally = read_sse(response, Tally::starting_at(1)).await;
            let elapsed = start.elapsed();
            tally.assert_count_result(EVENTS + 1);
            self.replay_len.set(tally.bytes);
            elapsed
        })
    }

    /// Time from sending a resume after `seq` to its first event decoded. The connection is
    /// opened first (a `/healthz` GET leaves it idle in the pool), so connecting is not timed.
    fn first_event(&self, seq: u64) -> Duration {
        self.client_rt.block_on(async {
            let healthz = self
                .http
                .get(format!("{}{HEALTHZ_PATH}", self.base))
                .send()
                .await
                .expect("healthz");
            healthz.bytes().await.expect("healthz body");
            let start = Instant::now();
            let mut response = self.resume(seq).send().await.expect("resume");
            assert_eq!(response.status(), 200);
            let mut decoder = Decoder::new();
            // Returning drops the response mid-body, which closes the connection: a cut.
            loop {
                let chunk = response
                    .chunk()
                    .await
                    .expect("body")
                    .expect("an event before the end");
                decoder.feed(&chunk);
                if let Some(Item::Event(event)) = decoder.next_item().expect("valid SSE") {
                    let elapsed = start.elapsed();
                    let expected = format!("{}:{}", self.stored_stream, seq + 1);
                    assert_eq!(event.last_event_id(), expected);
                    return elapsed;
                }
            }
        })
    }

    /// The raw reader (the test kit's) timing the same two streams, for the client check.
    fn raw_first_delivery(&self) -> Duration {
        let mut client = self.session();
        let elapsed = self.client_rt.block_on(async {
            let start = Instant::now();
            let (_, response) = client
                .call_tool("count", json!({"n": EVENTS}), Some(json!(TOKEN)))
                .await
                .expect("count");
            let t = response.read_to_end().await.expect("count stream");
            let elapsed = start.elapsed();
            assert_eq!(t.events().count() as u64, EVENTS + 2);
            elapsed
        });
        self.delete(&client);
        elapsed
    }

    fn raw_replay(&self) -> (Duration, Vec<u8>) {
        let mut client = RawClient::new(&self.url).expect("url");
        client.set_session_id(Some(self.stored_session.clone()));
        self.client_rt.block_on(async {
            let start = Instant::now();
            let response = client
                .resume(&format!("{}:0", self.stored_stream))
                .await
                .expect("resume");
            let t = response.read_to_end().await.expect("replay");
            let elapsed = start.elapsed();
            assert_eq!(t.events().count() as u64, EVENTS + 1);
            (elapsed, t.body)
        })
    }

    /// A first delivery read without decoding, checked by its length against a decoded and
    /// checked one (the body differs only in ids of equal length) and by its last bytes.
    fn bytes_only_first_delivery(&self) -> Duration {
        let client = self.session();
        let session = client.session_id().expect("session id").to_owned();
        let elapsed = self.client_rt.block_on(async {
            let start = Instant::now();
            let response = self.post_count(&session).send().await.expect("POST count");
            read_bytes(response, self.first_delivery_len.get()).await;
            start.elapsed()
        });
        self.delete(&client);
        elapsed
    }

    /// A replay read without decoding, checked as [`Self::bytes_only_first_delivery`] is.
    fn bytes_only_replay(&self) -> Duration {
        self.client_rt.block_on(async {
            let start = Instant::now();
            let response = self.resume(0).send().await.expect("resume");
            read_bytes(response, self.replay_len.get()).await;
            start.elapsed()
        })
    }

    fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(serving) = self.serving.take() {
            self.server_rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
            });
        }
    }
}

/// Reads an SSE response to its end through the decoder, checking every event.
async fn read_sse(mut response: reqwest::Response, mut tally: Tally) -> Tally {
    assert_eq!(response.status(), 200);
    let mut decoder = Decoder::new();
    while let Some(chunk) = response.chunk().await.expect("body") {
        tally.feed(&mut decoder, &chunk);
    }
    decoder.finish();
    tally.feed(&mut decoder, &[]);
    tally
}

/// Reads a `count` response to its end without decoding: the least client work per event.
/// Checks the length and that the body ends with the result.
async fn read_bytes(mut response: reqwest::Response, expected_len: usize) {
    assert_eq!(response.status(), 200);
    let mut len = 0;
    let mut tail = Vec::with_capacity(512);
    while let Some(chunk) = response.chunk().await.expect("body") {
        len += chunk.len();
        if tail.len() > 256 {
            tail.drain(..tail.len() - 256);
        }
        tail.extend_from_slice(&chunk[chunk.len().saturating_sub(256)..]);
    }
    assert_eq!(len, expected_len, "body length");
    let tail = String::from_utf8_lossy(&tail);
    assert!(
        tail.contains(&format!("counted {EVENTS}")),
        "body ends with the result"
    );
}

/// The JSON-RPC messages of a transcript, in order.
fn messages(t: &Transcript) -> Vec<Value> {
    t.messages()
        .expect("JSON events")
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// A first delivery of `count` as the raw reader saw it: priming event, progress 1..=EVENTS
/// with the token, the result `counted EVENTS`, ids `<stream>:0..=EVENTS + 1`.
fn assert_count_transcript(t: &Transcript, id: i64, first_seq: u64) {
    assert!(t.complete, "the response ended");
    let ids = t.event_ids();
    let stream = ids[0].rsplit_once(':').expect("event id").0;
    for (seq, event_id) in (first_seq..).zip(&ids) {
        assert_eq!(*event_id, format!("{stream}:{seq}"));
    }
    assert_eq!(ids.len() as u64, EVENTS + 2 - first_seq);
    let all = messages(t);
    assert_eq!(all.len() as u64, EVENTS + 1);
    for (i, message) in (1..).zip(&all[..all.len() - 1]) {
        assert_eq!(message["method"], "notifications/progress");
        assert_eq!(message["params"]["progressToken"], TOKEN);
        assert_eq!(message["params"]["progress"], json!(i));
    }
    let result = &all[all.len() - 1];
    assert_eq!(result["id"], id);
    assert_eq!(
        result["result"]["content"][0]["text"],
        format!("counted {EVENTS}")
    );
}

// ---------------------------------------------------------------------------------------------
// Store alone

/// `EVENTS` progress notifications as the server serializes them.
fn progress_messages() -> Vec<Vec<u8>> {
    (1..=EVENTS)
        .map(|i| {
            json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": TOKEN, "progress": i, "total": EVENTS},
            })
            .to_string()
            .into_bytes()
        })
        .collect()
}

fn store_config() -> StoreLimits {
    let mut config = StoreLimits::default();
    config.max_events_per_session = SESSION_EVENT_CAP;
    config.max_bytes_per_session = SESSION_BYTE_CAP;
    config
}

fn owner() -> StreamOwner {
    StreamOwner {
        principal: Arc::from(ANONYMOUS_PRINCIPAL),
        session: SessionId::generate(),
    }
}

/// Appends every message to a new stream of a new store; the time of the appends alone.
fn store_append(rt: &Runtime, messages: &[Vec<u8>]) -> Duration {
    rt.block_on(async {
        let store = MemoryEventStore::new(store_config());
        let owner = owner();
        let stream = store
            .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
            .await
            .expect("stream");
        let start = Instant::now();
        for message in messages {
            black_box(store.append(stream, message).await.expect("append"));
        }
        let elapsed = start.elapsed();
        assert_eq!(
            store.usage(&owner.session).await.expect("usage").events as u64,
            EVENTS + 1
        );
        elapsed
    })
}

/// Reads a completed 100 000-event stream after seq 0 in the writer's batch size.
fn store_read_all(rt: &Runtime, stored: &StoredStream) -> Duration {
    rt.block_on(timed_read_all(&stored.store, &stored.owner, stored.stream))
}

/// A completed stream of `EVENTS` progress events in a store of its own.
struct StoredStream {
    store: MemoryEventStore,
    owner: StreamOwner,
    stream: StreamId,
}

impl StoredStream {
    fn new(rt: &Runtime, messages: &[Vec<u8>]) -> Self {
        let store = MemoryEventStore::new(store_config());
        let owner = owner();
        let stream = rt.block_on(async {
            let stream = store
                .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
                .await
                .expect("stream");
            for message in messages {
                store.append(stream, message).await.expect("append");
            }
            store.complete(stream).await.expect("complete");
            stream
        });
        Self {
            store,
            owner,
            stream,
        }
    }
}

/// Concurrent appending tasks in the durable stores' append scenario, each on its own stream,
/// so that a backend's batching (SQLite's group commit, Redis's pipelining) shows.
#[cfg(any(feature = "sqlite", feature = "redis"))]
const APPENDERS: usize = 50;

/// `messages` appended to `store` by [`APPENDERS`] concurrent tasks, one new stream each;
/// returns the time of the appends alone and the streams' owners, after checking that every
/// append was stored.
#[cfg(any(feature = "sqlite", feature = "redis"))]
async fn timed_concurrent_appends<S: EventStore>(
    store: &Arc<S>,
    messages: &Arc<Vec<Vec<u8>>>,
) -> (Duration, Vec<StreamOwner>) {
    let per_task = messages.len() / APPENDERS;
    let mut streams = Vec::new();
    for _ in 0..APPENDERS {
        let owner = owner();
        let stream = store
            .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
            .await
            .expect("stream");
        streams.push((owner, stream));
    }
    let start = Instant::now();
    let tasks: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(task, (_, stream))| {
            let store = Arc::clone(store);
            let messages = Arc::clone(messages);
            let stream = *stream;
            tokio::spawn(async move {
                for message in &messages[task * per_task..(task + 1) * per_task] {
                    black_box(store.append(stream, message).await.expect("append"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("appender");
    }
    let elapsed = start.elapsed();
    let mut events = 0;
    for (owner, _) in &streams {
        events += store.usage(&owner.session).await.expect("usage").events;
    }
    assert_eq!(events as u64, EVENTS + APPENDERS as u64);
    (
        elapsed,
        streams.into_iter().map(|(owner, _)| owner).collect(),
    )
}

/// The time to read the completed `stream` after seq 0 in the writer's batch size, checking
/// every seq.
async fn timed_read_all<S: EventStore>(
    store: &S,
    owner: &StreamOwner,
    stream: StreamId,
) -> Duration {
    let start = Instant::now();
    let mut cursor = 0;
    let mut events = 0;
    loop {
        let batch = store
            .read_after(owner, stream, cursor, READ_BATCH)
            .await
            .expect("read");
        for event in &batch.events {
            assert_eq!(event.id.seq, cursor + 1);
            cursor = event.id.seq;
            black_box(&event.frame);
        }
        events += batch.events.len() as u64;
        if batch.complete {
            break;
        }
    }
    let elapsed = start.elapsed();
    assert_eq!(events, EVENTS);
    elapsed
}

/// The same store-alone scenarios on [`tether::store::SqliteEventStore`], on a temporary file:
/// appends from [`APPENDERS`] concurrent tasks (one stream each, so the writer
/// thread's group commit shares transactions between them), and reading a completed
/// `EVENTS`-event stream back in the writer's batch size.
#[cfg(feature = "sqlite")]
mod sqlite_store {
    use std::sync::Arc;
    use std::time::Duration;

    use tether::proto::ids::StreamId;
    use tether::store::sqlite::{self, SqliteStoreConfig};
    use tether::store::{EventStore, SqliteEventStore, StreamKind, StreamOwner};
    use tokio::runtime::Runtime;

    use super::{
        SESSION_BYTE_CAP, SESSION_EVENT_CAP, owner, timed_concurrent_appends, timed_read_all,
    };

    pub(super) struct SqliteBench {
        rt: Runtime,
        dir: tempfile::TempDir,
        /// The store holding the completed stream that reads replay.
        store: Arc<SqliteEventStore>,
        owner: StreamOwner,
        stream: StreamId,
    }

    fn open(dir: &std::path::Path, name: &str) -> SqliteEventStore {
        sqlite::open({
            let mut config = SqliteStoreConfig::new(dir.join(name));
            config.limits.max_events_per_session = SESSION_EVENT_CAP;
            config.limits.max_bytes_per_session = SESSION_BYTE_CAP;
            config
        })
        .expect("open sqlite store")
        .0
    }

    impl SqliteBench {
        pub(super) fn new(messages: &[Vec<u8>]) -> Self {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .expect("sqlite runtime");
            let dir = tempfile::TempDir::new().expect("temp dir");
            let store = Arc::new(open(dir.path(), "replay.db"));
            let owner = owner();
            let stream = rt.block_on(async {
                let stream = store
                    .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
                    .await
                    .expect("stream");
                // Filled concurrently in chunks, so setup does not take one commit per event.
                for chunk in messages.chunks(1000) {
                    let appends = chunk.iter().map(|message| store.append(stream, message));
                    for id in futures_util::future::join_all(appends).await {
                        id.expect("append");
                    }
                }
                store.complete(stream).await.expect("complete");
                stream
            });
            Self {
                rt,
                dir,
                store,
                owner,
                stream,
            }
        }

        /// `EVENTS` appends from `APPENDERS` tasks into a fresh database; the time of the
        /// appends alone.
        pub(super) fn append(&self, messages: &[Vec<u8>]) -> Duration {
            let _ = std::fs::remove_file(self.dir.path().join("append.db"));
            let _ = std::fs::remove_file(self.dir.path().join("append.db-wal"));
            let _ = std::fs::remove_file(self.dir.path().join("append.db-shm"));
            let store = Arc::new(open(self.dir.path(), "append.db"));
            let messages = Arc::new(messages.to_vec());
            let (elapsed, _) = self
                .rt
                .block_on(timed_concurrent_appends(&store, &messages));
            drop(store);
            elapsed
        }

        /// Reads the completed stream after seq 0 in the writer's batch size.
        pub(super) fn read_all(&self) -> Duration {
            self.rt
                .block_on(timed_read_all(&*self.store, &self.owner, self.stream))
        }
    }
}

/// The same store-alone scenarios on [`tether::store::RedisEventStore`], against a private
/// `redis-server` (test kit) on loopback: appends from [`APPENDERS`] concurrent
/// tasks (one stream each, sharing the store's one multiplexed connection, so commands are
/// pipelined), and reading a completed `EVENTS`-event stream back in the writer's batch size.
#[cfg(feature = "redis")]
mod redis_store {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use tether::proto::ids::StreamId;
    use tether::store::redis::{self, RedisStoreConfig};
    use tether::store::{EventStore, RedisEventStore, StreamKind, StreamOwner};
    use tether_testkit::redis::RedisServer;
    use tokio::runtime::Runtime;

    use super::{
        SESSION_BYTE_CAP, SESSION_EVENT_CAP, owner, timed_concurrent_appends, timed_read_all,
    };

    pub(super) struct RedisBench {
        rt: Runtime,
        /// Kept running (and reaped on drop) for the whole bench.
        server: RedisServer,
        /// The store holding the completed stream that reads replay.
        store: Arc<RedisEventStore>,
        owner: StreamOwner,
        stream: StreamId,
        runs: AtomicU64,
    }

    async fn open(url: &str, prefix: &str) -> RedisEventStore {
        redis::open({
            let mut config = RedisStoreConfig::new(url);
            config.key_prefix = prefix.to_owned();
            config.limits.max_events_per_session = SESSION_EVENT_CAP;
            config.limits.max_bytes_per_session = SESSION_BYTE_CAP;
            config
        })
        .await
        .expect("open redis store")
        .0
    }

    impl RedisBench {
        pub(super) fn new(messages: &[Vec<u8>]) -> Self {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("redis runtime");
            let (server, store, owner, stream) = rt.block_on(async {
                let server = RedisServer::start().await.expect("start redis-server");
                let store = Arc::new(open(&server.url(), "bench-replay:").await);
                let owner = owner();
                let stream = store
                    .create_stream(&owner, StreamKind::Request, Duration::from_secs(1), &[])
                    .await
                    .expect("stream");
                for message in messages {
                    store.append(stream, message).await.expect("append");
                }
                store.complete(stream).await.expect("complete");
                (server, store, owner, stream)
            });
            Self {
                rt,
                server,
                store,
                owner,
                stream,
                runs: AtomicU64::new(0),
            }
        }

        /// `EVENTS` appends from `APPENDERS` tasks under a fresh key prefix; the time of the
        /// appends alone. The run's sessions are removed afterwards, so Redis's memory stays
        /// flat over many runs.
        pub(super) fn append(&self, messages: &[Vec<u8>]) -> Duration {
            let run = self.runs.fetch_add(1, Ordering::Relaxed);
            let messages = Arc::new(messages.to_vec());
            self.rt.block_on(async {
                let store =
                    Arc::new(open(&self.server.url(), &format!("bench-append-{run}:")).await);
                let (elapsed, owners) = timed_concurrent_appends(&store, &messages).await;
                for owner in owners {
                    store
                        .remove_session(&owner.session)
                        .await
                        .expect("remove_session");
                }
                elapsed
            })
        }

        /// Reads the completed stream after seq 0 in the writer's batch size.
        pub(super) fn read_all(&self) -> Duration {
            self.rt
                .block_on(timed_read_all(&*self.store, &self.owner, self.stream))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// The `pct`th percentile (nearest rank below).
fn percentile(samples: &mut [Duration], pct: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() - 1) * pct / 100]
}

#[allow(clippy::cast_precision_loss)] // event counts are far below 2^52
fn per_second(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Feeds a captured body through the decoder and tally in socket-sized pieces: the client's
/// own cost per replay, with no I/O.
fn decode_only(body: &[u8]) -> Duration {
    let start = Instant::now();
    let mut decoder = Decoder::new();
    let mut tally = Tally::starting_at(1);
    for piece in body.chunks(16 * 1024) {
        tally.feed(&mut decoder, piece);
    }
    decoder.finish();
    tally.feed(&mut decoder, &[]);
    let elapsed = start.elapsed();
    tally.assert_count_result(EVENTS + 1);
    elapsed
}

/// The store-alone scenarios' runtime and data.
struct StoreBench {
    rt: Runtime,
    messages: Vec<Vec<u8>>,
    stored: StoredStream,
    #[cfg(feature = "sqlite")]
    sqlite: sqlite_store::SqliteBench,
    #[cfg(feature = "redis")]
    redis: redis_store::RedisBench,
}

impl StoreBench {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("store runtime");
        let messages = progress_messages();
        let stored = StoredStream::new(&rt, &messages);
        #[cfg(feature = "sqlite")]
        let sqlite = sqlite_store::SqliteBench::new(&messages);
        #[cfg(feature = "redis")]
        let redis = redis_store::RedisBench::new(&messages);
        Self {
            rt,
            messages,
            stored,
            #[cfg(feature = "sqlite")]
            sqlite,
            #[cfg(feature = "redis")]
            redis,
        }
    }

    fn append(&self) -> Duration {
        store_append(&self.rt, &self.messages)
    }

    fn read_all(&self) -> Duration {
        store_read_all(&self.rt, &self.stored)
    }
}

fn criterion_groups(criterion: &mut Criterion, fixture: &Fixture, store: &StoreBench) {
    let mut group = criterion.benchmark_group("store");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("append", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| store.append()).sum());
    });
    group.bench_function("read_after", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| store.read_all()).sum());
    });
    #[cfg(feature = "sqlite")]
    {
        group.bench_function("sqlite_append_concurrent", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| store.sqlite.append(&store.messages))
                    .sum()
            });
        });
        group.bench_function("sqlite_read_after", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| store.sqlite.read_all()).sum());
        });
    }
    #[cfg(feature = "redis")]
    {
        group.bench_function("redis_append_concurrent", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| store.redis.append(&store.messages))
                    .sum()
            });
        });
        group.bench_function("redis_read_after", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| store.redis.read_all()).sum());
        });
    }
    group.finish();

    let mut group = criterion.benchmark_group("http");
    group.throughput(Throughput::Elements(EVENTS));
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("first_delivery", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| fixture.first_delivery()).sum());
    });
    group.bench_function("replay_from_start", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| fixture.replay()).sum());
    });
    group.finish();

    let mut group = criterion.benchmark_group("first_replayed_event");
    group.sample_size(20);
    group.bench_function("near_start", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| fixture.first_event(0)).sum());
    });
    group.bench_function("near_end", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| fixture.first_event(NEAR_END_SEQ)).sum());
    });
    group.finish();
}

/// The median of `runs` runs of `f`.
fn median_of(runs: usize, f: impl FnMut(usize) -> Duration) -> Duration {
    median((0..runs).map(f).collect())
}

/// The summary, from loops of its own: medians of whole runs, percentiles of latencies.
fn print_summary(fixture: &Fixture, store: &StoreBench) {
    let first = median_of(SUMMARY_RUNS, |_| fixture.first_delivery());
    let replay = median_of(SUMMARY_RUNS, |_| fixture.replay());
    let mut near_start: Vec<Duration> = (0..LATENCY_SAMPLES)
        .map(|_| fixture.first_event(0))
        .collect();
    let mut near_end: Vec<Duration> = (0..LATENCY_SAMPLES)
        .map(|_| fixture.first_event(NEAR_END_SEQ))
        .collect();
    let append = median_of(SUMMARY_RUNS, |_| store.append());
    let read = median_of(SUMMARY_RUNS, |_| store.read_all());
    // The client check. The bytes-only reads compare lengths with the decoded runs above.
    let bytes_first = median_of(SUMMARY_RUNS, |_| fixture.bytes_only_first_delivery());
    let bytes_replay = median_of(SUMMARY_RUNS, |_| fixture.bytes_only_replay());
    let raw_first = median_of(3, |_| fixture.raw_first_delivery());
    let (raw_replays, bodies): (Vec<_>, Vec<_>) = (0..3).map(|_| fixture.raw_replay()).unzip();
    let raw_replay = median(raw_replays);
    let decode = median_of(SUMMARY_RUNS, |_| decode_only(&bodies[0]));

    let first_rate = per_second(EVENTS, first);
    let replay_rate = per_second(EVENTS, replay);
    let bytes_first_rate = per_second(EVENTS, bytes_first);
    let bytes_replay_rate = per_second(EVENTS, bytes_replay);
    println!();
    println!(
        "summary (medians of {SUMMARY_RUNS} runs; latency over {LATENCY_SAMPLES} resumes each):"
    );
    println!(
        "first delivery: {first_rate:.0} events/s | replay: {replay_rate:.0} events/s | ratio replay/first {:.2}x | first replayed event p50 {:.3} ms (at {EVENTS} stored)",
        replay_rate / first_rate,
        ms(percentile(&mut near_start, 50)),
    );
    println!(
        "first replayed event: near start p50 {:.3} ms p90 {:.3} ms p99 {:.3} ms | near end p50 {:.3} ms p90 {:.3} ms p99 {:.3} ms",
        ms(percentile(&mut near_start, 50)),
        ms(percentile(&mut near_start, 90)),
        ms(percentile(&mut near_start, 99)),
        ms(percentile(&mut near_end, 50)),
        ms(percentile(&mut near_end, 90)),
        ms(percentile(&mut near_end, 99)),
    );
    #[allow(unused_mut)]
    let mut store_line = format!(
        "store memory: append {:.0}/s read {:.0}/s",
        per_second(EVENTS, append),
        per_second(EVENTS, read),
    );
    #[cfg(feature = "sqlite")]
    {
        let append = median_of(SUMMARY_RUNS, |_| store.sqlite.append(&store.messages));
        let read = median_of(SUMMARY_RUNS, |_| store.sqlite.read_all());
        store_line.push_str(&format!(
            " | store sqlite: append {:.0}/s (concurrent, group commit) read {:.0}/s",
            per_second(EVENTS, append),
            per_second(EVENTS, read),
        ));
    }
    #[cfg(feature = "redis")]
    {
        let append = median_of(SUMMARY_RUNS, |_| store.redis.append(&store.messages));
        let read = median_of(SUMMARY_RUNS, |_| store.redis.read_all());
        store_line.push_str(&format!(
            " | store redis: append {:.0}/s (concurrent, {} tasks) read {:.0}/s",
            per_second(EVENTS, append),
            APPENDERS,
            per_second(EVENTS, read),
        ));
    }
    println!("{store_line}");
    println!(
        "client check, read without decoding: first delivery {bytes_first_rate:.0} events/s | replay {bytes_replay_rate:.0} events/s | ratio {:.2}x | decoder alone {:.0} events/s | test-kit raw reader: first delivery {:.0} events/s, replay {:.0} events/s",
        bytes_replay_rate / bytes_first_rate,
        per_second(EVENTS, decode),
        per_second(EVENTS, raw_first),
        per_second(EVENTS, raw_replay),
    );
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let fixture = Fixture::start();
    // Near-end resume: exactly the 10 last progress events and the result.
    fixture.client_rt.block_on(async {
        let response = fixture.resume(NEAR_END_SEQ).send().await.expect("resume");
        let tally = read_sse(response, Tally::starting_at(NEAR_END_SEQ + 1)).await;
        tally.assert_count_result(11);
    });
    let store = StoreBench::new();
    criterion_groups(&mut criterion, &fixture, &store);
    criterion.final_summary();
    print_summary(&fixture, &store);
    fixture.stop();
}
