//! What Redis answers, as the store reads it: a script's [`Reply`], the orphaned streams and
//! the chunked entries in it, and every Redis failure as the [`StoreError`] the store reports.

use std::sync::Arc;

use bytes::Bytes;
use redis::Value;
use tether_proto::ids::{EventId, SessionId, StreamId};

use crate::store::chunk;
use crate::store::error::{StoreError, StoreFailure};
use crate::store::event_store::{OrphanedStream, StoredEvent, StreamOwner};

/// A backend error as the store reports it, its source kept.
pub(super) fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Unavailable(StoreFailure::new(error))
}

/// A failure without an error value, as the store reports it.
pub(super) fn unavailable_because(reason: impl Into<String>) -> StoreError {
    StoreError::Unavailable(StoreFailure::msg(reason))
}

/// A script's reply: its status and the values after it.
pub(super) struct Reply {
    pub(super) status: String,
    pub(super) values: Vec<Value>,
}

impl Reply {
    pub(super) fn parse(value: Value) -> Result<Self, StoreError> {
        let Value::Array(mut values) = value else {
            return Err(unexpected("not an array"));
        };
        if values.is_empty() {
            return Err(unexpected("empty reply"));
        }
        let status = match values.remove(0) {
            Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Value::SimpleString(text) => text,
            _ => return Err(unexpected("no status")),
        };
        Ok(Self { status, values })
    }

    pub(super) fn int(&self, at: usize) -> Result<i64, StoreError> {
        match self.values.get(at) {
            Some(Value::Int(n)) => Ok(*n),
            _ => Err(unexpected("missing integer")),
        }
    }
}

/// The orphans of a NODE_OPEN or CLAIM_ORPHANS reply: `<stream> <principal> <session>
/// <request ids>` of each, flat.
pub(super) fn orphans_in(reply: Reply) -> Result<Vec<OrphanedStream>, StoreError> {
    if reply.status != "ok" {
        return Err(unexpected(&reply.status));
    }
    let Some(Value::Array(fields)) = reply.values.into_iter().next() else {
        return Err(unexpected("no orphan list"));
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        _ => None,
    };
    let mut orphans = Vec::with_capacity(fields.len() / 4);
    for entry in fields.chunks(4) {
        let [stream, principal, session, requests] = entry else {
            return Err(unexpected("orphan entry"));
        };
        let stream = text(stream)
            .and_then(|id| StreamId::parse(&id).ok())
            .ok_or_else(|| unexpected("orphan stream id"))?;
        let session = text(session)
            .and_then(|id| SessionId::parse(&id).ok())
            .ok_or_else(|| unexpected("orphan session id"))?;
        let principal = text(principal).ok_or_else(|| unexpected("orphan principal"))?;
        orphans.push(OrphanedStream {
            owner: StreamOwner {
                principal: Arc::from(principal),
                session,
            },
            stream,
            // Written by this module from `RequestId`s: unreadable only if someone edited the
            // key, and then there is nobody to name.
            requests: text(requests)
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default(),
        });
    }
    Ok(orphans)
}

/// The error of an append script's refusal status.
pub(super) fn append_refused(status: &str) -> StoreError {
    match status {
        "completed" => StoreError::Completed,
        "unknown" => StoreError::UnknownStream,
        "too_large" => StoreError::EventTooLarge,
        other => unexpected(other),
    }
}

pub(super) fn unexpected(what: &str) -> StoreError {
    unavailable_because(format!("unexpected reply from a tether script: {what}"))
}

/// Adds the events of one XRANGE entry of `stream` from seq `from` on to `events`: a chunk
/// (`[id, ["n", count, "c", chunk]]`) or, as written before chunks, one frame
/// (`[id, ["f", frame]]`).
pub(super) fn push_entry(
    stream: StreamId,
    entry: Value,
    from: u64,
    events: &mut Vec<StoredEvent>,
) -> Result<(), StoreError> {
    let Value::Array(parts) = entry else {
        return Err(unexpected("stream entry"));
    };
    let mut parts = parts.into_iter();
    let (Some(Value::BulkString(id)), Some(Value::Array(fields))) = (parts.next(), parts.next())
    else {
        return Err(unexpected("stream entry"));
    };
    let first = std::str::from_utf8(&id)
        .ok()
        .and_then(|id| id.strip_prefix("1-"))
        .and_then(|seq| seq.parse::<u64>().ok())
        .ok_or_else(|| unexpected("stream entry id"))?;
    let mut fields = fields.into_iter();
    let (Some(Value::BulkString(name)), value) = (fields.next(), fields.next()) else {
        return Err(unexpected("stream entry fields"));
    };
    match (name.as_slice(), value) {
        (b"f", Some(Value::BulkString(frame))) => {
            if first >= from {
                events.push(StoredEvent::new(
                    EventId::new(stream, first),
                    Bytes::from(frame),
                    None,
                ));
            }
        }
        (b"n", Some(_)) => {
            let (Some(Value::BulkString(name)), Some(Value::BulkString(blob))) =
                (fields.next(), fields.next())
            else {
                return Err(unexpected("stream entry chunk"));
            };
            if name != b"c" {
                return Err(unexpected("stream entry chunk"));
            }
            for (seq, frame) in (first..).zip(chunk::frames(Bytes::from(blob))) {
                let frame = frame.map_err(unavailable)?;
                if seq >= from {
                    events.push(StoredEvent::new(EventId::new(stream, seq), frame, None));
                }
            }
        }
        _ => return Err(unexpected("stream entry fields")),
    }
    Ok(())
}
