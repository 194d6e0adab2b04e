//! The embedded SQLite store: the default for a single instance.
//!
//! The database is one file, created if missing, in WAL mode (readers do not block the writer)
//! with `synchronous = FULL`, so a committed hand-off survives power loss; `NORMAL` would be
//! faster and could lose the last commits, which for payments is the wrong trade. SQLite has no
//! `FOR UPDATE SKIP LOCKED`: the claim is a single `UPDATE … WHERE task_id IN (SELECT … LIMIT n)
//! RETURNING` (see `queries.rs`), which SQLite runs under its one-writer lock, so two claimers (threads or
//! processes) can never take the same row. Multi-statement writes use `BEGIN IMMEDIATE` to take
//! the write lock up front and avoid `SQLITE_BUSY` upgrades.

mod queries;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteQueryResult, SqliteSynchronous};
use tokio::sync::Notify;

use crate::error::DurableError;
use crate::sql::{Dialect, RowsAffected, SqlStore, Statements, pool_options};
use crate::store::StoreResult;

impl RowsAffected for SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const STATEMENTS: &'static Statements = &queries::STATEMENTS;
    const SINGLE_WRITER: bool = true;

    /// Only this process's hand-offs wake its workers; another process's are found by polling.
    async fn listen(
        _pool: &sqlx::Pool<Self>,
        _wake: Arc<Notify>,
    ) -> StoreResult<Option<tokio::task::AbortHandle>> {
        Ok(None)
    }
}

/// Settings for [`SqliteStore::open_with`].
///
/// # Default
/// - `max_connections`: 4
/// - `busy_timeout`: 5 s (how long a writer waits for another's lock before failing)
#[derive(Debug, Clone)]
pub struct SqliteStoreOptions {
    path: PathBuf,
    max_connections: u32,
    busy_timeout: Duration,
}

impl SqliteStoreOptions {
    /// Options for the database file at `path` (created, with its parent directory, if missing).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteStoreOptions {
            path: path.into(),
            max_connections: 4,
            busy_timeout: Duration::from_secs(5),
        }
    }

    /// Sets the pool size. SQLite serialises writers anyway; more connections help readers.
    pub fn with_max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets how long a write waits for the lock held by another connection or process.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }
}

/// A [`DurableStore`](crate::DurableStore) in one SQLite file.
///
/// # Several processes
///
/// SQLite has one write lock per file. Processes sharing the file take turns, which is fine
/// while each write is short; but one writer that stalls while holding the lock (a process
/// stopped or starved mid-transaction) makes every other process's writes fail once they have
/// waited `busy_timeout` (5 s by default). Nothing is lost: a failed claim claims nothing, and a
/// result that could not be written leaves the lease to expire and the task to be rescued and
/// run again (so handlers must be idempotent, as they must be anyway). But the queue stalls with
/// the slowest process. For several worker processes use PostgreSQL (feature `postgres`), whose
/// row locks let workers skip each other's tasks; with SQLite, run one worker process (with as
/// much [`concurrency`](crate::WorkerConfig::with_concurrency) as needed).
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// Opens (creating if missing) the database at `path` with the default options and applies
    /// the embedded migrations.
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(SqliteStoreOptions::new(path.as_ref())).await
    }

    /// Opens the database described by `options` and applies the embedded migrations.
    pub async fn open_with(options: SqliteStoreOptions) -> StoreResult<Self> {
        if options.max_connections == 0 {
            return Err(DurableError::InvalidConfig {
                field: "max_connections",
                reason: "must be at least 1".to_owned(),
            });
        }
        if let Some(parent) = options.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Startup only: a blocking call here is cheaper than a tokio `fs` dependency.
            std::fs::create_dir_all(parent).map_err(|e| DurableError::InvalidConfig {
                field: "path",
                reason: format!("cannot create directory {}: {e}", parent.display()),
            })?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(&options.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.busy_timeout);
        let pool = pool_options::<Sqlite>()
            .max_connections(options.max_connections)
            .connect_with(connect)
            .await
            .map_err(DurableError::db("sqlite", "open the database file"))?;
        Self::from_pool(pool).await
    }
}
