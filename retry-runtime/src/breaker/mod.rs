//! The per-upstream circuit breaker: stop sending when most attempts fail.
//!
//! Retries help with blips; during an outage they only add load. The breaker counts **every
//! attempt** (not every call, so retries are seen) over a sliding window; when the failure
//! rate passes the threshold it opens, and attempts fail fast locally with
//! [`Evidence::NotSent`](crate::Evidence) and the denial reason `circuit_open`, without touching
//! the network. After `open_for` it lets a few probe attempts through (half-open): if they all
//! succeed it closes, if one fails it opens again.
//!
//! ## Why not an existing crate
//! `failsafe` (last release 2024) and `recloser` wrap a call with their own failure predicate;
//! `tower-resilience` is a family of tower layers. Ours must count *attempts* inside our loop,
//! with failure defined by execution evidence (a 4xx is the upstream working; a refused
//! connection or a 503 is not), share one lock-free state per upstream, and report its state
//! for metrics. That is a hundred lines on the window counters the budget already uses.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use tokio::time::Instant;

use crate::category::PermanentCategory;
use crate::decision::Failure;
use crate::evidence::Evidence;
use crate::window::{Clock, Counter, Tick};

mod admission;
mod config;
mod events;
mod state;
pub use admission::Admission;
use admission::{Probe, Probes};
pub use config::BreakerConfig;
pub use state::BreakerState;
use state::{CLOSED, HALF_OPEN, OPEN};

/// Whether an attempt's outcome says the upstream is unhealthy. A response the upstream chose
/// to send (2xx, 3xx, 4xx other than 408/429) is the upstream working; our own local refusals
/// (invalid request, configuration, circuit or bulkhead) say nothing about it.
///
/// Neither does **connection rotation** ([`Failure::connection_rotated`]): a server closing a
/// healthy connection on purpose (HTTP/2 GOAWAY with `NO_ERROR`, `REFUSED_STREAM`, a pooled
/// HTTP/1.1 connection closed before the request was written). nginx does it after every
/// `keepalive_requests`, proxies after their request limit, every server on reload; counted as
/// failures, a few dozen concurrent requests on one rotating HTTP/2 connection open the breaker
/// against a perfectly healthy server. What still counts: 5xx (and 408/429), connect failures
/// (refused, DNS, connect timeout), timeouts, and resets or closes after the request was sent.
/// A rotation attempt is not recorded at all (neither failure nor success), so it does not
/// dilute the failure rate either.
pub fn is_upstream_failure(f: &Failure) -> bool {
    if f.connection_rotated
        || f.rejection.is_some()
        || matches!(
            f.permanent,
            Some(
                PermanentCategory::InvalidRequest
                    | PermanentCategory::Configuration
                    | PermanentCategory::Cancelled
            )
        )
    {
        return false;
    }
    match (f.evidence, f.status) {
        (Evidence::ResponseReceived, Some(s)) => s >= 500 || s == 408 || s == 429,
        (Evidence::ResponseReceived, None) => false,
        _ => true,
    }
}

/// A lock-free circuit breaker shared by every attempt to one upstream.
pub struct CircuitBreaker {
    config: BreakerConfig,
    clock: Clock,
    /// Each attempt is counted once, in one of the two: attempts = successes + failures.
    successes: Counter,
    failures: Counter,
    state: AtomicU8,
    opened_at_nanos: AtomicU64,
    /// The probes of the current half-open round (shared with their admissions, which give a
    /// probe back when dropped unrecorded).
    probes: Arc<Probes>,
    probes_succeeded: AtomicU32,
    /// The upstream's name, for the transition events and metrics.
    name: Arc<str>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("config", &self.config)
            .field("state", &self.state())
            .finish()
    }
}

impl CircuitBreaker {
    /// A closed breaker. The config is validated by the registry.
    pub fn new(config: BreakerConfig) -> Self {
        Self::counting_from(config, Instant::now())
    }

    /// A closed breaker whose window counts from `origin` (its registry's: see [`Tick`]).
    pub(crate) fn counting_from(config: BreakerConfig, origin: Instant) -> Self {
        CircuitBreaker {
            config,
            clock: Clock::new(config.window, origin),
            successes: Counter::default(),
            failures: Counter::default(),
            state: AtomicU8::new(CLOSED),
            opened_at_nanos: AtomicU64::new(0),
            probes: Arc::default(),
            probes_succeeded: AtomicU32::new(0),
            name: Arc::from(""),
        }
    }

    /// Names the upstream it guards, in its transition events and metrics.
    pub fn named(mut self, upstream: Arc<str>) -> Self {
        self.name = upstream;
        self
    }

