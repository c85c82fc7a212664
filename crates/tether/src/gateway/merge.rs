//! What a federation merges of its upstreams' answers: their capabilities and identity into
//! the gateway's own, and their list cursors into one opaque cursor.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::server::ServerInfo;

/// The merged cursor: each upstream still to be paged, with its own cursor.
pub(super) fn encode_cursor(next: &BTreeMap<String, String>) -> String {
    let json = serde_json::to_vec(next).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// `None` for a cursor this gateway did not give.
pub(super) fn decode_cursor(cursor: &str) -> Option<BTreeMap<String, String>> {
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    serde_json::from_slice(&json).ok()
}

/// The union of the upstreams' capabilities: objects merged member by member, a `true` flag
/// (`listChanged`, `subscribe`) kept.
fn merge_capabilities(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(Value::Object(into)), Value::Object(from)) => merge_capabilities(into, from),
            (Some(Value::Bool(into)), Value::Bool(from)) => *into |= *from,
            (Some(_), _) => {}
            (None, value) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Who the federation is, given what the upstreams that answered said they are (by
/// prefix). Lists can
/// change with a reload, so `listChanged` is declared for each kind.
pub(super) fn federated_info(answered: &[(&str, ServerInfo)]) -> ServerInfo {
    let mut capabilities = Map::new();
    let mut instructions = Vec::new();
    for (prefix, info) in answered {
        if let Value::Object(theirs) = &info.capabilities {
            merge_capabilities(&mut capabilities, theirs);
        }
        if let Some(text) = &info.instructions {
            instructions.push(format!("{prefix}: {text}"));
        }
    }
    for kind in ["tools", "prompts", "resources"] {
        if let Some(Value::Object(kind)) = capabilities.get_mut(kind) {
            kind.insert("listChanged".into(), Value::Bool(true));
        }
    }
    ServerInfo {
        name: "tether-gateway".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: Value::Object(capabilities),
        instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let next = BTreeMap::from([
            ("a".to_owned(), "c=1".to_owned()),
            ("b".to_owned(), String::new()),
        ]);
        assert_eq!(decode_cursor(&encode_cursor(&next)), Some(next));
        assert_eq!(decode_cursor("not-ours"), None);
        // Base64 of "not json".
        assert_eq!(decode_cursor("bm90IGpzb24"), None);
    }

    #[test]
    fn capabilities_merge_as_a_union_and_lists_may_change() {
        let info = |capabilities: Value, instructions: Option<&str>| ServerInfo {
            name: "x".into(),
            version: "1".into(),
            capabilities,
            instructions: instructions.map(str::to_owned),
        };
        let merged = federated_info(&[
            (
                "a",
                info(json!({"tools": {}, "logging": {}}), Some("counts")),
            ),
            (
                "b",
                info(
                    json!({"tools": {"listChanged": false}, "resources": {"subscribe": true}}),
                    None,
                ),
            ),
        ]);
        assert_eq!(
            merged.capabilities,
            json!({"tools": {"listChanged": true}, "logging": {}, "resources": {"subscribe": true, "listChanged": true}})
        );
        assert_eq!(merged.instructions.as_deref(), Some("a: counts"));
        assert_eq!(merged.name, "tether-gateway");
    }
}
