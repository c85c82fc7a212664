//! [`Stores`]: the bundle a server runs on — the event store, the session store, the task
//! store, and, for a store that several nodes share, the relay between them — opened the same
//! way for every backend.
//!
//! Each constructor opens one backend with the same [`StoreLimits`] and returns the bundle;
//! the server takes it whole, so the three parts always belong together. Background work a
//! store needs inside a runtime (the memory store's retention sweeper) travels with the bundle
//! and starts when the server is built. It does not own the backends (each is its own module)
//! or what the server does with them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::event_store::EventStore;
use super::limits::StoreLimits;
use super::memory::{MemoryEventStore, MemorySessionStore};
use super::relay::Relay;
use super::session_store::SessionStore;
use super::tasks::{MemoryTaskStore, TaskStore};

/// Shortest period of the memory store's retention sweeper, whatever its retention.
const MIN_MEMORY_SWEEP_PERIOD: Duration = Duration::from_secs(1);

/// Store background work that needs a runtime, started once the server is built.
pub(crate) type StartTasks = Box<dyn FnOnce() + Send>;

/// The stores a server runs on. See the module docs.
///
/// ```no_run
/// # async fn open() -> Result<(), Box<dyn std::error::Error>> {
/// use tether::store::{StoreLimits, Stores};
///
/// let memory = Stores::memory(StoreLimits::default());
/// # #[cfg(feature = "sqlite")]
/// let sqlite = Stores::sqlite("tether.db", StoreLimits::default())?;
/// # #[cfg(feature = "redis")]
/// let redis = Stores::redis("redis://127.0.0.1:6379", StoreLimits::default()).await?;
/// # Ok(()) }
/// ```
pub struct Stores {
    pub(crate) events: Arc<dyn EventStore>,
    pub(crate) sessions: Arc<dyn SessionStore>,
    pub(crate) tasks: Arc<dyn TaskStore>,
    pub(crate) relay: Option<Arc<dyn Relay>>,
    #[cfg_attr(
        not(feature = "server"),
        expect(dead_code, reason = "only a server starts the stores' background work")
    )]
    pub(crate) start: Option<StartTasks>,
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores")
            .field("relay", &self.relay.as_ref().map(|relay| relay.node_id()))
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// In-process stores: fast, gone with the process. Their retention sweeper starts with
    /// the server.
    #[must_use]
    pub fn memory(limits: StoreLimits) -> Self {
        let events = Arc::new(MemoryEventStore::new(limits));
        // Completed streams of sessions nobody touches expire only through the sweeper; a
        // tenth of the retention is the period the store recommends.
        let period = (events.config().retention / 10).max(MIN_MEMORY_SWEEP_PERIOD);
        let sweeper = Arc::clone(&events);
        Self {
            events,
            sessions: Arc::new(MemorySessionStore::new()),
            tasks: Arc::new(MemoryTaskStore::new()),
            relay: None,
            start: Some(Box::new(move || drop(sweeper.spawn_sweeper(period)))),
        }
    }

    /// The SQLite stores in the file at `path` (created if missing), with the default
    /// durability (WAL, `synchronous = NORMAL`): they survive a restart of the process.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or set up, is not a database, or is in use by another
    /// process ([`SqliteOpenError`](super::sqlite::SqliteOpenError)).
    #[cfg(feature = "sqlite")]
    pub fn sqlite(
        path: impl Into<std::path::PathBuf>,
        limits: StoreLimits,
    ) -> Result<Self, super::sqlite::SqliteOpenError> {
        let mut config = super::sqlite::SqliteStoreConfig::new(path);
        config.limits = limits;
        Self::sqlite_with(config)
    }

    /// The SQLite stores as `config` says (durability included).
    ///
    /// # Errors
    ///
    /// As for [`Stores::sqlite`].
    #[cfg(feature = "sqlite")]
    pub fn sqlite_with(
        config: super::sqlite::SqliteStoreConfig,
    ) -> Result<Self, super::sqlite::SqliteOpenError> {
        let path = config.path.clone();
        let (events, sessions) = super::sqlite::open(config)?;
        let tasks = sessions
            .task_store()
            .map_err(|source| super::sqlite::SqliteOpenError::Tasks { path, source })?;
        Ok(Self::custom(Arc::new(events), Arc::new(sessions)).with_tasks(Arc::new(tasks)))
    }

    /// The Redis stores at `url` (`redis://[user:password@]host:port[/db]`) with the default
    /// key prefix and node id, and their relay: several nodes on one Redis serve each other's
    /// sessions, with no sticky sessions.
    ///
    /// # Errors
    ///
    /// When the URL is not Redis's or Redis cannot be reached
    /// ([`RedisOpenError`](super::redis::RedisOpenError)).
    #[cfg(feature = "redis")]
    pub async fn redis(
        url: impl Into<String>,
        limits: StoreLimits,
    ) -> Result<Self, super::redis::RedisOpenError> {
        let mut config = super::redis::RedisStoreConfig::new(url);
        config.limits = limits;
        Self::redis_with(config).await
    }

    /// The Redis stores as `config` says (key prefix, node id, lease, timeouts).
    ///
    /// # Errors
    ///
    /// As for [`Stores::redis`].
    #[cfg(feature = "redis")]
    pub async fn redis_with(
        config: super::redis::RedisStoreConfig,
    ) -> Result<Self, super::redis::RedisOpenError> {
        let url = config.url.clone();
        let (events, sessions) = super::redis::open(config).await?;
        let relay = events.relay();
        let tasks =
            sessions
                .task_store()
                .await
                .map_err(|error| super::redis::RedisOpenError::Connect {
                    url,
                    reason: error.to_string(),
                })?;
        Ok(Self::custom(Arc::new(events), Arc::new(sessions))
            .with_relay(Arc::new(relay))
            .with_tasks(Arc::new(tasks)))
    }

    /// Stores of your own: any [`EventStore`] and [`SessionStore`] (which must share their
    /// backend: a session's events go with it), with tasks in memory until
    /// [`with_tasks`](Self::with_tasks) says otherwise. Start any background work they need
    /// yourself.
    #[must_use]
    pub fn custom(events: Arc<dyn EventStore>, sessions: Arc<dyn SessionStore>) -> Self {
        Self {
            events,
            sessions,
            tasks: Arc::new(MemoryTaskStore::new()),
            relay: None,
            start: None,
        }
    }

    /// Keeps tasks in `tasks` (the same backend as the events, for tasks that survive what
    /// the events survive). Replaces the task store set before.
    #[must_use]
    pub fn with_tasks(mut self, tasks: Arc<dyn TaskStore>) -> Self {
        self.tasks = tasks;
        self
    }

    /// Lets servers on these stores share them: requests for a session whose handler runs on
    /// another node go to that node through `relay` (see [`super::relay`]). Replaces any relay
    /// set before.
    #[must_use]
    pub fn with_relay(mut self, relay: Arc<dyn Relay>) -> Self {
        self.relay = Some(relay);
        self
    }

    /// The event store.
    #[must_use]
    pub fn events(&self) -> &Arc<dyn EventStore> {
        &self.events
    }

    /// The session store.
    #[must_use]
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        &self.sessions
    }

    /// The task store (the tasks extension's tasks).
    #[must_use]
    pub fn tasks(&self) -> &Arc<dyn TaskStore> {
        &self.tasks
    }

    /// The relay, for stores that several nodes share.
    #[must_use]
    pub fn relay(&self) -> Option<&Arc<dyn Relay>> {
        self.relay.as_ref()
    }
}
