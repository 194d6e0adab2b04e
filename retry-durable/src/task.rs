//! The task row and the values that describe it.
//!
//! A task is one unit of work handed off to the durable queue: an operation name that selects
//! the handler, the caller's serialized payload, and the idempotency key that every attempt
//! sends so the upstream can turn a repeated delivery into a replay.

use retry_runtime::durable::{EnqueueOptions, TaskId, TaskStatus};

use crate::clock::Timestamp;
use crate::error::DurableError;

/// One row of the task table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Task {
    /// The task's id.
    pub id: TaskId,
    /// The operation name; selects the handler.
    pub operation: String,
    /// The key every attempt sends upstream. Unique together with `operation`.
    pub idempotency_key: String,
    /// The caller's serialized request.
    pub payload: Vec<u8>,
    /// Where the task is in its life.
    pub status: TaskStatus,
    /// Attempts started so far, counted when claimed (so a task that crashes its worker every
    /// time still reaches `failed`).
    pub retry_count: u32,
    /// Attempts allowed before the task is failed.
    pub max_attempts: u32,
    /// The earliest time the task may be claimed.
    pub next_attempt_at: Timestamp,
    /// The worker holding the lease, while `running`.
    pub locked_by: Option<String>,
    /// When the lease expires, while `running`.
    pub locked_until: Option<Timestamp>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// The serialized result of the attempt that completed the task (`succeeded` only, and
    /// only when its handler returned one; see [`TaskOutput`](super::TaskOutput)).
    pub output: Option<Vec<u8>>,
    /// When the failure alert was delivered; `None` on a failed task means the alert is owed.
    pub alerted_at: Option<Timestamp>,
    /// When the task was handed off.
    pub created_at: Timestamp,
    /// The last change.
    pub updated_at: Timestamp,
}

/// The raw column values of a task row, before validation. Backends fill it; [`Task::try_from_raw`]
/// turns bad values into located [`DurableError::BadRow`] errors.
#[derive(Debug)]
pub(crate) struct RawTask {
    pub id: i64,
    pub operation: String,
    pub idempotency_key: String,
    pub payload: Vec<u8>,
    pub status: String,
    pub retry_count: i64,
    pub max_attempts: i64,
    pub next_attempt_at: i64,
    pub locked_by: Option<String>,
    pub locked_until: Option<i64>,
    pub last_error: Option<String>,
    pub output: Option<Vec<u8>>,
    pub alerted_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Task {
    pub(crate) fn try_from_raw(backend: &'static str, raw: RawTask) -> Result<Task, DurableError> {
        let bad = |column: &'static str, detail: String| DurableError::BadRow {
            backend,
            task_id: Some(raw.id),
            column,
            detail,
        };
        let status = raw
            .status
            .parse::<TaskStatus>()
            .map_err(|e| bad("status", e.to_string()))?;
        let retry_count = u32::try_from(raw.retry_count)
            .map_err(|_| bad("retry_count", format!("{} is not a count", raw.retry_count)))?;
        let max_attempts = u32::try_from(raw.max_attempts)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                bad(
                    "max_attempts",
                    format!("{} is not at least 1", raw.max_attempts),
                )
            })?;
        if raw.idempotency_key.is_empty() {
            return Err(bad("idempotency_key", "the key is empty".to_owned()));
        }
        if status == TaskStatus::Running && (raw.locked_by.is_none() || raw.locked_until.is_none())
        {
            return Err(bad(
                "locked_by",
                "a running task has no lease owner or expiry".to_owned(),
            ));
        }
        Ok(Task {
            id: TaskId(raw.id),
            operation: raw.operation,
            idempotency_key: raw.idempotency_key,
            payload: raw.payload,
            status,
            retry_count,
            max_attempts,
            next_attempt_at: Timestamp::from_unix_millis(raw.next_attempt_at),
            locked_by: raw.locked_by,
            locked_until: raw.locked_until.map(Timestamp::from_unix_millis),
            last_error: raw.last_error,
            output: raw.output,
            alerted_at: raw.alerted_at.map(Timestamp::from_unix_millis),
            created_at: Timestamp::from_unix_millis(raw.created_at),
            updated_at: Timestamp::from_unix_millis(raw.updated_at),
        })
    }

    /// The fence that identifies this claim: completion and failure only apply while the row is
    /// still `running` under this owner and attempt number.
    pub fn fence(&self) -> Option<Fence> {
        Some(Fence {
            task_id: self.id,
            owner: self.locked_by.clone()?,
            attempt: self.retry_count,
        })
    }
}

