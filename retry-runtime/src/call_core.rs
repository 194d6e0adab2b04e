//! A call on the full path: everything the attempt loop knows about one retrying call once it
//! has started (its upstream entry, scope, deadline, attempts, spans and counting), and the
//! decision after a failed attempt. [`Call`](crate::Call) wraps it, starting it only when needed
//! (see `first.rs`).

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::ambient::Installs;
use crate::attempt::{Attempt, Fresh, IdempotencyKey};
use crate::attempt_future::{Admit, Pass, TimedOut};
use crate::breaker::Admission;
use crate::call::{CallSpec, Step};
use crate::decision::{AmbiguityReason, Decision, DenyReason, RetryReason};
use crate::engine::{Context, Safety};
use crate::hot::HeldUpstream;
use crate::lazy_clock::{Deadline, Start};
use crate::observe::{self, CallKind};
use crate::registry::{Registry, Upstream};
use crate::scope::{CallScope, OpName, Operation, Unopened, min_deadline};
use crate::{Ambiguous, Classify, Error, Evidence, Failure, Replayability};

/// The span of one retrying call.
pub(crate) fn call_span(
    upstream: &str,
    operation: &str,
    method: &http::Method,
    safety: Safety,
    key: Option<&IdempotencyKey>,
) -> tracing::Span {
    tracing::info_span!(
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

/// The span of one attempt, inside its call's.
pub(crate) fn attempt_span(
    call: &tracing::Span,
    attempt: u32,
    method: &http::Method,
) -> tracing::Span {
    tracing::info_span!(
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
    )
}

/// The state of one retrying call.
#[derive(Debug)]
pub(crate) struct CallCore<'r> {
    registry: &'r Registry,
    held: HeldUpstream,
    method: http::Method,
    safety: Safety,
    replay: Replayability,
    key: Option<IdempotencyKey>,
    scope: CallScope,
    /// Fixed once the call's clock starts (see `lazy_clock.rs`).
    deadline: Deadline,
    attempt: u32,
    previous_delay: Duration,
    auth_refresh_used: bool,
    retried_mark: u64,
    /// Drawn from the registry at the first decision: a call that succeeds needs none.
    rng: Option<fastrand::Rng>,
    span: tracing::Span,
    /// What the runtime itself did to the last attempt: the facts it knows first-hand
    /// override whatever the caller's error type reports.
    local: Local,
    /// The instant read when the call was created (a call inside an enclosing scope reads it
    /// to compare deadlines), reused by the first attempt.
    created: Option<Instant>,
    /// Whether the call was counted in its upstream's budget (once, when its first attempt
    /// ends).
    deposited: bool,
    /// The weakest body replayability the attempts reported (see [`Attempt::report_body`]).
    reported: Replayability,
    /// The last attempt, whose allocation the next attempt reuses.
    spare: Option<Attempt>,
}

/// What the runtime itself did to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    Nothing,
    CircuitOpen,
    BulkheadFull,
    TimedOut,
}

impl Drop for CallCore<'_> {
    fn drop(&mut self) {
        if let Some(spare) = self.spare.take() {
            self.held.park(spare);
        }
        // Cancelled during its first attempt: it still was a call.
        if self.attempt > 0 && !self.deposited {
            self.deposit(Instant::now());
        }
    }
}

