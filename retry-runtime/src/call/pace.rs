//! Waiting for admission: an attempt the throttle refuses waits, within the deadline, for the
//! upstream to accept again (a slow upstream's backlog at the pace of its answers), instead of
//! ending the call. The rules and their reasons:
//! [`throttle`](crate::throttle#waiting-for-admission).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Call;
use super::admission::{
    Admitted, AttemptEnd, AttemptKind, LetGo, LetGoHow, Permit, Refused, admit,
};
use crate::attempt::Attempt;
use crate::category::Rejection;
use crate::decision::DenyReason;
use crate::error::Error;
use crate::scope::deadline_after;
use crate::window::Tick;

/// The shortest wait between two asks: a full-jitter backoff can draw (nearly) zero, and
/// asking again within the same millisecond learns nothing new.
const SHORTEST_WAIT: Duration = Duration::from_millis(1);

/// Why a retry the throttle refused did not go after all.
pub(super) enum Unpaced {
    /// A gate or the deadline denied it, with this reason.
    Denied(DenyReason),
    /// Shutdown started while it waited.
    Drained,
}

/// Why a wait for admission ended without the upstream accepting again.
enum Unwaited {
    /// The throttle does not hold refused calls (`wait = false`), or the deadline leaves no
    /// time for another step and an attempt after it.
    NoWait,
    /// Shutdown started.
    Drained,
}

impl Call<'_> {
    /// Waits for the throttle to let go the retry it refused at `from`, asking again after
    /// `first` and then after each further backoff step. The retry is granted (and spent) when
    /// it returns `Ok`.
    pub(super) async fn pace(&mut self, from: Instant, first: Duration) -> Result<(), Unpaced> {
        match self.wait_until_accepted(from, first).await {
            Ok(at) => {
                let now = self.now(at);
                self.spend(now.budget).map_err(Unpaced::Denied)
            }
            Err(Unwaited::NoWait) => Err(Unpaced::Denied(DenyReason::Throttled)),
            Err(Unwaited::Drained) => Err(Unpaced::Drained),
        }
    }

    /// An attempt a gate refused: a first attempt the throttle refused waits for the upstream to
    /// accept again, when it may (see the module docs), and then starts; any other refusal
    /// ends the attempt with the gate's error, counted as a local rejection.
    pub(super) async fn refused_or_paced(
        &mut self,
        refused: Refused,
        attempt: &mut Attempt,
    ) -> Result<Permit, Error> {
        if refused.rejection != Rejection::Throttled || refused.kind != AttemptKind::First {
            return Err(self.refused(refused.rejection));
        }
        let first = self.next_wait(Duration::ZERO);
        let Ok(at) = self.wait_until_accepted(attempt.started, first).await else {
            return Err(self.refused(Rejection::Throttled));
        };
        let ask = self.ask(AttemptKind::First, at);
        let (upstream, rng, registry) = (&self.upstream, &mut self.rng, self.registry);
        let draw = || rng.get_or_insert_with(|| registry.rng()).f64();
        let admitted = match admit(upstream, ask, draw) {
            Ok(admitted) => admitted,
            Err(rejection) => return Err(self.refused(rejection)),
        };
        // The mark of what the upstream had answered when the attempt was admitted: now.
        if let Some(throttle) = self.upstream.throttle() {
            self.answers_mark = throttle.answers();
        }
        attempt.started = at;
        attempt.ends = self.attempt_ends(at);
        match admitted {
            Admitted::Now(permit) => Ok(permit),
            Admitted::Queue(held) => self.wait_for_slot(attempt, held).await,
        }
    }

    /// Waits from `from`, `first` and then each further backoff step, until the upstream
    /// accepts again, or, once the call has seen it slow, until its backlog lets the call go
    /// (the instant either was seen), while the throttle holds refused calls and the deadline
    /// leaves time.
    async fn wait_until_accepted(
        &mut self,
        from: Instant,
        first: Duration,
    ) -> Result<Instant, Unwaited> {
        let upstream = Arc::clone(&self.upstream);
        let Some(throttle) = upstream.throttle().filter(|t| t.config().wait) else {
            return Err(Unwaited::NoWait);
        };
        let (mut at, mut wait) = (from, first.max(SHORTEST_WAIT));
        // "Again": an answer accepted after the call was refused, not one the window still
        // holds from before.
        let refused_at = throttle.answers();
        // Once the call has seen the upstream slow, it waits in a backlog let go at the pace of
        // the upstream's answers; until then, it goes as soon as the upstream accepts again.
        let mut in_backlog = false;
        loop {
            in_backlog |= throttle.slow_at(upstream.tick(at));
            if !self.has_time_at(deadline_after(at, wait)) {
                return Err(Unwaited::NoWait);
            }
            self.on_paced(wait);
            if self.back_off(at, wait).await.is_err() {
                return Err(Unwaited::Drained);
            }
            at = Instant::now();
            let tick = upstream.tick(at);
            let again = throttle.accepted_since(refused_at)
                && match in_backlog {
                    true => throttle.lets_go_at(tick),
                    false => throttle.accepts_again_at(tick),
                };
            let how = match (again, in_backlog) {
                (true, false) => Some(LetGoHow::AcceptsAgain),
                (true, true) => Some(LetGoHow::Backlog),
                (false, _) => throttle.probes_at(tick).then_some(LetGoHow::Probe),
            };
            if let Some(how) = how {
                // Let go from a slow upstream's backlog, or as the probe: counted as let go,
                // and its accepted answer lets the next waiting call go.
                if how != LetGoHow::AcceptsAgain {
                    self.let_go = LetGo::Sent(tick);
                }
                self.on_let_go(how.as_str());
                return Ok(at);
            }
            wait = self.next_wait(wait);
        }
    }

    /// The attempt of a call [let go](crate::throttle::Throttle::lets_go_at) at `let_go` ended
    /// (`end`): an accepted answer counts toward letting the next waiting call go; after a
    /// failure, the call's retry waits again ([`grant_retry`](Self::grant_retry)). An attempt
    /// lost to connection rotation says nothing yet: its free retry carries the mark.
    pub(super) fn let_go_ended(&mut self, end: AttemptEnd, let_go: Tick) {
        match end {
            AttemptEnd::Unjudged => {}
            AttemptEnd::Accepted | AttemptEnd::FailedBelow => {
                self.let_go = LetGo::No;
                if let Some(throttle) = self.upstream.throttle() {
                    throttle.accepted_let_go(let_go);
                }
            }
            AttemptEnd::Failed | AttemptEnd::TimedOut | AttemptEnd::ConnectionFailed => {
                self.let_go = LetGo::Failed;
            }
        }
    }

    /// The next wait: the backoff's delay for the retry the call is waiting to make.
    fn next_wait(&mut self, previous: Duration) -> Duration {
        let retry = (self.attempt - self.rotations.free).max(1);
        let registry = self.registry;
        let rng = self.rng.get_or_insert_with(|| registry.rng());
        let backoff = &self.upstream.config().backoff;
        backoff.delay(retry, previous, rng).max(SHORTEST_WAIT)
    }
}
