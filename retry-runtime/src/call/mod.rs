//! The attempt loop: one [`Call`] drives the attempts of one retrying call.
//!
//! Every retrying call, from `#[retry]`, the builder ([`Retry`](crate::Retry)) or the tower
//! layer, is this loop, one [`turn`](Call::turn) after another:
//!
//! ```text
//! let slot = pin!(BackoffSlot::new());      // where the backoffs will wait
//! let mut call = Call::new(spec, slot);     // upstream, scope, deadline, budget deposit
//! loop {
//!     match call.turn(body).await {         // next attempt · admit · run · settle · decide ·
//!                                           // spend and back off
//!         Step::Retry => continue,
//!         Step::Done(result) => return result,
//!         Step::Ambiguous { error, ambiguous } => /* reconcile, or report */,
//!     }
//! }
//! ```
//!
//! [`drive`] is that loop for the builder and the tower layer. The macro writes it out in the
//! annotated function, so the body can borrow `&mut self` and the call's arguments afresh on
//! every attempt and a reconcile check can run between attempts with the same borrows; each of
//! its turns is the same [`Call::turn`].
//!
//! This file is the skeleton, read top to bottom; each piece it calls has a file of its own:
//! `gates` (the next attempt, admitted), `admission` (every local gate, behind one seam whose
//! permit gives everything back when dropped), `pace` and `quota` (waiting for the throttle or
//! a partition's pushback), `hedge`, `rotation` (free retries on a rotated connection),
//! `refresh` (the 401 credentials refresh), `ending` (denied, ambiguous, reconciled, drained),
//! `transient` (what a durable queue may replay later) and `events` (every trace event and
//! metric). The call's state is a few small pieces, each changed through its own methods
//! (`state` lists them): the request, the timing, the pacing, the last outcome, the backoff
//! timer, the random source, the spans, the rotations.
//! Every decision has a named reason: the engine's ([`Decision`]) or the loop's own.

mod admission;
mod backoff;
mod drive;
mod ending;
mod events;
mod gates;
mod hedge;
mod outcome;
mod pace;
mod pacing;
mod quota;
mod refresh;
mod request;
mod rng;
mod rotation;
mod rotations;
mod spans;
mod start;
mod state;
mod step;
mod timing;
mod transient;

use std::fmt::Display;

use tokio::time::Instant;

use crate::ambient::Frame;
use crate::attempt::Attempt;
use crate::attempt_future::{AttemptFuture, Ended, TimedOut};
use crate::classify::Classify;
use crate::decision::{Decision, DenyReason, Failure, RetryReason};
use crate::engine::Context;
use crate::error::Error;
use crate::observe::{AttemptOutcome, CallKind};

use admission::{AttemptEnd, Permit};
use outcome::Local;
use pace::NotLetGo;
use pacing::LetGo;
use state::Now;

pub use backoff::BackoffSlot;
#[cfg(feature = "tower")]
pub(crate) use drive::Attempts;
pub(crate) use drive::{Hedged, Plain, drive, no_reconcile};
pub use ending::Reconciled;
pub use start::CallSpec;
pub use state::Call;
pub use step::Step;

