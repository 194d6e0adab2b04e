//! The attempt loop: one [`Call`] drives the attempts of one retrying call.
//!
//! Every retrying call, from `#[retry]`, the builder ([`Retry`](crate::Retry)) or the tower
//! layer, is this loop:
//!
//! ```text
//! let mut call = Call::new(spec);               // upstream, scope, deadline, budget deposit
//! loop {
//!     let result = call.attempt(body).await;    // next attempt (deadline check), admit
//!                                               // (breaker, bulkhead), run (scope, span,
//!                                               // timeout), count (breaker)
//!     match call.settle(result).await {         // decide, spend, drop the error, back off
//!         Step::Retry => continue,
//!         Step::Done(result) => return result,
//!         Step::Ambiguous { error, ambiguous } => /* reconcile, or report */,
//!     }
//! }
//! ```
//!
//! The loop is written out (by the macro, by the builder) rather than hidden behind a closure so
//! an attempt's body can borrow `&mut self` and the call's arguments afresh on every attempt, and
//! so the macro can ask a reconcile check between attempts with the same borrows.
//!
//! Every decision the loop takes is traceable to a named reason: the engine's
//! ([`Decision`]), or the loop's own (no time left, breaker open, bulkhead full, draining,
//! connection rotated).
//!
//! # Connection rotation
//! An attempt lost to connection rotation ([`Classify::connection_rotated`]: a GOAWAY with
//! `NO_ERROR`, `REFUSED_STREAM`, a request hyper handed back unsent) is not counted by the
//! breaker, and when the engine would retry it (a read, a keyed write, or any method with
//! evidence `NotSent`: an unkeyed write after a GOAWAY stays ambiguous) it is retried in the
//! manner of gRPC's transparent retries: **at once**, **without a budget token** and **not
//! counted** in the call's attempts or the operation's allowance, while the upstream makes
//! progress. The bound: a call's first two rotations in a row are free; a later one is free only
//! if some attempt to the upstream succeeded since the call's rotation before last (the
//! upstream's success count, kept by its budget). A server rotating connections serves requests
//! between rotations; one that turns every request away does not, and its rotations become
//! ordinary retries (backoff, token, attempt limit), so the budget stops the storm. Every
//! attempt still needs the minimum attempt budget before the deadline, and `max_attempts = 1`
//! turns rotation retries off with the others.
//!
//! Why two and not one: one HTTP/2 connection carries every concurrent request, and a GOAWAY
//! turns away all of them but the few the server accepted (with nginx's `keepalive_requests 3`
//! and 200 concurrent requests, 197 at once; hyper opens one connection at a time, so a request
//! can be turned away by some 65 connections in a row). The successes on the connection before
//! last are certain to have completed by the time the next GOAWAY arrives; those on the last
//! connection race with its GOAWAY.
//!
//! # Hedging
//! [`Call::attempt_hedged`] runs one attempt as up to three copies in flight (see its docs):
//! each copy is an `AttemptFuture` of its own, polled in turn by the same task, each
//! installing its own attempt (and the call's one scope, opened first) around its polls, so
//! the integration of each copy finds its own attempt number. The loop's per-attempt fields
//! (`attempt_started`, `attempt_span`, ...) describe the copy whose result is returned.

use std::borrow::Cow;
use std::fmt::Display;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::ambient::Frame;
use crate::attempt::Attempt;
use crate::attempt_future::{AttemptFuture, Ended, TimedOut};
use crate::breaker::Admission;
use crate::budget::Moment;
use crate::bulkhead::Slot;
use crate::decision::{AmbiguityReason, Decision, DenyReason, RetryReason, Stop};
use crate::engine::{Context, Safety};
use crate::hedge::HedgeConfig;
use crate::key::IdempotencyKey;
use crate::observe::{self, AttemptOutcome, CallKind};
use crate::registry::{Registry, Upstream};
use crate::scope::{CallScope, OpName, Operation, Unopened, deadline_after, min_deadline};
use crate::site::{CallSite, HAND_OFF_RESERVE};
use crate::throttle::{AttemptKind, Sent};
use crate::window::Tick;
use crate::{Ambiguous, Classify, Error, Evidence, Failure, Replayability};

/// What a retrying call is: which upstream, which method, which key.
#[derive(Debug)]
pub struct CallSpec<'r> {
    /// The registry the call runs in.
    pub(crate) registry: &'r Registry,
    /// The upstream's entry in it.
    pub(crate) upstream: Arc<Upstream>,
    /// The HTTP method the call sends.
    pub(crate) method: http::Method,
    /// The idempotency key, fixed before the first attempt.
    pub(crate) key: Option<IdempotencyKey>,
    /// The request body's replayability.
    pub(crate) replay: Replayability,
    /// The name of the call's own scope (defaults to the upstream's name).
    pub(crate) operation: Option<Cow<'static, str>>,
    /// Time kept back from the deadline for the end of the call (a durable call's hand-off).
    pub(crate) reserve: Duration,
}

/// The answer of a reconcile check for a write whose outcome was ambiguous: a write without an
/// idempotency key may be retried after it may have executed only if something can tell
/// whether it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled<T> {
    /// The write happened; here is its result.
    Happened(T),
    /// The write did not happen: retrying is safe.
    NotHappened,
    /// Cannot tell: the outcome stays ambiguous.
    Unknown,
}

/// What to do after an attempt.
#[derive(Debug)]
pub enum Step<T, E> {
    /// Retry: the backoff has already been slept.
    Retry,
    /// The call is over.
    Done(Result<T, E>),
    /// The outcome is ambiguous: reconcile, or report it with [`Call::ambiguous`].
    Ambiguous {
        /// The last attempt's error.
        error: E,
        /// What is known.
        ambiguous: Ambiguous,
    },
}

/// What the loop itself did to the last attempt: facts it knows first-hand override whatever
/// the caller's error type reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    Nothing,
    /// Not started: no time left before the deadline.
    NoTime,
    /// Not started: the circuit breaker is open.
    CircuitOpen,
    /// Not started: no bulkhead slot before the deadline.
    BulkheadFull,
    /// Not started: the upstream's adaptive throttle refused it.
    Throttled,
    /// Cut by the attempt timeout: the request may have been sent.
    TimedOut,
}

/// What let an attempt start: the breaker's admission and the bulkhead's slot (each only if
/// the upstream has one).
struct Pass {
    /// The attempt's count in the upstream's throttle.
    sent: Option<Sent>,
    admission: Option<Admission>,
    slot: Option<Slot>,
}

/// One clock read, on the clocks a decision and its retry use (the budget's check and its
/// withdrawal read the same moment).
#[derive(Clone, Copy)]
struct Now {
    instant: Instant,
    budget: Moment,
}

