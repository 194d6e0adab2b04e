//! Backoff between attempts: exponential with jitter, never linear or fixed. One type serves
//! the in-memory loop and the durable queue (`retry-durable`'s worker and lease rescue).
//!
//! Linear retry adds load to a system that is already down, and
//! un-jittered exponential backoff synchronises clients into waves. The jitter schemes come
//! from AWS's "Exponential Backoff And Jitter" study; with `step = min(max_backoff, initial *
//! multiplier^(n-1))` before retry `n`:
//!
//! - **full jitter**: `sleep = random(0, step)` (the in-memory default);
//! - **decorrelated jitter**: `sleep = min(max_backoff, random(initial, previous * multiplier))`
//!   (AWS uses a factor of 3; here the upstream's multiplier plays that role);
//! - **equal jitter**: `sleep = random(step / 2, step)`, the durable queue's default: a durable
//!   retry should not come back at once, so half the step is kept as a floor, and the other
//!   half still spreads the tasks one outage failed together;
//! - **none**: `sleep = step`, for tests and for callers that spread retries themselves.
//!
//! The engine waits at least the server's `Retry-After` and never past the remaining deadline.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which jitter scheme spreads retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// `random(0, min(cap, base * multiplier^(n-1)))`: the least total work in AWS's study.
    #[default]
    Full,
    /// `min(cap, random(base, previous * multiplier))`: never below the initial delay.
    Decorrelated,
    /// `random(step / 2, step)`, below the step itself unless it is zero: half the step as a
    /// floor (the durable queue's default).
    Equal,
    /// Exactly the step: everything failed together retries together. For tests and for
    /// callers that spread retries themselves; not offered in configuration files.
    None,
}

impl Jitter {
    /// The configuration name (`"full"`, `"decorrelated"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Jitter::Full => "full",
            Jitter::Decorrelated => "decorrelated",
            Jitter::Equal => "equal",
            Jitter::None => "none",
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Jitter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(Jitter::Full),
            "decorrelated" => Ok(Jitter::Decorrelated),
            other => Err(format!(
                "unknown jitter `{other}`: use \"full\" or \"decorrelated\""
            )),
        }
    }
}

/// Exponential backoff with jitter.
///
/// # Default
/// - `initial`: 100 ms
/// - `multiplier`: 2.0
/// - `max_backoff`: 1 s
/// - `jitter`: [`Jitter::Full`]
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// The base delay before the first retry.
    pub initial: Duration,
    /// Growth per retry; must be above 1 (validated by the registry).
    pub multiplier: f64,
    /// No single delay exceeds this.
    pub max_backoff: Duration,
    /// How the delay is randomised.
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

