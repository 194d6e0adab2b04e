//! When a task whose attempt ended without success runs again, or that it does not: the one
//! decision behind a failed attempt and an expired lease.
//!
//! The decision is taken here, above the store, with the worker's randomness, and the store
//! is handed its result (a due time, or `failed`): so a worker seeded with
//! [`WorkerConfig::with_jitter_seed`](crate::WorkerConfig::with_jitter_seed) draws the same
//! waits on every run, for retries and rescues alike, whatever the backend.

use std::sync::Mutex;
use std::time::Duration;

use retry_runtime::backoff::Backoff;

use crate::clock::Timestamp;

/// The retry schedule and the randomness its jitter draws from.
#[derive(Debug)]
pub(super) struct Schedule {
    backoff: Backoff,
    rng: Mutex<fastrand::Rng>,
}

/// What becomes of a task after an attempt that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Due again at this time.
    RetryAt(Timestamp),
    /// The attempt was the last one allowed: the task fails.
    Fail,
}

impl Schedule {
    /// `backoff`, its jitter drawn from `seed` (from the OS when `None`).
    pub(super) fn new(backoff: Backoff, seed: Option<u64>) -> Self {
        let rng = match seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        Schedule {
            backoff,
            rng: Mutex::new(rng),
        }
    }

    /// After attempt `attempt` of `max_attempts` (counted from 1) ended without success at
    /// `now`: fail when it was the last; otherwise wait the backoff's step for it, or what the
    /// upstream asked for (`retry_after`, at most the backoff's cap) when that is longer.
    pub(super) fn after(
        &self,
        attempt: u32,
        max_attempts: u32,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Next {
        if attempt >= max_attempts {
            return Next::Fail;
        }
        let asked = retry_after
            .unwrap_or_default()
            .min(self.backoff.max_backoff);
        Next::RetryAt(now.saturating_add(self.draw(attempt).max(asked)))
    }

    /// The backoff's wait after failed attempt `attempt`, its jitter drawn now.
    fn draw(&self, attempt: u32) -> Duration {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.backoff.delay(attempt, Duration::ZERO, &mut rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_runtime::backoff::Jitter;

    const NOW: Timestamp = Timestamp::from_unix_millis(1_000_000);

    fn backoff() -> Backoff {
        Backoff::new()
            .with_initial(Duration::from_secs(2))
            .with_max_backoff(Duration::from_secs(60))
            .with_jitter(Jitter::Equal)
    }

    fn times(seed: u64) -> Vec<Next> {
        let schedule = Schedule::new(backoff(), Some(seed));
        (1..=5).map(|n| schedule.after(n, 10, None, NOW)).collect()
    }

    #[test]
    fn the_same_seed_draws_the_same_times() {
        assert_eq!(times(7), times(7));
        assert_ne!(times(7), times(8));
    }

    #[test]
    fn the_last_attempt_fails() {
        let schedule = Schedule::new(backoff(), Some(1));
        assert_eq!(schedule.after(3, 3, None, NOW), Next::Fail);
        assert_eq!(schedule.after(4, 3, None, NOW), Next::Fail);
        assert!(matches!(schedule.after(2, 3, None, NOW), Next::RetryAt(_)));
    }

    #[test]
    fn a_longer_retry_after_wins_up_to_the_cap() {
        let schedule = Schedule::new(backoff().with_jitter(Jitter::None), None);
        let at = |after| match schedule.after(1, 10, Some(after), NOW) {
            Next::RetryAt(at) => at.since(NOW),
            Next::Fail => panic!("attempt 1 of 10 is retried"),
        };
        assert_eq!(at(Duration::from_millis(10)), Duration::from_secs(2));
        assert_eq!(at(Duration::from_secs(30)), Duration::from_secs(30));
        assert_eq!(at(Duration::from_secs(3_600)), Duration::from_secs(60));
    }
}
