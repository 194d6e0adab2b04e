//! The hand-off and operations API: [`DurableQueue`].
//!
//! The queue is what request-path code and operators use; the [`Worker`](crate::Worker) is what
//! drains it. Both wrap the same [`DurableStore`] and read time from a [`Clock`].

use std::sync::Arc;

use retry_runtime::durable::{Deferred, EnqueueOptions, HandOff, HandOffFuture, TaskId};

use crate::clock::{Clock, SystemClock};
use crate::error::DurableError;
use crate::store::DurableStore;
use crate::task::{NewTask, StatusCounts, Task};

/// Hand-off and operations on a durable task store.
#[derive(Clone)]
pub struct DurableQueue<S> {
    store: S,
    clock: Arc<dyn Clock>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for DurableQueue<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableQueue")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<S: DurableStore> DurableQueue<S> {
    /// A queue on `store` using the system clock.
    pub fn new(store: S) -> Self {
        DurableQueue {
            store,
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses `clock` for every timestamp (tests pass a [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The underlying store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Hands off `payload` for durable retry under `operation`, keyed by `idempotency_key`.
    ///
    /// The key must be the one the in-memory attempts already sent (generate it once, before the
    /// first attempt), so the upstream can recognise every later attempt as the same request.
    /// An empty key is refused with [`DurableError::MissingIdempotencyKey`]. Handing off the
    /// same `(operation, key)` again returns the existing task with `created == false`.
    pub async fn enqueue(
        &self,
        operation: &str,
        idempotency_key: &str,
        payload: &[u8],
        options: EnqueueOptions,
    ) -> Result<Deferred, DurableError> {
        let now = self.clock.now();
        let task = NewTask::new(operation, idempotency_key, payload, options, now)?;
        let enqueued = self.store.enqueue(task, now).await?;
        let t = &enqueued.task;
        if enqueued.created {
            tracing::info!(
                target: "retry_runtime::durable",
                event = "enqueue",
                task_id = t.id.0,
                operation = %t.operation,
                idempotency_key = %t.idempotency_key,
                "handed off to the durable queue"
            );
        } else {
            tracing::debug!(
                target: "retry_runtime::durable",
                event = "enqueue_duplicate",
                task_id = t.id.0,
                operation = %t.operation,
                status = %t.status,
                "duplicate hand-off; returning the existing task"
            );
        }
        Ok(Deferred::new(t.id, enqueued.created, t.status))
    }

    /// One task by id: a deferred call's outcome. `succeeded` with the handler's
    /// [`output`](Task::output), `failed` with its [`last_error`](Task::last_error), or still
    /// `pending`/`running`; `None` when there is no such task.
    pub async fn get(&self, task_id: TaskId) -> Result<Option<Task>, DurableError> {
        self.store.get(task_id).await
    }

    /// One task by `(operation, idempotency_key)`.
    pub async fn find(
        &self,
        operation: &str,
        idempotency_key: &str,
    ) -> Result<Option<Task>, DurableError> {
        self.store.find(operation, idempotency_key).await
    }

    /// How many tasks are in each status (for a dashboard or a health check).
    pub async fn counts(&self) -> Result<StatusCounts, DurableError> {
        self.store.counts().await
    }

    /// Up to `limit` failed tasks, most recent first, each with its `last_error`.
    pub async fn failed(&self, limit: u32) -> Result<Vec<Task>, DurableError> {
        self.store.failed_tasks(limit).await
    }

    /// Puts a failed (or cancelled) task back in the queue with a fresh attempt budget, after the
    /// cause was fixed. It keeps its idempotency key, so the upstream still deduplicates.
    pub async fn requeue(&self, task_id: TaskId) -> Result<Task, DurableError> {
        let task = self.store.requeue(task_id, self.clock.now()).await?;
        tracing::info!(
            target: "retry_runtime::durable",
            event = "requeue",
            task_id = task_id.0,
            operation = %task.operation,
            "failed task requeued by an operator"
        );
        Ok(task)
    }

    /// Cancels a pending or failed task: it will not be attempted again.
    pub async fn cancel(&self, task_id: TaskId) -> Result<Task, DurableError> {
        let task = self.store.cancel(task_id, self.clock.now()).await?;
        tracing::info!(
            target: "retry_runtime::durable",
            event = "cancel",
            task_id = task_id.0,
            operation = %task.operation,
            "task cancelled by an operator"
        );
        Ok(task)
    }
}

/// The hand-off a `#[retry(durable = ...)]` call makes: [`DurableQueue::enqueue`].
impl<S: DurableStore> HandOff for DurableQueue<S> {
    fn hand_off<'a>(
        &'a self,
        operation: &'a str,
        idempotency_key: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
    ) -> HandOffFuture<'a> {
        Box::pin(async move {
            self.enqueue(operation, idempotency_key, payload, options)
                .await
                .map_err(Into::into)
        })
    }
}
