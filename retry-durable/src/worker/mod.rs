//! The worker: claims due tasks, runs their handlers, records the outcome.
//!
//! Each attempt runs under `attempt_timeout`, shorter than the lease, and every write after it
//! is fenced on `(task, owner, attempt)`: a stalled worker that wakes up after its lease was
//! rescued cannot overwrite the newer attempt's result. Delivery is therefore at-least-once,
//! and the idempotency key sent on every attempt lets the upstream make the effect
//! exactly-once.
//!
//! A worker is a few small pieces, each in its own file: its settings (`config`), the
//! attempts in flight (`in_flight`, each run by `attempt`), the completer that records
//! successes in batches (`completer`), the rescuer that takes back expired leases
//! (`rescuer`), alert delivery (`alerts`), and the retry schedule that decides, with the
//! worker's seedable randomness, when a failed or rescued task runs again (`schedule`). The
//! loops that drive them are in `run`. Every decision is taken here; the store only runs
//! statements with the values decided.

mod alerts;
mod attempt;
mod completer;
mod config;
mod in_flight;
mod inner;
mod rescuer;
mod run;
mod schedule;
mod stats;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::error::DurableError;
use crate::handler::{AlertHook, Handler, TracingAlert};
use crate::store::DurableStore;
use completer::Completer;
use inner::Inner;
use schedule::Schedule;

pub use config::{DEFAULT_BACKOFF, WorkerConfig};
pub use stats::WorkerStats;

/// Builds a [`Worker`]: register one handler per operation, optionally an alert hook and a clock.
pub struct WorkerBuilder<S> {
    store: S,
    handlers: HashMap<String, Arc<dyn Handler>>,
    problems: Vec<DurableError>,
    alert: Arc<dyn AlertHook>,
    clock: Arc<dyn Clock>,
    config: WorkerConfig,
}

impl<S: DurableStore> WorkerBuilder<S> {
    /// Registers `handler` for tasks whose operation is `operation`. The worker only claims
    /// tasks it has a handler for, so workers of different services can share one table.
    pub fn handler(mut self, operation: impl Into<String>, handler: impl Handler) -> Self {
        let operation = operation.into();
        if operation.trim().is_empty() {
            self.problems.push(DurableError::EmptyOperation);
        } else {
            match self.handlers.entry(operation) {
                Entry::Occupied(e) => self.problems.push(DurableError::InvalidConfig {
                    field: "handler",
                    reason: format!("operation `{}` has two handlers; register it once", e.key()),
                }),
                Entry::Vacant(e) => {
                    e.insert(Arc::new(handler));
                }
            }
        }
        self
    }

    /// Sets the hook called once per failed task (default: [`TracingAlert`]).
    pub fn alert_hook(mut self, hook: impl AlertHook) -> Self {
        self.alert = Arc::new(hook);
        self
    }

    /// Sets the clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets the configuration.
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Validates and builds the worker. Fails on an invalid configuration, a duplicate or empty
    /// operation name, or no handler at all.
    pub fn build(self) -> Result<Worker<S>, DurableError> {
        if let Some(problem) = self.problems.into_iter().next() {
            return Err(problem);
        }
        self.config.validate()?;
        if self.handlers.is_empty() {
            return Err(DurableError::InvalidConfig {
                field: "handler",
                reason: "no handler registered; a worker without handlers claims nothing".into(),
            });
        }
        let id = self
            .config
            .worker_id
            .clone()
            .unwrap_or_else(default_worker_id);
        let mut operations: Vec<String> = self.handlers.keys().cloned().collect();
        operations.sort();
        Ok(Worker {
            inner: Arc::new(Inner {
                schedule: Schedule::new(self.config.backoff, self.config.jitter_seed),
                completer: Completer::new(self.store.clone(), Arc::clone(&self.clock)),
                store: self.store,
                handlers: self.handlers,
                operations,
                alert: self.alert,
                clock: self.clock,
                config: self.config,
                id,
            }),
        })
    }
}

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".to_owned());
    format!("{host}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

/// Drains a durable queue. Cheap to clone; clones share handlers and worker id.
pub struct Worker<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Worker<S> {
    fn clone(&self) -> Self {
        Worker {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.inner.id)
            .field("operations", &self.inner.operations)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<S: DurableStore> Worker<S> {
    /// Starts building a worker on `store`.
    pub fn builder(store: S) -> WorkerBuilder<S> {
        WorkerBuilder {
            store,
            handlers: HashMap::new(),
            problems: Vec::new(),
            alert: Arc::new(TracingAlert),
            clock: Arc::new(SystemClock),
            config: WorkerConfig::new(),
        }
    }

    /// The lease owner name this worker writes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// One pass, for tests and for callers with their own scheduler: rescue expired leases,
    /// claim one batch, run every claimed attempt to its end, then deliver owed alerts.
    pub async fn tick(&self) -> Result<WorkerStats, DurableError> {
        run::tick(&self.inner).await
    }

    /// Runs until `shutdown` completes: claims while attempts are below `concurrency`, polls
    /// every `poll_interval` when idle, rescues expired leases every `rescue_interval` and
    /// delivers owed alerts. Store errors are logged and retried on the next poll (a database
    /// outage must not kill the worker). On shutdown it stops claiming, waits up to
    /// `shutdown_grace` for in-flight attempts, aborts the rest and releases their leases so
    /// another instance can take them at once.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> WorkerStats {
        run::run(&self.inner, shutdown).await
    }

    /// Delivers owed alerts for failed tasks (also run by [`tick`](Self::tick) and
    /// [`run`](Self::run)). Returns how many were delivered.
    pub async fn dispatch_alerts(&self) -> Result<u64, DurableError> {
        alerts::dispatch(&self.inner).await
    }
}
