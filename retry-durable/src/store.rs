//! The storage interface every backend implements, and which the worker and queue use.
//!
//! The trait is small on purpose: each method is one or two SQL statements whose semantics are
//! pinned by the shared conformance suite
//! ([`tests/tests/durable_support/suite.rs`](https://github.com/retry-rs/retry/blob/main/tests/tests/durable_support/suite.rs)).
//! Every decision (backoff and its jitter, attempt limits, what counts as permanent, what
//! becomes of an expired lease) is taken above the store, by the worker, and handed down as
//! finished values: a backend only runs statements, so every backend behaves identically and
//! a seeded worker ([`WorkerConfig::with_jitter_seed`](crate::WorkerConfig::with_jitter_seed))
//! makes the same decisions on any of them. Every method takes `now` from the caller's
//! [`Clock`](crate::Clock) so tests move time instead of sleeping.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::AbortHandle;

use crate::clock::Timestamp;
use crate::error::DurableError;
use retry_runtime::durable::{TaskId, TaskStatus};

use crate::task::{Enqueued, Fence, NewTask, StatusCounts, Task};

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

    /// Up to `batch` `running` tasks whose lease expired before `now` (the oldest leases), for
    /// the rescuer to decide what becomes of each: see [`rescue`](Self::rescue).
    fn expired(
        &self,
        batch: u32,
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<Task>>> + Send;

    /// Takes back expired leases in one write, each as the rescuer decided: `pending` due at
    /// its time, or `failed` with its alert owed. Each rescue is fenced on its claim and
    /// applies only while the lease is still expired at `now`, so a task is rescued once
    /// however many instances rescue at the same time. Returns the ids it changed.
    fn rescue(
        &self,
        rescues: &[Rescue],
        now: Timestamp,
    ) -> impl Future<Output = StoreResult<Vec<TaskId>>> + Send;

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
#[non_exhaustive]
pub struct Completion {
    /// The claim the attempt ran under.
    pub fence: Fence,
    /// The attempt's serialized result, if any.
    pub output: Option<Vec<u8>>,
}

impl Completion {
    /// The success of the attempt claimed under `fence`, with its output.
    pub fn new(fence: Fence, output: Option<Vec<u8>>) -> Self {
        Completion { fence, output }
    }
}

/// One expired lease to take back, as the rescuer decided it: the driver writes these values
/// as they are. Built by [`Rescue::retry`] or [`Rescue::fail`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rescue {
    /// The claim whose lease expired.
    pub fence: Fence,
    /// `Pending` (retried at `next_attempt_at`) or `Failed` (attempts exhausted; the alert is
    /// owed).
    pub status: TaskStatus,
    /// When the task is due again (for a failed task, when it failed).
    pub next_attempt_at: Timestamp,
    /// The error recorded on the task.
    pub error: String,
}

impl Rescue {
    /// The task goes back to `pending`, due at `at`.
    pub fn retry(fence: Fence, at: Timestamp, error: impl Into<String>) -> Self {
        Rescue {
            fence,
            status: TaskStatus::Pending,
            next_attempt_at: at,
            error: error.into(),
        }
    }

    /// The task fails at `now` (its abandoned attempt was its last); the alert becomes owed.
    pub fn fail(fence: Fence, now: Timestamp, error: impl Into<String>) -> Self {
        Rescue {
            fence,
            status: TaskStatus::Failed,
            next_attempt_at: now,
            error: error.into(),
        }
    }
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
