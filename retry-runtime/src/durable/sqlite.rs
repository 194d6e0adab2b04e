//! The embedded SQLite store: the default for a single instance.
//!
//! The database is one file, created if missing, in WAL mode (readers do not block the writer)
//! with `synchronous = FULL`, so a committed hand-off survives power loss; `NORMAL` would be
//! faster and could lose the last commits, which for payments is the wrong trade. SQLite has no
//! `FOR UPDATE SKIP LOCKED`: the claim is a single `UPDATE … WHERE task_id IN (SELECT … LIMIT n)
//! RETURNING`, which SQLite runs under its one-writer lock, so two claimers (threads or
//! processes) can never take the same row. Multi-statement writes use `BEGIN IMMEDIATE` to take
//! the write lock up front and avoid `SQLITE_BUSY` upgrades.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use super::backoff::DurableBackoff;
use super::clock::Timestamp;
use super::error::DurableError;
use super::migrate::{self, MIGRATIONS_TABLE};
use super::store::{
    DurableStore, StoreResult, rescue_decision, rescue_error, status_counts, transition_error,
};
use super::task::{Enqueued, Fence, NewTask, RawTask, Rescued, StatusCounts, Task, TaskId};

const BACKEND: &str = "sqlite";

/// The `WHERE` of a statement on a task a worker holds: its id, `running`, the worker's lease
/// and the attempt it claimed ([`Fence`]); see [`fenced`].
macro_rules! fence_where {
    () => {
        "WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3"
    };
}

macro_rules! cols {
    () => {
        "task_id, operation, idempotency_key, payload, status, retry_count, max_attempts, \
         next_attempt_at, locked_by, locked_until, last_error, output, alerted_at, created_at, \
         updated_at"
    };
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

/// A [`DurableStore`] in one SQLite file.
///
/// # Several processes
///
/// SQLite has one write lock per file. Processes sharing the file take turns, which is fine
/// while each write is short; but one writer that stalls while holding the lock (a process
/// stopped or starved mid-transaction) makes every other process's writes fail once they have
/// waited `busy_timeout` (5 s by default). Nothing is lost: a failed claim claims nothing, and a
/// result that could not be written leaves the lease to expire and the task to be rescued and
/// run again (so handlers must be idempotent, as they must be anyway). But the queue stalls with
/// the slowest process. For several worker processes use PostgreSQL (`durable-postgres`), whose
/// row locks let workers skip each other's tasks; with SQLite, run one worker process (with as
/// much [`concurrency`](crate::durable::WorkerConfig::with_concurrency) as needed).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
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
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .connect_with(connect)
            .await
            .map_err(DurableError::db(BACKEND, "open the database file"))?;
        Self::from_pool(pool).await
    }

    /// Wraps an existing pool and applies the embedded migrations. The pool's connect options
    /// are the caller's: use WAL and `synchronous = FULL` unless you know better.
    pub async fn from_pool(pool: SqlitePool) -> StoreResult<Self> {
        let store = SqliteStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool, for the application's own queries and for tests.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrate(&self) -> StoreResult<()> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(DurableError::db(
                BACKEND,
                "lock the database for migrations",
            ))?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS retry_durable_migrations (
                version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
        )
        .execute(&mut *tx)
        .await
        .map_err(DurableError::db(BACKEND, "create the migrations table"))?;
        let applied: Vec<(i64, String)> = sqlx::query_as(
            "SELECT version, checksum FROM retry_durable_migrations ORDER BY version",
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(DurableError::db(BACKEND, "read applied migrations"))?;
        let todo =
            migrate::plan(migrate::SQLITE, &applied).map_err(|reason| DurableError::Migration {
                backend: BACKEND,
                reason,
            })?;
        for m in todo {
            sqlx::raw_sql(m.sql)
                .execute(&mut *tx)
                .await
                .map_err(|e| DurableError::Migration {
                    backend: BACKEND,
                    reason: format!("migration {} ({}) failed: {e}", m.version, m.name),
                })?;
            sqlx::query(
                "INSERT INTO retry_durable_migrations (version, name, checksum, applied_at)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(m.checksum())
            .bind(Timestamp::now().as_unix_millis())
            .execute(&mut *tx)
            .await
            .map_err(DurableError::db(BACKEND, "record an applied migration"))?;
            tracing::info!(
                target: "retry_runtime::durable",
                backend = BACKEND,
                version = m.version,
                name = m.name,
                table = MIGRATIONS_TABLE,
                "applied durable-queue migration"
            );
        }
        tx.commit()
            .await
            .map_err(DurableError::db(BACKEND, "commit migrations"))
    }
}

