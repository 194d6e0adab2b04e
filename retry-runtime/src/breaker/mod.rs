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
use std::time::Duration;

use tokio::time::Instant;

use crate::category::PermanentCategory;
use crate::decision::Failure;
use crate::evidence::Evidence;
use crate::window::{Clock, Counter, Tick};

/// Breaker settings of one upstream.
///
/// # Default
/// - `failure_rate`: 0.8 (opens when four attempts in five fail: the upstream is down, not
///   flaky; see below)
/// - `min_attempts`: 20 (no verdict on fewer attempts)
/// - `window`: 10 s
/// - `open_for`: 5 s
/// - `half_open_probes`: 3
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Failure fraction (0..=1) at which the breaker opens.
    ///
    /// The default, 0.8, leaves a partly failing upstream to the retry budget and opens only
    /// for one that is down. The breaker counts every attempt, retries included, and refuses
    /// first attempts too: at 0.5 it opens on an upstream that fails half its requests at
    /// random, where one attempt succeeds half the time and three succeed seven times in
    /// eight, and then refuses everything for `open_for`; its probes (all must succeed) then
    /// close it one time in eight. The outage lab measured it: at 0.5 the library's defaults
    /// ended far below no retry at all wherever the catalog failed about half its requests
    /// (5 % against 51 %), and at 0.8 above it (84-87 %), while a dead catalog still got 0.14
    /// calls per operation. What a partly failing upstream needs is a bound on the load
    /// retries add, which the budget is; the breaker is for the upstream where even first
    /// attempts are wasted.
    pub failure_rate: f64,
    /// Attempts needed in the window before the rate is judged.
    pub min_attempts: u32,
    /// How long an attempt counts.
    pub window: Duration,
    /// How long the breaker stays open before probing (above zero, at most 2^64 ns: about 584
    /// years, as long as its clock counts).
    pub open_for: Duration,
    /// Probe attempts let through while half-open; all must succeed to close.
    pub half_open_probes: u32,
}

/// The longest `open_for` the breaker's clock can count: it keeps times as nanoseconds in a
/// `u64`.
const MAX_OPEN_FOR: Duration = Duration::from_nanos(u64::MAX);

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig::new()
    }
}

impl BreakerConfig {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        BreakerConfig {
            failure_rate: 0.8,
            min_attempts: 20,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
        }
    }

    /// Every rule broken, as (field, message naming the fix).
    pub fn violations(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if !(self.failure_rate.is_finite() && self.failure_rate > 0.0 && self.failure_rate <= 1.0) {
            v.push((
                "breaker.failure_rate",
                format!(
                    "breaker failure_rate {} is outside (0, 1]: use 0.8",
                    self.failure_rate
                ),
            ));
        }
        if self.min_attempts == 0 {
            v.push((
                "breaker.min_attempts",
                "breaker min_attempts must be at least 1: use 20".to_owned(),
            ));
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(600) {
            v.push((
                "breaker.window",
                format!(
                    "breaker window {:?} is outside 1s..=600s: use 10s",
                    self.window
                ),
            ));
        }
        if self.open_for.is_zero() {
            v.push((
                "breaker.open_for",
                "breaker open_for must be above zero: use 5s".to_owned(),
            ));
        } else if self.open_for > MAX_OPEN_FOR {
            v.push((
                "breaker.open_for",
                format!(
                    "breaker open_for {:?} is longer than the breaker's clock counts (2^64 ns, \
                     about 584 years): use 5s",
                    self.open_for
                ),
            ));
        }
        if self.half_open_probes == 0 {
            v.push((
                "breaker.half_open_probes",
                "breaker half_open_probes must be at least 1: use 3".to_owned(),
            ));
        }
        v
    }
}

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts flow; outcomes are counted.
    Closed,
    /// Attempts fail fast.
    Open,
    /// A few probe attempts are let through.
    HalfOpen,
}

