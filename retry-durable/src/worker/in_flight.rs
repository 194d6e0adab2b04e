//! The attempts a worker has in flight: claimed in batches, each run on its own task, and
//! settled as they end (or released, at shutdown, when they do not end in time).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::durable::AttemptError;
use tokio::task::{Id, JoinError, JoinSet};

use super::attempt::{Claimed, attempt, finish};
use super::inner::{Inner, TARGET};
use super::stats::{Outcome, WorkerStats};
use crate::error::DurableError;
use crate::store::DurableStore;

/// What an attempt's task answers when joined.
pub(super) type Joined = Result<(Id, Outcome), JoinError>;

/// The running attempts, and the claim each runs under (kept here, so a task that panicked or
/// was aborted can still be finished or released).
pub(super) struct InFlight {
    running: JoinSet<Outcome>,
    claims: HashMap<Id, Claimed>,
}

impl InFlight {
    pub(super) fn new() -> Self {
        InFlight {
            running: JoinSet::new(),
            claims: HashMap::new(),
        }
    }

    /// How many attempts are running.
    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Claims up to `want` due tasks and starts an attempt for each; how many were claimed.
    pub(super) async fn claim<S: DurableStore>(
        &mut self,
        inner: &Arc<Inner<S>>,
        want: u32,
    ) -> Result<usize, DurableError> {
        let now = inner.clock.now();
        let lease_until = now.saturating_add(inner.config.lease);
        let tasks = inner
            .store
            .claim(&inner.id, &inner.operations, want, lease_until, now)
            .await?;
        let n = tasks.len();
        for task in tasks {
            tracing::debug!(target: TARGET, event = "claim", task_id = task.id.0,
                operation = %task.operation, attempt = task.retry_count, worker = %inner.id,
                "claimed");
            let Some(claimed) = Claimed::of(&task) else {
                continue;
            };
            let inner = Arc::clone(inner);
            let handle = self
                .running
                .spawn(async move { attempt(&inner, task).await });
            self.claims.insert(handle.id(), claimed);
        }
        Ok(n)
    }

    /// The next attempt to end (cancel safe: nothing is lost when the future is dropped).
    /// `None` when none is running.
    pub(super) async fn join_next(&mut self) -> Option<Joined> {
        self.running.join_next_with_id().await
    }

    /// Counts an ended attempt. One whose task panicked is a failed attempt (a bug in the
    /// handler, but the task must not stay leased for the whole lease); one that was aborted
    /// gives its lease back.
    pub(super) async fn settle<S: DurableStore>(
        &mut self,
        inner: &Inner<S>,
        joined: Joined,
    ) -> WorkerStats {
        match joined {
            Ok((id, outcome)) => {
                self.claims.remove(&id);
                outcome.stats()
            }
            Err(e) => {
                let Some(claimed) = self.claims.remove(&e.id()) else {
                    return WorkerStats::default();
                };
                if e.is_panic() {
                    let panicked = Err(AttemptError::retry("handler panicked"));
                    finish(inner, &claimed, panicked).await.stats()
                } else {
                    release(inner, &claimed).await
                }
            }
        }
    }

    /// Waits for every running attempt to end.
    pub(super) async fn finish_all<S: DurableStore>(&mut self, inner: &Inner<S>) -> WorkerStats {
        let mut stats = WorkerStats::default();
        while let Some(joined) = self.join_next().await {
            stats.absorb(self.settle(inner, joined).await);
        }
        stats
    }

    /// Waits up to `grace` for the running attempts, then aborts the rest and releases their
    /// leases, so another instance can take them at once.
    pub(super) async fn shut_down<S: DurableStore>(
        mut self,
        inner: &Inner<S>,
        grace: Duration,
    ) -> WorkerStats {
        let mut stats = WorkerStats::default();
        let grace = tokio::time::sleep(grace);
        tokio::pin!(grace);
        while !self.is_empty() {
            tokio::select! {
                Some(joined) = self.running.join_next_with_id() => {
                    stats.absorb(self.settle(inner, joined).await);
                }
                () = &mut grace => break,
            }
        }
        self.running.abort_all();
        stats.absorb(self.finish_all(inner).await);
        stats
    }
}

/// Gives an aborted attempt's lease back.
async fn release<S: DurableStore>(inner: &Inner<S>, c: &Claimed) -> WorkerStats {
    let mut stats = WorkerStats::default();
    match inner.store.release(&c.fence, inner.clock.now()).await {
        Ok(true) => {
            stats.released = 1;
            tracing::info!(target: TARGET, event = "release", task_id = c.fence.task_id.0,
                attempt = c.fence.attempt, "lease released at shutdown");
        }
        Ok(false) => {}
        Err(e) => {
            stats.store_errors = 1;
            tracing::error!(target: TARGET, task_id = c.fence.task_id.0, error = %e,
                "could not release a lease at shutdown; it will expire and be rescued");
        }
    }
    stats
}
