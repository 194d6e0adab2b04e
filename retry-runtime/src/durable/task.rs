//! One durable attempt as its handler sees it: the [`TaskContext`] it is given and the
//! [`AttemptError`] it may answer with. A `#[retry(durable = ...)]` function's
//! [`Replay`](super::Replay) is such a handler, and so is every handler registered with
//! `retry-durable`'s worker.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::hand_off::TaskId;

/// Everything one attempt needs. The idempotency key is the task's, identical on every
/// attempt: send it upstream (e.g. as the `Idempotency-Key` header) so a repeat after a crash or
/// a rescued lease is a replay, not a second payment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskContext {
    /// The task.
    pub task_id: TaskId,
    /// The operation name the handler was registered under.
    pub operation: String,
    /// The key to send upstream on this and every attempt.
    pub idempotency_key: String,
    /// The caller's serialized request.
    pub payload: Vec<u8>,
    /// This attempt's number, from 1 (durable attempts only; in-memory ones are not counted).
    pub attempt: u32,
    /// Attempts allowed before the task fails.
    pub max_attempts: u32,
}

impl TaskContext {
    /// The context of attempt `attempt` (from 1) of `max_attempts` of a task. The worker makes
    /// it from the claimed row; make one by hand to call a handler in a test.
    pub fn new(
        task_id: TaskId,
        operation: impl Into<String>,
        idempotency_key: impl Into<String>,
        payload: Vec<u8>,
        attempt: u32,
        max_attempts: u32,
    ) -> Self {
        TaskContext {
            task_id,
            operation: operation.into(),
            idempotency_key: idempotency_key.into(),
            payload,
            attempt,
            max_attempts,
        }
    }

    /// Whether a failure of this attempt fails the task.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
}

/// Why an attempt did not succeed, and whether trying again can help.
///
/// Closed on purpose (not `#[non_exhaustive]`): a handler's failure is either worth another
/// attempt or not, and every worker must decide both cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    /// A transient failure (timeout, 5xx, 429, connection reset): try again after backoff.
    Retry {
        /// What happened, stored as the task's `last_error`.
        message: String,
        /// A minimum wait the upstream asked for (`Retry-After`), capped by the backoff cap.
        retry_after: Option<Duration>,
    },
    /// A failure that repeating cannot fix (a 4xx contract error): the
    /// task fails at once and alerts.
    Permanent {
        /// What happened, stored as the task's `last_error`.
        message: String,
    },
}

impl AttemptError {
    /// A transient failure.
    pub fn retry(message: impl Into<String>) -> Self {
        AttemptError::Retry {
            message: message.into(),
            retry_after: None,
        }
    }

    /// A transient failure whose upstream asked to wait at least `after`.
    pub fn retry_after(message: impl Into<String>, after: Duration) -> Self {
        AttemptError::Retry {
            message: message.into(),
            retry_after: Some(after),
        }
    }

    /// A permanent failure.
    pub fn permanent(message: impl Into<String>) -> Self {
        AttemptError::Permanent {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            AttemptError::Retry { message, .. } | AttemptError::Permanent { message } => message,
        }
    }
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Retry { message, .. } => write!(f, "transient: {message}"),
            AttemptError::Permanent { message } => write!(f, "permanent: {message}"),
        }
    }
}

impl StdError for AttemptError {}

/// The boxed future a durable handler returns: the attempt's output (its serialized result,
/// stored with the task; `None` for none) or why it failed.
pub type HandlerFuture =
    Pin<Box<dyn Future<Output = Result<Option<Vec<u8>>, AttemptError>> + Send + 'static>>;
