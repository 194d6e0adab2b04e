//! The breaker's settings and the rules they must follow.

use std::time::Duration;

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
#[non_exhaustive]
pub struct BreakerConfig {
    /// Failure fraction (0..=1) at which the breaker opens.
    ///
    /// The default, 0.8, leaves a partly failing upstream to the retry budget and opens only
    /// for one that is down. The breaker counts every attempt, retries included, and refuses
    /// first attempts too: at 0.5 it opens on an upstream that fails half its requests at
    /// random, where one attempt succeeds half the time and three succeed seven times in
    /// eight, and then refuses everything for `open_for`; its probes (all must succeed) then
    /// close it one time in eight, so callers end far below what no retry at all would get.
    /// What a partly failing upstream needs is a bound on the load retries add, which the
    /// budget is; the breaker is for the upstream where even first attempts are wasted.
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

    /// Sets the failure fraction at which the breaker opens.
    pub const fn with_failure_rate(mut self, failure_rate: f64) -> Self {
        self.failure_rate = failure_rate;
        self
    }

    /// Sets the attempts needed in the window before the rate is judged.
    pub const fn with_min_attempts(mut self, min_attempts: u32) -> Self {
        self.min_attempts = min_attempts;
        self
    }

    /// Sets how long an attempt counts.
    pub const fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets how long the breaker stays open before probing.
    pub const fn with_open_for(mut self, open_for: Duration) -> Self {
        self.open_for = open_for;
        self
    }

    /// Sets the probe attempts let through while half-open.
    pub const fn with_half_open_probes(mut self, half_open_probes: u32) -> Self {
        self.half_open_probes = half_open_probes;
        self
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
