//! Metrics through the `metrics` facade (feature `metrics`); no-ops without it.
//!
//! Names follow Resilience4j's `retry.calls{kind}` so dashboards carry over:
//! - `retry.calls{upstream, kind}`: `successful_without_retry`, `successful_with_retry`,
//!   `failed_without_retry`, `failed_with_retry`, `ambiguous`
//! - `retry.retries{upstream, reason}`: retries started, by reason (`status` with a `status`
//!   label, `transport`, `not_sent`, `refresh_auth`); rotation retries excluded
//! - `retry.attempt.duration{upstream, outcome}` (histogram, seconds): each attempt, from
//!   admission to its end; `outcome` is `success`, `failure` or `timeout`
//! - `retry.rejections{upstream, reason}`: attempts refused locally before sending
//!   (`throttled`, `circuit_open`, `bulkhead_full`): fail-fast load shedding, apart from retry
//!   denials
//! - `retry.breaker.transitions{upstream, to}`: breaker state changes (`open`, `half_open`,
//!   `closed`), counted by the breaker itself
//! - `retry.rotations{upstream}`: attempts lost to connection rotation (GOAWAY `NO_ERROR`,
//!   `REFUSED_STREAM`, a request handed back unsent or dropped by hyper's dispatcher); the
//!   circuit breaker does not count them
//! - `retry.rotation_retries{upstream}`: of those, retried at once for free (reason
//!   `connection_rotated`); the others were decided as ordinary retries
//! - `retry.hedges{upstream}`: hedges sent (further copies of a slow request)
//! - `retry.hedges.cancelled{upstream}`: copies cancelled because another answered first
//! - `retry.denials{upstream, reason}`: denied retries by named reason
//! - `retry.ambiguous{upstream}`: ambiguous outcomes
//! - `retry.budget.available{upstream}` (gauge): whole retries left in the budget
//! - `retry.breaker.state{upstream}` (gauge): 0 closed, 1 half-open, 2 open (set as calls end)
//! - `retry.throttle.refusal_probability{upstream}` (gauge): the probability that the adaptive
//!   throttle refuses a first attempt now (0 while the upstream accepts what it gets); set as
//!   calls fail and by `record_gauges`. The throttle's state changes are also tracing events
//!   (target `retry_runtime::throttle`, field `state`: `throttling` or `open`).
//!
//! The gauges are set as calls retry, hedge or end, so between calls they show the last value
//! set, not the state now: a budget refills as its window slides (every call deposits, but
//! reading the balance costs every call a pass over the window, which the happy path does not
//! pay). Call [`Registry::record_gauges`](crate::Registry::record_gauges) where metrics are
//! scraped (or on a timer) so both gauges show every upstream's state when read. An upstream a
//! reload removed reads 0 on both from the next `record_gauges` on: the `metrics` facade has no
//! way to delete a series.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use crate::breaker::CircuitBreaker;
use crate::budget::RetryBudget;
use crate::decision::{DenyReason, RetryReason};