impl BreakerState {
    /// The stable name used in traces and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

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

/// Admission to one attempt: hand it to [`CircuitBreaker::record`] when the attempt ends.
///
/// Dropped unrecorded (the attempt never started, was cancelled, or says nothing about the
/// upstream), it gives its place back: a half-open breaker's probe slot is freed at once for
/// another attempt, instead of waiting out another `open_for` for a verdict that never comes.
#[derive(Debug)]
#[must_use]
pub struct Admission {
    /// For a half-open probe: the round it was admitted in (a closed breaker's admission holds
    /// nothing).
    probe: Option<Probe>,
}

/// A probe admission's claim on its round's probe slots.
#[derive(Debug)]
struct Probe {
    probes: Arc<Probes>,
    round: u32,
    /// Recorded: its slot stays taken (its verdict counted), so dropping it gives nothing back.
    recorded: bool,
}

/// The probe slots taken in the current half-open round: the round's number in the high 32
/// bits, the probes started in it in the low 32, so a probe from an earlier round can never be
/// given back into a later one.
#[derive(Debug, Default)]
struct Probes(AtomicU64);

impl Probes {
    /// Starts a new round with `started` probes already taken: its number.
    fn new_round(&self, started: u32) -> u32 {
        let next = |s: u64| (s >> 32).wrapping_add(1) & u64::from(u32::MAX);
        let previous = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((next(s) << 32) | u64::from(started))
            })
            .unwrap_or_else(|s| s);
        next(previous) as u32
    }

    /// Takes a probe slot if fewer than `max` are taken: the round it was taken in.
    fn take(&self, max: u32) -> Option<u32> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                ((s as u32) < max).then_some(s + 1)
            })
            .ok()
            .map(|s| (s >> 32) as u32)
    }

    /// Gives back a slot taken in `round`, if that round is still the current one.
    fn give_back(&self, round: u32) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                ((s >> 32) as u32 == round && s as u32 > 0).then(|| s - 1)
            });
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.recorded {
            self.probes.give_back(self.round);
        }
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

    /// Reports a change of state: an event, and `retry.breaker.transitions{upstream, to}`
    /// (feature `metrics`), so a dashboard sees every opening, even one that closed again
    /// between two scrapes of the state gauge.
    fn transitioned(&self, to: BreakerState) {
        let upstream = &*self.name;
        match to {
            BreakerState::Open => {
                tracing::warn!(target: "retry_runtime::breaker", upstream, "circuit opened: failing fast");
            }
            BreakerState::HalfOpen => {
                tracing::info!(target: "retry_runtime::breaker", upstream, "circuit half-open: probing");
            }
            BreakerState::Closed => {
                tracing::info!(target: "retry_runtime::breaker", upstream, "circuit closed");
            }
        }
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "retry.breaker.transitions",
            "upstream" => upstream.to_owned(),
            "to" => to.as_str()
        )
        .increment(1);
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
                        self.transitioned(BreakerState::HalfOpen);
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
                self.transitioned(BreakerState::Closed);
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
            self.transitioned(BreakerState::Open);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig {
            min_attempts: 4,
            failure_rate: 0.5,
            half_open_probes: 2,
            ..BreakerConfig::new()
        })
    }

    /// An `open_for` longer than the breaker's nanosecond clock can hold is refused by
    /// validation, located at its key; a breaker built with one anyway stays open (it does not
    /// wrap round to a fraction of a second).
    #[tokio::test(start_paused = true)]
    async fn an_open_for_beyond_the_clock_is_refused_and_never_wraps() {
        let huge = Duration::from_secs(18_446_744_074);
        let config = BreakerConfig {
            open_for: huge,
            min_attempts: 1,
            ..BreakerConfig::new()
        };
        let errors = crate::registry::Registry::builder()
            .upstream(
                "bank",
                crate::config::UpstreamConfig::new().with_breaker(Some(config)),
            )
            .build()
            .unwrap_err();
        assert_eq!(errors.0.len(), 1, "{errors}");
        assert_eq!(errors.0[0].field, "breaker.open_for", "{errors}");
        assert_eq!(errors.0[0].upstream, "bank", "{errors}");
        assert!(errors.0[0].message.contains("584 years"), "{errors}");
        let longest = BreakerConfig {
            open_for: Duration::from_nanos(u64::MAX),
            ..config
        };
        assert_eq!(longest.violations(), vec![]);

        let b = CircuitBreaker::new(config);
        b.record(b.admit().unwrap(), true);
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(b.state(), BreakerState::Open, "still open an hour later");
        assert!(b.admit().is_none());
    }

    /// The default: a flaky upstream (half its attempts fail) is left to the retries and their
    /// budget; an upstream that fails four attempts in five is down, and the breaker opens.
    #[tokio::test(start_paused = true)]
    async fn by_default_half_failing_keeps_it_closed_and_four_in_five_opens_it() {
        assert_eq!(BreakerConfig::new().failure_rate, 0.8);
        let b = CircuitBreaker::new(BreakerConfig::new());
        for i in 0..100 {
            b.record(b.admit().unwrap(), i % 2 == 0);
        }
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "50 % failures: flaky, not down"
        );
        let b = CircuitBreaker::new(BreakerConfig::new());
        for i in 0..19 {
            b.record(b.admit().unwrap(), i % 5 != 0);
        }
        assert_eq!(b.state(), BreakerState::Closed, "below min_attempts");
        b.record(b.admit().unwrap(), true); // 16 of 20 = 0.8
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_on_the_failure_rate_fails_fast_and_recovers_through_half_open() {
        let b = breaker();
        for failed in [false, true, false] {
            b.record(b.admit().unwrap(), failed);
        }
        assert_eq!(b.state(), BreakerState::Closed, "below min_attempts");
        b.record(b.admit().unwrap(), true); // 2 of 4 = 0.5
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.admit().is_none(), "fails fast while open");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let p1 = b.admit().unwrap();
        let p2 = b.admit().unwrap();
        assert!(b.admit().is_none(), "only the probes pass");
        b.record(p1, false);
        b.record(p2, false);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.admit().is_some());
    }

    /// A probe admission dropped unrecorded (its attempt never started, or was cancelled) frees
    /// its slot at once; one from an earlier round never frees a slot of a later round.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_gives_its_slot_back_in_its_own_round_only() {
        let b = breaker();
        for _ in 0..4 {
            b.record(b.admit().unwrap(), true);
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        let p1 = b.admit().unwrap();
        let p2 = b.admit().unwrap();
        assert!(b.admit().is_none(), "both probe slots taken");
        drop(p2);
        let p3 = b.admit().expect("the dropped probe's slot is free again");
        b.record(p3, true);
        assert_eq!(b.state(), BreakerState::Open, "a failed probe reopens");
        tokio::time::advance(Duration::from_secs(5)).await;
        let q1 = b.admit().unwrap();
        let q2 = b.admit().unwrap();
        drop(p1); // from the round before: frees nothing now
        assert!(b.admit().is_none(), "the new round's slots are both taken");
        b.record(q1, false);
        b.record(q2, false);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens() {
        let b = breaker();
        for _ in 0..4 {
            b.record(b.admit().unwrap(), true);
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        let p = b.admit().unwrap();
        b.record(p, true);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.admit().is_none());
    }

    /// An attempt longer than the window is counted at its start, in the slot that now holds
    /// the newest counts: it must not erase them (here, the successes that keep the rate low).
    #[tokio::test(start_paused = true)]
    async fn a_late_attempt_does_not_erase_newer_counts() {
        let b = CircuitBreaker::new(BreakerConfig {
            min_attempts: 4,
            window: Duration::from_secs(1),
            ..BreakerConfig::new()
        });
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..3 {
            b.record(b.admit().unwrap(), true);
        }
        tokio::time::advance(Duration::from_millis(300)).await;
        for _ in 0..12 {
            b.record(b.admit().unwrap(), false);
        }
        // Started 1 s ago (a whole window): outside the window, and lands in the newest slot.
        let started = Instant::now() - Duration::from_secs(1);
        b.record_at(b.admit().unwrap(), true, started);
        b.record(b.admit().unwrap(), true);
        // 4 failures of 16 attempts in the window: 25 %, below the 50 % threshold.
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.successes.sum(b.clock.epoch()), 12);
        assert_eq!(b.failures.sum(b.clock.epoch()), 4);
    }

    #[test]
    fn what_counts_as_an_upstream_failure() {
        assert!(is_upstream_failure(&Failure::status(503)));
        assert!(is_upstream_failure(&Failure::status(429)));
        assert!(!is_upstream_failure(&Failure::status(404)));
        assert!(is_upstream_failure(&Failure::new(Evidence::SentNoResponse)));
        assert!(is_upstream_failure(&Failure::new(Evidence::NotSent)));
        let mut local = Failure::new(Evidence::NotSent);
        local.rejection = Some(crate::category::Rejection::CircuitOpen);
        assert!(!is_upstream_failure(&local));
    }

    #[test]
    fn connection_rotation_is_not_an_upstream_failure() {
        // GOAWAY NO_ERROR (sent, maybe processed), REFUSED_STREAM or a request handed back.
        assert!(!is_upstream_failure(
            &Failure::new(Evidence::SentNoResponse).rotated()
        ));
        assert!(!is_upstream_failure(
            &Failure::new(Evidence::NotSent).rotated()
        ));
        // A connect failure is NotSent too, and does say the upstream is down.
        assert!(is_upstream_failure(&Failure::new(Evidence::NotSent)));
        // A reset after the request was sent, a timeout: the upstream may be failing.
        assert!(is_upstream_failure(&Failure::new(Evidence::SentNoResponse)));
    }
}
