//! Session, stream and event ids: generation (T35, T36), the strict `<stream>:<seq>` grammar
//! (T65, docs/CONTRACTS.md#event-ids) and serde forms.

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use tether_proto::ids::{
    EventId, EventIdError, SessionId, SessionIdError, StreamId, StreamIdError,
};

const SAMPLE: usize = 100_000;

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// A fixed, valid stream id for the malformed-input cases.
fn stream() -> StreamId {
    StreamId::from_random_bytes([7; 16])
}

// ----- generation -------------------------------------------------------------------------

/// T36: 128-bit CSPRNG ids never collide in a large sample; each one is well-formed.
#[test]
fn generated_stream_ids_are_unique_22_char_base64url_and_parse_back() {
    let mut seen = HashSet::with_capacity(SAMPLE);
    for _ in 0..SAMPLE {
        let id = StreamId::generate();
        let s = id.as_str();
        assert_eq!(s.len(), StreamId::LEN);
        assert!(s.bytes().all(is_base64url), "{s}");
        assert_eq!(StreamId::parse(s), Ok(id));
        assert!(seen.insert(id), "duplicate stream id {s}");
    }
}

/// T35, T36: generated session ids are unique, visible ASCII, 22 characters, and parse back.
#[test]
fn generated_session_ids_are_unique_visible_ascii_and_parse_back() {
    let mut seen = HashSet::with_capacity(SAMPLE);
    for _ in 0..SAMPLE {
        let id = SessionId::generate();
        let s = id.as_str();
        assert_eq!(s.len(), 22);
        assert!(s.bytes().all(|b| (0x21..=0x7E).contains(&b)), "{s}");
        assert!(s.bytes().all(is_base64url), "{s}");
        assert_eq!(SessionId::parse(s).as_ref(), Ok(&id));
        let s = s.to_owned();
        assert!(seen.insert(id), "duplicate session id {s}");
    }
}

#[test]
fn generated_ids_are_not_all_alike_in_any_position() {
    // A weak predictability smoke test: every character position varies across a sample
    // (the last position only takes four values, A Q g w, by construction).
    let ids: Vec<StreamId> = (0..1000).map(|_| StreamId::generate()).collect();
    for pos in 0..StreamId::LEN {
        let distinct: HashSet<u8> = ids.iter().map(|id| id.as_str().as_bytes()[pos]).collect();
        let expected = if pos == StreamId::LEN - 1 { 4 } else { 32 };
        assert!(
            distinct.len() >= expected,
            "position {pos}: {}",
            distinct.len()
        );
    }
}

#[test]
fn from_random_bytes_is_plain_base64url() {
    let bytes = [0xFB; 16];
    let expected = URL_SAFE_NO_PAD.encode(bytes);
    assert_eq!(StreamId::from_random_bytes(bytes).as_str(), expected);
    assert_eq!(SessionId::from_random_bytes(bytes).as_str(), expected);
    // 0xFB.. exercises both URL-safe characters rather than `+` and `/`.
    assert!(
        expected.contains('-') && expected.contains('_'),
        "{expected}"
    );
}

// ----- SessionId parsing (T35: peers issue other shapes) ---------------------------------

#[test]
fn session_id_accepts_peer_shapes() {
    for id in [
        "a",
        "123e4567-e89b-12d3-a456-426614174000",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "!~\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}",
    ] {
        assert_eq!(
            SessionId::parse(id).map(|s| s.to_string()),
            Ok(id.to_owned())
        );
    }
    let longest = "x".repeat(SessionId::MAX_LEN);
    assert!(SessionId::parse(&longest).is_ok());
}

#[test]
fn session_id_rejects_empty() {
    assert_eq!(SessionId::parse(""), Err(SessionIdError::Empty));
}

#[test]
fn session_id_rejects_over_max_len() {
    let long = "x".repeat(SessionId::MAX_LEN + 1);
    assert_eq!(SessionId::parse(&long), Err(SessionIdError::TooLong));
}

#[test]
fn session_id_rejects_space_control_del_and_non_ascii() {
    for id in [
        "a b",
        " a",
        "a\t",
        "a\r\nb",
        "\0",
        "a\u{7f}",
        "caf\u{e9}",
        "\u{1F600}",
    ] {
        assert_eq!(
            SessionId::parse(id),
            Err(SessionIdError::InvalidCharacter),
            "{id:?}"
        );
    }
}

// ----- StreamId parsing --------------------------------------------------------------------

#[test]
fn stream_id_rejects_wrong_length() {
    let ok = stream().to_string();
    for s in ["", &ok[..21], &format!("{ok}A"), &ok[1..]] {
        assert_eq!(StreamId::parse(s), Err(StreamIdError::Length), "{s:?}");
    }
}

