//! The PostgreSQL store: for several instances sharing one queue.
//!
//! Claims use `FOR UPDATE SKIP LOCKED` inside a single `WITH due AS (…) UPDATE … RETURNING`
//! statement (see `queries.rs`): the row locks and the status change commit together, so concurrent claimers
//! skip each other's rows instead of waiting or double-claiming (a separate autocommit
//! `SELECT … FOR UPDATE` followed by an `UPDATE` would release the lock in between, the bug
//! found in fang). Lease rescue and alert reservation use the same pattern, so any instance can
//! run them and no leader election is needed.
//!
//! Idempotency keys live in `retry_durable_key`, written once per task at enqueue, not in a
//! unique index of the task table: PostgreSQL's claim and completion updates cannot be HOT (they
//! change `status`, which the partial indexes name), so every index of the task table gets a
//! new entry at each of them, and the key's index was the widest (migration 4 says more).
//!
//! A hand-off wakes idle workers in every process at once: the task table's insert trigger
//! sends `NOTIFY retry_durable_task` with the table's schema as payload, and a worker's store
//! `LISTEN`s (one connection per running worker). Workers still poll, so a lost notification
//! only delays a task until the next poll.

mod queries;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgQueryResult};
use sqlx::{AssertSqlSafe, Postgres};
use tokio::sync::Notify;

use crate::error::DurableError;
use crate::sql::{Dialect, RowsAffected, SqlStore, Statements, pool_options};
use crate::store::StoreResult;
use queries::MIGRATION_LOCK;

/// The channel the insert trigger notifies (migration 3); the payload is the table's schema.
const CHANNEL: &str = "retry_durable_task";

impl RowsAffected for PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl Dialect for Postgres {
    const BACKEND: &'static str = "postgres";
    const STATEMENTS: &'static Statements = &queries::STATEMENTS;
    const SINGLE_WRITER: bool = false;

    /// `LISTEN`s on a connection of its own and wakes `wake` on each hand-off to this store's
    /// table (other schemas' hand-offs share the channel and are ignored).
    async fn listen(
        pool: &sqlx::Pool<Self>,
        wake: Arc<Notify>,
    ) -> StoreResult<Option<tokio::task::AbortHandle>> {
        let schema: String = sqlx::query_scalar(
            "SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'retry_durable_task'::regclass",
        )
        .fetch_one(pool)
        .await
        .map_err(DurableError::db("postgres", "find the task table's schema"))?;
        let mut listener = PgListener::connect_with(pool)
            .await
            .map_err(DurableError::db("postgres", "connect a listener"))?;
        listener
            .listen(CHANNEL)
            .await
            .map_err(DurableError::db("postgres", "listen for hand-offs"))?;
        let task = tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(n) if n.payload() == schema => wake.notify_waiters(),
                    Ok(_) => {}
                    Err(e) => {
                        // Hand-offs during the outage were missed: wake once so the worker
                        // looks, then wait a little before the listener reconnects.
                        tracing::warn!(target: "retry_runtime::durable", error = %e,
                            "hand-off listener lost its connection; reconnecting");
                        wake.notify_waiters();
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(task.abort_handle()))
    }
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

/// A [`DurableStore`](crate::DurableStore) in PostgreSQL.
pub type PgStore = SqlStore<Postgres>;

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63
}

impl SqlStore<Postgres> {
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
        let pool = pool_options::<Postgres>()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(DurableError::db("postgres", "connect"))?;
        if let Some(schema) = &options.schema {
            // Under the migration lock: instances starting together would race to create it.
            let create = DurableError::db("postgres", "create the schema");
            let mut tx = pool.begin().await.map_err(create)?;
            sqlx::query(MIGRATION_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(DurableError::db("postgres", "take the migration lock"))?;
            // `schema` was validated as a plain identifier above.
            sqlx::query(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
            )))
            .execute(&mut *tx)
            .await
            .map_err(DurableError::db("postgres", "create the schema"))?;
            tx.commit()
                .await
                .map_err(DurableError::db("postgres", "create the schema"))?;
        }
        Self::from_pool(pool).await
    }
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
