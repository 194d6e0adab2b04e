//! What the loop knows of the last attempt's end, first-hand or from its error: what it did to
//! the attempt itself, the failure it retried last, what the error reported and when (kept
//! for the decision that follows), and why the call stopped.

use tokio::time::Instant;

use crate::category::Rejection;
use crate::decision::{DenyReason, Failure};
use crate::evidence::Evidence;
use crate::window::Tick;

/// What the loop itself did to the last attempt: facts it knows first-hand override whatever
/// the caller's error type reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Local {
    /// The loop did nothing to it: what happened is what its error reports.
    Untouched,
    /// Not started: no time left before the deadline.
    NoTime,
    /// Not started: a local gate refused it.
    Refused(Rejection),
    /// Cut by the attempt timeout: the request may have been sent.
    TimedOut,
    /// Not started: shutdown began before this retry's attempt did.
    Draining,
}

/// The last attempt's end, as the loop keeps it between the attempt and its decision.
#[derive(Debug)]
pub(super) struct Outcome {
    local: Local,
    /// The scope's count of failures retried below, when the last attempt started.
    retried_mark: u64,
    /// The facts of the last failed attempt that was retried: what the caller is told when
    /// the deadline or a shutdown leaves no time for the retry itself.
    last_failure: Option<Failure>,
    /// What the last attempt's error reported, if the breaker needed it (classified once).
    classified: Option<Failure>,
    /// When the last attempt failed, if the breaker needed the clock read then, and that
    /// instant on the windows' clock.
    failed_at: Option<(Instant, Tick)>,
    /// Why the call stopped, and on what.
    stopped: Option<(DenyReason, Failure)>,
}

impl Outcome {
    /// Nothing known yet: no attempt has ended.
    pub(super) const fn new() -> Self {
        Outcome {
            local: Local::Untouched,
            retried_mark: 0,
            last_failure: None,
            classified: None,
            failed_at: None,
            stopped: None,
        }
    }

    /// What the loop did to the last attempt.
    #[inline]
    pub(super) fn local(&self) -> Local {
        self.local
    }

    /// Records what the loop did to the attempt under way (or about to be).
    #[inline]
    pub(super) fn set_local(&mut self, local: Local) {
        self.local = local;
    }

    /// An attempt starts, when the scope had counted `retried` failures retried below.
    #[inline]
    pub(super) fn started(&mut self, retried: u64) {
        self.retried_mark = retried;
    }

    /// An attempt ended: what was kept about the one before is forgotten.
    #[inline]
    pub(super) fn ended(&mut self) {
        (self.failed_at, self.classified) = (None, None);
    }

    /// Keeps what the ended attempt's error reported, for the decision that follows.
    #[inline]
    pub(super) fn keep_classified(&mut self, failure: Failure) {
        self.classified = Some(failure);
    }

    /// Keeps when the ended attempt failed, for the decision that follows.
    #[inline]
    pub(super) fn keep_failed_at(&mut self, at: Instant, tick: Tick) {
        self.failed_at = Some((at, tick));
    }

    /// When the last attempt failed, if the clock was read then (once).
    #[inline]
    pub(super) fn take_failed_at(&mut self) -> Option<(Instant, Tick)> {
        self.failed_at.take()
    }

    /// What the last attempt's error reported, if it was classified when it ended (once).
    #[inline]
    pub(super) fn take_classified(&mut self) -> Option<Failure> {
        self.classified.take()
    }

    /// Corrects the last attempt's `failure` by what the loop knows first-hand: its own refusal
    /// and timeout ([`first_hand`](Self::first_hand)), no rotation on an attempt the loop
    /// touched, and whether a layer below already retried it (`retried` failures retried
    /// below now).
    pub(super) fn correct(&self, failure: &mut Failure, retried: u64) {
        self.first_hand(failure);
        if self.local != Local::Untouched {
            failure.connection_rotated = false;
        }
        if retried > self.retried_mark {
            failure.already_retried = true;
        }
    }

    /// Corrects `failure` by what the loop did to the attempt: refused by a gate, or cut by
    /// its own timeout (the request may have been sent, whatever the error says).
    #[inline]
    pub(super) fn first_hand(&self, failure: &mut Failure) {
        match self.local {
            Local::Refused(rejection) => failure.reject(rejection),
            Local::TimedOut => failure.evidence = Evidence::SentNoResponse,
            Local::Untouched | Local::NoTime | Local::Draining => {}
        }
    }

    /// The call retries after `failure`.
    #[inline]
    pub(super) fn retrying_after(&mut self, failure: Failure) {
        self.last_failure = Some(failure);
    }

    /// The last failure the call retried after, if any.
    #[inline]
    pub(super) fn last_failure(&self) -> Option<Failure> {
        self.last_failure
    }

    /// The last failure retried after, or, before any, a failure that sent nothing.
    #[inline]
    pub(super) fn last_failure_or_unsent(&self) -> Failure {
        self.last_failure.unwrap_or(Failure::new(Evidence::NotSent))
    }

    /// The call stopped for `reason` on `failure`.
    #[inline]
    pub(super) fn stop(&mut self, reason: DenyReason, failure: Failure) {
        self.stopped = Some((reason, failure));
    }

    /// Why the call stopped, and on what.
    #[inline]
    pub(super) fn stopped(&self) -> Option<(DenyReason, Failure)> {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_of_its_own_means_the_request_may_have_been_sent() {
        let mut outcome = Outcome::new();
        outcome.set_local(Local::TimedOut);
        let mut failure = Failure::new(Evidence::NotSent);
        failure.connection_rotated = true;
        outcome.correct(&mut failure, 0);
        assert_eq!(failure.evidence, Evidence::SentNoResponse);
        assert!(!failure.connection_rotated);
    }

    #[test]
    fn what_was_classified_is_taken_once_and_forgotten_when_an_attempt_ends() {
        let mut outcome = Outcome::new();
        outcome.keep_classified(Failure::new(Evidence::ResponseReceived));
        let now = Instant::now();
        outcome.keep_failed_at(now, Tick::at(now, now));
        assert!(outcome.take_classified().is_some());
        assert!(outcome.take_classified().is_none());
        outcome.keep_classified(Failure::new(Evidence::ResponseReceived));
        outcome.ended();
        assert!(outcome.take_classified().is_none());
        assert!(outcome.take_failed_at().is_none());
    }

    #[test]
    fn a_failure_retried_below_since_the_attempt_started_is_marked() {
        let mut outcome = Outcome::new();
        outcome.started(2);
        let mut failure = Failure::new(Evidence::NotSent);
        outcome.correct(&mut failure, 2);
        assert!(!failure.already_retried);
        outcome.correct(&mut failure, 3);
        assert!(failure.already_retried);
    }

    #[test]
    fn before_any_retry_the_last_failure_sent_nothing() {
        let mut outcome = Outcome::new();
        assert_eq!(outcome.last_failure_or_unsent().evidence, Evidence::NotSent);
        let failure = Failure::new(Evidence::SentNoResponse);
        outcome.retrying_after(failure);
        assert_eq!(outcome.last_failure(), Some(failure));
    }
}
