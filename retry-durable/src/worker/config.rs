//! The worker's settings, their defaults and their validation.

use std::time::Duration;

use retry_runtime::backoff::{Backoff, Jitter};

use crate::error::DurableError;

/// The shortest time between two claims (or two completion writes) prompted by hand-offs.
/// Claiming at each hand-off costs a statement per task at a steady rate of hand-offs (at
/// 1,000/s, a claim, a completion and the insert per task, each a round trip to the server);
/// on a busy machine that work is what makes hand-offs wait. Taking what arrived in the last
/// few milliseconds together costs a hand-off at most this much latency, and a worker that was
/// idle for longer claims at once.
pub(super) const HAND_OFF_COALESCE: Duration = Duration::from_millis(5);

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
/// - `concurrency`: 1,024 attempts in flight (in [`Worker::run`](crate::Worker::run))
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
/// defaults. They do not hurt a slow handler, because [`Worker::run`](crate::Worker::run) claims only as many
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
    pub(super) worker_id: Option<String>,
    pub(super) batch_size: u32,
    pub(super) concurrency: usize,
    pub(super) attempt_timeout: Duration,
    pub(super) lease: Duration,
    pub(super) poll_interval: Duration,
    pub(super) rescue_interval: Duration,
    pub(super) alert_lease: Duration,
    pub(super) shutdown_grace: Duration,
    pub(super) backoff: Backoff,
    pub(super) jitter_seed: Option<u64>,
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

    /// Sets the most tasks one claim takes ([`Worker::run`](crate::Worker::run) takes fewer when fewer slots are
    /// free).
    pub const fn with_batch_size(mut self, n: u32) -> Self {
        self.batch_size = n;
        self
    }

    /// Sets how many attempts run at once in [`Worker::run`](crate::Worker::run).
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

    /// Sets how long [`Worker::run`](crate::Worker::run) waits when nothing was due.
    pub const fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// Sets how often [`Worker::run`](crate::Worker::run) rescues expired leases.
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

    /// Seeds the randomness the backoff's jitter draws from (default: seeded from the OS): the
    /// waits after failed attempts and after rescued leases, so a test or a simulation sees
    /// the same retry times on every run.
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

    pub(super) fn validate(&self) -> Result<(), DurableError> {
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
