//! Adaptive admission: send an upstream about what it accepts, hold the rest briefly, let it go
//! at the pace the upstream shows it can take.
//!
//! A retry layer's worst moment is an upstream that slows down or fails: every caller's
//! attempts fail, every caller wants to retry, and the upstream gets more work exactly when it
//! can do least. A retry budget caps retries over its window, not at the moment of overload,
//! and a circuit breaker is all or nothing. The throttle follows what the upstream
//! **accepts**, in proportion, per upstream, shared by every call.
//!
//! # What is counted
//! Over a short sliding window ([`ThrottleConfig::window`], 500 ms) the throttle counts the
//! attempts that ended, and of them those the upstream accepted: every answer but an overload
//! or failure signal (a 5xx or 408; see [`is_upstream_failure`](crate::breaker::is_upstream_failure)).
//! An attempt that timed out was not accepted, and marks the upstream as slow. Not counted
//! either way: an attempt that failed to connect (a server closing connections under load
//! fails attempts that way while it accepts every request it reads, and a refused connection
//! is no work to shed; the opt-in [breaker](crate::breaker) stops calls to a host that is
//! down), one lost to connection rotation, and a cancelled one. A **429 counts as accepted**:
//! it says one caller is over its quota, not that the upstream is overloaded, so it never
//! refuses another caller's calls; the quota is honoured where it belongs, by the call or by
//! its [partition](crate::partition). So is an answer carrying the callee's
//! [pushback](crate::Pushback): the layer next to the failing dependency throttles it.
//!
//! # Who is refused
//! A call's **first attempt** goes while the upstream accepts at least `1 / K` of what it is
//! sent (`sent <= K x accepted`, `K` = [`ThrottleConfig::multiplier`], 3); below that it is
//! refused locally, before anything is sent, with probability
//!
//! ```text
//! p = (requests - K x accepted) / (requests + 1),  requests = sent + refused
//! ```
//!
//! the client-side adaptive throttling of Google's SRE book ("Handling Overload"). An upstream
//! that accepted nothing in the window gets the formula's floor, one first attempt a window
//! from each client whatever is offered, evenly spaced rather than drawn: the first to ask a
//! window after the last one goes. Spaced so, the floor finds an upstream that came back half
//! a window later on average, where random draws at the same rate leave a whole window to the
//! next attempt. Once it accepts its share again, nothing is refused, whatever was refused
//! before.
//!
//! A **retry or a hedge** is extra work, judged on what the *other* calls met (its own call's
//! failures are what it is for), passing in the proportion the upstream accepts them
//! (`K_r` = [`ThrottleConfig::retry_multiplier`], 1):
//!
//! ```text
//! p = max(0, (others - K_r x accepted) / others),  others = sent - the call's own attempts
//! ```
//!
//! The call's own attempts are those the window counted (not those that failed to connect, nor
//! those it has forgotten); with no other call in the window, a lone call's retry goes at its
//! backoff. No retry goes, a lone call's included, once the upstream has failed everything for
//! the hold (below), so a client calling one call at a time sends a dead upstream about one
//! request per call. A retry whose attempt failed while the upstream failed every other call
//! since, and accepted none, waits, whatever the window still holds of the time before.
//!
//! # Holding
//! A refused call does not fail at once: while a dependency is down for a moment, failing it
//! makes retries useless in exactly the outage they exist for. It **waits**, sending nothing,
//! asking again at each step of its backoff ([`ThrottleConfig::wait`]), but only while waiting
//! can help:
//!
//! - at most [`ThrottleConfig::max_waiting`] calls wait per upstream (256); a further refused
//!   call fails at once;
//! - only until the upstream has failed every answered attempt for [`ThrottleConfig::hold`]
//!   (600 ms, counted from its first failure since it last accepted one; a timeout does not
//!   start the count, since a slow upstream may be serving every request it gets): then every
//!   waiting call fails, and refused calls fail at once, so the callers of a dead dependency
//!   learn it within a second rather than at their deadlines, and do not pile up (writes that
//!   must outlast an outage go to the [durable queue](crate::durable));
//! - never past the deadline: each wait is cut to the time left for an attempt
//!   ([`min_attempt_budget`](crate::UpstreamConfig::min_attempt_budget)) and the call fails
//!   only once none is left; shutdown ends the wait at once.
//!
//! A call that cannot wait, or whose wait ends without being let go, fails with
//! [`Error::Throttled`](crate::Error::Throttled) (evidence `NotSent`, reason `throttled`), or
//! [`Error::DeadlineExceeded`](crate::Error::DeadlineExceeded) with the last attempt's facts
//! when its time ran out. Either way the operation counts as overloaded, so the
//! [server layer](crate::tower::ScopeLayer) answers with the `overloaded` pushback: a caller
//! above that retried the chain would send the held call again as a first attempt, past the
//! hold and unpaced. A waiting retry holds nothing of its failed attempt but its facts
//! (the error, and the response or connection in it, is dropped before the wait), and has
//! already spent its retry (the operation's allowance and a budget token), given back if it is
//! never let go. Each step is a `paced` decision event at `DEBUG`.
//!
//! # Letting go
//! A waiting call goes once the upstream has **accepted an attempt since the call was
//! refused**, and then only while the calls let go in the window stay within
//! [`ThrottleConfig::release_ratio`] (0.25) times the answers it accepted from the other calls,
//! less one per attempt of the window that timed out:
//!
//! ```text
//! released + 1 <= allowance = r x (accepted - released) - timed_out
//! ```
//!
//! and one at a time, at least `window / allowance` after the last call the pace let go; or,
//! with no other call left, one at a time on its own answers (every call let go in the window
//! was answered and accepted). So new and released calls together stay near `1 + r` times
//! what the upstream currently accepts, spread over the window as its answers were: never the
//! window's allowance at one instant, on top of the live calls whose answers made it (behind a
//! chain of services, those are often a burst of their own). The backlog drains at the pace of
//! its answers,
//! as acknowledgements clock out TCP's packets (Jacobson, "Congestion Avoidance and Control",
//! 1988), never as a burst into an upstream that has just come back, and it slows as soon as
//! the upstream's attempts start to time out. A backlog let go together queues behind itself
//! and takes the upstream down again: the metastable failure of "Metastable Failures in the
//! Wild" (OSDI 2022).
//!
//! **Somebody asks.** Waiting calls learn from the answers to other calls' attempts. When no
//! attempt has been answered and no call let go for a tenth of the window (a refused attempt
//! asks nothing), a waiting call goes as the upstream's **probe**: one at a time, at most four
//! that fail a window, and only during the hold. Without it, calls that all wait (new calls
//! refused, or none coming) would learn nothing until their hold ends, and a lone call waiting
//! for its retry would wait for a window instead of its backoff. A call let go whose attempt
//! fails waits again for its retry, behind the others. Each let-go is a `let_go` decision event
//! at `DEBUG` (`how` = `backlog` or `probe`).
//!
//! **Work nobody waits for goes last.** Held work (a durable replay) goes only into capacity no
//! caller needs: while no call waits for the upstream, the upstream does not queue, and no
//! call let go is in flight; so one at a time, clocked by its own answers, within the same
//! pace, and it probes only while no call waits. The upstream queues when an attempt of the
//! window timed out, or when the fastest of its last four accepted answers took more than twice
//! its base latency, the fastest answer of the last 20 to 40 windows (10-20 s at the default
//! window), and at least 10 ms more: timeouts show a queue once calls fail, latency as it forms. A
//! backlog replayed beside live load near the upstream's capacity would otherwise push that
//! load into timeouts: it yields, as a scavenger transport yields to the traffic it shares a
//! link with (LEDBAT, RFC 6817, whose current and base delays these are).
//!
//! # Fleets and low traffic
//! Nothing in these rules adds requests per client beyond its own calls: a retry waits unless
//! the upstream accepts, a probe is a waiting call's own attempt, and once the upstream has
//! failed everything for the hold, nothing waits or probes. Twenty replicas at a few calls a
//! second each send a dead upstream at most their calls, as no retry would. What stays per
//! client is the first attempts' floor of the SRE formula, about one a window, which each
//! client needs to see the upstream come back.
//!
//! Counting is lock-free: the window counters the budget and the breaker use (one
//! compare-and-swap per count, one load per read), and a few relaxed atomics.
//!
//! # An attempt that cannot finish
//! The throttle does not skip an attempt because the upstream's recent latency exceeds the
//! time the call has left: against a tail, a percentile refuses the attempt the common answer
//! would complete. Work for nobody is kept short otherwise: an attempt that times out is not
//! accepted, so a slowing upstream's admission falls while attempts stop finishing; no attempt
//! starts with less than [`min_attempt_budget`](crate::UpstreamConfig::min_attempt_budget)
//! left ([`DenyReason::Deadline`](crate::DenyReason::Deadline)); and with `propagate` on, the
//! deadline travels with the request, so one's own services skip queued work whose caller has
//! stopped waiting.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::window::{Clock, Counter, Tick};
use odds::{extra_refusal, refusal};
use queueing::Queueing;

