//! Header handling: `Accept` (T19, T25, T26, docs/PROTOCOL.md#open-10), `Content-Type` (T6,
//! T20), `MCP-Protocol-Version` and negotiation (T50–T52), `Last-Event-ID` (T65, T87) and
//! header names (T46).

use proptest::prelude::*;
use tether_proto::headers::{
    self, Accept, ResponseKind, client_last_event_id, is_event_stream_content_type,
    is_json_content_type, parse_last_event_id, server_accepts,
};
use tether_proto::ids::{EventId, EventIdError, StreamId, StreamIdError};
use tether_proto::version::{self, ProtocolVersion, check_header, negotiate};

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

fn accepts(header: &str, media_type: &str) -> bool {
    Accept::new(Some(header)).accepts(media_type)
}

// ----- header names (T46) ----------------------------------------------------------------

/// T46: the lowercase constants are the same headers as the spec's spellings, in any case.
#[test]
fn header_name_constants_are_lowercase_forms_of_the_spec_spellings() {
    for (lower, spelled) in [
        (headers::MCP_SESSION_ID, headers::spelled::MCP_SESSION_ID),
        (
            headers::MCP_PROTOCOL_VERSION,
            headers::spelled::MCP_PROTOCOL_VERSION,
        ),
        (headers::LAST_EVENT_ID, headers::spelled::LAST_EVENT_ID),
        (headers::TETHER_NODE, headers::spelled::TETHER_NODE),
    ] {
        assert_eq!(lower, spelled.to_ascii_lowercase());
        assert!(lower.eq_ignore_ascii_case(spelled));
    }
    assert!(headers::MCP_SESSION_ID.eq_ignore_ascii_case("MCP-Session-Id"));
    assert_eq!(headers::spelled::MCP_SESSION_ID, "Mcp-Session-Id");
    assert_eq!(
        headers::spelled::MCP_PROTOCOL_VERSION,
        "MCP-Protocol-Version"
    );
    assert_eq!(headers::spelled::LAST_EVENT_ID, "Last-Event-ID");
    assert_eq!(headers::spelled::TETHER_NODE, "Tether-Node");
}

// ----- Accept: the client side (T19, T26) --------------------------------------------------

/// T19: the client's POST `Accept` lists both media types.
#[test]
fn client_post_accept_lists_json_and_event_stream() {
    let accept = Accept::new(Some(headers::CLIENT_POST_ACCEPT));
    assert!(accept.accepts(JSON));
    assert!(accept.accepts(SSE));
    assert!(!accept.accepts("text/html"));
}

/// T26, T86: the client's GET `Accept` lists `text/event-stream`.
#[test]
fn client_get_accept_lists_event_stream() {
    let accept = Accept::new(Some(headers::CLIENT_GET_ACCEPT));
    assert!(accept.accepts(SSE));
    assert!(!accept.accepts(JSON));
}

// ----- Accept: matching (RFC 9110 §12.5.1) -------------------------------------------------

#[test]
fn accept_missing_header_accepts_anything() {
    let accept = Accept::new(None);
    assert!(accept.accepts(JSON));
    assert!(accept.accepts(SSE));
    assert!(server_accepts(None, ResponseKind::Json));
    assert!(server_accepts(None, ResponseKind::EventStream));
}

#[test]
fn accept_empty_value_is_no_preference() {
    for header in ["", "   ", "\t"] {
        assert!(accepts(header, JSON), "{header:?}");
        assert!(accepts(header, SSE), "{header:?}");
    }
}

#[test]
fn accept_exact_types_only_match_themselves() {
    assert!(accepts(JSON, JSON));
    assert!(!accepts(JSON, SSE));
    assert!(accepts(SSE, SSE));
    assert!(!accepts(SSE, JSON));
    assert!(!accepts("application/json-seq", JSON));
    assert!(!accepts("application/jsonx, text/json", JSON));
}

#[test]
fn accept_wildcards() {
    assert!(accepts("*/*", JSON));
    assert!(accepts("*/*", SSE));
    assert!(accepts("text/*", SSE));
    assert!(!accepts("text/*", JSON));
    assert!(accepts("application/*", JSON));
    assert!(!accepts("application/*", SSE));
    // `*/json` is not a valid range (RFC 9110 §12.5.1): skipped.
    assert!(!accepts("*/json", JSON));
}

