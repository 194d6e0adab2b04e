//! How the application learns the end of a deferred call: [`Outcome`], read from the task
//! row by [`DurableQueue::outcome`], [`DurableQueue::outcome_of`] and [`DurableQueue::wait`].

use std::time::Duration;

use retry_runtime::durable::{DeferredCall, TaskId, TaskStatus};
use serde::de::DeserializeOwned;

use crate::error::DurableError;
use crate::queue::DurableQueue;
use crate::store::DurableStore;
use crate::task::Task;

/// Where a deferred call is.
///
/// The four cases are closed on purpose: they are the task's states (pending or running,
/// succeeded, failed, cancelled), which every store keeps. What is known in a case may grow, so
/// a pattern on `Pending` or `Failed` names the fields it reads and ends with `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Not finished: waiting for its next replay, or being replayed.
    #[non_exhaustive]
    Pending {
        /// Durable replays started so far.
        attempts: u32,
        /// The last replay's error, if one failed.
        last_error: Option<String>,
    },
    /// A replay completed; its result.
    Completed(T),
    /// Given up (a permanent failure, or the last attempt spent): an alert was raised.
    #[non_exhaustive]
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
