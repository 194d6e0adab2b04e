//! One store, two dialects: [`SqlStore`] implements [`DurableStore`] once, over any sqlx
//! database that has a [`Dialect`].
//!
//! The semantics live in the SQL text shared here; a dialect only says how its database spells
//! the few things that differ (parameters, a JSON array as rows, hex decoding, row locks, how a
//! write transaction begins, where idempotency keys are kept, its migrations) and how another
//! process's hand-off wakes a worker.
//! Claims are one `WITH due AS MATERIALIZED (SELECT … LIMIT n {lock}) UPDATE … WHERE task_id
//! IN (due) RETURNING` statement on both: on PostgreSQL `{lock}` is `FOR UPDATE SKIP LOCKED`, so
//! concurrent claimers skip each other's rows; SQLite has no row locks but runs every write
//! under its single writer lock, so two claimers can never take the same row. Completions are
//! batched: one fenced `UPDATE … FROM (rows of a JSON array)` completes many tasks.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;

use sqlx::query::Query;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Transaction, Type,
};
use tokio::sync::{Mutex, Notify};

use super::backoff::DurableBackoff;
use super::clock::Timestamp;
use super::error::DurableError;
use super::migrate::{self, MIGRATIONS_TABLE, Migration};
use super::store::{
    Completion, DurableStore, StoreResult, WorkSignal, rescue_decision, rescue_error,
    status_counts, transition_error,
};
use super::task::{Enqueued, Fence, NewTask, RawTask, Rescued, StatusCounts, Task, TaskId};

/// How one database spells the parts of the shared SQL that differ, and how it wakes workers.
/// Implemented for `sqlx::Sqlite` and `sqlx::Postgres` (behind their features); sealed.
pub trait Dialect: Driver {
    /// `"sqlite"` or `"postgres"`, for logs and errors.
    const BACKEND: &'static str;

    /// The statements in this dialect, built once from its spelling (a `static` per dialect).
    fn statements() -> &'static Statements;

    /// Starts telling `wake` when another process hands work off, for as long as the returned
    /// guard lives (PostgreSQL: `LISTEN`); `None` where only this process's hand-offs wake.
    fn listen(
        pool: &Pool<Self>,
        wake: Arc<Notify>,
    ) -> impl Future<Output = StoreResult<Option<tokio::task::AbortHandle>>> + Send;
}

/// The parts of the SQL that differ between databases.
#[derive(Debug)]
pub struct Spelling {
    /// The parameter sigil: `'$'` (`$1`) or `'?'` (`?1`).
    pub param: char,
    /// A JSON array parameter as rows with a `value` column; `{}` is the parameter.
    pub json_rows: &'static str,
    /// A JSON array of strings parameter as a one-column row set; `{}` is the parameter.
    pub json_texts: &'static str,
    /// `task_id` is one of the ids a subquery returns; `{}` is the subquery. (A join would
    /// let PostgreSQL's planner hash the whole table for a large batch; an id array uses the
    /// primary key.)
    pub id_in: &'static str,
    /// Hex text to bytes; `{}` is the expression.
    pub unhex: &'static str,
    /// Appended to a `SELECT` that picks rows to change: row locks that skip locked rows.
    pub lock: &'static str,
    /// How a transaction that writes begins (`None`: the driver's plain `BEGIN`).
    pub begin_write: Option<&'static str>,
    /// Run first in the migration transaction, to serialise instances starting together.
    pub migration_lock: Option<&'static str>,
    /// `CREATE TABLE IF NOT EXISTS retry_durable_migrations (…)`.
    pub migrations_table: &'static str,
    /// The migrations, in order.
    pub migrations: &'static [Migration],
    /// Whether writes from this process take turns before reaching the database (SQLite has
    /// one writer: letting them queue in process avoids its sleeping busy handler).
    pub single_writer: bool,
    /// Where the `(operation, idempotency_key)` -> `task_id` mapping is kept, and so how a
    /// task is inserted unless its key exists.
    pub keys: Keys,
}

