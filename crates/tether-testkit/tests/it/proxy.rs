//! The fault proxy, seen from a raw TCP client: each test starts a small upstream on
//! `127.0.0.1:0` that writes a known byte pattern or known SSE events, puts the proxy between
//! it and a tokio client, and asserts on the bytes, EOFs, resets and silences the client sees,
//! and on the counters that resume tests rely on to prove a fault really happened.

use std::io;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tether_testkit::proxy::{
    ByteFault, FaultEvent, FaultKind, FaultPlan, FaultProxy, ProxyConfig, ProxyError, SlowFault,
    TruncateFault,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Longest a connection may take to end before a test gives up on it.
const END_WITHIN: Duration = Duration::from_secs(5);

/// The `i`-th byte of the pattern upstream: a period (251) that no power-of-two buffer size
/// aligns with, so a dropped or repeated chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Serves `body` to every connection, then closes.
async fn upstream_writing(body: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                // The proxy may close first (that is the fault); the error is expected.
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// Echoes every byte back, and closes when the client half-closes.
async fn upstream_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// `count` SSE events shaped like tether's, with `nl` as the line terminator.
fn sse_events(count: usize, nl: &str) -> Vec<String> {
    (1..=count)
        .map(|i| {
            format!(
                "event: message{nl}id: s:{i}{nl}data: {{\"jsonrpc\":\"2.0\",\"method\":\
                 \"notifications/progress\",\"params\":{{\"progress\":{i}}}}}{nl}{nl}"
            )
        })
        .collect()
}

/// The part of `event` a truncating proxy lets through: up to the middle of its data line.
fn partial(event: &str, nl: &str) -> String {
    let start = event.find("data:").unwrap();
    let line_len = event[start..].find(nl).unwrap();
    event[..start + line_len / 2].to_owned()
}

/// How a connection ended, from the client's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Eof,
    Reset,
}

/// Reads until EOF or an error; panics if neither comes within [`END_WITHIN`].
async fn read_all(stream: &mut TcpStream) -> (Vec<u8>, Ending) {
    let mut out = Vec::new();
    let ending = timeout(END_WITHIN, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ending::Eof,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ending::Reset,
                Err(e) => panic!("unexpected read error: {e}"),
            }
        }
    })
    .await
    .expect("the connection neither ended nor failed in time");
    (out, ending)
}

/// Connects through the proxy and reads everything.
async fn fetch(proxy: &FaultProxy) -> (Vec<u8>, Ending) {
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    read_all(&mut stream).await
}

async fn start(upstream: SocketAddr, plan: FaultPlan, seed: u64) -> FaultProxy {
    FaultProxy::start_with(ProxyConfig {
        plan,
        seed: Some(seed),
        ..ProxyConfig::new(upstream)
    })
    .await
    .unwrap()
}

fn event(conn: u64, kind: FaultKind, at_byte: u64, detail: u64) -> FaultEvent {
    FaultEvent {
        conn,
        kind,
        at_byte,
        detail,
    }
}

#[tokio::test]
async fn cut_delivers_exactly_n_bytes_then_a_clean_eof() {
    let body = pattern(10_000);
    let proxy = FaultProxy::start(
        upstream_writing(body.clone()).await,
        FaultPlan::cut_after(1000),
    )
    .await
    .unwrap();

    let (got, ending) = fetch(&proxy).await;

    assert_eq!(ending, Ending::Eof, "{}", proxy.report());
    assert_eq!(got, body[..1000], "{}", proxy.report());
    assert_eq!(proxy.fault_log(), [event(1, FaultKind::Cut, 1000, 0)]);
    let counters = proxy.shutdown().await;
    assert_eq!((counters.accepted, counters.cuts), (1, 1));
    assert_eq!((counters.resets, counters.truncations), (0, 0));
    assert_eq!(counters.bytes_to_client, 1000);
}

