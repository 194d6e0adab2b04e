//! Admission: every local gate an attempt passes before it is sent, behind one seam.
//!
//! An attempt starts only with a [`Permit`]. [`admit`] asks each gate in turn (the upstream's
//! adaptive [`throttle`](crate::throttle), its circuit breaker, then its bulkhead), with an
//! [`Ask`] saying which attempt it is (the first, a retry or a hedge) and the call's deadline;
//! the first refusal ends admission with that gate's [`Rejection`], and what the earlier gates
//! granted is given back as the partial permit drops (an attempt the throttle refused may then
//! wait for admission: `pace`). When the attempt ends, [`Permit::end`] tells every gate how (an
//! [`AttemptEnd`]); a permit dropped before that (the attempt never started, its future was
//! dropped mid-attempt, its body panicked, its hedged copy lost) gives everything back by
//! itself: the bulkhead slot and a half-open breaker's probe slot (a
//! [`breaker::Admission`](crate::breaker::Admission) frees it when dropped unrecorded); the
//! throttle counts an attempt only when it ends (its [`Sent`] token dropped unrecorded was
//! never counted). No path releases anything by hand.
//!
//! A retry or a hedge also costs a retry ([`spend`]): one from the operation's shared
//! allowance, then a token of the upstream's retry budget. A retry spends when the engine
//! grants it (a denied retry is free); a hedge when it is admitted.
//!
//! # Adding a gate
//! All in this file: a field of [`Permit`] for what the gate grants (give it a `Drop` if it
//! must hear that an attempt was abandoned, as the breaker's probe claim does), a step in
//! [`admit`] that asks it (the [`Ask`] carries the attempt's kind and the call's deadline),
//! a line in [`Permit::end`] that reports the ending to it, and a [`Rejection`] variant for
//! its refusal (with its `Error`, `DenyReason` and metric label, as `CircuitOpen` has). A gate
//! that wants the attempt's latency keeps its admission's start in its field and reads the
//! clock in `end`.

use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{self, Admission};
use crate::budget::Moment;
use crate::bulkhead::Slot;
use crate::category::Rejection;
use crate::decision::{DenyReason, Failure};
use crate::error::Error;
use crate::scope::CallScope;
use crate::throttle::{self, Sent, Verdict, Work};
use crate::upstream::Upstream;
use crate::window::Tick;

/// Which attempt a gate is asked to admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptKind {
    /// The call's first attempt.
    First,
    /// An attempt after a failed one (free rotation retries included).
    Retry,
    /// A further copy of an attempt still in flight. It never waits for capacity.
    Hedge,
}

impl AttemptKind {
    /// The kind of the attempt that follows `started` attempts (not a hedge).
    #[inline]
    pub(crate) const fn after(started: u32) -> AttemptKind {
        match started {
            0 => AttemptKind::First,
            _ => AttemptKind::Retry,
        }
    }
}

/// What a gate is asked: which attempt, when it starts, and the call's deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) kind: AttemptKind,
    /// When the attempt starts.
    pub(crate) at: Instant,
    /// `at` on the upstream's window clock, when the call already knows it (its first attempt
    /// starts when the call did): the throttle reads its window there.
    pub(crate) tick: Option<Tick>,
    /// The call's deadline: a gate that waits never waits past it.
    pub(crate) deadline: Instant,
    /// The call's own attempts in the throttle's window (a hedge is judged on the others').
    pub(crate) own: u32,
    /// Whether the throttle already let the attempt go after it waited (`pace`): it takes
    /// its place without drawing its odds again.
    pub(crate) let_go: bool,
}

/// How an attempt ended, as the gates see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptEnd {
    /// The upstream answered as a working upstream does: a success, or a response it chose
    /// to send (a 4xx other than 408/429), or a local failure that says nothing against it.
    Accepted,
    /// The upstream answered that it failed or is overloaded (a 5xx, 408 or 429): a failure to
    /// every gate.
    Failed,
    /// The upstream did not answer in time (the attempt timeout, or a timeout the error
    /// reports): a failure to every gate, and to the throttle a sign the upstream is slow.
    TimedOut,
    /// The connection failed with no answer and no timeout: refused, reset, closed early
    /// ([`breaker::is_upstream_failure`] with no status). A failure to the breaker (a dead host
    /// fails this way); the throttle does not judge it, since a server closing connections
    /// under load (a graceful reload, a `keepalive_requests` limit) fails the same way while it
    /// accepts every request, and a refused connection is no work to shed.
    ConnectionFailed,
    /// Says nothing about the upstream either way: a server rotating a healthy connection.
    Unjudged,
    /// Failed, with the callee's pushback ([`throttle::accepted_anyway`]): a failure to the
    /// breaker, accepted work to the throttle (it answered at once and asked not to be retried).
    FailedWithPushback,
    /// Refused with 429: this caller is over its quota, the upstream is working. Accepted to
    /// every upstream-wide gate, so one caller's quota never refuses another's calls; the call
    /// honours its `Retry-After`, and its partition's other calls' retries do too
    /// (`partition`).
    OverQuota,
}

