//! The worker: claims due tasks, runs their handlers, records the outcome.
//!
//! Each attempt runs under `attempt_timeout`, which must be shorter than the lease, so an
//! attempt that is still running when its lease expires is impossible unless the process is
//! stalled or dead; then any instance's rescue returns the task to the queue. Every write after
//! an attempt is fenced on `(task, owner, attempt)`: a stalled worker that wakes up after its
//! lease was rescued cannot overwrite the newer attempt's result. Delivery is therefore
//! at-least-once, and the idempotency key sent on every attempt lets the upstream make the
//! effect exactly-once.
//!
//! Draining a backlog costs a few statements per batch, not per task: a claim takes up to
//! `batch_size` tasks, and successes are recorded by a completer task that writes all the
//! successes waiting for it in one statement (each still fenced), while the next ones queue.
//! An idle [`Worker::run`] wakes when a task is handed off (in this process, or in another
//! through PostgreSQL's `LISTEN`/`NOTIFY`), and polls as a fallback.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinError, JoinSet};

use crate::clock::{Clock, SystemClock};
use crate::error::DurableError;
use retry_runtime::backoff::{Backoff, Jitter};
use retry_runtime::durable::{AttemptError, TaskId};

use crate::handler::{AlertHook, Handler, TracingAlert, context_of};
use crate::lease::Lease;
use crate::store::{Completion, DurableStore, WorkSignal};
use crate::task::{Fence, Task};

const TARGET: &str = "retry_runtime::durable";

/// The most completions one write records.
const COMPLETION_BATCH: usize = 1024;

/// The shortest time between two claims (or two completion writes) prompted by hand-offs.
/// Claiming at each hand-off costs a statement per task at a steady rate of hand-offs (at
/// 1,000/s, a claim, a completion and the insert per task, each a round trip to the server);
/// on a busy machine that work is what makes hand-offs wait. Taking what arrived in the last
/// few milliseconds together costs a hand-off at most this much latency, and a worker that was
/// idle for longer claims at once.
const HAND_OFF_COALESCE: Duration = Duration::from_millis(5);

/// A successful attempt waiting for the completer, and where to say whether it was recorded
/// (`Ok(false)`: the fence no longer held).
type Pending = (Completion, oneshot::Sender<Result<bool, String>>);

/// The durable queue's default retry schedule: the step after failed attempt `n` is
/// `min(2 s * 2^(n-1), 1 h)`, and each wait a random time in the upper half of its step
/// ([`Jitter::Equal`]: a durable retry should not come back at once, and tasks failed by one
/// outage must not come due together). Cap the schedule below the upstream's idempotency-key
/// retention ([`Backoff::worst_case_total`] of `max_attempts - 1` bounds the total wait), or a
/// late retry could be applied as new work.
pub const DEFAULT_BACKOFF: Backoff = Backoff::new()
    .with_initial(Duration::from_secs(2))
    .with_max_backoff(Duration::from_secs(3600))
    .with_jitter(Jitter::Equal);

/// Worker settings.
///
/// # Default
/// - `worker_id`: `"<HOSTNAME or worker>-<pid>-<random>"`, unique per process
/// - `batch_size`: at most 512 tasks per claim
/// - `concurrency`: 1,024 attempts in flight (in [`Worker::run`])
/// - `attempt_timeout`: 30 s
/// - `lease`: 60 s (must exceed `attempt_timeout`)
/// - `poll_interval`: 1 s (when nothing was due and no hand-off woke the worker)
/// - `rescue_interval`: 15 s
/// - `alert_lease`: 60 s (how long an alert being delivered is reserved)
/// - `shutdown_grace`: 10 s
/// - `backoff`: [`DEFAULT_BACKOFF`] (steps of 2 s, 4 s, 8 s … capped at 1 h, each wait a
///   random time in the upper half of its step)
/// - `jitter_seed`: none (seeded from the OS)
///
/// # Why these claim sizes
/// Draining a backlog costs a few statements per claim and per batch of completions, so large
/// claims are what makes a queue fast: the documented figures
/// ([`BENCHMARKS.md`](https://github.com/retry-rs/retry/blob/main/BENCHMARKS.md)) come from these
/// defaults. They do not hurt a slow handler, because [`Worker::run`] claims only as many
/// tasks as it has free slots (never more than `batch_size`): every claimed task starts at
/// once, so no lease runs down while its task waits for a slot, and a worker busy with slow
/// attempts claims nothing until slots free. `concurrency` bounds this process's attempts, not
/// the upstream's load: replays of `#[retry(durable = ...)]` calls go through the upstream's
/// bulkhead, budget and breaker, so set the bulkhead to what the upstream can take. Lower
/// `concurrency` for a handler that holds something scarce per attempt, or to spread a backlog
/// over several instances more evenly: a worker that dies strands up to `concurrency` tasks
/// until their leases expire and are rescued.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    worker_id: Option<String>,
    batch_size: u32,
    concurrency: usize,
    attempt_timeout: Duration,
    lease: Duration,
    poll_interval: Duration,
    rescue_interval: Duration,
    alert_lease: Duration,
    shutdown_grace: Duration,
    backoff: Backoff,
    jitter_seed: Option<u64>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig::new()
    }
}