#[tokio::test]
async fn cut_jitter_stays_in_bounds_and_replays_by_seed() {
    let body = pattern(5000);
    let upstream = upstream_writing(body.clone()).await;
    let plan = FaultPlan::default().with_cut(ByteFault::after(1000).with_jitter(200));

    let mut runs = Vec::new();
    for _ in 0..2 {
        let proxy = start(upstream, plan.clone(), 42).await;
        let mut lengths = Vec::new();
        for _ in 0..8 {
            let (got, ending) = fetch(&proxy).await;
            assert_eq!(ending, Ending::Eof);
            assert_eq!(got, body[..got.len()], "bytes are forwarded unchanged");
            assert!((800..=1200).contains(&got.len()), "{}", proxy.report());
            lengths.push(got.len() as u64);
        }
        let logged: Vec<u64> = proxy.fault_log().iter().map(|e| e.at_byte).collect();
        assert_eq!(logged, lengths, "the log records where each cut happened");
        assert_eq!(proxy.counters().cuts, 8);
        runs.push(lengths);
    }
    assert_eq!(runs[0], runs[1], "seed 42 replays the same offsets");
    assert!(
        runs[0].iter().any(|&l| l != runs[0][0]),
        "jitter varies the offset: {:?}",
        runs[0]
    );
}

#[tokio::test]
async fn reset_gives_the_client_a_connection_reset() {
    let body = pattern(10_000);
    let proxy = FaultProxy::start(
        upstream_writing(body.clone()).await,
        FaultPlan::default().with_reset(ByteFault::after(500)),
    )
    .await
    .unwrap();

    let (got, ending) = fetch(&proxy).await;

    assert_eq!(ending, Ending::Reset, "{}", proxy.report());
    assert_eq!(got, body[..500]);
    let counters = proxy.counters();
    assert_eq!((counters.resets, counters.cuts), (1, 0));
    assert_eq!(counters.bytes_to_client, 500);
    assert_eq!(proxy.fault_log(), [event(1, FaultKind::Reset, 500, 0)]);
}

#[tokio::test]
async fn stall_stops_the_bytes_but_keeps_the_connection_open() {
    let body = pattern(100_000);
    let proxy = FaultProxy::start(
        upstream_writing(body.clone()).await,
        FaultPlan::default().with_stall(ByteFault::after(700), None),
    )
    .await
    .unwrap();
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();

    let mut got = vec![0u8; 700];
    timeout(END_WITHIN, client.read_exact(&mut got))
        .await
        .expect("the first 700 bytes arrive")
        .unwrap();
    assert_eq!(got, body[..700]);
    // Neither EOF nor more bytes: a read just waits, twice over.
    let mut one = [0u8; 1];
    for _ in 0..2 {
        let read = timeout(Duration::from_millis(300), client.read(&mut one)).await;
        assert!(read.is_err(), "read returned {read:?} during a stall");
    }
    let counters = proxy.counters();
    assert_eq!((counters.stalls, counters.active), (1, 1));
    assert_eq!(counters.bytes_to_client, 700);

    // Dropping the proxy ends the held connection.
    drop(proxy);
    let (rest, _) = read_all(&mut client).await;
    assert!(rest.is_empty(), "no byte resumes after a stall");
}

#[tokio::test]
async fn stall_with_a_hold_closes_after_it() {
    let proxy = FaultProxy::start(
        upstream_writing(pattern(100_000)).await,
        FaultPlan::default().with_stall(ByteFault::after(10), Some(Duration::from_millis(200))),
    )
    .await
    .unwrap();
    let started = Instant::now();

    let (got, ending) = fetch(&proxy).await;

    assert_eq!((got.len(), ending), (10, Ending::Eof));
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(proxy.wait_idle(END_WITHIN).await);
    assert_eq!(proxy.counters().stalls, 1);
}

#[tokio::test]
async fn slow_paces_the_server_to_client_bytes() {
    let body = pattern(10_000);
    let proxy = FaultProxy::start(
        upstream_writing(body.clone()).await,
        FaultPlan::default().with_slow(SlowFault::rate(20_000)),
    )
    .await
    .unwrap();
    let started = Instant::now();

    let (got, ending) = fetch(&proxy).await;

    assert_eq!((ending, got == body), (Ending::Eof, true));
    // 10 000 bytes at 20 000 B/s is 500 ms; assert half of it, never an upper bound.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250),
        "took only {elapsed:?}"
    );
    assert_eq!(proxy.counters().slowed, 1);
    assert_eq!(proxy.fault_log(), [event(1, FaultKind::Slow, 0, 20_000)]);
}

#[tokio::test]
async fn refusal_window_refuses_then_lets_connections_through() {
    let body = pattern(2000);
    let proxy = FaultProxy::start(upstream_writing(body.clone()).await, FaultPlan::default())
        .await
        .unwrap();
    let window = Duration::from_millis(800);
    let ends = Instant::now() + window;
    proxy.refuse_for(window);

    let (got, _) = fetch(&proxy).await;
    assert!(got.is_empty(), "a refused connection carries no bytes");
    assert_eq!(proxy.counters().refused, 1);

    tokio::time::sleep_until((ends + Duration::from_millis(50)).into()).await;
    let (got, ending) = fetch(&proxy).await;
    assert_eq!(
        (ending, got == body),
        (Ending::Eof, true),
        "{}",
        proxy.report()
    );
    let counters = proxy.counters();
    assert_eq!((counters.refused, counters.accepted), (1, 1));
}