fn decode(row: &SqliteRow) -> StoreResult<Task> {
    let id: i64 = get(row, None, "task_id")?;
    let raw = RawTask {
        id,
        operation: get(row, Some(id), "operation")?,
        idempotency_key: get(row, Some(id), "idempotency_key")?,
        payload: get(row, Some(id), "payload")?,
        status: get(row, Some(id), "status")?,
        retry_count: get(row, Some(id), "retry_count")?,
        max_attempts: get(row, Some(id), "max_attempts")?,
        next_attempt_at: get(row, Some(id), "next_attempt_at")?,
        locked_by: get(row, Some(id), "locked_by")?,
        locked_until: get(row, Some(id), "locked_until")?,
        last_error: get(row, Some(id), "last_error")?,
        output: get(row, Some(id), "output")?,
        alerted_at: get(row, Some(id), "alerted_at")?,
        created_at: get(row, Some(id), "created_at")?,
        updated_at: get(row, Some(id), "updated_at")?,
    };
    Task::try_from_raw(BACKEND, raw)
}

fn get<'r, T>(row: &'r SqliteRow, task_id: Option<i64>, column: &'static str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(column).map_err(|e| DurableError::BadRow {
        backend: BACKEND,
        task_id,
        column,
        detail: e.to_string(),
    })
}

fn decode_all(rows: &[SqliteRow]) -> StoreResult<Vec<Task>> {
    let mut tasks = rows.iter().map(decode).collect::<StoreResult<Vec<_>>>()?;
    tasks.sort_by_key(|t| t.id);
    Ok(tasks)
}

