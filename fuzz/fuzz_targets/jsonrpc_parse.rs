//! The POST body parser never panics, in either batching mode, and whatever it accepts
//! serializes to JSON that parses back to an equal body, so a gateway that forwards a message
//! sends what it received.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tether_proto::jsonrpc::{Batching, parse_body};

fuzz_target!(|data: &[u8]| {
    for batching in [Batching::Allowed, Batching::Forbidden] {
        let Ok(body) = parse_body(data, batching) else {
            continue;
        };
        let bytes = body.to_vec();
        assert!(
            !bytes.contains(&b'\n') && !bytes.contains(&b'\r'),
            "serialized body is not a single line"
        );
        let again = parse_body(&bytes, batching).expect("re-parsing a serialized body failed");
        if again != body {
            // serde_json without its `float_roundtrip` feature may read a float in the
            // message's payload an ulp or so away from the value it wrote, which is not this
            // parser's doing; anything else is a real difference.
            let before: Value = serde_json::from_slice(&bytes).expect("serialized body is JSON");
            let after: Value =
                serde_json::from_slice(&again.to_vec()).expect("serialized body is JSON");
            assert!(
                same_up_to_float_rounding(&before, &after),
                "round trip changed the body:\n{before}\n{after}"
            );
        }
    }
});

fn same_up_to_float_rounding(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            // Finite floats of one sign are ordered like their bit patterns.
            x == y
                || (x.is_sign_negative() == y.is_sign_negative()
                    && x.to_bits().abs_diff(y.to_bits()) <= 4)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(x, y)| same_up_to_float_rounding(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| same_up_to_float_rounding(x, y)))
        }
        _ => a == b,
    }
}
