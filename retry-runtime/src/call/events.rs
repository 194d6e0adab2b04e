//! What the loop reports: every trace event, span field and metric of a call, one function per
//! event, named after it. The loop calls them where the event happens and decides nothing from
//! them. Targets, fields, messages and metric names are part of the library's interface
//! (dashboards and alerts read them): change them only deliberately.

use std::time::Duration;

use super::state::Call;
use crate::attempt::Attempt;
use crate::category::Rejection;
use crate::decision::{AmbiguityReason, DenyReason, Failure, RetryReason};
use crate::engine::Safety;
use crate::evidence::Evidence;
use crate::key::IdempotencyKey;
use crate::observe::{self, AttemptOutcome, CallKind};
use crate::scope::Operation;
use crate::upstream::Upstream;

/// The target of every decision event.
const DECISION: &str = "retry_runtime::decision";

/// The span of one retrying call. At `DEBUG`: a service logging at `INFO` pays nothing for it.
#[inline]
pub(super) fn call_span(
    upstream: &str,
    operation: &str,
    method: &http::Method,
    safety: Safety,
    key: Option<&IdempotencyKey>,
) -> tracing::Span {
    tracing::debug_span!(
        "retry.call",
        upstream = %upstream,
        operation = %operation,
        http.request.method = %method,
        safety = ?safety,
        idempotency_key = key.map(tracing::field::display),
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// The span of one attempt, inside its call's (OpenTelemetry's HTTP client attributes).
#[inline]
pub(super) fn attempt_span(
    call: &tracing::Span,
    attempt: u32,
    method: &http::Method,
) -> tracing::Span {
    tracing::debug_span!(
        parent: call,
        "retry.attempt",
        attempt = attempt,
        http.request.method = %method,
        http.request.resend_count = attempt - 1,
        server.address = tracing::field::Empty,
        server.port = tracing::field::Empty,
        evidence = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        connection_rotated = tracing::field::Empty,
        reason = tracing::field::Empty,
        cancelled = tracing::field::Empty,
    )
}

/// A call joined an operation that allows it fewer retries than `upstream`'s `max_attempts`
/// (an enclosing scope, or behind the server layer the caller's propagated limits).
pub(super) fn on_fewer_retries(upstream: &Upstream, op: &Operation, allowed: u32) {
    tracing::debug!(
        target: DECISION,
        upstream = upstream.name(),
        operation = op.name(),
        max_attempts = upstream.config().max_attempts,
        retries_allowed = allowed,
        "the operation allows fewer retries than the upstream's max_attempts"
    );
}

impl Call<'_> {
    /// No time is left for the next attempt.
    pub(super) fn on_no_time(&self) {
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                reason = "deadline",
                attempt = self.timing.attempts() + 1,
                "no time left for an attempt"
            )
        });
    }

    /// A local gate refused an attempt (`retry.rejections`).
    pub(super) fn on_refused(&self, rejection: Rejection) {
        observe::rejected(self.upstream.name(), rejection);
    }

    /// An attempt ended (`retry.attempt.duration`).
    pub(super) fn on_attempt_ended(&self, outcome: AttemptOutcome) {
        observe::attempt_ended(self.upstream.name(), self.timing.last_started(), outcome);
    }

    /// The call succeeded (an event only after retrying).
    pub(super) fn on_succeeded(&self) {
        if self.timing.attempts() > 1 {
            self.spans.call().in_scope(|| {
                tracing::info!(
                    target: DECISION,
                    decision = "succeeded",
                    attempts = self.timing.attempts(),
                    "succeeded after retrying"
                )
            });
        }
    }

    /// When the error type `E` reports a response without its status: a programming error in
    /// the adapter, not a fact about the upstream, so the event says where. (A failure
    /// permanent by declaration needs no status: nothing is retried.)
    pub(super) fn on_status_missing<E>(&self, failure: &Failure) {
        if failure.evidence != Evidence::ResponseReceived
            || failure.status.is_some()
            || failure.permanent.is_some()
        {
            return;
        }
        self.spans.call().in_scope(|| {
            tracing::warn!(
                target: DECISION,
                error_type = std::any::type_name::<E>(),
                "the error reports that a response arrived but neither its status nor a \
                 permanent category: state them (`#[classify(status = .., permanent = ..)]`) \
                 or delegate `Classify` to the HTTP error (`via`)"
            )
        });
    }

    /// A failed attempt's facts, on its span: how far it got, and OpenTelemetry's
    /// `error.type` (the status when there is one, else the evidence; the status code itself
    /// is recorded by the send path, once).
    pub(super) fn on_failure_settled(&self, failure: &Failure) {
        let span = self.spans.attempt();
        if span.is_disabled() {
            return;
        }
        span.record("evidence", failure.evidence.as_str());
        match failure.status {
            Some(status) => span.record("error.type", tracing::field::display(status)),
            None => span.record("error.type", failure.evidence.as_str()),
        };
    }

    /// An attempt was lost to connection rotation (`retry.rotations`).
    pub(super) fn on_rotated(&self) {
        observe::rotated(self.upstream.name());
        self.spans.attempt().record("connection_rotated", true);
    }

    /// A free rotation retry, at once (`retry.rotation_retries`).
    pub(super) fn on_free_rotation(&self, failure: &Failure) {
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                decision = "retry",
                reason = RetryReason::ConnectionRotated.as_str(),
                attempt = self.timing.attempts(),
                evidence = failure.evidence.as_str(),
                delay_ms = 0u64,
                "retrying at once on another connection"
            )
        });
        observe::rotation_retried(self.upstream.name());
    }

    /// A retry was granted and spent (`retry.retries`).
    pub(super) fn on_retry(&self, reason: RetryReason, failure: &Failure, delay: Duration) {
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                decision = "retry",
                reason = %reason,
                attempt = self.timing.attempts(),
                evidence = failure.evidence.as_str(),
                status = failure.status,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "retrying"
            )
        });
        observe::retried(self.upstream.name(), reason, self.upstream.budget());
    }

    /// An attempt the throttle refused waits `wait` to ask again (see `pace`).
    pub(super) fn on_paced(&self, wait: Duration) {
        self.spans.call().in_scope(|| {
            tracing::debug!(
                target: DECISION,
                decision = "paced",
                reason = %DenyReason::Throttled,
                attempt = self.timing.attempts(),
                delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "the upstream accepts too little of what it is sent: the attempt waits to ask again"
            )
        });
    }

    /// A waiting attempt goes, `how` the throttle let it (`accepts_again`, `backlog`, `probe`).
    pub(super) fn on_let_go(&self, how: &'static str) {
        self.spans.call().in_scope(|| {
            tracing::debug!(
                target: DECISION,
                decision = "let_go",
                how,
                attempt = self.timing.attempts(),
                "the throttle lets the waiting attempt go"
            )
        });
    }

    /// A retry was denied (`retry.denials`), with the reason's name and `message`.
    pub(super) fn on_denied(&self, reason: DenyReason, message: &'static str) {
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                decision = "denied",
                reason = %reason,
                attempt = self.timing.attempts(),
                "{message}"
            )
        });
        observe::denied(self.upstream.name(), reason);
    }

    /// The deadline left no time for an attempt after a call that retried nothing
    /// (`retry.denials`; the event was [`on_no_time`](Self::on_no_time)).
    pub(super) fn on_out_of_time(&self) {
        observe::denied(self.upstream.name(), DenyReason::Deadline);
    }

    /// A write's outcome is unknown.
    pub(super) fn on_ambiguous(&self, reason: AmbiguityReason, failure: &Failure) {
        self.spans.call().in_scope(|| {
            tracing::warn!(
                target: DECISION,
                decision = "ambiguous",
                reason = %reason,
                attempt = self.timing.attempts(),
                evidence = failure.evidence.as_str(),
                status = failure.status,
                "outcome unknown: not retrying a write that may have happened"
            )
        });
    }

    /// The reconcile check found the write.
    pub(super) fn on_reconciled(&self) {
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                decision = "reconciled",
                attempt = self.timing.attempts(),
                "the reconcile check found the write: returning its result"
            )
        });
    }

    /// A hedge was sent (`retry.hedges`); its span says `reason = "hedge"`.
    pub(super) fn on_hedged(&self, hedge: &Attempt, in_flight: usize) {
        hedge.span.record("reason", "hedge");
        self.spans.call().in_scope(|| {
            tracing::info!(
                target: DECISION,
                decision = "hedge",
                reason = "hedge",
                attempt = self.timing.attempts(),
                in_flight,
                "the request is slower than usual: sending another copy"
            )
        });
        observe::hedged(self.upstream.name(), self.upstream.budget());
    }

    /// No hedge was sent, for `reason`.
    pub(super) fn on_no_hedge(&self, reason: &'static str, in_flight: usize) {
        self.spans.call().in_scope(|| {
            tracing::debug!(
                target: DECISION,
                decision = "no_hedge",
                reason,
                in_flight,
                "not hedging"
            )
        });
    }

    /// A hedged copy failed while others are in flight: the call waits for them.
    pub(super) fn on_copy_set_aside(&self, attempt: u32, in_flight: usize) {
        self.spans.call().in_scope(|| {
            tracing::debug!(
                target: DECISION,
                attempt,
                in_flight,
                "a hedged copy failed while another is in flight: waiting for it"
            )
        });
    }

    /// `copies` hedged copies were cancelled because another answered
    /// (`retry.hedges.cancelled`).
    pub(super) fn on_copies_cancelled(&self, copies: usize) {
        observe::hedges_cancelled(self.upstream.name(), copies);
    }

    /// One of them: its span says so.
    pub(super) fn on_copy_cancelled(&self, copy: &tracing::Span) {
        copy.record("cancelled", true);
    }

    /// The call ended, `kind` (`retry.calls`, and the breaker's state gauge).
    pub(super) fn on_finished(&self, kind: CallKind) {
        // A disabled span still looks each field up by name before doing nothing: skip it.
        if !self.spans.call().is_disabled() {
            self.spans.call().record("attempts", self.timing.attempts());
            self.spans.call().record("outcome", kind.as_str());
        }
        observe::call_finished(self.upstream.name(), kind);
        if let Some(breaker) = self.upstream.breaker() {
            observe::breaker_state(self.upstream.name(), breaker);
        }
        // The throttle's gauge moves when calls fail; a success leaves it (its reading costs a
        // clock read, which the happy path does not pay).
        if let (Some(throttle), false) = (self.upstream.throttle(), kind.succeeded()) {
            observe::throttle_state(self.upstream.name(), throttle);
        }
    }
}