impl<'r> CallCore<'r> {
    /// Opens (or joins) the operation scope of a call to `held`'s upstream; `span` is the
    /// call's span if it was made already (see `first.rs`).
    pub(crate) fn build(
        spec: CallSpec<'r>,
        mut held: HeldUpstream,
        span: Option<tracing::Span>,
    ) -> Self {
        let spare = held.take_spare();
        let upstream = held.get();
        let config = upstream.config();
        let retries = config.max_attempts.saturating_sub(1);
        // Only a call inside an enclosing scope needs the time now, to compare deadlines.
        let (scope, deadline, created) = match Operation::current() {
            Some(op) => {
                op.init_allowance(retries);
                let now = Instant::now();
                let own = now + config.deadline;
                let deadline = min_deadline(op.deadline(), Some(own)).unwrap_or(own);
                (CallScope::Joined(op), Deadline::At(deadline), Some(now))
            }
            None => {
                let name = spec.operation.map(OpName::from);
                let scope = CallScope::Unopened(Unopened::new(name, retries));
                (scope, Deadline::AfterStart(config.deadline), None)
            }
        };
        let safety = Safety::of(
            &spec.method,
            spec.key.is_some(),
            config.dedups_idempotency_key,
        );
        let span = span.unwrap_or_else(|| {
            call_span(
                upstream.name(),
                scope.name(upstream.name()),
                &spec.method,
                safety,
                spec.key.as_ref(),
            )
        });
        CallCore {
            registry: spec.registry,
            rng: None,
            held,
            method: spec.method,
            safety,
            replay: spec.replay,
            key: spec.key,
            scope,
            deadline,
            attempt: 0,
            previous_delay: Duration::ZERO,
            auth_refresh_used: false,
            retried_mark: 0,
            span,
            local: Local::Nothing,
            created,
            deposited: false,
            reported: Replayability::Replayable,
            spare,
        }
    }

    /// The first attempt started on the fast path (`first.rs`) and goes on here.
    pub(crate) fn first_started(&mut self) {
        self.attempt = 1;
        self.retried_mark = self.scope.retried_failures();
    }

    /// The first attempt succeeded on the fast path, which counted the call.
    pub(crate) fn first_succeeded(&mut self) {
        self.attempt = 1;
        self.deposited = true;
    }

    /// A scope opened during an attempt's poll becomes the call's own.
    pub(crate) fn adopt(&mut self, opened: Option<Operation>) {
        self.scope.adopt(opened);
    }

    /// Lowers the body's replayability once it is known to be weaker than declared (e.g. the
    /// integration found the body cannot be copied for another attempt). Never raises it.
    pub(crate) fn downgrade_replay(&mut self, replay: Replayability) {
        self.replay = self.replay.min(replay);
    }

    /// Retries the operation (across every layer inside it) may still make.
    pub(crate) fn retries_left(&self) -> Option<u32> {
        self.scope.retries_left()
    }

    /// Attempts started so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The upstream called.
    pub(crate) fn upstream(&self) -> &Arc<Upstream> {
        self.held.get()
    }

    /// The call's absolute deadline, starting the call's clock if nothing did yet (the start
    /// of its first attempt, the last attempt run).
    fn deadline(&mut self) -> Instant {
        let at = match (self.deadline, &self.spare) {
            (Deadline::At(at), _) => at,
            (deadline, Some(last)) => deadline.resolve(&last.state.facts.started),
            (deadline, None) => deadline.resolve(&Start::unread()),
        };
        self.deadline = Deadline::At(at);
        at
    }

    /// Counts the call in its upstream's budget, once.
    fn deposit(&mut self, at: Instant) {
        if !self.deposited {
            self.deposited = true;
            self.held.get().budget().deposit_at(at);
        }
    }

