//! [`KeyStore`] on SQLite and PostgreSQL: one implementation over sqlx, each database's SQL
//! written out in full below.
//!
//! The statements differ only in their parameter syntax and in the sweep: PostgreSQL deletes
//! rows it locked with `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once skip each other's
//! batches; SQLite runs every write under its one writer lock. The schema is migrated in its own
//! tracking table, `retry_idempotency_migrations`, away from the queue's and the application's.

use std::future::Future;
use std::hash::Hasher;
use std::path::Path;
use std::time::Duration;

use retry_durable::Timestamp;
use retry_durable::sqlx::{
    self, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type,
};
use tokio::sync::{mpsc, oneshot};

use crate::store::{
    Completed, Held, KeyStore, NewRun, Record, RecordState, StoreError, StoreResult, StoredResponse,
};

/// One database's SQL. Parameters are numbered (`?1` on SQLite, `$1` on PostgreSQL).
#[derive(Debug)]
pub struct Statements {
    /// 1 scope, 2 key, 3 fingerprint, 4 token, 5 lease until, 6 expires at, 7 now.
    insert: &'static str,
    /// 1 scope, 2 key: fingerprint, token, state, lease until, expires at, status, headers,
    /// body, not stored.
    get: &'static str,
    /// 1 scope, 2 key, 3 previous token, 4 fingerprint, 5 token, 6 lease until, 7 expires
    /// at, 8 now, 9 previous state.
    take_over: &'static str,
    /// 1 scope, 2 key, 3 token, 4 status, 5 headers, 6 body, 7 not stored (`''`: stored),
    /// 8 now.
    complete: &'static str,
    /// 1 scope, 2 key, 3 token.
    release: &'static str,
    /// 1 now, 2 batch.
    sweep: &'static str,
    /// Creates the tracking table.
    migrations_table: &'static str,
    /// The versions applied, with their checksums.
    applied: &'static str,
    /// Records migration 1 (name 2, checksum 3) applied at 4.
    record_migration: &'static str,
    /// Run first in the migration transaction (PostgreSQL: an advisory lock).
    migration_lock: Option<&'static str>,
    /// How the migration transaction begins (SQLite: `BEGIN IMMEDIATE`).
    begin_write: Option<&'static str>,
    /// The migrations, in order: (version, name, script).
    migrations: &'static [(i64, &'static str, &'static str)],
}

/// A database the key store runs on. Implemented for `sqlx::Sqlite` and `sqlx::Postgres`
/// (behind the `sqlite` and `postgres` features).
pub trait KeyDialect: Driver {
    /// `"sqlite"` or `"postgres"`.
    const BACKEND: &'static str;
    /// Its SQL.
    const STATEMENTS: &'static Statements;
    /// Whether this process's writes are committed in groups by one writer task (SQLite has
    /// one writer and pays a sync per commit: see [`SqlKeys`]).
    const SINGLE_WRITER: bool;
}

#[cfg(feature = "sqlite")]
impl KeyDialect for sqlx::Sqlite {
    const BACKEND: &'static str = "sqlite";
    const STATEMENTS: &'static Statements = &SQLITE;
    const SINGLE_WRITER: bool = true;
}

#[cfg(feature = "postgres")]
impl KeyDialect for sqlx::Postgres {
    const BACKEND: &'static str = "postgres";
    const STATEMENTS: &'static Statements = &POSTGRES;
    const SINGLE_WRITER: bool = false;
}