#[test]
fn accept_is_case_insensitive() {
    assert!(accepts("Application/JSON", JSON));
    assert!(accepts("TEXT/Event-Stream", SSE));
    assert!(accepts("TEXT/*", SSE));
    assert!(Accept::new(Some(JSON)).accepts("APPLICATION/Json"));
    assert!(accepts("text/event-stream;Q=0.5", SSE));
    assert!(!accepts("text/event-stream;Q=0", SSE));
}

#[test]
fn accept_q_zero_means_not_acceptable() {
    for q in ["0", "0.", "0.0", "0.00", "0.000"] {
        assert!(!accepts(&format!("application/json;q={q}"), JSON), "{q}");
    }
    assert!(accepts("application/json;q=0.001", JSON));
    assert!(accepts("application/json;q=1", JSON));
    assert!(accepts("application/json;q=1.000", JSON));
    assert!(accepts("application/json ; q=0.5", JSON));
}

#[test]
fn accept_most_specific_range_decides() {
    // RFC 9110 §12.5.1: the more specific range's weight applies.
    assert!(!accepts("*/*, application/json;q=0", JSON));
    assert!(accepts("*/*, application/json;q=0", SSE));
    assert!(!accepts("text/*;q=0, */*", SSE));
    assert!(accepts("text/*;q=0, */*", JSON));
    assert!(accepts("*/*;q=0, text/event-stream", SSE));
    assert!(!accepts("*/*;q=0, text/event-stream", JSON));
    assert!(accepts("text/*;q=0, text/event-stream;q=0.1", SSE));
    // Equally specific ranges: the highest weight wins.
    assert!(accepts("application/json;q=0, application/json", JSON));
    assert!(accepts("application/json, application/json;q=0", JSON));
}

#[test]
fn accept_ignores_parameters_other_than_q() {
    assert!(accepts("application/json; charset=utf-8", JSON));
    assert!(accepts("text/event-stream;charset=\"utf-8\";q=0.9", SSE));
    assert!(!accepts("application/json;charset=utf-8;q=0", JSON));
    // Malformed parameters are ignored rather than sinking the range.
    assert!(accepts("application/json;charset", JSON));
    assert!(accepts("application/json;;", JSON));
    // Quoted strings may hold `,` and `;` without splitting the list.
    assert!(accepts(
        "text/plain;x=\"a,application/json\", text/event-stream",
        SSE
    ));
    assert!(!accepts("text/plain;x=\"a,application/json\"", JSON));
    assert!(!accepts("text/plain;x=\"a\\\",application/json\"", JSON));
}

#[test]
fn accept_unparseable_q_skips_the_range() {
    for q in [
        "2", "1.5", "1.001", "-1", "0.0001", "high", "", "\"0.5\"", "0,5", ".5",
    ] {
        let header = format!("application/json;q={q}");
        assert!(!accepts(&header, JSON), "{header}");
        // ...without affecting the other ranges.
        assert!(
            accepts(&format!("{header}, text/event-stream"), SSE),
            "{header}"
        );
    }
}

#[test]
fn accept_garbage_accepts_nothing_but_valid_ranges_survive() {
    for header in [
        "garbage",
        "json",
        "/",
        "application/",
        "/json",
        "a b/c",
        ",,,",
        "\u{e9}/x",
    ] {
        assert!(!accepts(header, JSON), "{header:?}");
        assert!(!accepts(header, SSE), "{header:?}");
    }
    assert!(accepts("garbage, , application/json", JSON));
    assert!(accepts("  text/event-stream  ,application/json", SSE));
    // The media type asked about must itself be well-formed.
    assert!(!accepts("*/*", "json"));
}

#[test]
fn accept_media_type_argument_may_carry_parameters() {
    assert!(accepts(JSON, "application/json; charset=utf-8"));
}

// ----- Accept: the lenient server (docs/PROTOCOL.md#open-10) -------------------------------

#[test]
fn server_accepts_json_answer_when_client_lists_json_only() {
    // TS SDK answers 406 here even in JSON mode (typescript-sdk #1944); tether does not.
    assert!(server_accepts(Some(JSON), ResponseKind::Json));
    assert!(!server_accepts(Some(JSON), ResponseKind::EventStream));
}

#[test]
fn server_accepts_sse_answer_when_client_lists_sse_only() {
    assert!(server_accepts(Some(SSE), ResponseKind::EventStream));
    assert!(!server_accepts(Some(SSE), ResponseKind::Json));
}