/// Where a dialect keeps the unique `(operation, idempotency_key)` of each task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// A unique constraint on the task table (SQLite: an update rewrites only the indexes of
    /// the columns it changes, so the key's index costs nothing after the insert).
    TaskTable,
    /// `retry_durable_key`, written once at enqueue (PostgreSQL: an update that is not HOT
    /// adds an entry to every index of the table, so a key index there would be paid again at
    /// every claim and completion).
    KeyTable,
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

/// The columns every statement returns, in [`decode`]'s order. The counts are `INTEGER` on
/// PostgreSQL; they are widened so both databases decode them as `i64`.
const COLS: &str = "task_id, operation, idempotency_key, payload, status, \
    CAST(retry_count AS BIGINT) AS retry_count, CAST(max_attempts AS BIGINT) AS max_attempts, \
    next_attempt_at, locked_by, locked_until, last_error, output, alerted_at, created_at, \
    updated_at";

/// The `WHERE` of a statement on a task a worker holds: its id, `running`, the worker's lease
/// and the attempt it claimed ([`Fence`]), bound to `$1`-`$3`.
const FENCE: &str =
    "WHERE task_id = $1 AND status = 'running' AND locked_by = $2 AND retry_count = $3";

/// Every statement the store runs, in its dialect.
#[derive(Debug)]
pub struct Statements {
    spelling: &'static Spelling,
    enqueue: String,
    claim: String,
    complete: String,
    retry_later: String,
    mark_failed: String,
    release: String,
    expired: String,
    rescue: String,
    claim_alerts: String,
    ack_alert: String,
    get: String,
    find: String,
    counts: String,
    failed: String,
    requeue: String,
    cancel: String,
    applied: String,
    record_migration: String,
}

