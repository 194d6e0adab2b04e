//! The runtime's side of durable retry (feature `durable`): what a `#[retry(durable = ...)]`
//! call needs to hand its work to a durable queue and to be replayed from it. The queue itself
//! (store, worker, migrations, operator API, the SQLite and PostgreSQL backends) is the
//! [`retry-durable`](https://docs.rs/retry-durable) crate.
//!
//! # Why a second retry mechanism
//!
//! In-memory retry is for transient failures that clear within about five seconds: it is fast
//! and costs nothing, but it holds a request, a connection and a bulkhead slot while it waits,
//! and it dies with the process. An upstream that is down for minutes needs something else: the
//! work is written to a table and a polling worker retries it later. The task survives restarts
//! and deploys, and no request thread waits for it.
//!
//! # The seam
//!
//! - **Hand-off**: a call whose in-memory retries stop on a transient failure is written to
//!   the queue registered with [`Registry::set_durable_queue`](crate::Registry::set_durable_queue),
//!   any [`HandOff`], with its idempotency key and its arguments, and answers
//!   [`Durable::Deferred`] ([`defer`]).
//! - **Replay**: the macro writes a [`Replay`] beside the function; the queue's worker runs it
//!   with each task's [`TaskContext`], and it calls the same function with the stored
//!   arguments, so the same evidence, status rules, budget and breaker decide every replay. A
//!   replay that stops on a transient failure again answers [`AttemptError::Retry`] instead of
//!   queueing itself a second time.
//!
//! See the `durable` option of [`retry`](crate::retry) for the whole picture, and
//! `retry-durable`'s documentation for its guarantees (at-least-once delivery, exactly-once
//! effect through the idempotency key, fenced results, alerts).
//!
//! Without the `durable` feature none of this is compiled, and a `durable = ...` function is
//! refused at compile time with a message naming the feature.

mod defer;
mod outcome;
pub(crate) mod replay;
mod task;

pub use crate::hand_off::{
    Deferred, EnqueueOptions, HAND_OFF_RESERVE, HandOff, HandOffError, HandOffFuture, TaskId,
    TaskStatus, UnknownStatus,
};
pub use defer::defer;
pub use outcome::{DeferredCall, Durable};
pub use replay::{DurableReturn, Replay, StoredArg, replay_key, replaying};
pub use task::{AttemptError, HandlerFuture, TaskContext};
