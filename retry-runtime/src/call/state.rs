//! What a call is: the [`Call`] itself, made of small pieces that each keep one part of its
//! state (`request`, `timing`, `pacing`, `outcome`, `backoff`, `rng`, `spans`, `rotations`),
//! and the small questions about it that every part of the loop asks (how much time is left,
//! when an attempt is cut, when an ended one is counted).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::AttemptEnd;
use super::backoff::{Backoff, Drained};
use super::outcome::Outcome;
use super::pacing::Pacing;
use super::request::Request;
use super::rng::LazyRng;
use super::rotations::Rotations;
use super::spans::Spans;
use super::timing::Timing;
use crate::budget::Moment;
use crate::key::IdempotencyKey;
use crate::registry::Registry;
use crate::scope::CallScope;
use crate::upstream::Upstream;
use crate::window::Tick;

/// One clock read, on the clocks a decision and its retry use (the budget's check and its
/// withdrawal read the same moment, the throttle the same tick).
#[derive(Clone, Copy)]
pub(super) struct Now {
    pub(super) instant: Instant,
    /// `instant` on the windows' clock.
    pub(super) tick: Tick,
    /// `instant` on the budget's clock.
    pub(super) moment: Moment,
}

/// One retrying call; see the module docs.
#[derive(Debug)]
pub struct Call<'r> {
    pub(super) registry: &'r Registry,
    pub(super) upstream: Arc<Upstream>,
    /// What the call sends.
    pub(super) request: Request,
    pub(super) scope: CallScope,
    /// The deadline, the attempts started and the last one's start and cut.
    pub(super) timing: Timing,
    /// What the upstream's throttle and quotas need to know of the call between attempts.
    pub(super) pacing: Pacing,
    /// The last attempt's end, kept for the decision after it, and why the call stopped.
    pub(super) outcome: Outcome,
    /// The backoff timer and the last delay.
    pub(super) backoff: Backoff<'r>,
    /// Drawn from the registry at the first draw: a call that succeeds needs none.
    pub(super) rng: LazyRng,
    pub(super) spans: Spans,
    /// The free rotation retries granted so far (`rotation`).
    pub(super) rotations: Rotations,
    /// Whether the call already refreshed its credentials (`refresh`): it does once.
    pub(super) auth_refresh_used: bool,
}

impl<'r> Call<'r> {
    /// The registry the call runs in.
    pub fn registry(&self) -> &'r Registry {
        self.registry
    }

    /// The idempotency key every attempt carries.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.request.key()
    }

    /// The upstream called.
    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.timing.attempts()
    }

    /// Retries the operation (across every layer inside it) may still make.
    pub fn retries_left(&self) -> Option<u32> {
        self.scope.retries_left()
    }

    /// Attempts that count against `max_attempts`: those started, less the free rotation
    /// retries.
    #[inline]
    pub(super) fn counted_attempts(&self) -> u32 {
        self.timing.attempts() - self.rotations.free()
    }

    /// Whether an attempt starting at `now` has time: the minimum attempt budget fits before
    /// the deadline.
    #[inline]
    pub(super) fn has_time_at(&self, now: Instant) -> bool {
        self.timing.has_time_at(now)
    }

    /// The latest an attempt may start: the minimum attempt budget before the deadline.
    #[inline]
    pub(super) fn latest_start(&self) -> Instant {
        self.timing.latest_start()
    }

    /// When an attempt admitted at `started` is cut: the upstream's attempt timeout later,
    /// never past the deadline.
    #[inline]
    pub(super) fn attempt_ends(&self, started: Instant) -> Instant {
        self.timing
            .ends(started, self.upstream.config().attempt_timeout())
    }

    /// `now`, for a decision and the retry that may follow it.
    pub(super) fn now(&self, now: Instant) -> Now {
        self.now_at(now, self.upstream.tick(now))
    }

    /// [`now`](Self::now) for an instant already read on the windows' clock (`tick`).
    #[inline]
    pub(super) fn now_at(&self, instant: Instant, tick: Tick) -> Now {
        Now {
            instant,
            tick,
            moment: self.upstream.budget().moment_of(tick),
        }
    }

    /// When an attempt that ended with `end` is counted, on the windows' clock, and how long
    /// it took: when it ended, or, for one that completed in its first poll, when it started
    /// (no clock read; for the first attempt that is when the call started; what it took is
    /// then not measured). A failure's clock read is kept for the decision that follows.
    #[inline]
    pub(super) fn ended_at(&mut self, waited: bool, end: AttemptEnd) -> (Tick, Option<Duration>) {
        let failed = end.failed();
        if waited || failed {
            let now = Instant::now();
            let tick = self.upstream.tick(now);
            if failed {
                self.outcome.keep_failed_at(now, tick);
            }
            // Only an accepted answer's time is noted, for the throttle's queueing signal (an
            // answer shed at the door, a 429 or a pushback, says nothing of a queue): read off
            // the window's clock when the attempt's start is already on it (the first's is).
            let took = (waited && matches!(end, AttemptEnd::Accepted)).then(|| {
                let started = self.timing.last_started();
                match self.timing.known_tick(started) {
                    Some(at) => Duration::from_nanos(tick.nanos().saturating_sub(at.nanos())),
                    None => now.saturating_duration_since(started),
                }
            });
            return (tick, took);
        }
        (self.started_tick(), None)
    }

    /// When the last attempt started, on the windows' clock (no clock read for the first).
    #[inline]
    fn started_tick(&self) -> Tick {
        let started = self.timing.last_started();
        match self.timing.known_tick(started) {
            Some(tick) => tick,
            None => self.upstream.tick(started),
        }
    }

    /// Sleeps `delay` from `from` on the call's backoff timer, or less if shutdown starts
    /// meanwhile (`Err`).
    #[inline]
    pub(super) async fn back_off(&mut self, from: Instant, delay: Duration) -> Result<(), Drained> {
        self.backoff.sleep(self.registry.drain(), from, delay).await
    }
}