impl WorkerConfig {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        WorkerConfig {
            worker_id: None,
            batch_size: 512,
            concurrency: 1024,
            attempt_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            rescue_interval: Duration::from_secs(15),
            alert_lease: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            backoff: DEFAULT_BACKOFF,
            jitter_seed: None,
        }
    }

    /// Sets the lease owner name; it must be unique among live workers.
    pub fn with_worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Sets the most tasks one claim takes ([`Worker::run`] takes fewer when fewer slots are
    /// free).
    pub const fn with_batch_size(mut self, n: u32) -> Self {
        self.batch_size = n;
        self
    }

    /// Sets how many attempts run at once in [`Worker::run`].
    pub const fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets the per-attempt timeout.
    pub const fn with_attempt_timeout(mut self, d: Duration) -> Self {
        self.attempt_timeout = d;
        self
    }

    /// Sets the lease; keep a margin above the attempt timeout for the result write and clock
    /// skew between instances.
    pub const fn with_lease(mut self, d: Duration) -> Self {
        self.lease = d;
        self
    }

    /// Sets how long [`Worker::run`] waits when nothing was due.
    pub const fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Sets how often [`Worker::run`] rescues expired leases.
    pub const fn with_rescue_interval(mut self, d: Duration) -> Self {
        self.rescue_interval = d;
        self
    }

    /// Sets how long an alert being delivered is reserved before another dispatcher may retry it.
    pub const fn with_alert_lease(mut self, d: Duration) -> Self {
        self.alert_lease = d;
        self
    }

    /// Sets how long shutdown waits for in-flight attempts before releasing their leases.
    pub const fn with_shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }

    /// Sets the retry schedule: after failed attempt `n` (counted from 1) the task waits
    /// `backoff.delay(n, ..)`, so the first retry's step is `initial`. Start from
    /// [`DEFAULT_BACKOFF`]: `Backoff::new()` holds the in-memory loop's defaults (100 ms to 1 s).
    /// Decorrelated jitter reads no previous wait here (the queue keeps none): its waits are
    /// drawn between `initial` and `initial * multiplier`.
    pub const fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Seeds the randomness the backoff's jitter draws from (default: seeded from the OS), so
    /// a test or a simulation sees the same waits on every run.
    pub const fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// The lease.
    pub const fn lease(&self) -> Duration {
        self.lease
    }

    /// The retry schedule.
    pub const fn backoff(&self) -> Backoff {
        self.backoff
    }

    fn validate(&self) -> Result<(), DurableError> {
        let bad = |field, reason: &str| {
            Err(DurableError::InvalidConfig {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if !(self.backoff.multiplier.is_finite() && self.backoff.multiplier >= 1.0) {
            return bad(
                "backoff",
                "the multiplier must be a finite number of at least 1 (2 doubles each step)",
            );
        }
        if self.attempt_timeout.is_zero() {
            return bad("attempt_timeout", "must be above zero");
        }
        if self.lease <= self.attempt_timeout {
            return bad(
                "lease",
                "must exceed attempt_timeout, or a live attempt could be rescued and run twice",
            );
        }
        if self.alert_lease.is_zero() {
            return bad("alert_lease", "must be above zero");
        }
        if matches!(&self.worker_id, Some(id) if id.trim().is_empty()) {
            return bad("worker_id", "must not be empty");
        }
        Ok(())
    }
}

/// What a worker did (one [`Worker::tick`], or a whole [`Worker::run`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Expired leases taken back.
    pub rescued: u64,
    /// Tasks claimed.
    pub claimed: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and were scheduled again.
    pub retried: u64,
    /// Tasks failed (permanent error or last attempt).
    pub failed: u64,
    /// Results not written, or claimed tasks not run, because the lease had been taken over.
    pub lost_leases: u64,
    /// Leases given back unfinished (due again at once, the attempt not counted): at shutdown,
    /// or claimed too long ago for the attempt to end within the lease.
    pub released: u64,
    /// Alerts delivered.
    pub alerted: u64,
    /// Store errors logged (the affected leases expire and are rescued).
    pub store_errors: u64,
}

impl WorkerStats {
    fn absorb(&mut self, other: WorkerStats) {
        self.rescued += other.rescued;
        self.claimed += other.claimed;
        self.succeeded += other.succeeded;
        self.retried += other.retried;
        self.failed += other.failed;
        self.lost_leases += other.lost_leases;
        self.released += other.released;
        self.alerted += other.alerted;
        self.store_errors += other.store_errors;
    }
}

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
                completer: Mutex::new(None),
                jitter: Mutex::new(match self.config.jitter_seed {
                    Some(seed) => fastrand::Rng::with_seed(seed),
                    None => fastrand::Rng::new(),
                }),
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

struct Inner<S> {
    /// Feeds the task that records successes in batches (started on first use).
    completer: Mutex<Option<mpsc::UnboundedSender<Pending>>>,
    /// Draws the backoff's jitter.
    jitter: Mutex<fastrand::Rng>,
    store: S,
    handlers: HashMap<String, Arc<dyn Handler>>,
    operations: Vec<String>,
    alert: Arc<dyn AlertHook>,
    clock: Arc<dyn Clock>,
    config: WorkerConfig,
    id: String,
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

/// One claimed attempt, kept by the worker so it can finish or release the task even when the
/// handler task panicked or was aborted.
#[derive(Debug, Clone)]
struct Claimed {
    fence: Fence,
    max_attempts: u32,
    operation: String,
}

enum Outcome {
    Succeeded,
    Retried,
    Failed,
    LeaseLost,
    /// Not run: claimed too long ago to finish within its lease, and given back.
    Released,
    StoreError,
}

impl Outcome {
    fn stats(self) -> WorkerStats {
        let mut s = WorkerStats::default();
        match self {
            Outcome::Succeeded => s.succeeded = 1,
            Outcome::Retried => s.retried = 1,
            Outcome::Failed => s.failed = 1,
            Outcome::LeaseLost => s.lost_leases = 1,
            Outcome::Released => s.released = 1,
            Outcome::StoreError => s.store_errors = 1,
        }
        s
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
        let mut stats = WorkerStats {
            rescued: self.rescue().await?,
            ..WorkerStats::default()
        };
        let mut set = JoinSet::new();
        let mut inflight = HashMap::new();
        stats.claimed = self
            .claim_into(self.claim_cap(), &mut set, &mut inflight)
            .await? as u64;
        while let Some(joined) = set.join_next_with_id().await {
            stats.absorb(self.settle(joined, &mut inflight).await);
        }
        stats.alerted = self.dispatch_alerts().await?;
        Ok(stats)
    }

    /// The most one claim takes: `batch_size`, and never more than `concurrency`.
    fn claim_cap(&self) -> u32 {
        let cfg = &self.inner.config;
        u32::try_from(cfg.concurrency)
            .unwrap_or(u32::MAX)
            .min(cfg.batch_size)
    }

    /// Runs until `shutdown` completes: claims while attempts are below `concurrency`, polls
    /// every `poll_interval` when idle, rescues expired leases every `rescue_interval` and
    /// delivers owed alerts. Store errors are logged and retried on the next poll (a database
    /// outage must not kill the worker). On shutdown it stops claiming, waits up to
    /// `shutdown_grace` for in-flight attempts, aborts the rest and releases their leases so
    /// another instance can take them at once.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> WorkerStats {
        let cfg = &self.inner.config;
        let mut stats = WorkerStats::default();
        let mut set: JoinSet<Outcome> = JoinSet::new();
        let mut inflight: HashMap<tokio::task::Id, Claimed> = HashMap::new();
        let mut next_rescue = tokio::time::Instant::now();
        // When the last claim started, and whether a hand-off woke the worker since.
        let mut last_claim = next_rescue;
        let mut woken = false;
        // Alerts are checked at start-up (a crash may have left some owed), after any failure,
        // and on the rescue timer (rescues can fail tasks too).
        let mut alerts_due = true;
        // Claim again once half a batch of slots is free (or nothing runs), not per freed slot.
        let refill = (cfg.batch_size as usize).min(cfg.concurrency).div_ceil(2);
        let signal = match self.inner.store.subscribe().await {
            Ok(signal) => signal,
            Err(e) => {
                stats.store_errors += 1;
                tracing::error!(target: TARGET, error = %e,
                    "cannot listen for hand-offs; polling only");
                WorkSignal::new(Arc::default(), None)
            }
        };
        tokio::pin!(shutdown);
        tracing::info!(target: TARGET, worker = %self.inner.id,
            operations = ?self.inner.operations, "durable worker started");
        loop {
            if tokio::time::Instant::now() >= next_rescue {
                match self.rescue().await {
                    Ok(n) => stats.rescued += n,
                    Err(e) => {
                        stats.store_errors += 1;
                        tracing::error!(target: TARGET, error = %e, "lease rescue failed");
                    }
                }
                // Checked: a `rescue_interval` of `Duration::MAX` means "hardly ever", not a
                // panic.
                let now = tokio::time::Instant::now();
                next_rescue = now
                    .checked_add(cfg.rescue_interval)
                    .unwrap_or(now + Duration::from_secs(86_400 * 365));
                alerts_due = true;
            }
            // Enabled before claiming, so a hand-off committed during the claim still wakes us.
            let handed_off = signal.notified();
            tokio::pin!(handed_off);
            handed_off.as_mut().enable();
            if woken {
                // Hand-offs arriving faster than claims return are taken together (see
                // `HAND_OFF_COALESCE`); one that finds the worker idle is claimed at once.
                tokio::time::sleep_until(last_claim + HAND_OFF_COALESCE).await;
                woken = false;
            }
            last_claim = tokio::time::Instant::now();
            let free = cfg.concurrency.saturating_sub(set.len());
            let want = u32::try_from(free).unwrap_or(u32::MAX).min(cfg.batch_size);
            let mut claimed = 0;
            if want > 0 {
                match self.claim_into(want, &mut set, &mut inflight).await {
                    Ok(n) => {
                        claimed = n;
                        stats.claimed += n as u64;
                    }
                    Err(e) => {
                        stats.store_errors += 1;
                        tracing::error!(target: TARGET, error = %e, "claim failed");
                    }
                }
            }
            if alerts_due {
                match self.dispatch_alerts().await {
                    Ok(n) => {
                        stats.alerted += n;
                        alerts_due = false;
                    }
                    Err(e) => {
                        stats.store_errors += 1;
                        tracing::error!(target: TARGET, error = %e, "alert dispatch failed");
                    }
                }
            }
            // A full batch suggests more is due: claim again at once while there is room, or
            // as soon as an attempt frees a slot. Otherwise poll.
            let more_due = want > 0 && claimed == want as usize;
            let has_room = set.len() < cfg.concurrency;
            let wait = if more_due && has_room {
                Duration::ZERO
            } else {
                cfg.poll_interval
            };
            let wake_on_join = more_due || !has_room;
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    biased;
                    () = &mut shutdown => {
                        stats.absorb(self.shut_down(set, inflight).await);
                        tracing::info!(target: TARGET, worker = %self.inner.id, ?stats,
                            "durable worker stopped");
                        return stats;
                    }
                    Some(joined) = set.join_next_with_id(), if !set.is_empty() => {
                        let settled = self.settle(joined, &mut inflight).await;
                        alerts_due |= settled.failed > 0;
                        stats.absorb(settled);
                        let free = cfg.concurrency.saturating_sub(set.len());
                        if wake_on_join && (free >= refill || set.is_empty()) { break; }
                    }
                    () = &mut handed_off, if set.len() < cfg.concurrency => {
                        woken = true;
                        break;
                    }
                    () = &mut sleep => break,
                }
            }
        }
    }

    async fn shut_down(
        &self,
        mut set: JoinSet<Outcome>,
        mut inflight: HashMap<tokio::task::Id, Claimed>,
    ) -> WorkerStats {
        let mut stats = WorkerStats::default();
        let grace = tokio::time::sleep(self.inner.config.shutdown_grace);
        tokio::pin!(grace);
        while !set.is_empty() {
            tokio::select! {
                Some(joined) = set.join_next_with_id() => {
                    stats.absorb(self.settle(joined, &mut inflight).await);
                }
                () = &mut grace => break,
            }
        }
        set.abort_all();
        while let Some(joined) = set.join_next_with_id().await {
            stats.absorb(self.settle(joined, &mut inflight).await);
        }
        stats
    }

    async fn rescue(&self) -> Result<u64, DurableError> {
        let inner = &self.inner;
        let rescued = inner
            .store
            .rescue_expired(
                inner.config.batch_size.max(64),
                inner.config.backoff,
                inner.clock.now(),
            )
            .await?;
        for r in &rescued {
            tracing::warn!(
                target: TARGET,
                event = "rescue",
                task_id = r.task_id.0,
                previous_owner = %r.previous_owner,
                attempt = r.attempt,
                new_status = %r.new_status,
                rescuer = %inner.id,
                "expired lease rescued"
            );
        }
        Ok(rescued.len() as u64)
    }

    async fn claim_into(
        &self,
        want: u32,
        set: &mut JoinSet<Outcome>,
        inflight: &mut HashMap<tokio::task::Id, Claimed>,
    ) -> Result<usize, DurableError> {
        let inner = &self.inner;
        let now = inner.clock.now();
        let tasks = inner
            .store
            .claim(
                &inner.id,
                &inner.operations,
                want,
                now.saturating_add(inner.config.lease),
                now,
            )
            .await?;
        let n = tasks.len();
        for task in tasks {
            tracing::debug!(
                target: TARGET,
                event = "claim",
                task_id = task.id.0,
                operation = %task.operation,
                attempt = task.retry_count,
                worker = %inner.id,
                "claimed"
            );
            let Some(fence) = task.fence() else { continue };
            let claimed = Claimed {
                fence,
                max_attempts: task.max_attempts,
                operation: task.operation.clone(),
            };
            let worker = self.clone();
            let handle = set.spawn(async move { worker.attempt(task).await });
            inflight.insert(handle.id(), claimed);
        }
        Ok(n)
    }

    async fn attempt(&self, task: Task) -> Outcome {
        let inner = &self.inner;
        let Some(fence) = task.fence() else {
            return Outcome::LeaseLost;
        };
        let claimed = Claimed {
            fence,
            max_attempts: task.max_attempts,
            operation: task.operation.clone(),
        };
        // A task claimed long ago (the process was stopped and resumed, or starved) may have
        // been rescued and taken by another worker since: running it now would repeat its side
        // effect, and the fence would only refuse the result afterwards. Run it only if the
        // attempt can end within the lease; otherwise give the lease back (a no-op if it was
        // taken over) and leave the task to whoever holds it.
        let now = inner.clock.now();
        let fits = task
            .locked_until
            .is_some_and(|until| now.saturating_add(inner.config.attempt_timeout) < until);
        if !fits {
            tracing::warn!(target: TARGET, event = "stale_claim", task_id = task.id.0,
                attempt = claimed.fence.attempt, worker = %inner.id, locked_until = ?task.locked_until,
                %now, "claimed too long ago to finish within the lease; not running it");
            return match inner.store.release(&claimed.fence, now).await {
                Ok(true) => Outcome::Released,
                Ok(false) => Outcome::LeaseLost,
                Err(e) => {
                    tracing::error!(target: TARGET, task_id = task.id.0, error = %e,
                        "could not give back a stale lease; it will expire and be rescued");
                    Outcome::StoreError
                }
            };
        }
        let result = match inner.handlers.get(&task.operation) {
            Some(handler) => {
                // `fits` found the lease's end; the handler may ask for it (`Lease::current`).
                let until = task.locked_until.unwrap_or(now);
                let lease = Lease::new(task.id, task.retry_count, until, inner.clock.clone());
                let fut = lease.clone().in_sync(|| handler.call(context_of(&task)));
                match tokio::time::timeout(inner.config.attempt_timeout, lease.scope(fut)).await {
                    Ok(r) => r,
                    Err(_) => Err(AttemptError::retry(format!(
                        "attempt timed out after {:?}",
                        inner.config.attempt_timeout
                    ))),
                }
            }
            // Unreachable by construction (claims filter on registered operations).
            None => Err(AttemptError::retry(format!(
                "worker `{}` has no handler for operation `{}`",
                inner.id, task.operation
            ))),
        };
        self.finish(&claimed, result).await
    }

    async fn finish(
        &self,
        c: &Claimed,
        mut result: Result<Option<Vec<u8>>, AttemptError>,
    ) -> Outcome {
        let inner = &self.inner;
        let now = inner.clock.now();
        let f = &c.fence;
        let output = result.as_mut().ok().and_then(Option::take);
        let written = match &result {
            Ok(_) => self.record_success(f, output).await,
            Err(AttemptError::Permanent { message }) => inner
                .store
                .mark_failed(f, message, now)
                .await
                .map_err(|e| e.to_string()),
            Err(AttemptError::Retry { message, .. }) if f.attempt >= c.max_attempts => {
                let msg = format!("{message} (attempt {} of {})", f.attempt, c.max_attempts);
                inner
                    .store
                    .mark_failed(f, &msg, now)
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(AttemptError::Retry {
                message,
                retry_after,
            }) => {
                let backoff = inner.config.backoff;
                let wait = self
                    .backoff_after(f.attempt)
                    .max(retry_after.unwrap_or_default().min(backoff.max_backoff));
                inner
                    .store
                    .retry_later(f, message, now.saturating_add(wait), now)
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        let task_id = f.task_id.0;
        match written {
            Err(e) => {
                tracing::error!(target: TARGET, task_id, attempt = f.attempt, error = %e,
                    "could not record the attempt's outcome; the lease will expire and be rescued");
                Outcome::StoreError
            }
            Ok(false) => {
                tracing::warn!(target: TARGET, event = "lease_lost", task_id, attempt = f.attempt,
                    worker = %f.owner, "lease was taken over before the outcome was recorded; outcome dropped");
                Outcome::LeaseLost
            }
            Ok(true) => match result {
                Ok(_) => {
                    tracing::info!(target: TARGET, event = "complete", task_id,
                        operation = %c.operation, attempt = f.attempt, "durable task succeeded");
                    Outcome::Succeeded
                }
                Err(AttemptError::Retry { message, .. }) if f.attempt < c.max_attempts => {
                    tracing::warn!(target: TARGET, event = "retry", task_id,
                        operation = %c.operation, attempt = f.attempt,
                        max_attempts = c.max_attempts, error = %message,
                        "durable attempt failed; retrying after backoff");
                    Outcome::Retried
                }
                Err(e) => {
                    tracing::error!(target: TARGET, event = "fail", task_id,
                        operation = %c.operation, attempt = f.attempt, error = %e,
                        "durable task failed");
                    Outcome::Failed
                }
            },
        }
    }

    /// The wait after failed attempt `attempt`, its jitter drawn from the worker's
    /// (seedable) randomness.
    fn backoff_after(&self, attempt: u32) -> Duration {
        let mut rng = self
            .inner
            .jitter
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.inner
            .config
            .backoff
            .delay(attempt, Duration::ZERO, &mut rng)
    }

    /// Records a success through the completer, which writes many in one statement: while one
    /// write is in flight the next successes queue and go together in the next.
    async fn record_success(&self, fence: &Fence, output: Option<Vec<u8>>) -> Result<bool, String> {
        let completion = Completion {
            fence: fence.clone(),
            output,
        };
        let (reply, written) = oneshot::channel();
        match self.completer().send((completion, reply)) {
            Ok(()) => match written.await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(message)) => Err(message),
                Err(_) => Err("the completer stopped before recording the success".to_owned()),
            },
            Err(mpsc::error::SendError((completion, _))) => {
                self.complete_alone(fence, completion.output).await
            }
        }
    }

    async fn complete_alone(&self, fence: &Fence, output: Option<Vec<u8>>) -> Result<bool, String> {
        let inner = &self.inner;
        inner
            .store
            .complete(fence, output.as_deref(), inner.clock.now())
            .await
            .map_err(|e| e.to_string())
    }

    /// The completer's queue, starting it on this runtime if it is not running.
    fn completer(&self) -> mpsc::UnboundedSender<Pending> {
        let mut slot = self
            .inner
            .completer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        // The task holds the store and clock, not the worker: it ends when the worker (the
        // queue's last sender) is dropped.
        tokio::spawn(complete_batches(
            self.inner.store.clone(),
            Arc::clone(&self.inner.clock),
            rx,
        ));
        *slot = Some(tx.clone());
        tx
    }

    async fn settle(
        &self,
        joined: Result<(tokio::task::Id, Outcome), JoinError>,
        inflight: &mut HashMap<tokio::task::Id, Claimed>,
    ) -> WorkerStats {
        match joined {
            Ok((id, outcome)) => {
                inflight.remove(&id);
                outcome.stats()
            }
            Err(e) => {
                let Some(claimed) = inflight.remove(&e.id()) else {
                    return WorkerStats::default();
                };
                if e.is_panic() {
                    // A panicking handler is a bug, but the task must not stay leased for the
                    // whole lease: count it as a failed attempt.
                    self.finish(&claimed, Err(AttemptError::retry("handler panicked")))
                        .await
                        .stats()
                } else {
                    self.release(&claimed).await
                }
            }
        }
    }

    async fn release(&self, c: &Claimed) -> WorkerStats {
        let inner = &self.inner;
        let mut stats = WorkerStats::default();
        match inner.store.release(&c.fence, inner.clock.now()).await {
            Ok(true) => {
                stats.released = 1;
                tracing::info!(target: TARGET, event = "release", task_id = c.fence.task_id.0,
                    attempt = c.fence.attempt, "lease released at shutdown");
            }
            Ok(false) => {}
            Err(e) => {
                stats.store_errors = 1;
                tracing::error!(target: TARGET, task_id = c.fence.task_id.0, error = %e,
                    "could not release a lease at shutdown; it will expire and be rescued");
            }
        }
        stats
    }

    /// Delivers owed alerts for failed tasks (also run by [`tick`](Self::tick) and
    /// [`run`](Self::run)). Returns how many were delivered.
    pub async fn dispatch_alerts(&self) -> Result<u64, DurableError> {
        let inner = &self.inner;
        let now = inner.clock.now();
        let owed = inner
            .store
            .claim_alerts(
                inner.config.batch_size,
                now.saturating_add(inner.config.alert_lease),
                now,
            )
            .await?;
        let mut delivered = 0;
        for task in owed {
            let task_id = task.id;
            tracing::error!(target: TARGET, event = "alert", task_id = task_id.0,
                operation = %task.operation, idempotency_key = %task.idempotency_key,
                attempts = task.retry_count,
                last_error = task.last_error.as_deref().unwrap_or(""),
                "durable task failed for good; a human must look");
            let call = inner.alert.alert(task);
            match tokio::time::timeout(inner.config.alert_lease, call).await {
                Ok(Ok(())) => {
                    if inner.store.ack_alert(task_id, inner.clock.now()).await? {
                        delivered += 1;
                    }
                }
                Ok(Err(e)) => tracing::warn!(target: TARGET, task_id = task_id.0, error = %e,
                    "alert hook failed; the alert stays owed and is retried after the alert lease"),
                Err(_) => tracing::warn!(target: TARGET, task_id = task_id.0,
                    "alert hook timed out; the alert stays owed and is retried after the alert lease"),
            }
        }
        Ok(delivered)
    }
}

