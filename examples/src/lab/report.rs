//! The lab's outputs: a terminal table and summary, a JSON file and an HTML report with SVG
//! charts.
//!
//! Every figure is pooled over the run's seeds (every operation of every seed counts once) and
//! shown with its spread: the lowest and highest single-seed value, in brackets, and the number
//! of operations behind it. The charts are drawn with plotters' SVG backend and inlined in the
//! HTML (no script, no CDN); text is emitted as SVG `<text>` elements, laid out with plotters'
//! built-in size estimate, so no font file is needed to produce them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plotters::prelude::*;
use serde_json::{Value, json};

use super::checks::{self, Violation};
use super::designs::{API_ATTEMPT_TIMEOUT, Design};
use super::metrics::{Aggregate, RECOVERED_AT, RECOVERY_BIN, RunMetrics, Spread, TIMELINE_BINS};
use super::scenarios::Scenario;
use super::{LabConfig, LabResults};

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `pooled [min-max]`, each with `decimals` and scaled by `scale`.
fn spread(s: Spread, scale: f64, decimals: usize) -> String {
    if (s.max - s.min).abs() * scale < 0.5 * 10f64.powi(-(decimals as i32)) {
        return format!("{:.d$}", s.pooled * scale, d = decimals);
    }
    format!(
        "{:.d$} [{:.d$}-{:.d$}]",
        s.pooled * scale,
        s.min * scale,
        s.max * scale,
        d = decimals
    )
}

fn recovery_text(a: &Aggregate) -> String {
    let each: Vec<Option<Option<Duration>>> = a.runs.iter().map(|m| m.recovery).collect();
    if each.iter().all(Option::is_none) {
        return "-".to_owned();
    }
    let never = each.iter().filter(|r| matches!(r, Some(None))).count();
    let times: Vec<f64> = each
        .iter()
        .filter_map(|r| r.flatten())
        .map(|d| d.as_secs_f64())
        .collect();
    let range = match (
        times.iter().copied().reduce(f64::min),
        times.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) if (hi - lo).abs() < 0.005 => format!("{lo:.2}s"),
        (Some(lo), Some(hi)) => format!("{lo:.2}-{hi:.2}s"),
        _ => String::new(),
    };
    match (never, range.is_empty()) {
        (0, _) => range,
        (n, true) => format!("never ({n}/{})", each.len()),
        (n, false) => format!("{range}, never {n}/{}", each.len()),
    }
}

const COLUMNS: [&str; 18] = [
    "scenario", "design", "ops", "ok %", "calls/op", "max", "p50ms", "p95ms", "p99ms", "p99.9ms",
    "peak", "recovery", "ambig", "dup", "overlap", "lost-ack", "refused", "shed",
];

fn row(a: &Aggregate) -> Vec<String> {
    vec![
        a.scenario.name().to_owned(),
        a.design.letter().to_owned(),
        a.ops.to_string(),
        spread(a.success, 100.0, 1),
        spread(a.calls, 1.0, 2),
        a.calls_max.to_string(),
        ms(a.latency[0]),
        ms(a.latency[1]),
        spread(a.p99_ms, 1.0, 0),
        ms(a.latency[3]),
        a.peak.to_string(),
        recovery_text(a),
        a.ambiguous.to_string(),
        a.duplicates.to_string(),
        a.overlapping.to_string(),
        a.failed_but_done.to_string(),
        format!("{}+{}", a.local_refusals[0], a.local_refusals[1]),
        a.shed.to_string(),
    ]
}

