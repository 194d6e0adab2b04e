//! The PostgreSQL store: for several instances sharing one queue.
//!
//! Claims use `FOR UPDATE SKIP LOCKED` inside a single `WITH due AS (…) UPDATE … RETURNING`
//! statement: the row locks and the status change commit together, so concurrent claimers
//! skip each other's rows instead of waiting or double-claiming (a separate autocommit
//! `SELECT … FOR UPDATE` followed by an `UPDATE` would release the lock in between, the bug
//! found in fang). Lease rescue and alert reservation use the same pattern, so any instance can
//! run them and no leader election is needed.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};

use super::backoff::DurableBackoff;
use super::clock::Timestamp;
use super::error::DurableError;
use super::migrate::{self, MIGRATIONS_TABLE};
use super::store::{
    DurableStore, StoreResult, rescue_decision, rescue_error, status_counts, transition_error,
};
use super::task::{Enqueued, Fence, NewTask, RawTask, Rescued, StatusCounts, Task, TaskId};

const BACKEND: &str = "postgres";

/// Serialises migrations across instances (an arbitrary constant: "retry_du" in ASCII).
const MIGRATION_LOCK: i64 = 0x7265_7472_795f_6475;

/// The `WHERE` of a statement on a task a worker holds: its id, `running`, the worker's lease
/// and the attempt it claimed ([`Fence`]); see [`fenced`].
macro_rules! fence_where {
    () => {
        "WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3"
    };
}

macro_rules! cols {
    () => {
        "task_id, operation, idempotency_key, payload, status, retry_count, max_attempts, \
         next_attempt_at, locked_by, locked_until, last_error, output, alerted_at, created_at, \
         updated_at"
    };
}

macro_rules! tcols {
    () => {
        "t.task_id, t.operation, t.idempotency_key, t.payload, t.status, t.retry_count, \
         t.max_attempts, t.next_attempt_at, t.locked_by, t.locked_until, t.last_error, \
         t.output, t.alerted_at, t.created_at, t.updated_at"
    };
}

/// Settings for [`PgStore::connect_with`].
///
/// # Default
/// - `schema`: none (the connection's `search_path`, usually `public`)
/// - `max_connections`: 8
/// - `acquire_timeout`: 10 s
#[derive(Debug, Clone)]
pub struct PgStoreOptions {
    url: String,
    schema: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
}

impl PgStoreOptions {
    /// Options for the database at `url` (`postgres://user@host:port/db`).
    pub fn new(url: impl Into<String>) -> Self {
        PgStoreOptions {
            url: url.into(),
            schema: None,
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
        }
    }

    /// Keeps the queue's tables in this schema (created if missing), away from the
    /// application's. Letters, digits and `_` only.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Sets the pool size.
    pub fn with_max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets how long a call waits for a free connection.
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }
}

/// A [`DurableStore`] in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63
}

