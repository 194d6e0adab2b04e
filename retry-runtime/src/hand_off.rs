//! The seam between a `#[retry(durable = ...)]` call and a durable queue: [`HandOff`], one
//! object-safe method, so the [`Registry`](crate::Registry) can hold a queue of any backend and
//! a call can hand its work over when its in-memory retries stop on a transient failure; and
//! the few values both sides speak ([`Deferred`], [`TaskId`], [`TaskStatus`],
//! [`EnqueueOptions`]).
//!
//! The queue itself (store, worker, migrations, operator API) is another crate, `retry-durable`,
//! which implements [`HandOff`] for its `DurableQueue`; the runtime knows nothing of databases.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

/// How long before its deadline a durable call stops its in-memory attempts, so that writing
/// it to the durable queue ends while its caller still waits: a hand-off the caller no longer
/// waits for reaches it as a timeout, and a keyed write that timed out is reported as unknown
/// instead of deferred.
pub const HAND_OFF_RESERVE: Duration = Duration::from_millis(100);

/// The database id of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub i64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a task is in its life.
///
/// `pending` → `running` (claimed, lease held) → `succeeded`, or back to `pending` with a later
/// `next_attempt_at`, or `failed` (permanent error or attempts exhausted). An operator can
/// requeue a `failed` or `cancelled` task and cancel a `pending` or `failed` one.
///
/// Closed on purpose (not `#[non_exhaustive]`): the states are the queue's table schema, and
/// a store must handle every one of them; a new state is a migration, not a minor release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Waiting for `next_attempt_at`.
    Pending,
    /// Claimed by a worker whose lease has not been released.
    Running,
    /// An attempt succeeded; the row is kept so a repeated hand-off stays a no-op.
    Succeeded,
    /// Given up: permanent error or attempts exhausted. An alert fires once per failure.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in life-cycle order.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Pending,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The text stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `status` text that is not one of [`TaskStatus::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown task status {:?} (expected pending, running, succeeded, failed or cancelled)",
            self.0
        )
    }
}

impl StdError for UnknownStatus {}

impl FromStr for TaskStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// The answer to a hand-off: the work was accepted for durable retry and will run later.
///
/// Return it (or a response built from it, such as `202 Accepted` with the task id) instead of
/// the in-memory failure: the outcome is unknown now, not failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deferred {
    /// The task that will carry the work.
    pub task_id: TaskId,
    /// `false` when this `(operation, idempotency_key)` was handed off before; the earlier task
    /// is returned and nothing new was queued.
    pub created: bool,
    /// The task's status now (a duplicate hand-off may find it already `succeeded`).
    pub status: TaskStatus,
}

impl Deferred {
    /// The answer of a hand-off that queued (or, `created` false, found) task `task_id`, now
    /// in `status`.
    pub const fn new(task_id: TaskId, created: bool, status: TaskStatus) -> Self {
        Deferred {
            task_id,
            created,
            status,
        }
    }
}

/// Options for one hand-off.
///
/// # Default
/// - `max_attempts`: 10
/// - `delay`: zero (the task is due at once)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueOptions {
    max_attempts: u32,
    delay: Duration,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions::new()
    }
}

impl EnqueueOptions {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        EnqueueOptions {
            max_attempts: 10,
            delay: Duration::ZERO,
        }
    }

    /// Sets how many durable attempts are allowed before the task fails and alerts (at least 1).
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Delays the first durable attempt, e.g. to honour a `Retry-After` the in-memory loop saw.
    pub const fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Attempts allowed.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Delay before the first attempt.
    pub const fn delay(&self) -> Duration {
        self.delay
    }
}

/// Why a hand-off failed: the queue's own error (for `retry-durable`, its `DurableError`),
/// boxed so the runtime names no backend. A `#[retry(durable = ...)]` call whose hand-off
/// fails returns its in-memory failure and logs this error (`event = "not_deferred"`).
pub type HandOffError = Box<dyn StdError + Send + Sync + 'static>;

/// The future [`HandOff::hand_off`] returns.
pub type HandOffFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Deferred, HandOffError>> + Send + 'a>>;

/// A durable queue a deferred call is written to; register one with
/// [`Registry::set_durable_queue`](crate::Registry::set_durable_queue). `retry-durable`'s
/// `DurableQueue` implements it for every backend.
pub trait HandOff: Send + Sync + 'static {
    /// Writes one task, due after `options.delay()`: a repeated `(operation, key)` returns the
    /// existing task (`created == false`) instead of queueing the work twice.
    fn hand_off<'a>(
        &'a self,
        operation: &'a str,
        idempotency_key: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
    ) -> HandOffFuture<'a>;
}
