//! One attempt's future: admission, the attempt's scope, its timeout and its span in a single
//! `poll`.
//!
//! Written by hand rather than composed (an `async fn` awaiting `timeout_at` inside a
//! task-local scope inside `instrument`) because every layer of composition moved the attempt's
//! future once more, and kept a second copy of it beside the first; the copies were the largest
//! cost of a call in the happy-path profile. Here the attempt's future is built once, in place,
//! after the breaker and the bulkhead admitted it. The timer is created only when the attempt
//! first waits, so an attempt that completes in its first poll never touches the timer wheel
//! (nor reads the clock: see `lazy_clock.rs`).
//!
//! A lazy call's first attempt first tries the fast path (`first.rs`): no admission, no frame,
//! no span, and the attempt made only if the body asks. If the call goes on after that first
//! poll, this future goes on exactly as if the attempt had been admitted the full way.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::Error;
use crate::ambient::Frame;
use crate::attempt::Attempt;
use crate::breaker::Admission;
use crate::call::{Call, First};
use crate::first::Left;

/// The attempt's timeout expired before its future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// What let an attempt start: the breaker's admission and the bulkhead's permit (each only if
/// the upstream has one). The permit is released as soon as the attempt ends.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    pub(crate) admission: Option<Admission>,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

/// The breaker's and the bulkhead's answer to an attempt.
pub(crate) enum Admit {
    /// Start now.
    Now(Pass),
    /// The bulkhead is full: wait for a slot until `until`, the call's deadline less the
    /// minimum attempt budget.
    Wait {
        admission: Option<Admission>,
        bulkhead: Arc<Semaphore>,
        until: Instant,
    },
}

/// A wait for a bulkhead slot: the permit (or `None` at `until`), and when the wait ended.
type SlotWait = Pin<Box<dyn Future<Output = (Option<OwnedSemaphorePermit>, Instant)> + Send>>;

