//! What a call knows: the [`Call`] itself, and the small questions about it that every part of
//! the loop asks (how much time is left, when an attempt is cut, when an ended one is counted).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{AttemptEnd, LetGo};
use super::rotation::Rotations;
use crate::attempt::Attempt;
use crate::budget::Moment;
use crate::category::Rejection;
use crate::decision::{DenyReason, Failure};
use crate::engine::Safety;
use crate::key::IdempotencyKey;
use crate::partition::Partition;
use crate::registry::Registry;
use crate::replay::Replayability;
use crate::scope::{CallScope, deadline_after};
use crate::throttle::{Answers, Own};
use crate::upstream::Upstream;
use crate::window::Tick;

/// What the loop itself did to the last attempt: facts it knows first-hand override whatever
/// the caller's error type reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Local {
    Nothing,
    /// Not started: no time left before the deadline.
    NoTime,
    /// Not started: a local gate refused it.
    Refused(Rejection),
    /// Cut by the attempt timeout: the request may have been sent.
    TimedOut,
    /// Not started: shutdown began before this retry's attempt did.
    Draining,
}

/// One clock read, on the clocks a decision and its retry use (the budget's check and its
/// withdrawal read the same moment).
#[derive(Clone, Copy)]
pub(super) struct Now {
    pub(super) instant: Instant,
    pub(super) budget: Moment,
}

/// One retrying call; see the module docs.
#[derive(Debug)]
pub struct Call<'r> {
    pub(super) registry: &'r Registry,
    pub(super) upstream: Arc<Upstream>,
    pub(super) method: http::Method,
    pub(super) safety: Safety,
    /// The declared body replayability, lowered by what the attempts reported.
    pub(super) replay: Replayability,
    pub(super) key: Option<IdempotencyKey>,
    pub(super) scope: CallScope,
    pub(super) deadline: Instant,
    /// When the call started; its first attempt starts then too (one clock read per call).
    pub(super) created: Instant,
    /// `created` on the clocks of the upstream's windows: the budget counts the call then, and
    /// the breaker a first attempt that ended in its first poll.
    pub(super) created_tick: Tick,
    /// Attempts started so far.
    pub(super) attempt: u32,
    /// When the last attempt was admitted.
    pub(super) attempt_started: Instant,
    /// When the last attempt was to be cut (for its timeout error).
    pub(super) attempt_ends: Instant,
    pub(super) previous_delay: Duration,
    pub(super) auth_refresh_used: bool,
    /// The scope's count of failures retried below, when the last attempt started.
    pub(super) retried_mark: u64,
    /// What the upstream's throttle had answered when the last attempt was admitted: a retry
    /// learns from it whether the upstream failed every call since.
    pub(super) answers_mark: Answers,
    /// When the upstream's throttle counted the call's own attempts: a retry is judged on
    /// what the other calls met.
    pub(super) own: Own,
    /// The part of the upstream's traffic the call belongs to, for its quotas.
    pub(super) partition: Option<Partition>,
    /// Whether the attempt under way (or the next, after a free rotation retry) is that of a
    /// call the throttle let go from a slow upstream's backlog, or as its probe, and how it
    /// ended.
    pub(super) let_go: LetGo,
    /// Drawn from the registry at the first decision: a call that succeeds needs none.
    pub(super) rng: Option<fastrand::Rng>,
    pub(super) span: tracing::Span,
    pub(super) attempt_span: tracing::Span,
    pub(super) local: Local,
    /// The facts of the last failed attempt that was retried: what the caller is told when
    /// the deadline or a shutdown leaves no time for the retry itself.
    pub(super) last_failure: Option<Failure>,
    /// The free rotation retries granted so far (`rotation`).
    pub(super) rotations: Rotations,
    /// The backoff timer, made at the first retry and reset for the next ones, and lent to the
    /// attempts after it as their timeout (boxed: a call that never retries carries no timer in
    /// its future).
    pub(super) sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Why the call stopped, and on what (judged only when asked: [`Call::deferrable`]).
    pub(super) stopped: Option<(DenyReason, Failure)>,
    /// When the last attempt failed, if the breaker needed the clock read then.
    pub(super) failed_at: Option<Instant>,
    /// What the last attempt's error reported, if the breaker needed it (classified once).
    pub(super) classified: Option<Failure>,
}

impl<'r> Call<'r> {
    /// The registry the call runs in.
    pub fn registry(&self) -> &'r Registry {
        self.registry
    }

    /// The idempotency key every attempt carries.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The upstream called.
    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Retries the operation (across every layer inside it) may still make.
    pub fn retries_left(&self) -> Option<u32> {
        self.scope.retries_left()
    }

    /// Whether an attempt starting at `now` has time: the minimum attempt budget fits before
    /// the deadline (compared as instants: no duration is computed).
    pub(super) fn has_time_at(&self, now: Instant) -> bool {
        now < self.deadline
            && deadline_after(now, self.upstream.config().min_attempt_budget) <= self.deadline
    }

    /// When an attempt admitted at `started` is cut: the upstream's attempt timeout later,
    /// never past the deadline.
    pub(super) fn attempt_ends(&self, started: Instant) -> Instant {
        Attempt::ends_at(
            started,
            self.upstream.config().attempt_timeout(),
            self.deadline,
        )
    }

    /// `now`, for a decision and the retry that may follow it.
    pub(super) fn now(&self, now: Instant) -> Now {
        Now {
            instant: now,
            budget: self.upstream.budget().moment(now),
        }
    }

    /// When an attempt that ended with `end` is counted, on the windows' clock: when it ended,
    /// or, for one that completed in its first poll, when it started (no clock read; for the
    /// first attempt that is when the call started). A failure's clock read is kept for the
    /// decision that follows.
    #[inline]
    pub(super) fn ended_at(&mut self, waited: bool, end: AttemptEnd) -> Tick {
        let failed = end.failed();
        if waited || failed {
            let now = Instant::now();
            if failed {
                self.failed_at = Some(now);
            }
            return self.upstream.tick(now);
        }
        match self.attempt_started == self.created {
            true => self.created_tick,
            false => self.upstream.tick(self.attempt_started),
        }
    }
}