    /// Starts the next attempt, or fails with [`Error::DeadlineExceeded`] when less than the
    /// minimum attempt budget is left (nothing is sent then). `span` is the attempt's span if
    /// it was made already (see `first.rs`).
    pub(crate) fn next_attempt(&mut self, span: Option<tracing::Span>) -> Result<Attempt, Error> {
        // A first attempt under the call's own deadline starts with all of it: no clock read.
        let (started, deadline, remaining) = match (self.attempt, self.deadline) {
            (0, Deadline::AfterStart(all)) => (Start::unread(), Deadline::AfterStart(all), all),
            _ => {
                let deadline = self.deadline();
                let now = match (self.attempt, self.created) {
                    (0, Some(created)) => created,
                    _ => Instant::now(),
                };
                let remaining = deadline.saturating_duration_since(now);
                (Start::at(now), Deadline::At(deadline), remaining)
            }
        };
        let upstream = self.held.get();
        let config = upstream.config();
        if remaining < config.min_attempt_budget || remaining.is_zero() {
            self.span.in_scope(|| {
                tracing::info!(target: "retry_runtime::decision", reason = "deadline", "no time left for an attempt")
            });
            return Err(Error::DeadlineExceeded {
                upstream: upstream.name_arc().clone(),
            });
        }
        self.attempt += 1;
        self.retried_mark = self.scope.retried_failures();
        let span = span.unwrap_or_else(|| attempt_span(&self.span, self.attempt, &self.method));
        let fresh = Fresh {
            number: self.attempt,
            method: &self.method,
            key: self.key.as_ref(),
            deadline,
            timeout: config.attempt_timeout.min(remaining),
            started,
            retries_left: self.scope.retries_left(),
            span,
        };
        Ok(Attempt::fill(self.spare.take(), upstream, |facts| {
            facts.renew(fresh)
        }))
    }

    /// What an attempt installs of the call's scope.
    pub(crate) fn installs(&self) -> Installs {
        self.scope.for_attempt()
    }

    /// Asks the breaker, then the bulkhead, to let `attempt` start.
    pub(crate) fn admit(&mut self, attempt: &Attempt) -> Result<Admit, Error> {
        let upstream = self.held.get();
        self.local = Local::Nothing;
        let admission = match upstream.breaker() {
            Some(breaker) => match breaker.admit() {
                Some(admission) => Some(admission),
                None => {
                    self.local = Local::CircuitOpen;
                    return Err(Error::CircuitOpen {
                        upstream: upstream.name_arc().clone(),
                    });
                }
            },
            None => None,
        };
        let Some(bulkhead) = upstream.bulkhead() else {
            return Ok(Admit::Now(Pass {
                admission,
                permit: None,
            }));
        };
        if let Ok(permit) = bulkhead.clone().try_acquire_owned() {
            return Ok(Admit::Now(Pass {
                admission,
                permit: Some(permit),
            }));
        }
        // The call's clock starts before the wait (the deadline counts it), the attempt's when
        // it is admitted.
        let bulkhead = bulkhead.clone();
        let min_attempt_budget = upstream.config().min_attempt_budget;
        let deadline = self.deadline.resolve(&attempt.state.facts.started);
        self.deadline = Deadline::At(deadline);
        let until = deadline.checked_sub(min_attempt_budget).unwrap_or(deadline);
        Ok(Admit::Wait {
            admission,
            bulkhead,
            until,
        })
    }