#[tokio::test]
async fn refuse_next_refuses_exactly_that_many() {
    let body = pattern(300);
    let proxy = FaultProxy::start(upstream_writing(body.clone()).await, FaultPlan::default())
        .await
        .unwrap();
    proxy.refuse_next(2);

    for _ in 0..2 {
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (got, ending) = read_all(&mut client).await;
        assert!(got.is_empty());
        // The proxy resets a refused connection; an EOF is as good a refusal to a client.
        assert!(matches!(ending, Ending::Reset | Ending::Eof));
    }
    assert_eq!(fetch(&proxy).await, (body, Ending::Eof));
    assert_eq!(
        proxy.fault_log(),
        [
            event(1, FaultKind::Refuse, 0, 0),
            event(2, FaultKind::Refuse, 0, 0)
        ]
    );
    assert_eq!(
        (proxy.counters().refused, proxy.counters().accepted),
        (2, 1)
    );
}

#[tokio::test]
async fn truncate_leaves_k_complete_events_and_a_partial_one() {
    for (nl, keep) in [("\n", 5), ("\r\n", 3)] {
        let events = sse_events(100, nl);
        let proxy = FaultProxy::start(
            upstream_writing(events.concat().into_bytes()).await,
            FaultPlan::default().with_truncate(TruncateFault::after_events(keep)),
        )
        .await
        .unwrap();

        let (got, ending) = fetch(&proxy).await;

        let keep = keep as usize;
        let expected = events[..keep].concat() + &partial(&events[keep], nl);
        assert_eq!(ending, Ending::Eof);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            expected,
            "{}",
            proxy.report()
        );
        let blank = format!("{nl}{nl}");
        assert_eq!(
            expected.matches(&blank).count(),
            keep,
            "the last one is partial"
        );
        assert_eq!(proxy.counters().truncations, 1);
        assert_eq!(
            proxy.fault_log(),
            [event(
                1,
                FaultKind::Truncate,
                expected.len() as u64,
                keep as u64
            )]
        );
    }
}

#[tokio::test]
async fn truncate_follows_chunked_http_responses() {
    let events = sse_events(10, "\n");
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                transfer-encoding: chunked\r\n\r\n";
    let chunk = |e: &String| format!("{:x}\r\n{e}\r\n", e.len());
    let raw = head.to_owned() + &events.iter().map(chunk).collect::<String>() + "0\r\n\r\n";
    let proxy = FaultProxy::start(
        upstream_writing(raw.into_bytes()).await,
        FaultPlan::default().with_truncate(TruncateFault::after_events(2)),
    )
    .await
    .unwrap();

    let (got, ending) = fetch(&proxy).await;

    let expected = head.to_owned()
        + &chunk(&events[0])
        + &chunk(&events[1])
        + &format!("{:x}\r\n", events[2].len())
        + &partial(&events[2], "\n");
    assert_eq!(ending, Ending::Eof);
    assert_eq!(String::from_utf8(got).unwrap(), expected);
    assert_eq!(proxy.counters().truncations, 1);
}

#[tokio::test]
async fn max_cuts_cuts_that_many_then_passes_through() {
    let body = pattern(1000);
    let proxy = FaultProxy::start(
        upstream_writing(body.clone()).await,
        FaultPlan::default().with_cut(ByteFault::after(100).at_most(2)),
    )
    .await
    .unwrap();

    for _ in 0..2 {
        assert_eq!(fetch(&proxy).await, (body[..100].to_vec(), Ending::Eof));
    }
    assert_eq!(fetch(&proxy).await, (body, Ending::Eof));
    let counters = proxy.counters();
    assert_eq!((counters.accepted, counters.cuts), (3, 2));
    assert_eq!(counters.bytes_to_client, 1200);
}

