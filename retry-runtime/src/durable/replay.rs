//! Replaying a deferred `#[retry(durable = ...)]` call: the worker calls the same adapter
//! function with the stored arguments, so the same evidence, status rules, budget and breaker
//! decide each replay as they decided the first call.
//!
//! The macro writes, beside the function, an associated function returning a [`Replay`] for
//! it (`register_replay(adapter: Arc<Self>)` for `register`); the application registers it
//! with the worker (`retry-durable`'s `WorkerBuilder::replay`). A replay runs the function under a
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

use super::outcome::Durable;
use super::task::{AttemptError, HandlerFuture, TaskContext};
use crate::error::Error;
use crate::hand_off::TaskId;
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

/// Whether the current task is replaying a durable call (the `#[retry(durable = ...)]`
/// expansion marks the call held: see `CallSpec::held`).
pub fn in_replay() -> bool {
    REPLAY.try_with(|_| ()).is_ok()
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

/// The stored arguments of a durable call, written one at a time by the expansion
/// ([`write_arg`]), so that an argument that cannot be stored is reported once, where it is
/// declared. The payload is JSON: an array of the arguments (`null` when there are none), as a
/// tuple of them would be written.
#[derive(Debug, Default)]
pub struct ArgsWriter {
    json: Vec<u8>,
    count: usize,
    error: Option<String>,
}

impl ArgsWriter {
    /// No argument written yet.
    pub fn new() -> Self {
        ArgsWriter::default()
    }

    /// The task's payload, or why an argument could not be serialized.
    pub fn finish(mut self) -> Result<Vec<u8>, String> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if self.count == 0 {
            return Ok(b"null".to_vec());
        }
        self.json.push(b']');
        Ok(self.json)
    }
}

/// How one argument of a durable call is written and read back. [`arg_codec`] is the one
/// place the expansion requires [`StoredArg`] (the call writes through it, the replay reads
/// through it, both spanned at the argument's type), so an argument that cannot be stored is
/// reported once.
pub struct ArgCodec<T: ?Sized, O> {
    write: fn(&mut ArgsWriter, &T),
    read: for<'a, 'b> fn(&'a mut ArgsReader<'b>) -> Result<O, AttemptError>,
}

/// The codec of an argument of type `T`, read back as `O` (`T::Owned`, which the expansion
/// names itself: a projection the compiler cannot resolve would be reported again wherever the
/// value is used).
pub fn arg_codec<T: StoredArg<Owned = O> + ?Sized, O>() -> ArgCodec<T, O> {
    ArgCodec {
        write: write_arg::<T>,
        read: read_arg::<T>,
    }
}

impl<T: ?Sized, O> ArgCodec<T, O> {
    /// Writes the argument ([`write_arg`]).
    pub fn write(&self, args: &mut ArgsWriter, arg: &T) {
        (self.write)(args, arg);
    }

    /// Reads the argument back ([`read_arg`]).
    pub fn read(&self, args: &mut ArgsReader<'_>) -> Result<O, AttemptError> {
        (self.read)(args)
    }
}

/// Writes the next argument of a durable call.
pub fn write_arg<T: StoredArg + ?Sized>(args: &mut ArgsWriter, arg: &T) {
    args.json.push(if args.count == 0 { b'[' } else { b',' });
    args.count += 1;
    if let Err(e) = serde_json::to_writer(&mut args.json, arg)
        && args.error.is_none()
    {
        args.error = Some(format!(
            "argument {} of the call could not be serialized: {e}",
            args.count
        ));
    }
}

/// The stored arguments of a task, read back one at a time by a replay ([`read_arg`]).
#[derive(Debug)]
pub struct ArgsReader<'t> {
    task: &'t TaskContext,
    items: std::vec::IntoIter<serde_json::Value>,
    stored: usize,
    read: usize,
}

impl ArgsReader<'_> {
    /// Checks that every stored argument was read: a task stored by a version of the function
    /// that took more arguments does not replay on this one.
    pub fn end(self) -> Result<(), AttemptError> {
        if self.read == self.stored {
            return Ok(());
        }
        Err(incompatible(
            self.task,
            format_args!(
                "{} arguments were stored, the function takes {}",
                self.stored, self.read
            ),
        ))
    }
}

/// The stored arguments of `task`, to read back for a replay; a payload that does not decode
/// fails the task at once (no replay can fix it).
pub fn read_args(task: &TaskContext) -> Result<ArgsReader<'_>, AttemptError> {
    let items = match serde_json::from_slice(&task.payload) {
        Ok(serde_json::Value::Null) => Vec::new(),
        Ok(serde_json::Value::Array(items)) => items,
        Ok(_) => {
            return Err(incompatible(
                task,
                format_args!("the payload is not a list"),
            ));
        }
        Err(e) => return Err(incompatible(task, format_args!("{e}"))),
    };
    Ok(ArgsReader {
        task,
        stored: items.len(),
        items: items.into_iter(),
        read: 0,
    })
}

