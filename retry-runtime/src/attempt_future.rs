//! One attempt's future: the attempt's body polled inside its [`Frame`] (the attempt and its
//! call's scope installed) and the attempt's span, cut when the attempt's time is up.
//!
//! The timer is armed the first time the body waits, so an attempt that completes in its first
//! poll never touches the timer wheel. A call that has backed off lends its backoff timer to
//! its next attempts: one timer, reset, instead of one made and dropped per attempt.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::ambient::Frame;
use crate::replay::Replayability;
use crate::scope::Operation;

/// The attempt's time ran out before its body completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// How an attempt ended, with what it left for its call.
#[derive(Debug)]
pub(crate) struct Ended<T> {
    /// The body's output, or [`TimedOut`].
    pub(crate) output: Result<T, TimedOut>,
    /// The call's own scope, if something inside the attempt opened it.
    pub(crate) opened: Option<Operation>,
    /// The weakest body replayability the attempt reported.
    pub(crate) reported: Replayability,
    /// Whether the body waited at least once (so its end is not its start).
    pub(crate) waited: bool,
    /// The attempt's span, handed back to record the outcome on.
    pub(crate) span: tracing::Span,
}

pin_project_lite::pin_project! {
    /// See the module docs.
    pub(crate) struct AttemptFuture<'t, F> {
        frame: Frame,
        ends: Instant,
        // The call's backoff timer, lent to this attempt; `armed` once reset to `ends`.
        lent: Option<Pin<&'t mut Sleep>>,
        armed: bool,
        // The attempt's own timer, when none is lent.
        #[pin]
        own: Option<Sleep>,
        #[pin]
        body: F,
    }
}

impl<'t, F> AttemptFuture<'t, F> {
    /// Polls `body` inside `frame` and its attempt's span until it completes or `ends` passes,
    /// timed by `lent` (reset to `ends` the first time the body waits) or by a timer of its own.
    pub(crate) fn new(
        frame: Frame,
        ends: Instant,
        lent: Option<Pin<&'t mut Sleep>>,
        body: F,
    ) -> Self {
        AttemptFuture {
            frame,
            ends,
            lent,
            armed: false,
            own: None,
            body,
        }
    }
}

impl<F: Future> Future for AttemptFuture<'_, F> {
    type Output = Ended<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let polled = {
            let _span = this.frame.span().enter();
            let body = this.body;
            this.frame.run(|| body.poll(cx))
        };
        let output = match polled {
            Poll::Ready(output) => Ok(output),
            Poll::Pending => {
                let timer = match this.lent {
                    Some(lent) => {
                        if !*this.armed {
                            lent.as_mut().reset(*this.ends);
                            *this.armed = true;
                        }
                        lent.as_mut()
                    }
                    None => {
                        if this.own.is_none() {
                            this.own.set(Some(tokio::time::sleep_until(*this.ends)));
                        }
                        let Some(own) = this.own.as_mut().as_pin_mut() else {
                            return Poll::Pending;
                        };
                        own
                    }
                };
                // Unconstrained by the task's cooperative budget: a body that always used the
                // budget up would otherwise never see its timer fire (tokio's `Timeout` does the
                // same once the inner future has used the budget up).
                match Pin::new(&mut tokio::task::unconstrained(timer)).poll(cx) {
                    Poll::Ready(()) => Err(TimedOut),
                    Poll::Pending => return Poll::Pending,
                }
            }
        };
        Poll::Ready(Ended {
            output,
            opened: this.frame.take_operation(),
            reported: this.frame.reported(),
            waited: *this.armed || this.own.is_some(),
            span: this.frame.take_span(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attempt::Attempt;
    use crate::scope::Installs;
    use std::time::Duration;

    fn frame() -> Frame {
        let scope = Operation::root(crate::scope::OpName::Static("call"), None, None);
        Frame::attempt(crate::attempt::tests::attempt(), Installs::Operation(scope))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_completes_at_once_never_waits_and_sees_its_attempt() {
        let ends = Instant::now() + Duration::from_millis(10);
        let body = async {
            Attempt::report_body(Replayability::OneShot);
            Attempt::current().map(|a| a.number())
        };
        let ended = AttemptFuture::new(frame(), ends, None, body).await;
        assert_eq!(ended.output, Ok(Some(1)));
        assert!(!ended.waited);
        assert_eq!(ended.reported, Replayability::OneShot);
        assert!(Attempt::current().is_none(), "nothing left installed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_outlasts_its_time_is_cut_exactly_then() {
        let start = Instant::now();
        let ends = start + Duration::from_millis(10);
        let body = tokio::time::sleep(Duration::from_secs(1));
        let ended = AttemptFuture::new(frame(), ends, None, body).await;
        assert_eq!(ended.output, Err(TimedOut));
        assert!(ended.waited);
        assert_eq!(Instant::now(), ends);
    }
}