/// The readable terminal table.
pub fn table(results: &[Aggregate]) -> String {
    let mut rows: Vec<Vec<String>> = vec![COLUMNS.iter().map(|s| s.to_string()).collect()];
    rows.extend(results.iter().map(row));
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let mut previous = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 1 && row[0] != previous {
            out.push('\n');
        }
        previous = row[0].clone();
        for (c, cell) in row.iter().enumerate() {
            // Text left, numbers right.
            if c < 2 {
                let _ = write!(out, "{cell:<w$}  ", w = widths[c]);
            } else {
                let _ = write!(out, "{cell:>w$}  ", w = widths[c]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

/// What the columns mean (printed under the table and in the HTML report).
pub const LEGEND: &str = "\
Designs: A retries in every layer with backon and reqwest-retry at their defaults; B is this library at its
defaults; B-tuned the same code with examples/lab.toml; B-hedged is B-tuned with the catalog calls hedged
at the 95th percentile of their recent latency (run where hedging matters: slow catalogs, writes); C does
not retry.
Each figure is pooled over every operation of every seed; [lo-hi] is the lowest and highest single seed.
ops: operations behind the figures (all seeds); calls/op, max: catalog requests per user operation (mean,
max); peak: most requests in flight at the catalog; recovery: time from the fault clearing until every
later 250 ms bin of operations succeeds at >= 95 %, per seed; ambig: writes reported as 'outcome
unknown'; dup: writes the catalog executed more than once; overlap: catalog requests that arrived while
another of the same operation was being served (hedges, or a retry beside an abandoned attempt); lost-ack: writes reported as failed that the
catalog had executed; refused: calls B's services refused locally, before sending (the throttle, or a
breaker where one is configured: the API's on the middle + the middle's on the catalog); shed: operations the API refused at once because it
had its bound of operations in flight (counted as failed; the bound is printed below the table).
A user gives up after 15 s: an operation still running then counts as failed.";

/// Whether the lab kept its own schedule, in one line: how late (p99) it started operations in
/// its worst cell, against [`checks::LAG_LIMIT`]. Read with the lab's CPU use: a lab that fell
/// behind was itself a bottleneck, and its figures describe the machine as much as the designs.
pub fn schedule(results: &[Aggregate]) -> String {
    let Some(worst) = results.iter().max_by_key(|a| a.lag_p99) else {
        return "lab schedule: nothing ran".to_owned();
    };
    let verdict = if worst.lag_p99 <= checks::LAG_LIMIT {
        "it kept its schedule"
    } else {
        "it fell behind its schedule: the lab was a bottleneck, and these figures describe the \
         machine as much as the designs"
    };
    format!(
        "lab schedule: operations started at most {} ms late (p99 of the worst cell, {} in {}; \
         limit {} ms): {verdict}",
        worst.lag_p99.as_millis(),
        worst.design,
        worst.scenario,
        checks::LAG_LIMIT.as_millis()
    )
}

/// Whether `a`'s success is statistically indistinguishable from `best`'s: within two standard
/// errors of the difference of their pooled rates.
fn tied(a: &Aggregate, best: &Aggregate) -> bool {
    let se = (a.success_se().powi(2) + best.success_se().powi(2)).sqrt();
    a.success.pooled + 2.0 * se >= best.success.pooled
}

/// Per scenario, the designs ranked on success (higher first), catalog calls per operation and
/// p99 (lower first). A design that executed a write twice is never picked.
pub struct Ranking<'a> {
    /// The scenario.
    pub scenario: Scenario,
    /// Best success first.
    pub success: Vec<&'a Aggregate>,
    /// The designs without duplicate side effects whose success is tied with the best of
    /// them (within two standard errors).
    pub best_success: Vec<&'a Aggregate>,
    /// Fewest calls first.
    pub calls: Vec<&'a Aggregate>,
    /// Lowest p99 first.
    pub p99: Vec<&'a Aggregate>,
}

/// One figure of a design, a ranking key.
type Key<'k> = &'k dyn Fn(&Aggregate) -> f64;

/// The ranking of every scenario in `results`.
pub fn rankings(results: &[Aggregate]) -> Vec<Ranking<'_>> {
    let mut scenarios: Vec<Scenario> = results.iter().map(|a| a.scenario).collect();
    scenarios.dedup();
    scenarios
        .into_iter()
        .map(|scenario| {
            let runs: Vec<&Aggregate> = results.iter().filter(|a| a.scenario == scenario).collect();
            // Ties on one key are broken by the others: success, then calls, then p99.
            let sorted = |keys: [Key; 3]| {
                let mut v = runs.clone();
                v.sort_by(|x, y| {
                    keys.iter()
                        .map(|key| key(x).total_cmp(&key(y)))
                        .find(|o| o.is_ne())
                        .unwrap_or(std::cmp::Ordering::Equal)
                });
                v
            };
            let success: Key = &|a| -a.success.pooled;
            let calls: Key = &|a| a.calls.pooled;
            let p99: Key = &|a| a.p99_ms.pooled;
            let by_calls = sorted([calls, p99, success]);
            let by_p99 = sorted([p99, calls, success]);
            let success = sorted([success, calls, p99]);
            let safe: Vec<&Aggregate> = success
                .iter()
                .copied()
                .filter(|a| a.duplicates == 0)
                .collect();
            let best_success = safe.first().map_or_else(Vec::new, |best| {
                safe.iter().copied().filter(|a| tied(a, best)).collect()
            });
            Ranking {
                scenario,
                best_success,
                success,
                calls: by_calls,
                p99: by_p99,
            }
        })
        .collect()
}

/// The p99 latency a user-facing operation can afford, for [`Ranking::pick_within`].
pub const USER_P99: Duration = Duration::from_secs(3);

/// How far apart two designs' catalog calls per operation may be and still count as the same
/// cost: 5 % (1.016 and 1.018 calls are the same load on the catalog).
pub const CALLS_TIED: f64 = 0.05;

/// Of `tied` (tied on success), the cheapest in catalog calls, and of those within
/// [`CALLS_TIED`] of the fewest, the one with the lowest p99: what a hedge wins, or a design
/// that does not hold its users, counts once success and cost are equal.
fn cheapest_then_fastest<'a>(tied: &[&'a Aggregate]) -> Option<&'a Aggregate> {
    let fewest = tied.iter().map(|a| a.calls.pooled).min_by(f64::total_cmp)?;
    tied.iter()
        .copied()
        .filter(|a| a.calls.pooled <= fewest * (1.0 + CALLS_TIED) + 1e-9)
        .min_by(|x, y| {
            x.p99_ms
                .pooled
                .total_cmp(&y.p99_ms.pooled)
                .then(x.calls.pooled.total_cmp(&y.calls.pooled))
        })
}