#[cfg(feature = "sqlite")]
static SQLITE: Statements = Statements {
    insert: "INSERT INTO retry_idempotency_key (scope, idempotency_key, fingerprint, token, \
             state, lease_until, expires_at, created_at) \
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
    get: "SELECT fingerprint, token, state, lease_until, expires_at, status, headers, body, \
          not_stored FROM retry_idempotency_key WHERE scope = ?1 AND idempotency_key = ?2",
    take_over: "UPDATE retry_idempotency_key SET fingerprint = ?4, token = ?5, \
                state = 'running', lease_until = ?6, expires_at = ?7, created_at = ?8, \
                status = NULL, headers = NULL, body = NULL, not_stored = NULL, \
                completed_at = NULL \
                WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = ?9",
    complete: "UPDATE retry_idempotency_key SET state = 'done', status = ?4, headers = ?5, \
               body = ?6, not_stored = NULLIF(?7, ''), completed_at = ?8 \
               WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = 'running'",
    release: "DELETE FROM retry_idempotency_key \
              WHERE scope = ?1 AND idempotency_key = ?2 AND token = ?3 AND state = 'running'",
    sweep: "DELETE FROM retry_idempotency_key WHERE rowid IN (\
                SELECT rowid FROM retry_idempotency_key \
                WHERE expires_at <= ?1 AND (state = 'done' OR lease_until <= ?1) \
                ORDER BY expires_at LIMIT ?2)",
    migrations_table: "CREATE TABLE IF NOT EXISTS retry_idempotency_migrations (\
                       version INTEGER PRIMARY KEY, name TEXT NOT NULL, \
                       checksum TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
    applied: "SELECT version, checksum FROM retry_idempotency_migrations ORDER BY version",
    record_migration: "INSERT INTO retry_idempotency_migrations \
                       (version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4)",
    migration_lock: None,
    begin_write: Some("BEGIN IMMEDIATE"),
    migrations: &[(
        1,
        "key_table",
        include_str!("../migrations/sqlite/0001_key_table.sql"),
    )],
};

