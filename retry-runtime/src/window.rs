//! Lock-free sliding-window counters, shared by the retry budget and the circuit breaker.
//!
//! A window is cut into [`SLOTS`] slots. Each slot is one `AtomicU64` holding the slot's epoch
//! (high bits) and its count (low bits), so a stale slot reads as zero and is reset by the first
//! writer of the new epoch: no lock, no background task. A count is one compare-and-swap; a
//! read is [`SLOTS`] loads, whatever the traffic or the number of threads (a retry reads a few
//! counters, so its cost is constant).
//!
//! A count may arrive late: an attempt that completed in its first poll is counted at its start
//! time (the loop reads no clock for it), and one dated otherwise can trail the newest count. A count whose epoch is older than the epoch its slot already
//! holds is outside the window the slot now serves, so it is dropped; it never resets the slot
//! (that would erase every newer count in it).

use std::sync::atomic::{AtomicU64, Ordering};
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

/// The clock of a window: which slot epoch "now" falls in.
#[derive(Debug)]
pub(crate) struct Clock {
    start: Instant,
    slot_nanos: u64,
}

impl Clock {
    pub(crate) fn new(window: Duration) -> Self {
        let slot = (window / SLOTS as u32).max(Duration::from_nanos(1));
        Clock {
            start: Instant::now(),
            slot_nanos: u64::try_from(slot.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch_at(Instant::now())
    }

    /// The epoch of `now` (callers that already read the clock pass it: clock reads are the
    /// largest cost of a call on some virtual machines).
    pub(crate) fn epoch_at(&self, now: Instant) -> u64 {
        // u64 nanoseconds (584 years) keep the hot path off 128-bit division.
        let elapsed = now.saturating_duration_since(self.start);
        let nanos = elapsed
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(elapsed.subsec_nanos()));
        nanos / self.slot_nanos
    }
}

/// A sliding-window counter; see the module docs. Its slots share one cache line.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Counter {
    slots: [AtomicU64; SLOTS],
}

impl Counter {
    fn slot(&self, epoch: u64) -> &AtomicU64 {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// Adds `by` to the count of `epoch`. Returns `false`, counting nothing, when the slot
    /// already holds a newer epoch: the count is outside the window (see the module docs).
    pub(crate) fn add(&self, epoch: u64, by: u64) -> bool {
        let tag = epoch & EPOCH_MASK;
        let slot = self.slot(epoch);
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let held = current >> COUNT_BITS;
            let next = if held == tag {
                pack(
                    tag,
                    (current & COUNT_MASK).saturating_add(by).min(COUNT_MASK),
                )
            } else if is_newer(held, tag) {
                return false;
            } else {
                pack(tag, by)
            };
            match slot.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
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
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// The count of the window ending at `epoch`.
    pub(crate) fn sum(&self, epoch: u64) -> u64 {
        let mut total = 0u64;
        for slot in &self.slots {
            total = total.saturating_add(read(slot, epoch));
        }
        total
    }

    pub(crate) fn clear(&self) {
        for slot in &self.slots {
            slot.store(0, Ordering::Release);
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

/// The slot's count if it belongs to the window ending at `epoch`, else 0.
fn read(slot: &AtomicU64, epoch: u64) -> u64 {
    let v = slot.load(Ordering::Acquire);
    let age = (epoch & EPOCH_MASK).wrapping_sub(v >> COUNT_BITS) & EPOCH_MASK;
    if (age as usize) < SLOTS {
        v & COUNT_MASK
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_expire_after_the_window() {
        let clock = Clock::new(Duration::from_secs(10));
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