/// How an admitted attempt ended, to the throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The upstream accepted it (see the module docs).
    Accepted,
    /// The upstream answered that it failed or is overloaded.
    Failed,
    /// It timed out: not accepted, and a sign the upstream is slow.
    TimedOut,
}

/// What an attempt is to the upstream: a call's first attempt, or extra work (a retry or a hedge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// The call's first attempt.
    First,
    /// A retry or a hedge, of a call with `own` attempts counted in the window.
    Extra {
        /// The call's own attempts the window counts.
        own: u32,
    },
}

/// How many waiting calls let go in a window may fail before no further one probes the
/// upstream until the window forgets them: a dead upstream's waiting calls send it at most
/// this many requests a window, and one that recovers within the hold is found within about
/// an eighth of a window (a probe in flight, one at a time, a backoff step apart).
const FAILED_PROBES: u64 = 4;

/// How many windows a bucket of the upstream's base latency lasts: the base is the fastest
/// answer of the last one to two buckets (10 to 20 s at the default window), long enough to
/// outlast a queue that forms and drains, short enough to follow an upstream that became slower
/// for good.
const BASE_WINDOWS: u32 = 20;

/// `d` in nanoseconds, saturating.
#[inline]
fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whether `tick` takes the turn kept in `last` (when the last turn was taken, in nanoseconds
/// after the origin, plus one; 0 before any): at least `gap` nanoseconds after it, and first
/// to claim it (callers asking at once: one wins).
#[inline]
fn take_turn(last: &AtomicU64, tick: Tick, gap: u64) -> bool {
    let taken = last.load(Ordering::Relaxed);
    let now = tick.nanos().saturating_add(1);
    if taken != 0 && now < taken.saturating_add(gap) {
        return false;
    }
    last.compare_exchange(taken, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// The per-upstream adaptive throttle; see the [module docs](self).
pub struct Throttle {
    config: ThrottleConfig,
    clock: Clock,
    /// Attempts counted, and those of them not accepted: an accepted attempt, the common case,
    /// is one count.
    sent: Counter,
    failed: Counter,
    /// Of the failed attempts, those that timed out: the upstream is slow, not failing fast.
    slow: Counter,
    refused: Counter,
    /// Waiting calls let go from a slow upstream's backlog, and waiting calls sent as probes
    /// (see [`Throttle::lets_go_at`], [`Throttle::probes_at`]).
    released: Counter,
    /// Of those, the ones whose attempt the upstream accepted: when they are all of them, the
    /// backlog has nothing in flight.
    released_accepted: Counter,
    /// Of those, the ones whose attempt was answered at all (accepted or not): when they are
    /// all of them, no probe is in flight.
    released_answered: Counter,
    /// Every attempt accepted, and every attempt failed, since the throttle was made: what a
    /// call compares with its [`Answers`] mark to learn what the upstream did meanwhile.
    accepted_ever: AtomicU64,
    failed_ever: AtomicU64,
    /// Every waiting call let go since the throttle was made: with the answers, whether
    /// anybody asked the upstream anything since a mark ([`Asked`](marks::Asked)).
    released_ever: AtomicU64,
    /// When the upstream began failing every attempt (its first answered failure since it
    /// last accepted one), in nanoseconds after the origin, plus one; 0 while it accepts: a
    /// refused call waits only until [`ThrottleConfig::hold`] after it. Counted from a failure,
    /// not from the last accepted answer, so that a quiet spell is not mistaken for an outage;
    /// and from an answered failure, not a timeout, so that a slow upstream is not either.
    failing_since: AtomicU64,
    /// When the last first attempt went as the floor of an upstream that accepted nothing
    /// (see [`floor_turn`](Self::floor_turn)), in nanoseconds after the origin, plus one; 0
    /// before any.
    floor_at: AtomicU64,
    /// When the pace last let a waiting call go (see [`lets_go_at`](Self::lets_go_at)), in
    /// nanoseconds after the origin, plus one; 0 before any.
    paced_at: AtomicU64,
    /// How long its accepted answers take: whether it queues, for held work.
    queueing: Queueing,
    /// Calls waiting for admission now (at most [`ThrottleConfig::max_waiting`]).
    waiting: AtomicU32,
    /// Whether the throttle has refused an attempt since the upstream last accepted all that
    /// first attempts may reach (for the state-change event: a failure alone, which makes the
    /// odds positive for a moment, is not an event).
    throttling: AtomicBool,
    name: Arc<str>,
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("config", &self.config)
            .field("refusal_probability", &self.refusal_probability())
            .finish()
    }
}

/// An admitted attempt: when it ends, [`Throttle::record`] counts it, accepted or not. An
/// attempt is counted only once it has ended: one still in flight says nothing yet (counted at
/// its start, a burst of concurrent first attempts would read as a burst of failures before
/// any could answer), and one whose outcome says nothing about the upstream (cancelled, or
/// lost to connection rotation) is never counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent;

impl Throttle {
    /// A throttle whose window counts from `origin` (the registry's: see `window::Tick`).
    pub(crate) fn counting_from(config: ThrottleConfig, origin: Instant) -> Self {
        Throttle {
            config,
            clock: Clock::new(config.window, origin),
            sent: Counter::default(),
            failed: Counter::default(),
            slow: Counter::default(),
            refused: Counter::default(),
            released: Counter::default(),
            released_accepted: Counter::default(),
            released_answered: Counter::default(),
            accepted_ever: AtomicU64::new(0),
            failed_ever: AtomicU64::new(0),
            released_ever: AtomicU64::new(0),
            failing_since: AtomicU64::new(0),
            floor_at: AtomicU64::new(0),
            paced_at: AtomicU64::new(0),
            queueing: Queueing::new(config.window.saturating_mul(BASE_WINDOWS)),
            waiting: AtomicU32::new(0),
            throttling: AtomicBool::new(false),
            name: Arc::from(""),
        }
    }

    /// Names it after its upstream, for its events.
    pub(crate) fn named(mut self, name: Arc<str>) -> Self {
        self.name = name;
        self
    }

    /// Its settings.
    pub fn config(&self) -> &ThrottleConfig {
        &self.config
    }

    /// The probability that a first attempt starting now is refused (0 while the upstream
    /// accepts what it gets): the `retry.throttle.refusal_probability` gauge.
    pub fn refusal_probability(&self) -> f64 {
        let epoch = self.clock.epoch();
        let (sent, accepted) = self.counts(epoch);
        self.first_refusal(sent, accepted, epoch)
    }

    /// Admits an attempt of `kind` at `tick`, or refuses it (`None`), drawing from `rng` only
    /// while the upstream accepts less than it gets.
    pub(crate) fn admit(&self, kind: Work, tick: Tick, rng: impl FnOnce() -> f64) -> Option<Sent> {
        let epoch = self.clock.epoch_of(tick);
        let (sent, accepted) = self.counts(epoch);
        let first = self.first_refusal(sent, accepted, epoch);
        if first == 0.0 {
            self.note_state(false);
        }
        let p = match kind {
            Work::First => first,
            Work::Extra { own } => extra_refusal(sent, accepted, self.config.retry_multiplier, own),
        };
        let goes = match kind {
            _ if p == 0.0 => {
                // A first attempt that goes, free, in an upstream's failing spell (the window
                // forgot its failures) is the floor's turn too: the floor counts from it.
                if kind == Work::First && self.failing_since.load(Ordering::Relaxed) != 0 {
                    self.floor_at
                        .store(tick.nanos().saturating_add(1), Ordering::Relaxed);
                }
                true
            }
            Work::First if accepted == 0 => self.floor_turn(tick),
            _ => rng() >= p,
        };
        if !goes {
            self.note_state(true);
            self.refused.add(epoch, 1);
            return None;
        }
        Some(Sent)
    }

    /// Whether a first attempt at `tick`, to an upstream that accepted nothing in the window,
    /// is the floor's: the first to ask a window after the last one went, claiming the turn.
    /// Evenly spaced, the floor finds an upstream that came back within half a window on
    /// average; drawn at random at the same rate (the formula's `1 / (requests + 1)`), the
    /// next attempt after any instant is a whole window away on average.
    #[inline]
    fn floor_turn(&self, tick: Tick) -> bool {
        take_turn(&self.floor_at, tick, duration_nanos(self.config.window))
    }

    /// The place of a retry that [`admits_extra`](Self::admits_extra) already let go: counted
    /// when it ends, like any admitted attempt.
    #[inline]
    pub(crate) fn granted(&self) -> Sent {
        Sent
    }

    /// Whether a retry decided at `tick` by a call with `own` attempts in the window may go,
    /// given a uniform draw in `[0, 1)`: extra work passes in the proportion the upstream
    /// accepts. Counts nothing: the retry is counted when its attempt ends (its place taken
    /// with [`granted`](Self::granted)).
    #[inline]
    pub(crate) fn admits_extra(&self, tick: Tick, draw: f64, own: u32) -> bool {
        let (sent, accepted) = self.counts(self.clock.epoch_of(tick));
        let p = extra_refusal(sent, accepted, self.config.retry_multiplier, own);
        !(p > 0.0 && draw < p)
    }

    /// The refusal probability of a first attempt at `epoch`, for `sent` attempts of which
    /// `accepted` were accepted: none while the upstream accepts at least `1 / K` of what it
    /// is sent; otherwise the odds over the requests: what was sent and what was refused.
    #[inline]
    fn first_refusal(&self, sent: f64, accepted: u64, epoch: u64) -> f64 {
        let k = self.config.multiplier;
        if sent <= k * accepted as f64 {
            return 0.0;
        }
        let refused = self.refused.sum(epoch) as f64;
        refusal(sent + refused, accepted, k)
    }

    /// The window's attempts at `epoch`, and those accepted. `sent` is read before `failed`,
    /// and [`record`](Self::record) counts a failure before its attempt, so a count racing
    /// with the reads can only make `accepted` one lower for a moment, never higher.
    #[inline]
    fn counts(&self, epoch: u64) -> (f64, u64) {
        let sent = self.sent.sum(epoch);
        let failed = self.failed.sum(epoch);
        (sent as f64, sent.saturating_sub(failed))
    }

    /// Counts an admitted attempt that ended at `tick` with `verdict`.
    #[inline]
    pub(crate) fn record(&self, _sent: Sent, verdict: Verdict, tick: Tick) {
        let epoch = self.clock.epoch_of(tick);
        match verdict {
            Verdict::Accepted => {
                self.accepted_ever.fetch_add(1, Ordering::Relaxed);
                if self.failing_since.load(Ordering::Relaxed) != 0 {
                    self.failing_since.store(0, Ordering::Relaxed);
                }
            }
            Verdict::Failed => {
                self.failed.add(epoch, 1);
                self.failed_ever.fetch_add(1, Ordering::Relaxed);
                self.note_failing(tick);
            }
            // A timeout does not start a failing spell: the upstream is slow, and may be
            // serving every request it gets; its backlog is paced by its answers instead.
            Verdict::TimedOut => {
                self.slow.add(epoch, 1);
                self.failed.add(epoch, 1);
                self.failed_ever.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sent.add(epoch, 1);
    }

    /// Notes that an attempt the upstream accepted at `tick` took `took` (from its start to
    /// its answer): what tells held work whether the upstream queues.
    #[inline]
    pub(crate) fn answered_in(&self, took: Duration, tick: Tick) {
        self.queueing.note(took, tick);
    }

    /// Notes that the upstream failed an attempt at `tick`: the start of its failing spell,
    /// unless one is already under way.
    #[inline]
    fn note_failing(&self, tick: Tick) {
        if self.failing_since.load(Ordering::Relaxed) == 0 {
            let at = tick.nanos().saturating_add(1);
            let _ =
                self.failing_since
                    .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Whether a failed attempt still counts as accepted: the callee answered with a pushback
/// ([`Pushback`]): it spent the operation's retries below it, or refused to retry a dependency
/// that is failing for everyone, or shed the request at its door. Either way it answered at
/// once and asked not to be retried (the engine honours that), and where a dependency below
/// it fails, the layer next to that dependency throttles it: counting the answer here too would
/// throttle every layer of a chain for one failing dependency, and keep the chain shut until
/// each layer's window forgot it.
///
/// [`Pushback`]: crate::category::Pushback
pub(crate) fn accepted_anyway(failure: &crate::decision::Failure) -> bool {
    failure.pushback.is_some()
}

mod config;
mod events;
pub(crate) mod marks;
mod odds;
mod queueing;
mod release;
#[cfg(test)]
mod tests;

pub use config::ThrottleConfig;
pub(crate) use marks::Answers;
