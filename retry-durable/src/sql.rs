//! One store, two dialects: [`SqlStore`] implements [`DurableStore`] once, over any sqlx
//! database that has a [`Dialect`].
//!
//! Each backend writes its statements out in full, in its own SQL (`sqlite/queries.rs`,
//! `postgres/queries.rs`), so a reader sees every statement as the database runs it; what
//! they share is said once here: the columns of a task row ([`task_columns!`]) and the
//! parameters each statement takes ([`Statements`]). This file runs them: it binds the
//! finished values the worker and the queue hand down, reads task rows, and runs migrations.
//!
//! A claim is one `UPDATE … WHERE task_id IN (due rows) RETURNING` statement on both: on
//! PostgreSQL the due rows are picked `FOR UPDATE SKIP LOCKED`, so concurrent claimers skip
//! each other's rows; SQLite has no row locks but runs every write under its single writer
//! lock, so two claimers can never take the same row. Completions are batched: one fenced
//! `UPDATE … FROM (rows of a JSON array)` completes many tasks.

use std::future::Future;
use std::sync::Arc;

use sqlx::query::Query;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Transaction, Type,
};
use tokio::sync::{Mutex, Notify};

use crate::clock::Timestamp;
use crate::error::DurableError;
use crate::migrate::{self, MIGRATIONS_TABLE, Migration};
use crate::store::{
    Completion, DurableStore, Rescue, StoreResult, WorkSignal, status_counts, transition_error,
};
use retry_runtime::durable::TaskId;

use crate::task::{Enqueued, Fence, NewTask, RawTask, StatusCounts, Task};

/// A database the store runs on: its SQL, written out in full in one file per backend
/// (`sqlite/queries.rs`, `postgres/queries.rs`), and how another process's hand-off wakes a
/// worker. Implemented for `sqlx::Sqlite` and `sqlx::Postgres` (behind their features).
pub trait Dialect: Driver {
    /// `"sqlite"` or `"postgres"`, for logs and errors.
    const BACKEND: &'static str;

    /// Every statement the store runs, in this database's SQL.
    const STATEMENTS: &'static Statements;

    /// Whether writes from this process take turns before reaching the database (SQLite has
    /// one writer: letting them queue in process avoids its sleeping busy handler).
    const SINGLE_WRITER: bool;

    /// Starts telling `wake` when another process hands work off, for as long as the returned
    /// guard lives (PostgreSQL: `LISTEN`); `None` where only this process's hand-offs wake.
    fn listen(
        pool: &Pool<Self>,
        wake: Arc<Notify>,
    ) -> impl Future<Output = StoreResult<Option<tokio::task::AbortHandle>>> + Send;
}

