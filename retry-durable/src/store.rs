//! The storage interface every backend implements, and which the worker and queue use.
//!
//! The trait is small on purpose: each method is one or two SQL statements whose semantics are
//! pinned by the shared conformance suite
//! ([`tests/tests/durable_support/suite.rs`](https://github.com/retry-rs/retry/blob/main/tests/tests/durable_support/suite.rs)). Policy (backoff, attempt
//! limits, what counts as permanent) stays in Rust and is passed in, so both backends behave
//! identically. Every method takes `now` from the caller's [`Clock`](crate::Clock) so tests move
//! time instead of sleeping.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::AbortHandle;

use crate::clock::Timestamp;
use crate::error::DurableError;
use retry_runtime::backoff::Backoff;
use retry_runtime::durable::{TaskId, TaskStatus};

use crate::task::{Enqueued, Fence, NewTask, Rescued, StatusCounts, Task};

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, DurableError>;

/// A database holding durable tasks. Implemented by
/// [`SqliteStore`](crate::SqliteStore) and [`PgStore`](crate::PgStore).
///
/// Stores are cheap to clone (they wrap a connection pool).
pub trait DurableStore: Clone + Send + Sync + 'static {
    /// `"sqlite"` or `"postgres"`, for logs and errors.
    fn backend(&self) -> &'static str;

    /// Inserts a task, or returns the existing one when `(operation, idempotency_key)` was
    /// handed off before (whatever its status): handing off twice is a no-op.
    fn enqueue(
        &self,
        task: NewTask<'_>,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Enqueued>> + Send;

    /// Claims up to `batch` due `pending` tasks of the given operations for `owner`, setting
    /// them `running` with a lease until `lease_until` and incrementing `retry_count` (the
    /// attempt is counted at claim). A task is handed to exactly one claimer per attempt.
    fn claim(
        &self,
        owner: &str,
        operations: &[String],
        batch: u32,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Task>>> + Send;

    /// Marks claimed tasks `succeeded` in one write, storing each attempt's output (its
    /// serialized result, if any). Each completion is fenced on `(task, lease owner, attempt)`:
    /// returns the ids it changed; a task missing from the answer was left as it was (its lease
    /// was rescued and the task re-claimed or finished elsewhere).
    fn complete_many(
        &self,
        done: &[Completion],
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<TaskId>>> + Send;

    /// Marks one claimed task `succeeded` (see [`complete_many`](Self::complete_many)). Returns
    /// `false`, changing nothing, when the fence no longer matches.
    fn complete(
        &self,
        fence: &Fence,
        output: Option<&[u8]>,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        let done = [Completion {
            fence: fence.clone(),
            output: output.map(<[u8]>::to_vec),
        }];
        async move { Ok(!self.complete_many(&done, now).await?.is_empty()) }
    }

    /// Returns a claimed task to `pending`, due at `next_attempt_at`, recording `error`.
    /// Fenced like [`complete`](Self::complete).
    fn retry_later(
        &self,
        fence: &Fence,
        error: &str,
        next_attempt_at: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Marks a claimed task `failed`, recording `error`; the alert becomes owed in the same
    /// write. Fenced like [`complete`](Self::complete).
    fn mark_failed(
        &self,
        fence: &Fence,
        error: &str,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Gives a claimed task back unfinished (graceful shutdown): `pending`, due now, and the
    /// attempt is not counted. Fenced like [`complete`](Self::complete).
    fn release(
        &self,
        fence: &Fence,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Takes back up to `batch` tasks whose lease expired before `now`: `pending` after
    /// `backoff`, or `failed` when the abandoned attempt was the last. Safe to run from every
    /// instance at once: a task is rescued once.
    fn rescue_expired(
        &self,
        batch: u32,
        backoff: Backoff,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Rescued>>> + Send;

    /// Reserves up to `batch` failed tasks whose alert is owed and not reserved by another
    /// dispatcher, until `lease_until`. Deliver each, then call
    /// [`ack_alert`](Self::ack_alert); an unacknowledged alert is offered again after the
    /// reservation expires (at-least-once, surviving a crash between failing and alerting).
    fn claim_alerts(
        &self,
        batch: u32,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Task>>> + Send;

    /// Records that the alert for a failed task was delivered.
    fn ack_alert(
        &self,
        task_id: TaskId,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// One task by id.
    fn get(&self, task_id: TaskId) -> impl Future<Output = StoreResult<Option<Task>>> + Send;

    /// One task by `(operation, idempotency_key)`.
    fn find(
        &self,
        operation: &str,
        idempotency_key: &str,
    ) -> impl Future<Output = StoreResult<Option<Task>>> + Send;

    /// How many tasks are in each status.
    fn counts(&self) -> impl Future<Output = StoreResult<StatusCounts>> + Send;

    /// Up to `limit` failed tasks, most recently failed first, with their last error.
    fn failed_tasks(&self, limit: u32) -> impl Future<Output = StoreResult<Vec<Task>>> + Send;

    /// Puts a `failed` or `cancelled` task back to `pending`, due now, with a fresh attempt
    /// budget and the alert reset (a new failure alerts again).
    fn requeue(
        &self,
        task_id: TaskId,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Task>> + Send;

    /// Something to wait on for new work: woken by hand-offs from this process and, where the
    /// database can tell (PostgreSQL `LISTEN`), from others. Waiting is an optimisation: a
    /// worker still polls, so a store that never wakes (the default) is correct, only slower.
    fn subscribe(&self) -> impl Future<Output = StoreResult<WorkSignal>> + Send {
        async { Ok(WorkSignal::new(Arc::new(Notify::new()), None)) }
    }

    /// Cancels a `pending` or `failed` task. A `running` task cannot be cancelled: its attempt
    /// is in flight; cancel it after it fails or let it finish.
    fn cancel(
        &self,
        task_id: TaskId,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Task>> + Send;
}

/// One successful attempt to record: its claim and its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The claim the attempt ran under.
    pub fence: Fence,
    /// The attempt's serialized result, if any.
    pub output: Option<Vec<u8>>,
}

/// Wakes a worker when new work may be due (see [`DurableStore::subscribe`]). Dropping it
/// stops whatever listens for other processes' hand-offs.
#[derive(Debug)]
pub struct WorkSignal {
    notify: Arc<Notify>,
    listener: Option<AbortHandle>,
}

impl WorkSignal {
    /// A signal woken through `notify`; `listener`, if any, is aborted on drop.
    pub fn new(notify: Arc<Notify>, listener: Option<AbortHandle>) -> Self {
        WorkSignal { notify, listener }
    }

    /// A future that completes at the next wake-up after it is
    /// [enabled](Notified::enable) or first polled.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for WorkSignal {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

/// The outcome of a lease rescue for one task, computed in Rust so worker and rescuer share
/// the policy.
pub(crate) fn rescue_decision(
    retry_count: u32,
    max_attempts: u32,
    backoff: Backoff,
    now: Timestamp,
) -> (TaskStatus, Timestamp) {
    if retry_count >= max_attempts {
        (TaskStatus::Failed, now)
    } else {
        (
            TaskStatus::Pending,
            now.saturating_add(backoff.delay(
                retry_count,
                Duration::ZERO,
                &mut fastrand::Rng::new(),
            )),
        )
    }
}

/// The error text recorded on a rescued task.
pub(crate) fn rescue_error(owner: &str, lease_until: Option<Timestamp>) -> String {
    match lease_until {
        Some(t) => {
            format!("lease held by worker `{owner}` expired at {t} (unix ms); worker presumed dead")
        }
        None => format!("lease held by worker `{owner}` expired; worker presumed dead"),
    }
}

/// The counts of `SELECT status, COUNT(*) ... GROUP BY status`; an unknown status is a bad row.
pub(crate) fn status_counts(
    backend: &'static str,
    rows: Vec<(String, i64)>,
) -> Result<StatusCounts, DurableError> {
    let mut counts = StatusCounts::default();
    for (status, n) in rows {
        let status = status
            .parse::<TaskStatus>()
            .map_err(|e| DurableError::BadRow {
                backend,
                task_id: None,
                column: "status",
                detail: e.to_string(),
            })?;
        counts.add(status, n.unsigned_abs());
    }
    Ok(counts)
}

/// The explanation for requeue/cancel refusals.
pub(crate) fn transition_error(
    store_get: Option<Task>,
    task_id: TaskId,
    action: &'static str,
) -> DurableError {
    match store_get {
        None => DurableError::NotFound { task_id: task_id.0 },
        Some(t) => DurableError::InvalidTransition {
            task_id: task_id.0,
            action,
            status: t.status.as_str().to_owned(),
        },
    }
}
