//! Properties over generated streams: chunking never changes what is decoded, the decoder
//! agrees with a literal transcription of the WHATWG algorithm, and encoding round-trips.

use bytes::BytesMut;
use proptest::prelude::*;
use tether_sse::{
    Decoder, EncodeError, Event, EventFrame, Item, encode_comment, encode_comment_into,
};

/// Feeds `stream` cut at `cuts` (sorted, deduplicated by the caller or not), pulling after
/// every feed, then finishes. Returns the items and the final committed state.
fn decode_cut(stream: &[u8], cuts: &[usize]) -> (Vec<Item>, String, Option<u64>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    let mut decoder = Decoder::new();
    let mut items = Vec::new();
    let mut start = 0;
    for end in cuts.into_iter().chain([stream.len()]) {
        decoder.feed(&stream[start..end]);
        start = end;
        while let Some(item) = decoder.next_item().expect("within limits") {
            items.push(item);
        }
    }
    decoder.finish();
    while let Some(item) = decoder.next_item().expect("within limits") {
        items.push(item);
    }
    (
        items,
        decoder.last_event_id().to_owned(),
        decoder.reconnection_time(),
    )
}

/// WHATWG "Interpreting an event stream", transcribed as literally as possible over the
/// whole stream at once: decode, split lines, process fields, dispatch.
fn reference(stream: &[u8]) -> (Vec<Item>, String, Option<u64>) {
    let stream = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
    let text = String::from_utf8_lossy(stream);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut line));
            }
            '\n' => lines.push(std::mem::take(&mut line)),
            c => line.push(c),
        }
    }
    // What is left in `line` has no terminator: discarded at end of file.
    let (mut data, mut event_type, mut id_buffer) = (String::new(), String::new(), String::new());
    let (mut last_event_id, mut retry, mut block_retry) = (String::new(), None, None);
    let mut items = Vec::new();
    for line in lines {
        if line.is_empty() {
            let changed = last_event_id != id_buffer;
            last_event_id.clone_from(&id_buffer);
            if data.is_empty() {
                if changed {
                    items.push(Item::LastEventId(last_event_id.clone()));
                }
            } else {
                data.pop();
                let mut event = Event::new(std::mem::take(&mut data))
                    .with_event_type(&event_type)
                    .with_last_event_id(&last_event_id);
                if let Some(ms) = block_retry {
                    event = event.with_retry(ms);
                }
                items.push(Item::Event(event));
            }
            data.clear();
            event_type.clear();
            block_retry = None;
            continue;
        }
        if let Some(comment) = line.strip_prefix(':') {
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            items.push(Item::Comment(comment.to_owned()));
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => event_type = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => id_buffer = value.to_owned(),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    retry = Some(ms);
                    block_retry = Some(ms);
                    items.push(Item::Retry(ms));
                }
            }
            _ => {}
        }
    }
    (items, last_event_id, retry)
}

