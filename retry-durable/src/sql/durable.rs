//! [`DurableStore`] for [`SqlStore`]: each method binds the values it is handed and runs its
//! dialect's statement.

use std::sync::Arc;

use super::dialect::Dialect;
use super::driver::Arg;
use super::store::{SqlStore, count, json_completions};
use crate::clock::Timestamp;
use crate::error::DurableError;
use crate::store::{Completion, DurableStore, Rescue, StoreResult, WorkSignal, status_counts};
use crate::task::{Enqueued, Fence, NewTask, StatusCounts, Task};
use retry_runtime::durable::TaskId;

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