impl Backoff {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(1),
            jitter: Jitter::Full,
        }
    }

    /// Sets the initial delay.
    pub const fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }

    /// Sets the multiplier.
    pub const fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Sets the cap on one delay.
    pub const fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Sets the jitter scheme.
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The un-jittered ceiling of the delay before retry number `retry` (1-based):
    /// `min(max_backoff, initial * multiplier^(retry-1))`. Saturates instead of overflowing.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(MAX_EXPONENT) as i32;
        let factor = self.multiplier.max(1.0).powi(exp);
        let secs = self.initial.as_secs_f64() * factor;
        let cap = self.max_backoff.as_secs_f64();
        if !secs.is_finite() || secs >= cap {
            return self.max_backoff;
        }
        // Whole nanoseconds below 584 years (nearly always): a multiplication and a cast,
        // where `from_secs_f64` rounds bit by bit.
        let nanos = secs.max(0.0) * 1e9;
        if nanos < u64::MAX as f64 {
            Duration::from_nanos(nanos as u64)
        } else {
            Duration::from_secs_f64(secs)
        }
    }

    /// The jittered delay before retry number `retry` (1-based), given the previous delay
    /// (zero before the first retry; only decorrelated jitter reads it) and a random source.
    pub fn delay(&self, retry: u32, previous: Duration, rng: &mut fastrand::Rng) -> Duration {
        match self.jitter {
            Jitter::Full => uniform(rng, Duration::ZERO, self.ceiling(retry)),
            Jitter::Equal => upper_half(self.ceiling(retry), rng.f64()),
            Jitter::None => self.ceiling(retry),
            Jitter::Decorrelated => {
                let low = self.initial.min(self.max_backoff);
                let grown = previous.max(self.initial).as_secs_f64() * self.multiplier.max(1.0);
                let high = if grown.is_finite() && grown < self.max_backoff.as_secs_f64() {
                    Duration::from_secs_f64(grown)
                } else {
                    self.max_backoff
                };
                uniform(rng, low, high.max(low)).min(self.max_backoff)
            }
        }
    }

    /// The shortest and the longest delay [`delay`](Self::delay) can return before retry number
    /// `retry` (1-based), whatever the previous delay and the random draw: what a test checks a
    /// logged delay against.
    pub fn bounds(&self, retry: u32) -> (Duration, Duration) {
        let step = self.ceiling(retry);
        match self.jitter {
            Jitter::Full => (Duration::ZERO, step),
            Jitter::Equal => (step / 2, step),
            Jitter::None => (step, step),
            Jitter::Decorrelated => (self.initial.min(self.max_backoff), self.max_backoff),
        }
    }

    /// The largest total of `retries` delays this backoff can produce (the in-memory retry
    /// window, without attempt time). Saturates at [`Duration::MAX`].
    ///
    /// At most about a thousand terms are added whatever `retries` is: past the exponent where
    /// [`ceiling`](Self::ceiling) stops growing, every delay is the same, and the rest is one
    /// multiplication.
    pub fn worst_case_total(&self, retries: u32) -> Duration {
        let longest = |r: u32| match self.jitter {
            Jitter::Full | Jitter::Equal | Jitter::None => self.ceiling(r),
            Jitter::Decorrelated => self.ceiling(r + 1).max(self.initial.min(self.max_backoff)),
        };
        // The first retry whose longest delay every later one shares.
        let last_growing = match self.jitter {
            Jitter::Full | Jitter::Equal | Jitter::None => MAX_EXPONENT + 1,
            Jitter::Decorrelated => MAX_EXPONENT,
        };
        let summed = retries.min(last_growing);
        // Saturating: ceilings near `Duration::MAX` given in code must not overflow.
        let head = (1..=summed)
            .map(longest)
            .fold(Duration::ZERO, Duration::saturating_add);
        match retries - summed {
            0 => head,
            rest => head.saturating_add(longest(last_growing).saturating_mul(rest)),
        }
    }
}

/// The largest exponent [`Backoff::ceiling`] raises the multiplier to (any multiplier the
/// registry accepts has passed every cap long before): every later ceiling is the same, which
/// bounds the terms [`Backoff::worst_case_total`] adds one by one.
const MAX_EXPONENT: u32 = 1024;

/// `step / 2 + random * step / 2` for `random` uniform in `[0, 1)` (clamped into it; `NaN` is
/// 0): a wait in the upper half of the step, below the step itself unless it is zero.
fn upper_half(step: Duration, random: f64) -> Duration {
    let half = step / 2;
    let r = if random.is_nan() {
        0.0
    } else {
        random.clamp(0.0, 1.0)
    };
    let extra = (step - half).mul_f64(r);
    (half + extra).min(step.saturating_sub(Duration::from_nanos(1)).max(half))
}

