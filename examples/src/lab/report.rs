//! The lab's outputs: a terminal table, a JSON file and an HTML report with SVG charts.
//!
//! The charts are drawn with plotters' SVG backend; text is emitted as SVG `<text>` elements,
//! laid out with plotters' built-in size estimate, so no font file is needed to produce them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plotters::prelude::*;
use serde_json::{Value, json};

use super::LabConfig;
use super::designs::Design;
use super::metrics::{RECOVERED_AT, RECOVERY_BIN, RunMetrics};
use super::scenarios::Scenario;

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn recovery_text(m: &RunMetrics) -> String {
    match m.recovery {
        None => "-".to_owned(),
        Some(None) => "never".to_owned(),
        Some(Some(d)) => format!("{:.2}s", d.as_secs_f64()),
    }
}

/// The readable terminal table.
pub fn table(results: &[RunMetrics]) -> String {
    let header = [
        "scenario", "design", "ops", "ok%", "calls/op", "max", "p50ms", "p95ms", "p99ms", "peak",
        "recovery", "ambig", "dup", "lost-ack",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for m in results {
        rows.push(vec![
            m.scenario.name().to_owned(),
            format!("{} {}", m.design.letter(), m.design.describe()),
            m.ops.to_string(),
            format!("{:.1}", m.success_rate() * 100.0),
            format!("{:.2}", m.calls_mean),
            m.calls_max.to_string(),
            ms(m.latency[0]),
            ms(m.latency[1]),
            ms(m.latency[2]),
            m.peak_concurrency.to_string(),
            recovery_text(m),
            m.ambiguous.to_string(),
            m.duplicates.to_string(),
            m.failed_but_done.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
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
calls/op, max: catalog requests per user operation (mean, max); peak: most requests in flight at the catalog;
recovery: time from the fault clearing until every later 250 ms bin of operations succeeds at >= 95 %;
ambig: writes reported as 'outcome unknown'; dup: writes the catalog executed more than once;
lost-ack: writes reported as failed that the catalog had executed.";

/// The JSON document.
pub fn json(config: &LabConfig, results: &[RunMetrics]) -> Value {
    let runs: Vec<Value> = results
        .iter()
        .map(|m| {
            json!({
                "scenario": m.scenario.name(),
                "design": m.design.letter(),
                "design_name": m.design.describe(),
                "operations": m.ops,
                "succeeded": m.ok,
                "success_rate": m.success_rate(),
                "ambiguous": m.ambiguous,
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
                },
                "peak_concurrency": m.peak_concurrency,
                "concurrency_over_time": m.concurrency.iter().map(|(t, n)| json!([t, n])).collect::<Vec<_>>(),
                "recovery_s": match m.recovery {
                    None => Value::Null,
                    Some(None) => json!("never"),
                    Some(Some(d)) => json!(d.as_secs_f64()),
                },
                "duplicate_side_effects": m.duplicates,
                "failed_but_executed": m.failed_but_done,
            })
        })
        .collect();
    json!({
        "lab": "outage-lab",
        "config": {
            "duration_s": config.duration.as_secs_f64(),
            "load_ops_per_s": config.load,
            "seed": config.seed,
            "scenarios": config.scenarios.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "designs": config.designs.iter().map(|d| d.letter()).collect::<Vec<_>>(),
            "recovery_bin_ms": RECOVERY_BIN.as_millis() as u64,
            "recovered_at": RECOVERED_AT,
        },
        "runs": runs,
    })
}

fn color(design: Design) -> RGBColor {
    match design {
        Design::A => RGBColor(214, 69, 65),
        Design::B => RGBColor(38, 120, 178),
        Design::C => RGBColor(130, 130, 130),
    }
}

const CHART: (u32, u32) = (440, 300);

/// One series of a bar chart: its label, its shade, and its value for a run.
type Series<'a> = (&'a str, f64, &'a dyn Fn(&RunMetrics) -> f64);

/// Grouped bars: one group per design, one bar per series.
fn bars(
    title: &str,
    runs: &[&RunMetrics],
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
        let names: Vec<String> = runs
            .iter()
            .map(|m| format!("{} {}", m.design.letter(), m.design.describe()))
            .collect();
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
    runs: &[&RunMetrics],
    outage: Option<(f64, f64)>,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, CHART).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = runs
            .iter()
            .flat_map(|m| m.concurrency.iter().map(|p| p.0))
            .fold(1.0, f64::max);
        let y_max = runs
            .iter()
            .flat_map(|m| m.concurrency.iter().map(|p| p.1))
            .max()
            .unwrap_or(1)
            .max(1) as f64
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption("Requests in flight at the catalog", ("sans-serif", 16))
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
                    m.concurrency.iter().map(|(t, n)| (*t, *n as f64)),
                    c.stroke_width(2),
                ))?
                .label(format!("{} {}", m.design.letter(), m.design.describe()))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 12, y)], c.stroke_width(2))
                });
        }
        legend(&mut chart)?;
        root.present()?;
    }
    Ok(svg)
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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML report: the table, then per scenario its three charts.
pub fn html(
    config: &LabConfig,
    results: &[RunMetrics],
) -> Result<String, Box<dyn std::error::Error>> {
    let mut h = String::new();
    h.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Outage lab</title>\n<style>\
         body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
         table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\
         td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}\
         .charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee}\
         code{background:#f4f4f4;padding:1px 4px}</style></head><body>\n",
    );
    let _ = writeln!(
        h,
        "<h1>Outage lab</h1><p>API &rarr; middle &rarr; catalog on loopback. {} s of load at {} operations/s per design, seed {}. \
         Design A retries in every layer, B has one retry owner (shared allowance, budget, deadline, breaker, bulkhead), C does not retry.</p>",
        config.duration.as_secs_f64(),
        config.load,
        config.seed
    );
    let _ = writeln!(h, "<pre>{}</pre>", escape(LEGEND));
    h.push_str("<table><tr>");
    for col in [
        "scenario",
        "design",
        "ops",
        "ok %",
        "calls/op",
        "max",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "peak",
        "recovery",
        "ambiguous",
        "duplicates",
        "lost acks",
    ] {
        let _ = write!(h, "<th>{col}</th>");
    }
    h.push_str("</tr>\n");
    for m in results {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{} {}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            m.scenario.name(),
            m.design.letter(),
            m.design.describe(),
            m.ops,
            m.success_rate() * 100.0,
            m.calls_mean,
            m.calls_max,
            ms(m.latency[0]),
            ms(m.latency[1]),
            ms(m.latency[2]),
            m.peak_concurrency,
            recovery_text(m),
            m.ambiguous,
            m.duplicates,
            m.failed_but_done
        );
    }
    h.push_str("</table>\n");
    let mut scenarios: Vec<Scenario> = results.iter().map(|m| m.scenario).collect();
    scenarios.dedup();
    for scenario in scenarios {
        let runs: Vec<&RunMetrics> = results.iter().filter(|m| m.scenario == scenario).collect();
        let _ = writeln!(
            h,
            "<h2 id=\"{0}\">{0}</h2><p>{1}</p><div class=\"charts\">",
            scenario.name(),
            escape(scenario.describe())
        );
        let ms_of = |i: usize| move |m: &RunMetrics| m.latency[i].as_secs_f64() * 1000.0;
        let (p50, p95, p99) = (ms_of(0), ms_of(1), ms_of(2));
        h.push_str(&bars(
            "Latency (ms)",
            &runs,
            &[("p50", 0.45, &p50), ("p95", 0.75, &p95), ("p99", 1.0, &p99)],
            None,
        )?);
        let mean = |m: &RunMetrics| m.calls_mean;
        let max = |m: &RunMetrics| f64::from(m.calls_max);
        h.push_str(&bars(
            "Catalog calls per operation",
            &runs,
            &[("mean", 0.55, &mean), ("max", 1.0, &max)],
            Some((3.0, "3 attempts")),
        )?);
        let outage = scenario
            .outage_window(config.duration)
            .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
        h.push_str(&concurrency(&runs, outage)?);
        h.push_str("</div>\n");
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

/// Writes `outage-lab.json` and `outage-lab.html` into `dir`; returns their paths.
pub fn write(
    dir: &Path,
    config: &LabConfig,
    results: &[RunMetrics],
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