#[cfg(feature = "postgres")]
static POSTGRES: Statements = Statements {
    insert: "INSERT INTO retry_idempotency_key (scope, idempotency_key, fingerprint, token, \
             state, lease_until, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, 'running', $5, $6, $7) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
    get: "SELECT fingerprint, token, state, lease_until, expires_at, status, headers, body, \
          not_stored FROM retry_idempotency_key WHERE scope = $1 AND idempotency_key = $2",
    take_over: "UPDATE retry_idempotency_key SET fingerprint = $4, token = $5, \
                state = 'running', lease_until = $6, expires_at = $7, created_at = $8, \
                status = NULL, headers = NULL, body = NULL, not_stored = NULL, \
                completed_at = NULL \
                WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = $9",
    complete: "UPDATE retry_idempotency_key SET state = 'done', status = $4, headers = $5, \
               body = $6, not_stored = NULLIF($7, ''), completed_at = $8 \
               WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'running'",
    release: "DELETE FROM retry_idempotency_key \
              WHERE scope = $1 AND idempotency_key = $2 AND token = $3 AND state = 'running'",
    sweep: "DELETE FROM retry_idempotency_key WHERE (scope, idempotency_key) IN (\
                SELECT scope, idempotency_key FROM retry_idempotency_key \
                WHERE expires_at <= $1 AND (state = 'done' OR lease_until <= $1) \
                ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    migrations_table: "CREATE TABLE IF NOT EXISTS retry_idempotency_migrations (\
                       version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
                       checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    applied: "SELECT version, checksum FROM retry_idempotency_migrations ORDER BY version",
    record_migration: "INSERT INTO retry_idempotency_migrations \
                       (version, name, checksum, applied_at) VALUES ($1, $2, $3, $4)",
    // An arbitrary key, not the queue's: "retry_id" in ASCII.
    migration_lock: Some("SELECT pg_advisory_xact_lock(8243122727982950756)"),
    begin_write: None,
    migrations: &[(
        1,
        "key_table",
        include_str!("../migrations/postgres/0001_key_table.sql"),
    )],
};

/// A [`KeyStore`] on a sqlx database: [`SqliteKeys`] or [`PgKeys`].
///
/// On SQLite every write of this process goes through one writer task that commits the writes
/// waiting at that moment in one transaction (group commit): SQLite has one writer, and with
/// `synchronous = FULL` each commit waits for the disk, so one commit per write would cap the
/// store at the disk's sync rate. Each write is answered only once its transaction committed,
/// so a key is durable before its request goes on. PostgreSQL commits each statement on its
/// own connection (its own group commit happens in the server).
pub struct SqlKeys<DB: Database> {
    pool: Pool<DB>,
    writer: Option<mpsc::UnboundedSender<Job>>,
}

/// A write for the writer task: its statement, its values, and where its result goes.
struct Job {
    sql: &'static str,
    args: Vec<OwnedArg>,
    done: oneshot::Sender<Result<u64, sqlx::Error>>,
}

enum OwnedArg {
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl OwnedArg {
    fn of(arg: &Arg<'_>) -> Self {
        match *arg {
            Arg::Int(n) => OwnedArg::Int(n),
            Arg::Text(t) => OwnedArg::Text(t.to_owned()),
            Arg::Bytes(b) => OwnedArg::Bytes(b.to_vec()),
        }
    }

    fn borrow(&self) -> Arg<'_> {
        match self {
            OwnedArg::Int(n) => Arg::Int(*n),
            OwnedArg::Text(t) => Arg::Text(t),
            OwnedArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// The most writes committed in one transaction.
const GROUP: usize = 256;

/// The writer task: takes the writes waiting, runs them in one `BEGIN IMMEDIATE` transaction,
/// commits, then answers each. Ends when every store handle is dropped.
async fn group_commit<DB: KeyDialect>(pool: Pool<DB>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut group = Vec::with_capacity(GROUP);
    while jobs.recv_many(&mut group, GROUP).await > 0 {
        let mut results = Vec::with_capacity(group.len());
        let committed = async {
            let mut tx = match DB::STATEMENTS.begin_write {
                Some(b) => pool.begin_with(b).await?,
                None => pool.begin().await?,
            };
            for job in &group {
                let args: Vec<Arg<'_>> = job.args.iter().map(OwnedArg::borrow).collect();
                // A failed statement is that write's error; the others still commit (SQLite
                // rolls back the statement, not the transaction).
                results.push(DB::run(&mut tx, job.sql, &args).await);
            }
            tx.commit().await
        }
        .await;
        match committed {
            Ok(()) => {
                for (job, result) in group.drain(..).zip(results) {
                    let _ = job.done.send(result);
                }
            }
            Err(e) => {
                let e = e.to_string();
                for job in group.drain(..) {
                    let _ = job.done.send(Err(sqlx::Error::Protocol(format!(
                        "the group commit failed: {e}"
                    ))));
                }
            }
        }
    }
}

/// Keys in SQLite (feature `sqlite`).
#[cfg(feature = "sqlite")]
pub type SqliteKeys = SqlKeys<sqlx::Sqlite>;

/// Keys in PostgreSQL (feature `postgres`).
#[cfg(feature = "postgres")]
pub type PgKeys = SqlKeys<sqlx::Postgres>;

impl<DB: Database> Clone for SqlKeys<DB> {
    fn clone(&self) -> Self {
        SqlKeys {
            pool: self.pool.clone(),
            writer: self.writer.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for SqlKeys<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlKeys")
            .field("backend", &DB::NAME)
            .finish_non_exhaustive()
    }
}

/// A value bound to a parameter.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// `BIGINT`/`INTEGER`.
    Int(i64),
    /// Text.
    Text(&'a str),
    /// `BYTEA`/`BLOB`.
    Bytes(&'a [u8]),
}

/// What the store needs of a sqlx driver; implemented for every database whose types fit.
#[doc(hidden)]
pub trait Driver: Database {
    /// Runs `sql`: the number of rows changed.
    #[doc(hidden)]
    fn run<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

    /// Runs `sql`: the rows.
    #[doc(hidden)]
    fn rows<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Runs a script without parameters.
    #[doc(hidden)]
    fn script<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    /// A row of `get` as a record.
    #[doc(hidden)]
    fn record(row: &Self::Row) -> Result<Record, String>;

    /// A `(version, checksum)` row.
    #[doc(hidden)]
    fn applied(row: &Self::Row) -> Result<(i64, String), sqlx::Error>;
}

/// How many rows a statement changed.
#[doc(hidden)]
pub trait RowsAffected {
    /// The count.
    fn rows(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

fn bind<DB>(sql: &'static str, args: &[Arg<'_>]) -> sqlx::query::Query<'static, DB, DB::Arguments>
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
    fn run<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { Ok(query.execute(conn).await?.rows()) }
    }

    fn rows<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c {
        let query = bind::<DB>(sql, args);
        async move { query.fetch_all(conn).await }
    }

    async fn script(conn: &mut Self::Connection, sql: &'static str) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(sql).execute(conn).await.map(drop)
    }

    fn record(row: &Self::Row) -> Result<Record, String> {
        fn e(column: &'static str) -> impl FnOnce(sqlx::Error) -> String {
            move |err| format!("column {column}: {err}")
        }
        let fingerprint: Vec<u8> = row.try_get(0).map_err(e("fingerprint"))?;
        let token: i64 = row.try_get(1).map_err(e("token"))?;
        let state: String = row.try_get(2).map_err(e("state"))?;
        let lease_until: i64 = row.try_get(3).map_err(e("lease_until"))?;
        let expires_at: i64 = row.try_get(4).map_err(e("expires_at"))?;
        let state = match state.as_str() {
            "running" => RecordState::Running {
                lease_until: Timestamp::from_unix_millis(lease_until),
            },
            "done" => {
                let status: Option<i64> = row.try_get(5).map_err(e("status"))?;
                let headers: Option<Vec<u8>> = row.try_get(6).map_err(e("headers"))?;
                let body: Option<Vec<u8>> = row.try_get(7).map_err(e("body"))?;
                let not_stored: Option<String> = row.try_get(8).map_err(e("not_stored"))?;
                let status = status
                    .and_then(|s| u16::try_from(s).ok())
                    .filter(|s| (100..1000).contains(s))
                    .ok_or("column status: not an HTTP status")?;
                RecordState::Done(StoredResponse {
                    status,
                    headers: headers.unwrap_or_default(),
                    body: body.unwrap_or_default(),
                    not_stored,
                })
            }
            other => return Err(format!("column state: unknown state {other:?}")),
        };
        Ok(Record {
            fingerprint,
            token,
            expires_at: Timestamp::from_unix_millis(expires_at),
            state,
        })
    }

    fn applied(row: &Self::Row) -> Result<(i64, String), sqlx::Error> {
        Ok((row.try_get(0)?, row.try_get(1)?))
    }
}

/// FNV-1a 64 of a migration's SQL, as 16 hex digits: stored with each applied migration, so
/// an edited migration is detected. Must never change.
fn checksum(sql: &str) -> String {
    let mut h = FnvHasher(0xcbf2_9ce4_8422_2325);
    h.write(sql.as_bytes());
    format!("{:016x}", h.finish())
}

struct FnvHasher(u64);

impl Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl<DB: KeyDialect> SqlKeys<DB> {
    /// Wraps `pool` (for example a queue store's, [`SqliteStore::pool`](retry_durable::SqlStore::pool):
    /// one database file or schema for both) and applies the key table's migrations.
    pub async fn from_pool(pool: Pool<DB>) -> StoreResult<Self> {
        let keys = SqlKeys { pool, writer: None };
        keys.migrate().await?;
        let writer = DB::SINGLE_WRITER.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(group_commit::<DB>(keys.pool.clone(), rx));
            tx
        });
        Ok(SqlKeys { writer, ..keys })
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database {
            backend: DB::BACKEND,
            action,
            source,
        }
    }

    async fn migrate(&self) -> StoreResult<()> {
        let sql = DB::STATEMENTS;
        let begin = Self::db("begin the migration transaction");
        let mut tx = match sql.begin_write {
            Some(b) => self.pool.begin_with(b).await,
            None => self.pool.begin().await,
        }
        .map_err(begin)?;
        if let Some(lock) = sql.migration_lock {
            DB::run(&mut tx, lock, &[])
                .await
                .map_err(Self::db("take the migration lock"))?;
        }
        DB::run(&mut tx, sql.migrations_table, &[])
            .await
            .map_err(Self::db("create the migrations table"))?;
        let applied = DB::rows(&mut tx, sql.applied, &[])
            .await
            .map_err(Self::db("read applied migrations"))?
            .iter()
            .map(DB::applied)
            .collect::<Result<Vec<_>, _>>()
            .map_err(Self::db("read applied migrations"))?;
        for (version, sum) in &applied {
            match sql.migrations.iter().find(|m| m.0 == *version) {
                None => {
                    return Err(StoreError::Migration {
                        backend: DB::BACKEND,
                        reason: format!(
                            "the database has idempotency-key migration {version}, which this \
                             version of retry-idempotency does not know: upgrade the library"
                        ),
                    });
                }
                Some(m) if checksum(m.2) != *sum => {
                    return Err(StoreError::Migration {
                        backend: DB::BACKEND,
                        reason: format!(
                            "idempotency-key migration {version} ({}) was applied with checksum \
                             {sum}, this version has {}: the schema and the library disagree",
                            m.1,
                            checksum(m.2)
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        for (version, name, script) in sql.migrations {
            if applied.iter().any(|(v, _)| v == version) {
                continue;
            }
            DB::script(&mut tx, script)
                .await
                .map_err(|e| StoreError::Migration {
                    backend: DB::BACKEND,
                    reason: format!("migration {version} ({name}) failed: {e}"),
                })?;
            let sum = checksum(script);
            let args = [
                Arg::Int(*version),
                Arg::Text(name),
                Arg::Text(&sum),
                Arg::Int(Timestamp::now().as_unix_millis()),
            ];
            DB::run(&mut tx, sql.record_migration, &args)
                .await
                .map_err(Self::db("record an applied migration"))?;
        }
        tx.commit().await.map_err(Self::db("commit migrations"))
    }

    async fn write(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
        action: &'static str,
    ) -> StoreResult<u64> {
        if let Some(writer) = &self.writer {
            let (done, answer) = oneshot::channel();
            let job = Job {
                sql,
                args: args.iter().map(OwnedArg::of).collect(),
                done,
            };
            let closed = || StoreError::Database {
                backend: DB::BACKEND,
                action,
                source: sqlx::Error::PoolClosed,
            };
            writer.send(job).map_err(|_| closed())?;
            return answer
                .await
                .map_err(|_| closed())?
                .map_err(Self::db(action));
        }
        let mut conn = self.pool.acquire().await.map_err(Self::db(action))?;
        DB::run(&mut conn, sql, args)
            .await
            .map_err(Self::db(action))
    }
}

#[cfg(feature = "sqlite")]
impl SqlKeys<sqlx::Sqlite> {
    /// Opens (creating if missing) the SQLite file at `path` as the queue's store does (WAL,
    /// `synchronous = FULL`, so a completed key survives power loss; a 5 s busy timeout) and
    /// applies the migrations.
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let path = path.as_ref();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Startup only.
            std::fs::create_dir_all(parent).map_err(|e| StoreError::InvalidConfig {
                field: "path",
                reason: format!("cannot create directory {}: {e}", parent.display()),
            })?;
        }
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let pool = sqlx::pool::PoolOptions::new()
            .max_connections(4)
            .connect_with(connect)
            .await
            .map_err(Self::db("open the database file"))?;
        Self::from_pool(pool).await
    }
}

#[cfg(feature = "postgres")]
impl SqlKeys<sqlx::Postgres> {
    /// Connects to `url` (a pool of 8) and applies the migrations. To share a queue's
    /// database and schema, use [`from_pool`](Self::from_pool) with its pool.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let pool = sqlx::pool::PoolOptions::new()
            .max_connections(8)
            .connect(url)
            .await
            .map_err(Self::db("connect"))?;
        Self::from_pool(pool).await
    }
}

impl<DB: KeyDialect> KeyStore for SqlKeys<DB> {
    fn backend(&self) -> &'static str {
        DB::BACKEND
    }

    async fn insert(&self, run: &NewRun<'_>) -> StoreResult<bool> {
        let args = [
            Arg::Bytes(run.scope),
            Arg::Text(run.key),
            Arg::Bytes(run.fingerprint),
            Arg::Int(run.token),
            Arg::Int(run.lease_until.as_unix_millis()),
            Arg::Int(run.expires_at.as_unix_millis()),
            Arg::Int(run.now.as_unix_millis()),
        ];
        let n = self
            .write(DB::STATEMENTS.insert, &args, "insert a key")
            .await?;
        Ok(n == 1)
    }

    async fn get(&self, scope: &[u8], key: &str) -> StoreResult<Option<Record>> {
        let action = "read a key";
        let mut conn = self.pool.acquire().await.map_err(Self::db(action))?;
        let rows = DB::rows(
            &mut conn,
            DB::STATEMENTS.get,
            &[Arg::Bytes(scope), Arg::Text(key)],
        )
        .await
        .map_err(Self::db(action))?;
        match rows.first() {
            None => Ok(None),
            Some(row) => DB::record(row)
                .map(Some)
                .map_err(|detail| StoreError::BadRow {
                    backend: DB::BACKEND,
                    detail,
                }),
        }
    }

    async fn take_over(
        &self,
        previous_token: i64,
        previous_state: &str,
        run: &NewRun<'_>,
    ) -> StoreResult<bool> {
        let args = [
            Arg::Bytes(run.scope),
            Arg::Text(run.key),
            Arg::Int(previous_token),
            Arg::Bytes(run.fingerprint),
            Arg::Int(run.token),
            Arg::Int(run.lease_until.as_unix_millis()),
            Arg::Int(run.expires_at.as_unix_millis()),
            Arg::Int(run.now.as_unix_millis()),
            Arg::Text(previous_state),
        ];
        let n = self
            .write(DB::STATEMENTS.take_over, &args, "take a key over")
            .await?;
        Ok(n == 1)
    }

    async fn complete(
        &self,
        held: &Held<'_>,
        response: &Completed<'_>,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let args = [
            Arg::Bytes(held.scope),
            Arg::Text(held.key),
            Arg::Int(held.token),
            Arg::Int(i64::from(response.status)),
            Arg::Bytes(response.headers),
            Arg::Bytes(response.body),
            Arg::Text(response.not_stored.unwrap_or("")),
            Arg::Int(now.as_unix_millis()),
        ];
        let n = self
            .write(DB::STATEMENTS.complete, &args, "store a response")
            .await?;
        Ok(n == 1)
    }

    async fn release(&self, held: &Held<'_>) -> StoreResult<bool> {
        let args = [
            Arg::Bytes(held.scope),
            Arg::Text(held.key),
            Arg::Int(held.token),
        ];
        let n = self
            .write(DB::STATEMENTS.release, &args, "release a key")
            .await?;
        Ok(n == 1)
    }

    async fn sweep(&self, now: Timestamp, batch: u32) -> StoreResult<u64> {
        if batch == 0 {
            return Ok(0);
        }
        let args = [Arg::Int(now.as_unix_millis()), Arg::Int(i64::from(batch))];
        self.write(DB::STATEMENTS.sweep, &args, "sweep expired keys")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_fixed() {
        // A database records these when it migrates: a change would refuse to open it.
        assert_eq!(checksum("CREATE TABLE a (x INT);"), "5f791065e725c41b");
    }
}
