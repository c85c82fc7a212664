//! Chunking invariance: however the bytes of a stream are split across `feed` calls, the
//! decoder yields the same items (and the same final last-event-id) as feeding it whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_sse::{DecodeError, Decoder, Item};

fuzz_target!(|input: (Vec<u8>, Vec<u8>)| {
    let (stream, cuts) = input;
    let whole = decode(std::iter::once(stream.as_slice()));

    // The fuzzer's second input chooses the chunk lengths (1..=16 bytes each, cycling).
    let mut pieces = Vec::new();
    let mut rest = stream.as_slice();
    let mut lengths = cuts.iter().map(|b| usize::from(b % 16) + 1).cycle();
    while !rest.is_empty() {
        let n = if cuts.is_empty() { 1 } else { lengths.next().unwrap_or(1) }.min(rest.len());
        let (head, tail) = rest.split_at(n);
        pieces.push(head);
        rest = tail;
    }
    let chunked = decode(pieces.into_iter());
    assert_eq!(whole, chunked, "chunking changed the decoded items");
});

fn decode<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> (Vec<Item>, Option<DecodeError>, String) {
    let mut decoder = Decoder::new();
    let mut items = Vec::new();
    let mut error = None;
    for chunk in chunks {
        decoder.feed(chunk);
        if let Err(e) = pull(&mut decoder, &mut items) {
            error = Some(e);
            break;
        }
    }
    if error.is_none() {
        decoder.finish();
        error = pull(&mut decoder, &mut items).err();
    }
    (items, error, decoder.last_event_id().to_owned())
}

fn pull(decoder: &mut Decoder, items: &mut Vec<Item>) -> Result<(), DecodeError> {
    while let Some(item) = decoder.next_item()? {
        items.push(item);
    }
    Ok(())
}
