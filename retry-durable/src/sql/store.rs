//! [`SqlStore`]: a pool, the statements of its [`Dialect`], and the few ways of running them
//! (a write, a read of task rows, a fenced write, an operator transition, the migrations).

use std::sync::Arc;

use sqlx::{Database, Pool, Transaction};
use tokio::sync::{Mutex, Notify};

use super::dialect::Dialect;
use super::driver::Arg;
use super::statements::Statements;
use crate::clock::Timestamp;
use crate::error::DurableError;
use crate::migrate::{self, MIGRATIONS_TABLE};
use crate::store::{Completion, DurableStore, StoreResult, transition_error};
use crate::task::{Fence, Task};
use retry_runtime::durable::TaskId;

/// A [`DurableStore`] on a sqlx database with a [`Dialect`]: [`SqliteStore`](crate::SqliteStore)
/// and [`PgStore`](crate::PgStore).
pub struct SqlStore<DB: Database> {
    pub(super) pool: Pool<DB>,
    /// Woken by this process's hand-offs (and, through [`Dialect::listen`], other processes').
    pub(super) wake: Arc<Notify>,
    /// Serialises this process's writes where the database has a single writer.
    pub(super) writer: Option<Arc<Mutex<()>>>,
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
pub(super) fn count(n: u32) -> i64 {
    i64::from(n.min(i32::MAX as u32))
}

/// The completions as `[[task_id, owner, attempt, output as hex or null], …]`: one parameter
/// for the whole batch, so the statement stays fixed and prepared once.
pub(super) fn json_completions(done: &[Completion]) -> String {
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

    pub(super) fn sql() -> &'static Statements {
        DB::STATEMENTS
    }

    pub(super) fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> DurableError {
        DurableError::db(DB::BACKEND, action)
    }

    pub(super) async fn conn(&self, action: &'static str) -> StoreResult<Conn<DB>> {
        self.pool.acquire().await.map_err(Self::db(action))
    }

    /// Takes this process's turn to write, where the database has a single writer.
    pub(super) async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.writer {
            Some(m) => Some(m.lock().await),
            None => None,
        }
    }

    /// Runs one writing statement: rows changed.
    pub(super) async fn write(
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
    pub(super) async fn tasks(
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

    pub(super) async fn begin_write(
        &self,
        action: &'static str,
    ) -> StoreResult<Transaction<'static, DB>> {
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
    pub(super) async fn fenced(
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
    pub(super) async fn transition(
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

#[cfg(test)]
mod tests {
    use super::*;

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