/// Writes queued successes, as many as are waiting (up to [`COMPLETION_BATCH`]) per statement,
/// each fenced on its claim, and tells each attempt whether its success was recorded.
async fn complete_batches<S: DurableStore>(
    store: S,
    clock: Arc<dyn Clock>,
    mut queue: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::new();
    let started = tokio::time::Instant::now();
    let mut last_write = started.checked_sub(HAND_OFF_COALESCE).unwrap_or(started);
    loop {
        // Successes arriving one by one are written together (see `HAND_OFF_COALESCE`); a
        // drain's large batches take longer than that to write anyway.
        tokio::time::sleep_until(last_write + HAND_OFF_COALESCE).await;
        if queue.recv_many(&mut batch, COMPLETION_BATCH).await == 0 {
            break;
        }
        last_write = tokio::time::Instant::now();
        let (done, replies): (Vec<Completion>, Vec<_>) = batch.drain(..).unzip();
        match store.complete_many(&done, clock.now()).await {
            Ok(written) => {
                let written: HashSet<TaskId> = written.into_iter().collect();
                for (c, reply) in done.iter().zip(replies) {
                    let _ = reply.send(Ok(written.contains(&c.fence.task_id)));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for reply in replies {
                    let _ = reply.send(Err(message.clone()));
                }
            }
        }
    }
}