impl AttemptEnd {
    /// Whether the attempt failed, to any gate.
    #[inline]
    pub(crate) fn failed(self) -> bool {
        matches!(
            self,
            AttemptEnd::Failed
                | AttemptEnd::TimedOut
                | AttemptEnd::ConnectionFailed
                | AttemptEnd::FailedWithPushback
        )
    }

    /// What a failed attempt's facts say about the upstream; `timed_out` tells, for a failure
    /// with no status, whether the error reports a timeout
    /// ([`Classify::timed_out`](crate::classify::Classify::timed_out)).
    #[inline]
    pub(crate) fn of_failure(failure: &Failure, timed_out: impl FnOnce() -> bool) -> AttemptEnd {
        if failure.connection_rotated {
            AttemptEnd::Unjudged
        } else if failure.status == Some(429) {
            AttemptEnd::OverQuota
        } else if breaker::is_upstream_failure(failure) {
            match (failure.status, throttle::accepted_anyway(failure)) {
                (None, _) if timed_out() => AttemptEnd::TimedOut,
                (None, _) => AttemptEnd::ConnectionFailed,
                (Some(_), true) => AttemptEnd::FailedWithPushback,
                (Some(_), false) => AttemptEnd::Failed,
            }
        } else {
            AttemptEnd::Accepted
        }
    }
}

/// What let one attempt start: what each gate granted. Dropped without [`end`](Self::end), it
/// gives everything back, telling no gate anything about the upstream.
#[derive(Debug)]
#[must_use = "a permit dropped at once gives its admission back"]
pub(crate) struct Permit {
    /// The attempt's place in its upstream's throttle: [`end`](Self::end) counts it, accepted
    /// or not; dropped without that (cancelled, never started, lost to connection rotation),
    /// it was never counted, since the attempt says nothing about the upstream.
    throttle: Option<Sent>,
    breaker: Option<Admission>,
    slot: Option<Slot>,
}

/// An attempt a gate refused, not yet counted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused {
    pub(super) rejection: Rejection,
    pub(super) kind: AttemptKind,
}

/// What [`admit`] found: the attempt may start now, or every gate but the bulkhead admitted
/// it and it may wait for a slot.
pub(crate) enum Admitted {
    Now(Permit),
    /// The permit, without its bulkhead slot yet.
    Queue(Permit),
}

/// Asks every gate of `upstream` to admit the attempt `ask` describes, `draw` giving a uniform
/// number in `[0, 1)` if the throttle needs one. A full bulkhead answers [`Admitted::Queue`],
/// except to a hedge, which it refuses.
#[inline]
pub(crate) fn admit(
    upstream: &Upstream,
    ask: Ask,
    draw: impl FnOnce() -> f64,
) -> Result<Admitted, Rejection> {
    let throttle = match (upstream.throttle(), ask.kind) {
        // A retry drew its odds when the engine granted it (`grant_retry`), and an attempt let
        // go after waiting was admitted by the throttle's waiting rules: it only takes its
        // place now, to be counted when it ends.
        (Some(throttle), _) if ask.let_go => Some(throttle.granted()),
        (Some(throttle), AttemptKind::Retry) => Some(throttle.granted()),
        (Some(throttle), kind) => {
            let work = match kind {
                AttemptKind::First => Work::First,
                _ => Work::Extra { own: ask.own },
            };
            let tick = ask.tick.unwrap_or_else(|| upstream.tick(ask.at));
            match throttle.admit(work, tick, draw) {
                Some(sent) => Some(sent),
                None => return Err(Rejection::Throttled),
            }
        }
        (None, _) => None,
    };
    let breaker = match upstream.breaker() {
        Some(breaker) => match breaker.admit() {
            Some(admission) => Some(admission),
            None => return Err(Rejection::CircuitOpen),
        },
        None => None,
    };
    let Some(bulkhead) = upstream.bulkhead() else {
        return Ok(Admitted::Now(Permit {
            throttle,
            breaker,
            slot: None,
        }));
    };
    match bulkhead.try_enter() {
        Some(slot) => Ok(Admitted::Now(Permit {
            throttle,
            breaker,
            slot: Some(slot),
        })),
        None if ask.kind == AttemptKind::Hedge => Err(Rejection::BulkheadFull),
        None => Ok(Admitted::Queue(Permit {
            throttle,
            breaker,
            slot: None,
        })),
    }
}

