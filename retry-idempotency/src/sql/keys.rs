//! The key store itself: a pool, and on SQLite the writer task its writes go through.

use std::path::Path;
use std::time::Duration;

use retry_durable::Timestamp;
use retry_durable::sqlx::{self, Database, Pool};

use super::dialect::{KeyDialect, db_error};
use super::driver::Arg;
use super::migrate::migrate;
use super::writer::Writer;
use crate::store::{Completed, Held, KeyStore, NewRun, Record, StoreError, StoreResult};

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
    writer: Option<Writer>,
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

impl<DB: KeyDialect> SqlKeys<DB> {
    /// Wraps `pool` (for example a queue store's, [`SqliteStore::pool`](retry_durable::SqlStore::pool):
    /// one database file or schema for both) and applies the key table's migrations.
    pub async fn from_pool(pool: Pool<DB>) -> StoreResult<Self> {
        migrate::<DB>(&pool).await?;
        let writer = DB::SINGLE_WRITER.then(|| Writer::spawn::<DB>(pool.clone()));
        Ok(SqlKeys { pool, writer })
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    async fn write(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
        action: &'static str,
    ) -> StoreResult<u64> {
        if let Some(writer) = &self.writer {
            return writer
                .write(sql, args)
                .await
                .map_err(db_error::<DB>(action));
        }
        let mut conn = self.pool.acquire().await.map_err(db_error::<DB>(action))?;
        DB::run(&mut conn, sql, args)
            .await
            .map_err(db_error::<DB>(action))
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
            .map_err(db_error::<sqlx::Sqlite>("open the database file"))?;
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
            .map_err(db_error::<sqlx::Postgres>("connect"))?;
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
        let mut conn = self.pool.acquire().await.map_err(db_error::<DB>(action))?;
        let rows = DB::rows(
            &mut conn,
            DB::STATEMENTS.get,
            &[Arg::Bytes(scope), Arg::Text(key)],
        )
        .await
        .map_err(db_error::<DB>(action))?;
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
