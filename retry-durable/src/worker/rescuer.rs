//! The rescuer: takes back the tasks of workers presumed dead (their leases expired).
//!
//! It decides here what becomes of each, as a failed attempt is decided: retried after the
//! schedule's wait, with the worker's (seedable) jitter, or failed when the abandoned attempt
//! was the last (the attempt was counted when it was claimed). The store only writes the
//! decisions, each fenced on its claim, so a task is rescued once however many instances
//! rescue at the same time.

use std::collections::HashSet;

use retry_runtime::durable::TaskId;

use super::inner::{Inner, TARGET};
use super::schedule::{Next, Schedule};
use crate::clock::Timestamp;
use crate::error::DurableError;
use crate::store::{DurableStore, Rescue};
use crate::task::Task;

/// The fewest expired leases one rescue looks at, whatever the claim batch.
const MIN_RESCUE_BATCH: u32 = 64;

/// Takes back expired leases; how many.
pub(super) async fn rescue<S: DurableStore>(inner: &Inner<S>) -> Result<u64, DurableError> {
    let now = inner.clock.now();
    let batch = inner.config.batch_size.max(MIN_RESCUE_BATCH);
    let expired = inner.store.expired(batch, now).await?;
    let rescues: Vec<Rescue> = expired
        .iter()
        .filter_map(|task| decide(&inner.schedule, task, now))
        .collect();
    let rescued: HashSet<TaskId> = inner
        .store
        .rescue(&rescues, now)
        .await?
        .into_iter()
        .collect();
    for r in rescues
        .iter()
        .filter(|r| rescued.contains(&r.fence.task_id))
    {
        tracing::warn!(target: TARGET, event = "rescue", task_id = r.fence.task_id.0,
            previous_owner = %r.fence.owner, attempt = r.fence.attempt,
            new_status = %r.status, rescuer = %inner.id, "expired lease rescued");
    }
    Ok(rescued.len() as u64)
}

/// What becomes of one task whose lease expired; `None` for a task that is not leased.
fn decide(schedule: &Schedule, task: &Task, now: Timestamp) -> Option<Rescue> {
    let fence = task.fence()?;
    let error = match task.locked_until {
        Some(t) => format!(
            "lease held by worker `{}` expired at {t} (unix ms); worker presumed dead",
            fence.owner
        ),
        None => format!(
            "lease held by worker `{}` expired; worker presumed dead",
            fence.owner
        ),
    };
    Some(
        match schedule.after(task.retry_count, task.max_attempts, None, now) {
            Next::RetryAt(at) => Rescue::retry(fence, at, error),
            Next::Fail => Rescue::fail(fence, now, error),
        },
    )
}
