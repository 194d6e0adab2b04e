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
