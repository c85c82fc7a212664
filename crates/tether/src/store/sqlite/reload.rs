//! Rebuilding the writer's mirror of the file when the store opens or a batch failed: the
//! streams, the session records and the chunks, one table each.

use std::sync::Arc;

use tether_proto::ids::{SessionId, StreamId};
use tether_proto::version::ProtocolVersion;

use super::values::REQUEST_KIND;
use super::writer::{Sql, StreamState, Writer};
use crate::lock as guard;
use crate::store::chunk;
use crate::store::event_store::{OrphanedStream, StreamOwner};
use crate::store::map::FastMap;
use crate::store::session_store::SessionRecord;

impl Writer {
    /// Rebuilds the mirror from the database: the streams (and the orphans among them), the
    /// session records, then the chunks' events, in that order, since each step counts into
    /// what the one before made.
    pub(super) fn reload(&mut self) -> Sql<()> {
        self.streams.clear();
        self.sessions.clear();
        self.orphans.clear();
        self.reload_streams()?;
        self.reload_sessions()?;
        self.reload_chunks()
    }

    /// Every stream's state, its session's stream count and completion order, and the
    /// Request streams left incomplete (orphans).
    pub(super) fn reload_streams(&mut self) -> Sql<()> {
        let mut completed = Vec::new();
        {
            let mut statement = self.conn.prepare(
                "SELECT stream, principal, session, first_seq, completed_at, kind, requests
                 FROM streams",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (Ok(stream), Ok(session)) = (
                    StreamId::parse(&row.get::<_, String>(0)?),
                    SessionId::parse(&row.get::<_, String>(2)?),
                ) else {
                    continue;
                };
                let principal: String = row.get(1)?;
                let first_seq = u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0);
                let completed_at: Option<i64> = row.get(4)?;
                let kind: i64 = row.get(5)?;
                let principal: Arc<str> = Arc::from(principal);
                if kind == REQUEST_KIND && completed_at.is_none() {
                    let requests: String = row.get(6)?;
                    self.orphans.push(OrphanedStream {
                        owner: StreamOwner {
                            principal: Arc::clone(&principal),
                            session: session.clone(),
                        },
                        stream,
                        // Written by this module from `RequestId`s: unreadable only if
                        // someone edited the file, and then there is nobody to name.
                        requests: serde_json::from_str(&requests).unwrap_or_default(),
                    });
                }
                let usage = &mut self.sessions.entry(session.clone()).or_default().usage;
                usage.streams += 1;
                if let Some(at) = completed_at {
                    completed.push((at, stream, session.clone()));
                }
                self.streams.insert(
                    stream,
                    StreamState {
                        session,
                        principal,
                        first_seq,
                        next_seq: first_seq,
                        events: 0,
                        bytes: 0,
                        complete: completed_at.is_some(),
                    },
                );
            }
        }
        completed.sort_by_key(|(at, _, _)| *at);
        for (at, stream, session) in completed {
            if let Some(state) = self.sessions.get_mut(&session) {
                state.completed.push_back((at, stream));
            }
        }
        Ok(())
    }

    /// Every session record, published to the async side.
    pub(super) fn reload_sessions(&mut self) -> Sql<()> {
        let mut records = FastMap::default();
        {
            let mut statement = self
                .conn
                .prepare("SELECT id, version, principal, standalone, client FROM sessions")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let parsed = (
                    SessionId::parse(&row.get::<_, String>(0)?),
                    ProtocolVersion::parse(&row.get::<_, String>(1)?),
                    StreamId::parse(&row.get::<_, String>(3)?),
                );
                // Written by this module: unreadable only if someone edited the file.
                let (Ok(id), Ok(version), Ok(standalone)) = parsed else {
                    continue;
                };
                let principal: Arc<str> = Arc::from(row.get::<_, String>(2)?);
                let client = row
                    .get::<_, Option<String>>(4)?
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .map(Arc::new);
                records.insert(
                    id.clone(),
                    SessionRecord {
                        id,
                        version,
                        principal,
                        standalone,
                        client,
                    },
                );
            }
        }
        *guard(&self.shared.records) = records;
        Ok(())
    }

    /// Every stored chunk's events, counted into its stream and session; a malformed chunk
    /// keeps its seqs taken and is left out.
    pub(super) fn reload_chunks(&mut self) -> Sql<()> {
        // Chunks in the order they were inserted: each session's events in append order,
        // up to the order of streams within one commit.
        let mut statement = self.conn.prepare(
            "SELECT stream, first_seq, frames, packing, last_seq FROM chunks ORDER BY rowid",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(stream) = StreamId::parse(&row.get::<_, String>(0)?) else {
                continue;
            };
            let first = u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0);
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            let stored = row.get_ref(2)?.as_blob()?;
            let Ok(blob) = chunk::Packing::from_code(row.get(3)?)
                .and_then(|packing| chunk::unpack(packing, stored))
            else {
                // Its seqs stay taken, so the stream's next append does not collide with it;
                // a read that reaches it fails rather than skipping it.
                let last = u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0);
                state.next_seq = state.next_seq.max(last + 1);
                tracing::error!(%stream, "sqlite store: a stored chunk is malformed; its events are left out");
                continue;
            };
            for (seq, frame) in (first..).zip(chunk::frames(blob)) {
                let Ok(frame) = frame else {
                    tracing::error!(%stream, "sqlite store: a stored chunk is malformed; its events after the last whole one are left out");
                    break;
                };
                // The head of a chunk whose first events were evicted.
                if seq < state.first_seq {
                    continue;
                }
                let len = frame.len();
                state.next_seq = state.next_seq.max(seq + 1);
                state.events += 1;
                state.bytes += len;
                if let Some(session) = self.sessions.get_mut(&state.session) {
                    session.usage.events += 1;
                    session.usage.bytes += len;
                    session.appended.push_back((stream, seq, len));
                }
            }
        }
        Ok(())
    }
}
