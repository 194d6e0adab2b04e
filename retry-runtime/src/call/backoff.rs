//! The backoff between attempts: one timer per call, made at the first retry and reset for the
//! next ones (and lent to the attempts after it as their timeout), woken at once when shutdown
//! starts; and the delay slept last, which the next one grows from.
//!
//! The timer and the call's watch on the shutdown switch live in the future that drives the
//! call, pinned there beside it ([`BackoffSlot`]): a call that retries allocates nothing for
//! them, registers with the switch once however many times it backs off, and a call that never
//! retries makes neither.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};

use crate::deadline::deadline_after;
use crate::drain::Drain;

pin_project_lite::pin_project! {
    /// Where a call's backoff waits: its timer and its watch on the shutdown switch, both made
    /// at its first backoff and kept until the call ends. The future driving the call pins one
    /// beside it (`std::pin::pin!(BackoffSlot::new())`) and lends it to
    /// [`Call::new`](super::Call::new).
    #[derive(Debug, Default)]
    pub struct BackoffSlot {
        #[pin]
        waits: Option<Waits>,
    }
}

pin_project_lite::pin_project! {
    /// What a backoff waits on.
    #[derive(Debug)]
    struct Waits {
        #[pin]
        timer: Sleep,
        #[pin]
        shutdown: OwnedNotified,
    }
}

impl BackoffSlot {
    /// An empty slot.
    pub const fn new() -> Self {
        BackoffSlot { waits: None }
    }
}

/// Shutdown started while waiting.
pub(super) struct Drained;

/// The call's backoff timer and its last delay.
#[derive(Debug)]
pub(super) struct Backoff<'t> {
    /// The timer and the shutdown watch, in the slot the driving future pinned.
    slot: Pin<&'t mut BackoffSlot>,
    /// The delay before the last retry.
    previous: Duration,
}

impl<'t> Backoff<'t> {
    /// A call's backoff, waiting in `slot` (an empty one).
    pub(super) fn new(slot: Pin<&'t mut BackoffSlot>) -> Self {
        Backoff {
            slot,
            previous: Duration::ZERO,
        }
    }

    /// Sleeps `delay` from `from`, or less if `drain` starts meanwhile (`Err`). `drain` is the
    /// same switch at every backoff of a call (its registry's).
    pub(super) async fn sleep(
        &mut self,
        drain: &Drain,
        from: Instant,
        delay: Duration,
    ) -> Result<(), Drained> {
        let until = deadline_after(from, delay);
        let mut waits = self.slot.as_mut().project().waits;
        match waits.as_mut().as_pin_mut() {
            Some(waits) => waits.project().timer.reset(until),
            // The watch is made before the flag is read: it receives every start from its
            // making on, polled or not, so a shutdown that starts between the two still wakes
            // it. Kept for the call's next backoffs, it stays registered with the switch in
            // between (a shutdown then wakes the call's task once, mid-attempt, for nothing).
            None => waits.set(Some(Waits {
                timer: tokio::time::sleep_until(until),
                shutdown: drain.watch(),
            })),
        }
        if drain.is_draining() {
            return Err(Drained);
        }
        // Filled above; were it empty, there would be nothing to wait for.
        let Some(waits) = waits.as_pin_mut() else {
            return Ok(());
        };
        let mut waits = waits.project();
        // The timer first: a backoff that is over is over, whatever the switch says meanwhile;
        // the flag is read once more after it, so a shutdown that started meanwhile still ends
        // the call before another attempt.
        let started = poll_fn(|cx| {
            if waits.timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            waits.shutdown.as_mut().poll(cx).map(|()| true)
        })
        .await;
        match started || drain.is_draining() {
            true => Err(Drained),
            false => Ok(()),
        }
    }

    /// The timer, lent to an attempt as its timeout (none before the first retry).
    #[inline]
    pub(super) fn lend(&mut self) -> Option<Pin<&mut Sleep>> {
        let waits = self.slot.as_mut().project().waits.as_pin_mut()?;
        Some(waits.project().timer)
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
        let slot = std::pin::pin!(BackoffSlot::new());
        let mut backoff = Backoff::new(slot);
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

    /// The watch made at the first backoff serves the later ones: a shutdown that starts in the
    /// middle of the second backoff ends it then, and one that started between two backoffs
    /// ends the next at once.
    #[tokio::test(start_paused = true)]
    async fn the_kept_watch_ends_a_later_backoff_when_shutdown_starts() {
        let drain = Drain::new();
        let slot = std::pin::pin!(BackoffSlot::new());
        let mut backoff = Backoff::new(slot);
        let first = backoff
            .sleep(&drain, Instant::now(), Duration::from_millis(10))
            .await;
        assert!(first.is_ok());
        let from = Instant::now();
        let starter = {
            let drain = drain.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                drain.start();
            })
        };
        let second = backoff.sleep(&drain, from, Duration::from_secs(60)).await;
        assert!(second.is_err(), "woken by the shutdown");
        assert_eq!(Instant::now(), from + Duration::from_secs(5));
        starter.await.unwrap();
        let third = backoff
            .sleep(&drain, Instant::now(), Duration::from_secs(60))
            .await;
        assert!(third.is_err());
        assert_eq!(Instant::now(), from + Duration::from_secs(5), "at once");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait() {
        let drain = Drain::new();
        drain.start();
        let slot = std::pin::pin!(BackoffSlot::new());
        let mut backoff = Backoff::new(slot);
        let slept = backoff
            .sleep(&drain, Instant::now(), Duration::from_secs(60))
            .await;
        assert!(slept.is_err());
    }
}