/// Every metric the library records: name, kind, unit and the HELP text an exporter shows.
#[cfg(feature = "metrics")]
const METRICS: [(&str, Kind, &str); 14] = [
    (
        "retry.calls",
        Kind::Counter,
        "Retrying calls ended, by how (kind)",
    ),
    (
        "retry.retries",
        Kind::Counter,
        "Retries started, by reason (and status)",
    ),
    (
        "retry.attempt.duration",
        Kind::Seconds,
        "Duration of each attempt, by outcome",
    ),
    (
        "retry.rejections",
        Kind::Counter,
        "Attempts refused locally before sending (throttle, open breaker, full bulkhead)",
    ),
    (
        "retry.denials",
        Kind::Counter,
        "Retries refused, by named reason",
    ),
    (
        "retry.ambiguous",
        Kind::Counter,
        "Writes whose outcome is unknown (may or may not have happened)",
    ),
    (
        "retry.rotations",
        Kind::Counter,
        "Attempts lost to connection rotation (not upstream failures)",
    ),
    (
        "retry.rotation_retries",
        Kind::Counter,
        "Attempts lost to rotation and retried at once for free",
    ),
    (
        "retry.hedges",
        Kind::Counter,
        "Hedges sent: further copies of a slow request",
    ),
    (
        "retry.hedges.cancelled",
        Kind::Counter,
        "Copies cancelled because another answered first",
    ),
    (
        "retry.breaker.transitions",
        Kind::Counter,
        "Circuit breaker state changes, by new state",
    ),
    (
        "retry.budget.available",
        Kind::Gauge,
        "Whole retries left in the upstream's retry budget",
    ),
    (
        "retry.breaker.state",
        Kind::Gauge,
        "Circuit breaker state: 0 closed, 1 half-open, 2 open",
    ),
    (
        "retry.throttle.refusal_probability",
        Kind::Gauge,
        "Probability that the adaptive throttle refuses a first attempt now",
    ),
];

#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Seconds,
}

/// Registers every metric's description (and unit) with the installed `metrics` recorder, so
/// an exporter shows them (Prometheus: `# HELP` lines). Building a [`Registry`](crate::Registry)
/// does it; call it yourself when the recorder is installed after the registry is built. A
/// no-op without the `metrics` feature.
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    for (name, kind, help) in METRICS {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, metrics::Unit::Count, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Seconds => metrics::describe_histogram!(name, metrics::Unit::Seconds, help),
        }
    }
}

/// Bucket bounds, in seconds, for the `retry.attempt.duration` histogram: 5 ms to 5 s, the span
/// of an attempt (the in-memory window is at most 5 s), denser where timeouts are usually set.
/// Give them to your exporter, or let `prometheus_buckets` (feature `prometheus`) do it. Without configured buckets
/// the Prometheus exporter renders the histogram as a summary (quantiles per process, which
/// cannot be aggregated across instances).
pub const ATTEMPT_DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 5.0,
];

/// Sets [`ATTEMPT_DURATION_BUCKETS`] for `retry.attempt.duration` on a Prometheus exporter, so
/// it renders a histogram (`retry_attempt_duration_bucket{le=..}`) rather than a summary
/// (feature `prometheus`).
///
/// ```
/// let builder = retry_runtime::prometheus_buckets(
///     metrics_exporter_prometheus::PrometheusBuilder::new(),
/// )?;
/// let recorder = builder.build_recorder();
/// metrics::with_local_recorder(&recorder, || {
///     // What the loop records when an attempt ends.
///     metrics::histogram!("retry.attempt.duration", "upstream" => "payments").record(0.02);
/// });
/// let scrape = recorder.handle().render();
/// assert!(scrape.contains(r#"retry_attempt_duration_bucket{upstream="payments",le="0.025"} 1"#));
/// # Ok::<(), metrics_exporter_prometheus::BuildError>(())
/// ```
#[cfg(feature = "prometheus")]
pub fn prometheus_buckets(
    builder: metrics_exporter_prometheus::PrometheusBuilder,
) -> Result<metrics_exporter_prometheus::PrometheusBuilder, metrics_exporter_prometheus::BuildError>
{
    builder.set_buckets_for_metric(
        metrics_exporter_prometheus::Matcher::Full("retry.attempt.duration".to_owned()),
        &ATTEMPT_DURATION_BUCKETS,
    )
}

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

    /// Whether the call succeeded.
    pub(crate) const fn succeeded(self) -> bool {
        matches!(
            self,
            CallKind::SuccessfulWithoutRetry | CallKind::SuccessfulWithRetry
        )
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

/// A retry granted. The budget is read only when metrics are compiled in.
pub(crate) fn retried(upstream: &str, reason: RetryReason, budget: &RetryBudget) {
    #[cfg(feature = "metrics")]
    {
        let upstream = upstream.to_owned();
        match reason {
            RetryReason::Status(status) => metrics::counter!(
                "retry.retries", "upstream" => upstream, "reason" => reason.as_str(),
                "status" => status.to_string()
            ),
            _ => metrics::counter!("retry.retries", "upstream" => upstream, "reason" => reason.as_str()),
        }
        .increment(1);
    }
    set_budget_gauge(upstream, budget);
}

/// How an attempt ended, for `retry.attempt.duration{outcome}`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttemptOutcome {
    Success,
    Failure,
    Timeout,
}

