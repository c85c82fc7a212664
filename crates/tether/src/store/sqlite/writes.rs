//! The writer's writes: creating a stream, appending (alone or a lane's queue), the pending
//! rows inserted before a batch commits, and completing a stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::params;
use tether_proto::ids::{EventId, SessionId, StreamId};

use super::values::{REQUEST_KIND, STANDALONE_KIND, now_ms, unavailable_because};
use super::writer::{SessionState, Sql, StreamState, Writer};
use crate::store::error::StoreError;
use crate::store::event_store::{StreamKind, StreamOwner};
use crate::store::pipeline::{Lane, Queued};
use crate::store::{chunk, frame};

impl Writer {
    pub(super) fn create_stream(
        &mut self,
        owner: &StreamOwner,
        kind: StreamKind,
        retry: Duration,
        requests: &str,
    ) -> Sql<Result<StreamId, StoreError>> {
        let stream = StreamId::generate();
        let frame = frame::priming_frame(stream, retry);
        if frame.len() > self.config.limits.max_bytes_per_session {
            return Ok(Err(StoreError::EventTooLarge));
        }
        self.expire(&owner.session, now_ms())?;
        loop {
            let streams = self
                .sessions
                .get(&owner.session)
                .map_or(0, |state| state.usage.streams);
            if streams < self.config.limits.max_streams_per_session {
                break;
            }
            if !self.evict_oldest_completed(&owner.session)? {
                return Ok(Err(StoreError::TooManyStreams));
            }
        }
        let kind = match kind {
            StreamKind::Request => REQUEST_KIND,
            StreamKind::Standalone => STANDALONE_KIND,
        };
        self.conn
            .prepare_cached(
                "INSERT INTO streams (stream, principal, session, kind, first_seq, completed_at, requests)
                 VALUES (?1, ?2, ?3, ?4, 0, NULL, ?5)",
            )?
            .execute(params![
                stream.as_str(),
                &*owner.principal,
                owner.session.as_str(),
                kind,
                requests
            ])?;
        let len = frame.len();
        self.pending.push((stream, EventId::PRIMING_SEQ, frame));
        self.streams.insert(
            stream,
            StreamState {
                session: owner.session.clone(),
                principal: Arc::clone(&owner.principal),
                first_seq: 0,
                next_seq: 1,
                events: 1,
                bytes: len,
                complete: false,
            },
        );
        let session = self.sessions.entry(owner.session.clone()).or_default();
        session.usage.streams += 1;
        session.usage.events += 1;
        session.usage.bytes += len;
        session.appended.push_back((stream, 0, len));
        self.touched.push(stream);
        self.evict_to_caps(&owner.session)?;
        Ok(Ok(stream))
    }

    pub(super) fn append(
        &mut self,
        stream: StreamId,
        message: &str,
    ) -> Sql<Result<EventId, StoreError>> {
        let Some(session) = self.streams.get(&stream).map(|state| state.session.clone()) else {
            return self.gone_for_append(stream);
        };
        self.expire(&session, now_ms())?;
        let Some(state) = self.streams.get(&stream) else {
            return self.gone_for_append(stream);
        };
        if state.complete {
            return Ok(Err(StoreError::Completed));
        }
        let id = EventId::new(stream, state.next_seq);
        let frame = frame::message_frame(id, message);
        let len = frame.len();
        if len > self.config.limits.max_bytes_per_session {
            return Ok(Err(StoreError::EventTooLarge));
        }
        self.add_events(&session, stream, [(id.seq, frame)])?;
        Ok(Ok(id))
    }

    /// Stores one lane's pipelined appends (`queued`, taken from it in seq order) and returns
    /// those stored. The pipeline hands out seqs in order and refuses what this would refuse,
    /// so frames that do not fit here are dropped: their lane failed earlier (the frames queued
    /// behind a failed commit), their session was removed, or, were the pipeline wrong, a seq
    /// is not the next one, which fails the lane after the frames before it. The mirror is
    /// counted once for the run, not per event: a fast stream hands over thousands at once.
    pub(super) fn apply_lane(&mut self, lane: &Lane, mut queued: Vec<Queued>) -> Sql<Vec<Queued>> {
        let Some(first) = queued.first() else {
            return Ok(queued);
        };
        let stream = first.id.stream;
        let next_seq = match self.streams.get(&stream) {
            Some(state) if !state.complete && lane.failure().is_none() => state.next_seq,
            _ => return Ok(Vec::new()),
        };
        let in_order = queued
            .iter()
            .zip(next_seq..)
            .take_while(|(append, seq)| append.id.seq == *seq)
            .count();
        if in_order < queued.len() {
            let got = queued[in_order].id.seq;
            let expected = next_seq + in_order as u64;
            tracing::error!(%stream, expected, got, "sqlite store: pipelined append out of order");
            lane.fail(&unavailable_because(
                "a pipelined append arrived out of order",
            ));
            queued.truncate(in_order);
        }
        if queued.is_empty() {
            return Ok(queued);
        }
        let session = lane.session();
        self.expire(session, self.batch_started)?;
        self.add_events(
            session,
            stream,
            queued
                .iter()
                .map(|append| (append.id.seq, append.frame.clone())),
        )?;
        Ok(queued)
    }

