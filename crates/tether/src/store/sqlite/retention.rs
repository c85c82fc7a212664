//! What the writer removes: sessions and streams, expired ones, evictions to the per-session
//! caps, compaction of a session's bookkeeping, the sweep between batches and the incremental
//! vacuum.

use rusqlite::params;
use tether_proto::ids::{SessionId, StreamId};

use super::config::{SWEEP_LIMIT, VACUUM_PAGES};
use super::values::{ms, now_ms};
use super::writer::{Sql, Writer};

impl Writer {
    pub(super) fn remove_session(&mut self, session: &SessionId) -> Sql<()> {
        self.conn
            .prepare_cached(
                "DELETE FROM chunks WHERE stream IN (SELECT stream FROM streams WHERE session = ?1)",
            )?
            .execute([session.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM streams WHERE session = ?1")?
            .execute([session.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM tombstones WHERE session = ?1")?
            .execute([session.as_str()])?;
        if self.sessions.remove(session).is_some() {
            let gone: Vec<StreamId> = self
                .streams
                .iter()
                .filter(|(_, state)| state.session == *session)
                .map(|(stream, _)| *stream)
                .collect();
            for stream in gone {
                self.streams.remove(&stream);
                self.touched.push(stream);
            }
        }
        Ok(())
    }

    /// Removes `session`'s completed streams past retention at `now`.
    pub(super) fn expire(&mut self, session: &SessionId, now: i64) -> Sql<()> {
        let retention = ms(self.config.limits.retention);
        loop {
            let Some(state) = self.sessions.get_mut(session) else {
                return Ok(());
            };
            let Some(&(at, stream)) = state.completed.front() else {
                return Ok(());
            };
            if now.saturating_sub(at) < retention {
                return Ok(());
            }
            state.completed.pop_front();
            self.remove_stream(stream)?;
        }
    }

    pub(super) fn evict_oldest_completed(&mut self, session: &SessionId) -> Sql<bool> {
        let Some(stream) = self
            .sessions
            .get_mut(session)
            .and_then(|state| state.completed.pop_front())
            .map(|(_, stream)| stream)
        else {
            return Ok(false);
        };
        self.remove_stream(stream)?;
        Ok(true)
    }

    pub(super) fn evict_to_caps(&mut self, session: &SessionId) -> Sql<()> {
        loop {
            let Some(state) = self.sessions.get(session) else {
                return Ok(());
            };
            if state.usage.events <= self.config.limits.max_events_per_session
                && state.usage.bytes <= self.config.limits.max_bytes_per_session
            {
                return Ok(());
            }
            // Eviction deletes rows: the pending ones must be there to be deleted.
            self.insert_pending()?;
            if !self.evict_oldest_completed(session)? && !self.evict_oldest_live_event(session)? {
                return Ok(());
            }
        }
    }

    pub(super) fn evict_oldest_live_event(&mut self, session: &SessionId) -> Sql<bool> {
        loop {
            let Some(entry) = self
                .sessions
                .get_mut(session)
                .and_then(|state| state.appended.pop_front())
            else {
                return Ok(false);
            };
            let (stream, seq, len) = entry;
            let Some(state) = self.streams.get_mut(&stream) else {
                continue;
            };
            if seq != state.first_seq || state.events == 0 {
                continue;
            }
            state.first_seq += 1;
            state.events -= 1;
            state.bytes -= len;
            let first_seq = i64::try_from(state.first_seq).unwrap_or(i64::MAX);
            // A chunk goes once its last event does; a reader skips the evicted head of the
            // chunk that remains.
            self.conn
                .prepare_cached("DELETE FROM chunks WHERE stream = ?1 AND last_seq < ?2")?
                .execute(params![stream.as_str(), first_seq])?;
            self.conn
                .prepare_cached("UPDATE streams SET first_seq = ?2 WHERE stream = ?1")?
                .execute(params![stream.as_str(), first_seq])?;
            if let Some(state) = self.sessions.get_mut(session) {
                state.usage.events -= 1;
                state.usage.bytes -= len;
            }
            // Its new first seq is published: tail reads before it must stop.
            if self.touched.last() != Some(&stream) {
                self.touched.push(stream);
            }
            self.compact(session);
            return Ok(true);
        }
    }

    /// Drops stale `appended` entries once they outnumber the live ones.
    pub(super) fn compact(&mut self, session: &SessionId) {
        let Some(state) = self.sessions.get_mut(session) else {
            return;
        };
        if state.appended.len() <= 2 * state.usage.events + 64 {
            return;
        }
        let streams = &self.streams;
        state
            .appended
            .retain(|(stream, seq, _)| streams.get(stream).is_some_and(|s| *seq >= s.first_seq));
    }

    /// Removes a whole stream (expired or evicted), leaving a tombstone.
    pub(super) fn remove_stream(&mut self, stream: StreamId) -> Sql<()> {
        let Some(state) = self.streams.remove(&stream) else {
            return Ok(());
        };
        self.conn
            .prepare_cached("DELETE FROM chunks WHERE stream = ?1")?
            .execute([stream.as_str()])?;
        self.conn
            .prepare_cached("DELETE FROM streams WHERE stream = ?1")?
            .execute([stream.as_str()])?;
        if self.config.limits.max_tombstones > 0 {
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO tombstones (stream, principal, session) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    stream.as_str(),
                    &*state.principal,
                    state.session.as_str()
                ])?;
            let max = i64::try_from(self.config.limits.max_tombstones).unwrap_or(i64::MAX);
            self.conn
                .prepare_cached(
                    "DELETE FROM tombstones WHERE rowid <= (SELECT MAX(rowid) FROM tombstones) - ?1",
                )?
                .execute([max])?;
        }
        if let Some(session) = self.sessions.get_mut(&state.session) {
            session.usage.streams -= 1;
            session.usage.events -= state.events;
            session.usage.bytes -= state.bytes;
        }
        self.compact(&state.session);
        self.touched.push(stream);
        Ok(())
    }

    /// Frees up to [`VACUUM_PAGES`] pages, stepping the pragma to its end (it may free a page
    /// per step).
    pub(super) fn incremental_vacuum(&self) -> Sql<()> {
        let mut statement = self
            .conn
            .prepare_cached(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))?;
        let mut rows = statement.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    }

    /// Deletes up to [`SWEEP_LIMIT`] completed streams past retention, in one transaction.
    pub(super) fn sweep(&mut self) {
        let now = now_ms();
        let retention = ms(self.config.limits.retention);
        let mut due: Vec<(i64, SessionId)> = self
            .sessions
            .iter()
            .filter_map(|(session, state)| {
                let &(at, _) = state.completed.front()?;
                (now.saturating_sub(at) >= retention).then(|| (at, session.clone()))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_by_key(|(at, _)| *at);
        due.truncate(SWEEP_LIMIT);
        let result = self.transaction(|writer| {
            for (_, session) in &due {
                writer.expire(session, now)?;
            }
            Ok(())
        });
        if let Err(error) = result {
            tracing::warn!(error = %crate::error_chain(&error), "sqlite store: retention sweep failed");
            return;
        }
        // Compaction: hand a bounded number of freed pages back to the file system, so the
        // file shrinks after a burst without a blocking full VACUUM.
        if let Err(error) = self.incremental_vacuum() {
            tracing::warn!(error = %crate::error_chain(&error), "sqlite store: incremental vacuum failed");
        }
    }
}
