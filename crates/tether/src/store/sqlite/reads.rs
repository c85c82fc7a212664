//! Reads from the file: a range of a stream's events on a read-only connection, checked
//! against the stream's owner and retention, decoded from chunks.

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};
use tether_proto::ids::{EventId, StreamId};

use super::config::SqliteStoreConfig;
use super::values::{ms, now_ms, unavailable};
use crate::store::chunk;
use crate::store::error::StoreError;
use crate::store::event_store::{ReadBatch, StoredEvent, StreamOwner};

/// A stored frame as an event: the message is the `data` line's value.
pub(super) fn stored_event(id: EventId, frame: Bytes) -> StoredEvent {
    StoredEvent::new(id, frame, None)
}

/// One read, in one read transaction so the stream row and its events agree.
pub(super) fn read(
    conn: &mut Connection,
    config: &SqliteStoreConfig,
    owner: &StreamOwner,
    stream: StreamId,
    from: Option<u64>,
    limit: usize,
) -> Result<ReadBatch, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    let row = tx
        .prepare_cached(
            "SELECT principal, session, first_seq, completed_at FROM streams WHERE stream = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([stream.as_str()], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                    ))
                })
                .optional()
        })
        .map_err(unavailable)?;
    let Some((principal, session, first_seq, completed_at)) = row else {
        // Gone: a tombstone of this owner says it expired.
        let tombstone = tx
            .prepare_cached("SELECT principal, session FROM tombstones WHERE stream = ?1")
            .and_then(|mut statement| {
                statement
                    .query_row([stream.as_str()], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                    })
                    .optional()
            })
            .map_err(unavailable)?;
        return Err(match tombstone {
            Some((p, s)) if *p == *owner.principal && s == owner.session.as_str() => {
                StoreError::Expired
            }
            _ => StoreError::UnknownStream,
        });
    };
    if session != owner.session.as_str() || *principal != *owner.principal {
        return Err(StoreError::UnknownStream);
    }
    if completed_at.is_some_and(|at| now_ms().saturating_sub(at) >= ms(config.limits.retention)) {
        return Err(StoreError::Expired);
    }
    let complete = completed_at.is_some();
    let Some(from) = from else {
        return Ok(ReadBatch {
            events: Vec::new(),
            complete,
        });
    };
    let first_seq = u64::try_from(first_seq).unwrap_or(0);
    if from < first_seq {
        return Err(StoreError::Expired);
    }
    // From the chunk holding `from` (the last one starting at or before it) on, until one
    // more event than asked for tells whether the batch reaches the end.
    let mut events = Vec::new();
    let mut more = false;
    {
        let mut statement = tx
            .prepare_cached(
                "SELECT first_seq, frames, packing FROM chunks
                 WHERE stream = ?1 AND first_seq >= coalesce(
                     (SELECT max(first_seq) FROM chunks WHERE stream = ?1 AND first_seq <= ?2), ?2)
                 ORDER BY first_seq",
            )
            .map_err(unavailable)?;
        let mut rows = statement
            .query(params![
                stream.as_str(),
                i64::try_from(from).unwrap_or(i64::MAX)
            ])
            .map_err(unavailable)?;
        'rows: while let Some(row) = rows.next().map_err(unavailable)? {
            let first: i64 = row.get(0).map_err(unavailable)?;
            let first = u64::try_from(first).unwrap_or(0);
            let blob = row
                .get_ref(1)
                .and_then(|value| Ok(value.as_blob()?))
                .map_err(unavailable)?;
            let packing = row.get(2).map_err(unavailable)?;
            let chunk = chunk::Packing::from_code(packing)
                .and_then(|packing| chunk::unpack(packing, blob))
                .map_err(unavailable)?;
            for (seq, frame) in (first..).zip(chunk::frames(chunk)) {
                let frame = frame.map_err(unavailable)?;
                if seq < from {
                    continue;
                }
                if events.len() == limit {
                    more = true;
                    break 'rows;
                }
                events.push(stored_event(EventId::new(stream, seq), frame));
            }
        }
    }
    drop(tx);
    Ok(ReadBatch {
        events,
        complete: complete && !more,
    })
}
