//! The backoff between attempts: one timer per call, made at the first retry and reset for the
//! next ones (and lent to the attempts after it as their timeout), woken at once when shutdown
//! starts; and the delay slept last, which the next one grows from.
//!
//! The timer lives in the future that drives the call, pinned there beside it ([`TimerSlot`]):
//! a call that retries neither allocates for it nor carries it when it never retries (the slot
//! stays empty).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::deadline::deadline_after;
use crate::drain::Drain;

/// Where a call's backoff timer lives: empty until its first retry. The future driving the
/// call pins one beside it (`std::pin::pin!(TimerSlot::None)`) and lends it to
/// [`Call::new`](super::Call::new).
pub type TimerSlot = Option<Sleep>;

/// Shutdown started while waiting.
pub(super) struct Drained;

/// The call's backoff timer and its last delay.
#[derive(Debug)]
pub(super) struct Backoff<'t> {
    /// The timer, in the slot the driving future pinned.
    timer: Pin<&'t mut TimerSlot>,
    /// The delay before the last retry.
    previous: Duration,
}

impl<'t> Backoff<'t> {
    /// A call's backoff, its timer kept in `timer` (an empty slot).
    pub(super) fn new(timer: Pin<&'t mut TimerSlot>) -> Self {
        Backoff {
            timer,
            previous: Duration::ZERO,
        }
    }

    /// Sleeps `delay` from `from`, or less if `drain` starts meanwhile (`Err`).
    pub(super) async fn sleep(
        &mut self,
        drain: &Drain,
        from: Instant,
        delay: Duration,
    ) -> Result<(), Drained> {
        let until = deadline_after(from, delay);
        match self.timer.as_mut().as_pin_mut() {
            Some(sleep) => sleep.reset(until),
            None => self.timer.set(Some(tokio::time::sleep_until(until))),
        }
        // The slot holds the timer now: polling it is polling the timer.
        let mut timer = self.timer.as_mut();
        let elapsed = poll_fn(move |cx| match timer.as_mut().as_pin_mut() {
            Some(sleep) => sleep.poll(cx),
            None => Poll::Ready(()),
        });
        // The timer first: a backoff that is over never registers with the drain again, and
        // the flag is read once more after it, so a shutdown that started meanwhile still ends
        // the call before another attempt.
        tokio::select! {
            biased;
            () = elapsed => {}
            () = drain.started() => return Err(Drained),
        }
        match drain.is_draining() {
            true => Err(Drained),
            false => Ok(()),
        }
    }

    /// The timer, lent to an attempt as its timeout (none before the first retry).
    #[inline]
    pub(super) fn lend(&mut self) -> Option<Pin<&mut Sleep>> {
        self.timer.as_mut().as_pin_mut()
    }

    /// The delay before the last retry.
    #[inline]
    pub(super) fn previous(&self) -> Duration {
        self.previous
    }

    /// The call retries after `delay` (zero for a retry that went at once).
    #[inline]
    pub(super) fn retried_after(&mut self, delay: Duration) {
        self.previous = delay;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_timer_serves_every_backoff() {
        let drain = Drain::new();
        let timer = std::pin::pin!(TimerSlot::None);
        let mut backoff = Backoff::new(timer);
        assert!(backoff.lend().is_none());
        let from = Instant::now();
        assert!(
            backoff
                .sleep(&drain, from, Duration::from_millis(50))
                .await
                .is_ok()
        );
        assert_eq!(Instant::now(), from + Duration::from_millis(50));
        assert!(backoff.lend().is_some());
        assert!(
            backoff
                .sleep(&drain, Instant::now(), Duration::from_millis(20))
                .await
                .is_ok()
        );
        assert_eq!(Instant::now(), from + Duration::from_millis(70));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let drain = Drain::new();
        drain.start();
        let timer = std::pin::pin!(TimerSlot::None);
        let mut backoff = Backoff::new(timer);
        let slept = backoff
            .sleep(&drain, Instant::now(), Duration::from_secs(60))
            .await;
        assert!(slept.is_err());
    }
}
