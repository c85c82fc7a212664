//! The 2026-07-28 request checks never panic on any body and headers, and hold their
//! contracts: an accepted request is at a modern version, its `MCP-Protocol-Version` equals its
//! envelope's, and its `Mcp-Method` its method; every refusal is one of the three codes the era
//! pins for it; a value written in the `=?base64?…?=` form decodes to what was encoded.
#![no_main]

use arbitrary::Arbitrary;
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use tether_proto::modern::{RequestHeaders, check_request, decode_header_value, era_of};
use tether_proto::version::Eras;

#[derive(Arbitrary, Debug)]
struct Input {
    method: String,
    params: Vec<u8>,
    version: Option<String>,
    method_header: Option<String>,
    name: Option<String>,
    encoded: String,
}

fuzz_target!(|input: Input| {
    let params: Option<serde_json::Value> = serde_json::from_slice(&input.params).ok();
    let headers = RequestHeaders {
        protocol_version: input.version.as_deref(),
        method: input.method_header.as_deref(),
        name: input.name.as_deref(),
    };
    let _ = era_of(params.as_ref(), input.version.as_deref(), false);
    match check_request(&input.method, params.as_ref(), headers) {
        Ok(envelope) => {
            assert!(envelope.version.is_modern());
            let header = input.version.as_deref().unwrap().trim_matches([' ', '\t']);
            assert_eq!(header, envelope.version.as_str());
            let method = input
                .method_header
                .as_deref()
                .unwrap()
                .trim_matches([' ', '\t']);
            assert_eq!(method, input.method);
        }
        Err(refusal) => {
            // The code does not depend on the eras served, only the versions its data lists.
            for eras in [Eras::Both, Eras::Legacy, Eras::Modern] {
                let code = refusal.error_object(eras).code;
                assert!([-32602, -32020, -32022].contains(&code), "{code}");
            }
        }
    }
    let _ = decode_header_value(&input.encoded);
    let sentinel = format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(input.encoded.as_bytes())
    );
    assert_eq!(
        decode_header_value(&sentinel).as_deref(),
        Some(input.encoded.as_str())
    );
});
