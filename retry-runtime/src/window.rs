//! Lock-free sliding-window counters, shared by the retry budget and the circuit breaker.
//!
//! A window is cut into [`SLOTS`] slots. Each slot is one `AtomicU64` holding the slot's epoch
//! (high bits) and its count (low bits), and the counter keeps the running total of its slots.
//! When time moves past a slot's window, the first caller to notice empties it and takes its
//! count out of the total: no lock, no background task. A count is one compare-and-swap and one
//! add; a read is one load, whatever the traffic, the number of threads or of slots, so a
//! retry's budget and breaker checks cost the same at any rate.
//!
//! A count may arrive late: an attempt that completed in its first poll is counted at its start
//! time (the loop reads no clock for it), and one dated otherwise can trail the newest count. A
//! count whose epoch is older than the epoch its slot already holds is outside the window the
//! slot now serves, so it is dropped; it never resets the slot (that would erase every newer
//! count in it).

use std::ops::Range;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Number of slots a window is divided into.
pub const SLOTS: usize = 10;

/// 32 bits of epoch: at the shortest window the registry accepts (1 s, so 100 ms slots) the tag
/// wraps after 13 years, and "older than the slot" is judged over half of that. 32 bits of count
/// per slot (4 billion) is beyond any call rate.
const EPOCH_BITS: u32 = 32;
const COUNT_BITS: u32 = 64 - EPOCH_BITS;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;

/// A time on the windows' clocks: how long after their origin. Windows that share an origin
/// (an upstream's budget and breaker share their registry's) place one reading each in its own
/// slot, so a call turns the instant it read into a window time once, not once per window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tick {
    /// Nanoseconds since the origin (u64: 584 years, and the hot path stays off 128-bit
    /// division).
    nanos: u64,
    /// The origin, to check in tests that a tick is only read by windows that share it.
    #[cfg(debug_assertions)]
    origin: Instant,
}

impl Tick {
    /// `now` on the clocks that count from `origin` (an instant before it reads as the origin).
    pub(crate) fn at(origin: Instant, now: Instant) -> Tick {
        let elapsed = now.saturating_duration_since(origin);
        Tick {
            nanos: elapsed
                .as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(elapsed.subsec_nanos())),
            #[cfg(debug_assertions)]
            origin,
        }
    }

    /// Nanoseconds since the origin.
    pub(crate) fn nanos(self) -> u64 {
        self.nanos
    }
}

/// The clock of a window: which slot epoch a time falls in.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    slot_nanos: u64,
}