    /// Inserts the events accounted for so far: each stream's consecutive events as few
    /// chunks as [`chunk::MAX_EVENTS`] and [`chunk::MAX_BYTES`] allow.
    pub(super) fn insert_pending(&mut self) -> Sql<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut pending = std::mem::take(&mut self.pending);
        let cuts = chunk::cut(&mut pending, |(stream, seq, frame)| {
            (*stream, *seq, frame.len())
        });
        let mut statement = self.conn.prepare_cached(
            "INSERT INTO chunks (stream, first_seq, last_seq, frames, packing)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let mut encoded = std::mem::take(&mut self.chunk);
        let mut packed = std::mem::take(&mut self.packed);
        for cut in cuts {
            encoded.clear();
            for (_, _, frame) in &pending[cut.range.clone()] {
                chunk::push(&mut encoded, frame);
            }
            let (packing, stored) = chunk::pack(&encoded, &mut packed);
            statement.execute(params![
                cut.stream.as_str(),
                i64::try_from(cut.first).unwrap_or(i64::MAX),
                i64::try_from(cut.last()).unwrap_or(i64::MAX),
                stored,
                packing.code(),
            ])?;
        }
        // The buffers are kept for the next commit; one very large frame does not pin memory.
        if encoded.capacity() <= 2 * chunk::MAX_BYTES {
            self.chunk = encoded;
        }
        if packed.capacity() <= 2 * chunk::MAX_BYTES {
            self.packed = packed;
        }
        Ok(())
    }

    /// Adds the next events of `stream`, a stream of `session` (seq and frame, in seq order):
    /// their rows to the pending inserts, their counts to the mirror; then evicts to the caps.
    pub(super) fn add_events(
        &mut self,
        session: &SessionId,
        stream: StreamId,
        frames: impl IntoIterator<Item = (u64, Bytes)>,
    ) -> Sql<()> {
        if !self.sessions.contains_key(session) {
            self.sessions
                .insert(session.clone(), SessionState::default());
        }
        let (mut events, mut bytes) = (0, 0);
        if let Some(state) = self.sessions.get_mut(session) {
            for (seq, frame) in frames {
                events += 1;
                bytes += frame.len();
                state.appended.push_back((stream, seq, frame.len()));
                self.pending.push((stream, seq, frame));
            }
            state.usage.events += events;
            state.usage.bytes += bytes;
        }
        if let Some(state) = self.streams.get_mut(&stream) {
            state.next_seq += events as u64;
            state.events += events;
            state.bytes += bytes;
        }
        // One wake-up per stream and batch run, not per event.
        if self.touched.last() != Some(&stream) {
            self.touched.push(stream);
        }
        self.evict_to_caps(session)
    }

    pub(super) fn gone_for_append(&self, stream: StreamId) -> Sql<Result<EventId, StoreError>> {
        Ok(Err(if self.tombstoned(stream)? {
            StoreError::Completed
        } else {
            StoreError::UnknownStream
        }))
    }

    pub(super) fn complete(&mut self, stream: StreamId) -> Sql<Result<(), StoreError>> {
        let now = now_ms();
        let Some(state) = self.streams.get_mut(&stream) else {
            return Ok(if self.tombstoned(stream)? {
                Ok(())
            } else {
                Err(StoreError::UnknownStream)
            });
        };
        // Idempotent: completing twice must not restart retention.
        if !state.complete {
            state.complete = true;
            let session = state.session.clone();
            self.conn
                .prepare_cached("UPDATE streams SET completed_at = ?2 WHERE stream = ?1")?
                .execute(params![stream.as_str(), now])?;
            self.sessions
                .entry(session)
                .or_default()
                .completed
                .push_back((now, stream));
            self.touched.push(stream);
        }
        Ok(Ok(()))
    }

    /// Whether a stream missing from the mirror was removed after completion (a tombstone),
    /// rather than never known.
    pub(super) fn tombstoned(&self, stream: StreamId) -> Sql<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM tombstones WHERE stream = ?1")?
            .exists([stream.as_str()])
    }
}
