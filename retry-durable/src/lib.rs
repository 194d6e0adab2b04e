//! Durable retry for [`retry-runtime`](https://docs.rs/retry-runtime): a database task queue for
//! failures that outlast the in-memory window.
//!
//! # Why a second retry mechanism
//!
//! In-memory retry is for transient failures that clear within about five seconds: it is fast
//! and costs nothing, but it holds a request, a connection and a bulkhead slot while it waits,
//! and it dies with the process. An upstream that is down for minutes needs something else: the
//! work is written to a table and a polling worker retries it later, with exponential backoff
//! (the runtime's [`Backoff`]).
//! The task survives restarts and deploys, and no request thread waits for it.
//!
//! # Guarantees, and why they hold
//!
//! Delivery is **at-least-once**; the *effect* is exactly-once only because every attempt
//! sends the same idempotency key and the upstream deduplicates on it. No queue can do better
//! for a call to another system: a worker can die after the upstream accepted the request and
//! before the success is recorded. So:
//!
//! - the key is chosen once, before the first in-memory attempt, and stored in the row;
//!   [`DurableQueue::enqueue`] refuses an empty key;
//! - `UNIQUE (operation, idempotency_key)` makes a repeated hand-off a no-op that returns the
//!   existing task;
//! - an attempt is counted when it is claimed, so a task that crashes its worker every time
//!   still reaches `failed` after `max_attempts` claims;
//! - each attempt runs under a timeout shorter than its lease, and the outcome is written
//!   fenced on `(task, lease owner, attempt)`, so a worker whose lease was rescued cannot
//!   overwrite a newer attempt;
//! - but the fence discards a result, not a side effect: a process stopped mid-attempt for
//!   longer than its lease resumes its handler, which runs on until its next await while the
//!   task is run again elsewhere (attempt n + 1, same key). Before an irreversible step a
//!   handler can ask [`Lease::current`] whether its lease still holds; that narrows the window
//!   to the gap between the check and the step, and only the key closes it;
//! - a failed task owes an alert in the same write that fails it; the alert is recorded only
//!   after the hook returns, so a crash in between re-alerts instead of staying silent.
//!
//! # Backends
//!
//! - `sqlite`: [`SqliteStore`], one embedded file (WAL, `synchronous = FULL`). The
//!   default for a single instance. Several processes on one host may share the file, but they
//!   share its one write lock too: see [`SqliteStore`] (one stalled writer stalls them all).
//! - `postgres`: [`PgStore`], for several instances sharing one database; claims use
//!   `FOR UPDATE SKIP LOCKED`.
//!
//! A worker runs a claimed task only if its attempt can end within the lease: a process
//! stopped after claiming (SIGSTOP, a long pause) and resumed later gives the task back instead
//! of running it, since another worker may have taken it over meanwhile.
//!
//! Both run the same conformance suite. Migrations are embedded and tracked in
//! `retry_durable_migrations`, away from the application's own migration table. This crate
//! depends on sqlx 0.9; do not add `rusqlite` to the same build (both link `sqlite3`, and cargo
//! refuses the graph).
//!
//! # Handing off from the in-memory loop
//!
//! With `#[retry(durable = "operation")]` the hand-off is written for you: a call whose
//! in-memory retries stop on a transient failure is queued with its key and arguments, answers
//! [`Durable::Deferred`], and is replayed by the worker through the same function (the
//! generated `<name>_replay`, registered with [`WorkerBuilder::replay`]), so the same evidence,
//! status rules, budget and breaker decide every replay; its result is read back with
//! [`DurableQueue::outcome`] or [`DurableQueue::wait`]. See the `durable` option of
//! [`retry`](retry_runtime::retry).
//!
//! By hand, for code without the attribute: when the in-memory retry ends on a transient
//! failure, hand the same request off with the **same idempotency key** and answer "deferred"
//! instead of "failed":
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use retry_durable::{Deferred, DurableQueue, EnqueueOptions, SqliteStore};
//!
//! enum Charge { Done(String), Deferred(Deferred) }
//!
//! let queue = DurableQueue::new(SqliteStore::open("var/retry-queue.sqlite").await?);
//! let key = "order-1234-capture"; // chosen once, before the first attempt
//! let body = br#"{"order":1234,"amount":500}"#.to_vec();
//!
//! # let in_memory: Result<String, std::io::Error> = Err(std::io::ErrorKind::TimedOut.into());
//! // let in_memory = retry_runtime::Retry::upstream("payments")...call(|| charge(key, &body)).await;
//! let outcome = match in_memory {
//!     Ok(receipt) => Charge::Done(receipt),
//!     // Transient failure that outlasted the in-memory window: defer, do not fail.
//!     // (A permanent failure, e.g. a 4xx contract error, is returned to the caller instead.)
//!     Err(_transient) => Charge::Deferred(
//!         queue.enqueue("payments.capture", key, &body, EnqueueOptions::new()).await?,
//!     ),
//! };
//! # let _ = outcome;
//! # Ok(()) }
//! ```
//!
//! A worker, usually in the same service, drains the queue:
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn example(store: retry_durable::SqliteStore) -> Result<(), Box<dyn std::error::Error>> {
//! use retry_durable::{AttemptError, TaskContext, Worker, WorkerConfig};
//!
//! let worker = Worker::builder(store)
//!     .handler("payments.capture", |task: TaskContext| async move {
//!         // Send task.payload with header `Idempotency-Key: {task.idempotency_key}`.
//!         # let status = 503;
//!         match status {
//!             200..=299 => Ok(()),
//!             400..=499 => Err(AttemptError::permanent(format!("contract error {status}"))),
//!             _ => Err(AttemptError::retry(format!("upstream answered {status}"))),
//!         }
//!     })
//!     .alert_hook(|task: retry_durable::Task| async move {
//!         // page someone with task.id, task.operation and task.last_error
//!         Ok(())
//!     })
//!     .config(WorkerConfig::new())
//!     .build()?;
//! let stats = worker.run(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # let _ = stats;
//! # Ok(()) }
//! ```
//!
//! Operators use [`DurableQueue::counts`], [`DurableQueue::failed`],
//! [`DurableQueue::requeue`] and [`DurableQueue::cancel`]. Every state change emits a `tracing`
//! event under the target `retry_runtime::durable` with an `event` field: `enqueue`, `claim`,
//! `complete`, `retry`, `fail`, `rescue`, `alert`, `release`, `lease_lost`, `requeue`, `cancel`;
//! a `#[retry(durable = ...)]` call adds `deferred` (queued), `replay_stopped` (a replay stopped
//! on a transient failure again: the task waits for its backoff), `not_deferred` and
//! `no_queue` (the queue could not take it: the caller gets the in-memory failure, or
//! [`Error::NoDurableQueue`](retry_runtime::Error::NoDurableQueue)), and `slow_hand_off` (queued, but
//! after the time reserved for it: a caller with its own deadline may have given up).

// With no backend feature no store uses the migration and rescue helpers.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod error;
mod handler;
mod lease;
mod migrate;
mod outcome;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod replay;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod task;
mod worker;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use error::DurableError;
pub use handler::{AlertError, AlertFuture, AlertHook, Handler, TaskOutput, TracingAlert};
pub use lease::Lease;
pub use outcome::Outcome;
#[cfg(feature = "postgres")]
pub use postgres::{PgStore, PgStoreOptions};
pub use queue::DurableQueue;
/// The runtime's side of the seam, re-exported so one `use retry_durable::...` names them all.
pub use retry_runtime::durable::{
    AttemptError, Deferred, DeferredCall, Durable, EnqueueOptions, HAND_OFF_RESERVE, HandOff,
    HandOffError, HandOffFuture, HandlerFuture, Replay, TaskContext, TaskId, TaskStatus,
    UnknownStatus,
};
pub use sql::{Dialect, SqlStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreOptions};
pub use store::{Completion, DurableStore, Rescue, StoreResult, WorkSignal};
pub use task::{Enqueued, Fence, NewTask, StatusCounts, Task};
pub use worker::{DEFAULT_BACKOFF, Worker, WorkerBuilder, WorkerConfig, WorkerStats};

/// The backoff and jitter types the queue shares with the in-memory loop.
pub use retry_runtime::backoff::{Backoff, Jitter};

/// The sqlx version this crate is built on, for direct queries on
/// [`SqliteStore::pool`]/[`PgStore::pool`] without a second, mismatched sqlx in the build.
pub use sqlx;