/// Waits for the bulkhead slot `queued` lacks, until the deadline less the minimum attempt
/// budget: the attempt then starts with what is left. No slot in time: the permit is dropped,
/// giving back what the other gates granted.
pub(crate) async fn wait_for_slot(
    upstream: &Upstream,
    mut queued: Permit,
    ask: Ask,
) -> Result<Permit, Rejection> {
    let Some(bulkhead) = upstream.bulkhead() else {
        return Ok(queued);
    };
    let min_attempt_budget = upstream.config().min_attempt_budget;
    let until = ask
        .deadline
        .checked_sub(min_attempt_budget)
        .unwrap_or(ask.deadline);
    queued.slot = Some(
        bulkhead
            .enter_until(until)
            .await
            .ok_or(Rejection::BulkheadFull)?,
    );
    Ok(queued)
}

/// Spends what a retry or a hedge costs, at `at`: a retry from the operation's shared
/// allowance, then a token of the upstream's retry budget (the allowance given back when the
/// budget has none). Nothing is spent when it fails; what was spent can be [refunded](refund)
/// (the moment the token was counted at).
#[inline]
pub(crate) fn spend(
    scope: &mut CallScope,
    upstream: &Upstream,
    at: Moment,
) -> Result<Moment, DenyReason> {
    if !scope.take_retry() {
        return Err(DenyReason::MaxAttempts);
    }
    match upstream.budget().withdraw_in(at) {
        Some(spent) => Ok(spent),
        None => {
            scope.give_back_retry();
            Err(DenyReason::BudgetExhausted)
        }
    }
}

/// Gives back what [`spend`] took for a retry that did not happen after all.
pub(crate) fn refund(scope: &mut CallScope, upstream: &Upstream, spent: Moment) {
    scope.give_back_retry();
    upstream.budget().refund(spent);
}

impl Permit {
    /// Gives the bulkhead slot back: the attempt is over (before any backoff).
    #[inline]
    pub(crate) fn leave_bulkhead(&mut self) {
        self.slot = None;
    }

    /// Whether a gate counts how the attempt ended. When none does, the loop neither
    /// classifies the failure nor reads the clock for [`end`](Self::end).
    #[inline]
    pub(crate) fn counts(&self) -> bool {
        self.breaker.is_some() || self.throttle.is_some()
    }

    /// Tells every gate how the attempt ended, at `tick` on the upstream's window clock, having
    /// taken `took` when that was measured (an accepted answer's): the breaker counts an
    /// accepted attempt as a success, a failed one as a failure, and an unjudged one not at all
    /// (its admission given back); the throttle counts it, and notes what `took`. `true` when
    /// the throttle counted it (in its window at `tick`).
    #[inline(always)]
    pub(crate) fn end(
        self,
        upstream: &Upstream,
        end: AttemptEnd,
        tick: Tick,
        took: Option<Duration>,
    ) -> bool {
        let Permit {
            throttle,
            breaker: admission,
            slot,
        } = self;
        drop(slot);
        if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
            match end {
                AttemptEnd::Accepted | AttemptEnd::OverQuota => {
                    breaker.record_on(admission, false, tick)
                }
                AttemptEnd::Failed
                | AttemptEnd::TimedOut
                | AttemptEnd::ConnectionFailed
                | AttemptEnd::FailedWithPushback => breaker.record_on(admission, true, tick),
                AttemptEnd::Unjudged => drop(admission),
            }
        }
        let (Some(throttle), Some(sent)) = (upstream.throttle(), throttle) else {
            return false;
        };
        let verdict = match end {
            AttemptEnd::Accepted | AttemptEnd::FailedWithPushback | AttemptEnd::OverQuota => {
                Verdict::Accepted
            }
            AttemptEnd::Failed => Verdict::Failed,
            AttemptEnd::TimedOut => Verdict::TimedOut,
            // Not recorded: never counted.
            AttemptEnd::ConnectionFailed | AttemptEnd::Unjudged => return false,
        };
        throttle.record(sent, verdict, tick);
        if let Some(took) = took {
            throttle.answered_in(took, tick);
        }
        true
    }
}

/// The error an attempt refused by a gate ends with.
pub(crate) fn refusal(rejection: Rejection, upstream: &Upstream) -> Error {
    let upstream = upstream.name_arc().clone();
    match rejection {
        Rejection::CircuitOpen => Error::CircuitOpen { upstream },
        Rejection::BulkheadFull => Error::BulkheadFull { upstream },
        Rejection::Throttled => Error::Throttled { upstream },
    }
}
