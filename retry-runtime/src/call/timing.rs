//! The call's clock: when it started and must end, how many attempts it has started, and when
//! the last one was admitted and is cut.

use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::Attempt;
use crate::window::Tick;

/// When the call and its last attempt run.
#[derive(Debug)]
pub(super) struct Timing {
    /// When the call must be over.
    deadline: Instant,
    /// The latest an attempt may start: the upstream's minimum attempt budget before the
    /// deadline (`None` when that is before any instant the clock can hold: no attempt has
    /// time). Fixed with the deadline, so an attempt's check is two comparisons.
    latest_start: Option<Instant>,
    /// When the call started; its first attempt starts then too (one clock read per call).
    created: Instant,
    /// `created` on the clocks of the upstream's windows: the budget counts the call then, and
    /// the breaker a first attempt that ended in its first poll.
    created_tick: Tick,
    /// Attempts started so far.
    started: u32,
    /// When the last attempt was admitted.
    last_started: Instant,
    /// When the last attempt was to be cut (for its timeout error).
    last_ends: Instant,
}

impl Timing {
    /// A call that started at `now` (`tick` on the windows' clock) and ends by `deadline`; an
    /// attempt needs `min_attempt_budget` before the deadline.
    pub(super) fn new(
        now: Instant,
        tick: Tick,
        deadline: Instant,
        min_attempt_budget: Duration,
    ) -> Self {
        Timing {
            deadline,
            latest_start: deadline.checked_sub(min_attempt_budget),
            created: now,
            created_tick: tick,
            started: 0,
            last_started: now,
            last_ends: now,
        }
    }

    /// When the call must be over.
    #[inline]
    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Attempts started so far.
    #[inline]
    pub(super) fn attempts(&self) -> u32 {
        self.started
    }

    /// When the next attempt would start: when the call did, for its first (no clock read),
    /// else now.
    #[inline]
    pub(super) fn next_start(&self) -> Instant {
        match self.started {
            0 => self.created,
            _ => Instant::now(),
        }
    }

    /// `at` on the windows' clock, when the call already knows it: `at` is when it started.
    #[inline]
    pub(super) fn known_tick(&self, at: Instant) -> Option<Tick> {
        (at == self.created).then_some(self.created_tick)
    }

    /// Whether an attempt starting at `now` has time: the minimum attempt budget fits before
    /// the deadline (compared as instants: no duration is computed).
    #[inline]
    pub(super) fn has_time_at(&self, now: Instant) -> bool {
        now < self.deadline && self.latest_start.is_some_and(|latest| now <= latest)
    }

    /// The latest an attempt may start: the minimum attempt budget before the deadline (the
    /// deadline itself when no instant is that early).
    #[inline]
    pub(super) fn latest_start(&self) -> Instant {
        self.latest_start.unwrap_or(self.deadline)
    }

    /// When an attempt admitted at `started` is cut: `timeout` later, never past the deadline.
    #[inline]
    pub(super) fn ends(&self, started: Instant, timeout: Duration) -> Instant {
        Attempt::ends_at(started, timeout, self.deadline)
    }

    /// Counts an attempt starting: its number.
    #[inline]
    pub(super) fn begin(&mut self) -> u32 {
        self.started += 1;
        self.started
    }

    /// The attempt counted last did not begin after all.
    #[inline]
    pub(super) fn not_begun(&mut self) {
        self.started -= 1;
    }

    /// The attempt under way was admitted at `started` and is cut at `ends`.
    #[inline]
    pub(super) fn run(&mut self, started: Instant, ends: Instant) {
        (self.last_started, self.last_ends) = (started, ends);
    }

    /// When the last attempt was admitted.
    #[inline]
    pub(super) fn last_started(&self) -> Instant {
        self.last_started
    }

    /// The timeout the last attempt had: from its admission to its cut.
    #[inline]
    pub(super) fn last_timeout(&self) -> Duration {
        self.last_ends.saturating_duration_since(self.last_started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(deadline_in: Duration) -> (Instant, Timing) {
        let now = Instant::now();
        let min = Duration::from_millis(40);
        let tick = Tick::at(now, now);
        (now, Timing::new(now, tick, now + deadline_in, min))
    }

    #[test]
    fn the_first_attempt_starts_when_the_call_did_and_knows_its_tick() {
        let (now, mut timing) = timing(Duration::from_secs(1));
        assert_eq!(timing.next_start(), now);
        assert!(timing.known_tick(now).is_some());
        assert!(timing.known_tick(now + Duration::from_millis(1)).is_none());
        assert_eq!(timing.begin(), 1);
        assert_eq!(timing.begin(), 2);
        timing.not_begun();
        assert_eq!(timing.attempts(), 1);
    }

    #[test]
    fn an_attempt_needs_its_minimum_budget_before_the_deadline() {
        let (now, timing) = timing(Duration::from_millis(100));
        assert!(
            timing.has_time_at(now + Duration::from_millis(60)),
            "40 ms are left"
        );
        assert!(!timing.has_time_at(now + Duration::from_millis(61)));
        assert_eq!(timing.latest_start(), now + Duration::from_millis(60));
        // No budget asked for: any instant before the deadline, not the deadline itself.
        let none = Timing::new(
            now,
            Tick::at(now, now),
            now + Duration::from_millis(100),
            Duration::ZERO,
        );
        assert!(none.has_time_at(now + Duration::from_millis(99)));
        assert!(!none.has_time_at(now + Duration::from_millis(100)));
        // A budget longer than the clock reaches back: no attempt has time.
        let far = Timing::new(
            now,
            Tick::at(now, now),
            now + Duration::from_millis(100),
            Duration::MAX,
        );
        assert!(!far.has_time_at(now));
        assert_eq!(far.latest_start(), far.deadline());
    }

    #[test]
    fn an_attempt_is_cut_by_its_timeout_or_the_deadline() {
        let (now, mut timing) = timing(Duration::from_millis(100));
        assert_eq!(
            timing.ends(now, Duration::from_millis(30)),
            now + Duration::from_millis(30)
        );
        let ends = timing.ends(now, Duration::from_secs(5));
        assert_eq!(ends, now + Duration::from_millis(100));
        timing.run(now, ends);
        assert_eq!(timing.last_timeout(), Duration::from_millis(100));
    }
}