pin_project_lite::pin_project! {
    /// The attempt's future: made by `make` once admitted.
    #[project = BodyProj]
    enum Body<M, Fut> {
        Unmade { make: Option<M> },
        Made { #[pin] fut: Fut },
    }
}

pin_project_lite::pin_project! {
    /// Runs one attempt of `call`: asks the breaker and the bulkhead, makes the attempt's future,
    /// and polls it with the attempt (and the call's own operation scope) installed and its
    /// span entered, until it completes or the attempt's timeout expires. The call then counts
    /// the attempt (see `CallCore::end_attempt`).
    pub(crate) struct AttemptRun<'c, 'r, M, Fut> {
        call: &'c mut Call<'r>,
        // A lazy call's first attempt, not started yet: it may take the fast path.
        first: bool,
        // The attempt's future is made from the attempt (on the fast path too).
        needs_attempt: bool,
        done: bool,
        #[pin]
        body: Body<M, Fut>,
        // Everything but the fast path needs; `None` until then. Boxed: one allocation for an
        // attempt that leaves the fast path, so that a call that stays on it neither writes nor
        // drops this state (its drop glue, not inlined, was a measurable part of such a call:
        // so it is dropped by hand, below, after an inline check).
        full: ManuallyDrop<Option<Pin<Box<Full>>>>,
    }
    impl<'c, 'r, M, Fut> PinnedDrop for AttemptRun<'c, 'r, M, Fut> {
        fn drop(this: Pin<&mut Self>) {
            let full = this.project().full;
            if full.is_some() {
                drop(full.take());
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// An attempt on the full path: its admission, and once admitted its frame, span and timer.
    struct Full {
        // Until the attempt's future is made; then in the frame.
        attempt: Option<Attempt>,
        pass: Pass,
        waiting: Option<(Option<Admission>, SlotWait)>,
        // Installed around each poll of the attempt's future, once it is made.
        frame: Option<Frame>,
        span: tracing::Span,
        // Created (and the attempt's start read, if nothing read it yet) only if the attempt
        // waits.
        #[pin]
        timer: Option<Sleep>,
    }
}

/// The error of a call that could not start, as the body's error type (out of line: rare).
#[cold]
#[inline(never)]
fn failed<E: From<Error>>(error: Error) -> E {
    E::from(error)
}

impl Full {
    fn new(attempt: Option<Attempt>) -> Self {
        Full {
            attempt,
            pass: Pass::default(),
            waiting: None,
            frame: None,
            span: tracing::Span::none(),
            timer: None,
        }
    }

    /// The full path taking over a fast first attempt that did not end the call, after its
    /// first poll: as if the attempt had been admitted there (out of line, so the fast path's
    /// `poll` stays small).
    #[cold]
    #[inline(never)]
    fn continued(call: &mut Call<'_>, left: Left) -> Self {
        let Left::Continue { slot } = left else {
            unreachable!("only a success ends the call")
        };
        let (attempt, opened, pass) = call.continue_first(slot);
        let call = call.started();
        call.adopt(opened);
        let mut full = Full::new(None);
        full.pass = pass;
        full.span = attempt.state.facts.span.clone();
        full.frame = Some(Frame::attempt(attempt, call.installs()));
        full
    }
}

impl<'c, 'r, M, Fut> AttemptRun<'c, 'r, M, Fut> {
    /// `attempt` is `None` for a lazy call's first attempt (see `Call::begin_attempt`).
    /// `make` is given the attempt if it `needs_attempt`.
    pub(crate) fn new(
        call: &'c mut Call<'r>,
        attempt: Option<Attempt>,
        needs_attempt: bool,
        make: M,
    ) -> Self {
        let first = attempt.is_none();
        AttemptRun {
            call,
            first,
            needs_attempt,
            done: false,
            body: Body::Unmade { make: Some(make) },
            full: ManuallyDrop::new(attempt.map(|attempt| Box::pin(Full::new(Some(attempt))))),
        }
    }
}

impl<M, Fut, T, E> Future for AttemptRun<'_, '_, M, Fut>
where
    M: FnOnce(Option<Attempt>) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: crate::Classify + From<Error>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let mut this = self.project();
        assert!(
            !*this.done,
            "an attempt's future was polled after it completed"
        );
        // The first poll's outcome, when the fast path polled already.
        let mut polled = None;
        if std::mem::take(this.first) {
            match this.call.first(*this.needs_attempt) {
                First::Fast(entered) => {
                    let attempt = match *this.needs_attempt {
                        true => crate::ambient::with_attempt(|a| a.cloned()),
                        false => None,
                    };
                    let fut = take_make(this.body.as_mut())(attempt);
                    this.body.set(Body::Made { fut });
                    // On success only the value is held across leaving (the whole poll result,
                    // kept on the stack and copied out, stalled the core reading it back).
                    let (first_poll, left) = match poll_body(this.body.as_mut(), cx) {
                        Poll::Ready(Ok(value)) => match this.call.leave_first(entered, true) {
                            Left::Ended => {
                                *this.done = true;
                                return Poll::Ready(Ok(value));
                            }
                            left => (Poll::Ready(Ok(value)), left),
                        },
                        other => (other, this.call.leave_first(entered, false)),
                    };
                    **this.full = Some(Box::pin(Full::continued(this.call, left)));
                    polled = Some(first_poll);
                }
                First::Full(attempt) => **this.full = Some(Box::pin(Full::new(Some(attempt)))),
                First::Failed(error) => {
                    *this.done = true;
                    return Poll::Ready(Err(failed(*error)));
                }
            }
        }
        let Some(full) = this.full.as_mut().map(Pin::as_mut) else {
            unreachable!("an attempt not on the fast path is on the full path")
        };
        let needs_attempt = *this.needs_attempt;
        let output = ready!(full.poll_full(this.call, this.body, polled, needs_attempt, cx));
        *this.done = true;
        Poll::Ready(output)
    }
}

impl Full {
    /// Admits the attempt (once), makes its future (once), polls it inside its frame and span
    /// under its timeout, and counts it when it ends. `polled`: the outcome of a first poll the
    /// fast path made already. Out of line: the fast path's `poll` stays small.
    #[inline(never)]
    fn poll_full<M, Fut, T, E>(
        self: Pin<&mut Self>,
        call: &mut Call<'_>,
        mut body: Pin<&mut Body<M, Fut>>,
        polled: Option<Poll<Result<T, E>>>,
        needs_attempt: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<T, E>>
    where
        M: FnOnce(Option<Attempt>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: crate::Classify + From<Error>,
    {
        let mut this = self.project();
        if this.frame.is_none() {
            // Not started: admitted now, or once a bulkhead slot frees up.
            let Some(attempt) = this.attempt.as_mut() else {
                unreachable!("the attempt is held until its future is made")
            };
            let call = call.started();
            let admitted = loop {
                if let Some((admission, wait)) = this.waiting {
                    let (permit, now) = ready!(wait.as_mut().poll(cx));
                    let admission = admission.take();
                    *this.waiting = None;
                    break call.slot_waited(attempt, admission, permit, now);
                }
                match call.admit(attempt) {
                    Ok(Admit::Now(pass)) => break Ok(pass),
                    // Only a full bulkhead builds (and allocates) the future that waits.
                    Ok(Admit::Wait {
                        admission,
                        bulkhead,
                        until,
                    }) => {
                        let wait: SlotWait = Box::pin(async move {
                            let permit = tokio::time::timeout_at(until, bulkhead.acquire_owned());
                            let permit = permit.await.ok().and_then(Result::ok);
                            (permit, Instant::now())
                        });
                        *this.waiting = Some((admission, wait));
                    }
                    Err(error) => break Err(error),
                }
            };
            match admitted {
                Ok(pass) => *this.pass = pass,
                Err(error) => return Poll::Ready(Err(call.refused(this.attempt.take(), error))),
            }
            let Some(attempt) = this.attempt.take() else {
                unreachable!("the attempt is held until its future is made")
            };
            let fut = take_make(body.as_mut())(needs_attempt.then(|| attempt.clone()));
            body.set(Body::Made { fut });
            *this.span = attempt.state.facts.span.clone();
            *this.frame = Some(Frame::attempt(attempt, call.installs()));
        }
        let Some(frame) = this.frame.as_mut() else {
            unreachable!("the frame is set once the attempt's future is made")
        };
        let _span = this.span.enter();
        let polled = match polled {
            Some(polled) => polled,
            None => {
                let _installed = frame.enter();
                poll_body(body.as_mut(), cx)
            }
        };
        let output = match polled {
            Poll::Ready(output) => Ok(output),
            Poll::Pending => {
                if this.timer.is_none() {
                    let ends = match frame.held_attempt() {
                        Some(attempt) => attempt.state.facts.ends(),
                        None => Instant::now(),
                    };
                    this.timer.set(Some(tokio::time::sleep_until(ends)));
                }
                let Some(timer) = this.timer.as_pin_mut() else {
                    return Poll::Pending;
                };
                // Unconstrained by the task's cooperative budget: an attempt that always used
                // the budget up would otherwise never see its timer fire (tokio's `Timeout`
                // does the same once the inner future has used the budget up).
                match Pin::new(&mut tokio::task::unconstrained(timer)).poll(cx) {
                    Poll::Ready(()) => Err(TimedOut),
                    Poll::Pending => return Poll::Pending,
                }
            }
        };
        let attempt = frame.take_attempt();
        let opened = frame.take_operation();
        Poll::Ready(
            call.started()
                .end_attempt(output, attempt, opened, std::mem::take(this.pass)),
        )
    }
}

/// The maker of the attempt's future, which is made once.
#[inline]
fn take_make<M, Fut>(body: Pin<&mut Body<M, Fut>>) -> M {
    match body.project() {
        BodyProj::Unmade { make } => match make.take() {
            Some(make) => make,
            None => unreachable!("the attempt's future is made once"),
        },
        BodyProj::Made { .. } => unreachable!("the attempt's future is made once"),
    }
}

/// Polls the attempt's future, made already.
#[inline]
fn poll_body<M, Fut: Future>(
    body: Pin<&mut Body<M, Fut>>,
    cx: &mut Context<'_>,
) -> Poll<Fut::Output> {
    match body.project() {
        BodyProj::Made { fut } => fut.poll(cx),
        BodyProj::Unmade { .. } => unreachable!("made before it is polled"),
    }
}