impl Call<'_> {
    /// One turn of the loop: runs one attempt of `body` ([`attempt_with`](Self::attempt_with))
    /// and settles it ([`settle`](Self::settle)).
    pub async fn turn<T, E, F>(&mut self, body: F) -> Step<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let result = self.attempt_with(|_| body).await;
        self.settle(result).await
    }

    /// One turn whose attempt may be hedged: `make` makes a copy of the body (see
    /// [`attempt_hedged_with`](Self::attempt_hedged_with)).
    pub async fn turn_hedged<T, E, M, F>(&mut self, mut make: M) -> Step<T, E>
    where
        M: FnMut() -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error> + Display,
    {
        let result = self.attempt_hedged_with(|_| make()).await;
        self.settle(result).await
    }

    /// Runs one attempt: the next attempt (or [`Error::DeadlineExceeded`] when less than the
    /// minimum attempt budget is left), admitted by every local gate, its body made by `make`
    /// (unless it is a retry and shutdown has started meanwhile: [`Error::Draining`]) and
    /// polled inside the attempt's scope and span until it completes or the attempt timeout
    /// (clamped to the deadline) cuts it. What the gates lent (the bulkhead slot) goes
    /// back as soon as the attempt ends, before any backoff.
    pub(crate) async fn attempt_with<T, E, M, F>(&mut self, make: M) -> Result<T, E>
    where
        M: FnOnce(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        // 1. The next attempt, if time is left for one, admitted.
        let mut attempt = self.next_attempt().map_err(E::from)?;
        let permit = self.admit_next(&mut attempt).await.map_err(E::from)?;
        // 2. Run the body.
        let body = make(&attempt);
        let (number, ends) = (attempt.number, attempt.ends());
        self.timing.run(attempt.started, ends);
        let scope = self.scope.for_attempt();
        let lent = self.backoff.lend();
        let ended = AttemptFuture::new(Frame::attempt(attempt, scope), ends, lent, body).await;
        // 3. Its end, told to the gates.
        self.end_attempt(ended, permit, number)
    }

    /// Ends the attempt numbered `number`: gives the bulkhead slot back, adopts a scope the
    /// attempt opened, turns a timeout into the caller's error, and tells the gates how it
    /// ended (the breaker counts it then).
    fn end_attempt<T, E>(
        &mut self,
        ended: Ended<Result<T, E>>,
        mut permit: Permit,
        number: u32,
    ) -> Result<T, E>
    where
        E: Classify + From<Error>,
    {
        permit.leave_bulkhead();
        self.outcome.ended();
        let waited = ended.waited;
        self.scope.adopt(ended.opened);
        self.request.lower_replay(ended.reported);
        self.spans.attempt_ended(ended.span);
        let result = match ended.output {
            Ok(result) => result,
            Err(TimedOut) => {
                self.outcome.set_local(Local::TimedOut);
                Err(E::from(Error::AttemptTimeout {
                    upstream: self.upstream.name_arc().clone(),
                    attempt: number,
                    timeout: self.timing.last_timeout(),
                }))
            }
        };
        self.on_attempt_ended(match (&result, self.outcome.local()) {
            (Ok(_), _) => AttemptOutcome::Success,
            (Err(_), Local::TimedOut) => AttemptOutcome::Timeout,
            (Err(_), _) => AttemptOutcome::Failure,
        });
        if result.is_ok() {
            // Progress: what makes further rotation retries free (`rotation`).
            self.upstream.budget().record_progress();
            self.quota_served();
        }
        if permit.counts() {
            let end = match &result {
                Ok(_) => AttemptEnd::Accepted,
                Err(_) if self.outcome.local() == Local::TimedOut => AttemptEnd::TimedOut,
                Err(e) => {
                    let failure = Failure::of(e);
                    // What the error reports, kept for `settle` (it gets this same error).
                    self.outcome.keep_classified(failure);
                    AttemptEnd::of_failure(&failure, || e.timed_out())
                }
            };
            let (tick, took) = self.ended_at(waited, end);
            if permit.end(&self.upstream, end, tick, took) {
                self.pacing.counted(tick);
            }
            if let LetGo::Sent(at) = self.pacing.let_go() {
                self.let_go_ended(end, at);
            }
        }
        result
    }

    /// Decides after an attempt: ends the call on success, or classifies the failure, asks the
    /// engine and carries its decision out ([`Step::Retry`] once the retry is spent and its
    /// backoff slept). Nothing from the failed attempt is held while sleeping.
    pub(crate) async fn settle<T, E>(&mut self, result: Result<T, E>) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let error = match result {
            Ok(value) => {
                self.on_succeeded();
                self.on_finished(CallKind::of(true, self.timing.attempts()));
                return Step::Done(Ok(value));
            }
            Err(error) => error,
        };
        match self.outcome.local() {
            Local::NoTime => return self.out_of_time(error),
            // The granted retry did not begin: the call ends on the failure that led to it.
            Local::Draining => return self.drained(&self.outcome.last_failure_or_unsent()),
            _ => {}
        }
        let failure = self.classify(&error);
        // `max_attempts = 1` turns retries off, rotation retries included.
        let free_rotation = failure.connection_rotated
            && self.rotation_is_free()
            && self.upstream.config().max_attempts > 1;
        // One clock read for the decision, the budget and the backoff's start: the one that
        // timed the failure for the breaker, if it did.
        let at = match self.outcome.take_failed_at() {
            Some((instant, tick)) => self.now_at(instant, tick),
            None => self.now(Instant::now()),
        };
        self.note_quota(&failure, at.instant);
        let decision = self.decide(&failure, free_rotation, at);
        self.carry_out(decision, error, &failure, free_rotation, at)
            .await
    }

    /// What the failed attempt's `error` reports, corrected by what the loop knows first-hand
    /// (its own refusals and timeout), and recorded on the attempt's span.
    fn classify<E: Classify>(&mut self, error: &E) -> Failure {
        let mut failure = self
            .outcome
            .take_classified()
            .unwrap_or_else(|| Failure::of(error));
        self.on_status_missing::<E>(&failure);
        self.outcome
            .correct(&mut failure, self.scope.retried_failures());
        self.on_failure_settled(&failure);
        failure
    }

    /// Asks the engine. A free rotation retry (`free_rotation`) spends neither an attempt, nor
    /// the operation's allowance, nor a budget token, so those rules are told there is room;
    /// every other rule (body, draining, deadline, the ambiguity of an unkeyed write, ...)
    /// applies as to any retry.
    fn decide(&mut self, failure: &Failure, free_rotation: bool, now: Now) -> Decision {
        let remaining = self
            .timing
            .deadline()
            .saturating_duration_since(now.instant);
        let config = self.upstream.config();
        // Attempts that count: free rotation retries were not.
        let mut attempt = self.counted_attempts();
        let mut operation_retries_left = self.scope.retries_left().unwrap_or(u32::MAX);
        let budget_has_token = match free_rotation {
            true => {
                attempt = attempt.min(config.max_attempts.saturating_sub(1));
                operation_retries_left = operation_retries_left.max(1);
                true
            }
            false => self.upstream.budget().has_token_in(now.moment),
        };
        let ctx = Context {
            attempt,
            max_attempts: config.max_attempts,
            operation_retries_left,
            budget_has_token,
            replay: self.request.replay(),
            draining: self.registry.drain().is_draining(),
            remaining,
            min_attempt_budget: config.min_attempt_budget,
            safety: self.request.safety(),
            transient_500: config.transient_500,
            can_refresh_auth: !self.auth_refresh_used && self.upstream.refresh_hook().is_some(),
            backoff: &config.backoff,
            previous_delay: self.backoff.previous(),
        };
        let registry = self.registry;
        registry
            .engine()
            .decide(&ctx, failure, self.rng.get(registry))
    }

    /// Carries the engine's decision out: a denial or an ambiguous outcome ends the call; a
    /// retry is spent (a free rotation retry spends nothing), announced, and waited for (the
    /// credentials refreshed first after a 401), holding nothing of the failed attempt.
    async fn carry_out<T, E>(
        &mut self,
        decision: Decision,
        error: E,
        failure: &Failure,
        free_rotation: bool,
        now: Now,
    ) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let (delay, reason) = match decision {
            Decision::Retry { delay, reason } => (delay, reason),
            Decision::Denied(reason) => return self.stop(reason, error, failure),
            Decision::Ambiguous(reason) => return self.ambiguous_step(reason, error, failure),
        };
        if free_rotation {
            return self.free_rotation_retry(failure);
        }
        // Spend only now that the retry really happens: a denied retry is free. One the
        // throttle refuses may wait to be let go (`pace`): it spends first, so that a retry
        // that waits is one the budget already granted (refunded if it never goes), and it
        // holds nothing of the failed attempt while it waits: the error, and any response or
        // connection in it, is dropped; the facts in `failure` say what happened.
        let paced = match self.grant_retry(now, delay) {
            Ok(_) => {
                drop(error);
                false
            }
            Err(DenyReason::Throttled) => {
                let spent = match admission::spend(&mut self.scope, &self.upstream, now.moment) {
                    Ok(spent) => spent,
                    Err(reason) => return self.stop(reason, error, failure),
                };
                drop(error);
                self.spans.attempt_over();
                if let Err(not_let_go) = self.pace(now.instant, delay).await {
                    admission::refund(&mut self.scope, &self.upstream, spent);
                    return match not_let_go {
                        NotLetGo::Denied(reason) => {
                            let error = E::from(self.not_let_go(reason, failure));
                            self.stop(reason, error, failure)
                        }
                        NotLetGo::Drained => self.drained_unspent(failure),
                    };
                }
                true
            }
            Err(reason) => return self.stop(reason, error, failure),
        };
        // The attempt's span ends here: the wait is not part of the attempt.
        self.spans.attempt_over();
        self.retry_paid();
        self.outcome.retrying_after(*failure);
        self.on_retry(reason, failure, delay);
        if reason == RetryReason::RefreshAuth
            && let Err(error) = self.refresh_credentials(failure).await
        {
            self.on_finished(CallKind::of(false, self.timing.attempts()));
            return Step::Done(Err(E::from(error)));
        }
        if !paced && !delay.is_zero() && self.back_off(now.instant, delay).await.is_err() {
            return self.drained(failure);
        }
        self.backoff.retried_after(delay);
        // Everything the retry waited for here is done (refresh, backoff). It begins in the next
        // turn, once admitted (perhaps after waiting for a bulkhead slot), if shutdown has not
        // started by then (`draining_before_retry`).
        Step::Retry
    }
}
