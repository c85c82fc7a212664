//! The HTTP scenarios: `throughput`, `fanout`, `resume`, `idle` and `roundtrip`, each against
//! one server URL, each checking every stream it reads (see [`super::mcp::read_count`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::mcp::{Session, Stateless, Stop, Tally, http_client, http_client_builder, read_count};
use super::spawn::{cpu_seconds, machine_busy, machine_cpu_ticks, rss_bytes};
use super::{Report, median, per_second};

/// Sessions initialized at once when a scenario opens many: enough to keep the server busy,
/// few enough not to overflow a listen backlog.
const SETUP_CONCURRENCY: usize = 64;

/// Events of the warm-up call before `throughput`'s timed runs.
const WARM_UP_EVENTS: u64 = 1000;

/// Unloaded paced streams behind `fanout`'s latency calibration.
const CALIBRATION_STREAMS: usize = 3;

/// How long `idle` waits after opening sessions or streams before reading the server's RSS,
/// so that closed setup connections are gone and allocations have settled.
const SETTLE: Duration = Duration::from_millis(500);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A histogram of latencies in microseconds, from 1 µs to an hour, 3 significant digits.
pub(super) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

#[allow(clippy::cast_precision_loss)] // microseconds of a bench run
pub(super) fn quantile_ms(histogram: &Histogram<u64>, q: f64) -> f64 {
    histogram.value_at_quantile(q) as f64 / 1e3
}

/// One `count {n}` call in `session`, read and checked to its result; the time from sending
/// the request to the result.
async fn timed_count(session: &Session, n: u64) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let response = session.start_count(n, 0).await?;
    let tally = read_count(response, n, Tally::expecting(1, false), Stop::AtResult).await?;
    let elapsed = start.elapsed();
    ensure!(tally.events == n, "{} of {n} events arrived", tally.events);
    Ok(elapsed)
}

/// `throughput`: one stream of n events with no interval, in a fresh session per run; the
/// median rate of `runs` runs after one warm-up call. With the server's `pid`, also the CPU
/// time it used per event over the timed runs: on a shared machine a steadier measure of its
/// cost than the rate, which also depends on what else gets the cores.
pub(crate) async fn throughput(
    url: &str,
    n: u64,
    runs: u64,
    pid: Option<u32>,
) -> anyhow::Result<Report> {
    let http = http_client()?;
    let warm = Session::initialize(&http, url).await?;
    timed_count(&warm, n.min(WARM_UP_EVENTS))
        .await
        .context("warm-up call")?;
    warm.delete().await;
    let cpu_before = pid.map(cpu_seconds).transpose()?;
    let mut rates = Vec::new();
    let mut times = Vec::new();
    for run in 1..=runs {
        let session = Session::initialize(&http, url).await?;
        let elapsed = timed_count(&session, n)
            .await
            .with_context(|| format!("run {run}"))?;
        session.delete().await;
        rates.push(per_second(n, elapsed));
        times.push(ms(elapsed));
    }
    let mut report = Report::new("throughput", url);
    report.add("events_expected", n, "events");
    report.add("events_received", n, "events");
    report.add("runs", runs, "");
    report.add("events_per_sec", median(rates.clone()), "events/s (median)");
    report.add(
        "events_per_sec_min",
        rates.iter().copied().fold(f64::INFINITY, f64::min),
        "events/s",
    );
    report.add(
        "events_per_sec_max",
        rates.iter().copied().fold(0.0, f64::max),
        "events/s",
    );
    report.add("elapsed_ms", median(times), "ms (median)");
    if let (Some(pid), Some(before)) = (pid, cpu_before) {
        let used = cpu_seconds(pid)? - before;
        #[allow(clippy::cast_precision_loss)] // event counts are far below 2^52
        let events = (n * runs) as f64;
        report.add(
            "server_cpu_us_per_event",
            used * 1e6 / events,
            "us of server CPU per event (timed runs)",
        );
    }
    Ok(report)
}