/// Streams that look like real ones, with every line ending, BOMs, odd fields, non-ASCII
/// and invalid UTF-8 mixed in.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let eol = prop_oneof![Just(&b"\n"[..]), Just(&b"\r"[..]), Just(&b"\r\n"[..])];
    let name = prop_oneof![
        4 => Just("data"),
        2 => Just("id"),
        2 => Just("event"),
        2 => Just("retry"),
        1 => Just("Data"),
        1 => Just("foo"),
        1 => Just(""),
    ];
    let value = prop_oneof![
        3 => "[a-z0-9 :]{0,12}",
        1 => "[0-9]{1,6}",
        1 => Just(" 5".to_owned()),
        1 => Just("é€😀\u{FEFF}".to_owned()),
        1 => Just("a\0b".to_owned()),
        1 => Just(String::new()),
    ];
    let field =
        (name, prop::option::of(("( )?", value)), eol.clone()).prop_map(|(name, value, eol)| {
            let mut line = name.as_bytes().to_vec();
            if let Some((space, value)) = value {
                line.push(b':');
                line.extend_from_slice(space.as_bytes());
                line.extend_from_slice(value.as_bytes());
            }
            line.extend_from_slice(eol);
            line
        });
    let piece = prop_oneof![
        8 => field,
        3 => eol.clone().prop_map(<[u8]>::to_vec),
        1 => ("[ a-z]{0,8}", eol).prop_map(|(c, eol)| [b":", c.as_bytes(), eol].concat()),
        1 => Just(b"\xEF\xBB\xBF".to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..6),
    ];
    (prop::bool::ANY, prop::collection::vec(piece, 0..40)).prop_map(|(bom, pieces)| {
        let mut stream = if bom {
            b"\xEF\xBB\xBF".to_vec()
        } else {
            Vec::new()
        };
        stream.extend(pieces.concat());
        stream
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any chunking of a stream yields the same items as feeding it whole.
    #[test]
    fn chunking_does_not_change_what_is_decoded(
        stream in stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = decode_cut(&stream, &[]);
        prop_assert_eq!(&decode_cut(&stream, &cuts), &whole);
        let every_byte: Vec<usize> = (0..stream.len()).collect();
        prop_assert_eq!(&decode_cut(&stream, &every_byte), &whole);
    }

    /// The decoder agrees with the WHATWG algorithm run over the whole stream.
    #[test]
    fn decoder_matches_the_whatwg_algorithm(
        stream in stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(decode_cut(&stream, &cuts), reference(&stream));
    }

    /// Arbitrary bytes too.
    #[test]
    fn decoder_matches_the_whatwg_algorithm_on_arbitrary_bytes(
        stream in prop::collection::vec(
            prop_oneof![any::<u8>(), Just(b'\n'), Just(b'\r'), Just(b':')],
            0..200,
        ),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(decode_cut(&stream, &cuts), reference(&stream));
    }

    /// decode(encode(e)) == e for events whose data line breaks are LF; other line
    /// breaks come back as LF.
    #[test]
    fn encoding_round_trips(
        event_type in prop::option::of("[^\r\n]{0,10}"),
        id in prop::option::of("[^\r\n\0]{0,10}"),
        retry in prop::option::of(any::<u64>()),
        lines in prop::collection::vec(("[^\r\n]{0,10}", prop_oneof![Just("\n"), Just("\r"), Just("\r\n")]), 0..5),
        last in "[^\r\n]{0,10}",
    ) {
        let raw: String = lines.iter().map(|(l, eol)| format!("{l}{eol}")).collect::<String>() + &last;
        // Adjacent lines may form a CRLF: normalise the way a reader splits lines.
        let normalised = raw.replace("\r\n", "\n").replace('\r', "\n");
        let mut frame = EventFrame::with_data(&raw);
        if let Some(event_type) = &event_type { frame = frame.event(event_type); }
        if let Some(id) = &id { frame = frame.id(id); }
        if let Some(retry) = retry { frame = frame.retry(retry); }
        let bytes = frame.encode().unwrap();
        let mut expected = Event::new(normalised)
            .with_event_type(event_type.as_deref().unwrap_or(""))
            .with_last_event_id(id.as_deref().unwrap_or(""));
        if let Some(retry) = retry { expected = expected.with_retry(retry); }
        let expected: Vec<Item> = retry.map(Item::Retry).into_iter().chain([Item::Event(expected)]).collect();
        prop_assert_eq!(decode_cut(&bytes, &[]).0, expected);

        // The same bytes when appended to a buffer already in use.
        let mut dst = BytesMut::from(&b"data: x\n\n"[..]);
        frame.encode_into(&mut dst).unwrap();
        prop_assert_eq!(&dst[9..], &bytes[..]);
    }

    /// A frame without data is not dispatched; it only commits the ID.
    #[test]
    fn a_frame_without_data_only_commits_the_id(
        id in "[^\r\n\0]{0,10}",
        retry in prop::option::of(any::<u64>()),
    ) {
        let mut frame = EventFrame::new().id(&id).event("ignored");
        if let Some(retry) = retry { frame = frame.retry(retry); }
        let (items, last_event_id, reconnection_time) = decode_cut(&frame.encode().unwrap(), &[]);
        let expected: Vec<Item> = retry
            .map(Item::Retry)
            .into_iter()
            .chain((!id.is_empty()).then(|| Item::LastEventId(id.clone())))
            .collect();
        prop_assert_eq!(items, expected);
        prop_assert_eq!(last_event_id, id);
        prop_assert_eq!(reconnection_time, retry);
    }

    /// Comments round-trip; line breaks in a comment, event type or ID are refused and
    /// nothing is written.
    #[test]
    fn comments_round_trip_and_line_breaks_are_refused(
        text in "[^\r\n]{0,20}",
        bad in "[^\r\n]{0,5}[\r\n][^\r\n]{0,5}",
    ) {
        let (items, _, _) = decode_cut(&encode_comment(&text).unwrap(), &[]);
        prop_assert_eq!(items, vec![Item::Comment(text.clone())]);

        let mut dst = BytesMut::from(&b"keep"[..]);
        prop_assert_eq!(encode_comment_into(&bad, &mut dst), Err(EncodeError::InvalidComment));
        prop_assert_eq!(
            EventFrame::with_data("x").event(&bad).encode_into(&mut dst),
            Err(EncodeError::InvalidEventType)
        );
        prop_assert_eq!(
            EventFrame::with_data("x").id(&bad).encode_into(&mut dst),
            Err(EncodeError::InvalidId)
        );
        prop_assert_eq!(&dst[..], b"keep");
    }
}

#[test]
fn field_order_is_event_id_retry_data() {
    let bytes = EventFrame::new()
        .data("a\r\nb\rc\n")
        .retry(3000)
        .id("s:1")
        .event("message")
        .encode()
        .unwrap();
    assert_eq!(
        &bytes[..],
        b"event: message\nid: s:1\nretry: 3000\ndata: a\ndata: b\ndata: c\ndata: \n\n"
    );
    assert_eq!(
        &EventFrame::with_data("").encode().unwrap()[..],
        b"data: \n\n"
    );
    assert_eq!(
        &EventFrame::with_data(" x").id(" y").encode().unwrap()[..],
        b"id:  y\ndata:  x\n\n"
    );
    assert_eq!(&EventFrame::new().encode().unwrap()[..], b"\n");
    assert_eq!(&encode_comment("").unwrap()[..], b":\n\n");
    assert_eq!(
        &encode_comment("keep-alive").unwrap()[..],
        b": keep-alive\n\n"
    );
}

#[test]
fn an_id_with_nul_is_refused() {
    assert_eq!(
        EventFrame::with_data("x").id("a\0b").encode(),
        Err(EncodeError::InvalidId)
    );
    assert_eq!(
        EncodeError::InvalidId.to_string(),
        "event id contains a line break or nul"
    );
}
