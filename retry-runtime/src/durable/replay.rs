//! Replaying a deferred `#[retry(durable = ...)]` call: the worker calls the same adapter
//! function with the stored arguments, so the same evidence, status rules, budget and breaker
//! decide each replay as they decided the first call.
//!
//! The macro writes, beside the function, an associated function returning a [`Replay`] for
//! it (`register_replay(adapter: Arc<Self>)` for `register`); the application registers it
//! with the worker ([`WorkerBuilder::replay`]). A replay runs the function under a
//! [`ReplayContext`]: when its in-memory retries stop on a transient failure again, the call is
//! not written to the queue a second time (it is already there) but reported to the worker as
//! [`AttemptError::Retry`], so the task waits for its durable backoff (exponential, with
//! jitter) and the alert follows the last attempt. A permanent failure fails the task at once.

use std::borrow::Borrow;
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::handler::{AttemptError, Handler, HandlerFuture, TaskContext};
use super::outcome::Durable;
use super::store::DurableStore;
use super::task::TaskId;
use super::worker::WorkerBuilder;
use crate::Error;
use crate::key::{IdempotencyKey, KeyError};

/// What the replay of one task knows, installed around the adapter function's future.
#[derive(Debug)]
pub(crate) struct ReplayContext {
    pub(crate) operation: String,
    pub(crate) task_id: TaskId,
    pub(crate) idempotency_key: String,
    /// The transient failure the function stopped on: the task's next `last_error`.
    stopped: Mutex<Option<(String, Option<Duration>)>>,
}

tokio::task_local! {
    static REPLAY: Arc<ReplayContext>;
}

impl ReplayContext {
    /// The replay of `operation` running in this task, if any.
    pub(crate) fn current(operation: &str) -> Option<Arc<ReplayContext>> {
        REPLAY
            .try_with(|r| (r.operation == operation).then(|| r.clone()))
            .ok()
            .flatten()
    }

    /// Records the transient failure that ended this replay's in-memory retries.
    pub(crate) fn stopped(&self, error: String, retry_after: Option<Duration>) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some((error, retry_after));
    }
}

/// The key of a durable call: inside the replay of `operation`, it must be the key its task
/// was queued with, checked before anything is sent.
pub fn replay_key(
    operation: &str,
    key: Result<IdempotencyKey, Error>,
) -> Result<IdempotencyKey, Error> {
    let key = key?;
    match ReplayContext::current(operation) {
        Some(replay) if replay.idempotency_key != key.as_str() => {
            Err(Error::InvalidIdempotencyKey(KeyError::ChangedOnReplay))
        }
        _ => Ok(key),
    }
}

/// An argument a durable call stores: serializable, and read back as its owned form (`String`
/// for `&str`, `Cmd` for `&Cmd`) for the replay.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be stored for a durable replay: it is not serializable",
    label = "this argument is written to the durable queue with the call",
    note = "derive `serde::Serialize` and `serde::Deserialize` for it (a replay reads it back), or take it out of the durable function's arguments"
)]
pub trait StoredArg: Serialize {
    /// What the replay reads back and lends to the function.
    type Owned: DeserializeOwned + Borrow<Self>;
}

impl<T: Serialize + DeserializeOwned> StoredArg for T {
    type Owned = T;
}

impl StoredArg for str {
    type Owned = String;
}

impl<T: Serialize + DeserializeOwned> StoredArg for [T] {
    type Owned = Vec<T>;
}

/// The expansion's check that an argument can be stored, spanned at the argument.
pub fn stored<T: StoredArg + ?Sized>(arg: &T) -> &T {
    arg
}

/// The arguments of a durable call as the task's payload (JSON).
pub fn encode<A: Serialize>(args: &A) -> Result<Vec<u8>, String> {
    serde_json::to_vec(args)
        .map_err(|e| format!("the call's arguments could not be serialized: {e}"))
}