#[tokio::test]
async fn same_seed_gives_the_same_fault_log() {
    let upstream = upstream_writing(sse_events(100, "\n").concat().into_bytes()).await;
    let plan = FaultPlan::default()
        .with_cut(ByteFault::after(400).with_jitter(150).with_probability(0.7))
        .with_reset(ByteFault::after(300).with_jitter(100).with_probability(0.7))
        .with_truncate(
            TruncateFault::after_events(2)
                .with_jitter(1)
                .with_probability(0.7),
        );

    let plan = &plan;
    let run = |seed| async move {
        let proxy = start(upstream, plan.clone(), seed).await;
        let mut seen = Vec::new();
        for _ in 0..12 {
            let (got, ending) = fetch(&proxy).await;
            seen.push((got.len(), ending));
        }
        let log = proxy.fault_log();
        let counters = proxy.counters();
        let faults = counters.cuts + counters.resets + counters.truncations;
        assert_eq!(faults, log.len() as u64, "{}", proxy.report());
        (log, seen)
    };
    let (log, seen) = run(7).await;
    assert!(
        !log.is_empty() && log.len() < 12,
        "some connections pass: {log:?}"
    );
    assert_eq!(run(7).await, (log.clone(), seen), "a seed replays");
    assert_ne!(run(8).await.0, log, "another seed draws differently");
}

#[tokio::test]
async fn pass_through_is_byte_exact_both_ways() {
    let proxy = FaultProxy::start(upstream_echo().await, FaultPlan::pass_through())
        .await
        .unwrap();
    let sent = pattern(200_000);
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    let (mut r, mut w) = client.split();
    let write = async {
        w.write_all(&sent).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    let read = async { timeout(END_WITHIN, r.read_to_end(&mut got)).await };
    let ((), read) = tokio::join!(write, read);
    read.expect("the echo ends").unwrap();

    assert_eq!(got, sent);
    assert!(proxy.wait_idle(END_WITHIN).await);
    let counters = proxy.counters();
    assert_eq!(
        (counters.bytes_to_server, counters.bytes_to_client),
        (200_000, 200_000)
    );
    assert_eq!((counters.accepted, counters.active), (1, 0));
    assert!(proxy.fault_log().is_empty());
}

#[tokio::test]
async fn unreachable_upstream_resets_the_client() {
    // A port that was just free: nothing listens there now.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = dead.local_addr().unwrap();
    drop(dead);
    let proxy = FaultProxy::start(upstream, FaultPlan::cut_after(5))
        .await
        .unwrap();

    let (got, ending) = fetch(&proxy).await;

    assert_eq!((got.len(), ending), (0, Ending::Reset));
    let counters = proxy.counters();
    assert_eq!((counters.upstream_failures, counters.cuts), (1, 0));
}

#[tokio::test]
async fn non_loopback_addresses_are_rejected() {
    let lan: SocketAddr = "192.0.2.1:80".parse().unwrap();
    let err = FaultProxy::start(lan, FaultPlan::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProxyError::NotLoopback {
                role: "upstream",
                ..
            }
        ),
        "{err}"
    );

    let config = ProxyConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..ProxyConfig::new("127.0.0.1:9".parse().unwrap())
    };
    let err = FaultProxy::start_with(config).await.unwrap_err();
    assert!(
        matches!(err, ProxyError::NotLoopback { role: "listen", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn binary_cuts_and_prints_counters_on_stdin_close() {
    let body = pattern(1000);
    let upstream = upstream_writing(body.clone()).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tether-fault-proxy"))
        .args(["--upstream", &upstream.to_string(), "--seed", "9"])
        .args(["--cut-after-bytes", "100", "--max-cuts", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = timeout(END_WITHIN, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr: SocketAddr = ready
        .strip_prefix("tether-fault-proxy: listening on ")
        .unwrap_or_else(|| panic!("unexpected ready line {ready:?}"))
        .parse()
        .unwrap();

    for expected in [&body[..100], &body[..]] {
        let mut client = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            read_all(&mut client).await,
            (expected.to_vec(), Ending::Eof)
        );
    }
    drop(child.stdin.take());
    let json = timeout(END_WITHIN, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let status = timeout(END_WITHIN, child.wait()).await.unwrap().unwrap();

    assert!(status.success());
    let counters: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(counters["seed"], 9);
    assert_eq!(counters["accepted"], 2);
    assert_eq!(counters["cuts"], 1);
    assert_eq!(counters["bytes_to_client"], 1100);
}

#[tokio::test]
async fn binary_rejects_a_non_loopback_upstream() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_tether-fault-proxy"))
        .args(["--upstream", "192.0.2.1:80"])
        .stdin(Stdio::null())
        .output();
    let output = timeout(END_WITHIN, output).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not loopback"), "{stderr}");
}