    /// After waiting for a bulkhead slot (`permit` is `None` if none freed up in time): the
    /// attempt starts `now`, with what is left of the deadline.
    pub(crate) fn slot_waited(
        &mut self,
        attempt: &mut Attempt,
        admission: Option<Admission>,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        now: Instant,
    ) -> Result<Pass, Error> {
        let deadline = self.deadline.resolve(&attempt.state.facts.started);
        let facts = attempt.facts_mut();
        facts.timeout = facts.timeout.min(deadline.saturating_duration_since(now));
        facts.started = Start::at(now);
        facts.deadline = Deadline::At(deadline);
        if permit.is_some() {
            return Ok(Pass { admission, permit });
        }
        let upstream = self.held.get();
        if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
            breaker.release(admission);
        }
        self.local = Local::BulkheadFull;
        Err(Error::BulkheadFull {
            upstream: upstream.name_arc().clone(),
        })
    }

    /// The breaker or the bulkhead refused the attempt: it never started.
    pub(crate) fn refused<E: From<Error>>(&mut self, attempt: Option<Attempt>, error: Error) -> E {
        if attempt.is_some() {
            self.spare = attempt;
        }
        E::from(error)
    }

    /// Counts the attempt that ended with `output` (in the budget, once per call, and in the
    /// breaker) and turns a timeout into the caller's error. `opened` is the call's own scope if
    /// the attempt opened it.
    pub(crate) fn end_attempt<T, E>(
        &mut self,
        output: Result<Result<T, E>, TimedOut>,
        attempt: Option<Attempt>,
        opened: Option<Operation>,
        pass: Pass,
    ) -> Result<T, E>
    where
        E: Classify + From<Error>,
    {
        let Pass { admission, permit } = pass;
        drop(permit);
        self.scope.adopt(opened);
        // Read by the attempt's timer, its code, or the call before: `None` for an attempt
        // that completed in its first poll and never looked at the time.
        let mut clock = None;
        let number = self.attempt;
        let mut timeout = Duration::ZERO;
        if let Some(attempt) = attempt {
            self.reported = self.reported.min(attempt.state.report.replay());
            clock = attempt.state.facts.started.read();
            timeout = attempt.state.facts.timeout;
            self.spare = Some(attempt);
        }
        let upstream = self.held.get();
        let result = match output {
            Ok(result) => result,
            Err(TimedOut) => {
                self.local = Local::TimedOut;
                Err(E::from(Error::AttemptTimeout {
                    upstream: upstream.name_arc().clone(),
                    attempt: number,
                    timeout,
                }))
            }
        };
        let probe = admission.as_ref().is_some_and(|a| a.is_probe());
        match (clock, &result) {
            // The happy path: counted in a batch, without reading the clock (see `hot.rs`).
            (None, Ok(_)) if number == 1 && !probe => {
                self.deposited = true;
                self.held.count_happy();
            }
            (clock, result) => {
                let at = clock.unwrap_or_else(Instant::now);
                // This thread's happy calls not counted yet go first, so the breaker judges
                // this attempt against every earlier one made here.
                self.held.flush(at);
                self.deposit(at);
                let upstream = self.held.get();
                if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
                    let failed = match result {
                        Ok(_) => false,
                        Err(e) => crate::breaker::is_upstream_failure(&Failure::of(e)),
                    };
                    breaker.record_at(admission, failed, at);
                }
            }
        }
        result
    }

    /// Decides after an attempt: returns success, or asks the engine, spends the retry (shared
    /// allowance, then budget), drops the error and sleeps the backoff before answering
    /// [`Step::Retry`]. Nothing from the failed attempt is held while sleeping.
    pub(crate) async fn settle<T, E>(&mut self, result: Result<T, E>) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let error = match result {
            Ok(value) => {
                self.finish(CallKind::of(true, self.attempt));
                return Step::Done(Ok(value));
            }
            Err(error) => error,
        };
        // Refused by the breaker or the bulkhead before its first attempt ran: still a call.
        if !self.deposited {
            self.deposit(Instant::now());
        }
        let mut failure = Failure::of(&error);
        match self.local {
            Local::CircuitOpen => failure.reject(crate::Rejection::CircuitOpen),
            Local::BulkheadFull => failure.reject(crate::Rejection::BulkheadFull),
            // Cut by our own timeout: the request may have been sent, whatever the error says.
            Local::TimedOut => failure.evidence = Evidence::SentNoResponse,
            Local::Nothing => {}
        }
        if self.scope.retried_failures() > self.retried_mark {
            failure.already_retried = true;
        }
        if let Some(attempt) = &self.spare {
            let span = &attempt.state.facts.span;
            span.record("evidence", failure.evidence.as_str());
            span.record("error.type", failure.evidence.as_str());
            if let Some(status) = failure.status {
                span.record("http.response.status_code", status);
            }
        }
        let decision = self.decide(&failure);
        self.apply(decision, error, &failure).await
    }

    /// After a reconcile check answered
    /// [`Reconciled::NotHappened`](crate::Reconciled::NotHappened): the write did not happen,
    /// so the attempt counts as not sent and the remaining rules (attempts, budget, draining,
    /// deadline) decide whether to retry.
    pub(crate) async fn settle_not_happened<T, E>(&mut self, error: E) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let failure = Failure::new(Evidence::NotSent);
        let decision = self.decide(&failure);
        self.apply(decision, error, &failure).await
    }

    /// The reconcile check found that the write happened: the call ends successfully with the
    /// check's value (recorded as a success, with the attempts made).
    pub(crate) fn happened<T>(&mut self, value: T) -> T {
        self.span.in_scope(|| {
            tracing::info!(
                target: "retry_runtime::decision",
                decision = "reconciled",
                attempt = self.attempt,
                "the reconcile check found the write: returning its result"
            )
        });
        self.finish(CallKind::of(true, self.attempt));
        value
    }

    /// Reports an ambiguous outcome as the caller's error type.
    pub(crate) fn ambiguous<E: From<Error>>(&mut self, ambiguous: Ambiguous) -> E {
        self.finish(CallKind::Ambiguous);
        if self.attempt > 1 {
            self.scope.note_retried_failure();
        }
        E::from(Error::from(ambiguous))
    }

    fn decide(&mut self, failure: &Failure) -> Decision {
        let remaining = self.deadline().saturating_duration_since(Instant::now());
        let config = self.held.get().config();
        let ctx = Context {
            attempt: self.attempt,
            max_attempts: config.max_attempts,
            operation_retries_left: self.scope.retries_left().unwrap_or(u32::MAX),
            budget_has_token: self.held.get().budget().has_token(),
            replay: self.replay.min(self.reported),
            draining: self.registry.drain().is_draining(),
            remaining,
            min_attempt_budget: config.min_attempt_budget,
            safety: self.safety,
            transient_500: config.transient_500,
            can_refresh_auth: !self.auth_refresh_used && self.held.get().refresh_hook().is_some(),
            backoff: &config.backoff,
            previous_delay: self.previous_delay,
        };
        let registry = self.registry;
        let rng = self.rng.get_or_insert_with(|| registry.rng());
        registry.engine().decide(&ctx, failure, rng)
    }

    async fn apply<T, E>(&mut self, decision: Decision, error: E, failure: &Failure) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        match decision {
            Decision::Retry { delay, reason } => {
                // Spend only now that the retry really happens: a denied retry is free.
                if !self.scope.take_retry() {
                    return self.stop(DenyReason::MaxAttempts, error, failure);
                }
                if !self.held.get().budget().withdraw() {
                    self.scope.give_back_retry();
                    return self.stop(DenyReason::BudgetExhausted, error, failure);
                }
                self.span.in_scope(|| {
                    tracing::info!(
                        target: "retry_runtime::decision",
                        decision = "retry",
                        reason = %reason,
                        attempt = self.attempt,
                        evidence = failure.evidence.as_str(),
                        status = failure.status,
                        delay_ms = delay.as_millis() as u64,
                        "retrying"
                    )
                });
                observe::retried(self.held.get().name(), self.held.get().budget().available());
                // Drop the error (and any response or connection it holds) before waiting.
                drop(error);
                if reason == RetryReason::RefreshAuth {
                    self.auth_refresh_used = true;
                    if let Some(hook) = self.held.get().refresh_hook().cloned()
                        && let Err(e) = hook.refresh().instrument(self.span.clone()).await
                    {
                        self.finish(CallKind::of(false, self.attempt));
                        return Step::Done(Err(E::from(Error::RefreshFailed(e))));
                    }
                }
                if !delay.is_zero() {
                    // Boxed: a call whose first attempt succeeds never sleeps, and its future
                    // (moved on every `.await` of its callers) should not carry a timer.
                    Box::pin(tokio::time::sleep(delay)).await;
                }
                self.previous_delay = delay;
                Step::Retry
            }
            Decision::Denied(reason) => self.stop(reason, error, failure),
            Decision::Ambiguous(reason) => self.ambiguous_step(reason, error, failure),
        }
    }

    /// A denied retry. For a write whose last attempt may have executed without its response
    /// arriving, stopping does not make the outcome known: reporting a plain failure would tell
    /// the caller the write did not happen. That is an ambiguous outcome (carrying the key, so a
    /// keyed write can be replayed safely later), whatever stopped the retries.
    fn stop<T, E>(&mut self, reason: DenyReason, error: E, failure: &Failure) -> Step<T, E>
    where
        E: Display,
    {
        let unknown = match (failure.evidence, failure.status) {
            _ if self.safety == Safety::Read => None,
            (Evidence::SentNoResponse, _) => Some(AmbiguityReason::SentNoResponse),
            (Evidence::PartialResponse, _) => Some(AmbiguityReason::PartialResponse),
            (Evidence::ResponseReceived, Some(s @ 502..=504)) => Some(AmbiguityReason::Status(s)),
            _ => None,
        };
        match (unknown, reason) {
            // These say the request or response itself is settled (or already reported).
            (_, DenyReason::PermanentFailure(_) | DenyReason::Status(_)) | (None, _) => {
                self.deny(reason, error)
            }
            (Some(ambiguity), _) => {
                self.record_denial(reason, "not retrying, and the write's outcome is unknown");
                self.ambiguous_step(ambiguity, error, failure)
            }
        }
    }

    fn ambiguous_step<T, E>(
        &mut self,
        reason: AmbiguityReason,
        error: E,
        failure: &Failure,
    ) -> Step<T, E>
    where
        E: Display,
    {
        self.span.in_scope(|| {
            tracing::warn!(
                target: "retry_runtime::decision",
                decision = "ambiguous",
                reason = %reason,
                attempt = self.attempt,
                evidence = failure.evidence.as_str(),
                status = failure.status,
                "outcome unknown: not retrying a write that may have happened"
            )
        });
        let ambiguous = Ambiguous {
            upstream: self.held.get().name_arc().clone(),
            operation: self.scope.name(self.held.get().name()).to_owned(),
            attempts: self.attempt,
            evidence: failure.evidence,
            status: failure.status,
            reason,
            idempotency_key: self.key.clone(),
            last_error: error.to_string(),
        };
        Step::Ambiguous { error, ambiguous }
    }

    /// The decision event and the denial counter, with the reason's name.
    fn record_denial(&self, reason: DenyReason, message: &'static str) {
        self.span.in_scope(|| {
            tracing::info!(
                target: "retry_runtime::decision",
                decision = "denied",
                reason = %reason,
                attempt = self.attempt,
                "{message}"
            )
        });
        observe::denied(self.held.get().name(), reason);
    }

    fn deny<T, E>(&mut self, reason: DenyReason, error: E) -> Step<T, E> {
        self.record_denial(reason, "not retrying");
        if self.attempt > 1 {
            // Tell enclosing retrying calls that this failure was already retried here.
            self.scope.note_retried_failure();
        }
        if matches!(
            reason,
            DenyReason::BudgetExhausted | DenyReason::CircuitOpen | DenyReason::BulkheadFull
        ) {
            // The upstream is failing or saturated for everyone: a caller in another process
            // that retried the whole chain would only add calls the budget just refused.
            self.scope.note_overloaded();
        }
        self.finish(CallKind::of(false, self.attempt));
        Step::Done(Err(error))
    }

    pub(crate) fn finish(&mut self, kind: CallKind) {
        self.span.record("attempts", self.attempt);
        self.span.record("outcome", kind.as_str());
        observe::call_finished(self.held.get().name(), kind);
        if cfg!(feature = "metrics")
            && let Some(breaker) = self.held.get().breaker()
        {
            observe::breaker_state(self.held.get().name(), breaker.state());
        }
    }
}
