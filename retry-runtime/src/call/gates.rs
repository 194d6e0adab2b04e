//! The call at the gates: its next attempt, counted and described when time is left for it,
//! and admitted through the one seam every local gate sits behind (`admission`), waiting for a
//! bulkhead slot or, refused by the throttle, to be let go (`pace`); the retry a decision
//! grants, let through by the throttle and spent.

use tokio::time::Instant;

use super::admission::{self, Admitted, Ask, AttemptKind, Permit, Refused, admit};
use super::events;
use super::outcome::Local;
use super::pacing::{LetGo, Waits};
use super::state::{Call, Now};
use crate::attempt::Attempt;
use crate::budget::Moment;
use crate::category::Rejection;
use crate::decision::DenyReason;
use crate::error::Error;

impl Call<'_> {
    /// The next attempt, if time is left for one.
    pub(super) fn next_attempt(&mut self) -> Result<Attempt, Error> {
        let now = self.timing.next_start();
        if !self.has_time_at(now) {
            self.on_no_time();
            self.outcome.set_local(Local::NoTime);
            let last = self.outcome.last_failure();
            return Err(Error::DeadlineExceeded {
                upstream: self.upstream.name_arc().clone(),
                attempts: self.timing.attempts(),
                last_status: last.and_then(|f| f.status),
                last_evidence: last.map(|f| f.evidence),
            });
        }
        self.outcome.set_local(Local::Untouched);
        Ok(self.begin_attempt(now))
    }

    /// Counts and describes an attempt starting at `now` (it has time, and, for a hedge,
    /// everything else it needs).
    #[inline]
    pub(super) fn begin_attempt(&mut self, now: Instant) -> Attempt {
        let number = self.timing.begin();
        self.outcome.started(self.scope.retried_failures());
        let method = self.request.method();
        Attempt {
            upstream: self.upstream.clone(),
            number,
            method: method.clone(),
            key: self.request.key().cloned(),
            deadline: self.timing.deadline(),
            ends: self.attempt_ends(now),
            started: now,
            retries_left: self.scope.retries_left(),
            span: events::attempt_span(self.spans.call(), number, method),
        }
    }

    /// Whether `attempt` waits before the gates: a replay first goes at the pace of the
    /// upstream's answers (`pace`), a retry or replay of a partition over its quota waits for
    /// its pushback to end (`quota`), and a retry after the call's own 429 goes at the pace of
    /// the upstream's answers; a live call's first attempt waits for none of them.
    #[inline]
    fn must_wait(&self, attempt: &Attempt) -> bool {
        matches!(self.pacing.let_go(), LetGo::Held)
            || (attempt.number > 1 && (self.pacing.partition().is_some() || self.met_quota()))
    }

    /// Whether the call's last failure was a 429: its retry is part of a backlog the quota
    /// built. Each call honours its own `Retry-After`, so the calls that met a spell of 429s
    /// all come back a `Retry-After` later, on top of the calls that keep coming, a burst to
    /// an upstream with a capacity: it goes at the pace of the upstream's answers.
    #[inline]
    pub(super) fn met_quota(&self) -> bool {
        self.outcome
            .last_failure()
            .is_some_and(|failure| failure.status == Some(429))
    }

    /// Holds `attempt` as [`must_wait`](Self::must_wait) says.
    async fn wait_before_gates(&mut self, attempt: &mut Attempt) -> Result<(), Error> {
        let held = matches!(self.pacing.let_go(), LetGo::Held);
        if held {
            self.wait_for_release(attempt, Waits::Nobody).await?;
        }
        match self.pacing.partition() {
            Some(partition) => self.wait_for_quota(partition, attempt).await?,
            None if !held && self.met_quota() => {
                self.wait_for_release(attempt, Waits::Caller).await?;
            }
            None => {}
        }
        Ok(())
    }

    /// Admits `attempt` (not a hedge) through every local gate, once it has waited as it must
    /// ([`must_wait`](Self::must_wait): a call that need not builds no waiting future): at
    /// once, after a wait for a bulkhead slot, or, refused by the throttle, after waiting to
    /// be let go; the attempt then starts when admitted. The last step before a retry begins:
    /// once shutdown has started since its decision, it does not
    /// ([`retry_not_begun`](Self::retry_not_begun)).
    pub(super) async fn admit_next(&mut self, attempt: &mut Attempt) -> Result<Permit, Error> {
        if self.must_wait(attempt) {
            self.wait_before_gates(attempt).await?;
        }
        let kind = AttemptKind::after(attempt.number - 1);
        let permit = match self.try_admit(kind, attempt.started) {
            Ok(Admitted::Now(permit)) => permit,
            Ok(Admitted::Queue(held)) => self.wait_for_bulkhead(attempt, held).await?,
            Err(refused) => self.refused_or_paced(refused, attempt).await?,
        };
        if self.draining_before_retry() {
            drop(permit);
            return Err(self.retry_not_begun());
        }
        Ok(permit)
    }

    /// What the gates are asked about the call's next attempt of `kind`.
    #[inline]
    pub(super) fn ask(&self, kind: AttemptKind, at: Instant) -> Ask {
        let own = match (kind, self.upstream.throttle()) {
            (AttemptKind::Hedge, Some(throttle)) => {
                self.pacing.own_in_window(throttle, self.upstream.tick(at))
            }
            _ => 0,
        };
        Ask {
            kind,
            at,
            tick: self.timing.known_tick(at),
            deadline: self.timing.deadline(),
            own,
            let_go: kind == AttemptKind::First && matches!(self.pacing.let_go(), LetGo::Sent(_)),
        }
    }

    /// Grants the retry the engine decided at `now`: the upstream's throttle lets it go (extra
    /// work reaches the upstream only in the proportion it currently accepts, judged on what
    /// the other calls met: this call's own attempts are what the retry is for; the odds are
    /// drawn now, before the backoff, and the retry is counted as sent when its attempt
    /// starts), then it is [spent](admission::spend).
    pub(super) fn grant_retry(
        &mut self,
        now: Now,
        delay: std::time::Duration,
    ) -> Result<Moment, DenyReason> {
        if let Some(throttle) = self.upstream.throttle() {
            // A call let go after waiting (from a slow upstream's backlog, or as its probe)
            // went to learn whether the upstream accepts again, and it does not: its retry
            // waits again, behind the calls that waited with it, rather than going at once as
            // a lone call's would.
            if self.pacing.take_failed_let_go() {
                return Err(DenyReason::Throttled);
            }
            // An upstream that has failed everything for the hold gets no retry, a lone
            // call's included: a client calling one call at a time sends a dead upstream
            // about one request per call, as no retry would; nor does a retry whose backoff
            // ends after the hold (it waits, within the hold, to be let go).
            let tick = now.tick;
            if throttle
                .hold_ends_after(tick)
                .is_none_or(|left| left <= delay)
            {
                return Err(DenyReason::Throttled);
            }
            // An upstream that failed every other call since this one's attempt started is
            // failing now, whatever its window still holds from before: the retry waits.
            if throttle.failing_all_since(self.pacing.answers_mark(), 1) {
                return Err(DenyReason::Throttled);
            }
            let own = self.pacing.own_in_window(throttle, tick);
            let draw = self.rng.f64(self.registry);
            if !throttle.admits_extra(tick, draw, own) {
                return Err(DenyReason::Throttled);
            }
        }
        admission::spend(&mut self.scope, &self.upstream, now.moment)
    }

    /// [`admit`] for the call's next attempt (not a hedge), starting `at` (when
    /// [`next_attempt`](Self::next_attempt) read the clock for it). A refusal is not counted
    /// yet: the attempt may still wait for admission
    /// ([`refused_or_paced`](Self::refused_or_paced)).
    #[inline]
    pub(super) fn try_admit(
        &mut self,
        kind: AttemptKind,
        at: Instant,
    ) -> Result<Admitted, Refused> {
        let ask = self.ask(kind, at);
        let (rng, registry) = (&mut self.rng, self.registry);
        let admitted = admit(&self.upstream, ask, || rng.f64(registry))
            .map_err(|rejection| Refused { rejection, kind });
        self.pacing.mark_answers(self.upstream.throttle());
        admitted
    }

    /// [`admission::wait_for_slot`] for `attempt`, which then starts when admitted, with what
    /// is left of the deadline.
    pub(super) async fn wait_for_bulkhead(
        &mut self,
        attempt: &mut Attempt,
        queued: Permit,
    ) -> Result<Permit, Error> {
        let ask = self.ask(AttemptKind::after(attempt.number - 1), attempt.started);
        match admission::wait_for_slot(&self.upstream, queued, ask).await {
            Ok(permit) => {
                let now = Instant::now();
                attempt.started = now;
                attempt.ends = self.attempt_ends(now);
                Ok(permit)
            }
            Err(rejection) => Err(self.refused(rejection)),
        }
    }

    /// A gate refused the attempt: the loop's own fact, counted, and the caller's error.
    #[cold]
    pub(super) fn refused(&mut self, rejection: Rejection) -> Error {
        self.outcome.set_local(Local::Refused(rejection));
        self.on_refused(rejection);
        admission::refusal(rejection, &self.upstream)
    }
}