/// How long a pooled connection may sit idle and still be used without a ping first.
const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool settings both stores use: a connection is pinged before use only when it sat idle
/// for [`PING_AFTER_IDLE`] or longer. sqlx pings every connection it hands out by default, a
/// full round trip to the server before each statement: that doubled the round trips of every
/// hand-off, claim and completion, and on a busy machine each round trip waits for the server
/// process to be scheduled, which is where the hand-off's latency tail came from. A connection
/// used within the last second is known to be alive; one idle longer (a database restart may
/// have dropped it) is still checked and replaced.
pub(crate) fn pool_options<DB: Database>() -> sqlx::pool::PoolOptions<DB> {
    use sqlx::Connection as _;
    sqlx::pool::PoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|conn: &mut DB::Connection, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Every statement the store runs, in one database's SQL. Parameters are numbered (`?1` on
/// SQLite, `$1` on PostgreSQL). Statements returning task rows return [`task_columns!`]
/// (the columns [`COLUMNS`] names, in that order, the counts widened to `BIGINT`). A fenced statement
/// matches a task only while it is `running` under the claim `(task, owner, attempt)` bound
/// to parameters 1-3.
#[derive(Debug)]
pub struct Statements {
    /// Inserts a task unless its `(operation, idempotency_key)` exists: 1 operation, 2 key,
    /// 3 payload, 4 max attempts, 5 due at, 6 now. No row returned: the key exists.
    pub(crate) enqueue: &'static str,
    /// Claims up to 5 due tasks of the operations in the JSON array of strings 4 for owner 1,
    /// leased until 2; 3 now. The attempt is counted here. Two claimers never take one row:
    /// PostgreSQL skips rows another claim locked, SQLite runs every write under its one lock.
    pub(crate) claim: &'static str,
    /// Completes the tasks of the JSON array 2 (`[[task_id, owner, attempt, output as hex or
    /// null], ...]`), each fenced on its claim; 1 now. Returns the ids completed.
    pub(crate) complete: &'static str,
    /// Fenced: back to `pending` after a transient failure; 4 error, 5 due at, 6 now.
    pub(crate) retry_later: &'static str,
    /// Fenced: fails the task, the alert owed in the same write; 4 error, 5 now.
    pub(crate) mark_failed: &'static str,
    /// Fenced: gives the task back unfinished, its attempt not counted; 4 now.
    pub(crate) release: &'static str,
    /// Tasks whose lease expired before 1, at most 2, the oldest leases first.
    pub(crate) expired: &'static str,
    /// Fenced, and only while the lease is expired at 7: takes back one expired lease;
    /// 4 new status, 5 due at, 6 error, 7 now.
    pub(crate) rescue: &'static str,
    /// Reserves up to 3 owed alerts until 1; 2 now.
    pub(crate) claim_alerts: &'static str,
    /// Records the delivered alert of task 1 at 2.
    pub(crate) ack_alert: &'static str,
    /// One task by id 1.
    pub(crate) get: &'static str,
    /// One task by operation 1 and key 2.
    pub(crate) find: &'static str,
    /// Tasks per status.
    pub(crate) counts: &'static str,
    /// Up to 1 failed tasks, most recently failed first.
    pub(crate) failed: &'static str,
    /// Puts failed or cancelled task 1 back to `pending` with a fresh attempt count; 2 now.
    pub(crate) requeue: &'static str,
    /// Cancels pending or failed task 1; 2 now.
    pub(crate) cancel: &'static str,
    /// `CREATE TABLE IF NOT EXISTS retry_durable_migrations (...)`.
    pub(crate) migrations_table: &'static str,
    /// The migrations applied, with their checksums.
    pub(crate) applied: &'static str,
    /// Records migration 1 (name 2, checksum 3) applied at 4.
    pub(crate) record_migration: &'static str,
    /// Run first in the migration transaction, to serialise instances starting together.
    pub(crate) migration_lock: Option<&'static str>,
    /// How a transaction that writes begins (`None`: the driver's plain `BEGIN`).
    pub(crate) begin_write: Option<&'static str>,
    /// The schema migrations, in order.
    pub(crate) migrations: &'static [Migration],
}

/// A [`DurableStore`] on a sqlx database with a [`Dialect`]: [`SqliteStore`](crate::SqliteStore)
/// and [`PgStore`](crate::PgStore).
pub struct SqlStore<DB: Database> {
    pool: Pool<DB>,
    /// Woken by this process's hand-offs (and, through [`Dialect::listen`], other processes').
    wake: Arc<Notify>,
    /// Serialises this process's writes where the database has a single writer.
    writer: Option<Arc<Mutex<()>>>,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            wake: Arc::clone(&self.wake),
            writer: self.writer.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &DB::NAME)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl<DB: Database> SqlStore<DB> {
    /// The connection pool, for the application's own queries and for tests.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A count as the database stores it: `INTEGER` columns, so values beyond `i32` are clamped
/// (no task is tried 2^31 times).
fn count(n: u32) -> i64 {
    i64::from(n.min(i32::MAX as u32))
}

/// The completions as `[[task_id, owner, attempt, output as hex or null], …]`: one parameter
/// for the whole batch, so the statement stays fixed and prepared once.
fn json_completions(done: &[Completion]) -> String {
    let rows: Vec<_> = done
        .iter()
        .map(|c| {
            (
                c.fence.task_id.0,
                c.fence.owner.as_str(),
                count(c.fence.attempt),
                c.output.as_deref().map(hex::encode),
            )
        })
        .collect();
    // A list of integers and strings always serializes.
    serde_json::to_string(&rows).unwrap_or_default()
}

/// A value bound to a statement parameter.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// An integer (`BIGINT`).
    Int(i64),
    /// Text.
    Text(&'a str),
    /// Bytes (`BLOB`/`BYTEA`).
    Bytes(&'a [u8]),
}

/// How many rows a statement changed (sqlx's drivers each have their own result type).
pub trait RowsAffected {
    /// The count.
    fn rows(&self) -> u64;
}

/// What the store needs from a sqlx driver, said once: run a statement on a connection, read
/// a task row. Implemented for every driver whose types fit, so a [`Dialect`] only adds SQL.
pub trait Driver: Database {
    /// Runs `sql` with `args`; the number of rows changed.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

    /// Runs a script of several statements, without parameters (a migration).
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// Runs `sql` with `args`; the rows.
    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Column `i` as an integer.
    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error>;

    /// Column `i` as text.
    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error>;

    /// A task row ([`COLUMNS`]), its bad values located.
    fn task(backend: &'static str, row: &Self::Row) -> StoreResult<Task>;
}

impl<DB> Driver for DB
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'e> i64: Type<DB> + Encode<'e, DB> + Decode<'e, DB>,
    for<'e> String: Type<DB> + Decode<'e, DB>,
    for<'e> &'e str: Type<DB> + Encode<'e, DB>,
    for<'e> &'e [u8]: Type<DB> + Encode<'e, DB>,
    for<'e> Vec<u8>: Type<DB> + Decode<'e, DB>,
    usize: ColumnIndex<DB::Row>,
{
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { Ok(query.execute(conn).await?.rows()) }
    }

    async fn script(conn: &mut Self::Connection, sql: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(sql).execute(conn).await.map(drop)
    }

    fn fetch<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { query.fetch_all(conn).await }
    }

    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error> {
        row.try_get(i)
    }

    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error> {
        row.try_get(i)
    }

    fn task(backend: &'static str, row: &Self::Row) -> StoreResult<Task> {
        fn get<'r, DB, T>(
            backend: &'static str,
            row: &'r DB::Row,
            i: usize,
            task_id: Option<i64>,
        ) -> StoreResult<T>
        where
            DB: Database,
            T: Decode<'r, DB> + Type<DB>,
            usize: ColumnIndex<DB::Row>,
        {
            row.try_get(i).map_err(|e| DurableError::BadRow {
                backend,
                task_id,
                column: COLUMNS[i],
                detail: e.to_string(),
            })
        }
        let id: i64 = get::<DB, _>(backend, row, 0, None)?;
        let at = Some(id);
        let raw = RawTask {
            id,
            operation: get::<DB, _>(backend, row, 1, at)?,
            idempotency_key: get::<DB, _>(backend, row, 2, at)?,
            payload: get::<DB, _>(backend, row, 3, at)?,
            status: get::<DB, _>(backend, row, 4, at)?,
            retry_count: get::<DB, _>(backend, row, 5, at)?,
            max_attempts: get::<DB, _>(backend, row, 6, at)?,
            next_attempt_at: get::<DB, _>(backend, row, 7, at)?,
            locked_by: get::<DB, _>(backend, row, 8, at)?,
            locked_until: get::<DB, _>(backend, row, 9, at)?,
            last_error: get::<DB, _>(backend, row, 10, at)?,
            output: get::<DB, _>(backend, row, 11, at)?,
            alerted_at: get::<DB, _>(backend, row, 12, at)?,
            created_at: get::<DB, _>(backend, row, 13, at)?,
            updated_at: get::<DB, _>(backend, row, 14, at)?,
        };
        Task::try_from_raw(backend, raw)
    }
}

fn bind<DB>(sql: &'static str, args: &[Arg<'_>]) -> Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'e> i64: Type<DB> + Encode<'e, DB>,
    for<'e> &'e str: Type<DB> + Encode<'e, DB>,
    for<'e> &'e [u8]: Type<DB> + Encode<'e, DB>,
{
    args.iter().fold(sqlx::query(sql), |q, arg| match *arg {
        Arg::Int(n) => q.bind(n),
        Arg::Text(t) => q.bind(t),
        Arg::Bytes(b) => q.bind(b),
    })
}