/// A uniformly random duration in `[low, high]`, at nanosecond resolution.
fn uniform(rng: &mut fastrand::Rng, low: Duration, high: Duration) -> Duration {
    if high <= low {
        return low;
    }
    let span = (high - low).as_nanos().min(u64::MAX as u128) as u64;
    low + Duration::from_nanos(rng.u64(0..=span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ceiling_grows_exponentially_and_caps() {
        let b = Backoff::new()
            .with_initial(ms(500))
            .with_max_backoff(Duration::from_secs(2));
        assert_eq!(b.ceiling(1), ms(500));
        assert_eq!(b.ceiling(2), ms(1000));
        assert_eq!(b.ceiling(3), ms(2000));
        assert_eq!(b.ceiling(4), ms(2000));
        assert_eq!(b.ceiling(u32::MAX), ms(2000));
    }

    #[test]
    fn worst_case_total_of_two_retries_adds_both_ceilings() {
        // 500 ms, x2, 3 attempts: 500 + 1000 ms between attempts.
        let b = Backoff::new()
            .with_initial(ms(500))
            .with_max_backoff(Duration::from_secs(5));
        assert_eq!(b.worst_case_total(2), ms(1500));
    }

    /// The sum term by term, as the ceiling is defined: what the closed form must equal.
    fn linear_total(b: &Backoff, retries: u32) -> Duration {
        (1..=retries)
            .map(|r| match b.jitter {
                Jitter::Full | Jitter::Equal | Jitter::None => b.ceiling(r),
                Jitter::Decorrelated => b.ceiling(r + 1).max(b.initial.min(b.max_backoff)),
            })
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// Any number of retries a program may ask about, up to `u32::MAX`, is answered at once
    /// (the term-by-term sum took minutes there) and exactly.
    #[test]
    fn worst_case_total_of_any_number_of_retries_is_exact() {
        let b = Backoff::new()
            .with_initial(ms(500))
            .with_max_backoff(Duration::from_secs(1));
        // 500 ms, then the 1 s cap for every other retry.
        let expect = Duration::from_secs(u64::from(u32::MAX) - 1) + ms(500);
        assert_eq!(b.worst_case_total(u32::MAX), expect);
        let decorrelated = b.with_jitter(Jitter::Decorrelated);
        assert_eq!(
            decorrelated.worst_case_total(u32::MAX),
            Duration::from_secs(u64::from(u32::MAX))
        );
        // A multiplier that never reaches the cap: the initial delay every time.
        let flat = b.with_multiplier(1.0);
        assert_eq!(flat.worst_case_total(u32::MAX), ms(500) * u32::MAX);
        let huge = b
            .with_max_backoff(Duration::MAX)
            .with_initial(Duration::MAX);
        assert_eq!(huge.worst_case_total(u32::MAX), Duration::MAX);
    }

    #[test]
    fn same_seed_same_delays() {
        let b = Backoff::new();
        let mut a = fastrand::Rng::with_seed(7);
        let mut c = fastrand::Rng::with_seed(7);
        for r in 1..6 {
            assert_eq!(
                b.delay(r, Duration::ZERO, &mut a),
                b.delay(r, Duration::ZERO, &mut c)
            );
        }
    }

    /// The durable queue's schedule: steps of 2 s, 4 s, 8 s ... after attempt 1, 2, 3.
    fn durable() -> Backoff {
        Backoff::new()
            .with_initial(Duration::from_secs(2))
            .with_max_backoff(Duration::from_secs(60))
            .with_jitter(Jitter::Equal)
    }

    #[test]
    fn steps_double_from_the_initial_delay_and_cap() {
        let b = durable();
        let secs: Vec<u64> = (1..=7).map(|n| b.ceiling(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn without_jitter_the_delay_is_the_step() {
        let b = durable().with_jitter(Jitter::None);
        let mut rng = fastrand::Rng::with_seed(3);
        assert_eq!(b.delay(3, Duration::ZERO, &mut rng), Duration::from_secs(8));
        assert_eq!(b.delay(3, Duration::ZERO, &mut rng), Duration::from_secs(8));
    }

    #[test]
    fn equal_jitter_spans_the_upper_half_of_the_step() {
        let step = Duration::from_secs(4);
        assert_eq!(upper_half(step, 0.0), Duration::from_secs(2));
        assert_eq!(upper_half(step, 0.5), Duration::from_secs(3));
        assert!(upper_half(step, 1.0) < step);
        assert_eq!(upper_half(step, f64::NAN), Duration::from_secs(2));
        assert_eq!(upper_half(step, -3.0), Duration::from_secs(2));
        assert_eq!(upper_half(Duration::ZERO, 0.7), Duration::ZERO);
    }

    #[test]
    fn equal_jitter_spreads_tasks_failed_together() {
        // One outage fails 1,000 tasks at once: their retries must not come due together.
        let b = durable().with_max_backoff(Duration::from_secs(3600));
        let mut rng = fastrand::Rng::with_seed(18);
        let mut waits: Vec<Duration> = (0..1000)
            .map(|_| b.delay(4, Duration::ZERO, &mut rng))
            .collect();
        waits.sort();
        waits.dedup();
        assert!(waits.len() > 900, "only {} distinct waits", waits.len());
        let (lo, hi) = (waits[0], waits[waits.len() - 1]);
        assert!(lo < Duration::from_millis(8_500) && hi > Duration::from_millis(15_500));
    }

    #[test]
    fn the_worst_case_of_equal_jitter_is_the_sum_of_the_steps() {
        // 2 + 4 + ... + 128 s between 8 attempts: 2^8 - 2.
        let b = durable().with_max_backoff(Duration::from_secs(u64::MAX / 4));
        assert_eq!(b.worst_case_total(7), Duration::from_secs(254));
        assert_eq!(b.worst_case_total(0), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn every_delay_is_within_the_bounds(
            initial_ms in 0u64..5_000,
            multiplier in 1.0f64..10.0,
            max_ms in 0u64..60_000,
            jitter in prop_oneof![
                Just(Jitter::Full),
                Just(Jitter::Decorrelated),
                Just(Jitter::Equal),
                Just(Jitter::None),
            ],
            retry in 1u32..64,
            previous_ms in 0u64..120_000,
            seed in any::<u64>(),
        ) {
            let b = Backoff::new()
                .with_initial(ms(initial_ms))
                .with_multiplier(multiplier)
                .with_max_backoff(ms(max_ms))
                .with_jitter(jitter);
            let (low, high) = b.bounds(retry);
            let delay = b.delay(retry, ms(previous_ms), &mut fastrand::Rng::with_seed(seed));
            prop_assert!(low <= delay && delay <= high, "{delay:?} outside [{low:?}, {high:?}]");
        }

        #[test]
        fn equal_jitter_stays_within_half_the_step_and_the_step(
            seed: u64,
            initial_ms in 0u64..10_000_000,
            cap_ms in 0u64..100_000_000,
            retry in 0u32..=u32::MAX,
        ) {
            let b = Backoff::new()
                .with_initial(ms(initial_ms))
                .with_max_backoff(ms(cap_ms))
                .with_jitter(Jitter::Equal);
            let step = b.ceiling(retry);
            prop_assert!(step <= ms(cap_ms));
            let wait = b.delay(retry, Duration::ZERO, &mut fastrand::Rng::with_seed(seed));
            prop_assert!(wait >= step / 2, "{wait:?} below half of {step:?}");
            prop_assert!(wait < step || step.is_zero(), "{wait:?} not below {step:?}");
            let exact = b.with_jitter(Jitter::None);
            prop_assert_eq!(exact.delay(retry, Duration::ZERO, &mut fastrand::Rng::with_seed(seed)), step);
        }

        #[test]
        fn full_jitter_stays_within_zero_and_ceiling(
            seed: u64, retry in 1u32..40, initial_ms in 1u64..2_000, mult in 1.01f64..10.0, cap_ms in 1u64..10_000
        ) {
            let b = Backoff::new().with_initial(ms(initial_ms)).with_multiplier(mult).with_max_backoff(ms(cap_ms));
            let d = b.delay(retry, Duration::ZERO, &mut fastrand::Rng::with_seed(seed));
            prop_assert!(d <= b.ceiling(retry));
            prop_assert!(d <= ms(cap_ms));
        }

        /// The closed form equals the term-by-term sum, across the exponent the ceiling
        /// stops growing at (1,024), for any multiplier (below 1 and NaN included) and
        /// durations up to `Duration::MAX`.
        #[test]
        fn worst_case_total_equals_the_sum_of_its_ceilings(
            retries in prop_oneof![0u32..8, 1_000u32..1_100, 0u32..3_000],
            initial_ns in prop_oneof![1u64..10_000_000_000, Just(0), Just(u64::MAX)],
            cap_ns in prop_oneof![1u64..10_000_000_000, Just(0), Just(u64::MAX)],
            mult in prop_oneof![1.0f64..1.01, 1.01f64..10.0, Just(0.5), Just(f64::NAN), Just(f64::INFINITY)],
            max_initial: bool,
            decorrelated: bool,
        ) {
            let initial = if max_initial { Duration::MAX } else { Duration::from_nanos(initial_ns) };
            let jitter = if decorrelated { Jitter::Decorrelated } else { Jitter::Full };
            let b = Backoff::new().with_initial(initial).with_multiplier(mult)
                .with_max_backoff(Duration::from_nanos(cap_ns)).with_jitter(jitter);
            prop_assert_eq!(b.worst_case_total(retries), linear_total(&b, retries));
        }

        #[test]
        fn decorrelated_jitter_stays_within_initial_and_cap(
            seed: u64, prev_ms in 0u64..20_000, initial_ms in 1u64..2_000, mult in 1.01f64..10.0, cap_ms in 1u64..10_000
        ) {
            let b = Backoff::new().with_initial(ms(initial_ms)).with_multiplier(mult)
                .with_max_backoff(ms(cap_ms)).with_jitter(Jitter::Decorrelated);
            let d = b.delay(2, ms(prev_ms), &mut fastrand::Rng::with_seed(seed));
            prop_assert!(d <= ms(cap_ms));
            prop_assert!(d >= (ms(initial_ms)).min(ms(cap_ms)));
        }
    }
}
