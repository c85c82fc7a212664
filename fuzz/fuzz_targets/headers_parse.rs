//! The MCP header parsers never panic on any text, and hold their contracts: a parsed
//! `Last-Event-ID` displays back as exactly the text it came from without the surrounding
//! whitespace HTTP allows, and a parsed `Mcp-Session-Id` as exactly its text; an
//! accepted `MCP-Protocol-Version` is one of the supported versions; version negotiation
//! always yields a supported version; an `Accept` that allows SSE for the server allows it
//! whatever parameters follow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_proto::headers::{
    ResponseKind, client_last_event_id, is_event_stream_content_type, is_json_content_type,
    parse_last_event_id, server_accepts,
};
use tether_proto::ids::SessionId;
use tether_proto::version::{ProtocolVersion, check_header, negotiate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = parse_last_event_id(text) {
        // Surrounding spaces and tabs are HTTP's, not the id's (RFC 9110 §5.5); the rest must
        // be exactly the canonical id.
        let value = text.trim_matches([' ', '\t']);
        assert_eq!(id.to_string(), value, "non-canonical Last-Event-ID accepted");
    }
    let _ = client_last_event_id(text);
    if let Ok(id) = SessionId::parse(text) {
        assert_eq!(id.as_str(), text, "non-canonical session id accepted");
    }
    if let Ok(Some(version)) = check_header(Some(text)) {
        assert!(ProtocolVersion::SUPPORTED.contains(&version), "{version:?}");
    }
    let negotiated = negotiate(text);
    assert!(ProtocolVersion::SUPPORTED.contains(&negotiated));
    let _ = is_json_content_type(text);
    let _ = is_event_stream_content_type(text);
    for kind in [ResponseKind::Json, ResponseKind::EventStream] {
        let _ = server_accepts(Some(text), kind);
    }
});
