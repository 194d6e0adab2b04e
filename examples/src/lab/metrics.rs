//! What one scenario x design x seed run measured, computed from the load driver's records and
//! the catalog's counters, and the same pooled over seeds with its spread ([`Aggregate`]).

use std::time::Duration;

use super::catalog::CatalogCounts;
use super::designs::Design;
use super::load::{OpRecord, Outcome};
use super::scenarios::Scenario;

/// The bin width of the recovery measurement.
pub const RECOVERY_BIN: Duration = Duration::from_millis(250);
/// The success rate a bin must reach to count as recovered.
pub const RECOVERED_AT: f64 = 0.95;

/// How much of the warm-up's end counts as healthy load for [`RunMetrics::healthy_busiest`].
pub const HEALTHY_SPAN: Duration = Duration::from_secs(2);

/// How many bins of operation start times the success-over-time series has.
pub const TIMELINE_BINS: usize = 20;

/// Which run a set of records comes from.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// The scenario.
    pub scenario: Scenario,
    /// The design.
    pub design: Design,
    /// The seed.
    pub seed: u64,
    /// How long the load ran.
    pub duration: Duration,
}

/// The results of one scenario under one design and seed.
#[derive(Debug, Clone)]
pub struct RunMetrics {
    /// The scenario.
    pub scenario: Scenario,
    /// The design.
    pub design: Design,
    /// The seed.
    pub seed: u64,
    /// How long the measured load ran.
    pub duration: Duration,
    /// Operations sent.
    pub ops: usize,
    /// Operations that succeeded.
    pub ok: usize,
    /// Operations reported ambiguous (the write's outcome is unknown, said so).
    pub ambiguous: usize,
    /// Operations the API shed at once because it had its bound of operations in flight
    /// (failed, for the success rate).
    pub shed: usize,
    /// Catalog requests per operation, mean.
    pub calls_mean: f64,
    /// Catalog requests per operation, max.
    pub calls_max: u32,
    /// Catalog requests in total.
    pub calls_total: u64,
    /// Latency percentiles (every operation, success or not): p50, p95, p99, p99.9.
    pub latency: [Duration; 4],
    /// Most requests in flight at the catalog at once.
    pub peak_concurrency: usize,
    /// The catalog's in-flight peak per sampling interval: (seconds from start, peak).
    pub concurrency: Vec<(f64, usize)>,
    /// Time from the fault clearing until every later 250 ms bin of operations succeeds at
    /// 95 % or more (transient scenario only); `Some(None)` when it never does.
    pub recovery: Option<Option<Duration>>,
    /// Writes executed more than once at the catalog.
    pub duplicates: usize,
    /// Catalog requests that arrived while another request of the same operation was being
    /// served (a hedge, or a retry while an abandoned attempt is still served).
    pub overlapping: u64,
    /// Writes the user was told failed that the catalog did execute.
    pub failed_but_done: usize,
    /// Histogram of catalog calls per operation: `calls_histogram[n]` operations made n calls.
    pub calls_histogram: Vec<usize>,
    /// Every operation's latency, sorted (for percentiles pooled over seeds).
    pub latencies: Vec<Duration>,
    /// (succeeded, started) per [`TIMELINE_BINS`]th of the load duration, by start time.
    pub timeline: Vec<(usize, usize)>,
    /// How late the driver started operations against their schedule (p99): the lab's own lag.
    pub lag_p99: Duration,
    /// Calls B's services refused locally (the throttle, or a breaker where configured): the API's on
    /// the middle, the middle's on the catalog.
    pub local_refusals: [usize; 2],
    /// Operations answered "deferred to the durable queue" (202).
    pub deferred: usize,
    /// Operations whose write the catalog executed by the end of the run (after the durable
    /// tier drained): writes completed eventually, whatever the user was told at first.
    pub completed: usize,
    /// Writes the user was told were deferred that the catalog never executed: lost by the
    /// durable tier.
    pub deferred_lost: usize,
    /// The durable queue's outstanding tasks over time: (seconds from start, tasks); empty
    /// without a durable tier.
    pub backlog: Vec<(f64, u64)>,
    /// Time from the fault clearing until the durable backlog was empty (`Some(None)`: it
    /// never was); `None` without a durable tier.
    pub drained_after: Option<Option<Duration>>,
    /// The most catalog requests that arrived in one 250 ms of the healthy load: the last
    /// [`HEALTHY_SPAN`] of the warm-up, and the measured load before the fault.
    pub healthy_busiest: usize,
    /// The most catalog requests that arrived in one 250 ms after the fault cleared (`None`
    /// for a fault that does not clear).
    pub after_busiest: Option<usize>,
    /// Of tenant B's operations started during the fault (`tenant-429`): (succeeded, started).
    pub served_tenant: Option<(usize, usize)>,
    /// The p99 latency of the operations that failed (zero when none did).
    pub failing_p99: Duration,
    /// Operations in flight on average over the second half of the run (the time they spent
    /// in it, over its length): in an outage that lasts, what holding callers costs.
    pub late_in_flight: f64,
    /// Every operation's start, from the start of the load (for [`RunMetrics::started_beyond`]).
    starts: Vec<Duration>,
    /// The scenario's fault window, if it has one.
    fault: Option<(Duration, Duration)>,
}

