//! An upstream's recent attempt latencies, for a hedge delay at a percentile.
//!
//! Bounded memory and a cheap update: a fixed histogram of 100 buckets (four per power of two,
//! from 1 µs to about a minute, so a bucket is at most 25 % wide) for each half of the window,
//! one relaxed atomic increment per recorded latency. When a new half starts, the older half is
//! cleared and reused, so the window always holds the last half and the one before it. A
//! percentile reads the 200 counters; it answers the upper edge of the bucket it falls in (a
//! hedge sent a little late, never early).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Buckets per half: four per power of two of microseconds, up to 2^25 µs (33.5 s) and above.
const BUCKETS: usize = 100;

/// Recent latencies; see the module docs.
#[derive(Debug)]
pub(crate) struct LatencyWindow {
    origin: Instant,
    half: Duration,
    /// Which half of the window (counted in halves since `origin`) is being written.
    epoch: AtomicU64,
    halves: [[AtomicU32; BUCKETS]; 2],
}

/// The bucket of a latency of `micros` microseconds.
fn bucket(micros: u64) -> usize {
    if micros < 4 {
        return micros as usize;
    }
    let exp = 63 - u64::from(micros.leading_zeros());
    let sub = (micros >> (exp - 2)) & 3;
    ((4 * (exp - 1) + sub) as usize).min(BUCKETS - 1)
}

/// The smallest latency (µs) that falls in bucket `index`.
fn lower_edge(index: usize) -> u64 {
    if index < 4 {
        return index as u64;
    }
    let exp = index as u64 / 4 + 1;
    (4 + index as u64 % 4) << (exp - 2)
}

impl LatencyWindow {
    /// An empty window of `window` (two halves), starting `now`.
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        LatencyWindow {
            origin: now,
            half: (window / 2).max(Duration::from_millis(1)),
            epoch: AtomicU64::new(0),
            halves: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))),
        }
    }

    /// Moves to the half `now` falls in, clearing what has left the window; the half to write.
    fn rotate(&self, now: Instant) -> usize {
        let now_epoch = (now.saturating_duration_since(self.origin).as_nanos()
            / self.half.as_nanos().max(1)) as u64;
        let stored = self.epoch.load(Ordering::Acquire);
        if now_epoch > stored
            && self
                .epoch
                .compare_exchange(stored, now_epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // The half now written held latencies two halves old; if more than one half
            // passed without a latency, the other one is stale too.
            let stale: &[usize] = match now_epoch - stored {
                1 => &[(now_epoch % 2) as usize],
                _ => &[0, 1],
            };
            for &h in stale {
                for counter in &self.halves[h] {
                    counter.store(0, Ordering::Relaxed);
                }
            }
        }
        (now_epoch.max(stored) % 2) as usize
    }

    /// Records one attempt's latency, ended `now`.
    pub(crate) fn record(&self, latency: Duration, now: Instant) {
        let half = self.rotate(now);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.halves[half][bucket(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `percentile` (0..100) of the latencies in the window at `now`, or `None` while it
    /// holds fewer than `min_samples`.
    pub(crate) fn percentile(
        &self,
        percentile: f64,
        min_samples: u64,
        now: Instant,
    ) -> Option<Duration> {
        self.rotate(now);
        let counts: [u64; BUCKETS] = std::array::from_fn(|i| {
            u64::from(self.halves[0][i].load(Ordering::Relaxed))
                + u64::from(self.halves[1][i].load(Ordering::Relaxed))
        });
        let total: u64 = counts.iter().sum();
        if total < min_samples.max(1) {
            return None;
        }
        let rank = ((percentile / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = match i + 1 {
                    BUCKETS => lower_edge(i),
                    next => lower_edge(next),
                };
                return Some(Duration::from_micros(upper));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn buckets_are_contiguous_and_at_most_a_quarter_wide() {
        for i in 0..BUCKETS - 1 {
            let (low, high) = (lower_edge(i), lower_edge(i + 1));
            assert!(high > low, "{i}");
            assert_eq!(bucket(low), i);
            assert_eq!(bucket(high - 1), i);
            if low >= 4 {
                assert!(high - low <= low / 4, "{i}: {low}..{high}");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_percentile_follows_the_recorded_latencies() {
        let now = Instant::now();
        let w = LatencyWindow::new(Duration::from_secs(10), now);
        for _ in 0..95 {
            w.record(10 * MS, now);
        }
        assert_eq!(w.percentile(95.0, 100, now), None, "fewer than the minimum");
        for _ in 0..5 {
            w.record(1000 * MS, now);
        }
        // 10 ms falls in [10.24 ms - 2.048 ms ...): the bucket's upper edge, within 25 %.
        let p95 = w.percentile(95.0, 100, now).unwrap();
        assert!(p95 >= 10 * MS && p95 <= 13 * MS, "{p95:?}");
        let p99 = w.percentile(99.0, 100, now).unwrap();
        assert!(p99 >= 1000 * MS && p99 <= 1250 * MS, "{p99:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn old_latencies_leave_the_window() {
        let start = Instant::now();
        let w = LatencyWindow::new(Duration::from_secs(10), start);
        for _ in 0..50 {
            w.record(500 * MS, start);
        }
        // Half a window later both halves count.
        let later = start + Duration::from_secs(6);
        for _ in 0..50 {
            w.record(5 * MS, later);
        }
        let p90 = w.percentile(90.0, 20, later).unwrap();
        assert!(p90 >= 500 * MS, "{p90:?}");
        // A whole window later only the recent half counts.
        let after = start + Duration::from_secs(11);
        let p90 = w.percentile(90.0, 20, after).unwrap();
        assert!(p90 <= 7 * MS, "{p90:?}");
        // Long idle: nothing left.
        assert_eq!(
            w.percentile(90.0, 20, start + Duration::from_secs(60)),
            None
        );
    }
}
