//! The backoff between attempts: one timer per call, made at the first retry and reset for the
//! next ones (and lent to the attempts after it as their timeout), woken at once when shutdown
//! starts; and the delay slept last, which the next one grows from.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::deadline::deadline_after;
use crate::drain::Drain;

/// Shutdown started while waiting.
pub(super) struct Drained;

/// The call's backoff timer and its last delay.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    /// The timer (boxed: a call that never retries carries no timer in its future).
    timer: Option<Pin<Box<Sleep>>>,
    /// The delay before the last retry.
    previous: Duration,
}

impl Backoff {
    /// Sleeps `delay` from `from`, or less if `drain` starts meanwhile (`Err`).
    pub(super) async fn sleep(
        &mut self,
        drain: &Drain,
        from: Instant,
        delay: Duration,
    ) -> Result<(), Drained> {
        let until = deadline_after(from, delay);
        let sleep = match &mut self.timer {
            Some(sleep) => {
                sleep.as_mut().reset(until);
                sleep
            }
            None => self.timer.insert(Box::pin(tokio::time::sleep_until(until))),
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

    /// The timer, lent to an attempt as its timeout (none before the first retry).
    #[inline]
    pub(super) fn lend(&mut self) -> Option<Pin<&mut Sleep>> {
        self.timer.as_mut().map(Pin::as_mut)
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
        let mut backoff = Backoff::default();
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
        let mut backoff = Backoff::default();
        let slept = backoff
            .sleep(&drain, Instant::now(), Duration::from_secs(60))
            .await;
        assert!(slept.is_err());
    }
}
