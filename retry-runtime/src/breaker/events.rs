//! What the breaker reports when it changes state.

use super::state::BreakerState;

/// Reports a change of state: an event, and `retry.breaker.transitions{upstream, to}`
/// (feature `metrics`), so a dashboard sees every opening, even one that closed again
/// between two scrapes of the state gauge.
pub(super) fn transitioned(upstream: &str, to: BreakerState) {
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
