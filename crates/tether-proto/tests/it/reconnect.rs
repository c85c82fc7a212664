//! The per-stream reconnect machine, driven with virtual time (docs/PROTOCOL.md#checklist-h
//! T79–T88, open questions 2, 4 and 15 of docs/PROTOCOL.md#open-questions;
//! docs/CONTRACTS.md#client-reconnect-timing; docs/DESIGN.md#property-6).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tether_proto::backoff::{BackoffConfig, Budget, RandomSource, SplitMix64};
use tether_proto::reconnect::{
    Action, DEFAULT_IDLE_TIMEOUT, Event, Failure, GiveUpReason, Reconnect, ReconnectConfig,
    StreamKind,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Virtual time: every test counts from its own `t0`.
struct Clock {
    t0: Instant,
}

impl Clock {
    fn new() -> Self {
        Self { t0: Instant::now() }
    }

    fn at(&self, millis: u64) -> Instant {
        self.t0 + ms(millis)
    }
}

fn post(now: Instant) -> Reconnect {
    Reconnect::post_stream(ReconnectConfig::default(), SplitMix64::new(1), now)
}

fn standalone(now: Instant) -> Reconnect {
    Reconnect::standalone(ReconnectConfig::default(), SplitMix64::new(1), now)
}

/// A budget that never runs out, for tests about timing rather than giving up.
fn unlimited() -> ReconnectConfig {
    let mut config = ReconnectConfig::default();
    config.budget = Budget {
        max_attempts: u32::MAX,
        max_elapsed: Duration::MAX,
    };
    config
}

#[track_caller]
fn expect_wait<R: RandomSource>(m: &mut Reconnect<R>, now: Instant) -> Instant {
    match m.poll(now) {
        Action::Wait { until } => until,
        other => panic!("expected Wait, got {other:?}"),
    }
}

#[track_caller]
fn expect_connect<R: RandomSource>(m: &mut Reconnect<R>, now: Instant) -> Option<String> {
    match m.poll(now) {
        Action::Connect { last_event_id } => last_event_id,
        other => panic!("expected Connect, got {other:?}"),
    }
}

/// Wait out whatever the machine says, then take its `Connect`; returns (when, id).
#[track_caller]
fn wait_and_connect<R: RandomSource>(
    m: &mut Reconnect<R>,
    now: Instant,
) -> (Instant, Option<String>) {
    let until = expect_wait(m, now);
    assert!(until >= now);
    (until, expect_connect(m, until))
}

#[track_caller]
fn expect_give_up<R: RandomSource>(m: &mut Reconnect<R>, now: Instant) -> GiveUpReason {
    match m.poll(now) {
        Action::GiveUp(reason) => reason,
        other => panic!("expected GiveUp, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Cursor: T79, T80, T83, T84, T87, T112, T113, docs/PROTOCOL.md#open-15

#[test]
fn a_cut_post_stream_resumes_by_get_with_its_last_event_id_t80() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    assert_eq!(m.poll(c.at(0)), Action::Streaming);
    m.on_event(c.at(1), Event::priming("s:0"));
    m.on_event(c.at(2), Event::message(Some("s:1")));
    m.on_failure(c.at(3), Failure::Network);
    let (_, id) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(id.as_deref(), Some("s:1"));
}

#[test]
fn a_second_cut_before_any_new_event_resends_the_same_last_event_id_t83() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::priming("s:0"));
    m.on_event(c.at(2), Event::message(Some("s:5")));
    m.on_failure(c.at(3), Failure::Network);
    let (when, id) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(id.as_deref(), Some("s:5"));
    // The resumed stream connects and drops again before any new id (TS SDK #2499).
    m.on_connected(when);
    m.on_bytes(when + ms(5));
    m.on_failure(when + ms(10), Failure::CleanClose);
    let (when, id) = wait_and_connect(&mut m, when + ms(10));
    assert_eq!(id.as_deref(), Some("s:5"));
    // And again via a failed connect.
    m.on_failure(when, Failure::Network);
    let (_, id) = wait_and_connect(&mut m, when);
    assert_eq!(id.as_deref(), Some("s:5"));
}

#[test]
fn a_priming_event_records_its_id_so_a_cut_right_after_it_is_resumable_t84() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::priming("s:0"));
    assert_eq!(m.cursor(), Some("s:0"));
    m.on_failure(c.at(2), Failure::CleanClose);
    let (_, id) = wait_and_connect(&mut m, c.at(2));
    assert_eq!(id.as_deref(), Some("s:0"));
}

#[test]
fn events_without_an_id_keep_the_cursor_t113() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::message(Some("a")));
    m.on_event(c.at(2), Event::message(None));
    m.on_event(c.at(3), Event::default().with_retry(ms(10)));
    assert_eq!(m.cursor(), Some("a"));
    m.on_failure(c.at(4), Failure::Network);
    let (_, id) = wait_and_connect(&mut m, c.at(4));
    assert_eq!(id.as_deref(), Some("a"));
}

#[test]
fn the_cursor_survives_reconnects_until_the_server_sends_a_new_id_section_6_1_item_15() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::message(Some("x:1")));
    m.on_failure(c.at(2), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(2));
    m.on_connected(when);
    // The resumed connection delivers id-less events: the cursor is still the old id.
    m.on_event(when, Event::message(None));
    assert_eq!(m.cursor(), Some("x:1"));
    m.on_event(when, Event::message(Some("x:2")));
    assert_eq!(m.cursor(), Some("x:2"));
}

#[test]
fn a_standalone_stream_that_never_saw_an_id_reconnects_without_last_event_id_t87() {
    let c = Clock::new();
    let mut m = standalone(c.at(0));
    assert_eq!(expect_connect(&mut m, c.at(0)), None);
    m.on_connected(c.at(1));
    m.on_event(c.at(2), Event::message(None));
    m.on_failure(c.at(3), Failure::CleanClose);
    let (_, id) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(id, None);
}

#[test]
fn an_explicit_empty_id_clears_the_cursor_so_no_last_event_id_is_sent_t112() {
    let c = Clock::new();
    let mut m = standalone(c.at(0));
    let _ = expect_connect(&mut m, c.at(0));
    m.on_connected(c.at(1));
    m.on_event(c.at(2), Event::message(Some("g:1")));
    m.on_event(c.at(3), Event::message(Some("")));
    assert_eq!(m.cursor(), None);
    m.on_failure(c.at(4), Failure::CleanClose);
    let (_, id) = wait_and_connect(&mut m, c.at(4));
    assert_eq!(id, None);
}

