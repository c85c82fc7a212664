//! Forwards one connection and carries out the faults assigned to it.
//!
//! It owns the two copy loops (client→server plain, server→client with the byte limit, the
//! pacing and the SSE truncation point), and how each ending looks on the wire: a clean close
//! that really is a FIN, a reset that really is an RST, a stall that keeps both sockets open. It
//! does not decide which faults a connection gets (`plan`) or where an SSE event ends (`scan`).

use std::future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::plan::{Assignment, Ending};
use super::scan::SseScanner;
use super::{
    ActiveGuard, CLOSE_DRAIN, CONNECT_TIMEOUT, FaultEvent, FaultKind, HOLD_LIMIT, READ_BUF, Shared,
};

/// Closes `stream` with an RST: `SO_LINGER` 0 makes `close` abort the connection.
pub(super) fn reset(stream: TcpStream) {
    // If setting the option fails the close is a FIN; the client still sees the connection end.
    let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// How the server→client loop ended.
enum End {
    /// The upstream closed; the FIN was passed on and everything held was forwarded.
    UpstreamEof,
    /// Reading the upstream failed (it reset).
    UpstreamError,
    /// Writing to the client failed, or the client→server direction failed.
    Broken,
    /// The assigned ending fault is due now: the client has `at_byte` bytes.
    Fired { at_byte: u64, events: u64 },
    /// The test asked for every open connection to be cut.
    CutNow,
}

/// Forwards `client` to the upstream until one side ends or the assigned fault fires.
pub(super) async fn serve(
    guard: ActiveGuard,
    mut client: TcpStream,
    conn: u64,
    assignment: Assignment,
) {
    let shared = Arc::clone(&guard.0);
    let mut upstream = match timeout(CONNECT_TIMEOUT, TcpStream::connect(shared.upstream)).await {
        Ok(Ok(upstream)) => upstream,
        _ => {
            shared
                .counters
                .upstream_failures
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            shared.release(&assignment);
            reset(client);
            return;
        }
    };
    // Small SSE frames should reach the client when written, not when Nagle allows.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);

    let end = {
        let (mut client_read, mut client_write) = client.split();
        let (mut upstream_read, mut upstream_write) = upstream.split();
        let down = server_to_client(&mut upstream_read, &mut client_write, &shared, &assignment);
        let up = client_to_server(&mut client_read, &mut upstream_write, &shared);
        tokio::pin!(down, up);
        let mut up_done = false;
        let mut cut_now = shared.cut_now.subscribe();
        cut_now.mark_unchanged();
        let end = loop {
            tokio::select! {
                end = &mut down => break end,
                Ok(()) = cut_now.changed() => break End::CutNow,
                result = &mut up, if !up_done => match result {
                    // The client half-closed; keep forwarding to it.
                    Ok(()) => up_done = true,
                    Err(_) => break End::Broken,
                },
            }
        };
        if matches!(end, End::UpstreamEof) && !up_done {
            // The server finished; the client closes its side when it has read everything.
            let _ = up.await;
        }
        end
    };

    match (end, assignment.ending) {
        (End::Fired { at_byte, events }, Some(ending)) => {
            // Counted before the client can see the fault, so a test that saw it can assert.
            shared.record(FaultEvent {
                conn,
                kind: ending.kind(),
                at_byte,
                detail: if matches!(ending, Ending::Truncate { .. }) {
                    events
                } else {
                    0
                },
            });
            match ending {
                Ending::Cut { .. } | Ending::Truncate { .. } => {
                    close_cleanly(client, upstream).await;
                }
                Ending::Reset { .. } => {
                    reset(client);
                    drop(upstream);
                }
                Ending::Stall { hold, .. } => {
                    // Neither socket is read or written: the path is dead but nobody is told.
                    match hold {
                        Some(hold) => sleep(hold).await,
                        None => future::pending().await,
                    }
                    close_cleanly(client, upstream).await;
                }
            }
        }
        (End::CutNow, _) => {
            shared.release(&assignment);
            shared.record(FaultEvent {
                conn,
                kind: FaultKind::Cut,
                at_byte: 0,
                detail: 0,
            });
            close_cleanly(client, upstream).await;
        }
        (End::UpstreamError, _) => {
            shared.release(&assignment);
            // Mirror the server's reset so the client sees what it would have seen directly.
            reset(client);
        }
        _ => shared.release(&assignment),
    }
    drop(guard);
}

/// Sends FIN both ways, then reads and discards client input until the client closes (bounded
/// by [`CLOSE_DRAIN`]), because closing with unread input would send RST instead.
async fn close_cleanly(mut client: TcpStream, mut upstream: TcpStream) {
    let _ = timeout(CLOSE_DRAIN, upstream.shutdown()).await;
    drop(upstream);
    let _ = timeout(CLOSE_DRAIN, async {
        client.shutdown().await?;
        let mut sink = [0u8; 1024];
        while client.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    })
    .await;
}

/// Copies client bytes to the upstream; on client EOF passes the half-close on.
async fn client_to_server(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    shared: &Shared,
) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        shared.add_bytes(false, n);
    }
}

