//! How long the upstream takes to answer now, against how long it takes when nothing queues:
//! the signal held work yields to (see "Work nobody waits for goes last" in the
//! [module docs](super#letting-go)).
//!
//! Timeouts say an upstream queues only once its queue has outgrown the attempts' timeout, and
//! by then the calls somebody waits for are failing. Queueing says it as the queue forms: every
//! answer waits behind what is queued, so the time the answers take above the fastest answer
//! of the recent past is the time spent queued. This is how a scavenger transport finds the
//! queue it must not add to (LEDBAT, RFC 6817, section 2.4): a base delay (the minimum over a
//! long history, kept in a few buckets so that it follows a path that changed) against a
//! current delay (the minimum of the last few samples, so that one slow answer is not taken
//! for a queue).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::window::Tick;

/// How many accepted answers the current latency is the fastest of.
const RECENT: usize = 4;

/// The least queueing delay that counts as a queue, whatever the base: an answer a few
/// milliseconds late is the client's or the network's jitter, not the upstream's queue.
const LEAST_QUEUE_DELAY: Duration = Duration::from_millis(10);

/// Bits of a packed sample that hold its microseconds (about 12 days); the bits above hold
/// the span it belongs to.
const MICROS_BITS: u32 = 40;
const MICROS_MASK: u64 = (1 << MICROS_BITS) - 1;

/// The latencies of the upstream's accepted answers, as far as the throttle needs them.
/// Lock-free: relaxed stores, a compare-and-swap for the base; a race loses a sample, never
/// more.
#[derive(Debug)]
pub(super) struct Queueing {
    /// How long a bucket of the base lasts.
    span: u64,
    /// The last [`RECENT`] accepted answers: when each ended (tick nanoseconds, plus one; 0
    /// for none yet), and what it took (microseconds), in `recent_micros`.
    recent_at: [AtomicU64; RECENT],
    recent_micros: [AtomicU64; RECENT],
    next: AtomicU64,
    /// The fastest accepted answer of each of the last two spans: the span's number plus one
    /// above [`MICROS_BITS`], its microseconds below; 0 for none.
    base: [AtomicU64; 2],
}

impl Queueing {
    /// Latencies whose base remembers the fastest answer of the last one to two `span`s, and
    /// whose current latency counts answers of the last `recent` (the throttle's window).
    pub(super) fn new(span: Duration) -> Self {
        Queueing {
            span: u64::try_from(span.as_nanos()).unwrap_or(u64::MAX).max(1),
            recent_at: Default::default(),
            recent_micros: Default::default(),
            next: AtomicU64::new(0),
            base: Default::default(),
        }
    }