impl Ranking<'_> {
    /// The design to use when users wait as long as it takes: of those tied on success (and
    /// without duplicate side effects), the one with the fewest catalog calls; of those tied
    /// on calls too (within [`CALLS_TIED`]), the one with the lowest p99.
    pub fn pick(&self) -> Option<&Aggregate> {
        cheapest_then_fastest(&self.best_success)
    }

    /// The same among the designs whose p99 is at most `limit`.
    pub fn pick_within(&self, limit: Duration) -> Option<&Aggregate> {
        let limit_ms = limit.as_secs_f64() * 1000.0;
        let fast: Vec<&Aggregate> = self
            .success
            .iter()
            .copied()
            .filter(|a| a.p99_ms.pooled <= limit_ms && a.duplicates == 0)
            .collect();
        let best = *fast.first()?;
        let tied: Vec<&Aggregate> = fast.into_iter().filter(|a| tied(a, best)).collect();
        cheapest_then_fastest(&tied)
    }
}

fn ranked(list: &[&Aggregate], value: impl Fn(&Aggregate) -> String) -> String {
    list.iter()
        .map(|a| format!("{} {}", a.design, value(a)))
        .collect::<Vec<_>>()
        .join(" > ")
}

/// The ranking as text, one block per scenario.
pub fn summary(results: &[Aggregate]) -> String {
    let mut out = String::new();
    for r in rankings(results) {
        let best: Vec<&str> = r.best_success.iter().map(|a| a.design.letter()).collect();
        let name = |a: Option<&Aggregate>| a.map_or("none".to_owned(), |a| a.design.to_string());
        let fast = name(r.pick_within(USER_P99));
        let _ = writeln!(
            out,
            "{}: use {} (with p99 <= {} s: of the designs whose users wait at most that long, the most successful without duplicate side effects; of those, fewest catalog calls, then lowest p99); users waiting up to 15 s: {} (most successful: {})\n  success   {}\n  calls/op  {}\n  p99       {}",
            r.scenario,
            fast,
            USER_P99.as_secs(),
            name(r.pick()),
            best.join(", "),
            ranked(&r.success, |a| {
                let dup = if a.duplicates > 0 {
                    format!(" ({} duplicates)", a.duplicates)
                } else {
                    String::new()
                };
                format!("{:.1}%{dup}", a.success.pooled * 100.0)
            }),
            ranked(&r.calls, |a| format!("{:.2}", a.calls.pooled)),
            ranked(&r.p99, |a| format!("{:.0}ms", a.p99_ms.pooled)),
        );
    }
    out
}

/// Where the library at its defaults (B) stands under the users' latency budget: in how many
/// scenarios it is the design to use, or tied with it on success (within two standard errors,
/// as the pick's ties are), and the scenarios where it is not, with the best design's success
/// beside B's. `None` when the run has no B.
pub fn defaults_standing(results: &[Aggregate]) -> Option<String> {
    let limit_ms = USER_P99.as_secs_f64() * 1000.0;
    let fast = |a: &Aggregate| a.p99_ms.pooled <= limit_ms && a.duplicates == 0;
    let (mut standing, mut total, mut misses) = (0, 0, Vec::new());
    for r in rankings(results) {
        let Some(b) = r.success.iter().copied().find(|a| a.design == Design::B) else {
            continue;
        };
        // `success` is best first: the first fast design is the best the users can have.
        let Some(best) = r.success.iter().copied().find(|a| fast(a)) else {
            continue;
        };
        total += 1;
        if fast(b) && tied(b, best) {
            standing += 1;
        } else {
            misses.push(format!(
                "{}: {} {:.1}% against B's {:.1}%",
                r.scenario,
                best.design,
                best.success.pooled * 100.0,
                b.success.pooled * 100.0
            ));
        }
    }
    (total > 0).then(|| {
        let not = match misses.is_empty() {
            true => String::new(),
            false => format!(" (not in {})", misses.join("; ")),
        };
        format!(
            "B, the library at its defaults, with p99 <= {} s: the design to use, or tied with it \
             on success, in {standing} of {total} scenarios{not}",
            USER_P99.as_secs()
        )
    })
}

