//! What a database adds to the shared store: its statements, whether it has one writer, how
//! another process's hand-off wakes a worker, and the pool settings every backend uses.

use std::future::Future;
use std::sync::Arc;

use sqlx::{Database, Pool};
use tokio::sync::Notify;

use super::driver::Driver;
use super::statements::Statements;
use crate::store::StoreResult;

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
