//! What a worker runs for each attempt: a [`Handler`] per operation, given a
//! [`TaskContext`], answering with success or an [`AttemptError`] (both from the runtime's
//! durable seam, so a `#[retry(durable = ...)]` replay is a handler like any other); and the
//! [`AlertHook`] told when a task fails for good.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;

use retry_runtime::durable::{AttemptError, HandlerFuture, TaskContext};

use crate::task::Task;

/// The context of the attempt a claimed `task` runs.
pub(crate) fn context_of(task: &Task) -> TaskContext {
    TaskContext::new(
        task.id,
        task.operation.clone(),
        task.idempotency_key.clone(),
        task.payload.clone(),
        task.retry_count,
        task.max_attempts,
    )
}

/// What a successful attempt leaves behind: stored as the task's
/// [`output`](crate::Task::output) by the write that completes it, so the application can
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