/// Why retrying in memory does not help in the transient outage, in figures: the outage, each
/// design's retry window, the share of operations no in-memory retry could carry past it, and
/// what admission control refused.
pub fn transient_note(config: &LabConfig, results: &[Aggregate]) -> Option<String> {
    let (from, until) =
        Scenario::Transient.outage_window(Scenario::Transient.run_length(config.duration))?;
    let runs: Vec<&Aggregate> = results
        .iter()
        .filter(|a| a.scenario == Scenario::Transient)
        .collect();
    if runs.is_empty() {
        return None;
    }
    let mut out = format!(
        "The outage lasts {} (40 % of the {} --duration). A retry in memory carries an operation past \
         it only if the operation started less than its retry window before the outage ended, \
         and only if the retries are made. ",
        secs(until - from),
        secs(config.duration)
    );
    let none = runs.iter().find(|a| a.design == Design::C);
    for a in runs.iter().filter(|a| a.design.is_ours()) {
        let catalog = config.upstreams.get(a.design, "catalog")?;
        let middle = config.upstreams.get(a.design, "middle")?;
        let window = catalog.retry_window().min(middle.deadline);
        let beyond: usize = a.runs.iter().map(|m| m.started_beyond(window)).sum();
        let _ = write!(
            out,
            "{}: window {} (the catalog's worst-case retry window within the {} deadline), so \
             {:.0} % of its operations started too early in the outage for any in-memory retry; \
             {:.2} catalog calls per operation, and {} calls refused locally ({} by the API's \
             admission control on the middle, {} by the middle's on the catalog): the throttle \
             refuses most attempts while the catalog accepts none (by design: the dependency is \
             down); the refused calls wait, sending nothing, and go once it accepts again, if \
             their deadline (the API's attempt, for the middle) has not passed. ",
            a.design,
            secs(window),
            secs(middle.deadline),
            beyond as f64 * 100.0 / a.ops.max(1) as f64,
            a.calls.pooled,
            a.refused(),
            a.local_refusals[0],
            a.local_refusals[1],
        );
        if let Some(c) = none {
            let tol = checks::tolerance(a, c);
            let verdict = if a.success.pooled + tol < c.success.pooled {
                "below"
            } else if a.success.pooled > c.success.pooled + tol {
                "above"
            } else {
                "within the spread of"
            };
            let _ = write!(
                out,
                "Its success, {:.1} %, is {verdict} C's {:.1} %. ",
                a.success.pooled * 100.0,
                c.success.pooled * 100.0,
            );
        }
    }
    if let Some(a) = runs.iter().find(|a| a.design == Design::A) {
        let _ = write!(
            out,
            "A outlasts the outage by holding its users: backon's default backoff (1 s, 2 s, \
             4 s) around {} attempts keeps an operation up to {} ({:.1} % success, p99 {} ms). ",
            secs(API_ATTEMPT_TIMEOUT),
            secs(API_ATTEMPT_TIMEOUT * 4 + Duration::from_secs(7)),
            a.success.pooled * 100.0,
            ms(a.latency[2]),
        );
    }
    out.push_str(
        "What helps an outage longer than the in-memory window (at most 5 s by the registry's \
         rule) is the durable tier (`#[retry(durable = ...)]` and the retry-durable \
         queue): the operation is handed to a database task queue with its \
         idempotency key and replayed after the outage, without holding the user or a \
         connection. The long-outage scenario measures it.",
    );
    Some(out)
}