impl Statements {
    /// The shared SQL in `s`'s spelling.
    pub fn new(s: &'static Spelling) -> Statements {
        let texts = |p: &str| s.json_texts.replace("{}", p);
        let rows = |p: &str| s.json_rows.replace("{}", p);
        let unhex = |e: &str| s.unhex.replace("{}", e);
        let id_in = |q: &str| s.id_in.replace("{}", q);
        let lock = s.lock;
        let sql = |text: String| -> String {
            if s.param == '$' {
                text
            } else {
                text.replace('$', &s.param.to_string())
            }
        };
        Statements {
            spelling: s,
            enqueue: sql(match s.keys {
                Keys::TaskTable => format!(
                    "INSERT INTO retry_durable_task (operation, idempotency_key, payload, status,
                         retry_count, max_attempts, next_attempt_at, created_at, updated_at)
                     VALUES ($1, $2, $3, 'pending', 0, $4, $5, $6, $6)
                     ON CONFLICT (operation, idempotency_key) DO NOTHING
                     RETURNING {COLS}"
                ),
                // The key row takes the task's id from the task table's own sequence; when the
                // key exists, no id is returned and no task row is written.
                Keys::KeyTable => format!(
                    "WITH k AS (
                         INSERT INTO retry_durable_key (operation, idempotency_key, task_id)
                         VALUES ($1, $2,
                             nextval(pg_get_serial_sequence('retry_durable_task', 'task_id')))
                         ON CONFLICT (operation, idempotency_key) DO NOTHING
                         RETURNING task_id)
                     INSERT INTO retry_durable_task (task_id, operation, idempotency_key,
                         payload, status, retry_count, max_attempts, next_attempt_at,
                         created_at, updated_at)
                     OVERRIDING SYSTEM VALUE
                     SELECT k.task_id, $1, $2, $3, 'pending', 0, $4, $5, $6, $6 FROM k
                     RETURNING {COLS}"
                ),
            }),
            claim: sql(format!(
                "WITH due AS MATERIALIZED (
                     SELECT task_id AS due_id FROM retry_durable_task
                     WHERE status = 'pending' AND next_attempt_at <= $3
                       AND operation IN ({ops})
                     ORDER BY next_attempt_at, task_id
                     LIMIT $5{lock})
                 UPDATE retry_durable_task
                 SET status = 'running', locked_by = $1, locked_until = $2,
                     retry_count = retry_count + 1, updated_at = $3
                 WHERE task_id {due}
                 RETURNING {COLS}",
                ops = texts("$4"),
                due = id_in("SELECT due_id FROM due"),
            )),
            complete: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'succeeded', locked_by = NULL, locked_until = NULL,
                     last_error = NULL, output = done.done_output, updated_at = $1
                 FROM (SELECT CAST(value ->> 0 AS BIGINT) AS done_id,
                              value ->> 1 AS done_owner,
                              CAST(value ->> 2 AS BIGINT) AS done_attempt,
                              {output} AS done_output
                       FROM {rows}) AS done
                 WHERE task_id = done.done_id AND status = 'running'
                   AND locked_by = done.done_owner AND retry_count = done.done_attempt
                 RETURNING task_id",
                output = unhex("value ->> 3"),
                rows = rows("$2"),
            )),
            retry_later: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'pending', locked_by = NULL, locked_until = NULL,
                     last_error = $4, next_attempt_at = $5, updated_at = $6 {FENCE}"
            )),
            mark_failed: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'failed', locked_by = NULL, locked_until = NULL, last_error = $4,
                     alerted_at = NULL, alert_lease_until = NULL, updated_at = $5 {FENCE}"
            )),
            release: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'pending', locked_by = NULL, locked_until = NULL,
                     retry_count = retry_count - 1, next_attempt_at = $4, updated_at = $4 {FENCE}"
            )),
            expired: sql(format!(
                "SELECT {COLS} FROM retry_durable_task
                 WHERE status = 'running' AND locked_until < $1
                 ORDER BY locked_until, task_id LIMIT $2{lock}"
            )),
            rescue: sql(format!(
                "UPDATE retry_durable_task
                 SET status = $4, next_attempt_at = $5, last_error = $6,
                     locked_by = NULL, locked_until = NULL,
                     alerted_at = NULL, alert_lease_until = NULL, updated_at = $7 {FENCE}"
            )),
            claim_alerts: sql(format!(
                "WITH owed AS MATERIALIZED (
                     SELECT task_id AS owed_id FROM retry_durable_task
                     WHERE status = 'failed' AND alerted_at IS NULL
                       AND (alert_lease_until IS NULL OR alert_lease_until <= $2)
                     ORDER BY updated_at, task_id LIMIT $3{lock})
                 UPDATE retry_durable_task SET alert_lease_until = $1
                 WHERE task_id {owed}
                 RETURNING {COLS}",
                owed = id_in("SELECT owed_id FROM owed"),
            )),
            ack_alert: sql(
                "UPDATE retry_durable_task SET alerted_at = $2, alert_lease_until = NULL
                 WHERE task_id = $1 AND status = 'failed' AND alerted_at IS NULL"
                    .to_owned(),
            ),
            get: sql(format!(
                "SELECT {COLS} FROM retry_durable_task WHERE task_id = $1"
            )),
            find: sql(match s.keys {
                Keys::TaskTable => format!(
                    "SELECT {COLS} FROM retry_durable_task
                     WHERE operation = $1 AND idempotency_key = $2"
                ),
                Keys::KeyTable => format!(
                    "SELECT {COLS} FROM retry_durable_task
                     WHERE task_id = (SELECT task_id FROM retry_durable_key
                                      WHERE operation = $1 AND idempotency_key = $2)"
                ),
            }),
            counts: "SELECT status, COUNT(*) FROM retry_durable_task GROUP BY status".to_owned(),
            failed: sql(format!(
                "SELECT {COLS} FROM retry_durable_task WHERE status = 'failed'
                 ORDER BY updated_at DESC, task_id DESC LIMIT $1"
            )),
            requeue: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'pending', retry_count = 0, next_attempt_at = $2,
                     alerted_at = NULL, alert_lease_until = NULL, updated_at = $2
                 WHERE task_id = $1 AND status IN ('failed', 'cancelled')
                 RETURNING {COLS}"
            )),
            cancel: sql(format!(
                "UPDATE retry_durable_task
                 SET status = 'cancelled', alert_lease_until = NULL, updated_at = $2
                 WHERE task_id = $1 AND status IN ('pending', 'failed')
                 RETURNING {COLS}"
            )),
            applied: format!("SELECT version, checksum FROM {MIGRATIONS_TABLE} ORDER BY version"),
            record_migration: sql(format!(
                "INSERT INTO {MIGRATIONS_TABLE} (version, name, checksum, applied_at)
                 VALUES ($1, $2, $3, $4)"
            )),
        }
    }
}

