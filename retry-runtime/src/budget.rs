//! The per-upstream retry budget: retries may add at most a fraction of real traffic.
//!
//! Max attempts bounds one call; a budget bounds the *fleet*. When an upstream fails, every
//! call wants to retry at once; the budget lets retries add at most `ratio` of the calls seen in
//! the last `window`, plus a small floor per second so a quiet service can still retry
//! (Finagle and Linkerd: 20 % + 10/s over 10 s; the SRE book: 10 %).
//!
//! ## Why not `tower::retry::budget::TpsBudget`
//! It was evaluated first. It truncates fractional ratios (`(1.0 / retry_percent) as isize`,
//! tower-rs/tower#857: a 0.3 ratio becomes one retry per 3 calls, 0.33), it panics on
//! out-of-range configuration (`assert!`), and it cannot *peek*: checking whether a token exists
//! withdraws it, while our engine must check the budget at step 2 and spend a token only when
//! a retry really happens (a denied retry is free). This bucket keeps exact milli-token
//! arithmetic, validates instead of panicking, and separates [`RetryBudget::has_token`] from
//! [`RetryBudget::withdraw`].
//!
//! ## How it works
//! Calls and retries are counted in lock-free sliding-window counters (see `window`): a
//! deposit is one CAS and one add, a read one load. A retrying call is deposited once, when it
//! starts, so the budget sees every call as it happens.
//!
//! ## Connection rotation
//! An attempt lost to connection rotation (a GOAWAY with `NO_ERROR`, `REFUSED_STREAM`, a request
//! handed back unsent or dropped by hyper's dispatch task) is retried at once and *for free* (no token, not counted in the attempts)
//! while the upstream makes **progress**: the budget also counts the upstream's successful
//! attempts ([`RetryBudget::record_progress`]), and a call's second and later rotation retries
//! are free only if that count moved since its previous rotation. A server rotating connections
//! serves requests between two rotations; one that turns every request away does not, and its
//! rotations then become ordinary retries: a token each, backoff, the attempt limit. So a
//! rotation storm is stopped by this budget like any other.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::window::{Clock, Counter, Tick};

/// Budget settings of one upstream.
///
/// # Default
/// - `ratio`: 0.2 (retries may add 20 % to the calls of the window)
/// - `min_per_second`: 10
/// - `window`: 10 s
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BudgetConfig {
    /// Retries allowed per call seen in the window (0.2 = one retry per five calls).
    pub ratio: f64,
    /// Retries always allowed per second of window, even with no traffic.
    pub min_per_second: u32,
    /// How long a call counts towards the budget (1 s to 60 s).
    pub window: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig::new()
    }
}

impl BudgetConfig {
    /// The defaults listed on the type.
    pub const fn new() -> Self {
        BudgetConfig {
            ratio: 0.2,
            min_per_second: 10,
            window: Duration::from_secs(10),
        }
    }

    /// Sets the ratio.
    pub const fn with_ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Sets the floor per second.
    pub const fn with_min_per_second(mut self, min_per_second: u32) -> Self {
        self.min_per_second = min_per_second;
        self
    }

    /// Sets the window.
    pub const fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Checks the ranges; the message names the fix.
    pub fn validate(&self) -> Result<(), BudgetConfigError> {
        if !(self.ratio.is_finite() && (0.0..=1000.0).contains(&self.ratio)) {
            return Err(BudgetConfigError(format!(
                "budget ratio {} is outside 0.0..=1000.0: use a fraction of traffic such as 0.2",
                self.ratio
            )));
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(60) {
            return Err(BudgetConfigError(format!(
                "budget window {:?} is outside 1s..=60s: use 10s",
                self.window
            )));
        }
        Ok(())
    }
}

/// A budget configuration out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetConfigError(pub String);

impl fmt::Display for BudgetConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BudgetConfigError {}

/// A moment on a budget's window clock (see [`RetryBudget::moment`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moment(u64);

/// A lock-free retry budget shared by every call to one upstream.
pub struct RetryBudget {
    config: BudgetConfig,
    ratio_milli: u64,
    reserve_milli: u64,
    clock: Clock,
    deposits: Counter,
    withdrawals: Counter,
    progress: AtomicU64,
    /// Set the first time a call asks for `progress` (it saw a rotation): until then no success
    /// needs counting, and the success path only reads this flag instead of writing a line
    /// every thread shares.
    watched: AtomicBool,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("config", &self.config)
            .field("available", &self.available())
            .finish()
    }
}