/// What [`Call::try_admit`] found: the attempt may start now, or (the breaker admitted it)
/// it waits for a bulkhead slot.
enum Admitted {
    Now(Pass),
    Queue(Option<Sent>, Option<Admission>),
}

/// One copy of a hedged attempt in flight, with what let it start.
struct InFlight<F> {
    future: Pin<Box<AttemptFuture<'static, F>>>,
    pass: Pass,
    number: u32,
    started: Instant,
    ends: Instant,
    span: tracing::Span,
}

/// One retrying call; see the module docs.
#[derive(Debug)]
pub struct Call<'r> {
    registry: &'r Registry,
    upstream: Arc<Upstream>,
    method: http::Method,
    safety: Safety,
    /// The declared body replayability, lowered by what the attempts reported.
    replay: Replayability,
    key: Option<IdempotencyKey>,
    scope: CallScope,
    deadline: Instant,
    /// When the call started; its first attempt starts then too (one clock read per call).
    created: Instant,
    /// `created` on the clocks of the upstream's windows: the budget counts the call then, and
    /// the breaker a first attempt that ended in its first poll.
    created_tick: Tick,
    /// Attempts started so far.
    attempt: u32,
    /// When the last attempt was admitted.
    attempt_started: Instant,
    /// When the last attempt was to be cut (for its timeout error).
    attempt_ends: Instant,
    previous_delay: Duration,
    auth_refresh_used: bool,
    /// The scope's count of failures retried below, when the last attempt started.
    retried_mark: u64,
    /// Drawn from the registry at the first decision: a call that succeeds needs none.
    rng: Option<fastrand::Rng>,
    span: tracing::Span,
    attempt_span: tracing::Span,
    local: Local,
    /// The facts of the last failed attempt that was retried: what the caller is told when
    /// the deadline or a shutdown leaves no time for the retry itself.
    last_failure: Option<Failure>,
    /// Free rotation retries granted so far (attempts not counted against the limit).
    rotations: u32,
    /// The upstream's progress when this call saw its last two rotations (older, newer).
    rotation_marks: [Option<u64>; 2],
    /// The backoff timer, made at the first retry and reset for the next ones, and lent to the
    /// attempts after it as their timeout (boxed: a call that never retries carries no timer in
    /// its future).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Why the call stopped, and on what (judged only when asked: [`Call::deferrable`]).
    stopped: Option<(DenyReason, Failure)>,
    /// When the last attempt failed, if the breaker needed the clock read then.
    failed_at: Option<Instant>,
    /// What the last attempt's error reported, if the breaker needed it (classified once).
    classified: Option<Failure>,
}

/// Why a call stopped, when its failure is one that time can clear: the retries, the budget,
/// the deadline or the in-memory window ran out on a failure the rules would have retried, or
/// the upstream's breaker or bulkhead turned the attempt away. A durable call hands such a
/// call to its queue instead of failing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransientStop {
    /// What stopped the retries.
    pub reason: DenyReason,
    /// The wait the upstream asked for, if any.
    pub retry_after: Option<Duration>,
}

