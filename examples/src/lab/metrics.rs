//! What one scenario x design run measured, computed from the load driver's records and the
//! catalog's counters.

use std::time::Duration;

use super::catalog::CatalogCounts;
use super::designs::Design;
use super::load::{OpRecord, Outcome};
use super::scenarios::Scenario;

/// The bin width of the recovery measurement.
pub const RECOVERY_BIN: Duration = Duration::from_millis(250);
/// The success rate a bin must reach to count as recovered.
pub const RECOVERED_AT: f64 = 0.95;

/// The results of one scenario under one design.
#[derive(Debug, Clone)]
pub struct RunMetrics {
    /// The scenario.
    pub scenario: Scenario,
    /// The design.
    pub design: Design,
    /// Operations sent.
    pub ops: usize,
    /// Operations that succeeded.
    pub ok: usize,
    /// Operations reported ambiguous (the write's outcome is unknown, said so).
    pub ambiguous: usize,
    /// Catalog requests per operation, mean.
    pub calls_mean: f64,
    /// Catalog requests per operation, max.
    pub calls_max: u32,
    /// Catalog requests in total.
    pub calls_total: u64,
    /// Latency percentiles (every operation, success or not): p50, p95, p99.
    pub latency: [Duration; 3],
    /// Most requests in flight at the catalog at once.
    pub peak_concurrency: usize,
    /// The catalog's in-flight peak per sampling interval: (seconds from start, peak).
    pub concurrency: Vec<(f64, usize)>,
    /// Time from the fault clearing until every later 250 ms bin of operations succeeds at
    /// 95 % or more (transient scenario only); `Some(None)` when it never does.
    pub recovery: Option<Option<Duration>>,
    /// Writes executed more than once at the catalog.
    pub duplicates: usize,
    /// Writes the user was told failed that the catalog did execute.
    pub failed_but_done: usize,
    /// Histogram of catalog calls per operation: `calls_histogram[n]` operations made n calls.
    pub calls_histogram: Vec<usize>,
}

impl RunMetrics {
    /// Success rate in `[0, 1]`.
    pub fn success_rate(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.ok as f64 / self.ops as f64
        }
    }
}

/// Computes the metrics of a run.
pub fn compute(
    scenario: Scenario,
    design: Design,
    records: &[OpRecord],
    counts: &CatalogCounts,
    concurrency: Vec<(f64, usize)>,
    duration: Duration,
) -> RunMetrics {
    let calls: Vec<u32> = records
        .iter()
        .map(|r| counts.calls.get(&r.id).copied().unwrap_or(0))
        .collect();
    let calls_total: u64 = calls.iter().map(|c| u64::from(*c)).sum();
    let calls_max = calls.iter().copied().max().unwrap_or(0);
    let mut calls_histogram = vec![0; calls_max as usize + 1];
    for c in &calls {
        calls_histogram[*c as usize] += 1;
    }
    let mut latencies: Vec<Duration> = records.iter().map(|r| r.latency).collect();
    latencies.sort();
    let executed = |id: u64| counts.executions.get(&id).copied().unwrap_or(0);
    RunMetrics {
        scenario,
        design,
        ops: records.len(),
        ok: records.iter().filter(|r| r.outcome == Outcome::Ok).count(),
        ambiguous: records
            .iter()
            .filter(|r| r.outcome == Outcome::Ambiguous)
            .count(),
        calls_mean: if records.is_empty() {
            0.0
        } else {
            calls_total as f64 / records.len() as f64
        },
        calls_max,
        calls_total,
        latency: [
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.95),
            percentile(&latencies, 0.99),
        ],
        peak_concurrency: counts.peak,
        concurrency,
        recovery: scenario
            .outage_window(duration)
            .map(|(_, cleared)| recovery(records, cleared, duration)),
        duplicates: records.iter().filter(|r| executed(r.id) > 1).count(),
        failed_but_done: records
            .iter()
            .filter(|r| r.outcome == Outcome::Failed && executed(r.id) > 0)
            .count(),
        calls_histogram,
    }
}

/// The nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// See [`RunMetrics::recovery`]: bins of operations by start time, from the moment the fault
/// cleared to the end of the load.
fn recovery(records: &[OpRecord], cleared: Duration, duration: Duration) -> Option<Duration> {
    let bins = ((duration.saturating_sub(cleared)).as_nanos() / RECOVERY_BIN.as_nanos()) as usize;
    let mut ok = vec![0usize; bins];
    let mut all = vec![0usize; bins];
    for r in records.iter().filter(|r| r.start >= cleared) {
        let b = ((r.start - cleared).as_nanos() / RECOVERY_BIN.as_nanos()) as usize;
        if b < bins {
            all[b] += 1;
            ok[b] += usize::from(r.outcome == Outcome::Ok);
        }
    }
    let good = |b: usize| all[b] == 0 || ok[b] as f64 >= RECOVERED_AT * all[b] as f64;
    // The first bin from which every later bin is good.
    let mut first = bins;
    while first > 0 && good(first - 1) {
        first -= 1;
    }
    (first < bins || bins == 0).then(|| RECOVERY_BIN * first as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: u64, start_ms: u64, outcome: Outcome) -> OpRecord {
        OpRecord {
            id,
            start: Duration::from_millis(start_ms),
            latency: Duration::from_millis(id),
            outcome,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn recovery_is_the_start_of_the_last_good_stretch() {
        let cleared = Duration::from_secs(1);
        let d = Duration::from_secs(3);
        let records = [
            op(1, 1_100, Outcome::Failed),
            op(2, 1_300, Outcome::Failed),
            op(3, 1_600, Outcome::Ok),
            op(4, 2_000, Outcome::Ok),
            op(5, 2_900, Outcome::Ok),
        ];
        assert_eq!(
            recovery(&records, cleared, d),
            Some(Duration::from_millis(500))
        );
        let never = [op(1, 2_900, Outcome::Failed)];
        assert_eq!(recovery(&never, cleared, d), None);
    }
}