impl Clock {
    /// A clock for `window`, counting from `origin`.
    pub(crate) fn new(window: Duration, origin: Instant) -> Self {
        let slot = (window / SLOTS as u32).max(Duration::from_nanos(1));
        Clock {
            origin,
            slot_nanos: u64::try_from(slot.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The instant its window times count from.
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch_at(Instant::now())
    }

    /// The epoch of `now` (callers that already read the clock pass it: clock reads are the
    /// largest cost of a call on some virtual machines).
    pub(crate) fn epoch_at(&self, now: Instant) -> u64 {
        self.epoch_of(Tick::at(self.origin, now))
    }

    /// The epoch of `tick`, read on a clock with this one's origin.
    pub(crate) fn epoch_of(&self, tick: Tick) -> u64 {
        #[cfg(debug_assertions)]
        debug_assert_eq!(tick.origin, self.origin, "a tick from another origin");
        tick.nanos / self.slot_nanos
    }

    /// The times whose counts are in the window ending at `tick` (their epoch is one of the
    /// window's [`SLOTS`] newest), as nanoseconds since the origin: one division for any number
    /// of counts to check. (Saturating: a window ending 584 years after its origin misses a
    /// count made at its very last nanosecond.)
    pub(crate) fn window_of(&self, tick: Tick) -> Range<u64> {
        #[cfg(debug_assertions)]
        debug_assert_eq!(tick.origin, self.origin, "a tick from another origin");
        let next = (tick.nanos / self.slot_nanos).saturating_add(1);
        let first = next.saturating_sub(SLOTS as u64);
        first.saturating_mul(self.slot_nanos)..next.saturating_mul(self.slot_nanos)
    }
}

/// A sliding-window counter; see the module docs. Its slots, running total and head fill a
/// 128-byte block of their own (two cache lines on x86, which its prefetcher fetches in
/// pairs), so no other counter's writes contend with them.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Counter {
    slots: [AtomicU64; SLOTS],
    /// The sum of the slots' counts. Changed only by whoever wins a slot's compare-and-swap,
    /// by exactly what that swap changed, so it settles on the slots' sum whatever the
    /// interleaving (it may be off by a count in flight for an instant, even below zero).
    total: AtomicI64,
    /// The newest epoch whose window the slots hold: every slot older than its window has
    /// been emptied (or is being emptied by the caller that moved it).
    head: AtomicU64,
}

impl Counter {
    fn slot(&self, epoch: u64) -> &AtomicU64 {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// Moves the window's head to `epoch` if it is behind, emptying the slots of the epochs
    /// it passes (at most [`SLOTS`]): once per slot's worth of time, not per call.
    fn advance(&self, epoch: u64) {
        let head = self.head.load(Ordering::Acquire);
        if head >= epoch {
            return;
        }
        if self
            .head
            .compare_exchange(head, epoch, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another caller moved it: it empties the slots (a read in between may still
            // include counts about to expire).
            return;
        }
        let first = (head + 1).max(epoch.saturating_sub(SLOTS as u64 - 1));
        for passed in first..=epoch {
            self.renew(passed, 0);
        }
    }

    /// Makes `epoch`'s slot hold `epoch` with `count` if it holds an older epoch, taking the
    /// old count out of the total. `false` when the slot already holds `epoch` or a newer one.
    fn renew(&self, epoch: u64, count: u64) -> bool {
        let tag = epoch & EPOCH_MASK;
        let slot = self.slot(epoch);
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let held = current >> COUNT_BITS;
            if held == tag || is_newer(held, tag) {
                return false;
            }
            match slot.compare_exchange_weak(
                current,
                pack(tag, count),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let delta = count as i64 - (current & COUNT_MASK) as i64;
                    self.total.fetch_add(delta, Ordering::AcqRel);
                    return true;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Adds `by` to the count of `epoch`. Returns `false`, counting nothing, when the slot
    /// already holds a newer epoch: the count is outside the window (see the module docs).
    pub(crate) fn add(&self, epoch: u64, by: u64) -> bool {
        self.advance(epoch);
        let tag = epoch & EPOCH_MASK;
        let slot = self.slot(epoch);
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let held = current >> COUNT_BITS;
            if held != tag {
                if is_newer(held, tag) {
                    return false;
                }
                // Older: the head's mover has not emptied it yet; whoever swaps first does.
                if self.renew(epoch, by) {
                    return true;
                }
                current = slot.load(Ordering::Acquire);
                continue;
            }
            let count = current & COUNT_MASK;
            let next = pack(tag, count.saturating_add(by).min(COUNT_MASK));
            match slot.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let added = (next & COUNT_MASK) - count;
                    self.total.fetch_add(added as i64, Ordering::AcqRel);
                    return true;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// The newest epoch whose window the slots hold: a count at it is never dropped (until
    /// time moves a window further).
    pub(crate) fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Takes one back from this epoch's count. A no-op when the epoch counted nothing.
    pub(crate) fn sub_one(&self, epoch: u64) {
        let tag = epoch & EPOCH_MASK;
        let slot = self.slot(epoch);
        let mut current = slot.load(Ordering::Acquire);
        loop {
            if current >> COUNT_BITS != tag || current & COUNT_MASK == 0 {
                return;
            }
            match slot.compare_exchange_weak(
                current,
                current - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.total.fetch_sub(1, Ordering::AcqRel);
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// The count of the window ending at `epoch` (or at a later epoch another caller already
    /// moved the window to): one load, whatever the number of slots.
    #[inline]
    pub(crate) fn sum(&self, epoch: u64) -> u64 {
        self.advance(epoch);
        u64::try_from(self.total.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// Empties every slot: each holds the epoch of the window ending at the head that maps to
    /// it, with no count. (Not epoch 0: the tags wrap, so from epoch 2^31 on a slot tagged 0
    /// would read as newer than every count and drop them all until the tag came round.)
    pub(crate) fn clear(&self) {
        let head = self.head.load(Ordering::Acquire);
        for (index, slot) in self.slots.iter().enumerate() {
            let behind = (head + SLOTS as u64 - index as u64) % SLOTS as u64;
            let old = slot.swap(pack(head.saturating_sub(behind), 0), Ordering::AcqRel);
            // What was there leaves the total with it (a count added meanwhile stays counted).
            self.total
                .fetch_sub((old & COUNT_MASK) as i64, Ordering::AcqRel);
        }
    }
}

/// Whether epoch tag `held` is later than `tag`, judged modulo the tag's width (a tag less than
/// half the range ahead is newer; a slot untouched for that long reads as older and is reset).
fn is_newer(held: u64, tag: u64) -> bool {
    let ahead = held.wrapping_sub(tag) & EPOCH_MASK;
    ahead != 0 && ahead < 1 << (EPOCH_BITS - 1)
}

fn pack(epoch: u64, count: u64) -> u64 {
    ((epoch & EPOCH_MASK) << COUNT_BITS) | (count & COUNT_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[tokio::test(start_paused = true)]
    async fn one_tick_falls_in_each_clocks_own_epoch() {
        let origin = Instant::now();
        let ten = Clock::new(Duration::from_secs(10), origin);
        let one = Clock::new(Duration::from_secs(1), origin);
        tokio::time::advance(Duration::from_millis(2_345)).await;
        let now = Instant::now();
        let tick = Tick::at(origin, now);
        assert_eq!(ten.epoch_of(tick), 2, "1 s slots");
        assert_eq!(one.epoch_of(tick), 23, "100 ms slots");
        assert_eq!(ten.epoch_of(tick), ten.epoch_at(now));
        assert_eq!(one.epoch_of(tick), one.epoch_at(now));
        // An instant before the origin reads as the origin (no panic, no wrap).
        let early = Tick::at(origin, origin - Duration::from_secs(1));
        assert_eq!(one.epoch_of(early), 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a tick from another origin")]
    fn a_tick_read_from_another_origin_is_refused_in_tests() {
        let origin = Instant::now();
        let clock = Clock::new(Duration::from_secs(10), origin);
        clock.epoch_of(Tick::at(origin + Duration::from_secs(1), origin));
    }

    #[tokio::test(start_paused = true)]
    async fn counts_expire_after_the_window() {
        let clock = Clock::new(Duration::from_secs(10), Instant::now());
        let c = Counter::default();
        c.add(clock.epoch(), 3);
        tokio::time::advance(Duration::from_secs(5)).await;
        c.add(clock.epoch(), 2);
        assert_eq!(c.sum(clock.epoch()), 5);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(c.sum(clock.epoch()), 2);
        c.sub_one(clock.epoch());
        assert_eq!(
            c.sum(clock.epoch()),
            2,
            "sub_one in an empty slot is a no-op"
        );
        c.clear();
        assert_eq!(c.sum(clock.epoch()), 0);
    }

    proptest! {
        /// A time is in the window ending at `tick` exactly when its epoch is one of the
        /// window's [`SLOTS`] newest, at any slot length.
        #[test]
        fn the_windows_span_holds_the_times_of_its_epochs(
            slot_ms in 1u64..2_000,
            tick_ms in 0u64..1_000_000,
            // When the count was made, in thousandths of a window from `tick`.
            offset in -2_500i64..500,
        ) {
            let window_ms = slot_ms * SLOTS as u64;
            let counted_ms = tick_ms.saturating_add_signed(offset * window_ms as i64 / 1_000);
            let origin = Instant::now();
            let clock = Clock::new(Duration::from_millis(window_ms), origin);
            let at = |ms: u64| Tick::at(origin, origin + Duration::from_millis(ms));
            let (now, counted) = (clock.epoch_of(at(tick_ms)), clock.epoch_of(at(counted_ms)));
            let by_epoch = counted <= now && now - counted < SLOTS as u64;
            prop_assert_eq!(clock.window_of(at(tick_ms)).contains(&at(counted_ms).nanos()), by_epoch);
        }
    }

    #[test]
    fn a_late_count_never_erases_newer_counts() {
        let c = Counter::default();
        let now = 1_000;
        assert!(c.add(now, 100));
        // An attempt that started a whole window ago lands in the same slot: it is outside the
        // window, so it is dropped instead of resetting the slot to its own epoch.
        assert!(!c.add(now - SLOTS as u64, 1));
        assert_eq!(c.sum(now), 100);
        // Late but inside the window: counted in its own slot.
        assert!(c.add(now - 3, 1));
        assert_eq!(c.sum(now), 101);
        // A slot holding an old epoch is still reset by a newer one.
        assert!(c.add(now + SLOTS as u64, 7));
        assert_eq!(c.sum(now + SLOTS as u64), 7);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Time moves on by this many epochs.
        Pass(u64),
        /// A count this many epochs before the newest one seen (late, or outside the window).
        Add { late: u64, by: u64 },
        /// One taken back from the count this many epochs before the newest.
        Sub { late: u64 },
        /// Every count dropped.
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..25).prop_map(Op::Pass),
            6 => (0u64..SLOTS as u64 + 4, 1u64..5).prop_map(|(late, by)| Op::Add { late, by }),
            4 => (0u64..SLOTS as u64 + 2).prop_map(|late| Op::Sub { late }),
            // Long stretches, so the epochs pass the tags' half range (2^31) and wrap.
            1 => (1u64 << 29..1u64 << 30).prop_map(Op::Pass),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against a model that keeps every count with its epoch: a count is kept exactly when
        /// its epoch is inside the window ending at the newest epoch seen, and the running
        /// total always equals the model's sum of that window.
        #[test]
        fn the_running_total_is_the_windows_sum(ops in proptest::collection::vec(op(), 1..200)) {
            let c = Counter::default();
            let mut now = 0u64;
            let mut model: std::collections::BTreeMap<u64, u64> = Default::default();
            let in_window = |e: u64, now: u64| e + SLOTS as u64 > now;
            for op in ops {
                match op {
                    Op::Pass(n) => now += n,
                    Op::Add { late, by } => {
                        let epoch = now.saturating_sub(late);
                        let kept = c.add(epoch, by);
                        prop_assert_eq!(kept, in_window(epoch, now), "add at {} (newest {})", epoch, now);
                        if kept {
                            *model.entry(epoch).or_default() += by;
                        }
                    }
                    Op::Clear => {
                        c.clear();
                        model.clear();
                    }
                    Op::Sub { late } => {
                        let epoch = now.saturating_sub(late);
                        c.sub_one(epoch);
                        if let Some(n) = model.get_mut(&epoch).filter(|n| **n > 0)
                            && in_window(epoch, now)
                        {
                            *n -= 1;
                        }
                    }
                }
                let expected: u64 = model
                    .iter()
                    .filter(|(e, _)| in_window(**e, now))
                    .map(|(_, n)| n)
                    .sum();
                prop_assert_eq!(c.sum(now), expected);
            }
        }
    }

    #[test]
    fn threads_counting_across_epochs_leave_the_total_equal_to_the_slots() {
        let c = Counter::default();
        std::thread::scope(|scope| {
            for t in 0..8u64 {
                let c = &c;
                scope.spawn(move || {
                    for i in 0..2_000u64 {
                        // Epochs move on while others count, and some counts arrive late.
                        let epoch = i / 50 + (i + t) % 3;
                        c.add(epoch, 1);
                        if i % 7 == 0 {
                            c.sub_one(epoch);
                        }
                        if i % 11 == 0 {
                            c.sum(epoch);
                        }
                    }
                });
            }
        });
        let newest = 2_000 / 50 + 2;
        let slots: u64 = c
            .slots
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|v| (newest & EPOCH_MASK) - (v >> COUNT_BITS) < SLOTS as u64)
            .map(|v| v & COUNT_MASK)
            .sum();
        assert!(slots > 0);
        assert_eq!(c.sum(newest), slots);
    }

    #[test]
    fn a_counter_cleared_past_half_the_tag_range_keeps_counting() {
        let c = Counter::default();
        assert!(c.add(1 << 30, 1));
        let now = (1u64 << 31) + 100;
        assert!(c.add(now, 1));
        c.clear();
        assert_eq!(c.sum(now), 0);
        assert!(c.add(now + 1, 2), "counted after the clear");
        assert!(c.add(now - 3, 1), "late but inside the window: counted");
        assert_eq!(c.sum(now + 1), 3);
    }

    #[test]
    fn newer_is_judged_across_the_tag_wrap() {
        let last = EPOCH_MASK;
        assert!(is_newer(0, last), "0 follows the last tag");
        assert!(!is_newer(last, 0));
        assert!(!is_newer(5, 5));
        assert!(
            !is_newer(0, 1 << (EPOCH_BITS - 1)),
            "half a range away reads as older"
        );
    }

    #[test]
    fn counts_from_many_threads_add_up_and_are_taken_back() {
        let c = Counter::default();
        let epoch = 7;
        const THREADS: usize = 16;
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        c.add(epoch, 1);
                    }
                });
            }
        });
        assert_eq!(c.sum(epoch), (THREADS * 1000) as u64);
        // This thread counted nothing: the count still goes down by one.
        c.sub_one(epoch);
        assert_eq!(c.sum(epoch), (THREADS * 1000 - 1) as u64);
        assert_eq!(
            c.sum(epoch + SLOTS as u64),
            0,
            "a window later, all expired"
        );
    }
}
