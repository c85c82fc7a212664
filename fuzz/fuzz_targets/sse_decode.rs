//! The SSE decoder never panics on any bytes and never holds more than its line limit of
//! unprocessed input, even under small limits that hostile input hits constantly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_sse::{Decoder, Item, Limits};

const MAX_LINE: usize = 64;
const MAX_EVENT: usize = 128;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default()
        .with_max_line_bytes(MAX_LINE)
        .with_max_event_bytes(MAX_EVENT);
    let mut decoder = Decoder::with_limits(limits);
    // Feed in uneven pieces so chunk boundaries land everywhere, including inside CRLF and BOM.
    for piece in data.chunks(7) {
        decoder.feed(piece);
        assert!(decoder.buffered_len() <= MAX_LINE, "decoder buffered past its line limit");
        if drain(&mut decoder).is_err() {
            return;
        }
    }
    decoder.finish();
    let _ = drain(&mut decoder);
});

fn drain(decoder: &mut Decoder) -> Result<(), tether_sse::DecodeError> {
    while let Some(item) = decoder.next_item()? {
        if let Item::Event(event) = item {
            assert!(event.data().len() <= MAX_EVENT, "event larger than the event limit");
        }
    }
    Ok(())
}
