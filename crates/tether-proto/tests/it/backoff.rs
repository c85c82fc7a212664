//! Backoff arithmetic, `retry` and `Retry-After` handling, and budgets
//! (docs/CONTRACTS.md#client-reconnect-timing; docs/PROTOCOL.md T81, T82).

use std::time::Duration;

use proptest::prelude::*;
use tether_proto::backoff::{
    BackoffConfig, Budget, DEFAULT_BASE, DEFAULT_CAP, DEFAULT_FACTOR, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_ELAPSED, RandomSource, SplitMix64, parse_retry_after,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn max_jitter() -> impl FnMut() -> u64 {
    || u64::MAX
}

fn min_jitter() -> impl FnMut() -> u64 {
    || 0
}

#[test]
fn defaults_match_the_documented_constants() {
    let config = BackoffConfig::default();
    assert_eq!(config.base, DEFAULT_BASE);
    assert_eq!(config.base, Duration::from_secs(1));
    assert_eq!(config.factor, DEFAULT_FACTOR);
    assert_eq!(config.cap, DEFAULT_CAP);
    assert_eq!(config.cap, Duration::from_secs(30));
    let budget = Budget::default();
    assert_eq!(budget.max_attempts, DEFAULT_MAX_ATTEMPTS);
    assert_eq!(budget.max_elapsed, DEFAULT_MAX_ELAPSED);
}

#[test]
fn steps_grow_by_the_factor_until_the_cap() {
    let config = BackoffConfig::default();
    assert_eq!(config.step(0), ms(1000));
    assert_eq!(config.step(1), ms(1500));
    assert_eq!(config.step(2), ms(2250));
    assert_eq!(config.step(3), ms(3375));
    // 1.5^8 = 25.6 s, 1.5^9 = 38.4 s > cap.
    assert!(config.step(8) < DEFAULT_CAP);
    assert_eq!(config.step(9), DEFAULT_CAP);
    assert_eq!(config.step(100), DEFAULT_CAP);
}

#[test]
fn steps_saturate_instead_of_overflowing() {
    let config = BackoffConfig::new(Duration::MAX, f64::MAX, Duration::MAX);
    assert_eq!(config.step(0), Duration::MAX);
    assert_eq!(config.step(u32::MAX), Duration::MAX);
    let config = BackoffConfig::new(ms(1), 2.0, Duration::MAX);
    assert_eq!(config.step(u32::MAX), Duration::MAX);
    let mut rng = max_jitter();
    // The jitter saturates at u64 nanoseconds rather than panicking.
    assert!(config.jittered(u32::MAX, &mut rng) > Duration::from_secs(500 * 365 * 86_400));
}

#[test]
fn a_factor_below_one_or_nan_means_a_constant_step() {
    for factor in [0.5, 0.0, -3.0, f64::NAN] {
        let config = BackoffConfig::new(ms(200), factor, ms(1000));
        assert_eq!(config.step(0), ms(200), "factor {factor}");
        assert_eq!(config.step(7), ms(200), "factor {factor}");
    }
}

#[test]
fn a_base_above_the_cap_is_capped() {
    let config = BackoffConfig::new(ms(5000), 2.0, ms(1000));
    assert_eq!(config.step(0), ms(1000));
}

#[test]
fn full_jitter_spans_zero_to_the_step() {
    let config = BackoffConfig::default();
    assert_eq!(config.jittered(3, &mut min_jitter()), Duration::ZERO);
    assert_eq!(config.jittered(3, &mut max_jitter()), config.step(3));
    let mut half = || u64::MAX / 2;
    let mid = config.jittered(3, &mut half);
    assert!(mid.abs_diff(config.step(3) / 2) < ms(1), "{mid:?}");
}

#[test]
fn full_jitter_is_roughly_uniform() {
    let config = BackoffConfig::default();
    let mut rng = SplitMix64::new(42);
    let step = config.step(2);
    let n = 10_000u32;
    let mut sum = Duration::ZERO;
    let mut below_quarter = 0u32;
    for _ in 0..n {
        let d = config.jittered(2, &mut rng);
        assert!(d <= step);
        sum += d;
        if d < step / 4 {
            below_quarter += 1;
        }
    }
    let mean = sum / n;
    assert!(mean.abs_diff(step / 2) < step / 20, "mean {mean:?}");
    assert!((2_000..3_000).contains(&below_quarter), "{below_quarter}");
}

#[test]
fn splitmix64_is_the_reference_sequence() {
    // First outputs of splitmix64 seeded with 0 (reference C implementation by Vigna).
    let mut rng = SplitMix64::new(0);
    assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
    assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
}

#[test]
fn splitmix64_replays_from_its_seed() {
    let mut a = SplitMix64::new(7);
    let mut b = SplitMix64::new(7);
    let mut c = SplitMix64::new(8);
    let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
    let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
    let zs: Vec<u64> = (0..5).map(|_| c.next_u64()).collect();
    assert_eq!(xs, ys);
    assert_ne!(xs, zs);
}

#[test]
fn os_entropy_seeds_differ() {
    let mut a = SplitMix64::from_os_entropy().expect("entropy");
    let mut b = SplitMix64::from_os_entropy().expect("entropy");
    assert_ne!(a.next_u64(), b.next_u64());
}

#[test]
fn first_reconnect_waits_exactly_retry_t81() {
    let config = BackoffConfig::default();
    let mut rng = SplitMix64::new(1);
    assert_eq!(config.delay(0, Some(ms(500)), None, &mut rng), ms(500));
    // Exactly, even when `retry` is above the cap or zero: the server decides.
    assert_eq!(
        config.delay(0, Some(ms(120_000)), None, &mut rng),
        ms(120_000)
    );
    assert_eq!(
        config.delay(0, Some(Duration::ZERO), None, &mut rng),
        Duration::ZERO
    );
}

#[test]
fn first_reconnect_without_retry_waits_the_first_step_t82() {
    let config = BackoffConfig::default();
    let mut never = || -> u64 { panic!("the first wait is not jittered") };
    assert_eq!(config.delay(0, None, None, &mut never), ms(1000));
}

#[test]
fn after_a_failure_the_wait_is_max_of_retry_and_jittered_backoff() {
    let config = BackoffConfig::default();
    // Jitter drawn at zero: `retry` is the floor.
    assert_eq!(
        config.delay(1, Some(ms(700)), None, &mut min_jitter()),
        ms(700)
    );
    // Jitter drawn at the top: the backoff step wins once it exceeds `retry`.
    assert_eq!(
        config.delay(1, Some(ms(700)), None, &mut max_jitter()),
        ms(1500)
    );
    assert_eq!(
        config.delay(4, Some(ms(700)), None, &mut max_jitter()),
        config.step(4)
    );
    // A `retry` above the cap stays the floor.
    assert_eq!(
        config.delay(20, Some(ms(45_000)), None, &mut max_jitter()),
        ms(45_000)
    );
    // No `retry`: pure full jitter.
    assert_eq!(
        config.delay(3, None, None, &mut min_jitter()),
        Duration::ZERO
    );
}

#[test]
fn waits_with_maximal_jitter_grow_to_the_cap() {
    let config = BackoffConfig::default();
    let waits: Vec<Duration> = (1..15)
        .map(|n| config.delay(n, Some(ms(100)), None, &mut max_jitter()))
        .collect();
    assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
    assert_eq!(*waits.last().expect("waits"), DEFAULT_CAP);
}

#[test]
fn retry_after_is_a_floor() {
    let config = BackoffConfig::default();
    assert_eq!(
        config.delay(1, Some(ms(500)), Some(ms(10_000)), &mut max_jitter()),
        ms(10_000)
    );
    // Above the cap, too: the cap bounds our growth, not the server's request.
    assert_eq!(
        config.delay(1, None, Some(Duration::from_secs(120)), &mut min_jitter()),
        Duration::from_secs(120)
    );
    // Only a floor: a longer backoff still wins.
    assert_eq!(
        config.delay(9, None, Some(ms(1)), &mut max_jitter()),
        DEFAULT_CAP
    );
}

#[test]
fn retry_after_delay_seconds_parse() {
    assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
    assert_eq!(parse_retry_after("0"), Some(Duration::ZERO));
    assert_eq!(parse_retry_after(" 5\t"), Some(Duration::from_secs(5)));
    assert_eq!(parse_retry_after("007"), Some(Duration::from_secs(7)));
    // Overflow saturates: the server meant "a long time".
    assert_eq!(
        parse_retry_after("99999999999999999999999"),
        Some(Duration::from_secs(u64::MAX))
    );
}

#[test]
fn retry_after_dates_and_garbage_give_no_floor() {
    for value in [
        "Fri, 31 Dec 1999 23:59:59 GMT",
        "",
        "  ",
        "-1",
        "+5",
        "1.5",
        "5s",
        "1 2",
        "١٢",
    ] {
        assert_eq!(parse_retry_after(value), None, "{value:?}");
    }
}

#[test]
fn budget_limits_attempts_and_elapsed_time() {
    let budget = Budget {
        max_attempts: 3,
        max_elapsed: Duration::from_secs(10),
    };
    assert!(budget.allows(0, Duration::ZERO));
    assert!(budget.allows(2, Duration::from_secs(10)));
    assert!(!budget.allows(3, Duration::ZERO));
    assert!(!budget.allows(1, Duration::from_secs(10) + Duration::from_nanos(1)));
    let none = Budget {
        max_attempts: 0,
        max_elapsed: Duration::MAX,
    };
    assert!(!none.allows(0, Duration::ZERO));
}

fn any_config() -> impl Strategy<Value = BackoffConfig> {
    (0u64..100_000, 0.0f64..4.0, 0u64..200_000)
        .prop_map(|(base, factor, cap)| BackoffConfig::new(ms(base), factor, ms(cap)))
}

proptest! {
    #[test]
    fn steps_are_monotone_and_capped(config in any_config(), n in 0u32..200) {
        prop_assert!(config.step(n) <= config.cap);
        prop_assert!(config.step(n) <= config.step(n + 1));
    }

    #[test]
    fn jitter_stays_within_the_step(config in any_config(), n in any::<u32>(), r in any::<u64>()) {
        let mut rng = move || r;
        prop_assert!(config.jittered(n, &mut rng) <= config.step(n));
    }

    #[test]
    fn delay_honours_retry_and_retry_after(
        config in any_config(),
        failures in 0u32..100,
        retry in proptest::option::of(0u64..100_000),
        retry_after in proptest::option::of(0u64..100_000),
        seed in any::<u64>(),
    ) {
        let mut rng = SplitMix64::new(seed);
        let retry = retry.map(ms);
        let retry_after = retry_after.map(ms);
        let wait = config.delay(failures, retry, retry_after, &mut rng);
        let floor = retry_after.unwrap_or(Duration::ZERO);
        prop_assert!(wait >= floor);
        if let Some(retry) = retry {
            prop_assert!(wait >= retry);
            if failures == 0 {
                prop_assert_eq!(wait, retry.max(floor));
            }
        }
        if failures > 0 {
            // Never more than the largest of the three sources.
            let top = config.step(failures).max(retry.unwrap_or_default()).max(floor);
            prop_assert!(wait <= top);
        }
    }

    #[test]
    fn parse_retry_after_never_panics(value in ".*") {
        let _ = parse_retry_after(&value);
    }

    #[test]
    fn parse_retry_after_reads_any_u64(secs in any::<u64>()) {
        prop_assert_eq!(parse_retry_after(&secs.to_string()), Some(Duration::from_secs(secs)));
    }
}