#[test]
fn server_accepts_wildcard_clients() {
    for kind in [ResponseKind::Json, ResponseKind::EventStream] {
        assert!(server_accepts(Some("*/*"), kind));
        assert!(server_accepts(Some(headers::CLIENT_POST_ACCEPT), kind));
        assert!(!server_accepts(Some("text/html"), kind));
        assert!(!server_accepts(Some("garbage"), kind));
    }
    // Preferences other than q=0 don't stop either answer.
    let header = Some("application/json;q=0.1, text/event-stream");
    assert!(server_accepts(header, ResponseKind::Json));
}

// ----- Content-Type (T6, T20) --------------------------------------------------------------

#[test]
fn json_content_type_accepts_parameters_case_and_whitespace() {
    for value in [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "Application/JSON",
        "  application/json  ",
        "application/json ; charset=utf-8",
        "\tapplication/json;",
    ] {
        assert!(is_json_content_type(value), "{value:?}");
        assert_eq!(
            ResponseKind::from_content_type(value),
            Some(ResponseKind::Json)
        );
    }
}

#[test]
fn json_content_type_rejects_lookalikes() {
    for value in [
        "",
        "application/json-patch+json",
        "application/problem+json",
        "application/jsonl",
        "text/json",
        "application/x-json",
        "application/ json",
        "application /json",
        "application/json, text/plain",
        "application/*",
        "*/*",
        "text/event-stream",
    ] {
        assert!(!is_json_content_type(value), "{value:?}");
    }
}

#[test]
fn event_stream_content_type_accepts_parameters_case_and_whitespace() {
    for value in [
        "text/event-stream",
        "text/event-stream; charset=utf-8",
        "Text/Event-Stream",
        " text/event-stream ",
    ] {
        assert!(is_event_stream_content_type(value), "{value:?}");
        assert_eq!(
            ResponseKind::from_content_type(value),
            Some(ResponseKind::EventStream)
        );
    }
    for value in [
        "",
        "text/event-streams",
        "text/plain",
        "application/json",
        "text/*",
    ] {
        assert!(!is_event_stream_content_type(value), "{value:?}");
    }
}

/// T6: only the two media types classify a response.
#[test]
fn response_kind_classifies_only_the_two_media_types() {
    for value in [
        "text/html",
        "application/octet-stream",
        "",
        "application/problem+json",
    ] {
        assert_eq!(ResponseKind::from_content_type(value), None, "{value:?}");
    }
    assert_eq!(ResponseKind::Json.media_type(), JSON);
    assert_eq!(ResponseKind::EventStream.media_type(), SSE);
}

// ----- MCP-Protocol-Version (T50–T52) ------------------------------------------------------

#[test]
fn versions_spell_order_and_parse() {
    assert_eq!(
        ProtocolVersion::SUPPORTED.map(ProtocolVersion::as_str),
        ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    );
    assert!(ProtocolVersion::SUPPORTED.is_sorted());
    assert_eq!(
        ProtocolVersion::LEGACY.map(ProtocolVersion::as_str),
        ["2025-03-26", "2025-06-18", "2025-11-25"]
    );
    assert!(ProtocolVersion::LEGACY.iter().all(|v| !v.is_modern()));
    assert!(ProtocolVersion::MODERN.is_modern());
    assert!(ProtocolVersion::parse_legacy("2026-07-28").is_err());
    assert_eq!(
        ProtocolVersion::parse("2026-07-28"),
        Ok(ProtocolVersion::V2026_07_28)
    );
    assert_eq!(ProtocolVersion::LATEST_LEGACY, ProtocolVersion::V2025_11_25);
    assert_eq!(
        ProtocolVersion::ASSUMED_WITHOUT_HEADER,
        ProtocolVersion::V2025_03_26
    );
    for v in ProtocolVersion::SUPPORTED {
        assert_eq!(v.as_str().parse(), Ok(v));
        assert_eq!(v.to_string(), v.as_str());
        assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{v}\""));
        assert_eq!(
            serde_json::from_str::<ProtocolVersion>(&format!("\"{v}\"")).unwrap(),
            v
        );
    }
    for bad in [
        "2024-11-05",
        "2026-07-29",
        "",
        "2025-6-18",
        "2025-06-18 ",
        "latest",
    ] {
        assert!(bad.parse::<ProtocolVersion>().is_err(), "{bad:?}");
    }
    assert!(serde_json::from_str::<ProtocolVersion>("\"2024-11-05\"").is_err());
}

