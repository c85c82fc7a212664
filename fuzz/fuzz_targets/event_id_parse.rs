//! The strict event-id parser never panics and accepts only canonical ids: whatever it accepts
//! displays back as exactly the same text, so two spellings can never name one event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_proto::ids::EventId;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = text.parse::<EventId>() {
        assert_eq!(id.to_string(), text, "accepted a non-canonical event id");
    }
});