#[test]
fn a_post_stream_whose_id_was_cleared_is_not_resumable_t87() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::message(Some("s:1")));
    m.on_event(c.at(2), Event::message(Some("")));
    m.on_failure(c.at(3), Failure::Network);
    assert_eq!(expect_give_up(&mut m, c.at(3)), GiveUpReason::NotResumable);
}

#[test]
fn a_post_stream_lost_before_any_event_id_is_not_resumable() {
    for failure in [
        Failure::Network,
        Failure::Timeout,
        Failure::Idle,
        Failure::CleanClose,
    ] {
        let c = Clock::new();
        let mut m = post(c.at(0));
        // A message without an id (a pre-2025-11-25 server without priming) gives nothing to
        // resume from; re-POSTing could run the request twice.
        m.on_event(c.at(1), Event::message(None));
        m.on_failure(c.at(2), failure);
        assert_eq!(
            expect_give_up(&mut m, c.at(2)),
            GiveUpReason::NotResumable,
            "{failure:?}"
        );
    }
}

#[test]
fn with_resend_a_post_stream_lost_before_any_id_sends_its_request_again_after_backoff() {
    for failure in [
        Failure::Network,
        Failure::Timeout,
        Failure::Idle,
        Failure::CleanClose,
    ] {
        let c = Clock::new();
        let mut m = post(c.at(0)).resend_before_first_id();
        m.on_failure(c.at(2), failure);
        // The first attempt after a loss waits the first backoff step (no `retry` seen yet).
        let until = expect_wait(&mut m, c.at(2));
        assert!(until > c.at(2), "{failure:?}");
        assert_eq!(
            expect_connect(&mut m, until),
            None,
            "POST again: {failure:?}"
        );
        // Answered with the stream from its start: its priming id is the cursor from now on,
        // and a later cut resumes by GET with it.
        m.on_connected(until);
        m.on_event(until, Event::priming("s:0"));
        m.on_failure(until + ms(1), Failure::Network);
        let next = expect_wait(&mut m, until + ms(1));
        assert_eq!(
            expect_connect(&mut m, next).as_deref(),
            Some("s:0"),
            "{failure:?}"
        );
    }
}

#[test]
fn with_resend_failed_sends_back_off_and_run_the_budget_out() {
    let c = Clock::new();
    let config = {
        let mut config = ReconnectConfig::default();
        config.budget = Budget {
            max_attempts: 3,
            max_elapsed: Duration::MAX,
        };
        config
    };
    let mut m =
        Reconnect::post_stream(config, SplitMix64::new(7), c.at(0)).resend_before_first_id();
    m.on_failure(c.at(0), Failure::Network);
    let mut now = c.at(0);
    let mut waits = Vec::new();
    let reason = loop {
        match m.poll(now) {
            Action::Wait { until } => {
                waits.push(until.saturating_duration_since(now));
                now = until;
            }
            Action::Connect { last_event_id } => {
                assert_eq!(last_event_id, None);
                m.on_failure(
                    now,
                    Failure::Status {
                        code: 503,
                        retry_after: None,
                    },
                );
            }
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(
        matches!(reason, GiveUpReason::BudgetExhausted { attempts: 3, .. }),
        "{reason:?}"
    );
    assert!(
        waits.iter().all(|wait| !wait.is_zero()),
        "every send waited: {waits:?}"
    );
}

#[test]
fn resend_changes_nothing_once_the_stream_has_an_id_nor_a_405() {
    let c = Clock::new();
    let mut m = post(c.at(0)).resend_before_first_id();
    m.on_event(c.at(1), Event::priming("s:0"));
    m.on_failure(c.at(2), Failure::Network);
    let until = expect_wait(&mut m, c.at(2));
    assert_eq!(expect_connect(&mut m, until).as_deref(), Some("s:0"));
    m.on_failure(
        until,
        Failure::Status {
            code: 405,
            retry_after: None,
        },
    );
    assert_eq!(expect_give_up(&mut m, until), GiveUpReason::NotResumable);
}

#[test]
fn an_id_cleared_while_waiting_makes_a_post_stream_give_up_instead_of_opening_a_get_stream() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(1), Event::priming("s:0"));
    m.on_failure(c.at(2), Failure::Network);
    // A late report from the dead connection, delivered after the loss was scheduled.
    m.on_event(c.at(3), Event::message(Some("")));
    let until = expect_wait(&mut m, c.at(3));
    assert_eq!(expect_give_up(&mut m, until), GiveUpReason::NotResumable);
}

#[test]
fn each_stream_keeps_its_own_cursor_and_retry_t79_section_6_1_item_4() {
    let c = Clock::new();
    let mut a = post(c.at(0));
    let mut b = post(c.at(0));
    let mut g = standalone(c.at(0));
    let _ = expect_connect(&mut g, c.at(0));
    g.on_connected(c.at(0));
    a.on_event(c.at(1), Event::priming("a:0").with_retry(ms(100)));
    b.on_event(c.at(1), Event::priming("b:0").with_retry(ms(900)));
    g.on_event(c.at(1), Event::priming("g:0"));
    for m in [&mut a, &mut b, &mut g] {
        m.on_failure(c.at(10), Failure::Network);
    }
    assert_eq!(
        wait_and_connect(&mut a, c.at(10)),
        (c.at(110), Some("a:0".into()))
    );
    assert_eq!(
        wait_and_connect(&mut b, c.at(10)),
        (c.at(910), Some("b:0".into()))
    );
    // The standalone stream got no `retry` of its own: the first backoff step, 1 s.
    assert_eq!(
        wait_and_connect(&mut g, c.at(10)),
        (c.at(1010), Some("g:0".into()))
    );
}

#[test]
fn resuming_from_a_persisted_cursor_connects_at_once_with_it() {
    let c = Clock::new();
    let config = ReconnectConfig::default();
    let mut m = Reconnect::resume(
        StreamKind::Post,
        "s:41",
        config,
        SplitMix64::new(1),
        c.at(0),
    );
    assert_eq!(m.cursor(), Some("s:41"));
    assert_eq!(expect_connect(&mut m, c.at(0)).as_deref(), Some("s:41"));
    assert_eq!(m.poll(c.at(0)), Action::Connecting);

    let mut m = Reconnect::resume(StreamKind::Post, "", config, SplitMix64::new(1), c.at(0));
    assert_eq!(expect_give_up(&mut m, c.at(0)), GiveUpReason::NotResumable);

    let mut m = Reconnect::resume(
        StreamKind::Standalone,
        "",
        config,
        SplitMix64::new(1),
        c.at(0),
    );
    assert_eq!(expect_connect(&mut m, c.at(0)), None);
}