    /// Its configuration.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    fn now_nanos(&self) -> u64 {
        Tick::at(self.clock.origin(), Instant::now()).nanos()
    }

    /// The current state (an open breaker whose wait is over reads as half-open).
    pub fn state(&self) -> BreakerState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => BreakerState::Closed,
            HALF_OPEN => BreakerState::HalfOpen,
            _ if self.open_elapsed() => BreakerState::HalfOpen,
            _ => BreakerState::Open,
        }
    }

    fn open_elapsed(&self) -> bool {
        let opened = self.opened_at_nanos.load(Ordering::Acquire);
        // Validation refuses longer; a breaker built without it stays open rather than wrap.
        let open_for = u64::try_from(self.config.open_for.as_nanos()).unwrap_or(u64::MAX);
        self.now_nanos().saturating_sub(opened) >= open_for
    }

    /// Asks to start an attempt: `None` means fail fast (open, or half-open with every probe
    /// slot taken).
    #[inline]
    pub fn admit(&self) -> Option<Admission> {
        // Closed, the common case: one load, inlined into the caller.
        if self.state.load(Ordering::Acquire) == CLOSED {
            return Some(Admission { probe: None });
        }
        self.admit_not_closed()
    }

    /// A probe admission in `round`.
    fn probe(&self, round: u32) -> Option<Admission> {
        Some(Admission {
            probe: Some(Probe {
                probes: self.probes.clone(),
                round,
                recorded: false,
            }),
        })
    }

    fn admit_not_closed(&self) -> Option<Admission> {
        loop {
            match self.state.load(Ordering::Acquire) {
                CLOSED => return Some(Admission { probe: None }),
                OPEN => {
                    if !self.open_elapsed() {
                        return None;
                    }
                    if self
                        .state
                        .compare_exchange(OPEN, HALF_OPEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        self.opened_at_nanos
                            .store(self.now_nanos(), Ordering::Release);
                        let _ = self.probes.new_round(0);
                        self.probes_succeeded.store(0, Ordering::Release);
                        events::transitioned(&self.name, BreakerState::HalfOpen);
                    }
                }
                _ => {
                    if let Some(round) = self.probes.take(self.config.half_open_probes) {
                        return self.probe(round);
                    }
                    // A probe whose attempt never ends (hung, never polled again) reports
                    // nothing: after another `open_for` without a verdict, start a fresh round.
                    if self.open_elapsed() {
                        self.opened_at_nanos
                            .store(self.now_nanos(), Ordering::Release);
                        let round = self.probes.new_round(1);
                        self.probes_succeeded.store(0, Ordering::Release);
                        return self.probe(round);
                    }
                    return None;
                }
            }
        }
    }

    /// Records the outcome of an admitted attempt.
    pub fn record(&self, admission: Admission, failed: bool) {
        self.record_at(admission, failed, Instant::now());
    }

    /// Records the outcome of an admitted attempt at `at`: when it ended, or, for a success
    /// that completed in its first poll, when it started (the window only needs slot
    /// resolution, so that saves a clock read). A failure is judged with the window ending
    /// at `at`, or later if a newer count moved it on.
    pub fn record_at(&self, admission: Admission, failed: bool, at: Instant) {
        self.record_on(admission, failed, Tick::at(self.clock.origin(), at));
    }

    /// [`record_at`](Self::record_at) at `tick`, on the clock of the breaker's origin.
    pub(crate) fn record_on(&self, admission: Admission, failed: bool, tick: Tick) {
        if let Some(mut probe) = admission.probe {
            probe.recorded = true;
            if failed {
                self.open();
            } else if self.probes_succeeded.fetch_add(1, Ordering::AcqRel) + 1
                >= self.config.half_open_probes
                && self
                    .state
                    .compare_exchange(HALF_OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                self.successes.clear();
                self.failures.clear();
                events::transitioned(&self.name, BreakerState::Closed);
            }
            return;
        }
        let epoch = self.clock.epoch_of(tick);
        if !failed {
            self.successes.add(epoch, 1);
            return;
        }
        // An attempt that started more than a window ago is outside the window: not counted,
        // and no reason to judge the rate again.
        if self.failures.add(epoch, 1) {
            let failures = self.failures.sum(epoch);
            let attempts = self.successes.sum(epoch) + failures;
            if attempts >= u64::from(self.config.min_attempts)
                && failures as f64 >= self.config.failure_rate * attempts as f64
            {
                self.open();
            }
        }
    }

    fn open(&self) {
        self.opened_at_nanos
            .store(self.now_nanos(), Ordering::Release);
        if self.state.swap(OPEN, Ordering::AcqRel) != OPEN {
            events::transitioned(&self.name, BreakerState::Open);
        }
    }
}

#[cfg(test)]
mod tests;