/// The columns of a task row as every statement that returns tasks lists them: those
/// [`COLUMNS`] names, in that order, with the counts widened to `BIGINT` so both databases
/// hand them over as 64-bit integers. A macro, so each backend's statements can be
/// `concat!`-ed into whole `&'static str`s.
macro_rules! task_columns {
    () => {
        "task_id, operation, idempotency_key, payload, status, \
         CAST(retry_count AS BIGINT) AS retry_count, \
         CAST(max_attempts AS BIGINT) AS max_attempts, \
         next_attempt_at, locked_by, locked_until, last_error, output, alerted_at, \
         created_at, updated_at"
    };
}
pub(crate) use task_columns;

/// The columns of a task row, by position: [`task_columns!`] by name, for locating a bad value.
pub(crate) const COLUMNS: [&str; 15] = [
    "task_id",
    "operation",
    "idempotency_key",
    "payload",
    "status",
    "retry_count",
    "max_attempts",
    "next_attempt_at",
    "locked_by",
    "locked_until",
    "last_error",
    "output",
    "alerted_at",
    "created_at",
    "updated_at",
];

type Conn<DB> = sqlx::pool::PoolConnection<DB>;

impl<DB: Dialect> SqlStore<DB> {
    /// Wraps `pool` and applies the embedded migrations (in the pool's `search_path` on
    /// PostgreSQL).
    pub async fn from_pool(pool: Pool<DB>) -> StoreResult<Self> {
        let store = SqlStore {
            pool,
            wake: Arc::new(Notify::new()),
            writer: DB::SINGLE_WRITER.then(|| Arc::new(Mutex::new(()))),
        };
        store.migrate().await?;
        Ok(store)
    }