/// Copies upstream bytes to the client until EOF, an error, or the assigned ending fault's
/// offset.
///
/// Bytes wait in `pending` only while the SSE scanner holds back a line that may be cut, or
/// until the pacer lets them go; reads are sized so `pending` stays within
/// [`HOLD_LIMIT`] + [`READ_BUF`].
async fn server_to_client(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    shared: &Shared,
    assignment: &Assignment,
) -> End {
    let limit = match assignment.ending {
        Some(Ending::Cut { at } | Ending::Reset { at } | Ending::Stall { at, .. }) => Some(at),
        _ => None,
    };
    let mut scanner = match assignment.ending {
        Some(Ending::Truncate { after_events }) => Some(SseScanner::new(after_events)),
        _ => None,
    };
    let mut pacer = assignment.slow.map(Pacer::new);
    let mut buf = vec![0u8; READ_BUF];
    let mut pending: Vec<u8> = Vec::new();
    // Bytes the client has been sent; `pending` starts at this offset.
    let mut sent: u64 = 0;
    loop {
        let mut end = sent + pending.len() as u64;
        if let Some(limit) = limit {
            end = end.min(limit);
        }
        if let Some(scanner) = &scanner {
            end = end.min(scanner.safe_until());
        }
        let n = (end - sent) as usize;
        if n > 0 {
            if write_paced(to, &pending[..n], &mut pacer, shared)
                .await
                .is_err()
            {
                return End::Broken;
            }
            pending.drain(..n);
            sent = end;
        }
        if limit == Some(sent) {
            return End::Fired {
                at_byte: sent,
                events: 0,
            };
        }
        if let Some(scanner) = &mut scanner {
            if scanner.cut_at() == Some(sent) {
                return End::Fired {
                    at_byte: sent,
                    events: scanner.events(),
                };
            }
            if pending.len() > HOLD_LIMIT {
                // `pending` starts at the held line; cut in the middle of what is held.
                scanner.force_cut(sent + (pending.len() / 2) as u64);
                continue;
            }
        }
        // With a byte limit `pending` is empty here, so this never reads past the limit.
        let want = match limit {
            Some(limit) => buf.len().min((limit - sent) as usize),
            None => buf.len(),
        };
        match from.read(&mut buf[..want]).await {
            Ok(0) => {
                // The fault did not fire; whatever was held is an ordinary tail.
                if write_paced(to, &pending, &mut pacer, shared).await.is_err() {
                    return End::Broken;
                }
                let _ = to.shutdown().await;
                return End::UpstreamEof;
            }
            Ok(n) => {
                if let Some(scanner) = &mut scanner {
                    scanner.feed(&buf[..n]);
                }
                pending.extend_from_slice(&buf[..n]);
            }
            Err(_) => return End::UpstreamError,
        }
    }
}

/// Paces writes to a byte rate without saving up: time the client spent not reading is not
/// credited, so a burst after a pause is paced too.
struct Pacer {
    bytes_per_sec: u64,
    next: Instant,
}

impl Pacer {
    fn new(bytes_per_sec: u64) -> Self {
        Self {
            bytes_per_sec,
            next: Instant::now(),
        }
    }

    /// Writes of 50 ms worth of bytes, so the rate holds at a fine grain.
    fn piece(&self) -> usize {
        (self.bytes_per_sec / 20).clamp(1, READ_BUF as u64) as usize
    }
}

async fn write_paced(
    to: &mut WriteHalf<'_>,
    data: &[u8],
    pacer: &mut Option<Pacer>,
    shared: &Shared,
) -> io::Result<()> {
    let Some(pacer) = pacer else {
        to.write_all(data).await?;
        shared.add_bytes(true, data.len());
        return Ok(());
    };
    for piece in data.chunks(pacer.piece()) {
        sleep_until(pacer.next).await;
        to.write_all(piece).await?;
        shared.add_bytes(true, piece.len());
        let cost = Duration::from_secs_f64(piece.len() as f64 / pacer.bytes_per_sec as f64);
        pacer.next = pacer.next.max(Instant::now()) + cost;
    }
    Ok(())
}
