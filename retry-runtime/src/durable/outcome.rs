//! What a `#[retry(durable = ...)]` call answers, and how the application learns the end of a
//! deferred one: [`Durable`], [`DeferredCall`] and [`Outcome`].
//!
//! A deferred call is not a failure: its work is written to the durable queue and a worker
//! finishes it later. So it is an `Ok`, a variant of its own beside the result, and the handle
//! it carries is typed with the result it will have.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::error::DurableError;
use super::queue::{Deferred, DurableQueue};
use super::store::DurableStore;
use super::task::{Task, TaskId, TaskStatus};

/// The answer of a durable call: completed now, or deferred to the durable queue.
///
/// `#[retry(durable = "...")]` functions return `Result<Durable<T>, E>`: `Err` is a failure
/// retrying cannot fix (returned at once) or a write whose outcome is unknown; `Ok` is either
/// the result or the promise of one.
#[must_use = "a deferred call is not finished: keep its task id to learn the outcome"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durable<T> {
    /// The call completed in memory.
    Done(T),
    /// The in-memory retries stopped on a transient failure; the call is in the durable queue
    /// and a worker replays it with the same arguments and key.
    Deferred(DeferredCall<T>),
}

impl<T> Durable<T> {
    /// The result, if the call completed in memory.
    pub fn done(self) -> Option<T> {
        match self {
            Durable::Done(value) => Some(value),
            Durable::Deferred(_) => None,
        }
    }

    /// The deferred call, if the call was handed to the durable queue.
    pub fn deferred(&self) -> Option<&DeferredCall<T>> {
        match self {
            Durable::Done(_) => None,
            Durable::Deferred(call) => Some(call),
        }
    }

    /// Whether the call completed in memory.
    pub fn is_done(&self) -> bool {
        matches!(self, Durable::Done(_))
    }
}

/// A call handed to the durable queue: its task, typed with the result a replay will store.
///
/// Look its end up with [`DurableQueue::outcome`], or wait for it with
/// [`DurableQueue::wait`]; from another process, keep [`task_id`](Self::task_id) and use
/// [`DurableQueue::outcome_of`].
pub struct DeferredCall<T> {
    deferred: Deferred,
    result: PhantomData<fn() -> T>,
}

impl<T> DeferredCall<T> {
    pub(crate) fn new(deferred: Deferred) -> Self {
        DeferredCall {
            deferred,
            result: PhantomData,
        }
    }

    /// The task carrying the call.
    pub fn task_id(&self) -> TaskId {
        self.deferred.task_id
    }

    /// The hand-off itself: `created == false` when this call (same operation and key) was
    /// deferred before, and `status` as it was then.
    pub fn hand_off(&self) -> &Deferred {
        &self.deferred
    }
}

impl<T> Clone for DeferredCall<T> {
    fn clone(&self) -> Self {
        DeferredCall::new(self.deferred.clone())
    }
}

impl<T> PartialEq for DeferredCall<T> {
    fn eq(&self, other: &Self) -> bool {
        self.deferred == other.deferred
    }
}

impl<T> Eq for DeferredCall<T> {}

impl<T> fmt::Debug for DeferredCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredCall")
            .field("task_id", &self.deferred.task_id)
            .field("created", &self.deferred.created)
            .field("status", &self.deferred.status)
            .finish()
    }
}

impl<T> fmt::Display for DeferredCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deferred to the durable queue as task {}",
            self.deferred.task_id
        )
    }
}

/// Where a deferred call is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Not finished: waiting for its next replay, or being replayed.
    Pending {
        /// Durable replays started so far.
        attempts: u32,
        /// The last replay's error, if one failed.
        last_error: Option<String>,
    },
    /// A replay completed; its result.
    Completed(T),
    /// Given up (a permanent failure, or the last attempt spent): an alert was raised.
    Failed {
        /// The last replay's error.
        last_error: String,
    },
    /// Cancelled by an operator.
    Cancelled,
}

impl<T> Outcome<T> {
    /// Whether the call is over (completed, failed or cancelled).
    pub fn is_final(&self) -> bool {
        !matches!(self, Outcome::Pending { .. })
    }
}

impl<T: DeserializeOwned> Outcome<T> {
    /// The outcome a task row records. A completed task's output is the replay's result as
    /// JSON; one that does not decode as `T` is a [`DurableError::BadRow`].
    pub fn of_task(task: &Task) -> Result<Outcome<T>, DurableError> {
        Ok(match task.status {
            TaskStatus::Pending | TaskStatus::Running => Outcome::Pending {
                attempts: task.retry_count,
                last_error: task.last_error.clone(),
            },
            TaskStatus::Succeeded => {
                let output = task.output.as_deref().unwrap_or(b"null");
                let value = serde_json::from_slice(output).map_err(|e| DurableError::BadRow {
                    backend: "json",
                    task_id: Some(task.id.0),
                    column: "output",
                    detail: format!(
                        "the stored result does not decode as `{}`: {e}",
                        std::any::type_name::<T>()
                    ),
                })?;
                Outcome::Completed(value)
            }
            TaskStatus::Failed => Outcome::Failed {
                last_error: task.last_error.clone().unwrap_or_default(),
            },
            TaskStatus::Cancelled => Outcome::Cancelled,
        })
    }
}

impl<S: DurableStore> DurableQueue<S> {
    /// Where the deferred `call` is now.
    pub async fn outcome<T: DeserializeOwned>(
        &self,
        call: &DeferredCall<T>,
    ) -> Result<Outcome<T>, DurableError> {
        self.outcome_of(call.task_id()).await
    }

    /// Where the deferred call carried by `task_id` is now, its result decoded as `T` (for a
    /// task id kept elsewhere, e.g. returned to a client with `202 Accepted`).
    pub async fn outcome_of<T: DeserializeOwned>(
        &self,
        task_id: TaskId,
    ) -> Result<Outcome<T>, DurableError> {
        match self.get(task_id).await? {
            Some(task) => Outcome::of_task(&task),
            None => Err(DurableError::NotFound { task_id: task_id.0 }),
        }
    }

    /// Waits until the deferred `call` is over (completed, failed or cancelled), looking every
    /// `poll` (the queue's state lives in the database, which may be shared by processes).
    pub async fn wait<T: DeserializeOwned>(
        &self,
        call: &DeferredCall<T>,
        poll: Duration,
    ) -> Result<Outcome<T>, DurableError> {
        loop {
            let outcome = self.outcome(call).await?;
            if outcome.is_final() {
                return Ok(outcome);
            }
            tokio::time::sleep(poll).await;
        }
    }
}