impl PgStore {
    /// Connects to `url` with the default options and applies the embedded migrations.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(PgStoreOptions::new(url)).await
    }

    /// Connects as described by `options` and applies the embedded migrations.
    pub async fn connect_with(options: PgStoreOptions) -> StoreResult<Self> {
        if options.max_connections == 0 {
            return Err(DurableError::InvalidConfig {
                field: "max_connections",
                reason: "must be at least 1".to_owned(),
            });
        }
        let mut connect: PgConnectOptions =
            options
                .url
                .parse()
                .map_err(|e: sqlx::Error| DurableError::InvalidConfig {
                    field: "url",
                    reason: format!("not a PostgreSQL URL: {e}"),
                })?;
        if let Some(schema) = &options.schema {
            if !valid_schema(schema) {
                return Err(DurableError::InvalidConfig {
                    field: "schema",
                    reason: format!(
                        "{schema:?} is not a plain identifier (letters, digits, `_`, at most 63)"
                    ),
                });
            }
            connect = connect.options([("search_path", schema.as_str())]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(DurableError::db(BACKEND, "connect"))?;
        let store = PgStore { pool };
        store.migrate(options.schema.as_deref()).await?;
        Ok(store)
    }

    /// Wraps an existing pool and applies the embedded migrations in its `search_path`.
    pub async fn from_pool(pool: PgPool) -> StoreResult<Self> {
        let store = PgStore { pool };
        store.migrate(None).await?;
        Ok(store)
    }

    /// The connection pool, for the application's own queries and for tests.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrate(&self, schema: Option<&str>) -> StoreResult<()> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(DurableError::db(BACKEND, "begin the migration transaction"))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(DurableError::db(BACKEND, "take the migration lock"))?;
        if let Some(schema) = schema {
            // `schema` was validated as a plain identifier above.
            sqlx::query(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
            )))
            .execute(&mut *tx)
            .await
            .map_err(DurableError::db(BACKEND, "create the schema"))?;
        }
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS retry_durable_migrations (
                version BIGINT PRIMARY KEY, name TEXT NOT NULL,
                checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)",
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
        let todo = migrate::plan(migrate::POSTGRES, &applied).map_err(|reason| {
            DurableError::Migration {
                backend: BACKEND,
                reason,
            }
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
                 VALUES ($1, $2, $3, $4)",
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

fn decode(row: &PgRow) -> StoreResult<Task> {
    let id: i64 = get(row, None, "task_id")?;
    let raw = RawTask {
        id,
        operation: get(row, Some(id), "operation")?,
        idempotency_key: get(row, Some(id), "idempotency_key")?,
        payload: get(row, Some(id), "payload")?,
        status: get(row, Some(id), "status")?,
        retry_count: i64::from(get::<i32>(row, Some(id), "retry_count")?),
        max_attempts: i64::from(get::<i32>(row, Some(id), "max_attempts")?),
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

fn get<'r, T>(row: &'r PgRow, task_id: Option<i64>, column: &'static str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).map_err(|e| DurableError::BadRow {
        backend: BACKEND,
        task_id,
        column,
        detail: e.to_string(),
    })
}

fn decode_all(rows: &[PgRow]) -> StoreResult<Vec<Task>> {
    let mut tasks = rows.iter().map(decode).collect::<StoreResult<Vec<_>>>()?;
    tasks.sort_by_key(|t| t.id);
    Ok(tasks)
}

/// Counts are `INTEGER` columns; values beyond `i32` are clamped (no task is tried 2^31 times).
fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn limit(n: u32) -> i64 {
    i64::from(n)
}

impl DurableStore for PgStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn enqueue(&self, task: NewTask<'_>, now: Timestamp) -> StoreResult<Enqueued> {
        let inserted = sqlx::query(concat!(
            "INSERT INTO retry_durable_task (operation, idempotency_key, payload, status,
                 retry_count, max_attempts, next_attempt_at, created_at, updated_at)
             VALUES ($1, $2, $3, 'pending', 0, $4, $5, $6, $6)
             ON CONFLICT (operation, idempotency_key) DO NOTHING
             RETURNING ",
            cols!()
        ))
        .bind(task.operation)
        .bind(task.idempotency_key)
        .bind(task.payload)
        .bind(int(task.max_attempts))
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
        // A separate statement: under READ COMMITTED it sees the concurrently committed row
        // that made the insert a no-op.
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
            "WITH due AS (
                 SELECT task_id FROM retry_durable_task
                 WHERE status = 'pending' AND next_attempt_at <= $3 AND operation = ANY($4)
                 ORDER BY next_attempt_at, task_id
                 LIMIT $5
                 FOR UPDATE SKIP LOCKED)
             UPDATE retry_durable_task t
             SET status = 'running', locked_by = $1, locked_until = $2,
                 retry_count = t.retry_count + 1, updated_at = $3
             FROM due WHERE t.task_id = due.task_id
             RETURNING ",
            tcols!()
        ))
        .bind(owner)
        .bind(lease_until.as_unix_millis())
        .bind(now.as_unix_millis())
        .bind(operations)
        .bind(limit(batch))
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
                     last_error = NULL, output = $5, updated_at = $4 ",
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
                     last_error = $4, next_attempt_at = $5, updated_at = $6 ",
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
                     last_error = $4, alerted_at = NULL, alert_lease_until = NULL, updated_at = $5 ",
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
                     retry_count = retry_count - 1, next_attempt_at = $4, updated_at = $4 ",
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
            .begin()
            .await
            .map_err(DurableError::db(BACKEND, "begin a lease rescue"))?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task
             WHERE status = 'running' AND locked_until < $1
             ORDER BY locked_until, task_id LIMIT $2
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(now.as_unix_millis())
        .bind(limit(batch))
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
                 SET status = $4, next_attempt_at = $5, last_error = $6,
                     locked_by = NULL, locked_until = NULL,
                     alerted_at = NULL, alert_lease_until = NULL, updated_at = $7
                 WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3",
            )
            .bind(fence.task_id.0)
            .bind(&fence.owner)
            .bind(int(fence.attempt))
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
            "WITH owed AS (
                 SELECT task_id FROM retry_durable_task
                 WHERE status = 'failed' AND alerted_at IS NULL
                   AND (alert_lease_until IS NULL OR alert_lease_until <= $2)
                 ORDER BY updated_at, task_id LIMIT $3
                 FOR UPDATE SKIP LOCKED)
             UPDATE retry_durable_task t SET alert_lease_until = $1
             FROM owed WHERE t.task_id = owed.task_id
             RETURNING ",
            tcols!()
        ))
        .bind(lease_until.as_unix_millis())
        .bind(now.as_unix_millis())
        .bind(limit(batch))
        .fetch_all(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "reserve owed alerts"))?;
        decode_all(&rows)
    }

    async fn ack_alert(&self, task_id: TaskId, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE retry_durable_task SET alerted_at = $2, alert_lease_until = NULL
             WHERE task_id = $1 AND status = 'failed' AND alerted_at IS NULL",
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
            " FROM retry_durable_task WHERE task_id = $1"
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
            " FROM retry_durable_task WHERE operation = $1 AND idempotency_key = $2"
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

    async fn failed_tasks(&self, limit_n: u32) -> StoreResult<Vec<Task>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            cols!(),
            " FROM retry_durable_task WHERE status = 'failed'
             ORDER BY updated_at DESC, task_id DESC LIMIT $1"
        ))
        .bind(limit(limit_n))
        .fetch_all(&self.pool)
        .await
        .map_err(DurableError::db(BACKEND, "list failed tasks"))?;
        rows.iter().map(decode).collect()
    }

    async fn requeue(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        let sql = concat!(
            "UPDATE retry_durable_task
             SET status = 'pending', retry_count = 0, next_attempt_at = $2,
                 alerted_at = NULL, alert_lease_until = NULL, updated_at = $2
             WHERE task_id = $1 AND status IN ('failed', 'cancelled')
             RETURNING ",
            cols!()
        );
        self.transition(sql, task_id, now, "requeue", "requeue a task")
            .await
    }

    async fn cancel(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        let sql = concat!(
            "UPDATE retry_durable_task
             SET status = 'cancelled', alert_lease_until = NULL, updated_at = $2
             WHERE task_id = $1 AND status IN ('pending', 'failed')
             RETURNING ",
            cols!()
        );
        self.transition(sql, task_id, now, "cancel", "cancel a task")
            .await
    }
}

impl PgStore {
    /// Runs a statement built by [`fenced`]: `true` when it changed the task, `false` when the
    /// fence no longer holds (the lease was lost or the task moved on).
    async fn settle_fenced(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
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
/// `$1`-`$3`; the statement's own values follow from `$4`.
fn fenced<'q>(
    sql: &'static str,
    fence: &'q Fence,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(fence.task_id.0)
        .bind(&fence.owner)
        .bind(int(fence.attempt))
}

#[cfg(test)]
mod tests {
    use super::valid_schema;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(valid_schema("retry_queue"));
        assert!(valid_schema("_t1"));
        assert!(!valid_schema("1abc"));
        assert!(!valid_schema("a\"; DROP TABLE x; --"));
        assert!(!valid_schema(""));
    }
}
