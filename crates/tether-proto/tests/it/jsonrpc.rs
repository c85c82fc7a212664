//! Behaviour of the JSON-RPC envelope: classification, batch rules, error codes and exact
//! round trips. Checklist numbers (T…) are the rules of docs/PROTOCOL.md#checklist.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tether_proto::jsonrpc::{
    Batching, Body, ErrorObject, ErrorResponse, ErrorResponseId, INTERNAL_ERROR, INVALID_PARAMS,
    INVALID_REQUEST, JsonInteger, METHOD_NOT_FOUND, Message, MessageError, Notification,
    PARSE_ERROR, ParseError, ProgressToken, Request, RequestId, Response, parse_body,
};

fn parse_single(text: &str) -> Message {
    match parse_body(text.as_bytes(), Batching::Forbidden) {
        Ok(Body::Single(message)) => message,
        other => panic!("expected a single message from {text}, got {other:?}"),
    }
}

fn message_error(text: &str) -> MessageError {
    match parse_body(text.as_bytes(), Batching::Allowed) {
        Err(error @ ParseError::InvalidMessage { .. }) => {
            assert_eq!(error.code(), INVALID_REQUEST, "{text}");
            match error {
                ParseError::InvalidMessage { error, .. } => error,
                _ => unreachable!(),
            }
        }
        other => panic!("expected an invalid message from {text}, got {other:?}"),
    }
}

fn as_value(message: &Message) -> Value {
    serde_json::from_slice(&message.to_vec()).expect("serialized message is JSON")
}

// ---------------------------------------------------------------------------------------------
// Standard codes

#[test]
fn standard_error_codes_have_their_json_rpc_values() {
    assert_eq!(PARSE_ERROR, -32700);
    assert_eq!(INVALID_REQUEST, -32600);
    assert_eq!(METHOD_NOT_FOUND, -32601);
    assert_eq!(INVALID_PARAMS, -32602);
    assert_eq!(INTERNAL_ERROR, -32603);
}

// ---------------------------------------------------------------------------------------------
// Ids (T93)

