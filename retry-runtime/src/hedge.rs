//! Hedging settings: when a call sends a second copy of a safe request that is slower than
//! usual, and how many copies may be in flight.
//!
//! Retries fix failures; they do nothing for an upstream that answers, slowly, one request in a
//! hundred. A hedge sends another copy once the first has run longer than usual, takes the first
//! answer and cancels the rest ("The Tail at Scale", Dean and Barroso, 2013: a hedge deferred
//! until the 95th-percentile latency cuts the tail for a few percent more requests). A hedge is
//! an attempt: it counts in the operation's retry allowance, needs a retry budget token, the
//! breaker's admission and a free bulkhead slot, so a slow upstream under load stops receiving
//! hedges (a hedge storm is a retry storm).

use std::time::Duration;

/// The most copies of one request in flight at once (the first included): beyond three, more
/// copies multiply the load for little gain.
pub const MAX_COPIES: u32 = 3;

/// How an upstream is hedged (`None` in [`UpstreamConfig::hedge`]: never).
///
/// Exactly one of `delay` and `percentile` says when a hedge is sent.
///
/// # Default
/// | field | default | why |
/// |---|---|---|
/// | `delay` | none | a fixed wait after the previous copy started |
/// | `percentile` | none | the wait as a percentile of the upstream's recent attempt latency (95 is the usual choice) |
/// | `max_copies` | 2 | one hedge per attempt; 3 at most |
/// | `dedups_in_flight` | false | a keyed write is hedged only if the upstream promises to deduplicate concurrent copies |
///
/// [`UpstreamConfig::hedge`]: crate::UpstreamConfig::hedge
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HedgeConfig {
    /// A fixed wait before each further copy.
    pub delay: Option<Duration>,
    /// The wait as this percentile (above 0, below 100) of the latencies of the upstream's
    /// hedged calls over the last [`LATENCY_WINDOW`]: every copy that ended, and a cancelled
    /// copy with how long it had run (a lower bound: it was at least that slow). Calls that are
    /// not hedged record nothing, so they pay nothing for it. No hedge is sent until the window
    /// holds [`MIN_SAMPLES`] latencies.
    pub percentile: Option<f64>,
    /// Most copies of one request in flight at once, the first included (2..=3).
    pub max_copies: u32,
    /// Whether the upstream promises to deduplicate concurrent requests carrying the same
    /// idempotency key (it answers every copy with the one execution's result). This is not
    /// what `dedups_idempotency_key` promises: deduplicating a retry that follows a lost
    /// response is not deduplicating two copies in flight at once. Without it, writes are
    /// never hedged, keyed or not.
    pub dedups_in_flight: bool,
}

/// How far back the latencies of a percentile delay go (two halves: the older is dropped as a
/// new one starts, so the window holds between 5 and 10 s of latencies).
pub const LATENCY_WINDOW: Duration = Duration::from_secs(10);

/// Latencies the window must hold before a percentile delay is trusted.
pub const MIN_SAMPLES: u64 = 20;

impl HedgeConfig {
    /// Hedges after a fixed `delay`, two copies at most, reads only.
    pub const fn after(delay: Duration) -> Self {
        HedgeConfig {
            delay: Some(delay),
            percentile: None,
            max_copies: 2,
            dedups_in_flight: false,
        }
    }

    /// Hedges after the `percentile` of the upstream's recent latency, two copies at most,
    /// reads only.
    pub const fn at_percentile(percentile: f64) -> Self {
        HedgeConfig {
            delay: None,
            percentile: Some(percentile),
            max_copies: 2,
            dedups_in_flight: false,
        }
    }

    /// Sets the most copies in flight (2..=3).
    pub const fn with_max_copies(mut self, n: u32) -> Self {
        self.max_copies = n;
        self
    }

    /// Sets whether the upstream deduplicates concurrent copies of a keyed write.
    pub const fn with_dedups_in_flight(mut self, yes: bool) -> Self {
        self.dedups_in_flight = yes;
        self
    }

    /// Every rule these settings break, by key (`hedge.delay`, ...), each with its fix.
    pub fn violations(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        match (self.delay, self.percentile) {
            (Some(_), Some(_)) => v.push((
                "hedge.percentile",
                "hedge.delay and hedge.percentile are both set: keep one (a fixed delay, or a \
                 percentile of the upstream's recent latency)"
                    .to_owned(),
            )),
            (None, None) => v.push((
                "hedge.delay",
                "hedging needs a delay: set hedge.percentile = 95 (of the upstream's recent \
                 latency) or a fixed hedge.delay such as \"50ms\""
                    .to_owned(),
            )),
            _ => {}
        }
        if self.delay.is_some_and(|d| d.is_zero()) {
            v.push((
                "hedge.delay",
                "hedge.delay must be above zero: a zero delay doubles every request; use \
                 \"50ms\" or hedge.percentile = 95"
                    .to_owned(),
            ));
        }
        if let Some(p) = self.percentile
            && !(p.is_finite() && p > 0.0 && p < 100.0)
        {
            v.push((
                "hedge.percentile",
                format!(
                    "hedge.percentile = {p} must be above 0 and below 100: use 95 (hedge the \
                     slowest 5 %)"
                ),
            ));
        }
        if !(2..=MAX_COPIES).contains(&self.max_copies) {
            v.push((
                "hedge.max_copies",
                format!(
                    "hedge.max_copies = {} is outside 2..=3: 2 sends one hedge; more copies \
                     multiply the upstream's load for little gain",
                    self.max_copies
                ),
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_delay_and_two_or_three_copies() {
        assert_eq!(
            HedgeConfig::after(Duration::from_millis(50)).violations(),
            vec![]
        );
        assert_eq!(HedgeConfig::at_percentile(95.0).violations(), vec![]);
        let fields = |c: HedgeConfig| c.violations().into_iter().map(|v| v.0).collect::<Vec<_>>();
        let both = HedgeConfig {
            percentile: Some(95.0),
            ..HedgeConfig::after(Duration::from_millis(1))
        };
        assert_eq!(fields(both), ["hedge.percentile"]);
        let neither = HedgeConfig {
            delay: None,
            ..HedgeConfig::after(Duration::ZERO)
        };
        assert_eq!(fields(neither), ["hedge.delay"]);
        assert_eq!(
            fields(HedgeConfig::after(Duration::ZERO).with_max_copies(4)),
            ["hedge.delay", "hedge.max_copies"]
        );
        for p in [0.0, 100.0, f64::NAN, -1.0] {
            assert_eq!(fields(HedgeConfig::at_percentile(p)), ["hedge.percentile"]);
        }
        assert_eq!(
            fields(HedgeConfig::at_percentile(99.9).with_max_copies(3)),
            Vec::<&str>::new()
        );
        assert_eq!(
            fields(HedgeConfig::at_percentile(95.0).with_max_copies(1)),
            ["hedge.max_copies"]
        );
    }
}
