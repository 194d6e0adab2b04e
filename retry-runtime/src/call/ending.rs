//! How a call ends when it does not succeed: a denied retry, an ambiguous write, a reconcile
//! check's answer, shutdown before a retry began, no time left for an attempt.

use std::fmt::Display;

use tokio::time::Instant;

use super::outcome::Local;
use super::state::Call;
use super::step::Step;
use crate::classify::Classify;
use crate::decision::{AmbiguityReason, Decision, DenyReason, Failure, RetryReason, Stop};
use crate::engine::Safety;
use crate::error::{Ambiguous, Error};
use crate::evidence::Evidence;
use crate::observe::CallKind;

/// The answer of a reconcile check for a write whose outcome was ambiguous: a write without an
/// idempotency key may be retried after it may have executed only if something can tell
/// whether it did.
///
/// Closed on purpose (not `#[non_exhaustive]`): a check finds the write happened, finds it
/// did not, or cannot tell; a check written by hand answers exactly one of the three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled<T> {
    /// The write happened; here is its result.
    Happened(T),
    /// The write did not happen: retrying is safe.
    NotHappened,
    /// Cannot tell: the outcome stays ambiguous.
    Unknown,
}

impl Call<'_> {
    /// The attempt could not start: no time was left before the deadline, which ends the
    /// call. The retried attempt before it decides what that means: a write whose outcome it
    /// left unknown is ambiguous (with its key), not a failure that reads as "nothing
    /// happened".
    pub(super) fn out_of_time<T, E>(&mut self, error: E) -> Step<T, E>
    where
        E: Classify + Display,
    {
        if let Some(last) = self.outcome.last_failure() {
            return self.stop(DenyReason::Deadline, error, &last);
        }
        self.outcome
            .stop(DenyReason::Deadline, Failure::new(Evidence::NotSent));
        self.on_out_of_time();
        self.on_finished(CallKind::of(false, self.timing.attempts()));
        Step::Done(Err(error))
    }

    /// A denied retry. For a write whose last attempt may have executed without its response
    /// arriving, stopping does not make the outcome known: reporting a plain failure would tell
    /// the caller the write did not happen. That is an ambiguous outcome (carrying the key, so a
    /// keyed write can be replayed safely later), whatever stopped the retries.
    pub(super) fn stop<T, E>(
        &mut self,
        reason: DenyReason,
        error: E,
        failure: &Failure,
    ) -> Step<T, E>
    where
        E: Classify + Display,
    {
        self.outcome.stop(reason, *failure);
        let unknown = match (failure.evidence, failure.status) {
            _ if self.request.safety() == Safety::Read => None,
            (Evidence::SentNoResponse, _) => Some(AmbiguityReason::SentNoResponse),
            (Evidence::PartialResponse, _) => Some(AmbiguityReason::PartialResponse),
            (Evidence::ResponseReceived, Some(s @ 502..=504)) => Some(AmbiguityReason::Status(s)),
            (Evidence::ResponseReceived, None) => Some(AmbiguityReason::StatusUnknown),
            _ => None,
        };
        match (unknown, reason) {
            // These say the request or response itself is settled (or already reported).
            (_, DenyReason::PermanentFailure(_) | DenyReason::Status(_)) | (None, _) => {
                self.deny(reason, error)
            }
            (Some(ambiguity), _) => {
                self.on_denied(reason, "not retrying, and the write's outcome is unknown");
                self.ambiguous_step(ambiguity, error, failure)
            }
        }
    }

    fn deny<T, E: Classify>(&mut self, reason: DenyReason, mut error: E) -> Step<T, E> {
        self.on_denied(reason, "not retrying");
        error.stopped(Stop::new(self.timing.attempts(), reason));
        if self.timing.attempts() > 1 {
            // Tell enclosing retrying calls that this failure was already retried here.
            self.scope.note_retried_failure();
        }
        if matches!(
            reason,
            DenyReason::BudgetExhausted
                | DenyReason::CircuitOpen
                | DenyReason::BulkheadFull
                | DenyReason::Throttled
        ) {
            // The upstream is failing or saturated for everyone: a caller in another process
            // that retried the whole chain would only add calls the budget just refused.
            self.scope.note_overloaded();
        }
        self.on_finished(CallKind::of(false, self.timing.attempts()));
        Step::Done(Err(error))
    }

    /// The write's outcome is unknown: the caller reconciles, or reports it.
    pub(super) fn ambiguous_step<T, E>(
        &mut self,
        reason: AmbiguityReason,
        error: E,
        failure: &Failure,
    ) -> Step<T, E>
    where
        E: Display,
    {
        self.on_ambiguous(reason, failure);
        let ambiguous = Box::new(Ambiguous {
            upstream: self.upstream.name_arc().clone(),
            operation: self.scope.name(self.upstream.name()).to_owned(),
            attempts: self.timing.attempts(),
            evidence: failure.evidence,
            status: failure.status,
            reason,
            idempotency_key: self.request.key().cloned(),
            last_error: error.to_string(),
        });
        Step::Ambiguous { error, ambiguous }
    }

    /// Shutdown started before the retry's attempt began (during its backoff, or after it:
    /// [`draining_before_retry`](Self::draining_before_retry)): the call ends without it, with
    /// the outcome the last failure had (ambiguous for a write that may have executed).
    pub(super) fn drained<T, E>(&mut self, failure: &Failure) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let error = E::from(self.draining_error(failure));
        // The retry that was granted did not happen (a free rotation retry spent nothing).
        if !self.rotations.last_was_free() {
            self.scope.give_back_retry();
        }
        self.stop(DenyReason::RuntimeDraining, error, failure)
    }

    /// Shutdown started while a retry the throttle refused waited to ask again (`pace`):
    /// as [`drained`](Self::drained), but nothing was spent to give back.
    pub(super) fn drained_unspent<T, E>(&mut self, failure: &Failure) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let error = E::from(self.draining_error(failure));
        self.stop(DenyReason::RuntimeDraining, error, failure)
    }

    /// The error of a retry the throttle refused and never let go (`reason`): out of time, a
    /// deadline that leaves no attempt, with what the last attempt got; otherwise the throttle's
    /// refusal. Built from the facts: the failed attempt's own error was dropped before the
    /// wait, with any response or connection it held.
    pub(super) fn not_let_go(&self, reason: DenyReason, failure: &Failure) -> Error {
        let upstream = self.upstream.name_arc().clone();
        match reason {
            DenyReason::Deadline => Error::DeadlineExceeded {
                upstream,
                attempts: self.timing.attempts(),
                last_status: failure.status,
                last_evidence: Some(failure.evidence),
            },
            _ => Error::Throttled { upstream },
        }
    }

    /// The last check before a retry's attempt begins, after whatever led to it (a backoff, a
    /// credentials refresh, no delay at all, a wait for a bulkhead slot): once shutdown has
    /// started, the retry does not begin ([`retry_not_begun`](Self::retry_not_begun)).
    #[inline]
    pub(super) fn draining_before_retry(&self) -> bool {
        self.timing.attempts() > 1 && self.registry.drain().is_draining()
    }

    /// A retry that shutdown stopped before it began (what admitted it goes back as its permit
    /// drops): the attempt is not counted, and [`settle`](Self::settle) ends the call
    /// ([`drained`](Self::drained)).
    #[cold]
    pub(super) fn retry_not_begun(&mut self) -> Error {
        self.timing.not_begun();
        self.outcome.set_local(Local::Draining);
        self.draining_error(&self.outcome.last_failure_or_unsent())
    }

    /// [`Error::Draining`], after the attempts made so far, the last failing with `failure`.
    fn draining_error(&self, failure: &Failure) -> Error {
        let last_error = match failure.status {
            Some(status) => format!("status {status}"),
            None => format!("no response ({})", failure.evidence.as_str()),
        };
        Error::Draining {
            upstream: self.upstream.name_arc().clone(),
            attempts: self.timing.attempts(),
            last_error,
        }
    }

    /// After a reconcile check answered [`Reconciled::NotHappened`]: the
    /// write did not happen, so the attempt counts as not sent and the remaining rules
    /// (attempts, budget, draining, deadline) decide whether to retry.
    pub async fn settle_not_happened<T, E>(&mut self, error: E) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let failure = Failure::new(Evidence::NotSent);
        let at = self.now(Instant::now());
        let decision = match self.decide(&failure, false, at) {
            // Logged and counted under what really happened, not as "not sent".
            Decision::Retry { delay, .. } => Decision::Retry {
                delay,
                reason: RetryReason::ReconciledNotHappened,
            },
            other => other,
        };
        self.carry_out(decision, error, &failure, false, at).await
    }

    /// The reconcile check found that the write happened: the call ends successfully with the
    /// check's value (recorded as a success, with the attempts made).
    pub fn happened<T>(&mut self, value: T) -> T {
        self.on_reconciled();
        self.on_finished(CallKind::of(true, self.timing.attempts()));
        value
    }

    /// Reports an ambiguous outcome as the caller's error type.
    pub fn ambiguous<E: From<Error>>(&mut self, ambiguous: Box<Ambiguous>) -> E {
        self.on_finished(CallKind::Ambiguous);
        if self.timing.attempts() > 1 {
            self.scope.note_retried_failure();
        }
        E::from(Error::Ambiguous(ambiguous))
    }
}