#[test]
fn stream_id_rejects_characters_outside_base64url() {
    for bad in ['+', '/', '=', ' ', '.', ':'] {
        let s = format!("{bad}{}", &stream().to_string()[1..]);
        assert_eq!(StreamId::parse(&s), Err(StreamIdError::Alphabet), "{s:?}");
    }
    // 22 bytes, but not 22 ASCII characters.
    let s = format!("\u{e9}{}", &stream().to_string()[2..]);
    assert_eq!(s.len(), 22);
    assert_eq!(StreamId::parse(&s), Err(StreamIdError::Alphabet));
}

#[test]
fn stream_id_rejects_non_canonical_padding_bits() {
    let base = "AAAAAAAAAAAAAAAAAAAAA";
    for last in ['A', 'Q', 'g', 'w'] {
        assert!(StreamId::parse(&format!("{base}{last}")).is_ok(), "{last}");
    }
    for last in ['B', 'P', 'R', 'h', 'x', '_', '-', '9'] {
        assert_eq!(
            StreamId::parse(&format!("{base}{last}")),
            Err(StreamIdError::NonCanonical),
            "{last}"
        );
    }
}

// ----- EventId -----------------------------------------------------------------------------

#[test]
fn event_id_displays_stream_colon_seq() {
    let id = EventId::new(stream(), 42);
    assert_eq!(id.to_string(), format!("{}:42", stream()));
    assert_eq!(id.to_string().parse(), Ok(id));
}

/// T65: the stream is recoverable from the id alone.
#[test]
fn event_id_names_its_stream() {
    let s = StreamId::generate();
    let id: EventId = format!("{s}:9").parse().unwrap();
    assert_eq!(id.stream, s);
    assert_eq!(id.seq, 9);
}

#[test]
fn priming_event_is_seq_zero_and_next_counts_up() {
    let p = EventId::priming(stream());
    assert_eq!(p.seq, EventId::PRIMING_SEQ);
    assert_eq!(EventId::PRIMING_SEQ, 0);
    assert_eq!(p.to_string(), format!("{}:0", stream()));
    assert_eq!(p.next(), Some(EventId::new(stream(), 1)));
    assert_eq!(EventId::new(stream(), u64::MAX).next(), None);
}

#[test]
fn event_id_max_len_is_the_longest_display() {
    let id = EventId::new(stream(), u64::MAX);
    assert_eq!(id.to_string().len(), EventId::MAX_LEN);
    assert_eq!(id.to_string().parse(), Ok(id));
}

fn parse_err(s: &str) -> EventIdError {
    s.parse::<EventId>().expect_err(s)
}

#[test]
fn event_id_rejects_empty() {
    assert_eq!(parse_err(""), EventIdError::Empty);
}

#[test]
fn event_id_rejects_missing_separator() {
    assert_eq!(
        parse_err(&stream().to_string()),
        EventIdError::MissingSeparator
    );
    assert_eq!(parse_err("12"), EventIdError::MissingSeparator);
}

#[test]
fn event_id_rejects_extra_separator() {
    let s = stream();
    assert_eq!(parse_err(&format!("{s}:1:2")), EventIdError::ExtraSeparator);
    assert_eq!(parse_err(&format!("{s}::1")), EventIdError::ExtraSeparator);
    assert_eq!(parse_err(&format!("{s}:1:")), EventIdError::ExtraSeparator);
}

#[test]
fn event_id_rejects_bad_stream() {
    assert_eq!(parse_err(":1"), EventIdError::Stream(StreamIdError::Length));
    assert_eq!(
        parse_err("short:1"),
        EventIdError::Stream(StreamIdError::Length)
    );
    assert_eq!(
        parse_err("AAAAAAAAAAAAAAAAAAAAA=:1"),
        EventIdError::Stream(StreamIdError::Alphabet)
    );
    assert_eq!(
        parse_err("AAAAAAAAAAAAAAAAAAAA/A:1"),
        EventIdError::Stream(StreamIdError::Alphabet)
    );
    assert_eq!(
        parse_err("AAAAAAAAAAAAAAAAAAAAAB:1"),
        EventIdError::Stream(StreamIdError::NonCanonical)
    );
    // Peers' shapes (a bare integer, a UUID) are not ours: malformed, not a panic.
    assert!(matches!(
        parse_err("123e4567-e89b-12d3-a456-426614174000"),
        EventIdError::MissingSeparator
    ));
    // Whitespace is not trimmed at this layer (headers::parse_last_event_id does that).
    assert_eq!(
        parse_err(&format!(" {}:1", stream())),
        EventIdError::Stream(StreamIdError::Length)
    );
}

#[test]
fn event_id_rejects_empty_seq() {
    assert_eq!(parse_err(&format!("{}:", stream())), EventIdError::EmptySeq);
}

#[test]
fn event_id_rejects_non_decimal_seq() {
    let s = stream();
    for seq in [
        "+1", "-1", " 1", "1 ", "1\n", "0x10", "1e3", "1.0", "one", "\u{0661}", "１",
    ] {
        assert_eq!(
            parse_err(&format!("{s}:{seq}")),
            EventIdError::SeqNotDecimal,
            "{seq:?}"
        );
    }
}

