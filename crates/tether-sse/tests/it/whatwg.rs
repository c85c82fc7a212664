//! The SSE parser rules of docs/PROTOCOL.md#checklist-k (T101–T117) and the examples of WHATWG HTML
//! "Interpreting an event stream", one test each, asserting the exact items a reader sees.

use tether_sse::{Decoder, Event, FailReason, Item, ResponseAction, classify_response};

/// Feeds each chunk, pulling everything available after each one, then finishes.
fn decode_chunks(chunks: &[&[u8]]) -> Vec<Item> {
    let mut decoder = Decoder::new();
    let mut items = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk);
        while let Some(item) = decoder.next_item().expect("within limits") {
            items.push(item);
        }
    }
    decoder.finish();
    while let Some(item) = decoder.next_item().expect("within limits") {
        items.push(item);
    }
    items
}

fn decode(stream: &[u8]) -> Vec<Item> {
    decode_chunks(&[stream])
}

/// Every way of cutting `stream` in two gives `expected`.
fn assert_every_split(stream: &[u8], expected: &[Item]) {
    assert_eq!(decode(stream), expected, "whole stream");
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(decode_chunks(&[a, b]), expected, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(decode_chunks(&bytes), expected, "byte by byte");
}

fn event(data: &str) -> Item {
    Item::Event(Event::new(data))
}

fn event_with_id(data: &str, id: &str) -> Item {
    Item::Event(Event::new(data).with_last_event_id(id))
}

fn typed_event(event_type: &str, data: &str) -> Item {
    Item::Event(Event::new(data).with_event_type(event_type))
}

/// T101 CRLF, LF and lone CR all end a line, including a CR at the end of one chunk
/// followed by LF at the start of the next (one terminator, not two).
#[test]
fn t101_cr_lf_and_crlf_all_end_a_line_even_split_across_chunks() {
    for stream in [
        &b"data: a\ndata: b\n\n"[..],
        b"data: a\rdata: b\r\r",
        b"data: a\r\ndata: b\r\n\r\n",
        b"data: a\r\ndata: b\n\r",
    ] {
        // Were the LF of a split CRLF a second terminator, "a" would dispatch alone.
        assert_every_split(stream, &[event("a\nb")]);
    }
}

/// T101, the other half: a CR that is the last byte fed is already a line end, so the
/// event is available without waiting for the next byte; an LF arriving next is swallowed.
#[test]
fn t101_a_cr_at_the_end_of_a_chunk_ends_the_line_without_waiting() {
    let mut decoder = Decoder::new();
    decoder.feed(b"data: x\r\r");
    assert_eq!(decoder.next_item(), Ok(Some(event("x"))));
    assert_eq!(decoder.next_item(), Ok(None));
    decoder.feed(b"\n");
    assert_eq!(decoder.next_item(), Ok(None), "the LF completes the CRLF");
    decoder.feed(b"data: y\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(event("y"))));
    // At end of stream a trailing CR also ends the line.
    assert_eq!(decode(b"data: z\n\r"), [event("z")]);
    assert_eq!(decode_chunks(&[b"data: z\r", b"\r"]), [event("z")]);
}

/// T102 Exactly one leading UTF-8 BOM is stripped; a second BOM is kept, so the first
/// field name does not match.
#[test]
fn t102_one_leading_bom_is_stripped_and_a_second_is_kept() {
    assert_every_split(b"\xEF\xBB\xBFdata: a\n\n", &[event("a")]);
    assert_every_split(
        b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n",
        &[event("b")],
    );
    // Only at the start of the stream: later a BOM is part of the field name.
    assert_eq!(decode(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"), [event("a")]);
    // Not a BOM after all: the bytes are kept (and decode to U+FFFD).
    assert_eq!(decode_chunks(&[b"\xEF\xBB", b"data: a\n\n"]), []);
    assert_eq!(decode(b"\xEF\xBB\n\ndata: a\n\n"), [event("a")]);
}

/// T103 Lines starting with `:` are ignored, including a bare `:`.
#[test]
fn t103_comment_lines_are_ignored_including_a_bare_colon() {
    assert_every_split(
        b": hello\n:\ndata: a\n:data: b\ndata: c\n::x\n\n",
        &[
            Item::Comment("hello".into()),
            Item::Comment(String::new()),
            Item::Comment("data: b".into()),
            Item::Comment(":x".into()),
            event("a\nc"),
        ],
    );
    // A comment-only block dispatches nothing.
    assert_eq!(
        decode(b": keep-alive\n\n"),
        [Item::Comment("keep-alive".into())]
    );
}

/// T104 `data:x` and `data: x` both give `x`; `data:  x` gives ` x` (only one space
/// stripped).
#[test]
fn t104_exactly_one_space_after_the_colon_is_removed() {
    assert_every_split(
        b"data:x\n\ndata: x\n\ndata:  x\n\ndata:x \n\n",
        &[event("x"), event("x"), event(" x"), event("x ")],
    );
}

/// T105 A line with no colon is a field with empty value: `data` appends an LF, `id`
/// resets the last event ID, `event` clears the type.
#[test]
fn t105_a_line_without_colon_is_a_field_with_empty_value() {
    assert_eq!(decode(b"data\n\n"), [event("")]);
    assert_eq!(decode(b"data\ndata\n\n"), [event("\n")]);
    assert_eq!(
        decode(b"id: 1\ndata: a\n\nid\ndata: b\n\n"),
        [event_with_id("a", "1"), event_with_id("b", "")]
    );
    let items = decode(b"event: foo\nevent\ndata: a\n\n");
    assert_eq!(items, [event("a")]);
    let Item::Event(event) = &items[0] else {
        unreachable!()
    };
    assert_eq!(event.event_type(), "message");
}

/// T106 Field names are case-sensitive (`Data:` ignored) and unknown fields are ignored.
#[test]
fn t106_field_names_are_case_sensitive_and_unknown_ones_ignored() {
    assert_eq!(
        decode(b"Data: a\nDATA: b\nEvent: x\nID: 9\nRetry: 5\nfoo: bar\ndata: c\n\n"),
        [event("c")]
    );
    assert_eq!(decode(b"foo: bar\n\n"), []);
}

/// T107 Multiple `data` lines are joined with LF and the single trailing LF is removed at
/// dispatch.
#[test]
fn t107_data_lines_are_joined_with_lf_and_one_trailing_lf_removed() {
    // The WHATWG example.
    assert_every_split(
        b"data: YHOO\ndata: +2\ndata: 10\n\n",
        &[event("YHOO\n+2\n10")],
    );
    assert_eq!(decode(b"data: a\ndata:\n\n"), [event("a\n")]);
    assert_eq!(decode(b"data: a\ndata:\ndata:\n\n"), [event("a\n\n")]);
}

/// T108 A blank line with an empty data buffer dispatches nothing but still commits the
/// last event ID buffer and clears the event type.
#[test]
fn t108_a_block_without_data_commits_the_id_and_clears_the_type() {
    let mut decoder = Decoder::new();
    decoder.feed(b"event: foo\nid: 5\n\ndata: a\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(Item::LastEventId("5".into()))));
    assert_eq!(decoder.last_event_id(), "5");
    assert_eq!(decoder.next_item(), Ok(Some(event_with_id("a", "5"))));
    // An unchanged ID is not reported again.
    assert_eq!(
        decode(b"id: 5\n\nid: 5\n\n"),
        [Item::LastEventId("5".into())]
    );
}

/// T109 `id: X\ndata:\n\n` dispatches an event with data `""` and last event ID `X`;
/// `id: X\n\n` dispatches nothing but sets the last event ID to `X`.
#[test]
fn t109_priming_event_with_empty_data_dispatches_but_id_only_block_does_not() {
    assert_eq!(decode(b"id: X\ndata:\n\n"), [event_with_id("", "X")]);
    assert_eq!(decode(b"id: X\ndata: \n\n"), [event_with_id("", "X")]);
    let mut decoder = Decoder::new();
    decoder.feed(b"id: X\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(Item::LastEventId("X".into()))));
    assert_eq!(decoder.next_item(), Ok(None));
    assert_eq!(decoder.last_event_id(), "X");
}

/// T110 The `event` value sets the type; an empty or absent type means `message`.
#[test]
fn t110_event_sets_the_type_and_empty_or_absent_means_message() {
    let items =
        decode(b"event: add\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\nevent: a:b\ndata: 4\n\n");
    assert_eq!(
        items,
        [
            typed_event("add", "1"),
            event("2"),
            event("3"),
            typed_event("a:b", "4"),
        ]
    );
    let types: Vec<&str> = items
        .iter()
        .map(|item| match item {
            Item::Event(event) => event.event_type(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(types, ["add", "message", "message", "a:b"]);
}

/// T111 An `id` value containing U+0000 is ignored and the previous ID is kept.
#[test]
fn t111_an_id_containing_nul_is_ignored() {
    assert_eq!(
        decode(b"id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\nid: \0\n\n"),
        [event_with_id("a", "1"), event_with_id("b", "1")]
    );
}

/// T111, with two NULs: any U+0000 in the value makes it ignored, not an odd count of them.
/// Guards decode.rs `contains_nul`: the `|` folding the per-byte test.
#[test]
fn t111_an_id_containing_two_nuls_is_ignored_too() {
    assert_eq!(
        decode(b"id: 1\n\nid: \0\0\n\nid: a\0b\0\ndata: c\n\n"),
        [Item::LastEventId("1".into()), event_with_id("c", "1")]
    );
}

/// T112 `id:` with an empty value sets the last event ID to empty, so the next reconnect
/// sends no `Last-Event-ID`.
#[test]
fn t112_an_empty_id_resets_the_last_event_id() {
    let mut decoder = Decoder::new();
    decoder.feed(b"id: 1\ndata: a\n\nid:\ndata: b\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(event_with_id("a", "1"))));
    assert_eq!(decoder.next_item(), Ok(Some(event_with_id("b", ""))));
    assert_eq!(decoder.last_event_id(), "");
    assert_eq!(
        decode(b"id: 1\n\nid:\n\n"),
        [
            Item::LastEventId("1".into()),
            Item::LastEventId(String::new())
        ]
    );
}

/// T113 The last event ID persists across later events that have no `id` field.
#[test]
fn t113_the_last_event_id_persists_across_events_without_id() {
    assert_eq!(
        decode(b"id: 1\ndata: a\n\ndata: b\n\nevent: x\ndata: c\n\n"),
        [
            event_with_id("a", "1"),
            event_with_id("b", "1"),
            Item::Event(Event::new("c").with_event_type("x").with_last_event_id("1")),
        ]
    );
    // Also across a resumed stream when the decoder is seeded with the previous cursor.
    let mut decoder = Decoder::new().with_last_event_id("s:9");
    decoder.feed(b"data: d\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(event_with_id("d", "s:9"))));
}

/// T114 `retry` accepts only ASCII digits, in decimal (`03000` → 3000); `1000x`, `-1`,
/// ` 5`, `5.0` and an empty value are ignored, keeping the previous value.
#[test]
fn t114_retry_accepts_only_ascii_digits() {
    let mut decoder = Decoder::new();
    assert_eq!(decoder.reconnection_time(), None);
    decoder.feed(b"retry: 03000\n");
    assert_eq!(decoder.next_item(), Ok(Some(Item::Retry(3000))));
    assert_eq!(decoder.reconnection_time(), Some(3000));
    decoder.feed(
        b"retry: 1000x\nretry: -1\nretry:  5\nretry: 5.0\nretry:\nretry\nretry: +5\n\
          retry: \xD9\xA5\nretry: 18446744073709551616\ndata: a\n\n",
    );
    // Nothing but the event: the invalid values are ignored and the event still fires,
    // its block's valid `retry` being the first line's.
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("a").with_retry(3000))))
    );
    assert_eq!(decoder.reconnection_time(), Some(3000));
    assert_eq!(
        decode(b"retry: 18446744073709551615\ndata: a\n\n"),
        [
            Item::Retry(u64::MAX),
            Item::Event(Event::new("a").with_retry(u64::MAX)),
        ]
    );
}

/// T115 A partial event at end of stream (no terminating blank line) is discarded and its
/// `id` is not committed.
#[test]
fn t115_a_partial_event_at_end_of_stream_is_discarded_with_its_id() {
    let mut decoder = Decoder::new();
    decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n");
    assert_eq!(decoder.next_item(), Ok(Some(event_with_id("a", "1"))));
    assert_eq!(decoder.next_item(), Ok(None));
    decoder.finish();
    assert_eq!(decoder.next_item(), Ok(None));
    assert_eq!(decoder.last_event_id(), "1");
    // A final line without a terminator is not a line.
    assert_eq!(decode(b"data: a\n\ndata: b\n"), [event("a")]);
    assert_eq!(decode(b"data: a\n\ndata: b"), [event("a")]);
    assert_eq!(decode(b"id: 3\n"), []);
    // Bytes fed after the end are ignored.
    decoder.feed(b"\n");
    assert_eq!(decoder.next_item(), Ok(None));
}

/// T116 The stream is decoded as UTF-8 whatever the `charset` parameter; invalid
/// sequences become U+FFFD.
#[test]
fn t116_the_stream_is_utf8_and_invalid_sequences_become_replacement_characters() {
    assert_eq!(decode(b"data: a\xFFb\n\n"), [event("a\u{FFFD}b")]);
    // A truncated sequence is one U+FFFD (its maximal subpart), ended by the LF.
    assert_eq!(decode(b"data: \xE2\x82\n\n"), [event("\u{FFFD}")]);
    assert_every_split(
        "data: €😀\nevent: ü\n\n".as_bytes(),
        &[typed_event("ü", "€😀")],
    );
    // A UTF-16 BOM is not a BOM here: two U+FFFD, so the first field name is not `data`.
    assert_eq!(decode(b"\xFF\xFEdata: a\n\ndata: b\n\n"), [event("b")]);
    // The charset parameter does not change the response classification either.
    assert_eq!(
        classify_response(200, Some("text/event-stream; charset=iso-8859-1")),
        ResponseAction::ReadStream
    );
}

/// T117 (EventSource-style client) A 200 response without `text/event-stream`, or any
/// non-200 status, fails without reconnecting; 204 stops reconnection.
#[test]
fn t117_only_200_event_stream_is_read_204_stops_and_the_rest_fail() {
    for content_type in [
        "text/event-stream",
        "TEXT/Event-Stream",
        "text/event-stream;charset=utf-8",
        " text/event-stream ; foo=bar",
    ] {
        assert_eq!(
            classify_response(200, Some(content_type)),
            ResponseAction::ReadStream,
            "{content_type}"
        );
    }
    for content_type in [
        None,
        Some(""),
        Some("text/plain"),
        Some("application/json"),
        Some("text/event-streams"),
        Some("text/event-stream-x; charset=utf-8"),
        Some("text /event-stream"),
    ] {
        assert_eq!(
            classify_response(200, content_type),
            ResponseAction::Fail(FailReason::ContentType),
            "{content_type:?}"
        );
    }
    assert_eq!(
        classify_response(204, None),
        ResponseAction::StopReconnecting
    );
    assert_eq!(
        classify_response(204, Some("text/event-stream")),
        ResponseAction::StopReconnecting
    );
    for status in [100, 201, 202, 206, 301, 304, 307, 400, 404, 405, 500, 503] {
        assert_eq!(
            classify_response(status, Some("text/event-stream")),
            ResponseAction::Fail(FailReason::Status),
            "{status}"
        );
    }
}

/// WHATWG example: "the end of the stream is not enough to trigger the dispatch of the
/// last event", and a bare `id` resets the last event ID.
#[test]
fn spec_example_first_second_third_event() {
    let stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n";
    assert_every_split(
        stream,
        &[
            Item::Comment("test stream".into()),
            event_with_id("first event", "1"),
            event_with_id("second event", ""),
        ],
    );
}

/// WHATWG example: `data` alone fires an empty event, two fire a single LF, and a final
/// `data:` without a blank line is discarded.
#[test]
fn spec_example_empty_data_events_and_trailing_field() {
    assert_every_split(b"data\n\ndata\ndata\n\ndata:", &[event(""), event("\n")]);
}

/// WHATWG example: `data:test` and `data: test` fire identical events.
#[test]
fn spec_example_space_after_colon_is_optional() {
    assert_eq!(
        decode(b"data:test\n\ndata: test\n\n"),
        [event("test"), event("test")]
    );
}

/// WHATWG example: named events.
#[test]
fn spec_example_event_types() {
    assert_eq!(
        decode(b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n"),
        [
            typed_event("add", "73857293"),
            typed_event("remove", "2153"),
            typed_event("add", "113411"),
        ]
    );
}

/// The MCP shape: a priming event with empty data, then JSON-RPC messages carrying ids,
/// then a keep-alive.
#[test]
fn mcp_priming_event_then_messages() {
    let stream = b"id: s1:0\ndata: \n\nevent: message\nid: s1:1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n: keep-alive\n\n";
    assert_every_split(
        stream,
        &[
            event_with_id("", "s1:0"),
            Item::Event(
                Event::new(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                    .with_event_type("message")
                    .with_last_event_id("s1:1"),
            ),
            Item::Comment("keep-alive".into()),
        ],
    );
}
