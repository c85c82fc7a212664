//! The decoder's named limits: each one is hit, the error is typed, items before the
//! offending line still arrive, the decoder stays poisoned, and memory stays bounded.

use proptest::prelude::*;
use tether_sse::{
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES, DecodeError, Decoder, Event, Item, Limits,
};

fn small(max_line: usize, max_event: usize) -> Decoder {
    Decoder::with_limits(
        Limits::default()
            .with_max_line_bytes(max_line)
            .with_max_event_bytes(max_event),
    )
}

#[test]
fn defaults_are_the_documented_constants() {
    let limits = Limits::default();
    assert_eq!(limits, Limits::DEFAULT);
    assert_eq!(limits.max_line_bytes(), DEFAULT_MAX_LINE_BYTES);
    assert_eq!(limits.max_event_bytes(), DEFAULT_MAX_EVENT_BYTES);
    assert!(DEFAULT_MAX_LINE_BYTES > DEFAULT_MAX_EVENT_BYTES + "data: ".len());
    assert_eq!(Decoder::new().limits(), Limits::DEFAULT);
}

#[test]
fn a_complete_line_longer_than_the_limit_is_line_too_long() {
    let mut decoder = small(16, 1024);
    decoder.feed(b"data: 0123456789\n\ndata: 01234567890\n\n");
    // Exactly at the limit (16 bytes) is fine.
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("0123456789"))))
    );
    let error = DecodeError::LineTooLong { limit: 16 };
    assert_eq!(decoder.next_item(), Err(error.clone()));
    assert_eq!(error.to_string(), "line longer than 16 bytes");
    // Poisoned: the same error again, and input is ignored.
    decoder.feed(b"data: ok\n\n");
    assert_eq!(decoder.next_item(), Err(error.clone()));
    assert_eq!(decoder.buffered_len(), 0);
    decoder.finish();
    assert_eq!(decoder.next_item(), Err(error));
}

#[test]
fn an_incomplete_line_is_reported_as_soon_as_it_outgrows_the_limit() {
    let limit = 4096;
    let mut decoder = small(limit, limit);
    decoder.feed(b"data: before\n\n");
    decoder.feed(b"data: ");
    let chunk = [b'x'; 1000];
    let mut fed = "data: ".len();
    loop {
        decoder.feed(&chunk);
        fed += chunk.len();
        assert!(decoder.buffered_len() <= limit + "data: before\n\n".len());
        if fed > limit {
            break;
        }
    }
    // No terminator has arrived, yet the line is known to be too long.
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("before"))))
    );
    assert_eq!(decoder.next_item(), Err(DecodeError::LineTooLong { limit }));
    assert_eq!(decoder.buffered_len(), 0);
}

#[test]
fn an_incomplete_line_at_exactly_the_limit_is_still_accepted() {
    let mut decoder = small(10, 100);
    decoder.feed(b"data: 1234");
    assert_eq!(decoder.next_item(), Ok(None));
    decoder.feed(b"\n\n");
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("1234"))))
    );
}

#[test]
fn over_long_comments_and_unknown_fields_count_too() {
    for stream in [&b": 0123456789abcdef\n"[..], b"foo: 0123456789abcdef"] {
        let mut decoder = small(8, 1024);
        decoder.feed(stream);
        assert_eq!(
            decoder.next_item(),
            Err(DecodeError::LineTooLong { limit: 8 })
        );
    }
}

#[test]
fn event_data_larger_than_the_limit_is_event_too_large() {
    let mut decoder = small(1024, 10);
    // 5 + LF + 4 = 10 bytes: at the limit.
    decoder.feed(b"data: 12345\ndata: 1234\n\n");
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("12345\n1234"))))
    );
    decoder.feed(b"data: 12345\ndata: 12345\n\n");
    let error = DecodeError::EventTooLarge { limit: 10 };
    assert_eq!(decoder.next_item(), Err(error.clone()));
    assert_eq!(error.to_string(), "event data larger than 10 bytes");
    assert_eq!(decoder.next_item(), Err(error));
}

#[test]
fn many_empty_data_lines_count_toward_the_event_limit() {
    let mut decoder = small(1024, 100);
    decoder.feed(&b"data\n".repeat(102));
    assert_eq!(
        decoder.next_item(),
        Err(DecodeError::EventTooLarge { limit: 100 })
    );
}