impl RunMetrics {
    /// Records the durable backlog series, and when it drained after the fault cleared.
    pub fn set_backlog(&mut self, backlog: Vec<(f64, u64)>) {
        if backlog.is_empty() {
            return;
        }
        let cleared = self.fault.map_or(0.0, |(_, until)| until.as_secs_f64());
        // The first sample after the fault from which the backlog stays empty.
        let drained = match backlog.iter().rposition(|(_, n)| *n > 0) {
            None => Some(cleared),
            Some(last) => backlog.get(last + 1).map(|(t, _)| *t),
        }
        .map(|t| (t - cleared).max(0.0));
        self.drained_after = Some(drained.map(Duration::from_secs_f64));
        self.backlog = backlog;
    }

    /// Writes completed eventually, in `[0, 1]`.
    pub fn completed_rate(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.completed as f64 / self.ops as f64
        }
    }

    /// Success rate in `[0, 1]`.
    pub fn success_rate(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.ok as f64 / self.ops as f64
        }
    }

    /// Operations that started during the fault window earlier than `window` before it
    /// cleared: no in-memory retry that gives up within `window` can outlast the fault for
    /// them.
    pub fn started_beyond(&self, window: Duration) -> usize {
        let Some((from, until)) = self.fault else {
            return 0;
        };
        self.starts
            .iter()
            .filter(|s| **s >= from && **s + window < until)
            .count()
    }
}