impl RetryBudget {
    /// A budget with `config`, validated.
    pub fn new(config: BudgetConfig) -> Result<Self, BudgetConfigError> {
        Self::counting_from(config, tokio::time::Instant::now())
    }

    /// A budget whose window counts from `origin` (its registry's: see [`Tick`]).
    pub(crate) fn counting_from(
        config: BudgetConfig,
        origin: tokio::time::Instant,
    ) -> Result<Self, BudgetConfigError> {
        config.validate()?;
        let reserve = u64::from(config.min_per_second).saturating_mul(config.window.as_secs());
        Ok(RetryBudget {
            config,
            ratio_milli: (config.ratio * 1000.0).round() as u64,
            reserve_milli: reserve.saturating_mul(1000),
            clock: Clock::new(config.window, origin),
            deposits: Counter::default(),
            withdrawals: Counter::default(),
            progress: AtomicU64::new(0),
            watched: AtomicBool::new(false),
        })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    fn epoch(&self) -> u64 {
        self.clock.epoch()
    }

    /// Records one real call (a first attempt). Calls earn retries.
    pub fn deposit(&self) {
        self.deposits.add(self.epoch(), 1);
    }

    /// Records one real call made at `now` (saves a clock read when the caller has one).
    pub fn deposit_at(&self, now: tokio::time::Instant) {
        self.deposits.add(self.clock.epoch_at(now), 1);
    }

    /// Records one real call made at `tick`, on the clock of the budget's origin.
    pub(crate) fn deposit_on(&self, tick: Tick) {
        self.deposits.add(self.clock.epoch_of(tick), 1);
    }

    fn balance_milli(&self, epoch: u64) -> i128 {
        let deposits = self.deposits.sum(epoch);
        let withdrawals = self.withdrawals.sum(epoch);
        i128::from(self.reserve_milli) + i128::from(deposits) * i128::from(self.ratio_milli)
            - i128::from(withdrawals) * 1000
    }

    /// `true` when a retry could be paid for now. Spends nothing.
    pub fn has_token(&self) -> bool {
        self.has_token_at(tokio::time::Instant::now())
    }

    /// [`has_token`](Self::has_token) at `now` (saves a clock read when the caller has one).
    pub fn has_token_at(&self, now: tokio::time::Instant) -> bool {
        self.has_token_in(self.moment(now))
    }

    /// Spends one retry token; `false` (and nothing spent) when the budget is empty.
    pub fn withdraw(&self) -> bool {
        self.withdraw_at(tokio::time::Instant::now())
    }

    /// [`withdraw`](Self::withdraw) at `now`.
    ///
    /// A `now` older than the window the budget already counts (read long before the call)
    /// is counted at the newest time the budget has seen instead: a withdrawal outside the
    /// window would otherwise be dropped by it and granted without being paid for. The
    /// token is then held for a full window from that newer time, never less. One that cannot
    /// be counted even then (the budget holds counts dated later than now) is refused.
    pub fn withdraw_at(&self, now: tokio::time::Instant) -> bool {
        self.withdraw_in(self.moment(now)).is_some()
    }

    /// `now` on the budget's window clock, for a check and a withdrawal made together.
    pub(crate) fn moment(&self, now: tokio::time::Instant) -> Moment {
        Moment(self.clock.epoch_at(now))
    }

    /// The moment of `tick`, read on the budget's origin (its registry's).
    #[inline]
    pub(crate) fn moment_of(&self, tick: Tick) -> Moment {
        Moment(self.clock.epoch_of(tick))
    }

    /// [`has_token`](Self::has_token) at a moment already read.
    pub(crate) fn has_token_in(&self, at: Moment) -> bool {
        self.balance_milli(at.0) >= 1000
    }

    /// [`withdraw`](Self::withdraw) at a moment already read (see
    /// [`withdraw_at`](Self::withdraw_at) for one older than the window): the moment the
    /// token was counted at, to [refund](Self::refund) it, or `None` when none was spent.
    pub(crate) fn withdraw_in(&self, at: Moment) -> Option<Moment> {
        let mut epoch = at.0;
        if !self.withdrawals.add(epoch, 1) {
            // The window moved past `at`: count it at the newest time the budget has seen.
            epoch = self.withdrawals.head().max(self.epoch());
            if !self.withdrawals.add(epoch, 1) {
                // Counts newer still (dated in the future): refused, never granted unpaid.
                return None;
            }
        }
        if self.balance_milli(epoch) >= 0 {
            return Some(Moment(epoch));
        }
        // Lost a race for the last token: give it back.
        self.withdrawals.sub_one(epoch);
        None
    }

    /// Gives back a token [withdrawn](Self::withdraw_in) at `spent` for a retry that did not
    /// happen after all (it waited for admission, and the upstream never let it go). A token
    /// whose moment has left the window is already back.
    pub(crate) fn refund(&self, spent: Moment) {
        self.withdrawals.sub_one(spent.0);
    }

    /// Records that an attempt to the upstream succeeded: the upstream is making progress (see
    /// "Connection rotation" in the module docs). Counted only once a call has asked for the
    /// progress (it saw a rotation); before that, one relaxed load.
    pub fn record_progress(&self) {
        if self.watched.load(Ordering::Relaxed) {
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Successful attempts recorded since a call first asked (only its changes mean anything).
    pub fn progress(&self) -> u64 {
        if !self.watched.load(Ordering::Relaxed) {
            self.watched.store(true, Ordering::Relaxed);
        }
        self.progress.load(Ordering::Relaxed)
    }

    /// Whole retries available now (never negative).
    pub fn available(&self) -> u64 {
        (self.balance_milli(self.epoch()).max(0) / 1000) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn budget(ratio: f64, floor: u32) -> RetryBudget {
        RetryBudget::new(
            BudgetConfig::new()
                .with_ratio(ratio)
                .with_min_per_second(floor),
        )
        .unwrap()
    }

    #[test]
    fn floor_alone_allows_floor_times_window() {
        let b = budget(0.2, 1);
        assert_eq!(b.available(), 10);
        for _ in 0..10 {
            assert!(b.withdraw());
        }
        assert!(!b.has_token());
        assert!(!b.withdraw());
        assert_eq!(b.available(), 0);
    }

    #[test]
    fn fractional_ratios_are_exact() {
        // tower#857: 0.3 must mean 3 retries per 10 calls, not 1 per 3.
        let b = budget(0.3, 0);
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!(b.available(), 30);
    }

    #[test]
    fn has_token_spends_nothing() {
        let b = budget(0.0, 1);
        for _ in 0..100 {
            assert!(b.has_token());
        }
        assert_eq!(b.available(), 10);
    }

    #[test]
    fn invalid_config_is_an_error_not_a_panic() {
        assert!(RetryBudget::new(BudgetConfig::new().with_ratio(-1.0)).is_err());
        assert!(RetryBudget::new(BudgetConfig::new().with_ratio(f64::NAN)).is_err());
        assert!(RetryBudget::new(BudgetConfig::new().with_window(Duration::ZERO)).is_err());
        assert!(
            RetryBudget::new(BudgetConfig::new().with_window(Duration::from_secs(61))).is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_and_withdrawals_expire_after_the_window() {
        let b = budget(1.0, 0);
        for _ in 0..5 {
            b.deposit();
        }
        assert!(b.withdraw());
        assert_eq!(b.available(), 4);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(b.available(), 4, "still inside the window");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(b.available(), 0, "calls older than the window earn nothing");
        b.deposit();
        assert_eq!(b.available(), 1);
    }

    #[test]
    fn concurrent_withdrawals_never_overspend() {
        let b = std::sync::Arc::new(budget(0.0, 2)); // 20 tokens
        let granted: usize = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..100).filter(|_| b.withdraw()).count())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(granted, 20);
        assert_eq!(b.available(), 0);
    }

    proptest! {
        #[test]
        fn balance_never_negative_and_grants_bounded(
            ratio in 0.0f64..2.0, floor in 0u32..5, ops in proptest::collection::vec(any::<bool>(), 0..300)
        ) {
            let b = budget(ratio, floor);
            let (mut calls, mut granted) = (0u64, 0u64);
            for deposit in ops {
                if deposit { b.deposit(); calls += 1; } else if b.withdraw() { granted += 1; }
                prop_assert!(b.balance_milli(b.epoch()) >= 0);
            }
            let bound = u64::from(floor) * 10 + ((calls as f64) * ratio).ceil() as u64;
            prop_assert!(granted <= bound);
        }
    }
}
