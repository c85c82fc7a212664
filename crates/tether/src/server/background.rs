//! The server's background work, started once when a server is built: the idle-session
//! sweeper, the periodic answer to requests (and failure of tasks) that a dead node of a
//! shared store left unfinished, the relay inbox (requests other nodes hand to this one) and the stores' own
//! background tasks (the memory store's retention sweeper).
//!
//! Each task holds only a weak reference to the [`ServerState`], so it ends when the server
//! is dropped, or at shutdown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tether_proto::ids::SessionId;

use super::handoff;
use super::orphans;
use super::state::ServerState;
use crate::store::StartTasks;

/// The sweeper looks for idle sessions this often relative to `session_idle`, so a session
/// ends at most a quarter past its idle time.
const SWEEPS_PER_IDLE_PERIOD: u32 = 4;

/// How often the server asks its store for streams orphaned by another process (a dead node
/// of a shared store): a small fraction of a node lease, and a cheap call for every store.
const ORPHAN_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Lower bound of the sweep period: short idle times (tests) must not spin the sweeper.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(10);
/// Upper bound of the sweep period: with the default 30-minute idle time, expired sessions'
/// memory is reclaimed within half a minute.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Starts the background work (inside a runtime), with the stores' own tasks: called once,
/// by `ServerBuilder::build`.
pub(crate) fn start(state: &Arc<ServerState>, store_tasks: Option<StartTasks>) {
    if let Some(start) = store_tasks {
        start();
    }
    let weak: Weak<ServerState> = Arc::downgrade(state);
    if let Some(inbox) = state.relay.as_ref().and_then(|relay| relay.take_inbox()) {
        tokio::spawn(handoff::serve(weak.clone(), inbox));
    }
    let shutdown = state.shutdown.clone();
    let interval = (state.config.session_idle / SWEEPS_PER_IDLE_PERIOD)
        .clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL);
    tokio::spawn({
        let weak = weak.clone();
        let shutdown = shutdown.clone();
        async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(interval) => {}
                }
                let Some(state) = weak.upgrade() else { break };
                sweep(&state).await;
            }
        }
    });
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(ORPHAN_POLL_INTERVAL) => {}
            }
            let Some(state) = weak.upgrade() else { break };
            answer_orphans(&state).await;
        }
    });
}

/// Answers the streams the store reports orphaned since the last look, and fails the tasks
/// it reports orphaned (with a shared store, those of a node whose lease ran out).
async fn answer_orphans(state: &ServerState) {
    match orphans::answer_orphans(&*state.events).await {
        Ok(report) => state.metrics.orphans_answered(report.requests as u64),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "looking for orphaned streams failed");
        }
    }
    match state.tasks.fail_orphans().await {
        Ok(failed) if failed.is_empty() => {}
        Ok(failed) => tracing::info!(
            tasks = failed.len(),
            "tasks whose node stopped while they ran: failed"
        ),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "looking for orphaned tasks failed");
        }
    }
}

/// One sweep: sessions with requests running or connections open are kept alive (a long
/// tool call or an open GET stream is activity), the rest expire after `session_idle`.
async fn sweep(state: &ServerState) {
    match state.tasks.remove_expired().await {
        Ok(removed) => {
            for task in &removed {
                if let Some(session) = &task.events_session
                    && let Err(error) = state.events.remove_session(session).await
                {
                    tracing::debug!(task = %task.id, error = %crate::error_chain(&error), "an expired task's events stayed");
                }
            }
            if !removed.is_empty() {
                tracing::debug!(removed = removed.len(), "expired tasks removed");
            }
        }
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "expired-task sweep failed")
        }
    }
    let (busy, quiet): (Vec<_>, Vec<_>) = state
        .runtime_busyness()
        .into_iter()
        .partition(|(_, busy)| *busy);
    // Runtime state whose record is gone (a DELETE that raced a request re-creating the
    // runtime, or a session removed by another node) is dropped here.
    for (id, _) in &quiet {
        if let Ok(None) = state.sessions.get(id).await {
            state.forget(id);
            let _ = state.events.remove_session(id).await;
        }
    }
    let busy: Vec<SessionId> = busy.into_iter().map(|(id, _)| id).collect();
    for id in &busy {
        if let Err(error) = state.sessions.touch(id).await {
            tracing::warn!(session = %id, error = %crate::error_chain(&error), "could not keep a busy session alive");
        }
    }
    let expired = match state.sessions.expire_idle(state.config.session_idle).await {
        Ok(expired) => expired,
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "idle-session sweep failed");
            return;
        }
    };
    for id in expired {
        tracing::info!(session = %id, "session expired");
        state.forget(&id);
        if let Err(error) = state.events.remove_session(&id).await {
            tracing::warn!(session = %id, error = %crate::error_chain(&error), "could not free an expired session");
        }
    }
}
