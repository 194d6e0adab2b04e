//! Waiting for admission: an attempt the throttle refuses waits, within the deadline and the
//! throttle's hold, to be let go at the pace of the upstream's answers, instead of ending the
//! call. The rules and their reasons:
//! [`throttle`](crate::throttle#holding).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{Admitted, Ask, AttemptEnd, AttemptKind, Permit, Refused, admit};
use super::pacing::{LetGo, LetGoHow, Waits};
use super::state::Call;
use crate::attempt::Attempt;
use crate::category::Rejection;
use crate::decision::DenyReason;
use crate::error::Error;
use crate::throttle::Throttle;
use crate::throttle::marks::Asked;
use crate::window::Tick;

/// The shortest wait between two asks: a full-jitter backoff can draw (nearly) zero, and
/// asking again within the same millisecond learns nothing new.
const SHORTEST_WAIT: Duration = Duration::from_millis(1);

/// Why a retry the throttle refused did not go after all.
pub(super) enum NotLetGo {
    /// The throttle or the deadline denied it, with this reason.
    Denied(DenyReason),
    /// Shutdown started while it waited.
    Drained,
}

/// Why a wait for admission ended without the throttle letting the call go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GaveUp {
    /// The throttle does not hold refused calls (`wait = false`), or it holds as many as it
    /// may (`max_waiting`), or the upstream has accepted nothing within its `hold`.
    NotHeld,
    /// No time is left for an attempt before the deadline.
    NoTime,
    /// Shutdown started.
    Drained,
}

