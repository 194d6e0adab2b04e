//! One attempt's future: the attempt's scope, its timeout and its span in a single `poll`.
//!
//! Written by hand rather than composed (`timeout_at` inside a task-local scope inside
//! `instrument` inside another scope) because every layer of composition moved the attempt's
//! future once more; the copies were the largest cost of a call in the happy-path profile. The
//! timer is created only when the attempt first waits, so an attempt that completes in its
//! first poll never touches the timer wheel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::ambient::{Frame, Installs};
use crate::attempt::Attempt;
use crate::scope::Operation;

/// The attempt's timeout expired before its future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// How an attempt ended.
#[derive(Debug)]
pub(crate) struct Ended<T> {
    /// The attempt's output, or [`TimedOut`].
    pub(crate) output: Result<T, TimedOut>,
    /// The attempt, with what it reported.
    pub(crate) attempt: Option<Attempt>,
    /// The call's own scope, if it was opened (by the attempt or before).
    pub(crate) scope: Option<Operation>,
}

pin_project_lite::pin_project! {
    /// Polls an attempt's future with the attempt (and the call's own operation scope)
    /// installed and its span entered, until it completes or the attempt's timeout expires.
    pub(crate) struct AttemptFuture<F> {
        #[pin]
        fut: F,
        // Created (and the attempt's start read, if nothing read it yet) only if the attempt
        // waits.
        #[pin]
        timer: Option<Sleep>,
        frame: Frame,
        span: tracing::Span,
    }
}

impl<F> AttemptFuture<F> {
    /// `scope` is what the call installs of its own scope. Inlined, so the future is built
    /// where it is pinned rather than moved there.
    #[inline(always)]
    pub(crate) fn new(fut: F, attempt: Attempt, scope: Installs) -> Self {
        AttemptFuture {
            fut,
            timer: None,
            span: attempt.state.facts.span.clone(),
            frame: Frame::attempt(attempt, scope),
        }
    }
}

impl<F: Future> Future for AttemptFuture<F> {
    type Output = Ended<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _span = this.span.enter();
        let had_budget = tokio::task::coop::has_budget_remaining();
        let polled = {
            let _installed = this.frame.enter();
            this.fut.poll(cx)
        };
        if let Poll::Ready(output) = polled {
            return Poll::Ready(Ended {
                output: Ok(output),
                attempt: this.frame.take_attempt(),
                scope: this.frame.take_operation(),
            });
        }
        if this.timer.is_none() {
            let ends = match this.frame.held_attempt() {
                Some(attempt) => attempt.state.facts.ends(),
                None => Instant::now(),
            };
            this.timer.set(Some(tokio::time::sleep_until(ends)));
        }
        let Some(timer) = this.timer.as_pin_mut() else {
            return Poll::Pending;
        };
        // As tokio's `Timeout` does: when the attempt itself used up the task's cooperative
        // budget, the timer is still checked, or an attempt that always exhausts the budget
        // could never time out.
        let fired = if had_budget && !tokio::task::coop::has_budget_remaining() {
            Pin::new(&mut tokio::task::unconstrained(timer)).poll(cx)
        } else {
            timer.poll(cx)
        };
        match fired {
            Poll::Ready(()) => Poll::Ready(Ended {
                output: Err(TimedOut),
                attempt: this.frame.take_attempt(),
                scope: this.frame.take_operation(),
            }),
            Poll::Pending => Poll::Pending,
        }
    }
}