// ---------------------------------------------------------------------------------------
// Timing: T81, T82, docs/CONTRACTS.md#client-reconnect-timing

#[test]
fn the_first_reconnect_after_a_loss_waits_exactly_the_servers_retry_t81() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(500)));
    m.on_failure(c.at(40), Failure::Network);
    assert_eq!(expect_wait(&mut m, c.at(40)), c.at(540));
    // Not a nanosecond early (conformance `sse-retry`: not before retry - 50 ms).
    assert_eq!(
        m.poll(c.at(540) - Duration::from_nanos(1)),
        Action::Wait { until: c.at(540) }
    );
    assert_eq!(expect_connect(&mut m, c.at(540)).as_deref(), Some("s:0"));
}

#[test]
fn a_connect_polled_late_still_happens_once_the_wait_is_over() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(500)));
    m.on_failure(c.at(0), Failure::Network);
    assert_eq!(expect_connect(&mut m, c.at(900)).as_deref(), Some("s:0"));
}

#[test]
fn without_retry_the_first_reconnect_waits_the_first_backoff_step_t82() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(10), Failure::Network);
    assert_eq!(expect_wait(&mut m, c.at(10)), c.at(1010));
}

#[test]
fn retry_is_honoured_whatever_its_size_and_the_latest_value_wins() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(100)));
    m.on_event(c.at(1), Event::default().with_retry(ms(120_000)));
    assert_eq!(m.retry(), Some(ms(120_000)));
    m.on_failure(c.at(2), Failure::CleanClose);
    // Above the backoff cap and the elapsed budget, but the first reconnect is always made.
    assert_eq!(expect_wait(&mut m, c.at(2)), c.at(120_002));
}

#[test]
fn retry_persists_across_reconnects() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(250)));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    m.on_connected(when);
    m.on_event(when, Event::message(Some("s:1")));
    m.on_failure(when, Failure::Network);
    assert_eq!(expect_wait(&mut m, when), when + ms(250));
}

#[test]
fn waits_after_failed_reconnects_are_never_below_retry_and_grow_to_the_cap() {
    let c = Clock::new();
    // Jitter pinned at its maximum, so each wait is exactly max(retry, step(n)).
    let mut m = Reconnect::post_stream(unlimited(), || u64::MAX, c.at(0));
    let backoff = BackoffConfig::default();
    let retry = ms(1200);
    m.on_event(c.at(0), Event::priming("s:0").with_retry(retry));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = expect_wait(&mut m, c.at(0));
    assert_eq!(now, c.at(1200));
    let mut waits = Vec::new();
    for n in 1..=15 {
        assert!(expect_connect(&mut m, now).is_some());
        m.on_failure(now, Failure::Network);
        assert_eq!(m.failures(), n);
        let until = expect_wait(&mut m, now);
        let wait = until - now;
        assert_eq!(wait, retry.max(backoff.step(n)));
        waits.push(wait);
        now = until;
    }
    assert!(waits.iter().all(|w| *w >= retry));
    assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
    assert_eq!(*waits.last().expect("waits"), backoff.cap);
}

#[test]
fn jittered_waits_after_failures_stay_between_retry_and_the_cap() {
    let c = Clock::new();
    let mut m = Reconnect::post_stream(unlimited(), SplitMix64::new(99), c.at(0));
    let retry = ms(300);
    m.on_event(c.at(0), Event::priming("s:0").with_retry(retry));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = expect_wait(&mut m, c.at(0));
    let mut distinct = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let _ = expect_connect(&mut m, now);
        m.on_failure(now, Failure::Timeout);
        let until = expect_wait(&mut m, now);
        assert!(until - now >= retry);
        assert!(until - now <= BackoffConfig::default().cap);
        distinct.insert(until - now);
        now = until;
    }
    // Full jitter really spreads the waits.
    assert!(distinct.len() > 150);
}

#[test]
fn retry_after_on_503_and_429_is_a_floor_for_the_next_wait() {
    for code in [503, 429] {
        let c = Clock::new();
        let mut m = Reconnect::post_stream(unlimited(), || 0, c.at(0));
        m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(100)));
        m.on_failure(c.at(0), Failure::Network);
        let (when, _) = wait_and_connect(&mut m, c.at(0));
        m.on_failure(
            when,
            Failure::Status {
                code,
                retry_after: Some(secs(45)),
            },
        );
        // Above `retry`, the jitter (drawn at 0 here) and even the backoff cap.
        assert_eq!(expect_wait(&mut m, when), when + secs(45));
        // A floor for the next wait only.
        let (when, _) = wait_and_connect(&mut m, when);
        m.on_failure(when, Failure::Network);
        assert_eq!(expect_wait(&mut m, when), when + ms(100));
    }
}

#[test]
fn server_errors_back_off_and_keep_the_cursor() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(100)));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = c.at(0);
    for code in [500, 502, 503, 504, 599] {
        let (when, id) = wait_and_connect(&mut m, now);
        assert_eq!(id.as_deref(), Some("s:0"));
        m.on_failure(
            when,
            Failure::Status {
                code,
                retry_after: None,
            },
        );
        now = when;
    }
    assert_eq!(m.failures(), 5);
}

// ---------------------------------------------------------------------------------------
// Finishing: T85, docs/PROTOCOL.md#open-2, statuses (T88, T117, 404)

#[test]
fn a_clean_close_before_the_final_response_is_a_loss_t85() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(50)));
    m.on_event(c.at(1), Event::message(Some("s:1")));
    m.on_failure(c.at(2), Failure::CleanClose);
    assert_eq!(
        wait_and_connect(&mut m, c.at(2)),
        (c.at(52), Some("s:1".into()))
    );
}

#[test]
fn after_the_final_response_a_post_stream_is_done_and_never_reconnects_t85() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_event(c.at(1), Event::message(Some("s:1")).final_response());
    assert_eq!(m.poll(c.at(1)), Action::Done);
    assert_eq!(m.idle_deadline(), None);
    // The server ends the body after the response (T9): not a loss.
    m.on_failure(c.at(2), Failure::CleanClose);
    m.on_failure(c.at(2), Failure::Network);
    for t in [2, 10_000, 1_000_000] {
        assert_eq!(m.poll(c.at(t)), Action::Done);
    }
}

#[test]
fn a_resumed_post_stream_finishes_with_the_replayed_response_t69() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(1), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(1));
    m.on_connected(when);
    m.on_event(when, Event::message(Some("s:1")).final_response());
    assert_eq!(m.poll(when), Action::Done);
}