#[test]
fn string_id_and_integer_id_with_same_digits_are_different_ids() {
    let string = parse_single(r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#);
    let integer = parse_single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(string.id(), Some(&RequestId::from("1")));
    assert_eq!(integer.id(), Some(&RequestId::from(1_i64)));
    assert_ne!(string.id(), integer.id());
    assert_eq!(as_value(&string)["id"], json!("1"));
    assert_eq!(as_value(&integer)["id"], json!(1));
}

#[test]
fn integer_ids_survive_exactly_at_the_ends_of_i64_and_u64() {
    for id in [
        "0",
        "-1",
        "-9223372036854775808",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let message = parse_single(&text);
        let written = String::from_utf8(message.to_vec()).unwrap();
        assert!(
            written.contains(&format!(r#""id":{id}"#)),
            "{id} became {written}"
        );
    }
    let big = parse_single(r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#);
    assert_eq!(big.id(), Some(&RequestId::from(u64::MAX)));
    let negative = parse_single(r#"{"jsonrpc":"2.0","id":-5,"method":"ping"}"#);
    let Some(RequestId::Integer(n)) = negative.id() else {
        panic!("not an integer id")
    };
    assert_eq!((n.as_i64(), n.as_u64()), (Some(-5), None));
}

#[test]
fn same_integer_from_i64_and_u64_is_one_id() {
    assert_eq!(RequestId::from(7_i64), RequestId::from(7_u64));
    assert_eq!(JsonInteger::from(7_i64), JsonInteger::from(7_u64));
}

#[test]
fn empty_string_is_a_valid_id() {
    let message = parse_single(r#"{"jsonrpc":"2.0","id":"","method":"ping"}"#);
    assert_eq!(message.id(), Some(&RequestId::from("")));
}

#[test]
fn ids_that_are_not_strings_or_exact_integers_are_invalid() {
    for id in ["1.5", "1.0", "1e3", "-0", "true", "{}", "[1]"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let error = parse_body(text.as_bytes(), Batching::Forbidden).unwrap_err();
        assert!(
            matches!(
                error,
                ParseError::InvalidMessage {
                    error: MessageError::InvalidId,
                    id: None
                }
            ),
            "id {id} gave {error:?}"
        );
    }
}

#[test]
fn integer_beyond_u64_is_not_an_id() {
    // serde_json reads it as a float, which could not be echoed back exactly.
    let error = message_error(r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#);
    assert_eq!(error, MessageError::InvalidId);
}

#[test]
fn null_request_id_is_invalid_not_a_notification() {
    // T93; python-sdk#2057 read this as a notification and answered 202.
    let error = message_error(r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#);
    assert_eq!(error, MessageError::NullRequestId);
}

#[test]
fn request_id_displays_strings_quoted() {
    assert_eq!(RequestId::from("1").to_string(), r#""1""#);
    assert_eq!(RequestId::from(1_i64).to_string(), "1");
    assert_eq!(ProgressToken::from("a\"b").to_string(), r#""a\"b""#);
}

#[test]
fn request_id_serde_round_trip_rejects_floats() {
    let id: RequestId = serde_json::from_str("42").unwrap();
    assert_eq!(id, RequestId::from(42_i64));
    assert_eq!(serde_json::to_string(&id).unwrap(), "42");
    assert!(serde_json::from_str::<RequestId>("4.2").is_err());
    assert!(serde_json::from_str::<RequestId>("null").is_err());
}

// ---------------------------------------------------------------------------------------------
// Classification (docs/PROTOCOL.md#jsonrpc-messages)

#[test]
fn method_and_id_make_a_request() {
    let message = parse_single(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
    let Message::Request(request) = message else {
        panic!("not a request")
    };
    assert_eq!(request.method, "tools/list");
    assert_eq!(request.params, Some(json!({})));
}

#[test]
fn method_without_id_makes_a_notification() {
    // T94: no id, so nothing to answer.
    let message = parse_single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert!(matches!(message, Message::Notification(ref n) if n.params.is_none()));
    assert!(!message.is_request());
    assert_eq!(message.id(), None);
}

#[test]
fn result_with_id_makes_a_success_response() {
    let message = parse_single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
    let Message::Response(response) = message else {
        panic!("not a response")
    };
    assert!(!response.is_error());
    assert_eq!(response.id(), Some(&RequestId::from("a")));
}

#[test]
fn error_with_id_makes_an_error_response() {
    let message = parse_single(
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no such method","data":[1]}}"#,
    );
    let Message::Response(Response::Error(response)) = message else {
        panic!("not an error response")
    };
    assert_eq!(response.id, ErrorResponseId::Id(RequestId::from(3_i64)));
    assert_eq!(response.error.code, METHOD_NOT_FOUND);
    assert_eq!(response.error.message, "no such method");
    assert_eq!(response.error.data, Some(json!([1])));
}

#[test]
fn error_response_without_id_is_accepted_and_stays_without_id() {
    // 2025-11-25 lets the id be omitted when it could not be read.
    let message = parse_single(r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"x"}}"#);
    let Message::Response(Response::Error(ref response)) = message else {
        panic!("not an error response")
    };
    assert_eq!(response.id, ErrorResponseId::Absent);
    assert!(as_value(&message).get("id").is_none());
}

#[test]
fn error_response_with_null_id_is_accepted_and_stays_null() {
    // JSON-RPC 2.0 §5: null when the id could not be read.
    let message =
        parse_single(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#);
    let Message::Response(Response::Error(ref response)) = message else {
        panic!("not an error response")
    };
    assert_eq!(response.id, ErrorResponseId::Null);
    assert_eq!(as_value(&message)["id"], Value::Null);
}

#[test]
fn error_response_with_empty_string_id_is_accepted() {
    // What the C# SDK sends when it could not read the id.
    let message =
        parse_single(r#"{"jsonrpc":"2.0","id":"","error":{"code":-32600,"message":"x"}}"#);
    assert_eq!(message.id(), Some(&RequestId::from("")));
}

#[test]
fn result_response_without_id_or_with_null_id_is_invalid() {
    assert_eq!(
        message_error(r#"{"jsonrpc":"2.0","result":{}}"#),
        MessageError::ResultWithoutId
    );
    assert_eq!(
        message_error(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#),
        MessageError::ResultWithoutId
    );
}

#[test]
fn response_with_both_result_and_error_is_invalid() {
    // T95: exactly one of result or error.
    let error =
        message_error(r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#);
    assert_eq!(error, MessageError::ResultAndError);
}

#[test]
fn error_object_needs_integer_code_and_string_message() {
    // T95.
    for error in [
        r#"{"code":1.5,"message":"x"}"#,
        r#"{"code":"1","message":"x"}"#,
        r#"{"code":9223372036854775808,"message":"x"}"#,
        r#"{"message":"x"}"#,
        r#"{"code":1}"#,
        r#"{"code":1,"message":2}"#,
        r#""oops""#,
        "null",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"error":{error}}}"#);
        assert_eq!(
            message_error(&text),
            MessageError::InvalidErrorObject,
            "{error}"
        );
    }
}

#[test]
fn message_with_method_and_result_is_invalid() {
    let error = message_error(r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#);
    assert_eq!(error, MessageError::MethodWithResponse);
    let error = message_error(r#"{"jsonrpc":"2.0","method":"x","error":{"code":1,"message":"m"}}"#);
    assert_eq!(error, MessageError::MethodWithResponse);
}

#[test]
fn object_without_method_result_or_error_is_invalid() {
    assert_eq!(
        message_error(r#"{"jsonrpc":"2.0","id":1}"#),
        MessageError::Unclassifiable
    );
    assert_eq!(
        message_error(r#"{"jsonrpc":"2.0"}"#),
        MessageError::Unclassifiable
    );
}

#[test]
fn jsonrpc_member_must_be_exactly_2_0() {
    for version in [
        None,
        Some(r#""1.0""#),
        Some("2.0"),
        Some(r#""2.0 ""#),
        Some("null"),
    ] {
        let text = match version {
            None => r#"{"id":1,"method":"ping"}"#.to_owned(),
            Some(v) => format!(r#"{{"jsonrpc":{v},"id":1,"method":"ping"}}"#),
        };
        assert_eq!(message_error(&text), MessageError::InvalidVersion, "{text}");
    }
    assert_eq!(
        message_error(r#"{"id":1,"result":{}}"#),
        MessageError::InvalidVersion
    );
}

#[test]
fn non_string_method_is_invalid() {
    let error = message_error(r#"{"jsonrpc":"2.0","id":1,"method":7}"#);
    assert_eq!(error, MessageError::InvalidMethod);
}

#[test]
fn params_may_be_object_array_or_null_but_nothing_else() {
    for params in [r#"{"a":1}"#, "[1,2]", "null"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}"#);
        let message = parse_single(&text);
        let expected: Value = serde_json::from_str(params).unwrap();
        assert_eq!(as_value(&message)["params"], expected, "{params}");
        assert!(as_value(&message).get("params").is_some(), "{params}");
    }
    for params in ["1", r#""s""#, "true"] {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{params}}}"#);
        assert_eq!(
            message_error(&text),
            MessageError::InvalidParams,
            "{params}"
        );
    }
}

#[test]
fn non_object_values_are_invalid_requests() {
    for text in ["1", r#""x""#, "null", "true"] {
        assert_eq!(message_error(text), MessageError::NotAnObject, "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Parse errors and their responses (T12)

#[test]
fn invalid_json_is_a_parse_error_answered_with_null_id() {
    for text in [
        "",
        "{",
        "{\"jsonrpc\":\"2.0\",}",
        "\u{feff}{}",
        "{} {}",
        "\"\\x\"",
    ] {
        let error = parse_body(text.as_bytes(), Batching::Allowed).unwrap_err();
        assert!(
            matches!(error, ParseError::InvalidJson(_)),
            "{text:?}: {error:?}"
        );
        assert_eq!(error.code(), PARSE_ERROR);
        let body: Value = serde_json::from_slice(&error.error_response().to_vec()).unwrap();
        assert_eq!(body["id"], Value::Null);
        assert_eq!(body["error"]["code"], json!(PARSE_ERROR));
        assert_eq!(body["jsonrpc"], json!("2.0"));
    }
}

#[test]
fn invalid_utf8_is_a_parse_error() {
    let error = parse_body(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}",
        Batching::Allowed,
    )
    .unwrap_err();
    assert_eq!(error.code(), PARSE_ERROR);
}

#[test]
fn nesting_beyond_serde_json_recursion_limit_is_a_parse_error_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let error = parse_body(deep.as_bytes(), Batching::Allowed).unwrap_err();
    assert_eq!(error.code(), PARSE_ERROR);
}

#[test]
fn error_response_echoes_a_readable_request_id() {
    let error = parse_body(
        br#"{"jsonrpc":"2.0","id":"req-9","method":"m","params":5}"#,
        Batching::Forbidden,
    )
    .unwrap_err();
    assert_eq!(error.request_id(), Some(&RequestId::from("req-9")));
    let body: Value = serde_json::from_slice(&error.error_response().to_vec()).unwrap();
    assert_eq!(body["id"], json!("req-9"));
    assert_eq!(body["error"]["code"], json!(INVALID_REQUEST));
    assert_eq!(body["error"]["message"], json!(error.to_string()));
}

#[test]
fn error_response_does_not_echo_the_id_of_a_response_shaped_message() {
    // That id names a request of the receiver; T5: no usable id.
    let error = parse_body(
        br#"{"jsonrpc":"2.0","id":4,"result":{},"error":{}}"#,
        Batching::Forbidden,
    )
    .unwrap_err();
    assert_eq!(error.request_id(), None);
    let body: Value = serde_json::from_slice(&error.error_response().to_vec()).unwrap();
    assert_eq!(body["id"], Value::Null);
}

#[test]
fn parse_error_display_is_short_and_lower_case() {
    let error = parse_body(b"[]", Batching::Forbidden).unwrap_err();
    let text = error.to_string();
    assert!(text.chars().next().unwrap().is_lowercase(), "{text}");
    assert!(!text.ends_with('.'));
}

// ---------------------------------------------------------------------------------------------
// Batches (T4, T10, T11, T96)

#[test]
fn batch_is_rejected_with_invalid_request_when_forbidden() {
    // T11: 2025-06-18 and later take a single message only.
    for text in ["[]", r#"[{"jsonrpc":"2.0","method":"n"}]"#, "[1]"] {
        let error = parse_body(text.as_bytes(), Batching::Forbidden).unwrap_err();
        assert!(matches!(error, ParseError::BatchForbidden), "{text}");
        assert_eq!(error.code(), INVALID_REQUEST);
        assert_eq!(error.request_id(), None);
    }
}

#[test]
fn batch_of_requests_is_accepted_when_allowed() {
    // T10, T96: N requests in, N messages out, in order.
    let body = parse_body(
        br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":"2","method":"b"}]"#,
        Batching::Allowed,
    )
    .unwrap();
    let Body::Batch(ref messages) = body else {
        panic!("not a batch")
    };
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].method(), Some("a"));
    assert_eq!(messages[1].id(), Some(&RequestId::from("2")));
    assert!(body.has_requests());
}

#[test]
fn batch_of_notifications_and_responses_has_no_requests() {
    // T4: such a batch is answered 202.
    let body = parse_body(
        br#"[{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":1,"result":{}}]"#,
        Batching::Allowed,
    )
    .unwrap();
    assert_eq!(body.messages().len(), 2);
    assert!(!body.has_requests());
}

#[test]
fn single_message_is_single_even_when_batching_is_allowed() {
    let body = parse_body(br#"{"jsonrpc":"2.0","method":"n"}"#, Batching::Allowed).unwrap();
    assert!(matches!(body, Body::Single(_)));
    assert_eq!(body.into_messages().len(), 1);
}

#[test]
fn empty_batch_is_invalid() {
    let error = parse_body(b"[]", Batching::Allowed).unwrap_err();
    assert!(matches!(error, ParseError::EmptyBatch));
    assert_eq!(error.code(), INVALID_REQUEST);
}

#[test]
fn batch_with_a_non_message_is_invalid_and_names_the_member() {
    let error =
        parse_body(br#"[{"jsonrpc":"2.0","method":"n"},5]"#, Batching::Allowed).unwrap_err();
    assert!(matches!(
        error,
        ParseError::InvalidBatchMember {
            index: 1,
            error: MessageError::NotAnObject
        }
    ));
    assert_eq!(error.code(), INVALID_REQUEST);
    // Nested batches are not messages either.
    let error =
        parse_body(br#"[[{"jsonrpc":"2.0","method":"n"}]]"#, Batching::Allowed).unwrap_err();
    assert!(matches!(
        error,
        ParseError::InvalidBatchMember { index: 0, .. }
    ));
}

#[test]
fn batch_member_errors_echo_no_id() {
    let error = parse_body(
        br#"[{"jsonrpc":"2.0","id":7,"method":1}]"#,
        Batching::Allowed,
    )
    .unwrap_err();
    assert_eq!(error.request_id(), None);
}

#[test]
fn batched_initialize_is_rejected() {
    // T96; 2025-03-26: initialize MUST NOT be part of a batch, even alone.
    for text in [
        r#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]"#,
        r#"[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#,
    ] {
        let error = parse_body(text.as_bytes(), Batching::Allowed).unwrap_err();
        assert!(
            matches!(error, ParseError::InitializeInBatch { .. }),
            "{text}"
        );
        assert_eq!(error.code(), INVALID_REQUEST);
    }
}

#[test]
fn batch_serializes_as_an_array() {
    let text = r#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]"#;
    let body = parse_body(text.as_bytes(), Batching::Allowed).unwrap();
    assert_eq!(body.to_vec(), text.as_bytes());
}

// ---------------------------------------------------------------------------------------------
// Unknown members and serialization

#[test]
fn unknown_members_survive_a_round_trip() {
    for text in [
        r#"{"jsonrpc":"2.0","id":1,"method":"m","x-trace":{"a":[1,2]},"z":null}"#,
        r#"{"jsonrpc":"2.0","method":"m","vendor":true}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"ok":1},"params":"kept on a response","w":1}"#,
        r#"{"jsonrpc":"2.0","error":{"code":1,"message":"m","data":null,"hint":"h"},"y":2}"#,
    ] {
        let message = parse_single(text);
        let original: Value = serde_json::from_str(text).unwrap();
        assert_eq!(as_value(&message), original, "{text}");
    }
}

#[test]
fn serialization_is_compact_with_a_fixed_member_order() {
    let message = parse_single(
        r#"{ "method" : "m", "extra": 1, "params" : { "a" : "line\nbreak" }, "id" : 5, "jsonrpc" : "2.0" }"#,
    );
    assert_eq!(
        message.to_vec(),
        br#"{"jsonrpc":"2.0","id":5,"method":"m","params":{"a":"line\nbreak"},"extra":1}"#
    );
    assert_eq!(message.to_string().as_bytes(), message.to_vec().as_slice());
}

#[test]
fn serialized_messages_never_contain_raw_line_breaks() {
    // A message goes in one SSE data line.
    let message: Message = Request::new(
        1_i64,
        "m",
        Some(json!({"text": "a\r\nb\rc\nd\u{2028}e", "k\n": ["\r"]})),
    )
    .into();
    let bytes = message.to_vec();
    assert!(!bytes.contains(&b'\n') && !bytes.contains(&b'\r'));
}

#[test]
fn write_to_appends_to_the_buffer() {
    let mut out = b"data: ".to_vec();
    Message::from(Notification::new("n", None)).write_to(&mut out);
    assert_eq!(out, br#"data: {"jsonrpc":"2.0","method":"n"}"#);
}

#[test]
fn stray_members_in_extra_cannot_override_typed_fields() {
    let mut notification = Notification::new("n", None);
    notification.extra.insert("id".into(), json!(9));
    notification.extra.insert("jsonrpc".into(), json!("1.0"));
    notification.extra.insert("other".into(), json!(1));
    let message = Message::from(notification);
    assert_eq!(
        message.to_vec(),
        br#"{"jsonrpc":"2.0","method":"n","other":1}"#
    );
}

#[test]
fn constructors_build_the_expected_wire_shapes() {
    let success = Response::success(RequestId::from("7"), json!({}));
    assert_eq!(
        success.to_vec(),
        br#"{"jsonrpc":"2.0","id":"7","result":{}}"#
    );
    let error = Response::error(
        Some(RequestId::from(7_i64)),
        ErrorObject::new(METHOD_NOT_FOUND, "nope").with_data(json!({"m": "x"})),
    );
    assert_eq!(
        error.to_vec(),
        br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"nope","data":{"m":"x"}}}"#
    );
    let unreadable = Response::error(None, ErrorObject::new(PARSE_ERROR, "invalid json"));
    assert_eq!(
        unreadable.to_vec(),
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"invalid json"}}"#
    );
    let request = Message::from(Request::new("r", "ping", None));
    assert_eq!(
        request.to_vec(),
        br#"{"jsonrpc":"2.0","id":"r","method":"ping"}"#
    );
}

// ---------------------------------------------------------------------------------------------
// Routing accessors

#[test]
fn is_initialize_only_for_the_initialize_request() {
    assert!(parse_single(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#).is_initialize());
    assert!(!parse_single(r#"{"jsonrpc":"2.0","method":"initialize"}"#).is_initialize());
    assert!(!parse_single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_initialize());
}

#[test]
fn progress_token_is_read_from_params_meta() {
    let request = |params: &str| {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        match parse_single(&text) {
            Message::Request(request) => request,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        request(r#"{"_meta":{"progressToken":"tok"}}"#).progress_token(),
        Some(ProgressToken::from("tok"))
    );
    assert_eq!(
        request(r#"{"_meta":{"progressToken":18446744073709551615}}"#).progress_token(),
        Some(ProgressToken::from(u64::MAX))
    );
    assert_eq!(
        request(r#"{"_meta":{"progressToken":"1"}}"#).progress_token(),
        Some(ProgressToken::String("1".into()))
    );
    for params in [
        "{}",
        r#"{"_meta":{}}"#,
        r#"{"_meta":{"progressToken":1.5}}"#,
        r#"{"_meta":{"progressToken":null}}"#,
        r#"{"progressToken":1}"#,
        "[1]",
        "null",
    ] {
        assert_eq!(request(params).progress_token(), None, "{params}");
    }
    assert_eq!(Request::new(1_i64, "m", None).progress_token(), None);
}

#[test]
fn progress_notification_names_its_token() {
    let Message::Notification(progress) = parse_single(
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":1}}"#,
    ) else {
        panic!("not a notification")
    };
    assert_eq!(progress.progress_token(), Some(ProgressToken::from(5_i64)));
    let other = Notification::new("notifications/message", Some(json!({"progressToken": 5})));
    assert_eq!(other.progress_token(), None);
}

#[test]
fn cancelled_notification_names_its_request() {
    let cancelled = Notification::new("notifications/cancelled", Some(json!({"requestId": "r1"})));
    assert_eq!(
        cancelled.cancelled_request_id(),
        Some(RequestId::from("r1"))
    );
    let without = Notification::new("notifications/cancelled", Some(json!({"reason": "x"})));
    assert_eq!(without.cancelled_request_id(), None);
}

#[test]
fn request_id_converts_to_the_same_progress_token() {
    assert_eq!(
        ProgressToken::from(RequestId::from(3_i64)),
        ProgressToken::from(3_i64)
    );
    assert_eq!(
        ProgressToken::from(RequestId::from("3")),
        ProgressToken::from("3")
    );
}

// ---------------------------------------------------------------------------------------------
// Properties

/// JSON without floats: serde_json's default float parsing is not guaranteed to round-trip
/// the last bit, which is a property of serde_json, not of this module.
fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{0,6}", inner), 0..4)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::vec(("[a-z_]{0,6}", json_value()), 0..4)
        .prop_map(|members| Value::Object(members.into_iter().collect()))
}

fn request_id() -> impl Strategy<Value = RequestId> {
    prop_oneof![
        ".{0,8}".prop_map(RequestId::String),
        any::<i64>().prop_map(RequestId::from),
        any::<u64>().prop_map(RequestId::from),
    ]
}

fn params() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        json_object().prop_map(Some),
        prop::collection::vec(json_value(), 0..4).prop_map(|items| Some(Value::Array(items))),
    ]
}

/// Unknown members: names JSON-RPC does not define (a leading `x` keeps them clear of
/// `id`, `method` and the rest).
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec(("x[a-z]{0,5}", json_value()), 0..3)
        .prop_map(|members| members.into_iter().collect())
}

fn error_object() -> impl Strategy<Value = ErrorObject> {
    (
        any::<i64>(),
        ".{0,8}",
        prop::option::of(json_value()),
        extra(),
    )
        .prop_map(|(code, message, data, extra)| ErrorObject {
            code,
            message,
            data,
            extra,
        })
}

fn message() -> impl Strategy<Value = Message> {
    let method = "[a-z/_]{1,12}";
    prop_oneof![
        (request_id(), method, params(), extra()).prop_map(|(id, method, params, extra)| {
            Message::Request(Request {
                id,
                method,
                params,
                extra,
            })
        }),
        (method, params(), extra()).prop_map(|(method, params, extra)| {
            Message::Notification(Notification {
                method,
                params,
                extra,
            })
        }),
        (request_id(), json_value(), extra()).prop_map(|(id, result, extra)| {
            let mut response = Response::success(id, result);
            if let Response::Result(ref mut r) = response {
                r.extra = extra;
            }
            Message::Response(response)
        }),
        (
            prop_oneof![
                request_id().prop_map(ErrorResponseId::Id),
                Just(ErrorResponseId::Null),
                Just(ErrorResponseId::Absent),
            ],
            error_object(),
            extra()
        )
            .prop_map(|(id, error, extra)| {
                Message::Response(Response::Error(ErrorResponse { id, error, extra }))
            }),
    ]
}

/// Objects built from JSON-RPC's member names with values of every type, many of them
/// invalid, to reach every classification path. `jsonrpc` is usually right so that the other
/// checks get a turn.
fn message_like_object() -> impl Strategy<Value = Value> {
    let version = prop_oneof![
        8 => Just(Some(json!("2.0"))),
        1 => Just(None),
        1 => json_leaf().prop_map(Some),
    ];
    let member = prop_oneof![
        (Just("id"), json_leaf()),
        (
            Just("method"),
            prop_oneof![Just(json!("initialize")), Just(json!("m")), json_leaf()]
        ),
        (Just("params"), json_value()),
        (Just("result"), json_value()),
        (
            Just("error"),
            prop_oneof![
                (any::<i64>(), ".{0,4}")
                    .prop_map(|(code, message)| json!({"code": code, "message": message})),
                json_value(),
            ]
        ),
        (Just("xtra"), json_value()),
    ];
    (version, prop::collection::vec(member, 0..5)).prop_map(|(version, members)| {
        let mut object: Map<String, Value> = members
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect();
        if let Some(version) = version {
            object.insert("jsonrpc".to_owned(), version);
        }
        Value::Object(object)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_messages_round_trip_exactly(message in message()) {
        let bytes = message.to_vec();
        let parsed = parse_body(&bytes, Batching::Forbidden).unwrap();
        prop_assert_eq!(parsed, Body::Single(message));
    }

    #[test]
    fn generated_batches_round_trip_exactly(
        messages in prop::collection::vec(message(), 1..5)
            .prop_filter("no initialize", |ms| ms.iter().all(|m| m.method() != Some("initialize")))
    ) {
        let body = Body::Batch(messages);
        let parsed = parse_body(&body.to_vec(), Batching::Allowed).unwrap();
        prop_assert_eq!(parsed, body);
    }

    #[test]
    fn whatever_parses_serializes_back_to_the_same_json(value in message_like_object()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        if let Ok(Body::Single(message)) = parse_body(&bytes, Batching::Forbidden) {
            prop_assert_eq!(as_value(&message), value);
        }
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for batching in [Batching::Allowed, Batching::Forbidden] {
            if let Ok(body) = parse_body(&bytes, batching) {
                prop_assert_eq!(parse_body(&body.to_vec(), batching).unwrap(), body);
            }
        }
    }

    #[test]
    fn parse_never_panics_on_message_like_json(
        values in prop::collection::vec(message_like_object(), 0..4),
        batch in any::<bool>(),
    ) {
        let bytes = if batch {
            serde_json::to_vec(&values).unwrap()
        } else {
            serde_json::to_vec(values.first().unwrap_or(&Value::Null)).unwrap()
        };
        for batching in [Batching::Allowed, Batching::Forbidden] {
            match parse_body(&bytes, batching) {
                Ok(body) => prop_assert_eq!(parse_body(&body.to_vec(), batching).unwrap(), body),
                Err(error) => {
                    prop_assert_eq!(error.code(), INVALID_REQUEST);
                    let response: Value =
                        serde_json::from_slice(&error.error_response().to_vec()).unwrap();
                    prop_assert_eq!(&response["error"]["code"], &json!(INVALID_REQUEST));
                }
            }
        }
    }
}
