//! The in-process backend: events and sessions held in this process's memory.
//!
//! It owns the memory layout (per-stream logs of pre-encoded frames, indexed by seq), the
//! per-session caps and eviction order, retention after completion, and the tombstones that
//! let a reader of an expired stream hear `Expired` rather than `UnknownStream`. It does not
//! survive a restart or share streams between nodes; the SQLite and Redis backends do that
//! behind the same traits.
//!
//! Locking: one `std::sync::Mutex` per session holds that session's streams, so sessions never
//! wait for each other except on short map look-ups, and caps (which are per session) are
//! enforced under one lock. No lock is held across an `.await`: a waiter registers under the
//! session lock and awaits a `tokio::sync::Notify` of its stream, which an append wakes only
//! when someone registered since the last wake-up.

mod events;
mod sessions;

pub use events::MemoryEventStore;
pub use sessions::MemorySessionStore;
