//! The attempt loop's engine room: one [`Call`] drives the attempts of one retrying call.
//!
//! Both [`RetryCall::run`](crate::RetryCall::run) and the `#[retry]` macro drive a `Call`:
//!
//! ```text
//! let mut call = Call::at(registry, &SITE, key);  // looks nothing up yet
//! loop {
//!     let attempt = call.begin_attempt()?;          // deadline check
//!     let result = call.run(attempt, body).await;   // breaker, bulkhead, scope, timeout, span;
//!                                                   // the call's budget deposit (once)
//!     let error = match call.succeeded(result) {    // a success ends the call here
//!         ControlFlow::Break(value) => return Ok(value),
//!         ControlFlow::Continue(error) => error,
//!     };
//!     match call.settle(Err(error)).await {         // decide, spend, drop, sleep
//!         Step::Retry => continue,
//!         Step::Done(result) => return result,
//!         Step::Ambiguous { error, ambiguous } => /* reconcile or report */,
//!     }
//! }
//! ```
//!
//! The loop is written out (by the macro) rather than hidden behind a closure so an attempt's
//! body can borrow `&mut self` and the call's arguments afresh on every attempt.
//!
//! A call made with [`Call::at`] starts only when its first attempt is polled, and its first
//! attempt may then take the fast path (`first.rs`); one made with [`Call::new`] starts at once.
//! Either way, once started it is a `CallCore` (`call_core.rs`).

use std::borrow::Cow;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::attempt::{Attempt, IdempotencyKey};
use crate::attempt_future::{AttemptRun, Pass};
use crate::breaker::Admission;
use crate::call_core::CallCore;
use crate::first::{self, Enter, Entered, Handed, Lazy, Left};
use crate::hot::HeldUpstream;
use crate::observe::CallKind;
use crate::registry::{Registry, Upstream};
use crate::scope::Operation;
use crate::{Ambiguous, Classify, Error, Replayability};

/// What a retrying call is: which upstream, which method, which key.
#[derive(Debug, Clone)]
pub struct CallSpec<'r> {
    /// The registry to look the upstream up in.
    pub registry: &'r Registry,
    /// The upstream's name.
    pub upstream: &'r str,
    /// The HTTP method the call sends.
    pub method: http::Method,
    /// The idempotency key, fixed before the first attempt.
    pub key: Option<IdempotencyKey>,
    /// The request body's replayability.
    pub replay: Replayability,
    /// The operation name for an implicit scope (defaults to the upstream's name).
    pub operation: Option<Cow<'static, str>>,
}

/// What `#[retry]` fixes about its calls when it expands: the upstream, the method and the
/// operation name. One `static` per annotated function, so a call carries a pointer to it.
#[derive(Debug)]
pub struct CallSite {
    pub(crate) upstream: &'static str,
    pub(crate) method: http::Method,
    pub(crate) operation: &'static str,
}

impl CallSite {
    /// A call site of `upstream`, sending `method`, naming its own scope `operation`.
    pub const fn new(
        upstream: &'static str,
        method: http::Method,
        operation: &'static str,
    ) -> Self {
        CallSite {
            upstream,
            method,
            operation,
        }
    }

    /// The name of the site's own scope; `None` for an empty name, which names the scope
    /// after the upstream (the builder's shared sites).
    pub(crate) fn own_operation(&self) -> Option<&'static str> {
        (!self.operation.is_empty()).then_some(self.operation)
    }
}

/// The answer of a reconcile check for a write whose outcome was ambiguous (spec 004: "an
/// idempotency key or a reliable way to check the result").
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

/// The state of one retrying call.
// A started call's state is dropped by `Call`'s own `Drop`, which checks inline whether the
// call started: a call that ended on the fast path then calls no drop glue (see `Lazy`).
#[derive(Debug)]
pub struct Call<'r> {
    state: State<'r>,
    /// The call could not start (its upstream is unknown, or no time was left): nothing was
    /// sent, and the error its first attempt returned ends it.
    could_not_start: bool,
}