/// Computes the metrics of a run.
pub fn compute(
    run: Run,
    records: &[OpRecord],
    counts: &CatalogCounts,
    concurrency: Vec<(f64, usize)>,
) -> RunMetrics {
    let Run {
        scenario,
        design,
        seed,
        duration,
    } = run;
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
    let mut timeline = vec![(0, 0); TIMELINE_BINS];
    for r in records {
        let bin = ((r.start.as_secs_f64() / duration.as_secs_f64().max(1e-9))
            * TIMELINE_BINS as f64) as usize;
        let bin = &mut timeline[bin.min(TIMELINE_BINS - 1)];
        bin.0 += usize::from(r.outcome == Outcome::Ok);
        bin.1 += 1;
    }
    let mut lags: Vec<Duration> = records.iter().map(|r| r.lag).collect();
    lags.sort();
    let fault = scenario.outage_window(duration);
    let busiest = |from: f64, to: f64| {
        let mut bins = std::collections::HashMap::<i64, usize>::new();
        for at in counts.arrivals.iter().filter(|at| (from..to).contains(*at)) {
            *bins
                .entry((at / RECOVERY_BIN.as_secs_f64()).floor() as i64)
                .or_default() += 1;
        }
        bins.values().copied().max().unwrap_or(0)
    };
    let fault_start = fault.map_or(duration, |(from, _)| from).as_secs_f64();
    let healthy_busiest = busiest(-HEALTHY_SPAN.as_secs_f64(), fault_start);
    let after_busiest = fault
        .filter(|_| scenario.clears())
        .map(|(_, until)| busiest(until.as_secs_f64(), f64::INFINITY));
    let served_tenant = (scenario == Scenario::TenantQuota)
        .then_some(fault)
        .flatten()
        .map(|(from, until)| {
            let served = records.iter().filter(|r| {
                super::scenarios::tenant_of(r.id) == "tenant-b" && (from..until).contains(&r.start)
            });
            (
                served.clone().filter(|r| r.outcome == Outcome::Ok).count(),
                served.count(),
            )
        });
    let mut failing: Vec<Duration> = records
        .iter()
        .filter(|r| r.outcome != Outcome::Ok)
        .map(|r| r.latency)
        .collect();
    failing.sort();
    let half = duration / 2;
    let late_in_flight = records
        .iter()
        .map(|r| {
            let (from, to) = (r.start.max(half), (r.start + r.latency).min(duration));
            to.saturating_sub(from).as_secs_f64()
        })
        .sum::<f64>()
        / (duration - half).as_secs_f64().max(1e-9);
    RunMetrics {
        scenario,
        design,
        seed,
        duration,
        ops: records.len(),
        ok: records.iter().filter(|r| r.outcome == Outcome::Ok).count(),
        ambiguous: records
            .iter()
            .filter(|r| r.outcome == Outcome::Ambiguous)
            .count(),
        shed: records
            .iter()
            .filter(|r| r.outcome == Outcome::Shed)
            .count(),
        calls_mean: if records.is_empty() {
            0.0
        } else {
            calls_total as f64 / records.len() as f64
        },
        calls_max,
        calls_total,
        latency: percentiles(&latencies),
        peak_concurrency: counts.peak,
        concurrency,
        recovery: scenario
            .outage_window(duration)
            .map(|(_, cleared)| recovery(records, cleared, duration)),
        duplicates: records.iter().filter(|r| executed(r.id) > 1).count(),
        overlapping: records
            .iter()
            .map(|r| u64::from(counts.overlapping.get(&r.id).copied().unwrap_or(0)))
            .sum(),
        failed_but_done: records
            .iter()
            .filter(|r| r.outcome == Outcome::Failed && executed(r.id) > 0)
            .count(),
        calls_histogram,
        timeline,
        lag_p99: percentile(&lags, 0.99),
        local_refusals: [0; 2],
        deferred: records
            .iter()
            .filter(|r| r.outcome == Outcome::Deferred)
            .count(),
        completed: records.iter().filter(|r| executed(r.id) > 0).count(),
        deferred_lost: records
            .iter()
            .filter(|r| r.outcome == Outcome::Deferred && executed(r.id) == 0)
            .count(),
        backlog: Vec::new(),
        drained_after: None,
        healthy_busiest,
        after_busiest,
        served_tenant,
        failing_p99: percentile(&failing, 0.99),
        late_in_flight,
        starts: records.iter().map(|r| r.start).collect(),
        fault,
        latencies,
    }
}

/// A figure pooled over seeds, with the lowest and highest single-seed value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Over every operation of every seed.
    pub pooled: f64,
    /// The lowest of the seeds.
    pub min: f64,
    /// The highest of the seeds.
    pub max: f64,
}

impl Spread {
    fn of(pooled: f64, per_seed: impl IntoIterator<Item = f64>) -> Self {
        let (min, max) = per_seed
            .into_iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        Spread {
            pooled,
            min: if min.is_finite() { min } else { pooled },
            max: if max.is_finite() { max } else { pooled },
        }
    }

    /// Highest minus lowest single-seed value.
    pub fn range(&self) -> f64 {
        self.max - self.min
    }
}

