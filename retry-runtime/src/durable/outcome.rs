//! What a `#[retry(durable = ...)]` call answers: [`Durable`], and for a deferred call the
//! [`DeferredCall`] whose outcome the queue reports later (`retry-durable`'s
//! `DurableQueue::outcome`).
//!
//! A deferred call is not a failure: its work is written to the durable queue and a worker
//! finishes it later. So it is an `Ok`, a variant of its own beside the result, and the handle
//! it carries is typed with the result it will have.

use std::fmt;
use std::marker::PhantomData;

use crate::hand_off::{Deferred, TaskId};

/// The answer of a durable call: completed now, or deferred to the durable queue.
///
/// `#[retry(durable = "...")]` functions return `Result<Durable<T>, E>`: `Err` is a failure
/// retrying cannot fix (returned at once) or a write whose outcome is unknown; `Ok` is either
/// the result or the promise of one.
///
/// Closed on purpose (not `#[non_exhaustive]`): a durable call either completed or was handed
/// to the queue, and its caller must handle both.
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
/// Look its end up with `retry-durable`'s `DurableQueue::outcome`, or wait for it with
/// `DurableQueue::wait`; from another process, keep [`task_id`](Self::task_id) and use
/// `DurableQueue::outcome_of`.
pub struct DeferredCall<T> {
    deferred: Deferred,
    result: PhantomData<fn() -> T>,
}

impl<T> DeferredCall<T> {
    /// The typed handle of `deferred` (the queue's answer to a hand-off).
    pub fn new(deferred: Deferred) -> Self {
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