// Unboxed on purpose: a call lives in its caller's future, and a call not started yet writes
// only its small variant there; boxing the started one would allocate on every call that waits.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum State<'r> {
    /// Made by [`Call::at`]: nothing looked up yet.
    Lazy(Lazy<'r>),
    /// Started (dropped by [`Call`]'s `Drop`).
    Full(ManuallyDrop<CallCore<'r>>),
    /// Only while the state changes.
    Moving,
}

/// The next attempt, as [`Call::run`] takes it: an [`Attempt`], or the first attempt of a call
/// made with [`Call::at`], which is made only if something needs it.
#[derive(Debug)]
pub struct NextAttempt(Next);

#[derive(Debug)]
enum Next {
    First,
    Ready(Attempt),
}

impl From<Attempt> for NextAttempt {
    fn from(attempt: Attempt) -> Self {
        NextAttempt(Next::Ready(attempt))
    }
}

/// The attempt [`Call::run_attempt`] gives a maker that needs it.
pub(crate) fn given(attempt: Option<Attempt>) -> Attempt {
    match attempt {
        Some(attempt) => attempt,
        None => unreachable!("an attempt is made for a body that needs it"),
    }
}

/// How a lazy call's first attempt starts (see `first.rs`).
pub(crate) enum First {
    /// On the fast path: poll the body, then [`Call::leave_first`].
    Fast(Entered),
    /// On the full path, with this attempt.
    Full(Attempt),
    /// The call could not start (boxed: this is returned on every call, and is rare).
    Failed(Box<Error>),
}

impl Drop for Call<'_> {
    #[inline]
    fn drop(&mut self) {
        if matches!(self.state, State::Full(_)) {
            self.drop_started();
        }
    }
}

impl Call<'_> {
    #[inline(never)]
    fn drop_started(&mut self) {
        if let State::Full(core) = std::mem::replace(&mut self.state, State::Moving) {
            drop(ManuallyDrop::into_inner(core));
        }
    }
}

impl<'r> Call<'r> {
    /// Looks up the upstream and opens (or joins) the operation scope now.
    pub fn new(spec: CallSpec<'r>) -> Result<Self, Error> {
        let held = HeldUpstream::take(spec.registry, spec.upstream)?;
        Ok(Call {
            state: State::Full(ManuallyDrop::new(CallCore::build(spec, held, None))),
            could_not_start: false,
        })
    }

    /// A call from `site` (with `key`) through `registry`, like [`new`](Self::new) but lazy:
    /// nothing is looked up until the first attempt is polled, so a first attempt that needs
    /// nothing of the call costs almost nothing (what `#[retry]` uses). An unknown upstream is
    /// then reported by the first attempt, before anything runs.
    #[inline]
    pub fn at(
        registry: &'r Registry,
        site: &'static CallSite,
        key: Option<IdempotencyKey>,
    ) -> Self {
        Call {
            state: State::Lazy(Lazy::at(registry, site, key)),
            could_not_start: false,
        }
    }

    /// Like [`new`](Self::new), but lazy like [`at`](Self::at): nothing is looked up until the
    /// first attempt is polled (what the builder uses).
    #[inline]
    pub fn lazy(spec: CallSpec<'r>) -> Self {
        Call::from_lazy(Lazy::new(spec))
    }

    /// A lazy call (the builder's).
    #[inline]
    pub(crate) fn from_lazy(lazy: Lazy<'r>) -> Self {
        Call {
            state: State::Lazy(lazy),
            could_not_start: false,
        }
    }