/// T52: no header → processed (the session's version applies).
#[test]
fn version_header_missing_is_accepted() {
    assert_eq!(check_header(None), Ok(None));
}

#[test]
fn version_header_supported_is_accepted() {
    for v in ProtocolVersion::LEGACY {
        assert_eq!(check_header(Some(v.as_str())), Ok(Some(v)));
    }
    // Field values arrive without OWS, but tolerate it if an HTTP layer left it.
    assert_eq!(
        check_header(Some(" 2025-06-18\t")),
        Ok(Some(ProtocolVersion::V2025_06_18))
    );
}

/// docs/CONTRACTS.md#negotiated-version: a supported version that differs from the session's is
/// accepted; the session's version stays in force (priming keeps following the negotiated version).
#[test]
fn version_header_different_from_session_is_accepted_and_session_version_stays() {
    let session = negotiate("2025-11-25");
    let header = check_header(Some("2025-03-26"));
    assert_eq!(header, Ok(Some(ProtocolVersion::V2025_03_26)));
    assert!(session.sends_priming_events());
}

/// T51: unsupported or invalid → 400 listing the supported versions (all four: 2026-07-28 is
/// served, but not inside a session).
#[test]
fn version_header_unsupported_is_rejected_with_supported_list() {
    for bad in [
        "2024-11-05",
        "2026-07-28",
        "",
        "garbage",
        "2025-11-25,2025-06-18",
        "2025-13-01",
    ] {
        let err = check_header(Some(bad)).expect_err(bad);
        assert_eq!(err.supported(), ProtocolVersion::SUPPORTED);
        assert_eq!(err.to_string(), "unsupported protocol version");
    }
    let err = check_header(Some("2024-11-05")).unwrap_err();
    let data = serde_json::json!({ "supported": err.supported() });
    assert_eq!(
        data,
        serde_json::json!({ "supported": ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] })
    );
}

#[test]
fn negotiate_keeps_a_supported_request_and_otherwise_offers_latest() {
    for v in ProtocolVersion::LEGACY {
        assert_eq!(negotiate(v.as_str()), v);
    }
    for other in ["2024-11-05", "2026-07-28", "", "nonsense"] {
        assert_eq!(
            negotiate(other),
            ProtocolVersion::LATEST_LEGACY,
            "{other:?}"
        );
    }
    assert_eq!(
        version::negotiate("2025-06-18"),
        ProtocolVersion::V2025_06_18
    );
}

/// T11, T96 (batches), T71/T72 (priming), T50 (client sends the header).
#[test]
fn version_feature_predicates() {
    use ProtocolVersion::*;
    assert!(V2025_03_26.allows_batches());
    assert!(!V2025_06_18.allows_batches());
    assert!(!V2025_11_25.allows_batches());

    assert!(!V2025_03_26.sends_priming_events());
    assert!(!V2025_06_18.sends_priming_events());
    assert!(V2025_11_25.sends_priming_events());

    assert!(!V2025_03_26.requires_protocol_version_header());
    assert!(V2025_06_18.requires_protocol_version_header());
    assert!(V2025_11_25.requires_protocol_version_header());
}

// ----- Last-Event-ID (T65, T87) -----------------------------------------------------------

fn stream() -> StreamId {
    StreamId::from_random_bytes([0x5A; 16])
}

#[test]
fn last_event_id_parses_our_ids() {
    let id = EventId::new(stream(), 17);
    assert_eq!(parse_last_event_id(&id.to_string()), Ok(id));
    assert_eq!(
        parse_last_event_id(&format!("{}:0", stream())),
        Ok(EventId::priming(stream()))
    );
}

#[test]
fn last_event_id_trims_optional_whitespace_only() {
    let id = EventId::new(stream(), 3);
    for value in [format!(" {id}"), format!("{id}\t"), format!(" \t{id} ")] {
        assert_eq!(parse_last_event_id(&value), Ok(id), "{value:?}");
    }
    // Whitespace inside, or other whitespace around, is malformed.
    let s = stream();
    assert_eq!(
        parse_last_event_id(&format!("{s}: 3")),
        Err(EventIdError::SeqNotDecimal)
    );
    assert_eq!(
        parse_last_event_id(&format!("{s}:3\n")),
        Err(EventIdError::SeqNotDecimal)
    );
    assert_eq!(
        parse_last_event_id(&format!("\u{a0}{s}:3")),
        Err(EventIdError::Stream(StreamIdError::Length))
    );
}

