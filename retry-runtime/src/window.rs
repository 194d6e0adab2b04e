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
        let next = self.epoch_of(tick).saturating_add(1);
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
mod tests;
