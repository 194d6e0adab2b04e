//! The durable retry schedule: `base * 2^n`, capped, with equal jitter.
//!
//! After attempt `n` fails (attempts are counted from 1 when claimed), the step is
//! `d = min(base * 2^n, cap)`: 2 s, 4 s, 8 s … with the default 1 s base, and the task waits a
//! random time in `[d / 2, d)` ("equal jitter" in AWS's "Exponential Backoff and Jitter"
//! study). Without jitter, every task failed by one outage (or rescued from one crashed worker)
//! comes due in the same millisecond and hits the recovering upstream together; the study
//! shows jitter spreads such retries and cuts the total work. Equal rather than full jitter:
//! a durable retry should not come back at once, so half the step is kept as a floor.
//!
//! The schedule is computed in Rust, in one place ([`DurableBackoff::wait_after`]), so that the
//! worker and the lease rescuer agree; the randomness is an argument, so tests pass a seeded
//! one. [`DurableJitter::None`] gives the exact steps. Cap the schedule below the upstream's
//! idempotency-key retention ([`DurableBackoff::total_wait`] is its upper bound), or a late
//! retry could be applied as new work.

use std::time::Duration;

/// How the wait after a failed attempt is drawn from its step `d = min(base * 2^n, cap)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DurableJitter {
    /// A random wait in `[d / 2, d)` (the default).
    #[default]
    Equal,
    /// Exactly `d`: every task failed together retries together. For tests and for callers
    /// that spread retries themselves.
    None,
}

/// Exponential backoff between durable attempts.
///
/// # Default
/// - `base`: 1 s (so the first retry waits 1-2 s)
/// - `cap`: 1 h
/// - `jitter`: [`DurableJitter::Equal`]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableBackoff {
    base: Duration,
    cap: Duration,
    jitter: DurableJitter,
}

impl Default for DurableBackoff {
    fn default() -> Self {
        DurableBackoff::new()
    }
}

impl DurableBackoff {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        DurableBackoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
            jitter: DurableJitter::Equal,
        }
    }

    /// Sets the base delay (the step after attempt `n` is `base * 2^n`).
    pub const fn with_base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// Sets the largest step (and so the longest single wait).
    pub const fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// Sets how the wait is drawn from the step.
    pub const fn with_jitter(mut self, jitter: DurableJitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The base delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The largest step.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter.
    pub const fn jitter(&self) -> DurableJitter {
        self.jitter
    }

    /// The step after failed attempt number `attempt` (1-based): `min(base * 2^attempt, cap)`,
    /// the longest the task can wait. Saturates at the cap instead of overflowing.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// The wait after failed attempt number `attempt`, drawn from its step with `random`, a
    /// uniform number in `[0, 1)` (clamped into it): `step / 2 + random * step / 2` with
    /// [`DurableJitter::Equal`], the step with [`DurableJitter::None`].
    pub fn wait_after(&self, attempt: u32, random: f64) -> Duration {
        let step = self.delay_after(attempt);
        match self.jitter {
            DurableJitter::None => step,
            DurableJitter::Equal => {
                let half = step / 2;
                // `NaN` clamps to 0; 1.0 would reach the step itself, so stay below it.
                let r = if random.is_nan() {
                    0.0
                } else {
                    random.clamp(0.0, 1.0)
                };
                let extra = (step - half).mul_f64(r);
                (half + extra).min(step.saturating_sub(Duration::from_nanos(1)).max(half))
            }
        }
    }

    /// The longest total wait before a task that fails every one of `max_attempts` attempts
    /// is failed: the sum of the steps between attempts (jitter only shortens it). Use it to
    /// check the schedule against an upstream's key retention.
    pub fn total_wait(&self, max_attempts: u32) -> Duration {
        (1..max_attempts).fold(Duration::ZERO, |acc, n| {
            acc.saturating_add(self.delay_after(n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steps_double_from_two_seconds_and_cap() {
        let b = DurableBackoff::new().with_cap(Duration::from_secs(60));
        let secs: Vec<u64> = (1..=7).map(|n| b.delay_after(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.delay_after(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn without_jitter_the_wait_is_the_step() {
        let b = DurableBackoff::new().with_jitter(DurableJitter::None);
        assert_eq!(b.wait_after(3, 0.0), Duration::from_secs(8));
        assert_eq!(b.wait_after(3, 0.99), Duration::from_secs(8));
    }

    #[test]
    fn equal_jitter_spans_the_upper_half_of_the_step() {
        let b = DurableBackoff::new();
        assert_eq!(b.wait_after(2, 0.0), Duration::from_secs(2));
        assert_eq!(b.wait_after(2, 0.5), Duration::from_secs(3));
        assert!(b.wait_after(2, 1.0) < Duration::from_secs(4));
        assert_eq!(b.wait_after(2, f64::NAN), Duration::from_secs(2));
        assert_eq!(b.wait_after(2, -3.0), Duration::from_secs(2));
    }

    #[test]
    fn seeded_waits_spread_over_the_range() {
        // One outage fails 1,000 tasks at once: their retries must not come due together.
        let b = DurableBackoff::new();
        let mut rng = fastrand::Rng::with_seed(18);
        let mut waits: Vec<Duration> = (0..1000).map(|_| b.wait_after(4, rng.f64())).collect();
        waits.sort();
        waits.dedup();
        assert!(waits.len() > 900, "only {} distinct waits", waits.len());
        let (lo, hi) = (waits[0], waits[waits.len() - 1]);
        assert!(lo < Duration::from_millis(8_500) && hi > Duration::from_millis(15_500));
    }

    #[test]
    fn total_wait_matches_two_to_the_n_minus_two() {
        let b = DurableBackoff::new().with_cap(Duration::from_secs(u64::MAX / 4));
        assert_eq!(b.total_wait(8), Duration::from_secs(254));
        assert_eq!(b.total_wait(1), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn waits_stay_within_half_the_step_and_the_step(
            base_ms in 0u64..10_000_000,
            cap_ms in 0u64..100_000_000,
            attempt in 0u32..=u32::MAX,
            random in proptest::num::f64::ANY,
        ) {
            let b = DurableBackoff::new()
                .with_base(Duration::from_millis(base_ms))
                .with_cap(Duration::from_millis(cap_ms));
            let step = b.delay_after(attempt);
            prop_assert!(step <= b.cap());
            let wait = b.wait_after(attempt, random);
            prop_assert!(wait >= step / 2, "{wait:?} below half of {step:?}");
            prop_assert!(wait <= step, "{wait:?} above {step:?}");
            prop_assert!(wait < step || step.is_zero());
            prop_assert_eq!(b.with_jitter(DurableJitter::None).wait_after(attempt, random), step);
        }
    }
}