    /// Notes an accepted answer that took `took` and came at `tick`.
    #[inline]
    pub(super) fn note(&self, took: Duration, tick: Tick) {
        // Seconds and microseconds apart: no 128-bit division on the answer's path.
        let micros = took
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(took.subsec_micros()))
            .min(MICROS_MASK);
        let i = (self.next.fetch_add(1, Ordering::Relaxed) % RECENT as u64) as usize;
        self.recent_micros[i].store(micros, Ordering::Relaxed);
        self.recent_at[i].store(tick.nanos().saturating_add(1), Ordering::Relaxed);
        let span = tick.nanos() / self.span + 1;
        let slot = &self.base[(span % 2) as usize];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let kept = match current >> MICROS_BITS == span {
                true if current & MICROS_MASK <= micros => return,
                _ => (span << MICROS_BITS) | micros,
            };
            match slot.compare_exchange_weak(current, kept, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Whether the upstream queues at `tick`: the fastest of its last few accepted answers,
    /// those that came within `recent` before `tick`, took longer than its base latency by more
    /// than the base (and than [`LEAST_QUEUE_DELAY`]). So an upstream whose answers take more than
    /// twice what they take when nothing queues is queueing: an answer waited behind at
    /// least as much work as its own. No recent answer, or no base, is no sign of a queue; at
    /// a call a second the window holds one answer, which then decides alone.
    pub(super) fn queues_at(&self, tick: Tick, recent: Duration) -> bool {
        let (Some(current), Some(base)) = (self.current(tick, recent), self.base(tick)) else {
            return false;
        };
        current.saturating_sub(base) > base.max(LEAST_QUEUE_DELAY)
    }

    /// The fastest of the last [`RECENT`] accepted answers that came within `recent` of
    /// `tick`.
    fn current(&self, tick: Tick, recent: Duration) -> Option<Duration> {
        let since = tick
            .nanos()
            .saturating_sub(u64::try_from(recent.as_nanos()).unwrap_or(u64::MAX));
        (0..RECENT)
            .filter(|&i| {
                let at = self.recent_at[i].load(Ordering::Relaxed);
                at != 0 && at > since
            })
            .map(|i| self.recent_micros[i].load(Ordering::Relaxed))
            .min()
            .map(Duration::from_micros)
    }

    /// The fastest accepted answer of this span and the one before, at `tick`.
    fn base(&self, tick: Tick) -> Option<Duration> {
        let span = tick.nanos() / self.span + 1;
        self.base
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|&packed| {
                let of = packed >> MICROS_BITS;
                of != 0 && (of == span || of + 1 == span)
            })
            .map(|packed| packed & MICROS_MASK)
            .min()
            .map(Duration::from_micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::time::Instant;

    fn at(origin: Instant, ms: u64) -> Tick {
        Tick::at(origin, origin + Duration::from_millis(ms))
    }

    const WINDOW: Duration = Duration::from_millis(500);

    #[test]
    fn answers_that_take_twice_the_base_are_a_queue() {
        let origin = Instant::now();
        let queueing = Queueing::new(Duration::from_secs(10));
        assert!(!queueing.queues_at(at(origin, 0), WINDOW), "nothing known");
        for ms in [40, 35, 38, 41] {
            queueing.note(Duration::from_millis(ms), at(origin, 100));
        }
        assert!(
            !queueing.queues_at(at(origin, 100), WINDOW),
            "the base itself"
        );
        for ms in [69, 80, 75, 90] {
            queueing.note(Duration::from_millis(ms), at(origin, 200));
        }
        assert!(
            !queueing.queues_at(at(origin, 200), WINDOW),
            "34 ms queued behind a 35 ms base: less than one answer's worth"
        );
        queueing.note(Duration::from_millis(110), at(origin, 300));
        assert!(
            queueing.queues_at(at(origin, 300), WINDOW),
            "the fastest of the last four took 75 ms: 40 ms queued"
        );
        assert!(
            !queueing.queues_at(at(origin, 900), WINDOW),
            "answers older than the window say nothing of now"
        );
    }

    #[test]
    fn one_slow_answer_is_not_a_queue() {
        let origin = Instant::now();
        let queueing = Queueing::new(Duration::from_secs(10));
        for ms in [20, 20, 21, 900] {
            queueing.note(Duration::from_millis(ms), at(origin, 100));
        }
        assert!(!queueing.queues_at(at(origin, 100), WINDOW));
    }

    #[test]
    fn a_fast_upstream_is_allowed_its_jitter() {
        let origin = Instant::now();
        let queueing = Queueing::new(Duration::from_secs(10));
        queueing.note(Duration::from_millis(1), at(origin, 0));
        for _ in 0..RECENT {
            queueing.note(Duration::from_millis(9), at(origin, 100));
        }
        assert!(!queueing.queues_at(at(origin, 100), WINDOW), "8 ms late");
        for _ in 0..RECENT {
            queueing.note(Duration::from_millis(15), at(origin, 200));
        }
        assert!(queueing.queues_at(at(origin, 200), WINDOW), "14 ms late");
    }

    #[test]
    fn the_base_follows_an_upstream_that_became_slower() {
        let origin = Instant::now();
        let queueing = Queueing::new(Duration::from_secs(1));
        queueing.note(Duration::from_millis(10), at(origin, 0));
        for _ in 0..RECENT {
            queueing.note(Duration::from_millis(50), at(origin, 1_500));
        }
        assert!(
            queueing.queues_at(at(origin, 1_500), WINDOW),
            "the fast answer of the span before is remembered"
        );
        for _ in 0..RECENT {
            queueing.note(Duration::from_millis(50), at(origin, 2_500));
        }
        assert!(
            !queueing.queues_at(at(origin, 2_500), WINDOW),
            "two spans later, 50 ms is the base"
        );
    }
}
