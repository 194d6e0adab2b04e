//! The durable retry schedule: `base * 2^n`, capped.
//!
//! After attempt `n` fails (attempts are counted from 1 when claimed), the task waits
//! `min(base * 2^n, cap)`: 2 s, 4 s, 8 s … with the default 1 s base. The schedule is deliberately unjittered and computed in Rust, in one place, so
//! that the worker and the lease rescuer agree and tests can assert it exactly; poll intervals
//! and claim batches already spread work between instances. Cap it below the upstream's
//! idempotency-key retention, or a late retry could be applied as new work.

use std::time::Duration;

/// Exponential backoff between durable attempts.
///
/// # Default
/// - `base`: 1 s (so the first retry waits 2 s)
/// - `cap`: 1 h
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableBackoff {
    base: Duration,
    cap: Duration,
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
        }
    }

    /// Sets the base delay (the wait after attempt `n` is `base * 2^n`).
    pub const fn with_base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// Sets the largest single wait.
    pub const fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// The base delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The largest single wait.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The wait after failed attempt number `attempt` (1-based): `min(base * 2^attempt, cap)`.
    /// Saturates at the cap instead of overflowing.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// The total wait before a task that fails every one of `max_attempts` attempts is failed:
    /// the sum of the waits between attempts. Use it to check the schedule against an
    /// upstream's key retention.
    pub fn total_wait(&self, max_attempts: u32) -> Duration {
        (1..max_attempts).fold(Duration::ZERO, |acc, n| {
            acc.saturating_add(self.delay_after(n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_two_seconds_and_caps() {
        let b = DurableBackoff::new().with_cap(Duration::from_secs(60));
        let secs: Vec<u64> = (1..=7).map(|n| b.delay_after(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.delay_after(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn total_wait_matches_two_to_the_n_minus_two() {
        let b = DurableBackoff::new().with_cap(Duration::from_secs(u64::MAX / 4));
        assert_eq!(b.total_wait(8), Duration::from_secs(254));
        assert_eq!(b.total_wait(1), Duration::ZERO);
    }
}
