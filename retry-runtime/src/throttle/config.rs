//! The throttle's settings, their defaults and the reasons for them.

use std::time::Duration;

/// Adaptive admission settings of one upstream (on by default; `[upstreams.<name>.throttle]`
/// or [`UpstreamConfig::with_throttle`](crate::UpstreamConfig::with_throttle) tune or disable
/// it); see the [module docs](super).
///
/// # Default
/// - `multiplier`: 3.0 (the first attempts of an upstream that accepts a third or more of what
///   it gets all pass; the SRE book suggests 2, but at 2 an upstream failing half its requests
///   at random sits on the edge, and the noise of a short window then refuses calls one
///   attempt would complete. A flaky upstream is the budget's to protect; the throttle is for
///   one that stops accepting)
/// - `window`: 500 ms (what "currently" means: the throttle reacts within it to an upstream
///   that stops accepting, and forgets a burst of failures within it once the upstream accepts
///   again; a longer window keeps a recovered upstream throttled for as long)
/// - `retry_multiplier`: 1.0 (a retry is extra work: it goes through in the proportion the
///   upstream accepts, so an overloaded upstream gets none)
/// - `wait`: true (a refused call waits, within its deadline and the hold, to be let go,
///   instead of failing at once: without it no retry helps through an outage of a moment; see
///   [holding](super#holding). `false` fails refused calls at once)
/// - `hold`: 600 ms (a refused call waits only until the upstream has answered every attempt
///   with a failure for this long: one that has accepted nothing for more than half a second
///   is more likely down than restarting, and holding its callers to their deadlines passes
///   the outage up to theirs, so they learn it within a second instead, a hop and an attempt
///   included. Writes that must outlast an outage go to the durable queue instead)
/// - `max_waiting`: 256 (calls waiting for one upstream at once; a further refused call fails
///   at once. The backlog drains at the pace of the upstream's answers, so a longer one mostly
///   waits out its callers' deadlines while holding their memory and their callers)
/// - `release_ratio`: 0.25 (waiting calls go at up to this many per answer the upstream
///   accepts from the other calls, less one per timeout: with the new calls they stay within
///   1.25 times what it currently accepts, under the headroom a service sized for its traffic
///   usually has, never a burst. The calls the backlog holds failed an attempt in the fault,
///   as they would have without retry: a slower drain costs nothing against no retry, a
///   faster one risks the upstream's recovery)
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ThrottleConfig {
    /// How many times what the upstream accepts a call's first attempts may reach (at least 1).
    pub multiplier: f64,
    /// The same for retries and hedges (at least 1): at 1, extra work reaches the upstream
    /// only in the proportion it accepts.
    pub retry_multiplier: f64,
    /// How long an attempt counts (500 ms to 600 s).
    pub window: Duration,
    /// Whether a refused call waits for the upstream to accept again (see
    /// [holding](super#holding)), or fails at once.
    pub wait: bool,
    /// How recently the upstream must have accepted an attempt for a refused call to wait
    /// (100 ms to 60 s).
    pub hold: Duration,
    /// How many calls may wait for this upstream at once (1 to 100,000).
    pub max_waiting: u32,
    /// Waiting calls let go per answer the upstream accepts from the other calls (0.1 to 10).
    pub release_ratio: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig::new()
    }
}

impl ThrottleConfig {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        ThrottleConfig {
            multiplier: 3.0,
            retry_multiplier: 1.0,
            window: Duration::from_millis(500),
            wait: true,
            hold: Duration::from_millis(600),
            max_waiting: 256,
            release_ratio: 0.25,
        }
    }

    /// Sets the multiplier.
    pub const fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Sets the retry multiplier.
    pub const fn with_retry_multiplier(mut self, retry_multiplier: f64) -> Self {
        self.retry_multiplier = retry_multiplier;
        self
    }

    /// Sets the window.
    pub const fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets whether a refused call waits for the upstream to accept again.
    pub const fn with_wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// Sets how recently the upstream must have accepted for a refused call to wait.
    pub const fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Sets how many calls may wait for the upstream at once.
    pub const fn with_max_waiting(mut self, max_waiting: u32) -> Self {
        self.max_waiting = max_waiting;
        self
    }

    /// Sets how many waiting calls go per answer the upstream accepts from the others.
    pub const fn with_release_ratio(mut self, release_ratio: f64) -> Self {
        self.release_ratio = release_ratio;
        self
    }

    /// Every rule broken, as (field, message naming the fix).
    pub fn violations(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if !(self.multiplier.is_finite() && (1.0..=100.0).contains(&self.multiplier)) {
            v.push((
                "throttle.multiplier",
                format!(
                    "throttle multiplier {} is outside 1..=100 (below 1 it refuses a healthy \
                     upstream's calls): use 3",
                    self.multiplier
                ),
            ));
        }
        if !(self.retry_multiplier.is_finite() && (1.0..=100.0).contains(&self.retry_multiplier)) {
            v.push((
                "throttle.retry_multiplier",
                format!(
                    "throttle retry_multiplier {} is outside 1..=100: use 1",
                    self.retry_multiplier
                ),
            ));
        }
        if self.window < Duration::from_millis(500) || self.window > Duration::from_secs(600) {
            v.push((
                "throttle.window",
                format!(
                    "throttle window {:?} is outside 500ms..=600s: use 500ms",
                    self.window
                ),
            ));
        }
        if self.hold < Duration::from_millis(100) || self.hold > Duration::from_secs(60) {
            v.push((
                "throttle.hold",
                format!(
                    "throttle hold {:?} is outside 100ms..=60s: use 600ms (refused calls wait \
                     only until the upstream has failed everything for this long)",
                    self.hold
                ),
            ));
        }
        if !(1..=100_000).contains(&self.max_waiting) {
            v.push((
                "throttle.max_waiting",
                format!(
                    "throttle max_waiting {} is outside 1..=100000: use 256 (set wait = false \
                     to fail refused calls at once)",
                    self.max_waiting
                ),
            ));
        }
        if !(self.release_ratio.is_finite() && (0.1..=10.0).contains(&self.release_ratio)) {
            v.push((
                "throttle.release_ratio",
                format!(
                    "throttle release_ratio {} is outside 0.1..=10: use 0.25",
                    self.release_ratio
                ),
            ));
        }
        v
    }
}
