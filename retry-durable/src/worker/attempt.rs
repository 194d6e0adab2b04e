//! One claimed attempt, run to its end: the handler under the attempt timeout, then its
//! outcome recorded, fenced on the claim.
//!
//! Each attempt runs under `attempt_timeout`, which must be shorter than the lease, so an
//! attempt that is still running when its lease expires is impossible unless the process is
//! stalled or dead; then any instance's rescue returns the task to the queue. Every write after
//! an attempt is fenced on `(task, owner, attempt)`: a stalled worker that wakes up after its
//! lease was rescued cannot overwrite the newer attempt's result.

use retry_runtime::durable::AttemptError;

use super::inner::{Inner, TARGET};
use super::schedule::Next;
use super::stats::Outcome;
use crate::handler::context_of;
use crate::lease::Lease;
use crate::store::{DurableStore, StoreResult};
use crate::task::{Fence, Task};

/// One claimed attempt, kept by the worker so it can finish or release the task even when the
/// handler task panicked or was aborted.
#[derive(Debug, Clone)]
pub(super) struct Claimed {
    pub(super) fence: Fence,
    pub(super) max_attempts: u32,
    pub(super) operation: String,
}

impl Claimed {
    /// The claim on `task`, or `None` for a task that is not leased.
    pub(super) fn of(task: &Task) -> Option<Claimed> {
        Some(Claimed {
            fence: task.fence()?,
            max_attempts: task.max_attempts,
            operation: task.operation.clone(),
        })
    }
}

/// Runs the handler for `task` and records its outcome.
pub(super) async fn attempt<S: DurableStore>(inner: &Inner<S>, task: Task) -> Outcome {
    let Some(claimed) = Claimed::of(&task) else {
        return Outcome::LeaseLost;
    };
    // A task claimed long ago (the process was stopped and resumed, or starved) may have
    // been rescued and taken by another worker since: running it now would repeat its side
    // effect, and the fence would only refuse the result afterwards. Run it only if the
    // attempt can end within the lease; otherwise give the lease back (a no-op if it was
    // taken over) and leave the task to whoever holds it.
    let now = inner.clock.now();
    let fits = task
        .locked_until
        .is_some_and(|until| now.saturating_add(inner.config.attempt_timeout) < until);
    if !fits {
        tracing::warn!(target: TARGET, event = "stale_claim", task_id = task.id.0,
            attempt = claimed.fence.attempt, worker = %inner.id, locked_until = ?task.locked_until,
            %now, "claimed too long ago to finish within the lease; not running it");
        return match inner.store.release(&claimed.fence, now).await {
            Ok(true) => Outcome::Released,
            Ok(false) => Outcome::LeaseLost,
            Err(e) => {
                tracing::error!(target: TARGET, task_id = task.id.0, error = %e,
                    "could not give back a stale lease; it will expire and be rescued");
                Outcome::StoreError
            }
        };
    }
    let result = match inner.handlers.get(&task.operation) {
        Some(handler) => {
            // `fits` found the lease's end; the handler may ask for it (`Lease::current`).
            let until = task.locked_until.unwrap_or(now);
            let lease = Lease::new(task.id, task.retry_count, until, inner.clock.clone());
            let fut = lease.clone().in_sync(|| handler.call(context_of(&task)));
            match tokio::time::timeout(inner.config.attempt_timeout, lease.scope(fut)).await {
                Ok(r) => r,
                Err(_) => Err(AttemptError::retry(format!(
                    "attempt timed out after {:?}",
                    inner.config.attempt_timeout
                ))),
            }
        }
        // Unreachable by construction (claims filter on registered operations).
        None => Err(AttemptError::retry(format!(
            "worker `{}` has no handler for operation `{}`",
            inner.id, task.operation
        ))),
    };
    finish(inner, &claimed, result).await
}

/// Records how an attempt ended: a success through the completer; a failure as a retry at
/// the time the schedule decides, or as the task's failure.
pub(super) async fn finish<S: DurableStore>(
    inner: &Inner<S>,
    c: &Claimed,
    mut result: Result<Option<Vec<u8>>, AttemptError>,
) -> Outcome {
    let f = &c.fence;
    let output = result.as_mut().ok().and_then(Option::take);
    let (written, ended) = match &result {
        Ok(_) => (inner.completer.record(f, output).await, Outcome::Succeeded),
        Err(error) => {
            let (written, ended) = record_failure(inner, c, error).await;
            (written.map_err(|e| e.to_string()), ended)
        }
    };
    let task_id = f.task_id.0;
    match written {
        Err(e) => {
            tracing::error!(target: TARGET, task_id, attempt = f.attempt, error = %e,
                "could not record the attempt's outcome; the lease will expire and be rescued");
            Outcome::StoreError
        }
        Ok(false) => {
            tracing::warn!(target: TARGET, event = "lease_lost", task_id, attempt = f.attempt,
                worker = %f.owner, "lease was taken over before the outcome was recorded; outcome dropped");
            Outcome::LeaseLost
        }
        Ok(true) => {
            match (&ended, &result) {
                (Outcome::Succeeded, _) => tracing::info!(target: TARGET, event = "complete",
                    task_id, operation = %c.operation, attempt = f.attempt,
                    "durable task succeeded"),
                (Outcome::Retried, Err(AttemptError::Retry { message, .. })) => {
                    tracing::warn!(target: TARGET, event = "retry", task_id,
                        operation = %c.operation, attempt = f.attempt,
                        max_attempts = c.max_attempts, error = %message,
                        "durable attempt failed; retrying after backoff");
                }
                (_, Err(e)) => tracing::error!(target: TARGET, event = "fail", task_id,
                    operation = %c.operation, attempt = f.attempt, error = %e,
                    "durable task failed"),
                (_, Ok(_)) => {}
            }
            ended
        }
    }
}

/// Writes a failed attempt: the task retried at the time the schedule decides, or failed
/// (a permanent error, or the last attempt). Returns the write's answer and, if it applied,
/// how the attempt ended.
async fn record_failure<S: DurableStore>(
    inner: &Inner<S>,
    c: &Claimed,
    error: &AttemptError,
) -> (StoreResult<bool>, Outcome) {
    let now = inner.clock.now();
    let f = &c.fence;
    match error {
        AttemptError::Permanent { message } => (
            inner.store.mark_failed(f, message, now).await,
            Outcome::Failed,
        ),
        AttemptError::Retry {
            message,
            retry_after,
        } => match inner
            .schedule
            .after(f.attempt, c.max_attempts, *retry_after, now)
        {
            Next::RetryAt(at) => (
                inner.store.retry_later(f, message, at, now).await,
                Outcome::Retried,
            ),
            Next::Fail => {
                let msg = format!("{message} (attempt {} of {})", f.attempt, c.max_attempts);
                (inner.store.mark_failed(f, &msg, now).await, Outcome::Failed)
            }
        },
    }
}