    /// The started call: started now if it was not.
    fn core(&mut self) -> Result<&mut CallCore<'r>, Error> {
        self.start(None, None)
    }

    /// Starts the call (from `held`'s entry and with `span` if they were found or made
    /// already).
    fn start(
        &mut self,
        held: Option<HeldUpstream>,
        span: Option<tracing::Span>,
    ) -> Result<&mut CallCore<'r>, Error> {
        let held = match (&self.state, held) {
            (State::Full(_), _) => None,
            (_, Some(held)) => Some(held),
            (State::Lazy(lazy), None) => {
                Some(HeldUpstream::take(lazy.registry(), lazy.upstream())?)
            }
            (State::Moving, None) => None,
        };
        if let Some(held) = held {
            let State::Lazy(lazy) = std::mem::replace(&mut self.state, State::Moving) else {
                unreachable!("only a call not started starts")
            };
            let succeeded = lazy.succeeded;
            let mut core = CallCore::build(lazy.into_spec(), held, span);
            if succeeded {
                core.first_succeeded();
            }
            self.state = State::Full(ManuallyDrop::new(core));
        }
        match &mut self.state {
            State::Full(core) => Ok(core),
            _ => unreachable!("started above"),
        }
    }

    /// The started call, for an attempt admitted (so started) already.
    pub(crate) fn started(&mut self) -> &mut CallCore<'r> {
        match &mut self.state {
            State::Full(core) => core,
            _ => unreachable!("an admitted attempt belongs to a started call"),
        }
    }

    /// Lowers the body's replayability once it is known to be weaker than declared (e.g. the
    /// integration found the body cannot be copied for another attempt). Never raises it.
    pub fn downgrade_replay(&mut self, replay: Replayability) {
        match &mut self.state {
            State::Lazy(lazy) => lazy.downgrade_replay(replay),
            State::Full(core) => core.downgrade_replay(replay),
            State::Moving => {}
        }
    }

    /// Retries the operation (across every layer inside it) may still make; `None` when
    /// unlimited, or for a lazy call not started yet.
    pub fn retries_left(&self) -> Option<u32> {
        match &self.state {
            State::Full(core) => core.retries_left(),
            _ => None,
        }
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        match &self.state {
            State::Full(core) => core.attempts(),
            State::Lazy(lazy) => u32::from(lazy.succeeded),
            State::Moving => 0,
        }
    }

    /// The upstream called; `None` for a lazy call that has not started (see
    /// [`at`](Self::at)).
    pub fn upstream(&self) -> Option<&Arc<Upstream>> {
        match &self.state {
            State::Full(core) => Some(core.upstream()),
            _ => None,
        }
    }

    /// Starts the next attempt, or fails with [`Error::DeadlineExceeded`] when less than the
    /// minimum attempt budget is left (nothing is sent then). A lazy call starts now.
    pub fn next_attempt(&mut self) -> Result<Attempt, Error> {
        self.core()?.next_attempt(None)
    }

    /// Like [`next_attempt`](Self::next_attempt), but a lazy call's first attempt is left to
    /// [`run`](Self::run) to start, on the fast path if it can (what `#[retry]` uses).
    #[inline]
    pub fn begin_attempt(&mut self) -> Result<NextAttempt, Error> {
        match self.state {
            State::Lazy(Lazy {
                succeeded: false, ..
            }) => Ok(NextAttempt(Next::First)),
            _ => self.next_attempt().map(NextAttempt::from),
        }
    }

    /// Runs one attempt's future inside the operation scope and the attempt scope, under the
    /// attempt timeout (clamped to the deadline), after the circuit breaker and the bulkhead
    /// admit it. The bulkhead permit is released as soon as the attempt ends, before any backoff.
    pub fn run<T, E, F, A>(
        &mut self,
        attempt: A,
        fut: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, 'r, T, E, F, A>
    where
        A: Into<NextAttempt>,
        F: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        // `run` takes no handle to the attempt: a handle is a shared count.
        self.run_attempt(attempt, false, move |_| fut)
    }

    /// Like [`run`](Self::run), but builds the attempt's future only once the breaker and the
    /// bulkhead have admitted it.
    pub fn run_with<T, E, F, Fut, A>(
        &mut self,
        attempt: A,
        make: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, 'r, T, E, F, Fut, A>
    where
        A: Into<NextAttempt>,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        self.run_attempt(attempt, true, move |a| make(given(a)))
    }

    /// What [`run`](Self::run) and [`run_with`](Self::run_with) (and the builder) share: the
    /// attempt's future is made by `make` once admitted, and given the attempt if it
    /// `needs_attempt` (else the attempt is made only if something asks for it).
    pub(crate) fn run_attempt<T, E, F, Fut, A>(
        &mut self,
        attempt: A,
        needs_attempt: bool,
        make: F,
    ) -> impl Future<Output = Result<T, E>> + use<'_, 'r, T, E, F, Fut, A>
    where
        A: Into<NextAttempt>,
        F: FnOnce(Option<Attempt>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + From<Error>,
    {
        let attempt = match attempt.into().0 {
            Next::First => None,
            Next::Ready(attempt) => Some(attempt),
        };
        AttemptRun::new(self, attempt, needs_attempt, make)
    }

    /// Starts a lazy call's first attempt: on the fast path if it can take it, else on the full
    /// path (which may find the upstream unknown, or no time left). `needs_attempt`: the
    /// attempt's future is made from the attempt.
    #[inline]
    pub(crate) fn first(&mut self, needs_attempt: bool) -> First {
        let handed = match &mut self.state {
            State::Lazy(lazy) if !lazy.succeeded => match first::enter(lazy, needs_attempt) {
                Enter::Fast(entered) => return First::Fast(entered),
                Enter::Full(handed) => handed,
            },
            _ => None,
        };
        match self.first_full(handed) {
            Ok(attempt) => First::Full(attempt),
            Err(error) => First::Failed(Box::new(error)),
        }
    }

    /// A first attempt on the full path, from what the fast path found.
    #[cold]
    #[inline(never)]
    fn first_full(&mut self, handed: Option<Box<Handed>>) -> Result<Attempt, Error> {
        if !matches!(&self.state, State::Lazy(lazy) if !lazy.succeeded) {
            return self.next_attempt();
        }
        let (held, (call_span, attempt_span)) = match handed.map(|handed| *handed) {
            Some(Handed { held, spans }) => (Some(held), spans.unzip()),
            None => (None, (None, None)),
        };
        let started = self
            .start(held, call_span)
            .and_then(|core| core.next_attempt(attempt_span));
        self.could_not_start = started.is_err();
        started
    }

    /// After the fast first attempt's first poll: [`Left::Ended`] if it `succeeded` and nothing
    /// asked for the attempt (the call is over and counted); else the full path takes over
    /// ([`continue_first`](Self::continue_first)).
    #[inline]
    pub(crate) fn leave_first(&mut self, entered: Entered, succeeded: bool) -> Left {
        let State::Lazy(lazy) = &mut self.state else {
            unreachable!("a fast first attempt belongs to a call not started")
        };
        entered.leave(lazy, succeeded)
    }

    /// The full path takes over a fast first attempt after its first poll.
    #[cold]
    #[inline(never)]
    pub(crate) fn continue_first(&mut self, slot: u32) -> (Attempt, Option<Operation>, Pass) {
        let made = match &mut self.state {
            State::Lazy(lazy) => lazy.take_continued(),
            _ => None,
        };
        let core = match self.start(Some(first::take_lent(slot)), None) {
            Ok(core) => core,
            Err(_) => unreachable!("a call starts without error from an entry it holds"),
        };
        let (attempt, opened) = match made {
            Some((attempt, opened)) => {
                core.first_started();
                (attempt, opened)
            }
            // Eligible for the fast path, so time is left for an attempt.
            None => match core.next_attempt(None) {
                Ok(attempt) => (attempt, None),
                Err(_) => unreachable!("the fast path checked the deadline"),
            },
        };
        // The fast path admitted the attempt: no bulkhead, the breaker (if any) closed.
        let admission = core.upstream().breaker().map(|_| Admission::closed());
        let pass = Pass {
            admission,
            permit: None,
        };
        (attempt, opened, pass)
    }

    /// Ends the call if the attempt succeeded: `Break` with the value (the call is recorded as
    /// a success). A failed attempt's error comes back as `Continue`, for [`settle`](Self::settle).
    ///
    /// Synchronous, so a call whose first attempt succeeds builds no `settle` future.
    pub fn succeeded<T, E>(&mut self, result: Result<T, E>) -> ControlFlow<T, E> {
        match result {
            Ok(value) => {
                if let State::Full(core) = &mut self.state {
                    let attempts = core.attempts();
                    core.finish(CallKind::of(true, attempts));
                }
                ControlFlow::Break(value)
            }
            Err(error) => ControlFlow::Continue(error),
        }
    }

    /// Decides after an attempt: returns success, or asks the engine, spends the retry (shared
    /// allowance, then budget), drops the error and sleeps the backoff before answering
    /// [`Step::Retry`]. Nothing from the failed attempt is held while sleeping.
    pub async fn settle<T, E>(&mut self, result: Result<T, E>) -> Step<T, E>
    where
        E: Classify + From<Error> + std::fmt::Display,
    {
        if self.could_not_start {
            return Step::Done(result);
        }
        if let (State::Lazy(lazy), Ok(_)) = (&self.state, &result)
            && lazy.succeeded
        {
            return Step::Done(result);
        }
        match self.core() {
            Ok(core) => core.settle(result).await,
            Err(_) => Step::Done(result),
        }
    }

    /// After a reconcile check answered [`Reconciled::NotHappened`]: the write did not happen,
    /// so the attempt counts as not sent and the remaining rules (attempts, budget, draining,
    /// deadline) decide whether to retry.
    pub async fn settle_not_happened<T, E>(&mut self, error: E) -> Step<T, E>
    where
        E: Classify + From<Error> + std::fmt::Display,
    {
        match self.core() {
            Ok(core) => core.settle_not_happened(error).await,
            Err(_) => Step::Done(Err(error)),
        }
    }

    /// The reconcile check found that the write happened: the call ends successfully with the
    /// check's value (recorded as a success, with the attempts made).
    pub fn happened<T>(&mut self, value: T) -> T {
        match self.core() {
            Ok(core) => core.happened(value),
            Err(_) => value,
        }
    }

    /// Reports an ambiguous outcome as the caller's error type.
    pub fn ambiguous<E: From<Error>>(&mut self, ambiguous: Ambiguous) -> E {
        match self.core() {
            Ok(core) => core.ambiguous(ambiguous),
            Err(_) => E::from(Error::from(ambiguous)),
        }
    }
}