#[test]
fn event_id_rejects_leading_zero_seq() {
    let s = stream();
    for seq in ["00", "01", "007", "0000000000000000000001"] {
        assert_eq!(
            parse_err(&format!("{s}:{seq}")),
            EventIdError::SeqLeadingZero,
            "{seq}"
        );
    }
    assert_eq!(format!("{s}:0").parse::<EventId>().map(|id| id.seq), Ok(0));
}

#[test]
fn event_id_rejects_seq_overflow() {
    let s = stream();
    assert_eq!(
        format!("{s}:18446744073709551615")
            .parse::<EventId>()
            .map(|id| id.seq),
        Ok(u64::MAX)
    );
    for seq in [
        "18446744073709551616",
        "99999999999999999999",
        "100000000000000000000000",
    ] {
        assert_eq!(
            parse_err(&format!("{s}:{seq}")),
            EventIdError::SeqOverflow,
            "{seq}"
        );
    }
}

#[test]
fn errors_display_short_lower_case() {
    let errors: Vec<String> = vec![
        EventIdError::Empty.to_string(),
        EventIdError::SeqOverflow.to_string(),
        EventIdError::Stream(StreamIdError::NonCanonical).to_string(),
        StreamIdError::Alphabet.to_string(),
        SessionIdError::TooLong.to_string(),
    ];
    for e in errors {
        assert!(e.starts_with(|c: char| c.is_ascii_lowercase()), "{e}");
        assert!(!e.ends_with('.'), "{e}");
    }
}

// ----- serde -------------------------------------------------------------------------------

#[test]
fn ids_serialize_as_strings_and_deserialize_strictly() {
    let event = EventId::new(stream(), 5);
    let json = serde_json::to_string(&event).unwrap();
    assert_eq!(json, format!("\"{event}\""));
    assert_eq!(serde_json::from_str::<EventId>(&json).unwrap(), event);
    assert!(serde_json::from_str::<EventId>(&format!("\"{}:05\"", stream())).is_err());

    let s = stream();
    assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
    assert_eq!(
        serde_json::from_str::<StreamId>(&format!("\"{s}\"")).unwrap(),
        s
    );
    assert!(serde_json::from_str::<StreamId>("\"AAAAAAAAAAAAAAAAAAAAAB\"").is_err());

    let session = SessionId::parse("abc-123").unwrap();
    assert_eq!(serde_json::to_string(&session).unwrap(), "\"abc-123\"");
    assert_eq!(
        serde_json::from_str::<SessionId>("\"abc-123\"").unwrap(),
        session
    );
    assert!(serde_json::from_str::<SessionId>("\"a b\"").is_err());
    assert!(serde_json::from_str::<SessionId>("\"\"").is_err());
}

// ----- properties --------------------------------------------------------------------------

/// Strings near the grammar, so that the properties below hit the interesting boundaries.
fn near_event_id() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[A-Za-z0-9_+/=-]{20,23}:[0-9]{0,22}",
        "[A-Za-z0-9_-]{21}[AQgwBx]:[0-9+ -]{0,21}",
        "[A-Za-z0-9_-]{21}[AQgw]:(0|[1-9][0-9]{0,19})",
        "[A-Za-z0-9_-]{21}[AQgw]:{0,3}[0-9]{0,3}:{0,2}",
    ]
}

proptest! {
    #[test]
    fn display_then_parse_round_trips(bytes in any::<[u8; 16]>(), seq in any::<u64>()) {
        let id = EventId::new(StreamId::from_random_bytes(bytes), seq);
        prop_assert_eq!(id.to_string().parse::<EventId>(), Ok(id));
        prop_assert_eq!(id.stream.as_str().parse::<StreamId>(), Ok(id.stream));
        prop_assert!(id.to_string().len() <= EventId::MAX_LEN);
    }

    /// Never panics; accepts only canonical strings (one id, one spelling).
    #[test]
    fn parse_accepts_only_canonical_strings(s in near_event_id()) {
        if let Ok(id) = s.parse::<EventId>() {
            prop_assert_eq!(id.to_string(), s);
        }
    }

    /// The hand-written canonical check agrees with "decode then re-encode round-trips".
    #[test]
    fn stream_id_parse_matches_base64_round_trip(s in "[A-Za-z0-9_-]{22}") {
        let round_trips = URL_SAFE_NO_PAD
            .decode(&s)
            .is_ok_and(|bytes| bytes.len() == 16 && URL_SAFE_NO_PAD.encode(&bytes) == s);
        prop_assert_eq!(StreamId::parse(&s).is_ok(), round_trips);
    }

    #[test]
    fn session_id_parse_never_panics_and_preserves_value(s in any::<String>()) {
        if let Ok(id) = SessionId::parse(&s) {
            prop_assert_eq!(id.as_str(), s.as_str());
        }
    }
}