    fn sql() -> &'static Statements {
        DB::STATEMENTS
    }

    fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> DurableError {
        DurableError::db(DB::BACKEND, action)
    }

    async fn conn(&self, action: &'static str) -> StoreResult<Conn<DB>> {
        self.pool.acquire().await.map_err(Self::db(action))
    }

    /// Takes this process's turn to write, where the database has a single writer.
    async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.writer {
            Some(m) => Some(m.lock().await),
            None => None,
        }
    }

    /// Runs one writing statement: rows changed.
    async fn write(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
        action: &'static str,
    ) -> StoreResult<u64> {
        let _turn = self.turn().await;
        let mut conn = self.conn(action).await?;
        DB::execute(&mut conn, sql, args)
            .await
            .map_err(Self::db(action))
    }

    /// Runs one statement returning task rows (writing, when `write`).
    async fn tasks(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
        write: bool,
        action: &'static str,
    ) -> StoreResult<Vec<Task>> {
        let _turn = if write { self.turn().await } else { None };
        let mut conn = self.conn(action).await?;
        let rows = DB::fetch(&mut conn, sql, args)
            .await
            .map_err(Self::db(action))?;
        drop(_turn);
        let mut tasks = rows
            .iter()
            .map(|row| DB::task(DB::BACKEND, row))
            .collect::<StoreResult<Vec<_>>>()?;
        tasks.sort_by_key(|t| t.id);
        Ok(tasks)
    }

    async fn begin_write(&self, action: &'static str) -> StoreResult<Transaction<'static, DB>> {
        match DB::STATEMENTS.begin_write {
            Some(begin) => self.pool.begin_with(begin).await,
            None => self.pool.begin().await,
        }
        .map_err(Self::db(action))
    }

    async fn migrate(&self) -> StoreResult<()> {
        let backend = DB::BACKEND;
        let sql = Self::sql();
        let read = Self::db("read applied migrations");
        let _turn = self.turn().await;
        let mut tx = self.begin_write("lock the database for migrations").await?;
        if let Some(lock) = sql.migration_lock {
            DB::execute(&mut tx, lock, &[])
                .await
                .map_err(Self::db("take the migration lock"))?;
        }
        DB::execute(&mut tx, sql.migrations_table, &[])
            .await
            .map_err(Self::db("create the migrations table"))?;
        let rows = DB::fetch(&mut tx, Self::sql().applied, &[])
            .await
            .map_err(Self::db("read applied migrations"))?;
        let applied = rows
            .iter()
            .map(|row| Ok((DB::int(row, 0)?, DB::text(row, 1)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(read)?;
        let todo = migrate::plan(sql.migrations, &applied)
            .map_err(|reason| DurableError::Migration { backend, reason })?;
        for m in todo {
            DB::script(&mut tx, m.sql)
                .await
                .map_err(|e| DurableError::Migration {
                    backend,
                    reason: format!("migration {} ({}) failed: {e}", m.version, m.name),
                })?;
            let checksum = m.checksum();
            let args = [
                Arg::Int(m.version),
                Arg::Text(m.name),
                Arg::Text(&checksum),
                Arg::Int(Timestamp::now().as_unix_millis()),
            ];
            DB::execute(&mut tx, Self::sql().record_migration, &args)
                .await
                .map_err(Self::db("record an applied migration"))?;
            tracing::info!(
                target: "retry_runtime::durable",
                backend,
                version = m.version,
                name = m.name,
                table = MIGRATIONS_TABLE,
                "applied durable-queue migration"
            );
        }
        tx.commit().await.map_err(Self::db("commit migrations"))
    }

    /// Runs a statement on a task a worker holds (`$1`-`$3` the fence, then `values`): `true`
    /// when it changed the task, `false` when the fence no longer holds.
    async fn fenced(
        &self,
        sql: &'static str,
        fence: &Fence,
        values: &[Arg<'_>],
        action: &'static str,
    ) -> StoreResult<bool> {
        let mut args = vec![
            Arg::Int(fence.task_id.0),
            Arg::Text(&fence.owner),
            Arg::Int(count(fence.attempt)),
        ];
        args.extend_from_slice(values);
        Ok(self.write(sql, &args, action).await? == 1)
    }

    /// An operator transition (`UPDATE … WHERE task_id = $1 AND status IN (…) RETURNING`):
    /// the updated task, or why the task could not make it (missing, or in another status).
    async fn transition(
        &self,
        sql: &'static str,
        task_id: TaskId,
        now: Timestamp,
        action: &'static str,
        what: &'static str,
    ) -> StoreResult<Task> {
        let args = [Arg::Int(task_id.0), Arg::Int(now.as_unix_millis())];
        match self.tasks(sql, &args, true, what).await?.pop() {
            Some(task) => {
                if action == "requeue" {
                    self.wake.notify_waiters();
                }
                Ok(task)
            }
            None => Err(transition_error(self.get(task_id).await?, task_id, action)),
        }
    }
}

impl<DB: Dialect> DurableStore for SqlStore<DB> {
    fn backend(&self) -> &'static str {
        DB::BACKEND
    }

    async fn enqueue(&self, task: NewTask<'_>, now: Timestamp) -> StoreResult<Enqueued> {
        let args = [
            Arg::Text(task.operation),
            Arg::Text(task.idempotency_key),
            Arg::Bytes(task.payload),
            Arg::Int(count(task.max_attempts)),
            Arg::Int(task.next_attempt_at.as_unix_millis()),
            Arg::Int(now.as_unix_millis()),
        ];
        let inserted = self
            .tasks(Self::sql().enqueue, &args, true, "insert a task")
            .await?
            .pop();
        if let Some(task) = inserted {
            self.wake.notify_waiters();
            return Ok(Enqueued {
                task,
                created: true,
            });
        }
        // A separate statement: under PostgreSQL's READ COMMITTED it sees the concurrently
        // committed row that made the insert a no-op.
        match self.find(task.operation, task.idempotency_key).await? {
            Some(existing) => Ok(Enqueued {
                task: existing,
                created: false,
            }),
            None => Err(DurableError::Database {
                backend: DB::BACKEND,
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
        // A list of strings always serializes.
        let ops = serde_json::to_string(operations).unwrap_or_default();
        let args = [
            Arg::Text(owner),
            Arg::Int(lease_until.as_unix_millis()),
            Arg::Int(now.as_unix_millis()),
            Arg::Text(&ops),
            Arg::Int(i64::from(batch)),
        ];
        self.tasks(Self::sql().claim, &args, true, "claim due tasks")
            .await
    }

    async fn complete_many(&self, done: &[Completion], now: Timestamp) -> StoreResult<Vec<TaskId>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let action = "complete tasks";
        let rows = json_completions(done);
        let args = [Arg::Int(now.as_unix_millis()), Arg::Text(&rows)];
        let rows = {
            let _turn = self.turn().await;
            let mut conn = self.conn(action).await?;
            DB::fetch(&mut conn, Self::sql().complete, &args)
                .await
                .map_err(Self::db(action))?
        };
        rows.iter()
            .map(|row| DB::int(row, 0).map(TaskId))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Self::db(action))
    }

    async fn retry_later(
        &self,
        fence: &Fence,
        error: &str,
        next_attempt_at: Timestamp,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let values = [
            Arg::Text(error),
            Arg::Int(next_attempt_at.as_unix_millis()),
            Arg::Int(now.as_unix_millis()),
        ];
        self.fenced(Self::sql().retry_later, fence, &values, "schedule a retry")
            .await
    }

    async fn mark_failed(&self, fence: &Fence, error: &str, now: Timestamp) -> StoreResult<bool> {
        let values = [Arg::Text(error), Arg::Int(now.as_unix_millis())];
        self.fenced(Self::sql().mark_failed, fence, &values, "fail a task")
            .await
    }

    async fn release(&self, fence: &Fence, now: Timestamp) -> StoreResult<bool> {
        let values = [Arg::Int(now.as_unix_millis())];
        self.fenced(Self::sql().release, fence, &values, "release a lease")
            .await
    }

    async fn expired(&self, batch: u32, now: Timestamp) -> StoreResult<Vec<Task>> {
        if batch == 0 {
            return Ok(Vec::new());
        }
        let args = [Arg::Int(now.as_unix_millis()), Arg::Int(i64::from(batch))];
        self.tasks(Self::sql().expired, &args, false, "find expired leases")
            .await
    }

    async fn rescue(&self, rescues: &[Rescue], now: Timestamp) -> StoreResult<Vec<TaskId>> {
        if rescues.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.turn().await;
        let mut tx = self
            .begin_write("lock the database to rescue leases")
            .await?;
        let mut rescued = Vec::with_capacity(rescues.len());
        for r in rescues {
            let args = [
                Arg::Int(r.fence.task_id.0),
                Arg::Text(&r.fence.owner),
                Arg::Int(count(r.fence.attempt)),
                Arg::Text(r.status.as_str()),
                Arg::Int(r.next_attempt_at.as_unix_millis()),
                Arg::Text(&r.error),
                Arg::Int(now.as_unix_millis()),
            ];
            let done = DB::execute(&mut tx, Self::sql().rescue, &args)
                .await
                .map_err(Self::db("rescue an expired lease"))?;
            if done == 1 {
                rescued.push(r.fence.task_id);
            }
        }
        tx.commit()
            .await
            .map_err(Self::db("commit lease rescues"))?;
        rescued.sort();
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
        let args = [
            Arg::Int(lease_until.as_unix_millis()),
            Arg::Int(now.as_unix_millis()),
            Arg::Int(i64::from(batch)),
        ];
        self.tasks(Self::sql().claim_alerts, &args, true, "reserve owed alerts")
            .await
    }

    async fn ack_alert(&self, task_id: TaskId, now: Timestamp) -> StoreResult<bool> {
        let args = [Arg::Int(task_id.0), Arg::Int(now.as_unix_millis())];
        let n = self
            .write(Self::sql().ack_alert, &args, "record a delivered alert")
            .await?;
        Ok(n == 1)
    }

    async fn get(&self, task_id: TaskId) -> StoreResult<Option<Task>> {
        let args = [Arg::Int(task_id.0)];
        Ok(self
            .tasks(Self::sql().get, &args, false, "read a task")
            .await?
            .pop())
    }

    async fn find(&self, operation: &str, idempotency_key: &str) -> StoreResult<Option<Task>> {
        let args = [Arg::Text(operation), Arg::Text(idempotency_key)];
        Ok(self
            .tasks(Self::sql().find, &args, false, "find a task by key")
            .await?
            .pop())
    }

    async fn counts(&self) -> StoreResult<StatusCounts> {
        let action = "count tasks by status";
        let mut conn = self.conn(action).await?;
        let rows = DB::fetch(&mut conn, Self::sql().counts, &[])
            .await
            .map_err(Self::db(action))?;
        let pairs = rows
            .iter()
            .map(|row| Ok((DB::text(row, 0)?, DB::int(row, 1)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(Self::db(action))?;
        status_counts(DB::BACKEND, pairs)
    }

    async fn failed_tasks(&self, limit: u32) -> StoreResult<Vec<Task>> {
        let args = [Arg::Int(i64::from(limit))];
        let mut tasks = self
            .tasks(Self::sql().failed, &args, false, "list failed tasks")
            .await?;
        tasks.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        Ok(tasks)
    }

    async fn requeue(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        self.transition(
            Self::sql().requeue,
            task_id,
            now,
            "requeue",
            "requeue a task",
        )
        .await
    }

    async fn cancel(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        self.transition(Self::sql().cancel, task_id, now, "cancel", "cancel a task")
            .await
    }

    async fn subscribe(&self) -> StoreResult<WorkSignal> {
        let listener = DB::listen(&self.pool, Arc::clone(&self.wake)).await?;
        Ok(WorkSignal::new(Arc::clone(&self.wake), listener))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_list_names_the_columns_in_order() {
        let listed: Vec<&str> = task_columns!()
            .split(',')
            .map(|c| c.split_whitespace().last().unwrap_or_default())
            .collect();
        assert_eq!(listed, COLUMNS);
    }

    #[test]
    fn completions_carry_the_fence_and_hex_output() {
        let fence = |id, owner: &str, attempt| Fence {
            task_id: TaskId(id),
            owner: owner.to_owned(),
            attempt,
        };
        let done = [
            Completion {
                fence: fence(7, "w\"1", 2),
                output: Some(vec![0x00, 0xab, 0xff]),
            },
            Completion {
                fence: fence(9, "w", u32::MAX),
                output: None,
            },
        ];
        assert_eq!(
            json_completions(&done),
            r#"[[7,"w\"1",2,"00abff"],[9,"w",2147483647,null]]"#
        );
    }
}