/// A JSON array of strings, for `json_each`: SQLite binds one value per parameter, and a
/// fixed statement keeps the prepared-statement cache useful.
fn json_string_array(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

fn count(n: u32) -> i64 {
    i64::from(n)
}

impl DurableStore for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn enqueue(&self, task: NewTask<'_>, now: Timestamp) -> StoreResult<Enqueued> {
        let inserted = sqlx::query(concat!(
            "INSERT INTO retry_durable_task (operation, idempotency_key, payload, status,
                 retry_count, max_attempts, next_attempt_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'pending', 0, ?4, ?5, ?6, ?6)
             ON CONFLICT (operation, idempotency_key) DO NOTHING
             RETURNING ",
            cols!()
        ))
        .bind(task.operation)
        .bind(task.idempotency_key)
        .bind(task.payload)
        .bind(count(task.max_attempts))
        .bind(task.next_attempt_at.as_unix_millis())
        .bind(now.as_unix_millis())
        .fetch_optional(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "insert a task"))?;
        if let Some(row) = inserted {
            return Ok(Enqueued {
                task: decode(&row)?,
                created: true,
            });
        }
        match self.find(task.operation, task.idempotency_key).await? {
            Some(existing) => Ok(Enqueued {
                task: existing,
                created: false,
            }),
            None => Err(DurableError::Database {
                backend: BACKEND,
                action: "find the task that blocked a duplicate insert",
                source: sqlx::Error::RowNotFound,
            }),
        }
    }

    async fn claim(
        &self,
        owner: &str,
        operations: &[String],
        batch: u32,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<Task>> {
        if batch == 0 || operations.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(concat!(
            "UPDATE retry_durable_task
             SET status = 'running', locked_by = ?1, locked_until = ?2,
                 retry_count = retry_count + 1, updated_at = ?3
             WHERE task_id IN (
                 SELECT task_id FROM retry_durable_task
                 WHERE status = 'pending' AND next_attempt_at <= ?3
                   AND operation IN (SELECT value FROM json_each(?4))
                 ORDER BY next_attempt_at, task_id
                 LIMIT ?5)
             RETURNING ",
            cols!()
        ))
        .bind(owner)
        .bind(lease_until.as_unix_millis())
        .bind(now.as_unix_millis())
        .bind(json_string_array(operations))
        .bind(count(batch))
        .fetch_all(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "claim due tasks"))?;
        decode_all(&rows)
    }

    async fn complete(
        &self,
        fence: &Fence,
        output: Option<&[u8]>,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let query = fenced(
            concat!(
                "UPDATE retry_durable_task
                 SET status = 'succeeded', locked_by = NULL, locked_until = NULL,
                     last_error = NULL, output = ?5, updated_at = ?4 ",
                fence_where!()
            ),
            fence,
        )
        .bind(now.as_unix_millis())
        .bind(output);
        self.settle_fenced(query, "complete a task").await
    }

    async fn retry_later(
        &self,
        fence: &Fence,
        error: &str,
        next_attempt_at: Timestamp,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let query = fenced(
            concat!(
                "UPDATE retry_durable_task
                 SET status = 'pending', locked_by = NULL, locked_until = NULL,
                     last_error = ?4, next_attempt_at = ?5, updated_at = ?6 ",
                fence_where!()
            ),
            fence,
        )
        .bind(error)
        .bind(next_attempt_at.as_unix_millis())
        .bind(now.as_unix_millis());
        self.settle_fenced(query, "schedule a retry").await
    }

    async fn mark_failed(&self, fence: &Fence, error: &str, now: Timestamp) -> StoreResult<bool> {
        let query = fenced(
            concat!(
                "UPDATE retry_durable_task
                 SET status = 'failed', locked_by = NULL, locked_until = NULL,
                     last_error = ?4, alerted_at = NULL, alert_lease_until = NULL, updated_at = ?5 ",
                fence_where!()
            ),
            fence,
        )
        .bind(error)
        .bind(now.as_unix_millis());
        self.settle_fenced(query, "fail a task").await
    }

    async fn release(&self, fence: &Fence, now: Timestamp) -> StoreResult<bool> {
        let query = fenced(
            concat!(
                "UPDATE retry_durable_task
                 SET status = 'pending', locked_by = NULL, locked_until = NULL,
                     retry_count = retry_count - 1, next_attempt_at = ?4, updated_at = ?4 ",
                fence_where!()
            ),
            fence,
        )
        .bind(now.as_unix_millis());
        self.settle_fenced(query, "release a lease").await
    }

    async fn rescue_expired(
        &self,
        batch: u32,
        backoff: DurableBackoff,
        now: Timestamp,
    ) -> StoreResult<Vec<Rescued>> {
        if batch == 0 {
            return Ok(Vec::new());
        }
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(DurableError::db(
                BACKEND,
                "lock the database to rescue leases",
            ))?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task
             WHERE status = 'running' AND locked_until < ?1
             ORDER BY locked_until, task_id LIMIT ?2"
        ))
        .bind(now.as_unix_millis())
        .bind(count(batch))
        .fetch_all(&mut *tx)
        .await
        .map_err(DurableError::db(BACKEND, "find expired leases"))?;
        let mut rescued = Vec::with_capacity(rows.len());
        for task in decode_all(&rows)? {
            let Some(fence) = task.fence() else { continue };
            let (status, next) = rescue_decision(task.retry_count, task.max_attempts, backoff, now);
            let error = rescue_error(&fence.owner, task.locked_until);
            let done = sqlx::query(
                "UPDATE retry_durable_task
                 SET status = ?4, next_attempt_at = ?5, last_error = ?6,
                     locked_by = NULL, locked_until = NULL,
                     alerted_at = NULL, alert_lease_until = NULL, updated_at = ?7
                 WHERE task_id = ?1 AND status = 'running' AND locked_by = ?2 AND retry_count = ?3",
            )
            .bind(fence.task_id.0)
            .bind(&fence.owner)
            .bind(count(fence.attempt))
            .bind(status.as_str())
            .bind(next.as_unix_millis())
            .bind(&error)
            .bind(now.as_unix_millis())
            .execute(&mut *tx)
            .await
            .map_err(DurableError::db(BACKEND, "rescue an expired lease"))?;
            if done.rows_affected() == 1 {
                rescued.push(Rescued {
                    task_id: fence.task_id,
                    previous_owner: fence.owner,
                    attempt: fence.attempt,
                    new_status: status,
                });
            }
        }
        tx.commit()
            .await
            .map_err(DurableError::db(BACKEND, "commit lease rescues"))?;
        Ok(rescued)
    }

    async fn claim_alerts(
        &self,
        batch: u32,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<Vec<Task>> {
        if batch == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(concat!(
            "UPDATE retry_durable_task SET alert_lease_until = ?1
             WHERE task_id IN (
                 SELECT task_id FROM retry_durable_task
                 WHERE status = 'failed' AND alerted_at IS NULL
                   AND (alert_lease_until IS NULL OR alert_lease_until <= ?2)
                 ORDER BY updated_at, task_id LIMIT ?3)
             RETURNING ",
            cols!()
        ))
        .bind(lease_until.as_unix_millis())
        .bind(now.as_unix_millis())
        .bind(count(batch))
        .fetch_all(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "reserve owed alerts"))?;
        decode_all(&rows)
    }

    async fn ack_alert(&self, task_id: TaskId, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE retry_durable_task SET alerted_at = ?2, alert_lease_until = NULL
             WHERE task_id = ?1 AND status = 'failed' AND alerted_at IS NULL",
        )
        .bind(task_id.0)
        .bind(now.as_unix_millis())
        .execute(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "record a delivered alert"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn get(&self, task_id: TaskId) -> StoreResult<Option<Task>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task WHERE task_id = ?1"
        ))
        .bind(task_id.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "read a task"))?;
        row.as_ref().map(decode).transpose()
    }

    async fn find(&self, operation: &str, idempotency_key: &str) -> StoreResult<Option<Task>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task WHERE operation = ?1 AND idempotency_key = ?2"
        ))
        .bind(operation)
        .bind(idempotency_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "find a task by key"))?;
        row.as_ref().map(decode).transpose()
    }

    async fn counts(&self) -> StoreResult<StatusCounts> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM retry_durable_task GROUP BY status")
                .fetch_all(&self.pool)
                .await
                .map_err(DurableError::db(BACKEND, "count tasks by status"))?;
        status_counts(BACKEND, rows)
    }

    async fn failed_tasks(&self, limit: u32) -> StoreResult<Vec<Task>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task WHERE status = 'failed'
             ORDER BY updated_at DESC, task_id DESC LIMIT ?1"
        ))
        .bind(count(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "list failed tasks"))?;
        rows.iter().map(decode).collect()
    }

    async fn requeue(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        let sql = concat!(
            "UPDATE retry_durable_task
             SET status = 'pending', retry_count = 0, next_attempt_at = ?2,
                 alerted_at = NULL, alert_lease_until = NULL, updated_at = ?2
             WHERE task_id = ?1 AND status IN ('failed', 'cancelled')
             RETURNING ",
            cols!()
        );
        self.transition(sql, task_id, now, "requeue", "requeue a task")
            .await
    }

    async fn cancel(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        let sql = concat!(
            "UPDATE retry_durable_task
             SET status = 'cancelled', alert_lease_until = NULL, updated_at = ?2
             WHERE task_id = ?1 AND status IN ('pending', 'failed')
             RETURNING ",
            cols!()
        );
        self.transition(sql, task_id, now, "cancel", "cancel a task")
            .await
    }
}