/// The JSON document.
pub fn json(config: &LabConfig, results: &LabResults) -> Value {
    let aggregates = results.aggregates();
    let spread = |s: Spread| json!({"pooled": s.pooled, "min": s.min, "max": s.max});
    let cells: Vec<Value> = aggregates
        .iter()
        .map(|a| {
            json!({
                "scenario": a.scenario.name(),
                "design": a.design.letter(),
                "design_name": a.design.describe(),
                "seeds": a.runs.iter().map(|m| m.seed).collect::<Vec<_>>(),
                "operations": a.ops,
                "success_rate": spread(a.success),
                "catalog_calls_per_operation": spread(a.calls),
                "catalog_calls_per_operation_max": a.calls_max,
                "latency_ms": {
                    "p50": a.latency[0].as_secs_f64() * 1000.0,
                    "p95": a.latency[1].as_secs_f64() * 1000.0,
                    "p99": spread(a.p99_ms),
                    "p99.9": a.latency[3].as_secs_f64() * 1000.0,
                },
                "peak_concurrency": a.peak,
                "ambiguous": a.ambiguous,
                "shed": a.shed,
                "duplicate_side_effects": a.duplicates,
                "overlapping_requests": a.overlapping,
                "failed_but_executed": a.failed_but_done,
                "success_over_time": a.timeline.iter().map(|(ok, all)| json!([ok, all])).collect::<Vec<_>>(),
                "local_refusals": {"api": a.local_refusals[0], "middle": a.local_refusals[1]},
                "lab_lag_p99_ms": a.lag_p99.as_secs_f64() * 1000.0,
                "runs": a.runs.iter().map(run_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "lab": "outage-lab",
        "config": {
            "duration_s": config.duration.as_secs_f64(),
            "load_ops_per_s": config.load,
            "first_seed": config.seed,
            "seeds": config.seeds,
            "isolate_limited_capacity": config.isolate,
            "scenarios": config.scenarios.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "designs": config.designs.iter().map(|d| d.letter()).collect::<Vec<_>>(),
            "recovery_bin_ms": RECOVERY_BIN.as_millis() as u64,
            "recovered_at": RECOVERED_AT,
            "timeline_bins": TIMELINE_BINS,
        },
        "lab_cpu": {
            "wall_s": results.cpu.wall.as_secs_f64(),
            "cpu_s": results.cpu.cpu.map(|c| c.as_secs_f64()),
            "mean_cores": results.cpu.mean_cores(),
            "peak_cores": results.cpu.peak_cores,
            "cores_available": results.cpu.cores,
            "operations": results.cpu.operations,
            "cpu_ms_per_operation": results.cpu.per_operation().map(|d| d.as_secs_f64() * 1e3),
        },
        "lab_schedule": {
            "lag_p99_ms_worst_cell": aggregates.iter().map(|a| a.lag_p99).max().unwrap_or_default().as_secs_f64() * 1000.0,
            "limit_ms": checks::LAG_LIMIT.as_secs_f64() * 1000.0,
            "text": schedule(&aggregates),
        },
        "lab_files": {
            "max_in_flight_per_design_and_seed": results.bounds.0.iter().map(|(s, b)| json!({
                "scenario": s.name(),
                "bound": b.per_chain,
                "chains_side_by_side": b.chains,
                "limited_by_files": b.limited_by_files,
            })).collect::<Vec<_>>(),
            "open_file_limit": results.file_limit.map(|l| l.soft),
            "peak_open_files": results.peak_files,
        },
        "headline_violations": checks::check(&aggregates)
            .iter()
            .map(|v| json!({"text": v.text, "asserted": v.asserted}))
            .collect::<Vec<_>>(),
        "cells": cells,
    })
}

fn run_json(m: &RunMetrics) -> Value {
    json!({
        "seed": m.seed,
        "operations": m.ops,
        "succeeded": m.ok,
        "success_rate": m.success_rate(),
        "ambiguous": m.ambiguous,
        "shed": m.shed,
        "catalog_calls": {
            "total": m.calls_total,
            "per_operation_mean": m.calls_mean,
            "per_operation_max": m.calls_max,
            "histogram": m.calls_histogram,
        },
        "latency_ms": {
            "p50": m.latency[0].as_secs_f64() * 1000.0,
            "p95": m.latency[1].as_secs_f64() * 1000.0,
            "p99": m.latency[2].as_secs_f64() * 1000.0,
            "p99.9": m.latency[3].as_secs_f64() * 1000.0,
        },
        "peak_concurrency": m.peak_concurrency,
        "concurrency_over_time": m.concurrency.iter().map(|(t, n)| json!([t, n])).collect::<Vec<_>>(),
        "recovery_s": match m.recovery {
            None => Value::Null,
            Some(None) => json!("never"),
            Some(Some(d)) => json!(d.as_secs_f64()),
        },
        "duplicate_side_effects": m.duplicates,
        "overlapping_requests": m.overlapping,
        "failed_but_executed": m.failed_but_done,
        "local_refusals": {"api": m.local_refusals[0], "middle": m.local_refusals[1]},
        "deferred": m.deferred,
        "completed_eventually": m.completed,
        "durable_backlog_over_time": m.backlog.iter().map(|(t, n)| json!([t, n])).collect::<Vec<_>>(),
        "durable_drained_after_s": match m.drained_after {
            None => Value::Null,
            Some(None) => json!("never"),
            Some(Some(d)) => json!(d.as_secs_f64()),
        },
    })
}

/// The long outage's own table: what each design did with the writes in the end.
pub fn long_outage(results: &[Aggregate]) -> Option<String> {
    let rows: Vec<&Aggregate> = results
        .iter()
        .filter(|a| a.scenario == Scenario::LongOutage)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "long-outage: keyed writes through a catalog outage longer than any in-memory retry window\n\
         design   ops  ok now %  deferred  completed eventually %  dup  calls/op  backlog drained after\n",
    );
    for a in rows {
        let drained = match a.drained_after_s {
            None => "-".to_owned(),
            Some(s) if s.is_finite() => format!("{s:.1} s"),
            Some(_) => "never".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<7} {:>4}  {:>8}  {:>8}  {:>22}  {:>3}  {:>8}  {drained}",
            a.design.letter(),
            a.ops,
            format!("{:.1}", a.success.pooled * 100.0),
            a.deferred,
            spread(a.completed, 100.0, 1),
            a.duplicates,
            format!("{:.2}", a.calls.pooled),
        );
    }
    out.push_str(
        "ok now: answered 200 at once; deferred: answered 202 (B's durable tier took the write); \
         completed eventually: writes the catalog executed by the end, after the backlog drained \
         (a user who got an error may retry later: not counted); backlog drained after: from the \
         catalog's return to an empty durable queue, slowest seed.\n",
    );
    Some(out)
}

/// Lines: the durable queue's outstanding tasks over time (B and B-tuned in the long outage).
fn backlog(
    runs: &[&Aggregate],
    outage: Option<(f64, f64)>,
) -> Result<String, Box<dyn std::error::Error>> {
    let runs: Vec<&Aggregate> = runs
        .iter()
        .copied()
        .filter(|a| !a.backlog.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(String::new());
    }
    over_time(
        &runs,
        "Durable backlog: tasks not yet completed (mean of seeds)",
        |m| &m.backlog,
        outage,
    )
}

/// One line per design of `series` (seconds, value), under `caption`, with the outage shaded.
fn over_time(
    runs: &[&Aggregate],
    caption: &str,
    series: fn(&Aggregate) -> &[(f64, f64)],
    outage: Option<(f64, f64)>,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = runs
            .iter()
            .flat_map(|m| series(m).iter().map(|p| p.0))
            .fold(1.0, f64::max);
        let y_max = runs
            .iter()
            .flat_map(|m| series(m).iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .label_style(("sans-serif", 12))
            .draw()?;
        if let Some((from, until)) = outage {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (until, y_max)],
                RGBColor(250, 220, 120).mix(0.35).filled(),
            )))?;
        }
        for m in runs {
            let c = color(m.design);
            chart
                .draw_series(LineSeries::new(
                    series(m).iter().copied(),
                    c.stroke_width(2),
                ))?
                .label(m.design.letter())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 12, y)], c.stroke_width(2))
                });
        }
        legend(&mut chart)?;
        root.present()?;
    }
    Ok(svg)
}