/// A [`DurableStore`] on a sqlx database with a [`Dialect`]: [`SqliteStore`](super::SqliteStore)
/// and [`PgStore`](super::PgStore).
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

/// `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON array of strings: one parameter for a list, so the statement stays fixed and
/// prepared once.
fn json_string_array(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, s);
    }
    out.push(']');
    out
}

/// The completions as `[[task_id, owner, attempt, output as hex or null], …]`.
fn json_completions(done: &[Completion]) -> String {
    let mut out = String::with_capacity(16 + done.len() * 48);
    out.push('[');
    for (i, c) in done.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "[{},", c.fence.task_id.0);
        json_string(&mut out, &c.fence.owner);
        let _ = write!(out, ",{},", count(c.fence.attempt));
        match &c.output {
            None => out.push_str("null"),
            Some(bytes) => {
                out.push('"');
                for b in bytes {
                    let _ = write!(out, "{b:02x}");
                }
                out.push('"');
            }
        }
        out.push(']');
    }
    out.push(']');
    out
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

    /// A task row ([`COLS`]), its bad values located.
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

/// The names of [`COLS`], by position.
const COLUMNS: [&str; 15] = [
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
            writer: DB::statements()
                .spelling
                .single_writer
                .then(|| Arc::new(Mutex::new(()))),
        };
        store.migrate().await?;
        Ok(store)
    }

    fn sql() -> &'static Statements {
        DB::statements()
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
        match DB::statements().spelling.begin_write {
            Some(begin) => self.pool.begin_with(begin).await,
            None => self.pool.begin().await,
        }
        .map_err(Self::db(action))
    }

    async fn migrate(&self) -> StoreResult<()> {
        let backend = DB::BACKEND;
        let spelling = DB::statements().spelling;
        let read = Self::db("read applied migrations");
        let _turn = self.turn().await;
        let mut tx = self.begin_write("lock the database for migrations").await?;
        if let Some(lock) = spelling.migration_lock {
            DB::execute(&mut tx, lock, &[])
                .await
                .map_err(Self::db("take the migration lock"))?;
        }
        DB::execute(&mut tx, spelling.migrations_table, &[])
            .await
            .map_err(Self::db("create the migrations table"))?;
        let rows = DB::fetch(&mut tx, &Self::sql().applied, &[])
            .await
            .map_err(Self::db("read applied migrations"))?;
        let applied = rows
            .iter()
            .map(|row| Ok((DB::int(row, 0)?, DB::text(row, 1)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(read)?;
        let todo = migrate::plan(spelling.migrations, &applied)
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
            DB::execute(&mut tx, &Self::sql().record_migration, &args)
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
            .tasks(&Self::sql().enqueue, &args, true, "insert a task")
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
        let ops = json_string_array(operations);
        let args = [
            Arg::Text(owner),
            Arg::Int(lease_until.as_unix_millis()),
            Arg::Int(now.as_unix_millis()),
            Arg::Text(&ops),
            Arg::Int(i64::from(batch)),
        ];
        self.tasks(&Self::sql().claim, &args, true, "claim due tasks")
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
            DB::fetch(&mut conn, &Self::sql().complete, &args)
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
        self.fenced(&Self::sql().retry_later, fence, &values, "schedule a retry")
            .await
    }

    async fn mark_failed(&self, fence: &Fence, error: &str, now: Timestamp) -> StoreResult<bool> {
        let values = [Arg::Text(error), Arg::Int(now.as_unix_millis())];
        self.fenced(&Self::sql().mark_failed, fence, &values, "fail a task")
            .await
    }

    async fn release(&self, fence: &Fence, now: Timestamp) -> StoreResult<bool> {
        let values = [Arg::Int(now.as_unix_millis())];
        self.fenced(&Self::sql().release, fence, &values, "release a lease")
            .await
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
        let _turn = self.turn().await;
        let mut tx = self
            .begin_write("lock the database to rescue leases")
            .await?;
        let args = [Arg::Int(now.as_unix_millis()), Arg::Int(i64::from(batch))];
        let rows = DB::fetch(&mut tx, &Self::sql().expired, &args)
            .await
            .map_err(Self::db("find expired leases"))?;
        let mut rescued = Vec::with_capacity(rows.len());
        for row in &rows {
            let task = DB::task(DB::BACKEND, row)?;
            let Some(fence) = task.fence() else { continue };
            let (status, next) = rescue_decision(task.retry_count, task.max_attempts, backoff, now);
            let error = rescue_error(&fence.owner, task.locked_until);
            let args = [
                Arg::Int(fence.task_id.0),
                Arg::Text(&fence.owner),
                Arg::Int(count(fence.attempt)),
                Arg::Text(status.as_str()),
                Arg::Int(next.as_unix_millis()),
                Arg::Text(&error),
                Arg::Int(now.as_unix_millis()),
            ];
            let done = DB::execute(&mut tx, &Self::sql().rescue, &args)
                .await
                .map_err(Self::db("rescue an expired lease"))?;
            if done == 1 {
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
            .map_err(Self::db("commit lease rescues"))?;
        rescued.sort_by_key(|r| r.task_id);
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
        self.tasks(
            &Self::sql().claim_alerts,
            &args,
            true,
            "reserve owed alerts",
        )
        .await
    }

    async fn ack_alert(&self, task_id: TaskId, now: Timestamp) -> StoreResult<bool> {
        let args = [Arg::Int(task_id.0), Arg::Int(now.as_unix_millis())];
        let n = self
            .write(&Self::sql().ack_alert, &args, "record a delivered alert")
            .await?;
        Ok(n == 1)
    }

    async fn get(&self, task_id: TaskId) -> StoreResult<Option<Task>> {
        let args = [Arg::Int(task_id.0)];
        Ok(self
            .tasks(&Self::sql().get, &args, false, "read a task")
            .await?
            .pop())
    }

    async fn find(&self, operation: &str, idempotency_key: &str) -> StoreResult<Option<Task>> {
        let args = [Arg::Text(operation), Arg::Text(idempotency_key)];
        Ok(self
            .tasks(&Self::sql().find, &args, false, "find a task by key")
            .await?
            .pop())
    }

    async fn counts(&self) -> StoreResult<StatusCounts> {
        let action = "count tasks by status";
        let mut conn = self.conn(action).await?;
        let rows = DB::fetch(&mut conn, &Self::sql().counts, &[])
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
            .tasks(&Self::sql().failed, &args, false, "list failed tasks")
            .await?;
        tasks.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        Ok(tasks)
    }

    async fn requeue(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        self.transition(
            &Self::sql().requeue,
            task_id,
            now,
            "requeue",
            "requeue a task",
        )
        .await
    }

    async fn cancel(&self, task_id: TaskId, now: Timestamp) -> StoreResult<Task> {
        self.transition(&Self::sql().cancel, task_id, now, "cancel", "cancel a task")
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
    fn json_arrays_escape_strings() {
        let s = json_string_array(&["a\"b".into(), "c\\d".into(), "e\n".into()]);
        assert_eq!(s, r#"["a\"b","c\\d","e\u000a"]"#);
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

    #[test]
    fn parameters_take_the_dialect_sigil() {
        static Q: Spelling = Spelling {
            param: '?',
            json_rows: "json_each({})",
            json_texts: "SELECT value FROM json_each({})",
            id_in: "IN ({})",
            unhex: "unhex({})",
            lock: "",
            begin_write: None,
            migration_lock: None,
            migrations_table: "",
            migrations: &[],
            single_writer: true,
            keys: Keys::TaskTable,
        };
        let st = Statements::new(&Q);
        assert!(st.claim.contains("LIMIT ?5"), "{}", st.claim);
        assert!(!st.claim.contains('$') && !st.complete.contains('$'));
        assert!(
            st.complete.contains("unhex(value ->> 3)"),
            "{}",
            st.complete
        );
    }
}