/// The stored arguments read back for a replay; a payload that does not decode fails the task
/// at once (no replay can fix it).
pub fn decode<A: DeserializeOwned>(task: &TaskContext) -> Result<A, AttemptError> {
    serde_json::from_slice(&task.payload).map_err(|e| {
        AttemptError::permanent(format!(
            "task {} of `{}`: the stored arguments do not decode for this version of the \
             function ({e}); requeue it after deploying a compatible version, or cancel it",
            task.task_id, task.operation
        ))
    })
}

/// The return type of a durable function: `Result<Durable<T>, E>`, whose body returns
/// `Result<T, E>`.
#[diagnostic::on_unimplemented(
    message = "a durable `#[retry]` function returns `Result<Durable<T>, E>`, not `{Self}`",
    label = "return `Result<retry_runtime::durable::Durable<T>, E>` here",
    note = "`Durable::Done(value)` when the call completed, `Durable::Deferred(call)` when it was handed to the durable queue: a deferred call is not a failure"
)]
pub trait DurableReturn {
    /// What the body returns.
    type Body;
}

impl<T, E> DurableReturn for Result<Durable<T>, E> {
    type Body = Result<T, E>;
}

/// Runs the replay of `task`: `call` is the adapter function's future, polled with the
/// task's replay context installed (so the function, stopping again on a transient failure, reports it to the worker instead of queueing itself again). The result is stored as JSON for
/// [`DurableQueue::outcome`](super::DurableQueue::outcome).
pub async fn replaying<T, E, F>(task: &TaskContext, call: F) -> Result<Vec<u8>, AttemptError>
where
    T: Serialize,
    E: Display,
    F: Future<Output = Result<Durable<T>, E>>,
{
    let context = Arc::new(ReplayContext {
        operation: task.operation.clone(),
        task_id: task.task_id,
        idempotency_key: task.idempotency_key.clone(),
        stopped: Mutex::new(None),
    });
    let result = REPLAY.scope(context.clone(), call).await;
    match result {
        Ok(Durable::Done(value)) => serde_json::to_vec(&value).map_err(|e| {
            AttemptError::permanent(format!(
                "the replay succeeded but its result could not be serialized: {e}"
            ))
        }),
        Ok(Durable::Deferred(_)) => {
            let stopped = context
                .stopped
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            Err(match stopped {
                Some((error, Some(after))) => AttemptError::retry_after(error, after),
                Some((error, None)) => AttemptError::retry(error),
                None => AttemptError::retry("the replay was deferred"),
            })
        }
        // The same rules that return a failure at once from the first call fail the task.
        Err(error) => Err(AttemptError::permanent(error.to_string())),
    }
}

type ReplayFn = dyn Fn(TaskContext) -> HandlerFuture + Send + Sync;

/// The durable [`Handler`] of one `#[retry(durable = ...)]` function, written by the macro
/// (`Adapter::register_replay(adapter)` for `register`). Register it with
/// [`WorkerBuilder::replay`].
#[derive(Clone)]
pub struct Replay {
    operation: &'static str,
    run: Arc<ReplayFn>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("operation", &self.operation)
            .finish_non_exhaustive()
    }
}

impl Replay {
    #[doc(hidden)]
    pub fn new<F, Fut>(operation: &'static str, run: F) -> Self
    where
        F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, AttemptError>> + Send + 'static,
    {
        Replay {
            operation,
            run: Arc::new(move |task| {
                let attempt = run(task);
                Box::pin(async move { attempt.await.map(Some) })
            }),
        }
    }

    /// The operation name (`durable = "..."`) the replayed tasks carry.
    pub fn operation(&self) -> &'static str {
        self.operation
    }
}

impl Handler for Replay {
    fn call(&self, task: TaskContext) -> HandlerFuture {
        (self.run)(task)
    }
}

impl<S: DurableStore> WorkerBuilder<S> {
    /// Registers a `#[retry(durable = ...)]` function's replay under its operation name.
    pub fn replay(self, replay: Replay) -> Self {
        self.handler(replay.operation, replay)
    }
}