#[test]
fn the_final_flag_does_not_end_the_standalone_stream_t27() {
    let c = Clock::new();
    let mut m = standalone(c.at(0));
    let _ = expect_connect(&mut m, c.at(0));
    m.on_connected(c.at(0));
    m.on_event(c.at(1), Event::message(Some("g:1")).final_response());
    assert_eq!(m.poll(c.at(1)), Action::Streaming);
    m.on_failure(c.at(2), Failure::CleanClose);
    assert_eq!(wait_and_connect(&mut m, c.at(2)).1.as_deref(), Some("g:1"));
}

#[test]
fn on_complete_finishes_a_stream_without_reconnecting() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_complete();
    assert_eq!(m.poll(c.at(0)), Action::Done);
    let mut g = standalone(c.at(0));
    g.on_complete();
    assert_eq!(g.poll(c.at(0)), Action::Done);
}

#[test]
fn status_404_gives_up_with_session_expired() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    m.on_failure(
        when,
        Failure::Status {
            code: 404,
            retry_after: None,
        },
    );
    assert_eq!(expect_give_up(&mut m, when), GiveUpReason::SessionExpired);
}

#[test]
fn status_405_on_the_resume_get_gives_up_as_not_resumable_t88() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    m.on_failure(
        when,
        Failure::Status {
            code: 405,
            retry_after: None,
        },
    );
    assert_eq!(expect_give_up(&mut m, when), GiveUpReason::NotResumable);
    // The error is typed and prints short and lower-case (docs/CONTRIBUTING.md#errors).
    assert_eq!(
        GiveUpReason::NotResumable.to_string(),
        "stream not resumable"
    );
}

#[test]
fn status_204_stops_reconnecting_t117() {
    let c = Clock::new();
    let mut g = standalone(c.at(0));
    let _ = expect_connect(&mut g, c.at(0));
    g.on_failure(
        c.at(1),
        Failure::Status {
            code: 204,
            retry_after: None,
        },
    );
    assert_eq!(g.poll(c.at(1)), Action::Done);
}

#[test]
fn other_client_errors_and_unexpected_statuses_are_fatal_t117() {
    for code in [200, 202, 301, 400, 401, 403, 406, 409, 410, 413, 415, 499] {
        let c = Clock::new();
        let mut g = standalone(c.at(0));
        let _ = expect_connect(&mut g, c.at(0));
        g.on_failure(
            c.at(1),
            Failure::Status {
                code,
                retry_after: Some(secs(1)),
            },
        );
        assert_eq!(
            expect_give_up(&mut g, c.at(1)),
            GiveUpReason::Fatal { status: code }
        );
    }
}

// ---------------------------------------------------------------------------------------
// Budget and progress