/// Every malformed shape is an error (the server answers 400 `malformed`), never a panic.
#[test]
fn last_event_id_rejects_malformed_values() {
    let s = stream();
    let cases: [(&str, EventIdError); 12] = [
        ("", EventIdError::Empty),
        ("   ", EventIdError::Empty),
        ("42", EventIdError::MissingSeparator),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            EventIdError::MissingSeparator,
        ),
        ("_GET_stream_1", EventIdError::MissingSeparator),
        (&format!("{s}"), EventIdError::MissingSeparator),
        (&format!("{s}:1:2"), EventIdError::ExtraSeparator),
        ("stream:1", EventIdError::Stream(StreamIdError::Length)),
        (&format!("{s}:"), EventIdError::EmptySeq),
        (&format!("{s}:-1"), EventIdError::SeqNotDecimal),
        (&format!("{s}:01"), EventIdError::SeqLeadingZero),
        (
            &format!("{s}:18446744073709551616"),
            EventIdError::SeqOverflow,
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(parse_last_event_id(value), Err(expected), "{value:?}");
    }
}

/// T87, and ids stay opaque on the client: sent back byte for byte.
#[test]
fn client_sends_last_event_id_verbatim_or_omits_it() {
    assert_eq!(client_last_event_id(""), None);
    for opaque in ["42", "abc:def:1", "_GET_stream_7", "a\tb", "caf\u{e9}"] {
        assert_eq!(client_last_event_id(opaque), Some(opaque));
    }
    for unsendable in [" 1", "1 ", "\t1", "a\0b", "a\u{7f}", "a\u{1b}[0m"] {
        assert_eq!(client_last_event_id(unsendable), None, "{unsendable:?}");
    }
}

proptest! {
    #[test]
    fn accept_never_panics(header in any::<String>(), media in any::<String>()) {
        let _ = Accept::new(Some(&header)).accepts(&media);
        let _ = Accept::new(Some(&header)).accepts(JSON);
    }

    #[test]
    fn accept_near_grammar_never_panics(
        header in r#"[a-z*/;=q0-9. ,"\\]{0,40}"#,
    ) {
        let _ = server_accepts(Some(&header), ResponseKind::Json);
        let _ = server_accepts(Some(&header), ResponseKind::EventStream);
    }

    #[test]
    fn content_type_and_version_checks_never_panic(value in any::<String>()) {
        let _ = is_json_content_type(&value);
        let _ = is_event_stream_content_type(&value);
        let _ = check_header(Some(&value));
        let _ = negotiate(&value);
        let _ = parse_last_event_id(&value);
        let _ = client_last_event_id(&value);
    }

    /// A listed type with a q-value in (0, 1] is acceptable; with q = 0 it is not.
    #[test]
    fn listed_type_acceptable_iff_weight_positive(thousandths in 0u16..=1000) {
        let q = if thousandths == 1000 {
            "1".to_owned()
        } else {
            format!("0.{thousandths:03}")
        };
        let header = format!("text/event-stream;q={q}");
        prop_assert_eq!(accepts(&header, SSE), thousandths > 0);
    }
}

/// docs/CONTRACTS.md#eras: `--eras` takes `both`, `legacy` or `modern` (default `both`), and
/// each names exactly the versions it serves, which every unsupported-version answer and
/// `server/discover` list.
#[test]
fn eras_parse_their_flag_values_and_name_the_versions_they_serve() {
    use tether_proto::version::Eras;
    assert_eq!(Eras::default(), Eras::Both);
    for eras in Eras::ALL {
        assert_eq!(eras.as_str().parse::<Eras>(), Ok(eras));
    }
    assert!("Both".parse::<Eras>().is_err(), "spelled exactly");
    assert!("".parse::<Eras>().is_err());
    assert_eq!(
        Eras::Both.version_strings(),
        ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
    );
    assert_eq!(
        Eras::Legacy.version_strings(),
        ["2025-03-26", "2025-06-18", "2025-11-25"]
    );
    assert_eq!(Eras::Modern.version_strings(), ["2026-07-28"]);
    assert!(Eras::Legacy.serves_legacy() && !Eras::Legacy.serves_modern());
    assert!(!Eras::Modern.serves_legacy() && Eras::Modern.serves_modern());
    assert!(Eras::Both.serves_legacy() && Eras::Both.serves_modern());
}
