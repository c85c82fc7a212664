//! How the decoder behaves as an object: what its accessors report while items are still
//! queued, what happens after `finish` and after an error.

use tether_sse::{DecodeError, Decoder, Event, Item, Limits};

/// A client that reconnects after pulling only some items must send the ID of the last
/// event it actually received, not of one still queued in the decoder.
#[test]
fn last_event_id_and_reconnection_time_follow_the_items_pulled() {
    let mut decoder = Decoder::new();
    decoder.feed(b"retry: 100\nid: 1\ndata: a\n\nretry: 200\nid: 2\ndata: b\n\nid: 3\n\n");
    assert_eq!(decoder.last_event_id(), "");
    assert_eq!(decoder.reconnection_time(), None);

    assert_eq!(decoder.next_item(), Ok(Some(Item::Retry(100))));
    assert_eq!(decoder.reconnection_time(), Some(100));
    assert_eq!(decoder.last_event_id(), "");

    let Ok(Some(Item::Event(event))) = decoder.next_item() else {
        panic!("event a")
    };
    assert_eq!((event.data(), event.last_event_id()), ("a", "1"));
    assert_eq!(decoder.last_event_id(), "1");
    assert_eq!(decoder.reconnection_time(), Some(100));

    assert_eq!(decoder.next_item(), Ok(Some(Item::Retry(200))));
    let Ok(Some(Item::Event(event))) = decoder.next_item() else {
        panic!("event b")
    };
    assert_eq!(event.retry(), Some(200));
    assert_eq!(decoder.last_event_id(), "2");

    assert_eq!(decoder.next_item(), Ok(Some(Item::LastEventId("3".into()))));
    assert_eq!(decoder.last_event_id(), "3");
    assert_eq!(decoder.next_item(), Ok(None));
}

#[test]
fn items_queued_before_finish_are_still_delivered() {
    let mut decoder = Decoder::new();
    decoder.feed(b"data: a\n\ndata: b\n\ndata: c");
    decoder.finish();
    assert_eq!(decoder.next_item(), Ok(Some(Item::Event(Event::new("a")))));
    assert_eq!(decoder.next_item(), Ok(Some(Item::Event(Event::new("b")))));
    assert_eq!(decoder.next_item(), Ok(None));
    assert_eq!(decoder.buffered_len(), 0);
}

/// Once finished, the stream is over: bytes fed later yield nothing and are not held.
/// Guards decode.rs `Decoder::feed`: the `||` of the early return (empty, finished, errored).
#[test]
fn bytes_fed_after_finish_are_ignored() {
    let mut decoder = Decoder::new();
    decoder.feed(b"data: a\n\n");
    decoder.finish();
    decoder.feed(b"id: 9\ndata: b\n\ndata: partial");
    assert_eq!(decoder.next_item(), Ok(Some(Item::Event(Event::new("a")))));
    assert_eq!(decoder.next_item(), Ok(None));
    assert_eq!(decoder.buffered_len(), 0);
    assert_eq!(decoder.last_event_id(), "");
}

/// A zero-length read between the CR and the LF of a CRLF leaves one line end, not two:
/// the two data lines still form one event. Guards decode.rs `Decoder::feed`: the `||` of
/// the early return for empty input.
#[test]
fn an_empty_chunk_between_cr_and_lf_does_not_split_the_crlf() {
    let mut decoder = Decoder::new();
    decoder.feed(b"data: a\r");
    decoder.feed(b"");
    decoder.feed(b"\ndata: b\r\n\r\n");
    assert_eq!(
        decoder.next_item(),
        Ok(Some(Item::Event(Event::new("a\nb"))))
    );
    assert_eq!(decoder.next_item(), Ok(None));
}

/// `limits()` reports the limits the decoder was built with, not the defaults.
/// Guards decode.rs `Decoder::limits` (replaced by `Default::default()`).
#[test]
fn limits_reports_the_configured_limits() {
    let limits = Limits::default()
        .with_max_line_bytes(100)
        .with_max_event_bytes(50);
    let decoder = Decoder::with_limits(limits);
    assert_eq!(decoder.limits(), limits);
    assert_eq!(decoder.limits().max_line_bytes(), 100);
    assert_eq!(decoder.limits().max_event_bytes(), 50);
}

#[test]
fn items_before_an_error_are_delivered_then_the_error_forever() {
    let mut decoder = Decoder::with_limits(Limits::default().with_max_event_bytes(4));
    decoder.feed(b"data: ok\n\n: note\ndata: too long\n\ndata: b\n\n");
    assert_eq!(decoder.next_item(), Ok(Some(Item::Event(Event::new("ok")))));
    assert_eq!(decoder.next_item(), Ok(Some(Item::Comment("note".into()))));
    let error = DecodeError::EventTooLarge { limit: 4 };
    assert_eq!(decoder.next_item(), Err(error.clone()));
    decoder.feed(b"data: x\n\n");
    assert_eq!(decoder.next_item(), Err(error.clone()));
    assert_eq!(decoder.next_item(), Err(error));
}

#[test]
fn event_accessors_apply_the_message_default() {
    let event = Event::new("d").with_event_type("").with_last_event_id("7");
    assert_eq!(event.event_type(), "message");
    assert_eq!(event.raw_event_type(), "");
    assert_eq!(event.last_event_id(), "7");
    assert_eq!(event.retry(), None);
    assert_eq!(event.clone().into_data(), "d");
    let named = event.with_event_type("message");
    assert_eq!(named.raw_event_type(), "message");
    assert_ne!(named, Event::new("d").with_last_event_id("7"));
}

#[test]
fn debug_output_summarises_without_dumping_buffers() {
    let mut decoder = Decoder::new().with_last_event_id("s:4");
    decoder.feed(b"data: partial");
    let debug = format!("{decoder:?}");
    assert!(debug.contains("buffered_len: 13"), "{debug}");
    assert!(debug.contains("\"s:4\""), "{debug}");
    assert!(!debug.contains("partial"), "{debug}");
}