#[test]
fn a_server_that_accepts_and_closes_at_once_exhausts_the_budget_in_bounded_iterations() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(10)));
    m.on_failure(c.at(1), Failure::CleanClose);
    let mut now = c.at(1);
    let mut connects = 0;
    let reason = loop {
        match m.poll(now) {
            Action::Wait { until } => now = until,
            Action::Connect { last_event_id } => {
                assert_eq!(last_event_id.as_deref(), Some("s:0"));
                connects += 1;
                assert!(connects <= 100, "never gave up");
                m.on_connected(now);
                // The server replays the id we already have (a fresh priming event on some
                // servers reuses the cursor), sends a keep-alive, and closes.
                m.on_event(now, Event::priming("s:0").with_retry(ms(10)));
                m.on_bytes(now);
                m.on_failure(now, Failure::CleanClose);
            }
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    // Whichever limit comes first (20 attempts or 5 minutes), it comes.
    assert!(connects <= 20, "{connects}");
    match reason {
        GiveUpReason::BudgetExhausted { attempts, elapsed } => {
            assert_eq!(attempts, connects);
            assert!(elapsed <= Budget::default().max_elapsed);
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
}

#[test]
fn accept_and_close_with_zero_waits_is_stopped_by_the_attempt_limit() {
    // `retry: 0` and jitter drawn at zero: time never advances, only the count can stop it.
    let c = Clock::new();
    let mut m = Reconnect::post_stream(ReconnectConfig::default(), || 0, c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(Duration::ZERO));
    m.on_failure(c.at(0), Failure::CleanClose);
    let mut connects = 0;
    let reason = loop {
        match m.poll(c.at(0)) {
            Action::Connect { .. } => {
                connects += 1;
                assert!(connects <= 100, "never gave up");
                m.on_connected(c.at(0));
                m.on_failure(c.at(0), Failure::CleanClose);
            }
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(connects, 20);
    assert_eq!(
        reason,
        GiveUpReason::BudgetExhausted {
            attempts: 20,
            elapsed: Duration::ZERO
        }
    );
}

#[test]
fn a_standalone_stream_that_connects_but_never_delivers_gives_up() {
    let c = Clock::new();
    let config = {
        let mut config = ReconnectConfig::default();
        config.budget = Budget {
            max_attempts: 5,
            ..Budget::default()
        };
        config
    };
    let mut g = Reconnect::standalone(config, SplitMix64::new(3), c.at(0));
    let mut now = c.at(0);
    let mut connects = 0;
    let reason = loop {
        match g.poll(now) {
            Action::Wait { until } => now = until,
            Action::Connect { .. } => {
                connects += 1;
                assert!(connects <= 100, "never gave up");
                g.on_connected(now);
                g.on_failure(now + ms(1), Failure::CleanClose);
                now += ms(1);
            }
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(connects, 5);
    assert!(matches!(
        reason,
        GiveUpReason::BudgetExhausted { attempts: 5, .. }
    ));
}

#[test]
fn progress_resets_the_failure_count_and_the_next_loss_waits_retry_again() {
    let c = Clock::new();
    let mut m = Reconnect::post_stream(unlimited(), || u64::MAX, c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(100)));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = c.at(0);
    for _ in 0..4 {
        let (when, _) = wait_and_connect(&mut m, now);
        m.on_failure(when, Failure::Network);
        now = when;
    }
    assert_eq!(m.failures(), 4);
    let (when, _) = wait_and_connect(&mut m, now);
    m.on_connected(when);
    assert_eq!(
        m.failures(),
        4,
        "a successful connect alone is not progress"
    );
    m.on_event(when, Event::message(Some("s:1")));
    assert_eq!(m.failures(), 0);
    m.on_failure(when + ms(5), Failure::Network);
    assert_eq!(expect_wait(&mut m, when + ms(5)), when + ms(105));
}

#[test]
fn a_message_without_an_id_is_progress() {
    let c = Clock::new();
    let mut g = Reconnect::standalone(unlimited(), || u64::MAX, c.at(0));
    let _ = expect_connect(&mut g, c.at(0));
    g.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut g, c.at(0));
    assert_eq!(g.failures(), 1);
    g.on_connected(when);
    g.on_event(when, Event::message(None));
    assert_eq!(g.failures(), 0);
}

#[test]
fn the_elapsed_budget_gives_up_rather_than_sleeping_past_it() {
    let c = Clock::new();
    let config = {
        let mut config = ReconnectConfig::default();
        config.budget = Budget {
            max_attempts: u32::MAX,
            max_elapsed: secs(10),
        };
        config
    };
    let mut m = Reconnect::post_stream(config, SplitMix64::new(5), c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = c.at(0);
    let reason = loop {
        match m.poll(now) {
            Action::Wait { until } => {
                // No attempt is ever scheduled past the budget.
                assert!(until - c.at(0) <= secs(10));
                now = until;
            }
            Action::Connect { .. } => m.on_failure(now, Failure::Network),
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    match reason {
        GiveUpReason::BudgetExhausted { elapsed, attempts } => {
            assert!(elapsed <= secs(10));
            assert!(attempts >= 1);
            assert_eq!(elapsed, now - c.at(0));
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
}

#[test]
fn a_retry_after_beyond_the_budget_gives_up_at_once() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    m.on_failure(
        when,
        Failure::Status {
            code: 503,
            retry_after: Some(secs(3600)),
        },
    );
    assert!(matches!(
        expect_give_up(&mut m, when),
        GiveUpReason::BudgetExhausted { attempts: 1, .. }
    ));
}

#[test]
fn an_absurd_retry_never_panics() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(Duration::MAX));
    m.on_failure(c.at(0), Failure::Network);
    assert!(matches!(
        expect_give_up(&mut m, c.at(0)),
        GiveUpReason::BudgetExhausted { attempts: 0, .. }
    ));
}

#[test]
fn a_quiet_stream_kept_alive_for_stable_after_is_never_given_up_on() {
    // A server (or proxy) that closes a quiet stream every 45 s (SEP-1699 polling, connection
    // age limits), with keep-alives meanwhile: each close is a fresh loss, waited out with
    // `retry` exactly, however many times it happens.
    let c = Clock::new();
    let mut g = standalone(c.at(0));
    let mut now = c.at(0);
    assert_eq!(expect_connect(&mut g, now), None);
    g.on_connected(now);
    g.on_event(now, Event::priming("g:0").with_retry(ms(250)));
    for cycle in 0..200 {
        for _ in 0..3 {
            now += secs(15);
            g.on_bytes(now);
        }
        g.on_failure(now, Failure::CleanClose);
        let until = expect_wait(&mut g, now);
        assert_eq!(until - now, ms(250), "cycle {cycle}");
        now = until;
        assert_eq!(expect_connect(&mut g, now).as_deref(), Some("g:0"));
        g.on_connected(now);
    }
    assert_eq!(g.failures(), 0);
}

#[test]
fn a_stream_closed_before_stable_after_without_progress_counts_as_a_failure() {
    let c = Clock::new();
    let mut g = standalone(c.at(0));
    let mut now = c.at(0);
    let _ = expect_connect(&mut g, now);
    g.on_connected(now);
    g.on_event(now, Event::priming("g:0").with_retry(ms(250)));
    let mut connects = 0;
    let reason = loop {
        // Keep-alives for 20 s only: shorter than `stable_after` (30 s).
        now += secs(10);
        g.on_bytes(now);
        now += secs(10);
        g.on_bytes(now);
        g.on_failure(now, Failure::CleanClose);
        match g.poll(now) {
            Action::Wait { until } => now = until,
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
        let _ = expect_connect(&mut g, now);
        connects += 1;
        assert!(connects <= 100, "never gave up");
        g.on_connected(now);
    };
    assert!(connects < 20, "{connects}");
    assert!(matches!(reason, GiveUpReason::BudgetExhausted { .. }));
}

#[test]
fn a_connection_that_stays_silent_is_not_progress_even_if_it_lasts() {
    // Half-open every time: the idle deadline passes with no bytes at all.
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let mut now = c.at(0);
    let mut connects = 0;
    let reason = loop {
        match m.poll(now) {
            Action::Wait { until } => now = until,
            Action::Connect { .. } => {
                connects += 1;
                assert!(connects <= 100, "never gave up");
                m.on_connected(now);
                now = m.idle_deadline().expect("deadline while streaming");
                m.on_failure(now, Failure::Idle);
            }
            Action::GiveUp(reason) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(connects <= 20);
    assert!(matches!(reason, GiveUpReason::BudgetExhausted { .. }));
}

// ---------------------------------------------------------------------------------------
// Idle detection (half-open connections)

#[test]
fn the_idle_deadline_moves_with_every_byte_comment_and_event() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    assert_eq!(m.idle_deadline(), Some(c.at(0) + DEFAULT_IDLE_TIMEOUT));
    m.on_bytes(c.at(15_000)); // a keep-alive comment
    assert_eq!(m.idle_deadline(), Some(c.at(15_000) + DEFAULT_IDLE_TIMEOUT));
    m.on_event(c.at(20_000), Event::priming("s:0"));
    assert_eq!(m.idle_deadline(), Some(c.at(20_000) + DEFAULT_IDLE_TIMEOUT));
    m.on_event(c.at(21_000), Event::message(None));
    assert_eq!(m.idle_deadline(), Some(c.at(21_000) + DEFAULT_IDLE_TIMEOUT));
    // Out-of-order timestamps never move it backwards.
    m.on_bytes(c.at(5_000));
    assert_eq!(m.idle_deadline(), Some(c.at(21_000) + DEFAULT_IDLE_TIMEOUT));
}

#[test]
fn when_the_idle_deadline_passes_the_driver_reports_idle_and_the_stream_reconnects() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(200)));
    m.on_event(c.at(100), Event::message(Some("s:1")));
    let deadline = m.idle_deadline().expect("deadline");
    assert_eq!(deadline, c.at(100) + DEFAULT_IDLE_TIMEOUT);
    // The machine does not time out on its own: a driver reads until the deadline.
    assert_eq!(m.poll(deadline), Action::Streaming);
    m.on_failure(deadline, Failure::Idle);
    assert_eq!(m.idle_deadline(), None, "no deadline while waiting");
    let (when, id) = wait_and_connect(&mut m, deadline);
    assert_eq!(when, deadline + ms(200));
    assert_eq!(id.as_deref(), Some("s:1"));
    // An outstanding attempt has a deadline too: a hung connect is half-open as well.
    assert_eq!(m.idle_deadline(), Some(when + DEFAULT_IDLE_TIMEOUT));
    m.on_failure(when + DEFAULT_IDLE_TIMEOUT, Failure::Idle);
    assert!(matches!(
        m.poll(when + DEFAULT_IDLE_TIMEOUT),
        Action::Wait { .. }
    ));
}

#[test]
fn an_idle_timeout_of_duration_max_disables_the_deadline() {
    let c = Clock::new();
    let mut config = ReconnectConfig::default();
    config.idle_timeout = Duration::MAX;
    let m = Reconnect::post_stream(config, SplitMix64::new(1), c.at(0));
    assert_eq!(m.idle_deadline(), None);
}

// ---------------------------------------------------------------------------------------
// One attempt at a time (docs/DESIGN.md#property-6) and defensive inputs

#[test]
fn connect_is_emitted_once_per_attempt_and_never_while_one_is_outstanding() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    // However often and however late the driver polls, no second resume of this stream.
    for t in [0, 1, 1_000, 60_000, 3_600_000] {
        assert_eq!(m.poll(when + ms(t)), Action::Connecting);
    }
    // Inputs that are not the attempt's outcome do not end it either.
    m.on_bytes(when + ms(1));
    m.on_event(when + ms(2), Event::message(Some("s:1")));
    assert_eq!(m.poll(when + secs(7200)), Action::Connecting);
    m.on_connected(when + ms(3));
    assert_eq!(m.poll(when + ms(3)), Action::Streaming);
}

#[test]
fn reports_that_do_not_fit_the_state_are_ignored() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0").with_retry(ms(300)));
    m.on_failure(c.at(0), Failure::Network);
    let until = expect_wait(&mut m, c.at(0));
    // While waiting: a stale failure, a stray "connected", a late event.
    m.on_failure(c.at(1), Failure::Network);
    m.on_failure(
        c.at(1),
        Failure::Status {
            code: 404,
            retry_after: None,
        },
    );
    m.on_connected(c.at(2));
    m.on_bytes(c.at(2));
    assert_eq!(m.failures(), 0);
    assert_eq!(m.poll(c.at(2)), Action::Wait { until });
    // A late event is recorded (the application took it), but brings no early connect.
    m.on_event(c.at(3), Event::message(Some("s:1")).with_retry(ms(400)));
    assert_eq!(m.cursor(), Some("s:1"));
    assert_eq!(m.retry(), Some(ms(400)));
    assert_eq!(m.poll(c.at(3)), Action::Wait { until });
    assert_eq!(expect_connect(&mut m, until).as_deref(), Some("s:1"));
    // A double "connected" is harmless.
    m.on_connected(until);
    m.on_connected(until + ms(1));
    assert_eq!(m.poll(until + ms(1)), Action::Streaming);
}

#[test]
fn terminal_states_are_final() {
    let c = Clock::new();
    let mut m = post(c.at(0));
    m.on_event(c.at(0), Event::priming("s:0"));
    m.on_failure(c.at(0), Failure::Network);
    let (when, _) = wait_and_connect(&mut m, c.at(0));
    m.on_failure(
        when,
        Failure::Status {
            code: 404,
            retry_after: None,
        },
    );
    m.on_connected(when);
    m.on_event(when, Event::message(Some("s:9")).final_response());
    m.on_complete();
    m.on_failure(when, Failure::Network);
    assert_eq!(m.cursor(), Some("s:0"));
    assert_eq!(
        expect_give_up(&mut m, when + secs(100)),
        GiveUpReason::SessionExpired
    );
    assert_eq!(m.idle_deadline(), None);
}

// ---------------------------------------------------------------------------------------
// The 2026-07-28 era: task streams, requests sent again, listen streams
// (docs/CONTRACTS.md#client-reconnect-timing applies to both eras)

/// A `tasks/stream` read as the client drives it: `request()`, its seq reported as the event
/// id, `pollIntervalMs` as the fallback.
fn task_stream(now: Instant, poll: Option<Duration>) -> Reconnect {
    let machine = Reconnect::request(ReconnectConfig::default(), SplitMix64::new(7), now);
    match poll {
        Some(poll) => machine.with_fallback_retry(poll),
        None => machine,
    }
}

#[test]
fn a_request_is_sent_at_once_and_again_without_a_cursor_after_a_loss() {
    let c = Clock::new();
    let mut m = Reconnect::request(ReconnectConfig::default(), SplitMix64::new(1), c.at(0));
    assert_eq!(expect_connect(&mut m, c.at(0)), None, "sent at once");
    m.on_connected(c.at(5));
    m.on_event(c.at(6), Event::message(None));
    m.on_failure(c.at(10), Failure::Network);
    // Not given up as unresumable: it goes out again, after the first backoff step.
    let (when, id) = wait_and_connect(&mut m, c.at(10));
    assert_eq!(id, None);
    assert_eq!(when, c.at(10) + secs(1));
}

#[test]
fn a_task_stream_comes_back_after_the_servers_retry_from_its_last_seq() {
    let c = Clock::new();
    let mut m = task_stream(c.at(0), Some(ms(500)));
    assert_eq!(expect_connect(&mut m, c.at(0)), None, "from the start");
    m.on_connected(c.at(1));
    // The modern response opens with `retry: 100` alone, then the events.
    m.on_event(c.at(1), Event::default().with_retry(ms(100)));
    m.on_event(c.at(2), Event::message(Some("0")));
    m.on_event(c.at(3), Event::message(Some("1")));
    m.on_failure(c.at(4), Failure::Network);
    let (when, id) = wait_and_connect(&mut m, c.at(4));
    assert_eq!(id.as_deref(), Some("1"), "after the last seq delivered");
    assert_eq!(
        when,
        c.at(4) + ms(100),
        "exactly the server's retry, not the poll interval"
    );
}

#[test]
fn a_task_stream_without_retry_comes_back_after_the_tasks_poll_interval() {
    let c = Clock::new();
    let mut m = task_stream(c.at(0), Some(ms(250)));
    let _ = expect_connect(&mut m, c.at(0));
    m.on_connected(c.at(1));
    m.on_event(c.at(2), Event::message(Some("0")));
    m.on_failure(c.at(3), Failure::CleanClose);
    let (when, _) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(when, c.at(3) + ms(250));
    // With neither, the first backoff step, as in the legacy era.
    let mut m = task_stream(c.at(0), None);
    let _ = expect_connect(&mut m, c.at(0));
    m.on_connected(c.at(1));
    m.on_event(c.at(2), Event::message(Some("0")));
    m.on_failure(c.at(3), Failure::CleanClose);
    let (when, _) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(when, c.at(3) + secs(1));
}

/// Every cut after events arrived is a fresh loss, waited out with `retry` exactly, however
/// many there are: a call cut every few kilobytes never slows down.
#[test]
fn a_task_stream_cut_after_every_few_events_never_backs_off() {
    let c = Clock::new();
    let mut m = task_stream(c.at(0), Some(ms(500)));
    let mut now = c.at(0);
    let _ = expect_connect(&mut m, now);
    let mut seq = 0_u64;
    for _ in 0..200 {
        m.on_connected(now);
        m.on_event(now, Event::default().with_retry(ms(100)));
        for _ in 0..3 {
            m.on_event(now, Event::message(Some(&seq.to_string())));
            seq += 1;
        }
        m.on_failure(now, Failure::Network);
        let (when, id) = wait_and_connect(&mut m, now);
        assert_eq!(when, now + ms(100));
        assert_eq!(id, Some((seq - 1).to_string()));
        assert_eq!(m.failures(), 0);
        now = when;
    }
}

/// Attempts that bring nothing back off: `max(retry, jittered step)`, growing, and the budget
/// runs out; one that brings an event resets both.
#[test]
fn a_task_stream_backs_off_only_across_attempts_without_progress() {
    let c = Clock::new();
    let mut config = ReconnectConfig::default();
    config.budget = Budget {
        max_attempts: 4,
        max_elapsed: Duration::MAX,
    };
    // The largest jitter draw, so the waits are the backoff steps themselves.
    let mut m = Reconnect::request(config, || u64::MAX, c.at(0)).with_fallback_retry(ms(50));
    let _ = expect_connect(&mut m, c.at(0));
    m.on_connected(c.at(1));
    m.on_event(c.at(1), Event::default().with_retry(ms(100)));
    m.on_event(c.at(2), Event::message(Some("0")));
    m.on_failure(c.at(3), Failure::Network);
    let (mut now, _) = wait_and_connect(&mut m, c.at(3));
    assert_eq!(now, c.at(103));
    let mut waits = Vec::new();
    // Each reconnect is answered, then cut before any event: no progress.
    for _ in 0..3 {
        m.on_connected(now);
        m.on_failure(now, Failure::Network);
        let (when, id) = wait_and_connect(&mut m, now);
        assert_eq!(id.as_deref(), Some("0"));
        waits.push(when - now);
        now = when;
    }
    assert_eq!(
        waits,
        [ms(1500), ms(2250), ms(3375)],
        "1.5x steps over retry"
    );
    // Progress: the next cut is waited out with retry again.
    m.on_connected(now);
    m.on_event(now, Event::message(Some("1")));
    m.on_failure(now, Failure::Network);
    let (when, id) = wait_and_connect(&mut m, now);
    assert_eq!((when - now, id.as_deref()), (ms(100), Some("1")));
    // Four connects in a row that fail: the budget is spent.
    now = when;
    for _ in 0..3 {
        m.on_failure(now, Failure::Network);
        let (when, _) = wait_and_connect(&mut m, now);
        now = when;
    }
    m.on_failure(now, Failure::Network);
    assert!(matches!(
        expect_give_up(&mut m, now),
        GiveUpReason::BudgetExhausted { attempts: 4, .. }
    ));
}

/// 429 and 503 carry `Retry-After`: a floor over the wait, in this era too.
#[test]
fn a_request_refused_for_now_waits_at_least_retry_after() {
    let c = Clock::new();
    let mut m = task_stream(c.at(0), Some(ms(100)));
    let _ = expect_connect(&mut m, c.at(0));
    m.on_failure(
        c.at(2),
        Failure::Status {
            code: 503,
            retry_after: Some(secs(3)),
        },
    );
    let (when, _) = wait_and_connect(&mut m, c.at(2));
    assert!(when >= c.at(2) + secs(3), "{:?}", when - c.at(2));
}

// ---------------------------------------------------------------------------------------
// A hundred disconnects in a millisecond

/// What a test driver knows independently of the machine, to check it against.
#[derive(Default)]
struct Model {
    cursor: Option<String>,
    retry: Option<Duration>,
    outstanding: bool,
}

#[test]
fn a_hundred_disconnects_in_a_millisecond_lose_nothing_and_respect_retry() {
    for seed in 0..20u64 {
        hundred_disconnects(seed);
    }
}

fn hundred_disconnects(seed: u64) {
    let mut dice = SplitMix64::new(seed);
    let mut roll = move |n: u64| dice.next_u64() % n;
    let c = Clock::new();
    let mut m = Reconnect::post_stream(unlimited(), SplitMix64::new(seed ^ 0xABCD), c.at(0));
    let mut model = Model::default();
    let mut now = c.at(0);
    let mut seq = 0u64;
    model.retry = Some(ms(1 + roll(2000)));
    m.on_event(
        now,
        Event::priming("s:0").with_retry(model.retry.expect("retry")),
    );
    model.cursor = Some("s:0".into());
    let mut progressed = true;

    for cycle in 0..100 {
        // Live: a few events (some with a new `retry`), keep-alives in between.
        for _ in 0..roll(4) {
            now += ms(roll(50));
            match roll(4) {
                0 => m.on_bytes(now),
                1 => {
                    let retry = ms(1 + roll(2000));
                    model.retry = Some(retry);
                    m.on_event(now, Event::message(None).with_retry(retry));
                    progressed = true;
                }
                _ => {
                    seq += 1;
                    let id = format!("s:{seq}");
                    m.on_event(now, Event::message(Some(&id)));
                    model.cursor = Some(id);
                    progressed = true;
                }
            }
            assert_eq!(m.poll(now), Action::Streaming);
        }
        // Cut.
        let cut = [
            Failure::Network,
            Failure::Timeout,
            Failure::Idle,
            Failure::CleanClose,
        ][usize::try_from(roll(4)).expect("small")];
        m.on_failure(now, cut);
        let retry = model.retry.expect("retry");
        let until = expect_wait(&mut m, now);
        if progressed {
            assert_eq!(
                until - now,
                retry,
                "cycle {cycle}: first wait is exactly retry"
            );
        } else {
            assert!(
                until - now >= retry,
                "cycle {cycle}: later waits are >= retry"
            );
        }
        progressed = false;
        now = until;
        // Some failed reconnects, each waiting at least `retry` (and Retry-After).
        loop {
            assert!(!model.outstanding);
            let id = expect_connect(&mut m, now);
            model.outstanding = true;
            assert_eq!(id, model.cursor, "cycle {cycle}: resumes from the last id");
            // Polling again mid-attempt never yields a second resume.
            assert_eq!(m.poll(now + ms(roll(5000))), Action::Connecting);
            let retry_after = match roll(4) {
                0 => {
                    m.on_failure(now, Failure::Network);
                    None
                }
                1 => {
                    let retry_after = secs(roll(3));
                    m.on_failure(
                        now,
                        Failure::Status {
                            code: 503,
                            retry_after: Some(retry_after),
                        },
                    );
                    Some(retry_after)
                }
                _ => {
                    m.on_connected(now);
                    model.outstanding = false;
                    break;
                }
            };
            model.outstanding = false;
            let until = expect_wait(&mut m, now);
            assert!(until - now >= retry);
            assert!(until - now >= retry_after.unwrap_or_default());
            now = until;
        }
        assert_eq!(m.cursor(), model.cursor.as_deref());
    }
    m.on_event(now, Event::message(Some("s:final")).final_response());
    assert_eq!(m.poll(now), Action::Done);
}

// ---------------------------------------------------------------------------------------
// Random input sequences

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Poll,
    Connected,
    Bytes,
    Event {
        id: Option<u8>,
        retry: Option<u64>,
        message: bool,
        is_final: bool,
    },
    Fail(Failure),
    Complete,
}

fn op() -> impl Strategy<Value = Op> {
    let failure = prop_oneof![
        Just(Failure::Network),
        Just(Failure::Timeout),
        Just(Failure::Idle),
        Just(Failure::CleanClose),
        (
            prop_oneof![
                Just(200u16),
                Just(204),
                Just(400),
                Just(404),
                Just(405),
                Just(429),
                Just(500),
                Just(503),
                100u16..600
            ],
            proptest::option::of(0u64..5)
        )
            .prop_map(|(code, retry_after)| Failure::Status {
                code,
                retry_after: retry_after.map(secs),
            }),
    ];
    prop_oneof![
        4 => (0u64..5_000).prop_map(Op::Advance),
        6 => Just(Op::Poll),
        3 => Just(Op::Connected),
        2 => Just(Op::Bytes),
        4 => (
            proptest::option::of(0u8..6),
            proptest::option::of(0u64..3_000),
            any::<bool>(),
            proptest::bool::weighted(0.05)
        )
            .prop_map(|(id, retry, message, is_final)| Op::Event {
                id,
                retry,
                message,
                is_final,
            }),
        3 => failure.prop_map(Op::Fail),
        1 => Just(Op::Complete),
    ]
}

/// Id 0 stands for the explicit empty id (T112).
fn id_text(id: u8) -> String {
    if id == 0 {
        String::new()
    } else {
        format!("s:{id}")
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_inputs_keep_every_invariant(
        kind in prop_oneof![Just(StreamKind::Post), Just(StreamKind::Standalone)],
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let c = Clock::new();
        let mut now = c.at(0);
        let config = ReconnectConfig::default();
        let mut m = match kind {
            StreamKind::Post => Reconnect::post_stream(config, SplitMix64::new(seed), now),
            StreamKind::Standalone => Reconnect::standalone(config, SplitMix64::new(seed), now),
        };
        let mut model = Model::default();
        let mut terminal = false;
        let mut prev = m.poll(now);
        if let Action::Connect { last_event_id } = &prev {
            prop_assert_eq!(last_event_id, &None);
            model.outstanding = true;
        }
        for op in ops {
            let live = matches!(prev, Action::Connecting | Action::Streaming);
            match op {
                Op::Advance(n) => now += ms(n),
                Op::Poll => {}
                Op::Connected => {
                    m.on_connected(now);
                    model.outstanding = false;
                }
                Op::Bytes => m.on_bytes(now),
                Op::Event { id, retry, message, is_final } => {
                    let text = id.map(id_text);
                    let mut event =
                        Event { id: text.as_deref(), message, is_final, ..Event::default() };
                    if let Some(retry) = retry {
                        event = event.with_retry(ms(retry));
                    }
                    m.on_event(now, event);
                    if !terminal {
                        if let Some(text) = text {
                            model.cursor = (!text.is_empty()).then_some(text);
                        }
                        if let Some(retry) = retry {
                            model.retry = Some(ms(retry));
                        }
                    }
                }
                Op::Fail(failure) => {
                    m.on_failure(now, failure);
                    model.outstanding = false;
                    // A wait scheduled by an accepted report honours `retry` and `Retry-After`
                    // (a stale report, made while already waiting, changes nothing).
                    let after = m.poll(now);
                    // With `retry: 0` the reconnect is due at once, so this poll may itself be
                    // the Connect: account for it like the one at the end of the loop.
                    if let Action::Connect { last_event_id } = &after {
                        prop_assert!(!model.outstanding, "second Connect while one is outstanding");
                        model.outstanding = true;
                        prop_assert_eq!(last_event_id, &model.cursor);
                    }
                    if let (true, Action::Wait { until }) = (live, after) {
                        let wait = until - now;
                        if let Some(retry) = model.retry {
                            prop_assert!(wait >= retry, "wait {:?} < retry {:?}", wait, retry);
                            if m.failures() == 0 {
                                prop_assert_eq!(wait, retry);
                            }
                        } else if m.failures() == 0 {
                            prop_assert_eq!(wait, BackoffConfig::default().base);
                        }
                        if let Failure::Status { retry_after: Some(floor), .. } = failure {
                            prop_assert!(wait >= floor);
                        }
                        let ceiling = BackoffConfig::default()
                            .cap
                            .max(model.retry.unwrap_or_default())
                            .max(secs(5));
                        prop_assert!(wait <= ceiling);
                    }
                }
                Op::Complete => m.on_complete(),
            }
            prev = m.poll(now);
            match &prev {
                Action::Connect { last_event_id } => {
                    prop_assert!(!model.outstanding, "second Connect while one is outstanding");
                    model.outstanding = true;
                    prop_assert_eq!(last_event_id, &model.cursor);
                    if kind == StreamKind::Post {
                        prop_assert!(last_event_id.is_some());
                    }
                }
                Action::Connecting => prop_assert!(model.outstanding),
                Action::Done | Action::GiveUp(_) => terminal = true,
                Action::Wait { until } => prop_assert!(*until > now),
                Action::Streaming => prop_assert!(!model.outstanding),
            }
            if let Action::GiveUp(GiveUpReason::BudgetExhausted { attempts, .. }) = &prev {
                prop_assert!(*attempts <= config.budget.max_attempts);
            }
            if terminal {
                prop_assert!(matches!(m.poll(now + secs(1)), Action::Done | Action::GiveUp(_)));
                prop_assert_eq!(m.idle_deadline(), None);
            } else {
                prop_assert_eq!(m.cursor(), model.cursor.as_deref());
                prop_assert_eq!(m.retry(), model.retry);
            }
        }
    }
}