/// The span of one retrying call. At `DEBUG`: a service logging at `INFO` pays nothing for it.
fn call_span(
    upstream: &str,
    operation: &str,
    method: &http::Method,
    safety: Safety,
    key: Option<&IdempotencyKey>,
) -> tracing::Span {
    tracing::debug_span!(
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

/// The span of one attempt, inside its call's (OpenTelemetry's HTTP client attributes).
fn attempt_span(call: &tracing::Span, attempt: u32, method: &http::Method) -> tracing::Span {
    tracing::debug_span!(
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
        connection_rotated = tracing::field::Empty,
        reason = tracing::field::Empty,
        cancelled = tracing::field::Empty,
    )
}

impl<'r> CallSpec<'r> {
    /// The call `#[retry]`'s `site` makes (with `key`) through `registry`: fails only when
    /// `registry` has no such upstream.
    pub fn at(
        registry: &'r Registry,
        site: &'static CallSite,
        key: Option<IdempotencyKey>,
    ) -> Result<Self, Error> {
        Ok(CallSpec {
            registry,
            upstream: site.upstream_in(registry)?,
            method: site.method.clone(),
            key,
            replay: Replayability::Replayable,
            operation: Some(Cow::Borrowed(site.operation)),
            reserve: match site.durable {
                true => HAND_OFF_RESERVE,
                false => Duration::ZERO,
            },
        })
    }
}

impl<'r> Call<'r> {
    /// Joins the enclosing operation scope (or prepares the call's own), fixes the deadline
    /// and counts the call in the upstream's retry budget.
    ///
    /// It cannot fail: what can (finding the upstream) is done making the spec. A `Call` is
    /// large, and returned bare it is built in place in the caller's future, not moved there
    /// out of a `Result`.
    pub fn new(spec: CallSpec<'r>) -> Self {
        let upstream = spec.upstream;
        let config = upstream.config();
        let retries = config.max_attempts.saturating_sub(1);
        let now = Instant::now();
        // The reserve (a durable call's hand-off) is kept back from whichever deadline binds.
        let own = deadline_after(now, config.deadline.saturating_sub(spec.reserve));
        let (scope, deadline) = match Operation::current() {
            Some(op) => {
                let allowed = op.init_allowance(retries);
                if allowed < retries {
                    // An enclosing scope (or, behind the server layer, the caller's propagated
                    // limits) allows fewer retries than this upstream's `max_attempts`.
                    tracing::debug!(
                        target: "retry_runtime::decision",
                        upstream = upstream.name(),
                        operation = op.name(),
                        max_attempts = config.max_attempts,
                        retries_allowed = allowed,
                        "the operation allows fewer retries than the upstream's max_attempts"
                    );
                }
                let reserved = op
                    .deadline()
                    .map(|d| d.checked_sub(spec.reserve).unwrap_or(d));
                let deadline = min_deadline(reserved, Some(own)).unwrap_or(own);
                (CallScope::Joined(op), deadline)
            }
            None => {
                let name = spec.operation.map(OpName::from);
                (CallScope::Unopened(Unopened::new(name, retries)), own)
            }
        };
        // Calls earn retries: the budget sees this one as it starts.
        let created_tick = upstream.tick(now);
        upstream.budget().deposit_on(created_tick);
        let safety = Safety::of(
            &spec.method,
            spec.key.is_some(),
            config.dedups_idempotency_key,
        );
        let span = call_span(
            upstream.name(),
            scope.name(upstream.name()),
            &spec.method,
            safety,
            spec.key.as_ref(),
        );
        Call {
            registry: spec.registry,
            upstream,
            method: spec.method,
            safety,
            replay: spec.replay,
            key: spec.key,
            scope,
            deadline,
            created: now,
            created_tick,
            attempt: 0,
            attempt_started: now,
            attempt_ends: now,
            previous_delay: Duration::ZERO,
            auth_refresh_used: false,
            retried_mark: 0,
            rng: None,
            span,
            attempt_span: tracing::Span::none(),
            local: Local::Nothing,
            sleep: None,
            last_failure: None,
            rotations: 0,
            rotation_marks: [None; 2],
            stopped: None,
            failed_at: None,
            classified: None,
        }
    }

    /// The registry the call runs in.
    pub fn registry(&self) -> &'r Registry {
        self.registry
    }

    /// The idempotency key every attempt carries.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// After the call ended (with [`Step::Done`] carrying an error, or [`Step::Ambiguous`]):
    /// the transient failure it stopped on, when replaying it later with the same key is safe
    /// (a read, or a write with a key the upstream deduplicates). `None` for a permanent
    /// failure, or for a write that repeating could apply twice.
    pub fn deferrable(&self) -> Option<TransientStop> {
        let (reason, failure) = self.stopped?;
        (self.safety.is_safe() && self.is_transient(reason, &failure)).then_some(TransientStop {
            reason,
            retry_after: failure.retry_after,
        })
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

    /// Lowers the body's replayability once it is known to be weaker than declared (e.g. the
    /// integration found the body cannot be copied for another attempt). Never raises it.
    pub fn downgrade_replay(&mut self, replay: Replayability) {
        self.replay = self.replay.min(replay);
    }

    /// Runs one attempt of `body`: see [`attempt_with`](Self::attempt_with).
    pub async fn attempt<T, E, F>(&mut self, body: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        self.attempt_with(|_| body).await
    }

    /// Runs one attempt: starts it (or fails with [`Error::DeadlineExceeded`] when less than the
    /// minimum attempt budget is left), asks the circuit breaker and the bulkhead to admit it,
    /// makes its body with `make`, and polls the body inside the attempt's scope and span until
    /// it completes or the attempt timeout (clamped to the deadline) cuts it. The bulkhead slot
    /// is given back as soon as the attempt ends, before any backoff.
    pub(crate) async fn attempt_with<T, E, M, F>(&mut self, make: M) -> Result<T, E>
    where
        M: FnOnce(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        let mut attempt = match self.next_attempt() {
            Ok(attempt) => attempt,
            Err(error) => return Err(E::from(error)),
        };
        // `admit`, written out: with a free slot no admission future is built (the common path).
        let pass = match self.try_admit() {
            Ok(Admitted::Now(pass)) => pass,
            Ok(Admitted::Queue(sent, admission)) => {
                match self.wait_for_slot(&mut attempt, sent, admission).await {
                    Ok(pass) => pass,
                    Err(error) => return Err(E::from(error)),
                }
            }
            Err(error) => return Err(E::from(error)),
        };
        let body = make(&attempt);
        self.attempt_started = attempt.started;
        let ends = attempt.ends();
        self.attempt_ends = ends;
        let scope = self.scope.for_attempt();
        let lent = self.sleep.as_mut().map(Pin::as_mut);
        let ended = AttemptFuture::new(Frame::attempt(attempt, scope), ends, lent, body).await;
        self.end_attempt(ended, pass, self.attempt)
    }

    /// Runs one attempt that may be hedged: like [`attempt`](Self::attempt), but `make` can
    /// make the body again, so that when the upstream has hedging configured
    /// ([`UpstreamConfig::hedge`](crate::UpstreamConfig::hedge)) and the call is safe to run
    /// twice at once, a further copy starts once the first has run for the hedge delay. See
    /// [`attempt_hedged_with`](Self::attempt_hedged_with) for the rules. Without hedging it is
    /// exactly [`attempt`](Self::attempt).
    pub async fn attempt_hedged<T, E, M, F>(&mut self, mut make: M) -> Result<T, E>
    where
        M: FnMut() -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        self.attempt_hedged_with(|_| make()).await
    }

    /// Runs one attempt whose body `make` can make more than once, hedging it when allowed.
    ///
    /// Who is hedged: reads, and keyed writes whose upstream promises to deduplicate copies in
    /// flight ([`HedgeConfig::dedups_in_flight`]); never a write without that promise.
    ///
    /// A hedge is an attempt: it needs an attempt left (`max_attempts` counts every copy), time
    /// before the deadline, the breaker's admission, a free bulkhead slot at once (a hedge never
    /// waits for capacity), a retry from the operation's allowance and a retry budget token;
    /// without any of them no hedge is sent and the copies in flight carry on. It carries the
    /// same key and headers as the first copy, and its span (`retry.attempt`) says
    /// `reason = "hedge"`.
    ///
    /// The first success wins, and so does a failure that another copy could not improve on (a
    /// permanent failure, or a status the engine would not retry): the other copies are
    /// cancelled (their futures dropped, their bulkhead slots freed at once) and, since their
    /// outcome is unknown, the breaker counts them neither as failures nor as successes. A
    /// failure that could be retried (no response, a 503, the attempt's timeout) while another
    /// copy is still in flight is counted by the breaker as any attempt's failure and set
    /// aside: the call waits for the other copies. Only when every copy has failed does the last
    /// failure go to [`settle`](Self::settle), as an ordinary attempt's would.
    pub(crate) async fn attempt_hedged_with<T, E, M, F>(&mut self, mut make: M) -> Result<T, E>
    where
        M: FnMut(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        let Some(hedge) = self.hedging() else {
            return self.attempt_with(make).await;
        };
        // Every copy installs the call's scope: it must be one scope, opened now.
        self.scope.open_now(self.upstream.name_arc(), self.deadline);
        let mut attempt = match self.next_attempt() {
            Ok(attempt) => attempt,
            Err(error) => return Err(E::from(error)),
        };
        let pass = match self.admit(&mut attempt).await {
            Ok(pass) => pass,
            Err(error) => return Err(E::from(error)),
        };
        let max_copies = hedge.max_copies as usize;
        let mut copies = Vec::with_capacity(max_copies);
        let delay = self.upstream.hedge_delay(attempt.started);
        let mut next_hedge = delay.map(|d| Box::pin(tokio::time::sleep_until(attempt.started + d)));
        copies.push(self.start_copy(attempt, pass, &mut make));
        loop {
            let event = std::future::poll_fn(|cx| {
                for (i, copy) in copies.iter_mut().enumerate() {
                    if let Poll::Ready(ended) = copy.future.as_mut().poll(cx) {
                        return Poll::Ready(Some((i, ended)));
                    }
                }
                match next_hedge.as_mut().map(|t| t.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(None),
                    _ => Poll::Pending,
                }
            })
            .await;
            let Some((i, ended)) = event else {
                next_hedge = None;
                if let Some((attempt, pass)) = self.admit_hedge(copies.len()) {
                    copies.push(self.start_copy(attempt, pass, &mut make));
                    if let (Some(d), true) = (delay, copies.len() < max_copies) {
                        next_hedge = Some(Box::pin(tokio::time::sleep(d)));
                    }
                }
                continue;
            };
            let copy = copies.swap_remove(i);
            self.attempt_started = copy.started;
            self.attempt_ends = copy.ends;
            self.local = Local::Nothing;
            if self.upstream.keeps_latency() {
                let now = Instant::now();
                self.upstream
                    .record_latency(now.saturating_duration_since(copy.started), now);
            }
            let result = self.end_attempt(ended, copy.pass, copy.number);
            let settled = match &result {
                Ok(_) => true,
                Err(_) if copies.is_empty() => true,
                Err(error) => self.is_final(error),
            };
            if settled {
                self.cancel(copies);
                return result;
            }
            // Set aside: another copy may still answer.
            self.span.in_scope(|| {
                tracing::debug!(
                    target: "retry_runtime::decision",
                    attempt = copy.number,
                    in_flight = copies.len(),
                    "a hedged copy failed while another is in flight: waiting for it"
                )
            });
        }
    }

    /// The call's hedging settings, if its upstream hedges and the call is safe to run twice at
    /// once.
    fn hedging(&self) -> Option<HedgeConfig> {
        let hedge = self.upstream.config().hedge?;
        let safe = match self.safety {
            Safety::Read => true,
            Safety::KeyedWrite => hedge.dedups_in_flight,
            Safety::UnsafeWrite => false,
        };
        safe.then_some(hedge)
    }

    /// Starts the body of an admitted copy, inside its own frame and span.
    fn start_copy<T, E, M, F>(&mut self, attempt: Attempt, pass: Pass, make: &mut M) -> InFlight<F>
    where
        M: FnMut(&Attempt) -> F,
        F: Future<Output = Result<T, E>>,
    {
        let body = make(&attempt);
        let (number, started, ends) = (attempt.number, attempt.started, attempt.ends());
        let span = attempt.span.clone();
        let frame = Frame::attempt(attempt, self.scope.for_attempt());
        InFlight {
            future: Box::pin(AttemptFuture::new(frame, ends, None, body)),
            pass,
            number,
            started,
            ends,
            span,
        }
    }

    /// Admits a hedge, when everything a retry needs is there (see
    /// [`attempt_hedged_with`](Self::attempt_hedged_with)); what it took is given back when a
    /// later check refuses. `None`: no hedge (the reason is logged).
    fn admit_hedge(&mut self, in_flight: usize) -> Option<(Attempt, Pass)> {
        let upstream = self.upstream.clone();
        let config = upstream.config();
        let now = Instant::now();
        let refused = if self.attempt - self.rotations >= config.max_attempts {
            Some("max_attempts")
        } else if !self.has_time_at(now) {
            Some("deadline")
        } else if self.registry.drain().is_draining() {
            Some("draining")
        } else if !self.replay.can_replay() {
            Some("body_not_replayable")
        } else {
            None
        };
        let no_hedge = |call: &Call<'_>, reason: &'static str| {
            call.span.in_scope(|| {
                tracing::debug!(
                    target: "retry_runtime::decision",
                    decision = "no_hedge",
                    reason,
                    in_flight,
                    "not hedging"
                )
            });
            None
        };
        if let Some(reason) = refused {
            return no_hedge(self, reason);
        }
        let sent = match upstream.throttle() {
            Some(throttle) => {
                let registry = self.registry;
                let rng = self.rng.get_or_insert_with(|| registry.rng());
                match throttle.admit(AttemptKind::Extra, upstream.tick(now), || rng.f64()) {
                    Some(sent) => Some(sent),
                    None => return no_hedge(self, "throttled"),
                }
            }
            None => None,
        };
        let forget = |sent: Option<Sent>| {
            if let (Some(throttle), Some(sent)) = (upstream.throttle(), sent) {
                throttle.forget(sent);
            }
        };
        let admission = match upstream.breaker() {
            Some(breaker) => match breaker.admit() {
                Some(admission) => Some(admission),
                None => {
                    forget(sent);
                    return no_hedge(self, "circuit_open");
                }
            },
            None => None,
        };
        let release = |admission: Option<Admission>| {
            forget(sent);
            if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
                breaker.release(admission);
            }
        };
        let slot = match upstream.bulkhead() {
            Some(bulkhead) => match bulkhead.try_enter() {
                Some(slot) => Some(slot),
                None => {
                    release(admission);
                    return no_hedge(self, "bulkhead_full");
                }
            },
            None => None,
        };
        if !self.scope.take_retry() {
            release(admission);
            return no_hedge(self, "max_attempts");
        }
        if !upstream.budget().withdraw() {
            self.scope.give_back_retry();
            release(admission);
            return no_hedge(self, "budget_exhausted");
        }
        self.attempt += 1;
        self.retried_mark = self.scope.retried_failures();
        let span = attempt_span(&self.span, self.attempt, &self.method);
        span.record("reason", "hedge");
        self.span.in_scope(|| {
            tracing::info!(
                target: "retry_runtime::decision",
                decision = "hedge",
                reason = "hedge",
                attempt = self.attempt,
                in_flight,
                "the request is slower than usual: sending another copy"
            )
        });
        observe::hedged(upstream.name());
        let attempt = Attempt {
            upstream: upstream.clone(),
            number: self.attempt,
            method: self.method.clone(),
            key: self.key.clone(),
            deadline: self.deadline,
            ends: self.attempt_ends(now),
            started: now,
            retries_left: self.scope.retries_left(),
            span,
        };
        Some((
            attempt,
            Pass {
                sent,
                admission,
                slot,
            },
        ))
    }

    /// Whether a failed copy's error ends the hedged attempt although another copy is in
    /// flight: a failure the engine would not retry even with every limit to spare (a
    /// permanent failure, a status it does not retry) is the upstream's answer.
    fn is_final<E: Classify>(&self, error: &E) -> bool {
        let mut failure = Failure::of(error);
        if self.local == Local::TimedOut {
            failure.evidence = Evidence::SentNoResponse;
        }
        let config = self.upstream.config();
        let ctx = Context {
            attempt: 1,
            max_attempts: 2,
            operation_retries_left: 1,
            budget_has_token: true,
            replay: Replayability::Replayable,
            draining: false,
            remaining: crate::config::MAX_IN_MEMORY_WINDOW,
            min_attempt_budget: Duration::ZERO,
            safety: self.safety,
            transient_500: config.transient_500,
            can_refresh_auth: false,
            backoff: &config.backoff,
            previous_delay: Duration::ZERO,
        };
        let mut rng = fastrand::Rng::with_seed(0);
        !matches!(
            self.registry.engine().decide(&ctx, &failure, &mut rng),
            Decision::Retry { .. }
        )
    }

    /// Cancels the copies still in flight once another has answered: dropped at once (their
    /// bulkhead slots with them); their outcome is unknown, so the breaker counts them neither
    /// way, and their latency so far (a lower bound) goes to the upstream's latency window.
    fn cancel<F>(&mut self, copies: Vec<InFlight<F>>) {
        if copies.is_empty() {
            return;
        }
        let now = Instant::now();
        observe::hedges_cancelled(self.upstream.name(), copies.len());
        for copy in copies {
            let InFlight {
                future,
                pass,
                started,
                span,
                ..
            } = copy;
            drop(future);
            let Pass {
                sent,
                admission,
                slot,
            } = pass;
            drop(slot);
            if let (Some(breaker), Some(admission)) = (self.upstream.breaker(), admission) {
                breaker.release(admission);
            }
            if let (Some(throttle), Some(sent)) = (self.upstream.throttle(), sent) {
                throttle.forget(sent);
            }
            self.upstream
                .record_latency(now.saturating_duration_since(started), now);
            span.record("cancelled", true);
        }
    }

    /// Whether an attempt starting at `now` has time: the minimum attempt budget fits before
    /// the deadline (compared as instants: no duration is computed).
    fn has_time_at(&self, now: Instant) -> bool {
        now < self.deadline
            && deadline_after(now, self.upstream.config().min_attempt_budget) <= self.deadline
    }

    /// When an attempt admitted at `started` is cut: the upstream's attempt timeout later,
    /// never past the deadline.
    fn attempt_ends(&self, started: Instant) -> Instant {
        Attempt::ends_at(
            started,
            self.upstream.config().attempt_timeout,
            self.deadline,
        )
    }

    /// The next attempt, if time is left for one.
    fn next_attempt(&mut self) -> Result<Attempt, Error> {
        let now = match self.attempt {
            0 => self.created,
            _ => Instant::now(),
        };
        if !self.has_time_at(now) {
            self.span.in_scope(|| {
                tracing::info!(
                    target: "retry_runtime::decision",
                    reason = "deadline",
                    attempt = self.attempt + 1,
                    "no time left for an attempt"
                )
            });
            self.local = Local::NoTime;
            return Err(Error::DeadlineExceeded {
                upstream: self.upstream.name_arc().clone(),
                attempts: self.attempt,
                last_status: self.last_failure.and_then(|f| f.status),
                last_evidence: self.last_failure.map(|f| f.evidence),
            });
        }
        self.local = Local::Nothing;
        self.attempt += 1;
        self.retried_mark = self.scope.retried_failures();
        Ok(Attempt {
            upstream: self.upstream.clone(),
            number: self.attempt,
            method: self.method.clone(),
            key: self.key.clone(),
            deadline: self.deadline,
            ends: self.attempt_ends(now),
            started: now,
            retries_left: self.scope.retries_left(),
            span: attempt_span(&self.span, self.attempt, &self.method),
        })
    }

    /// Asks the breaker, then the bulkhead, to let `attempt` start. A full bulkhead is waited
    /// on until the deadline less the minimum attempt budget; the attempt then starts when
    /// admitted, with what is left of the deadline.
    async fn admit(&mut self, attempt: &mut Attempt) -> Result<Pass, Error> {
        match self.try_admit()? {
            Admitted::Now(pass) => Ok(pass),
            Admitted::Queue(sent, admission) => self.wait_for_slot(attempt, sent, admission).await,
        }
    }

    /// The breaker's answer, and a bulkhead slot if one is free now (no future to build on
    /// the common path).
    fn try_admit(&mut self) -> Result<Admitted, Error> {
        let sent = match self.upstream.throttle() {
            Some(throttle) => {
                // A retry drew its admission when it was decided (`apply`): it is only
                // counted now. A rotation retry stands for the attempt the server never took.
                let first = self.attempt - self.rotations <= 1;
                let kind = match first {
                    true => AttemptKind::First,
                    false => AttemptKind::Extra,
                };
                let tick = self.upstream.tick(match self.attempt {
                    1 => self.created,
                    _ => Instant::now(),
                });
                let registry = self.registry;
                let rng = &mut self.rng;
                let admitted = throttle.admit(kind, tick, || match first {
                    true => rng.get_or_insert_with(|| registry.rng()).f64(),
                    false => 1.0,
                });
                match admitted {
                    Some(sent) => Some(sent),
                    None => {
                        self.local = Local::Throttled;
                        observe::rejected(self.upstream.name(), crate::Rejection::Throttled);
                        return Err(Error::Throttled {
                            upstream: self.upstream.name_arc().clone(),
                        });
                    }
                }
            }
            None => None,
        };
        let upstream = &self.upstream;
        let forget = |sent: Option<Sent>| {
            if let (Some(throttle), Some(sent)) = (upstream.throttle(), sent) {
                throttle.forget(sent);
            }
        };
        let admission = match upstream.breaker() {
            Some(breaker) => match breaker.admit() {
                Some(admission) => Some(admission),
                None => {
                    forget(sent);
                    self.local = Local::CircuitOpen;
                    observe::rejected(upstream.name(), crate::Rejection::CircuitOpen);
                    return Err(Error::CircuitOpen {
                        upstream: upstream.name_arc().clone(),
                    });
                }
            },
            None => None,
        };
        let Some(bulkhead) = upstream.bulkhead() else {
            return Ok(Admitted::Now(Pass {
                sent,
                admission,
                slot: None,
            }));
        };
        Ok(match bulkhead.try_enter() {
            Some(slot) => Admitted::Now(Pass {
                sent,
                admission,
                slot: Some(slot),
            }),
            None => Admitted::Queue(sent, admission),
        })
    }

    /// Waits for a bulkhead slot (the breaker admitted the attempt) until the deadline less
    /// the minimum attempt budget.
    async fn wait_for_slot(
        &mut self,
        attempt: &mut Attempt,
        sent: Option<Sent>,
        admission: Option<Admission>,
    ) -> Result<Pass, Error> {
        let upstream = &self.upstream;
        let Some(bulkhead) = upstream.bulkhead() else {
            return Ok(Pass {
                sent,
                admission,
                slot: None,
            });
        };
        let min_attempt_budget = upstream.config().min_attempt_budget;
        let until = self
            .deadline
            .checked_sub(min_attempt_budget)
            .unwrap_or(self.deadline);
        match bulkhead.enter_until(until).await {
            Some(slot) => {
                let now = Instant::now();
                attempt.started = now;
                attempt.ends = self.attempt_ends(now);
                Ok(Pass {
                    sent,
                    admission,
                    slot: Some(slot),
                })
            }
            None => {
                if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
                    breaker.release(admission);
                }
                if let (Some(throttle), Some(sent)) = (upstream.throttle(), sent) {
                    throttle.forget(sent);
                }
                self.local = Local::BulkheadFull;
                observe::rejected(upstream.name(), crate::Rejection::BulkheadFull);
                Err(Error::BulkheadFull {
                    upstream: upstream.name_arc().clone(),
                })
            }
        }
    }

    /// Counts the attempt that `ended` in the breaker, adopts a scope the attempt opened, and
    /// turns a timeout into the caller's error.
    fn end_attempt<T, E>(
        &mut self,
        ended: Ended<Result<T, E>>,
        pass: Pass,
        number: u32,
    ) -> Result<T, E>
    where
        E: Classify + From<Error>,
    {
        let Pass {
            sent,
            admission,
            slot,
        } = pass;
        drop(slot);
        (self.failed_at, self.classified) = (None, None);
        self.scope.adopt(ended.opened);
        self.replay = self.replay.min(ended.reported);
        self.attempt_span = ended.span;
        let result = match ended.output {
            Ok(result) => result,
            Err(TimedOut) => {
                self.local = Local::TimedOut;
                Err(E::from(Error::AttemptTimeout {
                    upstream: self.upstream.name_arc().clone(),
                    attempt: number,
                    timeout: self
                        .attempt_ends
                        .saturating_duration_since(self.attempt_started),
                }))
            }
        };
        let outcome = match (&result, self.local) {
            (Ok(_), _) => AttemptOutcome::Success,
            (Err(_), Local::TimedOut) => AttemptOutcome::Timeout,
            (Err(_), _) => AttemptOutcome::Failure,
        };
        observe::attempt_ended(self.upstream.name(), self.attempt_started, outcome);
        if result.is_ok() {
            // Progress: what makes further rotation retries free (module docs).
            self.upstream.budget().record_progress();
        }
        if admission.is_some() || sent.is_some() {
            let upstream = &self.upstream;
            // A callee that retried below and gave up did the work it was asked: its
            // dependency failed, not it (see `throttle::accepted`).
            let mut accepted_anyway = false;
            let failed = match &result {
                Ok(_) => false,
                Err(_) if self.local == Local::TimedOut => true,
                Err(e) => {
                    let failure = Failure::of(e);
                    // What the error reports, kept for `settle` (it gets this same error).
                    self.classified = Some(failure);
                    if failure.connection_rotated {
                        // Neither a failure nor a success: the server closed a healthy
                        // connection (see `breaker::is_upstream_failure`).
                        if let (Some(breaker), Some(admission)) = (upstream.breaker(), admission) {
                            breaker.release(admission);
                        }
                        if let (Some(throttle), Some(sent)) = (upstream.throttle(), sent) {
                            throttle.forget(sent);
                        }
                        return result;
                    }
                    accepted_anyway = crate::throttle::accepted_anyway(&failure);
                    crate::breaker::is_upstream_failure(&failure)
                }
            };
            // Counted when it ended: an attempt that completed in its first poll ended when it
            // started (no clock read), which for the first attempt is when the call did.
            let (at, tick) = match ended.waited || failed {
                true => {
                    let now = Instant::now();
                    (now, self.upstream.tick(now))
                }
                false if self.attempt_started == self.created => {
                    (self.attempt_started, self.created_tick)
                }
                false => (
                    self.attempt_started,
                    self.upstream.tick(self.attempt_started),
                ),
            };
            if failed {
                self.failed_at = Some(at);
            }
            if let (Some(breaker), Some(admission)) = (self.upstream.breaker(), admission) {
                breaker.record_on(admission, failed, tick);
            }
            if let (Some(throttle), Some(sent)) = (self.upstream.throttle(), sent) {
                throttle.record(sent, !failed || accepted_anyway, tick);
            }
        }
        result
    }

    /// Decides after an attempt: ends the call on success, or asks the engine, spends the
    /// retry (shared allowance, then budget), drops the error and sleeps the backoff before
    /// answering [`Step::Retry`]. Nothing from the failed attempt is held while sleeping.
    pub async fn settle<T, E>(&mut self, result: Result<T, E>) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let error = match result {
            Ok(value) => {
                if self.attempt > 1 {
                    self.span.in_scope(|| {
                        tracing::info!(
                            target: "retry_runtime::decision",
                            decision = "succeeded",
                            attempts = self.attempt,
                            "succeeded after retrying"
                        )
                    });
                }
                self.finish(CallKind::of(true, self.attempt));
                return Step::Done(Ok(value));
            }
            Err(error) => error,
        };
        if self.local == Local::NoTime {
            // Nothing was sent this time: the deadline ends the call. The retried attempt
            // before it decides what that means: a write whose outcome it left unknown is
            // ambiguous (with its key), not a failure that reads as "nothing happened".
            if let Some(last) = self.last_failure {
                return self.stop(DenyReason::Deadline, error, &last);
            }
            self.stopped = Some((DenyReason::Deadline, Failure::new(Evidence::NotSent)));
            observe::denied(self.upstream.name(), DenyReason::Deadline);
            self.finish(CallKind::of(false, self.attempt));
            return Step::Done(Err(error));
        }
        let mut failure = self
            .classified
            .take()
            .unwrap_or_else(|| Failure::of(&error));
        if failure.evidence == Evidence::ResponseReceived && failure.status.is_none() {
            // A programming error in the adapter, not a fact about the upstream: say where.
            self.span.in_scope(|| {
                tracing::warn!(
                    target: "retry_runtime::decision",
                    error_type = std::any::type_name::<E>(),
                    "the error reports that a response arrived but not its status: \
                     delegate `Classify` to the HTTP error (`via`, or `#[derive(Classify)]`)"
                )
            });
        }
        match self.local {
            Local::CircuitOpen => failure.reject(crate::Rejection::CircuitOpen),
            Local::BulkheadFull => failure.reject(crate::Rejection::BulkheadFull),
            Local::Throttled => failure.reject(crate::Rejection::Throttled),
            // Cut by our own timeout: the request may have been sent, whatever the error says.
            Local::TimedOut => failure.evidence = Evidence::SentNoResponse,
            Local::Nothing | Local::NoTime => {}
        }
        if self.local != Local::Nothing {
            failure.connection_rotated = false;
        }
        if self.scope.retried_failures() > self.retried_mark {
            failure.already_retried = true;
        }
        if !self.attempt_span.is_disabled() {
            self.attempt_span
                .record("evidence", failure.evidence.as_str());
            // OpenTelemetry's `error.type`: the status when there is one, else how far the
            // attempt got. (The status code itself is recorded by the send path, once.)
            match failure.status {
                Some(status) => self
                    .attempt_span
                    .record("error.type", tracing::field::display(status)),
                None => self
                    .attempt_span
                    .record("error.type", failure.evidence.as_str()),
            };
        }
        // `max_attempts = 1` turns retries off, rotation retries included.
        let free_rotation = failure.connection_rotated
            && self.rotation_is_free()
            && self.upstream.config().max_attempts > 1;
        // One clock read for the decision, the budget and the backoff's start: the one that
        // timed the failure for the breaker, if it did.
        let now = self.failed_at.take().unwrap_or_else(Instant::now);
        let at = self.now(now);
        let decision = self.decide(&failure, free_rotation, at);
        self.apply(decision, error, &failure, free_rotation, at)
            .await
    }

    /// The attempt just settled was lost to connection rotation: counts it, and says whether a
    /// retry would be a free one (module docs): the call's first two rotations are, a later one
    /// only if the upstream had a successful attempt since the call's rotation before last.
    fn rotation_is_free(&mut self) -> bool {
        observe::rotated(self.upstream.name());
        self.attempt_span.record("connection_rotated", true);
        let now = self.upstream.budget().progress();
        let [older, newer] = self.rotation_marks;
        self.rotation_marks = [newer, Some(now)];
        older.is_none_or(|mark| now > mark)
    }

    /// After a reconcile check answered [`Reconciled::NotHappened`]: the write did not happen,
    /// so the attempt counts as not sent and the remaining rules (attempts, budget, draining,
    /// deadline) decide whether to retry.
    pub async fn settle_not_happened<T, E>(&mut self, error: E) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let failure = Failure::new(Evidence::NotSent);
        let at = self.now(Instant::now());
        let decision = match self.decide(&failure, false, at) {
            // Logged and counted under what really happened, not as "not sent".
            Decision::Retry { delay, .. } => Decision::Retry {
                delay,
                reason: RetryReason::ReconciledNotHappened,
            },
            other => other,
        };
        self.apply(decision, error, &failure, false, at).await
    }

    /// The reconcile check found that the write happened: the call ends successfully with the
    /// check's value (recorded as a success, with the attempts made).
    pub fn happened<T>(&mut self, value: T) -> T {
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
    pub fn ambiguous<E: From<Error>>(&mut self, ambiguous: Ambiguous) -> E {
        self.finish(CallKind::Ambiguous);
        if self.attempt > 1 {
            self.scope.note_retried_failure();
        }
        E::from(Error::from(ambiguous))
    }

    /// `now`, for a decision and the retry that may follow it.
    fn now(&self, now: Instant) -> Now {
        Now {
            instant: now,
            budget: self.upstream.budget().moment(now),
        }
    }

    /// Asks the engine. A free rotation retry (`free_rotation`) spends neither an attempt, nor
    /// the operation's allowance, nor a budget token, so those rules are told there is room;
    /// every other rule (body, draining, deadline, the ambiguity of an unkeyed write, ...)
    /// applies as to any retry.
    fn decide(&mut self, failure: &Failure, free_rotation: bool, now: Now) -> Decision {
        let remaining = self.deadline.saturating_duration_since(now.instant);
        let config = self.upstream.config();
        // Attempts that count: free rotation retries were not.
        let mut attempt = self.attempt - self.rotations;
        let mut operation_retries_left = self.scope.retries_left().unwrap_or(u32::MAX);
        let budget_has_token = match free_rotation {
            true => {
                attempt = attempt.min(config.max_attempts.saturating_sub(1));
                operation_retries_left = operation_retries_left.max(1);
                true
            }
            false => self.upstream.budget().has_token_in(now.budget),
        };
        let ctx = Context {
            attempt,
            max_attempts: config.max_attempts,
            operation_retries_left,
            budget_has_token,
            replay: self.replay,
            draining: self.registry.drain().is_draining(),
            remaining,
            min_attempt_budget: config.min_attempt_budget,
            safety: self.safety,
            transient_500: config.transient_500,
            can_refresh_auth: !self.auth_refresh_used && self.upstream.refresh_hook().is_some(),
            backoff: &config.backoff,
            previous_delay: self.previous_delay,
        };
        let registry = self.registry;
        let rng = self.rng.get_or_insert_with(|| registry.rng());
        registry.engine().decide(&ctx, failure, rng)
    }

    async fn apply<T, E>(
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
            // At once, spending nothing (module docs, "Connection rotation").
            self.rotations += 1;
            self.span.in_scope(|| {
                tracing::info!(
                    target: "retry_runtime::decision",
                    decision = "retry",
                    reason = RetryReason::ConnectionRotated.as_str(),
                    attempt = self.attempt,
                    evidence = failure.evidence.as_str(),
                    delay_ms = 0u64,
                    "retrying at once on another connection"
                )
            });
            observe::rotation_retried(self.upstream.name());
            return Step::Retry;
        }
        // Extra work goes to the upstream only in the proportion it currently accepts (the
        // draw is made now, before the backoff; the retry's attempt is counted when it starts).
        if let Some(throttle) = self.upstream.throttle() {
            let registry = self.registry;
            let rng = self.rng.get_or_insert_with(|| registry.rng());
            let own = self.attempt - self.rotations;
            if !throttle.admits_extra(self.upstream.tick(now.instant), rng.f64(), own) {
                return self.stop(DenyReason::Throttled, error, failure);
            }
        }
        // Spend only now that the retry really happens: a denied retry is free.
        if !self.scope.take_retry() {
            return self.stop(DenyReason::MaxAttempts, error, failure);
        }
        if !self.upstream.budget().withdraw_in(now.budget) {
            self.scope.give_back_retry();
            return self.stop(DenyReason::BudgetExhausted, error, failure);
        }
        self.last_failure = Some(*failure);
        self.span.in_scope(|| {
            tracing::info!(
                target: "retry_runtime::decision",
                decision = "retry",
                reason = %reason,
                attempt = self.attempt,
                evidence = failure.evidence.as_str(),
                status = failure.status,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "retrying"
            )
        });
        observe::retried(self.upstream.name(), reason, self.upstream.budget());
        // Drop the error (and any response or connection it holds) before waiting: the facts in
        // `failure` are all a shutdown during the wait needs to tell the caller. The attempt's
        // span ends here too: the wait is not part of the attempt.
        drop(error);
        self.attempt_span = tracing::Span::none();
        if reason == RetryReason::RefreshAuth {
            self.auth_refresh_used = true;
            if let Some(hook) = self.upstream.refresh_hook().cloned() {
                // The hook runs inside the operation's deadline like everything else.
                let refresh = hook.refresh().instrument(self.span.clone());
                match tokio::time::timeout_at(self.deadline, refresh).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        self.finish(CallKind::of(false, self.attempt));
                        return Step::Done(Err(E::from(Error::RefreshFailed(e))));
                    }
                    Err(_) => {
                        self.record_denial(
                            DenyReason::Deadline,
                            "the credentials refresh outlasted the deadline",
                        );
                        self.finish(CallKind::of(false, self.attempt));
                        return Step::Done(Err(E::from(Error::DeadlineExceeded {
                            upstream: self.upstream.name_arc().clone(),
                            attempts: self.attempt,
                            last_status: failure.status,
                            last_evidence: Some(failure.evidence),
                        })));
                    }
                }
            }
        }
        if !delay.is_zero() && self.back_off(now.instant, delay).await.is_err() {
            return self.drained(failure);
        }
        self.previous_delay = delay;
        Step::Retry
    }

    /// Sleeps `delay` from `from`, or less if shutdown starts meanwhile (`Err`).
    async fn back_off(&mut self, from: Instant, delay: Duration) -> Result<(), Drained> {
        let drain = self.registry.drain();
        let until = deadline_after(from, delay);
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                sleep.as_mut().reset(until);
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(until))),
        };
        // The timer first: a backoff that is over never registers with the drain again, and
        // the flag is read once more after it, so a shutdown that started meanwhile still ends
        // the call before another attempt.
        tokio::select! {
            biased;
            () = sleep.as_mut() => {}
            () = drain.started() => return Err(Drained),
        }
        match drain.is_draining() {
            true => Err(Drained),
            false => Ok(()),
        }
    }

    /// Shutdown started during the backoff: the call ends without another attempt, with the
    /// outcome the last failure had (ambiguous for a write that may have executed).
    fn drained<T, E>(&mut self, failure: &Failure) -> Step<T, E>
    where
        E: Classify + From<Error> + Display,
    {
        let last_error = match failure.status {
            Some(status) => format!("status {status}"),
            None => format!("no response ({})", failure.evidence.as_str()),
        };
        let error = E::from(Error::Draining {
            upstream: self.upstream.name_arc().clone(),
            attempts: self.attempt,
            last_error,
        });
        // The retry that was granted did not happen.
        self.scope.give_back_retry();
        self.stop(DenyReason::RuntimeDraining, error, failure)
    }

    /// A denied retry. For a write whose last attempt may have executed without its response
    /// arriving, stopping does not make the outcome known: reporting a plain failure would tell
    /// the caller the write did not happen. That is an ambiguous outcome (carrying the key, so a
    /// keyed write can be replayed safely later), whatever stopped the retries.
    fn stop<T, E>(&mut self, reason: DenyReason, error: E, failure: &Failure) -> Step<T, E>
    where
        E: Classify + Display,
    {
        self.stopped = Some((reason, *failure));
        let unknown = match (failure.evidence, failure.status) {
            _ if self.safety == Safety::Read => None,
            (Evidence::SentNoResponse, _) => Some(AmbiguityReason::SentNoResponse),
            (Evidence::PartialResponse, _) => Some(AmbiguityReason::PartialResponse),
            (Evidence::ResponseReceived, Some(s @ 502..=504)) => Some(AmbiguityReason::Status(s)),
            (Evidence::ResponseReceived, None) => Some(AmbiguityReason::StatusUnknown),
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

    /// Whether the failure that stopped the call for `reason` is one that time can clear: a
    /// refusal by the breaker or bulkhead, the callee's pushback, shutdown, a wait longer than
    /// the in-memory window,
    /// or retries, budget or deadline spent on a failure the engine retries when there is room
    /// (asked again with room: a 400 on the last attempt is not transient, a 503 is).
    fn is_transient(&self, reason: DenyReason, failure: &Failure) -> bool {
        match reason {
            DenyReason::CircuitOpen
            | DenyReason::BulkheadFull
            | DenyReason::Throttled
            | DenyReason::RuntimeDraining
            | DenyReason::RetryAfterBeyondWindow
            | DenyReason::Pushback(_) => true,
            DenyReason::MaxAttempts | DenyReason::BudgetExhausted | DenyReason::Deadline => {
                let config = self.upstream.config();
                let ctx = Context {
                    attempt: 1,
                    max_attempts: 2,
                    operation_retries_left: 1,
                    budget_has_token: true,
                    replay: self.replay,
                    draining: false,
                    remaining: crate::config::MAX_IN_MEMORY_WINDOW,
                    min_attempt_budget: config.min_attempt_budget,
                    safety: self.safety,
                    transient_500: config.transient_500,
                    can_refresh_auth: false,
                    backoff: &config.backoff,
                    previous_delay: Duration::ZERO,
                };
                let mut roomy = *failure;
                roomy.retry_after = None;
                roomy.already_retried = false;
                // The delay is not used: any seed will do.
                let mut rng = fastrand::Rng::with_seed(0);
                matches!(
                    self.registry.engine().decide(&ctx, &roomy, &mut rng),
                    Decision::Retry { .. }
                        | Decision::Denied(
                            DenyReason::CircuitOpen
                                | DenyReason::BulkheadFull
                                | DenyReason::Throttled
                                | DenyReason::Pushback(_)
                        )
                )
            }
            _ => false,
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
            upstream: self.upstream.name_arc().clone(),
            operation: self.scope.name(self.upstream.name()).to_owned(),
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
        observe::denied(self.upstream.name(), reason);
    }

    fn deny<T, E: Classify>(&mut self, reason: DenyReason, mut error: E) -> Step<T, E> {
        self.record_denial(reason, "not retrying");
        error.stopped(Stop::new(self.attempt, reason));
        if self.attempt > 1 {
            // Tell enclosing retrying calls that this failure was already retried here.
            self.scope.note_retried_failure();
        }
        if matches!(
            reason,
            DenyReason::BudgetExhausted
                | DenyReason::CircuitOpen
                | DenyReason::BulkheadFull
                | DenyReason::Throttled
        ) {
            // The upstream is failing or saturated for everyone: a caller in another process
            // that retried the whole chain would only add calls the budget just refused.
            self.scope.note_overloaded();
        }
        self.finish(CallKind::of(false, self.attempt));
        Step::Done(Err(error))
    }

    fn finish(&mut self, kind: CallKind) {
        // A disabled span still looks each field up by name before doing nothing: skip it.
        if !self.span.is_disabled() {
            self.span.record("attempts", self.attempt);
            self.span.record("outcome", kind.as_str());
        }
        observe::call_finished(self.upstream.name(), kind);
        if let Some(breaker) = self.upstream.breaker() {
            observe::breaker_state(self.upstream.name(), breaker);
        }
    }
}

/// Shutdown started while waiting.
struct Drained;