/// Reads the next stored argument, in its owned form (`String` for `str`).
pub fn read_arg<T: StoredArg + ?Sized>(
    args: &mut ArgsReader<'_>,
) -> Result<T::Owned, AttemptError> {
    args.read += 1;
    let Some(item) = args.items.next() else {
        return Err(incompatible(
            args.task,
            format_args!(
                "{} arguments were stored, the function takes more",
                args.stored
            ),
        ));
    };
    serde_json::from_value(item)
        .map_err(|e| incompatible(args.task, format_args!("argument {}: {e}", args.read)))
}

/// A task whose stored arguments do not fit the function as deployed now.
fn incompatible(task: &TaskContext, detail: std::fmt::Arguments<'_>) -> AttemptError {
    AttemptError::permanent(format!(
        "task {} of `{}`: the stored arguments do not decode for this version of the function \
         ({detail}); requeue it after deploying a compatible version, or cancel it",
        task.task_id, task.operation
    ))
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
/// `retry-durable`'s `DurableQueue::outcome`.
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

/// The durable handler of one `#[retry(durable = ...)]` function, written by the macro
/// (`Adapter::register_replay(adapter)` for `register`). Register it with `retry-durable`'s
/// `WorkerBuilder::replay`.
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

    /// Runs one replay of `task`: the function, called with the task's stored arguments.
    pub fn call(&self, task: TaskContext) -> HandlerFuture {
        (self.run)(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(payload: Vec<u8>) -> TaskContext {
        TaskContext::new(TaskId(7), "sber.register", "k", payload, 1, 5)
    }

    fn written(write: impl FnOnce(&mut ArgsWriter)) -> Vec<u8> {
        let mut args = ArgsWriter::new();
        write(&mut args);
        args.finish().expect("serializable")
    }

    #[test]
    fn arguments_are_written_as_a_tuple_of_them_would_be() {
        // Tasks queued before the arguments were written one at a time still replay.
        assert_eq!(written(|_| {}), serde_json::to_vec(&()).unwrap());
        assert_eq!(
            written(|a| write_arg(a, "x")),
            serde_json::to_vec(&("x",)).unwrap()
        );
        let cmd = vec![1u8, 2];
        assert_eq!(
            written(|a| {
                write_arg(a, &3u64);
                write_arg(a, "order");
                write_arg(a, cmd.as_slice());
            }),
            serde_json::to_vec(&(3u64, "order", &cmd)).unwrap()
        );
    }

    #[test]
    fn arguments_read_back_in_their_owned_form() {
        let stored = task(written(|a| {
            write_arg(a, &3u64);
            write_arg(a, "order");
        }));
        let mut args = read_args(&stored).unwrap();
        assert_eq!(read_arg::<u64>(&mut args).unwrap(), 3);
        assert_eq!(read_arg::<str>(&mut args).unwrap(), "order");
        args.end().unwrap();
        let none = task(written(|_| {}));
        read_args(&none).unwrap().end().unwrap();
    }

    #[test]
    fn a_payload_that_does_not_fit_the_function_fails_the_task_naming_why() {
        let two = task(written(|a| {
            write_arg(a, &3u64);
            write_arg(a, "order");
        }));
        // Fewer arguments taken than stored.
        let mut args = read_args(&two).unwrap();
        read_arg::<u64>(&mut args).unwrap();
        let error = args.end().unwrap_err().to_string();
        assert!(
            error.contains("2 arguments were stored, the function takes 1"),
            "{error}"
        );
        // More taken than stored.
        let mut args = read_args(&two).unwrap();
        read_arg::<u64>(&mut args).unwrap();
        read_arg::<str>(&mut args).unwrap();
        let error = read_arg::<u64>(&mut args).unwrap_err().to_string();
        assert!(
            error.contains("2 arguments were stored, the function takes more"),
            "{error}"
        );
        // A different type.
        let mut args = read_args(&two).unwrap();
        let error = read_arg::<str>(&mut args).unwrap_err().to_string();
        assert!(
            error.contains("task 7 of `sber.register`") && error.contains("argument 1"),
            "{error}"
        );
        // Not a list at all.
        let error = read_args(&task(b"{}".to_vec())).unwrap_err().to_string();
        assert!(error.contains("not a list"), "{error}");
        assert!(read_args(&task(b"[1,".to_vec())).is_err());
    }
}