/// Identifies one claim of one task: `(task, lease owner, attempt)`.
///
/// A worker whose lease expired and was rescued still holds its old fence; every write it makes
/// with it matches no row, so it cannot overwrite the new attempt's result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Fence {
    /// The task.
    pub task_id: TaskId,
    /// The worker id that claimed it.
    pub owner: String,
    /// The attempt number seen at claim (`retry_count` after the increment).
    pub attempt: u32,
}

/// A validated hand-off, as the store inserts it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct NewTask<'a> {
    /// The operation name (non-empty).
    pub operation: &'a str,
    /// The idempotency key (non-empty).
    pub idempotency_key: &'a str,
    /// The serialized request.
    pub payload: &'a [u8],
    /// Attempts allowed (at least 1).
    pub max_attempts: u32,
    /// When the first attempt is due.
    pub next_attempt_at: Timestamp,
}

impl<'a> NewTask<'a> {
    /// Validates a hand-off: the operation and key must be non-empty and `max_attempts` at least 1.
    pub fn new(
        operation: &'a str,
        idempotency_key: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        now: Timestamp,
    ) -> Result<Self, DurableError> {
        if operation.trim().is_empty() {
            return Err(DurableError::EmptyOperation);
        }
        if idempotency_key.trim().is_empty() {
            return Err(DurableError::MissingIdempotencyKey {
                operation: operation.to_owned(),
            });
        }
        if options.max_attempts() == 0 {
            return Err(DurableError::InvalidConfig {
                field: "max_attempts",
                reason: "must be at least 1; a task with no attempts would fail unseen".to_owned(),
            });
        }
        Ok(NewTask {
            operation,
            idempotency_key,
            payload,
            max_attempts: options.max_attempts(),
            next_attempt_at: now.saturating_add(options.delay()),
        })
    }
}

/// The answer to a hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The task now in the table: the new one, or the one an earlier hand-off with the same
    /// `(operation, idempotency_key)` created.
    pub task: Task,
    /// `false` when the hand-off was a duplicate and nothing was inserted.
    pub created: bool,
}

impl Enqueued {
    /// The answer to a hand-off: `task`, and whether this hand-off `created` it.
    pub fn new(task: Task, created: bool) -> Self {
        Enqueued { task, created }
    }
}

/// How many tasks are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusCounts {
    /// Waiting.
    pub pending: u64,
    /// Leased to a worker.
    pub running: u64,
    /// Done.
    pub succeeded: u64,
    /// Given up.
    pub failed: u64,
    /// Cancelled by an operator.
    pub cancelled: u64,
}

impl StatusCounts {
    /// The count for one status.
    pub fn get(&self, status: TaskStatus) -> u64 {
        match status {
            TaskStatus::Pending => self.pending,
            TaskStatus::Running => self.running,
            TaskStatus::Succeeded => self.succeeded,
            TaskStatus::Failed => self.failed,
            TaskStatus::Cancelled => self.cancelled,
        }
    }

    pub(crate) fn add(&mut self, status: TaskStatus, n: u64) {
        let slot = match status {
            TaskStatus::Pending => &mut self.pending,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Succeeded => &mut self.succeeded,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Cancelled => &mut self.cancelled,
        };
        *slot += n;
    }

    /// Tasks that still need work (`pending` + `running`).
    pub fn outstanding(&self) -> u64 {
        self.pending + self.running
    }

    /// All tasks.
    pub fn total(&self) -> u64 {
        self.pending + self.running + self.succeeded + self.failed + self.cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(status: &str) -> RawTask {
        RawTask {
            id: 7,
            operation: "op".into(),
            idempotency_key: "k".into(),
            payload: vec![],
            status: status.into(),
            retry_count: 0,
            max_attempts: 10,
            next_attempt_at: 0,
            locked_by: None,
            locked_until: None,
            last_error: None,
            output: None,
            alerted_at: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn unknown_status_is_a_located_error() {
        let err = Task::try_from_raw("sqlite", raw("paused")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`status` of task 7"), "{msg}");
        assert!(msg.contains("\"paused\""), "{msg}");
    }

    #[test]
    fn negative_count_is_a_located_error() {
        let mut r = raw("pending");
        r.retry_count = -1;
        let msg = Task::try_from_raw("postgres", r).unwrap_err().to_string();
        assert!(msg.contains("`retry_count` of task 7"), "{msg}");
    }

    #[test]
    fn empty_key_is_refused() {
        let err = NewTask::new(
            "op",
            " ",
            b"",
            EnqueueOptions::new(),
            Timestamp::from_unix_millis(0),
        )
        .unwrap_err();
        assert!(matches!(err, DurableError::MissingIdempotencyKey { .. }));
    }
}