impl SqliteStore {
    /// Runs a statement built by [`fenced`]: `true` when it changed the task, `false` when the
    /// fence no longer holds (the lease was lost or the task moved on).
    async fn settle_fenced(
        &self,
        query: sqlx::query::Query<'_, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        what: &'static str,
    ) -> StoreResult<bool> {
        let done = query
            .execute(&self.pool)
            .await
            .map_err(DurableError::db(BACKEND, what))?;
        Ok(done.rows_affected() == 1)
    }

    /// An operator transition (`UPDATE ... WHERE task_id = 1 AND status IN (...) RETURNING`):
    /// the updated task, or why the task could not make it (missing, or in another status).
    async fn transition(
        &self,
        sql: &'static str,
        task_id: TaskId,
        now: Timestamp,
        action: &'static str,
        what: &'static str,
    ) -> StoreResult<Task> {
        let row = sqlx::query(sql)
            .bind(task_id.0)
            .bind(now.as_unix_millis())
            .fetch_optional(&self.pool)
            .await
            .map_err(DurableError::db(BACKEND, what))?;
        match row {
            Some(row) => decode(&row),
            None => Err(transition_error(self.get(task_id).await?, task_id, action)),
        }
    }
}

/// A statement on a task a worker holds (its `WHERE` is [`fence_where`]), the fence bound to
/// `?1`-`?3`; the statement's own values follow from `?4`.
fn fenced<'q>(
    sql: &'static str,
    fence: &'q Fence,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    sqlx::query(sql)
        .bind(fence.task_id.0)
        .bind(&fence.owner)
        .bind(count(fence.attempt))
}

#[cfg(test)]
mod tests {
    use super::json_string_array;

    #[test]
    fn json_array_escapes() {
        let s = json_string_array(&["a\"b".into(), "c\\d".into(), "e\n".into()]);
        assert_eq!(s, r#"["a\"b","c\\d","e\u000a"]"#);
    }
}