/// One scenario x design, pooled over its seeds.
#[derive(Debug, Clone)]
pub struct Aggregate {
    /// The scenario.
    pub scenario: Scenario,
    /// The design.
    pub design: Design,
    /// The runs pooled, one per seed.
    pub runs: Vec<RunMetrics>,
    /// Operations, over every seed.
    pub ops: usize,
    /// Success rate in `[0, 1]`.
    pub success: Spread,
    /// Catalog calls per operation.
    pub calls: Spread,
    /// p99 latency, milliseconds.
    pub p99_ms: Spread,
    /// p50, p95, p99, p99.9 over every operation of every seed.
    pub latency: [Duration; 4],
    /// Most catalog calls one operation made.
    pub calls_max: u32,
    /// The highest in-flight peak at the catalog.
    pub peak: usize,
    /// Ambiguous outcomes, duplicate side effects and lost acknowledgements, summed.
    pub ambiguous: usize,
    /// See [`RunMetrics::shed`], summed.
    pub shed: usize,
    /// See [`RunMetrics::duplicates`], summed.
    pub duplicates: usize,
    /// See [`RunMetrics::overlapping`], summed.
    pub overlapping: u64,
    /// See [`RunMetrics::failed_but_done`], summed.
    pub failed_but_done: usize,
    /// See [`RunMetrics::deferred_lost`], summed.
    pub deferred_lost: usize,
    /// (succeeded, started) per bin, summed over seeds.
    pub timeline: Vec<(usize, usize)>,
    /// The catalog's in-flight peak per sample, averaged over seeds.
    pub concurrency: Vec<(f64, f64)>,
    /// The lab's lag (p99), the worst seed.
    pub lag_p99: Duration,
    /// See [`RunMetrics::local_refusals`], summed.
    pub local_refusals: [usize; 2],
    /// See [`RunMetrics::deferred`], summed.
    pub deferred: usize,
    /// Writes completed eventually ([`RunMetrics::completed`]), as a rate.
    pub completed: Spread,
    /// The durable backlog per sample, averaged over seeds (empty without a durable tier).
    pub backlog: Vec<(f64, f64)>,
    /// Seconds from the fault clearing to an empty backlog, the slowest seed (`None` without a
    /// durable tier; infinite when a seed never drained).
    pub drained_after_s: Option<f64>,
}

impl Aggregate {
    /// Calls refused locally, both services together.
    pub fn refused(&self) -> usize {
        self.local_refusals.iter().sum()
    }

    /// The binomial standard error of the pooled success rate.
    pub fn success_se(&self) -> f64 {
        let p = self.success.pooled;
        (p * (1.0 - p) / self.ops.max(1) as f64).sqrt()
    }
}

/// Pools `runs` by scenario x design, keeping their order of first appearance.
pub fn aggregate(runs: &[RunMetrics]) -> Vec<Aggregate> {
    let mut keys: Vec<(Scenario, Design)> = Vec::new();
    for m in runs {
        if !keys.contains(&(m.scenario, m.design)) {
            keys.push((m.scenario, m.design));
        }
    }
    keys.into_iter()
        .map(|(scenario, design)| {
            let group: Vec<RunMetrics> = runs
                .iter()
                .filter(|m| m.scenario == scenario && m.design == design)
                .cloned()
                .collect();
            pool(scenario, design, group)
        })
        .collect()
}

fn pool(scenario: Scenario, design: Design, runs: Vec<RunMetrics>) -> Aggregate {
    let ops: usize = runs.iter().map(|m| m.ops).sum();
    let ok: usize = runs.iter().map(|m| m.ok).sum();
    let calls: u64 = runs.iter().map(|m| m.calls_total).sum();
    let mut latencies: Vec<Duration> = runs.iter().flat_map(|m| m.latencies.clone()).collect();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut timeline = vec![(0, 0); TIMELINE_BINS];
    for m in &runs {
        for (sum, bin) in timeline.iter_mut().zip(&m.timeline) {
            sum.0 += bin.0;
            sum.1 += bin.1;
        }
    }
    let samples = runs.iter().map(|m| m.concurrency.len()).min().unwrap_or(0);
    let concurrency = (0..samples)
        .map(|i| {
            let t = runs[0].concurrency[i].0;
            let mean =
                runs.iter().map(|m| m.concurrency[i].1 as f64).sum::<f64>() / runs.len() as f64;
            (t, mean)
        })
        .collect();
    Aggregate {
        scenario,
        design,
        ops,
        success: Spread::of(
            if ops == 0 {
                0.0
            } else {
                ok as f64 / ops as f64
            },
            runs.iter().map(RunMetrics::success_rate),
        ),
        calls: Spread::of(
            if ops == 0 {
                0.0
            } else {
                calls as f64 / ops as f64
            },
            runs.iter().map(|m| m.calls_mean),
        ),
        p99_ms: Spread::of(
            ms(percentile(&latencies, 0.99)),
            runs.iter().map(|m| ms(m.latency[2])),
        ),
        latency: percentiles(&latencies),
        calls_max: runs.iter().map(|m| m.calls_max).max().unwrap_or(0),
        peak: runs.iter().map(|m| m.peak_concurrency).max().unwrap_or(0),
        ambiguous: runs.iter().map(|m| m.ambiguous).sum(),
        shed: runs.iter().map(|m| m.shed).sum(),
        duplicates: runs.iter().map(|m| m.duplicates).sum(),
        overlapping: runs.iter().map(|m| m.overlapping).sum(),
        failed_but_done: runs.iter().map(|m| m.failed_but_done).sum(),
        deferred_lost: runs.iter().map(|m| m.deferred_lost).sum(),
        timeline,
        concurrency,
        lag_p99: runs.iter().map(|m| m.lag_p99).max().unwrap_or_default(),
        local_refusals: runs.iter().fold([0; 2], |[a, m], r| {
            [a + r.local_refusals[0], m + r.local_refusals[1]]
        }),
        deferred: runs.iter().map(|m| m.deferred).sum(),
        completed: Spread::of(
            if ops == 0 {
                0.0
            } else {
                runs.iter().map(|m| m.completed).sum::<usize>() as f64 / ops as f64
            },
            runs.iter().map(RunMetrics::completed_rate),
        ),
        backlog: {
            let samples = runs.iter().map(|m| m.backlog.len()).min().unwrap_or(0);
            (0..samples)
                .map(|i| {
                    let t = runs[0].backlog[i].0;
                    let mean =
                        runs.iter().map(|m| m.backlog[i].1 as f64).sum::<f64>() / runs.len() as f64;
                    (t, mean)
                })
                .collect()
        },
        drained_after_s: runs
            .iter()
            .filter_map(|m| m.drained_after)
            .map(|d| d.map_or(f64::INFINITY, |d| d.as_secs_f64()))
            .reduce(f64::max),
        runs,
    }
}