impl Call<'_> {
    /// Waits for the throttle to let go the retry it refused at `from`, asking again after
    /// `first` and then after each further backoff step.
    pub(super) async fn pace(&mut self, from: Instant, first: Duration) -> Result<(), NotLetGo> {
        match self.wait_until_let_go(from, first).await {
            Ok(_) => Ok(()),
            Err(GaveUp::NotHeld) => Err(NotLetGo::Denied(DenyReason::Throttled)),
            Err(GaveUp::NoTime) => Err(NotLetGo::Denied(DenyReason::Deadline)),
            Err(GaveUp::Drained) => Err(NotLetGo::Drained),
        }
    }

    /// An attempt a gate refused: a first attempt the throttle refused waits to be let go,
    /// when it may (see the module docs), and then starts; any other refusal ends the attempt
    /// with the gate's error, counted as a local rejection.
    pub(super) async fn refused_or_paced(
        &mut self,
        refused: Refused,
        attempt: &mut Attempt,
    ) -> Result<Permit, Error> {
        if refused.rejection != Rejection::Throttled || refused.kind != AttemptKind::First {
            return Err(self.refused(refused.rejection));
        }
        let first = self.next_wait(Duration::ZERO);
        let Ok(at) = self.wait_until_let_go(attempt.started, first).await else {
            return Err(self.refused(Rejection::Throttled));
        };
        let ask = Ask {
            let_go: true,
            ..self.ask(AttemptKind::First, at)
        };
        let (rng, registry) = (&mut self.rng, self.registry);
        let admitted = match admit(&self.upstream, ask, || rng.f64(registry)) {
            Ok(admitted) => admitted,
            Err(rejection) => return Err(self.refused(rejection)),
        };
        // The mark of what the upstream had answered when the attempt was admitted: now.
        self.pacing.mark_answers(self.upstream.throttle());
        attempt.started = at;
        attempt.ends = self.attempt_ends(at);
        match admitted {
            Admitted::Now(permit) => Ok(permit),
            Admitted::Queue(held) => self.wait_for_bulkhead(attempt, held).await,
        }
    }

    /// Waits from `from`, `first` and then each further backoff step, until the throttle lets
    /// the call go (the instant it did): from the backlog, at the pace of the upstream's
    /// answers, once it has accepted an attempt since the call was refused; or as the probe,
    /// when nobody has asked the upstream anything for a while. The call waits
    /// only while the throttle holds refused calls (a place among the waiting, an upstream that
    /// accepted within the hold) and the deadline leaves time for an attempt; each wait is cut
    /// to what is left of both, so the call gives up when the time is gone, not when a drawn
    /// step would overrun it. Nothing of the failed attempt is held meanwhile.
    async fn wait_until_let_go(
        &mut self,
        from: Instant,
        first: Duration,
    ) -> Result<Instant, GaveUp> {
        let upstream = Arc::clone(&self.upstream);
        let Some(throttle) = upstream.throttle().filter(|t| t.config().wait) else {
            return Err(GaveUp::NotHeld);
        };
        if !throttle.holds_at(upstream.tick(from)) {
            return Err(GaveUp::NotHeld);
        }
        let Some(_place) = throttle.enter_waiting() else {
            return Err(GaveUp::NotHeld);
        };
        let latest = self.latest_start();
        let (mut at, mut wait) = (from, first.max(SHORTEST_WAIT));
        // "Again": an answer accepted after the call was refused, not one the window still
        // holds from before.
        let refused_at = throttle.answers();
        let mut asked = throttle.asked(None, upstream.tick(from));
        loop {
            let tick = upstream.tick(at);
            let Some(hold_left) = throttle.hold_ends_after(tick) else {
                return Err(GaveUp::NotHeld);
            };
            // Woken up to a timer tick late: cut a tick short of the latest start, so that the
            // attempt still has its minimum budget when the call is let go.
            let time_left = latest.saturating_duration_since(at);
            if time_left < 2 * SHORTEST_WAIT {
                // The throttle held the call until no time was left: the upstream is not taking
                // its share, and a caller above that retried the whole chain would send it
                // again past the hold, as a first attempt nothing paces.
                self.scope.note_overloaded();
                return Err(GaveUp::NoTime);
            }
            let wait_now = wait
                .min(time_left - SHORTEST_WAIT)
                .min(hold_left.max(SHORTEST_WAIT));
            self.on_paced(wait_now);
            if self.back_off(at, wait_now).await.is_err() {
                return Err(GaveUp::Drained);
            }
            at = Instant::now();
            let tick = upstream.tick(at);
            if !throttle.holds_at(tick) {
                return Err(GaveUp::NotHeld);
            }
            let waits = match throttle.accepted_since(refused_at) {
                true => Waits::Caller,
                false => Waits::CallerUntilAccepted,
            };
            if self.let_go_at(throttle, waits, asked, tick) {
                return Ok(at);
            }
            asked = throttle.asked(Some(asked), tick);
            wait = self.next_wait(wait);
        }
    }

    /// Whether the throttle lets a waiting call go at `tick`: from the backlog, at the pace of
    /// the upstream's answers (a caller's once the upstream accepted an attempt since the call
    /// was refused; held work only into capacity no caller needs), or as its probe when nobody
    /// has asked it anything since `asked` (held work only while no caller waits). A call let
    /// go is counted as such: its accepted answer lets the next waiting call go.
    fn let_go_at(&mut self, throttle: &Throttle, waits: Waits, asked: Asked, tick: Tick) -> bool {
        let backlog = match waits {
            Waits::Caller => throttle.lets_go_at(tick),
            Waits::CallerUntilAccepted => false,
            Waits::Nobody => throttle.lets_held_go_at(tick),
        };
        let probes = || {
            (waits != Waits::Nobody || throttle.waiting() == 0)
                && throttle.probes_since(asked, tick)
        };
        let how = if backlog {
            LetGoHow::Backlog
        } else if probes() {
            LetGoHow::Probe
        } else {
            return false;
        };
        self.pacing.set_let_go(LetGo::Sent(tick));
        self.on_let_go(how.as_str());
        true
    }

    /// Held work (a durable replay, the calls a partition's pushback held) goes only when the
    /// throttle lets it go: at the pace of the upstream's answers (a replay, which nobody
    /// waits for, only into capacity no caller needs:
    /// [`lets_held_go_at`](Throttle::lets_held_go_at)), or as its probe when nobody has had an
    /// answer for a while (a replay only while no caller waits); it asks again every tenth of the
    /// window, and is refused, sending nothing, when no time is left for an attempt (a replay
    /// then waits for its durable backoff). Work held through an outage that goes together
    /// when the upstream comes back is a stampede into an upstream that has just recovered.
    pub(super) async fn wait_for_release(
        &mut self,
        attempt: &mut Attempt,
        waits: Waits,
    ) -> Result<(), Error> {
        let upstream = Arc::clone(&self.upstream);
        let Some(throttle) = upstream.throttle() else {
            self.pacing.set_let_go(LetGo::Ordinary);
            return Ok(());
        };
        let step = (throttle.config().window / 10).max(SHORTEST_WAIT);
        let mut asked = throttle.asked(None, upstream.tick(attempt.started));
        loop {
            let tick = upstream.tick(attempt.started);
            if self.let_go_at(throttle, waits, asked, tick) {
                return Ok(());
            }
            asked = throttle.asked(Some(asked), tick);
            if !self.has_time_at(attempt.started + step) {
                self.pacing.set_let_go(LetGo::Ordinary);
                return Err(self.refused(Rejection::Throttled));
            }
            self.on_paced(step);
            if self.back_off(attempt.started, step).await.is_err() {
                self.pacing.set_let_go(LetGo::Ordinary);
                return Err(self.refused(Rejection::Throttled));
            }
            let now = Instant::now();
            attempt.started = now;
            attempt.ends = self.attempt_ends(now);
        }
    }

    /// The attempt of a call [let go](crate::throttle::Throttle::lets_go_at) at `let_go` ended
    /// (`end`): an accepted answer counts toward letting the next waiting call go; after a
    /// failure, the call's retry waits again ([`grant_retry`](Self::grant_retry)). An attempt
    /// lost to connection rotation says nothing yet: its free retry carries the mark.
    pub(super) fn let_go_ended(&mut self, end: AttemptEnd, let_go: Tick) {
        match end {
            AttemptEnd::Unjudged => {}
            AttemptEnd::Accepted | AttemptEnd::FailedWithPushback | AttemptEnd::OverQuota => {
                self.pacing.set_let_go(LetGo::Ordinary);
                if let Some(throttle) = self.upstream.throttle() {
                    throttle.accepted_let_go(let_go);
                }
            }
            AttemptEnd::Failed | AttemptEnd::TimedOut | AttemptEnd::ConnectionFailed => {
                self.pacing.set_let_go(LetGo::Failed);
                if let Some(throttle) = self.upstream.throttle() {
                    throttle.failed_let_go(let_go);
                }
            }
        }
    }

    /// The next wait: the backoff's delay for the retry the call is waiting to make.
    fn next_wait(&mut self, previous: Duration) -> Duration {
        let retry = self.counted_attempts().max(1);
        let rng = self.rng.get(self.registry);
        let backoff = &self.upstream.config().backoff;
        backoff.delay(retry, previous, rng).max(SHORTEST_WAIT)
    }
}