fn color(design: Design) -> RGBColor {
    match design {
        Design::A => RGBColor(214, 69, 65),
        Design::B => RGBColor(38, 120, 178),
        Design::BTuned => RGBColor(46, 160, 90),
        Design::BHedged => RGBColor(150, 90, 190),
        Design::C => RGBColor(130, 130, 130),
    }
}

const CHART: (u32, u32) = (440, 300);

/// One series of a bar chart: its label, its shade, and its value for a run.
type Series<'a> = (&'a str, f64, &'a dyn Fn(&Aggregate) -> f64);

/// Grouped bars: one group per design, one bar per series.
fn bars(
    title: &str,
    runs: &[&Aggregate],
    series: &[Series<'_>],
    limit: Option<(f64, &str)>,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART).into_drawing_area();
        root.fill(&WHITE)?;
        let top = runs
            .iter()
            .flat_map(|m| series.iter().map(move |(_, _, f)| f(m)))
            .fold(limit.map_or(0.0, |l| l.0), f64::max)
            .max(1.0)
            * 1.15;
        let n = runs.len() as f64;
        let names: Vec<String> = runs.iter().map(|m| m.design.letter().to_owned()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..n, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(runs.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x.fract() - 0.5).abs() < 1e-6 && i < names.len() {
                    names[i].clone()
                } else {
                    String::new()
                }
            })
            .label_style(("sans-serif", 12))
            .draw()?;
        let width = 0.8 / series.len() as f64;
        for (k, (label, shade, value)) in series.iter().enumerate() {
            let shade = *shade;
            let rects: Vec<_> = runs
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let x0 = i as f64 + 0.1 + k as f64 * width;
                    let c = color(m.design).mix(shade);
                    Rectangle::new([(x0, 0.0), (x0 + width * 0.9, value(m))], c.filled())
                })
                .collect();
            chart
                .draw_series(rects)?
                .label(*label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLACK.mix(shade).filled())
                });
        }
        if let Some((y, label)) = limit {
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, y), (n, y)],
                    BLACK.mix(0.6).stroke_width(1),
                ))?
                .label(label)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.mix(0.6)));
        }
        legend(&mut chart)?;
        root.present()?;
    }
    Ok(svg)
}

/// Lines: the catalog's in-flight peak per 100 ms, per design.
fn concurrency(
    runs: &[&Aggregate],
    outage: Option<(f64, f64)>,
) -> Result<String, Box<dyn std::error::Error>> {
    over_time(
        runs,
        "Requests in flight at the catalog (mean of seeds)",
        |m| &m.concurrency,
        outage,
    )
}

/// The charts' legend, top right.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 11))
        .draw()
}