/// p50, p95, p99 and p99.9 of sorted values.
fn percentiles(sorted: &[Duration]) -> [Duration; 4] {
    [0.50, 0.95, 0.99, 0.999].map(|q| percentile(sorted, q))
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

/// Synthetic runs for the lab's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// One run of `design` in `scenario` whose operations succeed as `ok` says (one 5 ms
    /// operation per millisecond), each making `calls` catalog calls and executing its write
    /// `executions` times.
    pub(crate) fn run(
        scenario: Scenario,
        design: Design,
        seed: u64,
        ok: impl IntoIterator<Item = bool>,
        calls: u32,
        executions: u32,
    ) -> RunMetrics {
        let records: Vec<OpRecord> = ok
            .into_iter()
            .enumerate()
            .map(|(i, ok)| OpRecord {
                id: i as u64 + 1,
                start: Duration::from_millis(i as u64),
                latency: Duration::from_millis(5),
                outcome: if ok { Outcome::Ok } else { Outcome::Failed },
                lag: Duration::ZERO,
            })
            .collect();
        let mut counts = CatalogCounts::default();
        for r in &records {
            counts.calls.insert(r.id, calls);
            counts.executions.insert(r.id, executions);
        }
        let run = Run {
            scenario,
            design,
            seed,
            duration: Duration::from_secs(1),
        };
        compute(run, &records, &counts, Vec::new())
    }
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
            lag: Duration::ZERO,
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

    #[test]
    fn seeds_pool_by_operation_and_keep_their_spread() {
        let counts = CatalogCounts::default();
        let run = |seed, outcomes: &[Outcome]| {
            let records: Vec<OpRecord> = outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| op(i as u64 + 1, i as u64 * 100, *o))
                .collect();
            compute(
                Run {
                    scenario: Scenario::Flaky503,
                    design: Design::B,
                    seed,
                    duration: Duration::from_secs(1),
                },
                &records,
                &counts,
                Vec::new(),
            )
        };
        let (ok, failed) = (Outcome::Ok, Outcome::Failed);
        let pooled = aggregate(&[run(1, &[ok, ok, ok, failed]), run(2, &[ok, failed])]);
        assert_eq!(pooled.len(), 1);
        let b = &pooled[0];
        assert_eq!(b.ops, 6);
        assert!((b.success.pooled - 4.0 / 6.0).abs() < 1e-9);
        assert_eq!((b.success.min, b.success.max), (0.5, 0.75));
        assert_eq!(b.timeline.iter().map(|t| t.1).sum::<usize>(), 6);
    }
}
