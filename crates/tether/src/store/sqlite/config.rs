//! How a SQLite store is configured ([`SqliteStoreConfig`], [`Durability`]), why opening
//! one fails ([`SqliteOpenError`]), and the bounds of its readers, batches and sweeps.

use std::path::PathBuf;

use crate::store::error::StoreError;
use crate::store::limits::StoreLimits;

/// How SQLite syncs commits to disk (`PRAGMA synchronous`, always in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL`: a commit survives a crash of the process (the WAL is written
    /// before append returns), but the last transactions before a power loss or OS crash may
    /// be lost; the database itself stays consistent. Syncs only at checkpoints: fast.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is synced to disk before append returns, so it
    /// survives power loss too. One sync per group commit (not per event).
    Full,
}

/// Where and how a SQLite store keeps its data. The bounds are the [`StoreLimits`] every store
/// shares.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteStoreConfig {
    /// The database file; created if missing.
    pub path: PathBuf,
    /// What the store retains and for how long (see [`StoreLimits`]). Retention is measured on the wall clock, so it runs on across restarts.
    pub limits: StoreLimits,
    /// How commits reach the disk; see [`Durability`].
    pub durability: Durability,
}

impl SqliteStoreConfig {
    /// The default [`StoreLimits`], with `synchronous = NORMAL`, at `path`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            limits: StoreLimits::default(),
            durability: Durability::Normal,
        }
    }
}

/// Why a SQLite store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteOpenError {
    /// The file exists but is not a SQLite database (or is encrypted or corrupt).
    #[error("{} is not a SQLite database", path.display())]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },
    /// SQLite refused to open the file or set it up.
    #[error("cannot open SQLite store {}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// Another process has the store open: two writers would hand out the same sequence
    /// numbers, so a store belongs to one process at a time.
    #[error("SQLite store {} is in use by another process", path.display())]
    InUse {
        /// The database file.
        path: PathBuf,
    },
    /// The file's tasks could not be read (a record that is not a task's).
    #[error("cannot read the tasks of SQLite store {}", path.display())]
    Tasks {
        /// The database file.
        path: PathBuf,
        /// What went wrong.
        source: StoreError,
    },
    /// The lock file next to the database could not be created.
    #[error("cannot create the lock file {}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The writer or checkpoint thread could not be started.
    #[error("cannot start the SQLite store's threads")]
    Thread(#[from] std::io::Error),
}

/// Most read-only connections, and reads at once: a burst of readers waits for a connection
/// rather than opening (and preparing statements on) one each.
pub(super) const MAX_READERS: usize = 8;

/// Most commands applied in one transaction.
pub(super) const MAX_BATCH: usize = 4096;

/// Most free pages (4 KiB each) returned to the file system per sweep.
pub(super) const VACUUM_PAGES: usize = 1024;

/// Most expired streams deleted between two batches, so appends never wait long for it.
pub(super) const SWEEP_LIMIT: usize = 256;
