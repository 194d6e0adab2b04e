//! What a worker runs for each attempt: a [`Handler`] per operation, given a [`TaskContext`],
//! answering with success or an [`AttemptError`].

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::task::{Task, TaskId};

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
    pub(crate) fn from_task(task: &Task) -> Self {
        TaskContext {
            task_id: task.id,
            operation: task.operation.clone(),
            idempotency_key: task.idempotency_key.clone(),
            payload: task.payload.clone(),
            attempt: task.retry_count,
            max_attempts: task.max_attempts,
        }
    }

    /// Whether a failure of this attempt fails the task.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
}

/// Why an attempt did not succeed, and whether trying again can help.
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

/// What a successful attempt leaves behind: stored as the task's
/// [`output`](super::Task::output) by the write that completes it, so the application can
/// look the result up by task id.
///
/// `()` stores nothing; bytes are stored as they are (serialize a richer result yourself, e.g.
/// as JSON).
pub trait TaskOutput: Send + 'static {
    /// The bytes to store, or `None` for no output.
    fn into_output(self) -> Option<Vec<u8>>;
}

impl TaskOutput for () {
    fn into_output(self) -> Option<Vec<u8>> {
        None
    }
}

impl TaskOutput for Vec<u8> {
    fn into_output(self) -> Option<Vec<u8>> {
        Some(self)
    }
}

impl TaskOutput for Option<Vec<u8>> {
    fn into_output(self) -> Option<Vec<u8>> {
        self
    }
}

/// The boxed future a [`Handler`] returns: the attempt's output (see [`TaskOutput`]) or why it
/// failed.
pub type HandlerFuture =
    Pin<Box<dyn Future<Output = Result<Option<Vec<u8>>, AttemptError>> + Send + 'static>>;

/// Runs one attempt of one operation. Implemented for every
/// `Fn(TaskContext) -> impl Future<Output = Result<O, AttemptError>>` where `O` is a
/// [`TaskOutput`] (`()` for none, `Vec<u8>` for a serialized result), so an `async` closure
/// (or a closure returning an `async move` block) is a handler.
pub trait Handler: Send + Sync + 'static {
    /// Runs the attempt. The worker drops the future when the attempt timeout elapses.
    fn call(&self, task: TaskContext) -> HandlerFuture;
}

impl<F, Fut, O> Handler for F
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, AttemptError>> + Send + 'static,
    O: TaskOutput,
{
    fn call(&self, task: TaskContext) -> HandlerFuture {
        let attempt = self(task);
        Box::pin(async move { attempt.await.map(TaskOutput::into_output) })
    }
}

/// The error an [`AlertHook`] returns when it could not deliver.
pub type AlertError = Box<dyn StdError + Send + Sync>;

/// The boxed future an [`AlertHook`] returns.
pub type AlertFuture = Pin<Box<dyn Future<Output = Result<(), AlertError>> + Send + 'static>>;

/// Tells a human that a task failed for good (a failure nobody sees is a failure nobody fixes).
///
/// Delivery is at-least-once and survives crashes: the failed row owes an alert until the hook
/// returns `Ok` and the worker records it. A hook that returns `Err` (pager unreachable) is
/// called again after the alert lease. Implemented for every
/// `Fn(Task) -> impl Future<Output = Result<(), AlertError>>`.
pub trait AlertHook: Send + Sync + 'static {
    /// Delivers the alert for `task` (status `failed`, with `last_error`).
    fn alert(&self, task: Task) -> AlertFuture;
}

impl<F, Fut> AlertHook for F
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), AlertError>> + Send + 'static,
{
    fn alert(&self, task: Task) -> AlertFuture {
        Box::pin(self(task))
    }
}

/// The default alert hook: only the worker's `error`-level `tracing` event (`event = "alert"`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingAlert;

impl AlertHook for TracingAlert {
    fn alert(&self, _task: Task) -> AlertFuture {
        Box::pin(async { Ok(()) })
    }
}