/// 16 MiB, written out rather than taken from [`DEFAULT_MAX_EVENT_BYTES`], so that a changed
/// default fails the tests that use it.
const SIXTEEN_MIB: usize = 16 * 1024 * 1024;

/// The defaults admit a 16 MiB JSON-RPC message on one line and refuse one byte more.
/// Guards decode.rs: the `*`s of `DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024`.
#[test]
fn default_limits_admit_exactly_the_default_event_size() {
    let data = "x".repeat(SIXTEEN_MIB);
    let mut decoder = Decoder::new();
    for chunk in [b"data: ", data.as_bytes(), b"\n\n"] {
        decoder.feed(chunk);
    }
    let Ok(Some(Item::Event(event))) = decoder.next_item() else {
        panic!("a 16 MiB event decodes with the default limits")
    };
    assert_eq!(event.data().len(), SIXTEEN_MIB);
    drop(event);
    for chunk in [b"data: x", data.as_bytes(), b"\n\n"] {
        decoder.feed(chunk);
    }
    assert_eq!(
        decoder.next_item(),
        Err(DecodeError::EventTooLarge { limit: SIXTEEN_MIB })
    );
}

/// The default line limit is the 16 MiB event plus 1 KiB: a comment line of exactly that
/// length passes and one byte more is refused, whether it arrives in one chunk or split
/// (held as an incomplete line, continued, then terminated). Guards decode.rs: the `+` of
/// `DEFAULT_MAX_LINE_BYTES = DEFAULT_MAX_EVENT_BYTES + 1024`, and the `*`s of the event
/// default it is built on.
#[test]
fn default_limits_admit_a_line_of_exactly_16_mib_plus_1_kib() {
    let limit = SIXTEEN_MIB + 1024;
    let half = limit / 2;
    let too_long = DecodeError::LineTooLong { limit };
    let mut line = vec![b'c'; limit + 2];
    line[0] = b':';
    *line.last_mut().unwrap() = b'\n';
    // `line` is a comment one byte over the limit; `at_limit` is one `c` shorter.
    let at_limit = [&line[..limit], b"\n"].concat();

    let mut decoder = Decoder::new();
    decoder.feed(&at_limit);
    let Ok(Some(Item::Comment(text))) = decoder.next_item() else {
        panic!("a line of exactly the default limit, in one chunk, is accepted")
    };
    assert_eq!(text.len(), limit - 1);

    let mut decoder = Decoder::new();
    for chunk in [&at_limit[..half], &at_limit[half..limit], b"\n"] {
        decoder.feed(chunk);
    }
    let Ok(Some(Item::Comment(text))) = decoder.next_item() else {
        panic!("a line of exactly the default limit, in three chunks, is accepted")
    };
    assert_eq!(text.len(), limit - 1);

    let mut decoder = Decoder::new();
    decoder.feed(&line);
    assert_eq!(decoder.next_item(), Err(too_long.clone()));

    let mut decoder = Decoder::new();
    decoder.feed(&line[..half]);
    decoder.feed(&line[half..=limit]);
    // Refused before its terminator arrives.
    assert_eq!(decoder.next_item(), Err(too_long));
}

/// Feeds `stream` cut at `cuts` (ascending), then pulls until the decoder has nothing more
/// to give: the items, then the error it stopped on, if any.
fn outcome(limits: Limits, stream: &[u8], cuts: &[usize]) -> (Vec<Item>, Option<DecodeError>) {
    let mut decoder = Decoder::with_limits(limits);
    let mut start = 0;
    for &cut in cuts.iter().chain([&stream.len()]) {
        decoder.feed(&stream[start..cut]);
        start = cut;
    }
    let mut items = Vec::new();
    loop {
        match decoder.next_item() {
            Ok(Some(item)) => items.push(item),
            Ok(None) => return (items, None),
            Err(error) => return (items, Some(error)),
        }
    }
}

/// Every way of cutting `stream` into three chunks (some possibly empty) gives `expected`.
fn assert_every_cut(limits: Limits, stream: &[u8], expected: &(Vec<Item>, Option<DecodeError>)) {
    for first in 0..=stream.len() {
        for second in first..=stream.len() {
            assert_eq!(
                &outcome(limits, stream, &[first, second]),
                expected,
                "{:?} cut at {first} and {second}",
                String::from_utf8_lossy(stream),
            );
        }
    }
}

