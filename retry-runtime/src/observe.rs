//! Metrics through the `metrics` facade (feature `metrics`); no-ops without it.
//!
//! Names follow Resilience4j's `retry.calls{kind}` so dashboards carry over:
//! - `retry.calls{upstream, kind}`: `successful_without_retry`, `successful_with_retry`,
//!   `failed_without_retry`, `failed_with_retry`, `ambiguous`
//! - `retry.retries{upstream}`: retries started
//! - `retry.denials{upstream, reason}`: denied retries by named reason
//! - `retry.ambiguous{upstream}`: ambiguous outcomes
//! - `retry.budget.available{upstream}` (gauge): whole retries left in the budget
//! - `retry.breaker.state{upstream}` (gauge): 0 closed, 1 half-open, 2 open (set as calls end)
//!
//! The gauges are set as calls retry or end, so between calls they show the last value set,
//! not the state now: a budget refills as its window slides (every call deposits, but reading
//! the balance costs every call a pass over the window, which the happy path does not pay).
//! Call [`Registry::record_gauges`] where metrics are scraped (or on a timer) so both gauges
//! show every upstream's state when read.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use crate::breaker::BreakerState;
use crate::decision::DenyReason;

/// How a call ended, for `retry.calls{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    SuccessfulWithoutRetry,
    SuccessfulWithRetry,
    FailedWithoutRetry,
    FailedWithRetry,
    Ambiguous,
}

impl CallKind {
    pub(crate) fn of(success: bool, attempts: u32) -> CallKind {
        match (success, attempts > 1) {
            (true, false) => CallKind::SuccessfulWithoutRetry,
            (true, true) => CallKind::SuccessfulWithRetry,
            (false, false) => CallKind::FailedWithoutRetry,
            (false, true) => CallKind::FailedWithRetry,
        }
    }

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            CallKind::SuccessfulWithoutRetry => "successful_without_retry",
            CallKind::SuccessfulWithRetry => "successful_with_retry",
            CallKind::FailedWithoutRetry => "failed_without_retry",
            CallKind::FailedWithRetry => "failed_with_retry",
            CallKind::Ambiguous => "ambiguous",
        }
    }
}

pub(crate) fn call_finished(upstream: &str, kind: CallKind) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.calls", "upstream" => upstream.to_owned(), "kind" => kind.as_str())
        .increment(1);
    #[cfg(feature = "metrics")]
    if kind == CallKind::Ambiguous {
        metrics::counter!("retry.ambiguous", "upstream" => upstream.to_owned()).increment(1);
    }
}

pub(crate) fn retried(upstream: &str, budget_available: u64) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("retry.retries", "upstream" => upstream.to_owned()).increment(1);
    }
    set_budget_gauge(upstream, budget_available);
}

impl crate::Registry {
    /// Sets the `retry.budget.available` and `retry.breaker.state` gauges of every upstream to
    /// its state now (feature `metrics`; a no-op without it). Call it where metrics are scraped
    /// (or on a timer): the gauges are otherwise set only as calls retry or end, so a budget
    /// that refilled since, or a breaker whose open time ran out, would not show. Costs one pass
    /// over each upstream's window counters and one allocation per upstream name.
    pub fn record_gauges(&self) {
        for name in self.names() {
            if let Ok(upstream) = self.upstream(&name) {
                set_budget_gauge(&name, upstream.budget().available());
                if let Some(breaker) = upstream.breaker() {
                    breaker_state(&name, breaker.state());
                }
            }
        }
    }
}

fn set_budget_gauge(upstream: &str, available: u64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("retry.budget.available", "upstream" => upstream.to_owned())
        .set(available as f64);
}

/// The breaker's state as a gauge: 0 closed, 1 half-open, 2 open.
pub(crate) fn breaker_state(upstream: &str, state: BreakerState) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("retry.breaker.state", "upstream" => upstream.to_owned()).set(match state {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 1.0,
        BreakerState::Open => 2.0,
    });
}

pub(crate) fn denied(upstream: &str, reason: DenyReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.denials", "upstream" => upstream.to_owned(), "reason" => reason.as_str()).increment(1);
}