/// Initializes `count` sessions, [`SETUP_CONCURRENCY`] at a time.
async fn sessions(
    http: &reqwest::Client,
    url: &str,
    count: u64,
) -> anyhow::Result<Vec<Arc<Session>>> {
    let permits = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for _ in 0..count {
        let (http, url, permits) = (http.clone(), url.to_owned(), Arc::clone(&permits));
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            Session::initialize(&http, &url).await.map(Arc::new)
        });
    }
    let mut sessions = Vec::new();
    while let Some(result) = tasks.join_next().await {
        sessions.push(result.context("session task")??);
    }
    Ok(sessions)
}

/// Deletes `sessions`, [`SETUP_CONCURRENCY`] at a time.
async fn delete_all(sessions: Vec<Arc<Session>>) {
    for chunk in sessions.chunks(SETUP_CONCURRENCY) {
        let mut tasks = JoinSet::new();
        for session in chunk {
            let session = Arc::clone(session);
            tasks.spawn(async move { session.delete().await });
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// `fanout`: `c` sessions call `count` at once.
///
/// Phase 1, aggregate: each streams n events with no interval; events/s is every session's
/// events over the time from the first request to the last result.
///
/// Phase 2, latency: each streams `latency_events` events `interval_ms` apart, all calls sent
/// at once. The demo's progress carries no timestamp, so emission times are derived from the
/// arrival spacing: three unloaded paced streams measured first give the `period` (their
/// median event spacing: the interval plus the server's timer overshoot, so drift does not
/// accumulate) and the `baseline` (the least time from sending a call to its first event,
/// POST handling included: an upper bound of the unloaded one-way latency). Under load, event i of a
/// stream is taken as emitted at `origin + i × period`, `origin` chosen so that the stream's
/// least delayed event has latency `baseline`; every event's latency is its arrival minus
/// its emission plus `baseline`. That is the delivery delay once a stream runs (queueing in
/// the server's writers, the sockets and the client). It would not show a delay common to
/// every event of a stream; the time from sending the call to the first event, which
/// includes the whole burst of simultaneous calls, is reported beside it (`first_event_*`).
pub(crate) async fn fanout(
    url: &str,
    c: u64,
    n: u64,
    latency_events: u64,
    interval_ms: u64,
    pids: &[u32],
) -> anyhow::Result<Report> {
    ensure!(latency_events >= 2, "--latency-events must be at least 2");
    let http = http_client()?;
    let sessions = sessions(&http, url, c).await?;

    // Phase 1: aggregate events/s.
    let cpu_before = machine_cpu_ticks()?;
    let pids_before = pids
        .iter()
        .map(|&pid| cpu_seconds(pid))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for session in &sessions {
        let session = Arc::clone(session);
        tasks.spawn(async move { timed_count(&session, n).await });
    }
    let mut failures = 0_u64;
    let mut first_failure = None;
    while let Some(result) = tasks.join_next().await {
        if let Err(error) = result.context("stream task").and_then(|r| r) {
            failures += 1;
            first_failure.get_or_insert(error);
        }
    }
    let aggregate_elapsed = start.elapsed();
    let busy = machine_busy(cpu_before, machine_cpu_ticks()?);
    let mut process_cores = Vec::with_capacity(pids.len());
    for (&pid, before) in pids.iter().zip(pids_before) {
        process_cores.push((
            pid,
            (cpu_seconds(pid)? - before) / aggregate_elapsed.as_secs_f64(),
        ));
    }
    if let Some(error) = first_failure {
        return Err(error.context(format!("{failures} of {c} unpaced streams failed")));
    }

    // Calibration on unloaded paced streams: the event spacing (median gap), and the least
    // time from sending a call to its first event (the baseline latency, POST handling
    // included; the least of a few, so one slow start on a busy machine does not inflate
    // every latency).
    let (period, baseline) = {
        let mut gaps = Vec::new();
        let mut baseline = Duration::MAX;
        for _ in 0..CALIBRATION_STREAMS {
            let sent = Instant::now();
            let response = sessions[0].start_count(latency_events, interval_ms).await?;
            let tally = read_count(
                response,
                latency_events,
                Tally::expecting(1, true),
                Stop::AtResult,
            )
            .await
            .context("calibration stream")?;
            let arrivals = tally.arrivals.unwrap_or_default();
            baseline = baseline.min(arrivals[0].duration_since(sent));
            gaps.extend(
                arrivals
                    .windows(2)
                    .map(|w| w[1].duration_since(w[0]).as_secs_f64()),
            );
        }
        (Duration::from_secs_f64(median(gaps)), baseline)
    };

    // Phase 2: paced streams, latency per event.
    let mut tasks = JoinSet::new();
    for session in &sessions {
        let session = Arc::clone(session);
        tasks.spawn(async move {
            let sent = Instant::now();
            let response = session.start_count(latency_events, interval_ms).await?;
            let tally = read_count(
                response,
                latency_events,
                Tally::expecting(1, true),
                Stop::AtResult,
            )
            .await?;
            anyhow::Ok((sent, tally.arrivals.unwrap_or_default()))
        });
    }
    let mut histogram = latency_histogram();
    let mut first_events = latency_histogram();
    let mut received = 0_u64;
    while let Some(result) = tasks.join_next().await {
        let (sent, arrivals) = result
            .context("stream task")?
            .context("a paced stream failed")?;
        first_events
            .record(micros(arrivals[0].duration_since(sent)))
            .context("recording a latency")?;
        // Each event's arrival less its place in the schedule; the stream's least delayed
        // event fixes the schedule's origin (it was delivered in `baseline`).
        let offsets: Vec<Instant> = (0_u32..)
            .zip(&arrivals)
            .map(|(i, arrival)| *arrival - period * i)
            .collect();
        let origin = *offsets.iter().min().context("no events")?;
        for offset in offsets {
            histogram
                .record(micros(offset.duration_since(origin) + baseline))
                .context("recording a latency")?;
            received += 1;
        }
    }
    delete_all(sessions).await;

    let mut report = Report::new("fanout", url);
    report.add("sessions", c, "");
    report.add("events_expected", c * n, "events (unpaced)");
    report.add("events_received", c * n, "events (unpaced)");
    report.add(
        "aggregate_events_per_sec",
        per_second(c * n, aggregate_elapsed),
        "events/s",
    );
    report.add(
        "machine_busy",
        busy,
        "of every core, all processes, while the unpaced streams ran",
    );
    for (pid, cores) in process_cores {
        report.add(
            format!("pid_{pid}_cores"),
            cores,
            "cores this process used while the unpaced streams ran",
        );
    }
    report.add("latency_events", received, "events (paced)");
    report.add("interval_ms", interval_ms, "ms");
    report.add("period_ms", ms(period), "ms (measured spacing)");
    report.add(
        "baseline_ms",
        ms(baseline),
        "ms (unloaded, least delayed event)",
    );
    report.add(
        "first_event_p50_ms",
        quantile_ms(&first_events, 0.5),
        "ms (call sent to first event)",
    );
    report.add(
        "first_event_p99_ms",
        quantile_ms(&first_events, 0.99),
        "ms (call sent to first event)",
    );
    report.add("latency_p50_ms", quantile_ms(&histogram, 0.5), "ms");
    report.add("latency_p99_ms", quantile_ms(&histogram, 0.99), "ms");
    report.add("latency_max_ms", quantile_ms(&histogram, 1.0), "ms");
    Ok(report)
}

/// `resume`: one stream of k events read in full (first delivery), then resumed from its
/// first event id: `samples` resumes cut after their first replayed event (the time from
/// sending the GET to that event, on a pooled connection), and `runs` full replays.
pub(crate) async fn resume(url: &str, k: u64, samples: u64, runs: u64) -> anyhow::Result<Report> {
    let http = http_client()?;
    let session = Session::initialize(&http, url).await?;
    let start = Instant::now();
    let response = session.start_count(k, 0).await?;
    let tally = read_count(response, k, Tally::expecting(1, false), Stop::AtResult)
        .await
        .context("first delivery")?;
    let first_rate = per_second(k, start.elapsed());
    let (resume_id, next) = tally
        .resume_point
        .context("the stream carried no event ids: it cannot be resumed")?;
    let replayed = k + 1 - next;

    let mut histogram = latency_histogram();
    for sample in 1..=samples {
        session.warm_connection().await;
        let start = Instant::now();
        let response = session.get_stream(Some(&resume_id)).await?;
        // Returning drops the response mid-body: a cut.
        let tally = read_count(
            response,
            k,
            Tally::expecting(next, false),
            Stop::AtFirstEvent,
        )
        .await
        .with_context(|| format!("resume {sample}"))?;
        let first = tally
            .first_event_at
            .context("the resume replayed no event")?;
        histogram
            .record(micros(first.duration_since(start)))
            .context("recording a latency")?;
    }

    let mut rates = Vec::new();
    for run in 1..=runs {
        session.warm_connection().await;
        let start = Instant::now();
        let response = session.get_stream(Some(&resume_id)).await?;
        let tally = read_count(response, k, Tally::expecting(next, false), Stop::AtResult)
            .await
            .with_context(|| format!("replay {run}"))?;
        ensure!(tally.events == replayed, "replay {run} lost events");
        rates.push(per_second(replayed, start.elapsed()));
    }
    session.delete().await;
    let replay_rate = median(rates);

    let mut report = Report::new("resume", url);
    report.add("events_stored", k, "events");
    report.add("events_replayed", replayed, "events per replay");
    report.add("first_delivery_events_per_sec", first_rate, "events/s");
    report.add("replay_events_per_sec", replay_rate, "events/s (median)");
    report.add("replay_over_first", replay_rate / first_rate, "x");
    report.add("samples", samples, "resumes");
    report.add(
        "first_replayed_event_p50_ms",
        quantile_ms(&histogram, 0.5),
        "ms",
    );
    report.add(
        "first_replayed_event_p99_ms",
        quantile_ms(&histogram, 0.99),
        "ms",
    );
    Ok(report)
}

/// `idle`: the server's RSS before, with `s` idle sessions (no connection held: the setup
/// client keeps none idle), and with one open GET stream per session.
pub(crate) async fn idle(url: &str, pid: u32, s: u64) -> anyhow::Result<Report> {
    // No pooled connections: an idle session should hold no socket on the server.
    let http = http_client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .context("building the HTTP client")?;
    let warm = Session::initialize(&http, url).await?;
    warm.delete().await;
    tokio::time::sleep(SETTLE).await;
    let base = rss_bytes(pid)?;

    let sessions = sessions(&http, url, s).await?;
    tokio::time::sleep(SETTLE).await;
    let with_sessions = rss_bytes(pid)?;

    let permits = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for session in &sessions {
        let (session, permits) = (Arc::clone(session), Arc::clone(&permits));
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            session.get_stream(None).await
        });
    }
    let mut streams = Vec::new();
    let mut errors = 0_u64;
    let mut first_error = None;
    while let Some(result) = tasks.join_next().await {
        match result.context("stream task").and_then(|r| r) {
            Ok(response) => streams.push(response),
            Err(error) => {
                errors += 1;
                first_error.get_or_insert(error);
            }
        }
    }
    if let Some(error) = first_error {
        return Err(error.context(format!("{errors} of {s} GET streams failed to open")));
    }
    tokio::time::sleep(SETTLE).await;
    let with_streams = rss_bytes(pid)?;
    let open = streams.len() as u64;
    drop(streams);
    delete_all(sessions).await;

    #[allow(clippy::cast_precision_loss)] // bytes and counts of a bench run
    let per = |delta: u64| delta as f64 / s as f64;
    let mut report = Report::new("idle", url);
    report.add("sessions", s, "");
    report.add("streams_open", open, "GET streams, no errors");
    report.add("rss_base_bytes", base, "bytes");
    report.add(
        "rss_per_session_bytes",
        per(with_sessions.saturating_sub(base)),
        "bytes",
    );
    report.add(
        "rss_per_stream_bytes",
        per(with_streams.saturating_sub(with_sessions)),
        "bytes",
    );
    report.add("rss_with_streams_bytes", with_streams, "bytes");
    Ok(report)
}

/// `roundtrip`: 2026-07-28 `tools/call` round trips, each a stateless `count {n}` read and
/// checked to its result. For each entry of `clients`, that many clients call back to back
/// for `seconds` (after a warm-up of a fifth of it): completed calls per second and the
/// latency percentiles of one call.
pub(crate) async fn roundtrip(
    url: &str,
    tool: &str,
    clients: &[u64],
    seconds: f64,
    n: u64,
    pid: Option<u32>,
) -> anyhow::Result<Report> {
    let http = http_client_builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .context("building the HTTP client")?;
    let client = Arc::new(Stateless::discover(&http, url).await?.calling(tool));
    let mut report = Report::new("roundtrip", url);
    report.add("events_per_call", n, "events");
    for &count in clients {
        let warm_up = Duration::from_secs_f64(seconds / 5.0);
        let _ = calls_for(&client, count, warm_up, n).await?;
        let window = Duration::from_secs_f64(seconds);
        let cpu_before = pid.map(cpu_seconds).transpose()?;
        let (calls, histogram, elapsed) = calls_for(&client, count, window, n).await?;
        if let (Some(pid), Some(before)) = (pid, cpu_before) {
            let used = cpu_seconds(pid)? - before;
            #[allow(clippy::cast_precision_loss)] // calls of a bench run are far below 2^52
            let per_call = used * 1e6 / calls.max(1) as f64;
            report.add(
                format!("clients_{count}_server_cpu_us_per_call"),
                per_call,
                "us of server CPU per call",
            );
        }
        report.add(
            format!("clients_{count}_calls_per_sec"),
            per_second(calls, elapsed),
            "calls/s",
        );
        report.add(
            format!("clients_{count}_latency_p50_ms"),
            quantile_ms(&histogram, 0.5),
            "ms",
        );
        report.add(
            format!("clients_{count}_latency_p99_ms"),
            quantile_ms(&histogram, 0.99),
            "ms",
        );
    }
    Ok(report)
}

/// `clients` callers, each calling `count {n}` back to back until `window` has passed: the
/// calls completed, their latencies, and the time until the last one ended.
async fn calls_for(
    client: &Arc<Stateless>,
    clients: u64,
    window: Duration,
    n: u64,
) -> anyhow::Result<(u64, Histogram<u64>, Duration)> {
    let start = Instant::now();
    let mut callers = JoinSet::new();
    for _ in 0..clients {
        let client = Arc::clone(client);
        callers.spawn(async move {
            let mut histogram = latency_histogram();
            let mut calls = 0;
            while start.elapsed() < window {
                let sent = Instant::now();
                let response = client.start_count(n).await?;
                read_count(response, n, Tally::expecting(1, false), Stop::AtResult).await?;
                histogram.record(micros(sent.elapsed()))?;
                calls += 1;
            }
            anyhow::Ok((calls, histogram))
        });
    }
    let mut total = 0;
    let mut histogram = latency_histogram();
    while let Some(caller) = callers.join_next().await {
        let (calls, caller) = caller.context("a caller panicked")??;
        total += calls;
        histogram.add(caller)?;
    }
    Ok((total, histogram, start.elapsed()))
}