/// An attempt admitted at `started` ended now. Reads the clock only when metrics are
/// compiled in.
pub(crate) fn attempt_ended(
    upstream: &str,
    started: tokio::time::Instant,
    outcome: AttemptOutcome,
) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match outcome {
            AttemptOutcome::Success => "success",
            AttemptOutcome::Failure => "failure",
            AttemptOutcome::Timeout => "timeout",
        };
        metrics::histogram!(
            "retry.attempt.duration", "upstream" => upstream.to_owned(), "outcome" => outcome
        )
        .record(started.elapsed());
    }
}

/// An attempt refused locally before sending (`reason`: `circuit_open`, `bulkhead_full`).
pub(crate) fn rejected(upstream: &str, reason: crate::category::Rejection) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.rejections", "upstream" => upstream.to_owned(), "reason" => reason.as_str())
        .increment(1);
}

/// The `retry.budget.available` gauge: whole retries left in `upstream`'s budget now.
pub(crate) fn set_budget_gauge(upstream: &str, budget: &RetryBudget) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("retry.budget.available", "upstream" => upstream.to_owned())
        .set(budget.available() as f64);
}

/// The gauges of an upstream a reload removed, at zero: the `metrics` facade cannot delete a
/// series, and its last values would otherwise be scraped for ever as if it were still there.
pub(crate) fn clear_gauges(upstream: &str) {
    #[cfg(feature = "metrics")]
    for name in [
        "retry.budget.available",
        "retry.breaker.state",
        "retry.throttle.refusal_probability",
    ] {
        metrics::gauge!(name, "upstream" => upstream.to_owned()).set(0.0);
    }
}

/// The breaker's state as a gauge: 0 closed, 1 half-open, 2 open (read only when metrics are
/// compiled in).
pub(crate) fn breaker_state(upstream: &str, breaker: &CircuitBreaker) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("retry.breaker.state", "upstream" => upstream.to_owned()).set(
        match breaker.state() {
            crate::breaker::BreakerState::Closed => 0.0,
            crate::breaker::BreakerState::HalfOpen => 1.0,
            crate::breaker::BreakerState::Open => 2.0,
        },
    );
}

/// The throttle's refusal probability as a gauge (read only when metrics are compiled in).
pub(crate) fn throttle_state(upstream: &str, throttle: &crate::throttle::Throttle) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("retry.throttle.refusal_probability", "upstream" => upstream.to_owned())
        .set(throttle.refusal_probability());
}

pub(crate) fn denied(upstream: &str, reason: DenyReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.denials", "upstream" => upstream.to_owned(), "reason" => reason.as_str()).increment(1);
}

/// An attempt lost to connection rotation.
pub(crate) fn rotated(upstream: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.rotations", "upstream" => upstream.to_owned()).increment(1);
}

/// A free, immediate rotation retry granted.
pub(crate) fn rotation_retried(upstream: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.rotation_retries", "upstream" => upstream.to_owned()).increment(1);
}

/// A hedge sent; it spent a budget token as a retry does, so the budget gauge is set too.
pub(crate) fn hedged(upstream: &str, budget: &RetryBudget) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.hedges", "upstream" => upstream.to_owned()).increment(1);
    set_budget_gauge(upstream, budget);
}

/// Copies cancelled because another answered first.
pub(crate) fn hedges_cancelled(upstream: &str, copies: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry.hedges.cancelled", "upstream" => upstream.to_owned())
        .increment(copies as u64);
}