/// A line of exactly `max_line_bytes` is accepted and one byte more is `LineTooLong`, with
/// or without its terminator, however it is cut into chunks. Guards decode.rs `interpret`:
/// `>` in the line-limit check on an incomplete line continued by a chunk without a line
/// end, and the `+` adding the held part of a line to the part that completes it.
#[test]
fn the_line_limit_is_exact_however_the_line_is_chunked() {
    let limits = Limits::default()
        .with_max_line_bytes(10)
        .with_max_event_bytes(100);
    let too_long = Some(DecodeError::LineTooLong { limit: 10 });
    let cases: [(&[u8], _); 4] = [
        (
            b"data: 1234\n\n",
            (vec![Item::Event(Event::new("1234"))], None),
        ),
        (b"data: 12345\n\n", (vec![], too_long.clone())),
        (b"data: 1234", (vec![], None)),
        (b"data: 12345", (vec![], too_long)),
    ];
    for (stream, expected) in &cases {
        assert_every_cut(limits, stream, expected);
    }
}

/// A line holding invalid UTF-8 is measured in the bytes received, not decoded (each bad
/// byte becomes a 3-byte U+FFFD), with the same exact boundary. Guards decode.rs
/// `interpret`: `>` in the line-limit check of the lossy path taken after invalid UTF-8.
#[test]
fn a_line_with_invalid_utf8_is_measured_in_received_bytes() {
    let limits = Limits::default()
        .with_max_line_bytes(10)
        .with_max_event_bytes(100);
    let too_long = Some(DecodeError::LineTooLong { limit: 10 });
    let replaced = Item::Comment("\u{FFFD}".into());
    let cases: [(&[u8], _); 4] = [
        (
            b"data: 123\xFF\n\n",
            (vec![Item::Event(Event::new("123\u{FFFD}"))], None),
        ),
        (b"data: 1234\xFF\n\n", (vec![], too_long.clone())),
        (
            b":\xFF\ndata: 1234\n\n",
            (
                vec![replaced.clone(), Item::Event(Event::new("1234"))],
                None,
            ),
        ),
        (b":\xFF\ndata: 12345\n\n", (vec![replaced], too_long)),
    ];
    for (stream, expected) in &cases {
        assert_every_cut(limits, stream, expected);
    }
}

#[test]
fn only_the_incomplete_line_is_held() {
    let mut decoder = Decoder::new();
    decoder.feed(b"data: a\n\ndata: partial");
    assert_eq!(decoder.buffered_len(), "data: partial".len());
    decoder.feed(b"\n\n");
    assert_eq!(decoder.buffered_len(), 0);
    assert_eq!(decoder.next_item(), Ok(Some(Item::Event(Event::new("a")))));
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("partial"))))
    );
    assert_eq!(decoder.next_item(), Ok(None));
}

proptest! {
    /// However an endless line is chunked, and however often the caller pulls, the
    /// decoder never holds more than the limit of it and reports it once it is over.
    #[test]
    fn an_endless_line_never_holds_more_than_the_limit(
        limit in 1usize..2048,
        chunks in prop::collection::vec(1usize..700, 1..40),
        pull_every in 1usize..4,
    ) {
        let mut decoder = small(limit, usize::MAX);
        let mut fed = 0;
        let mut reported = false;
        for (n, len) in chunks.into_iter().enumerate() {
            decoder.feed(&vec![b'a'; len]);
            fed += len;
            prop_assert!(decoder.buffered_len() <= limit);
            if n % pull_every == 0 {
                match decoder.next_item() {
                    Ok(None) => prop_assert!(fed <= limit),
                    Err(error) => {
                        prop_assert_eq!(error, DecodeError::LineTooLong { limit });
                        prop_assert!(fed > limit);
                        reported = true;
                    }
                    Ok(Some(item)) => prop_assert!(false, "unexpected {:?}", item),
                }
            }
        }
        if fed > limit {
            prop_assert_eq!(decoder.next_item(), Err(DecodeError::LineTooLong { limit }));
            prop_assert_eq!(decoder.buffered_len(), 0);
        } else {
            prop_assert!(!reported);
        }
    }
}