/// Lines: the share of operations that succeeded, by start time, per design (all seeds).
fn success_over_time(
    runs: &[&Aggregate],
    duration: Duration,
    outage: Option<(f64, f64)>,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = duration.as_secs_f64();
        let bin = t_max / TIMELINE_BINS as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption("Success by start time (%)", ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..t_max, 0f64..105f64)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .label_style(("sans-serif", 12))
            .draw()?;
        if let Some((from, until)) = outage {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (until, 105.0)],
                RGBColor(250, 220, 120).mix(0.35).filled(),
            )))?;
        }
        for m in runs {
            let c = color(m.design);
            let points: Vec<(f64, f64)> = m
                .timeline
                .iter()
                .enumerate()
                .filter(|(_, (_, all))| *all > 0)
                .map(|(i, (ok, all))| ((i as f64 + 0.5) * bin, *ok as f64 * 100.0 / *all as f64))
                .collect();
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(m.design.letter())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 12, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 11))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML report: what was run, the verdicts, the ranking, the table, then per scenario its
/// charts.
pub fn html(
    config: &LabConfig,
    results: &LabResults,
) -> Result<String, Box<dyn std::error::Error>> {
    let aggregates = results.aggregates();
    let mut h = String::new();
    h.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Outage lab</title>\n<style>\
         body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}\
         table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\
         td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}\
         .rank td{text-align:left}.pick{font-weight:bold}\
         .charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee}\
         .note{background:#fff8e1;padding:8px 12px;max-width:1000px}\
         code{background:#f4f4f4;padding:1px 4px}</style></head><body>\n",
    );
    let per_cell = aggregates.first().map_or(0, |a| a.ops);
    let _ = writeln!(
        h,
        "<h1>Outage lab</h1><p>API &rarr; middle &rarr; catalog on loopback. Per scenario, {} s of load at {} operations/s \
         for each design and seed, {} seeds from seed {} (about {} operations behind each figure; the table's <code>ops</code> \
         column gives the exact count). Design A retries in every layer with the popular crates at their defaults \
         (backon's <code>ExponentialBuilder</code> in the API, reqwest-retry's default policy in the middle), B is this library \
         at its defaults, B-tuned the same code with <code>examples/lab.toml</code>, C does not retry.</p>",
        config.duration.as_secs_f64(),
        config.load,
        config.seeds,
        config.seed,
        per_cell,
    );
    let _ = writeln!(
        h,
        "<p>{}.<br>{}.<br>{}.</p>",
        escape(&results.cpu.describe()),
        escape(&schedule(&aggregates)),
        escape(&results.describe_files()),
    );
    let violations = checks::check(&aggregates);
    h.push_str("<h2>Headline properties of B and B-tuned</h2>");
    h.push_str(&violations_html(&violations));
    let _ = writeln!(
        h,
        "<h2>Which design, when</h2><table class=\"rank\"><tr><th>scenario</th><th>use (p99 &le; {} s)</th><th>use if users wait up to 15 s</th><th>success (higher first)</th><th>catalog calls/op (fewer first)</th><th>p99 ms (lower first)</th></tr>",
        USER_P99.as_secs()
    );
    for r in rankings(&aggregates) {
        let pick = r.pick().map(|a| a.design);
        let cell = |list: &[&Aggregate], value: &dyn Fn(&Aggregate) -> String| {
            list.iter()
                .map(|a| {
                    let text = format!("{} {}", a.design, value(a));
                    if Some(a.design) == pick {
                        format!("<span class=\"pick\">{}</span>", escape(&text))
                    } else {
                        escape(&text)
                    }
                })
                .collect::<Vec<_>>()
                .join(" &gt; ")
        };
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{0}\">{0}</a></td><td class=\"pick\">{1}</td><td>{2}</td><td>{3}</td><td>{4}</td><td>{5}</td></tr>",
            r.scenario,
            r.pick_within(USER_P99)
                .map_or("none".to_owned(), |a| a.design.to_string()),
            pick.map_or("none".to_owned(), |d| d.to_string()),
            cell(&r.success, &|a| {
                let dup = if a.duplicates > 0 {
                    format!(" ({} duplicates)", a.duplicates)
                } else {
                    String::new()
                };
                format!("{:.1}%{dup}", a.success.pooled * 100.0)
            }),
            cell(&r.calls, &|a| format!("{:.2}", a.calls.pooled)),
            cell(&r.p99, &|a| format!("{:.0}", a.p99_ms.pooled)),
        );
    }
    h.push_str("</table><p><i>use</i>: of the designs whose users wait at most 3 s in 99 % of operations and that make no duplicate side effect, the one whose success is within two standard errors of the best of them with the fewest catalog calls, and of those within 5 % of the fewest calls, the lowest p99; \
                <i>use if users wait up to 15 s</i>: the same without the latency limit (bold).</p>\n");
    let _ = writeln!(h, "<h2>All figures</h2><pre>{}</pre>", escape(LEGEND));
    h.push_str("<table><tr>");
    for col in COLUMNS {
        let _ = write!(h, "<th>{}</th>", escape(col));
    }
    h.push_str("</tr>\n");
    for a in &aggregates {
        h.push_str("<tr>");
        for cell in row(a) {
            let _ = write!(h, "<td>{}</td>", escape(&cell));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    let mut scenarios: Vec<Scenario> = aggregates.iter().map(|a| a.scenario).collect();
    scenarios.dedup();
    for scenario in scenarios {
        let runs: Vec<&Aggregate> = aggregates
            .iter()
            .filter(|a| a.scenario == scenario)
            .collect();
        let _ = writeln!(
            h,
            "<h2 id=\"{0}\">{0}</h2><p>{1}</p>",
            scenario.name(),
            escape(scenario.describe())
        );
        if scenario == Scenario::Transient
            && let Some(note) = transient_note(config, &aggregates)
        {
            let _ = writeln!(h, "<p class=\"note\">{}</p>", escape(&note));
        }
        if scenario == Scenario::LongOutage
            && let Some(text) = long_outage(&aggregates)
        {
            let _ = writeln!(h, "<pre>{}</pre>", escape(&text));
        }
        h.push_str("<div class=\"charts\">");
        let length = scenario.run_length(config.duration);
        let outage = scenario
            .outage_window(length)
            .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
        h.push_str(&success_over_time(&runs, length, outage)?);
        h.push_str(&backlog(&runs, outage)?);
        let ms_of = |i: usize| move |a: &Aggregate| a.latency[i].as_secs_f64() * 1000.0;
        let (p50, p95, p99) = (ms_of(0), ms_of(1), ms_of(2));
        h.push_str(&bars(
            "Latency (ms)",
            &runs,
            &[("p50", 0.45, &p50), ("p95", 0.75, &p95), ("p99", 1.0, &p99)],
            None,
        )?);
        let mean = |a: &Aggregate| a.calls.pooled;
        let max = |a: &Aggregate| f64::from(a.calls_max);
        h.push_str(&bars(
            "Catalog calls per operation",
            &runs,
            &[("mean", 0.55, &mean), ("max", 1.0, &max)],
            Some((3.0, "3 attempts")),
        )?);
        h.push_str(&concurrency(&runs, outage)?);
        h.push_str("</div>\n");
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

fn violations_html(violations: &[Violation]) -> String {
    if violations.is_empty() {
        return "<p>All hold: under a dead catalog a bounded number of catalog calls per operation; no duplicate side \
                effect in any scenario; never less successful than no retry (C) by more than the measured spread; \
                recovery within 0.5 s of no retry's.</p>\n"
            .to_owned();
    }
    let mut h = String::from(
        "<p>Asserted for B, B-tuned and B-hedged (see <code>retry_examples::lab::checks</code>): a bounded number of \
         catalog calls per operation under a dead catalog, no duplicate side effect, never less successful than no \
         retry (C) by more than the measured spread, and recovery within 0.5 s of no retry's.</p><ul>",
    );
    for v in violations {
        let what = if v.asserted { "violated" } else { "reported" };
        let _ = write!(h, "<li><b>{what}</b>: {}</li>", escape(&v.text));
    }
    h.push_str("</ul>\n");
    h
}

/// Writes `outage-lab.json` and `outage-lab.html` into `dir`; returns their paths.
pub fn write(
    dir: &Path,
    config: &LabConfig,
    results: &LabResults,
) -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let json_path = dir.join("outage-lab.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json(config, results))?,
    )?;
    let html_path = dir.join("outage-lab.html");
    std::fs::write(&html_path, html(config, results)?)?;
    Ok((json_path, html_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::metrics::aggregate;

    /// 200 operations of `design`, the first `ok` of them successful.
    fn run(design: Design, ok: usize, calls: u32, executions: u32) -> RunMetrics {
        let oks = (0..200).map(|i| i < ok);
        crate::lab::metrics::testing::run(Scenario::ResetUnkeyed, design, 1, oks, calls, executions)
    }

    #[test]
    fn the_pick_is_the_cheapest_of_the_tied_best_and_never_duplicates_a_write() {
        let results = aggregate(&[
            // A succeeds most, by executing writes twice.
            run(Design::A, 200, 2, 2),
            run(Design::B, 150, 2, 1),
            // Tied with B (one operation apart), fewer calls.
            run(Design::BTuned, 149, 1, 1),
            run(Design::C, 100, 1, 1),
        ]);
        let ranking = rankings(&results);
        let r = &ranking[0];
        assert_eq!(r.success[0].design, Design::A, "ranked on success alone");
        let tied: Vec<Design> = r.best_success.iter().map(|a| a.design).collect();
        assert_eq!(tied, [Design::B, Design::BTuned]);
        assert_eq!(r.pick().map(|a| a.design), Some(Design::BTuned));
        assert!(summary(&results).contains("A 100.0% (200 duplicates)"));
        // B is not the pick, but tied with the best design its users can have.
        let standing = defaults_standing(&results).unwrap();
        assert!(standing.contains("in 1 of 1 scenarios"), "{standing}");
        // Without the tie, the scenario is named with both figures.
        let results = aggregate(&[run(Design::B, 100, 1, 1), run(Design::BTuned, 180, 1, 1)]);
        let standing = defaults_standing(&results).unwrap();
        assert!(
            standing.ends_with(
                "in 0 of 1 scenarios (not in reset-write-unkeyed: B-tuned 90.0% against B's 50.0%)"
            ),
            "{standing}"
        );
    }

    /// `design` in slow-tail: 200 operations, all successful, `calls_per_100` catalog calls per
    /// 100 operations, and `slow` of them taking a second (the rest 5 ms).
    fn tail(design: Design, calls_per_100: usize, slow: usize) -> RunMetrics {
        let mut m = crate::lab::metrics::testing::run(
            Scenario::SlowTail,
            design,
            1,
            (0..200).map(|_| true),
            1,
            1,
        );
        m.calls_total = (calls_per_100 * 2) as u64;
        m.calls_mean = calls_per_100 as f64 / 100.0;
        for l in m.latencies.iter_mut().rev().take(slow) {
            *l = Duration::from_secs(1);
        }
        m.latencies.sort();
        m
    }

    #[test]
    fn a_tie_on_success_and_calls_goes_to_the_lowest_p99_whatever_the_order() {
        // slow-tail: every design succeeds, at about one call per operation; A's and B-tuned's
        // users wait a second in their tail, B-hedged's do not. A is listed first, and makes
        // slightly fewer calls.
        let results = aggregate(&[
            tail(Design::A, 101, 4),
            tail(Design::BTuned, 102, 4),
            tail(Design::BHedged, 103, 0),
            tail(Design::C, 101, 4),
        ]);
        let r = &rankings(&results)[0];
        assert_eq!(r.best_success.len(), 4, "all tied on success");
        assert_eq!(r.pick().map(|a| a.design), Some(Design::BHedged));
        assert_eq!(
            r.pick_within(USER_P99).map(|a| a.design),
            Some(Design::BHedged)
        );
        assert_eq!(r.p99[0].design, Design::BHedged);
        assert_eq!(
            r.success[0].design,
            Design::A,
            "ties on success: fewest calls"
        );
        // Calls that differ by more than CALLS_TIED still decide before p99.
        let results = aggregate(&[tail(Design::A, 100, 4), tail(Design::BHedged, 120, 0)]);
        assert_eq!(
            rankings(&results)[0].pick().map(|a| a.design),
            Some(Design::A)
        );
    }

    #[test]
    fn a_spread_shows_its_seeds_only_when_they_differ() {
        let same = Spread {
            pooled: 0.5,
            min: 0.5,
            max: 0.5,
        };
        assert_eq!(spread(same, 100.0, 1), "50.0");
        let apart = Spread {
            pooled: 0.5,
            min: 0.4,
            max: 0.61,
        };
        assert_eq!(spread(apart, 100.0, 1), "50.0 [40.0-61.0]");
    }
}
