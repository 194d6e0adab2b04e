//! The lease an attempt runs under, as its handler can see it: [`Lease::current`].
//!
//! A worker runs an attempt only if it can end within its lease, and cuts it at the attempt
//! timeout, which is shorter. But a process can be stopped mid-attempt (SIGSTOP, a VM pause, a
//! starved host) for longer than the lease: another worker then rescues the task and runs it
//! again with a new attempt number, and when the stopped process resumes, its handler carries
//! on from where it stood (the timeout is only looked at after the handler's next step). The
//! fence discards that handler's result, but not what it did meanwhile. A handler about to do
//! something it cannot take back asks first whether the lease is still its own.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::durable::TaskId;

use crate::clock::{Clock, Timestamp};

tokio::task_local! {
    static LEASE: Lease;
}

/// The lease of the attempt running in this task, read from the worker's [`Clock`].
///
/// ```
/// use retry_durable::{AttemptError, Lease, TaskContext};
///
/// async fn capture(task: TaskContext) -> Result<(), AttemptError> {
///     // ... prepare the request ...
///     if let Some(lease) = Lease::current()
///         && lease.remaining() < std::time::Duration::from_secs(5)
///     {
///         // Another worker may own the task by now (or soon): let it do the capture.
///         return Err(AttemptError::retry("lease lost before the capture"));
///     }
///     // ... send the capture with task.idempotency_key ...
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct Lease {
    task_id: TaskId,
    attempt: u32,
    until: Timestamp,
    clock: Arc<dyn Clock>,
}

impl Lease {
    pub(crate) fn new(
        task_id: TaskId,
        attempt: u32,
        until: Timestamp,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Lease {
            task_id,
            attempt,
            until,
            clock,
        }
    }

    /// The lease of the attempt whose handler is running in this task, `None` outside a
    /// worker's attempt (or in a task the handler spawned: the lease is lent to the handler's
    /// own future only). Works at any depth, so a `#[retry(durable = ...)]` function's body
    /// can ask during its replay.
    pub fn current() -> Option<Lease> {
        LEASE.try_with(Lease::clone).ok()
    }

    /// Whether the lease has not expired by the worker's clock: until then no other worker
    /// rescues the task (with clocks in step). One clock read.
    pub fn holds(&self) -> bool {
        self.clock.now() < self.until
    }

    /// How long the lease has left by the worker's clock (zero once it expired). Ask for a
    /// margin above the time the irreversible step takes plus the clock skew between
    /// instances.
    pub fn remaining(&self) -> Duration {
        self.until.since(self.clock.now())
    }

    /// When the lease expires.
    pub fn until(&self) -> Timestamp {
        self.until
    }

    /// The task the lease is on.
    pub fn task_id(&self) -> TaskId {
        self.task_id
    }

    /// The attempt it was claimed for (the task's `retry_count` after the claim).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Calls `start` (a handler making its future) with this lease installed.
    pub(crate) fn in_sync<R>(self, start: impl FnOnce() -> R) -> R {
        LEASE.sync_scope(self, start)
    }

    /// Runs `attempt` with this lease installed.
    pub(crate) fn scope<F: Future>(self, attempt: F) -> impl Future<Output = F::Output> {
        LEASE.scope(self, attempt)
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("task_id", &self.task_id)
            .field("attempt", &self.attempt)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}
