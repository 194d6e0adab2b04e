//! The outage lab: one command, no setup.
//!
//! ```text
//! cargo run --release -p retry-examples --bin outage-lab
//! cargo run --release -p retry-examples --bin outage-lab -- --quick   # CI: asserts the headlines
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use retry_examples::lab::{self, Design, LabConfig, Progress, Scenario, checks, report};

/// Every operation allocates hyper's connection buffers, requests, responses and tasks in
/// the lab's one process; glibc's allocator spent about a sixth of the lab's CPU on them at a
/// high `--load`, and with mimalloc the lab needs about a tenth less CPU per operation. The
/// designs' behaviour does not depend on it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Starts API -> middle -> catalog on 127.0.0.1, forces faults on the catalog, and measures
/// five retry designs side by side: A retries in every layer (backon and reqwest-retry at their
/// defaults), B has one retry owner (this library at its defaults), B-tuned the same with
/// examples/lab.toml, B-hedged is B-tuned with hedged catalog calls (in the slow and write
/// scenarios), C does not retry. Each scenario runs with several seeds; every figure is
/// reported over all of them with its spread.
///
/// Scenarios: always-503, 429-retry-after, 503-no-retry-after, transient-outage,
/// brief-slowdown, brief-slowdown-ignores-deadline, slow-catalog, slow-tail, reset-write-keyed,
/// reset-write-unkeyed, reset-write-reconciled, long-outage (twice --duration, 503 for three
/// quarters of it: `--scenario long-outage --duration 20` is a 30 s outage), tenant-429 (one
/// tenant over its quota), fleet-transient-outage (the middle as ten replicas). The fault
/// scenarios' catalogs serve 1.5 times the load.
///
/// Prints a table and a ranking, writes outage-lab.json and outage-lab.html (charts) under
/// --out. With --quick, runs every scenario briefly and exits non-zero if an asserted headline
/// property does not hold (see `retry_examples::lab::checks`): 1, or 2 when the lab itself fell
/// behind its schedule (a machine too busy to judge).
#[derive(Parser, Debug)]
#[command(name = "outage-lab", version)]
struct Args {
    /// Seconds of load per scenario: 4, or 2 with --quick (a fault that clears is followed by
    /// 5 s more, over which recovery is measured).
    #[arg(long, value_parser = positive)]
    duration: Option<f64>,
    /// Seconds of healthy load at the same rate before each scenario, not measured: the
    /// designs meet the fault warm, as a service that has been running does.
    #[arg(long, default_value_t = 10.0, value_parser = non_negative)]
    warmup: f64,
    /// User operations per second, per design and seed (Poisson arrivals); 40, or 20 with
    /// --quick (light enough for an unoptimised test build on 2 cores).
    #[arg(long, value_parser = positive)]
    load: Option<f64>,
    /// The first seed: seeds the load schedule, the injected faults and the registries' jitter.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// How many seeds each scenario runs with, side by side.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    seeds: u32,
    /// Scenarios to run (repeat the flag or give a comma list); all by default.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<Scenario>,
    /// Designs to run: A, B, B-tuned, B-hedged, C (repeat or comma list); all by default (all
    /// but A with --quick).
    #[arg(long, value_delimiter = ',')]
    design: Vec<Design>,
    /// B-tuned's upstream configuration (TOML, loaded through the registry; `RETRY__*`
    /// environment overrides apply).
    #[arg(long, default_value_os_t = lab::config::default_path())]
    config: PathBuf,
    /// Directory for the JSON and HTML reports.
    #[arg(long, default_value = "target/outage-lab")]
    out: PathBuf,
    /// Operations each design and seed serves at once; beyond it the API sheds (503 at once,
    /// counted as failed in the `shed` column). By default as many as a user can keep in
    /// flight (the load times the 15 s user timeout), lowered to fit the open-file limit.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_in_flight: Option<u32>,
    /// The long outage's durable queue on this PostgreSQL database (a schema per run, dropped
    /// after it) instead of an SQLite file in a temporary directory.
    #[arg(long)]
    database_url: Option<String>,
    /// Write every operation and every catalog request of each run to this directory, one
    /// tab-separated file of each per scenario, design and seed: which calls went when.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Two seconds of every scenario (about 20 s in all; every design side by side, the
    /// limited-capacity scenarios too), asserting the headline properties: B
    /// and B-tuned make at most one catalog call per operation under a dead catalog and no
    /// duplicate side effect; B-tuned is never below no retry's success by more than the
    /// spread (reported where the lab has shown it does not hold: see the report).
    #[arg(long)]
    quick: bool,
}

/// `--quick`'s exit code when an asserted property failed while the lab itself fell behind
/// its schedule: the machine, not necessarily the library, is to blame (1: a property failed
/// on a lab that kept up).
const INCONCLUSIVE: u8 = 2;

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds (0 or more)")),
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

struct Bar(ProgressBar);

impl Progress for Bar {
    fn begin(&self, ops: u64) {
        self.0.set_length(ops);
    }
    fn scenario(&self, scenario: Scenario) {
        self.0.set_message(scenario.name());
    }
    fn op_done(&self) {
        self.0.inc(1);
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let upstreams = match lab::config::LabUpstreams::load(&args.config) {
        Ok(u) => u,
        Err(errors) => {
            eprintln!("outage-lab: invalid configuration:\n{errors}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let defaults = LabConfig::default();
    let config = LabConfig {
        duration: Duration::from_secs_f64(args.duration.unwrap_or(if args.quick {
            2.0
        } else {
            defaults.duration.as_secs_f64()
        })),
        warmup: Duration::from_secs_f64(args.warmup),
        load: args
            .load
            .unwrap_or(if args.quick { 20.0 } else { defaults.load }),
        seed: args.seed,
        seeds: args.seeds,
        scenarios: if args.scenario.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            args.scenario
        },
        designs: if !args.design.is_empty() {
            let mut d = args.design;
            d.sort();
            d.dedup();
            d
        } else if args.quick {
            vec![Design::B, Design::BTuned, Design::BHedged, Design::C]
        } else {
            Design::ALL.to_vec()
        },
        // Quick mode checks counts and rates, not the storm's timing: the designs run side by
        // side in every scenario.
        isolate: !args.quick,
        out: args.out,
        upstreams,
        database_url: args.database_url,
        max_in_flight: args.max_in_flight.map(|n| n as usize),
        trace: args.trace,
    };
    // Before anything starts: a run the open-file limit cannot hold says so, with the fix.
    let limit = lab::files::raise_limit();
    if let Err(e) = lab::files::bounds(&config, limit.map(|l| l.soft)) {
        eprintln!("outage-lab: too few open files: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let bar = if args.quick {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{msg:32} [{bar:40}] {pos}/{len} ops  {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    eprintln!(
        "outage-lab: {} scenarios x {} designs x {} seeds, {} s of load each ({:.0} s of load \
         in all; operations still in flight finish after it)",
        config.scenarios.len(),
        config.designs.len(),
        config.seeds,
        config.duration.as_secs_f64(),
        config.measured_seconds()
    );
    let progress = Arc::new(Bar(bar.clone()));
    let results = runtime.block_on(lab::run(&config, progress));
    bar.finish_and_clear();
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("outage-lab: cannot start the servers: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let aggregates = results.aggregates();
    println!("{}", report::table(&aggregates));
    println!("{}\n", report::LEGEND);
    println!("{}", report::summary(&aggregates));
    if let Some(standing) = report::defaults_standing(&aggregates) {
        println!("{standing}\n");
    }
    if let Some(table) = report::long_outage(&aggregates) {
        println!("{table}");
    }
    if let Some(note) = report::transient_note(&config, &aggregates) {
        println!("transient-outage: {note}\n");
    }
    println!("{}", results.cpu.describe());
    println!("{}", report::schedule(&aggregates));
    println!("{}", results.describe_files());
    let violations = checks::check(&aggregates);
    let failing = violations.iter().filter(|v| v.asserted).count();
    let written = report::write(&config.out, &config, &results);
    match &written {
        Ok((json, html)) => println!("JSON: {}\nHTML: {}", json.display(), html.display()),
        Err(e) => eprintln!(
            "outage-lab: cannot write the report under {}: {e}",
            config.out.display()
        ),
    }
    for v in &violations {
        eprintln!("outage-lab: headline property: {v}");
    }
    if failing == 0 {
        println!(
            "headline properties asserted for the library's designs (B, B-tuned, B-hedged): all hold ({} reported, not asserted)",
            violations.len()
        );
    } else {
        eprintln!("outage-lab: {failing} asserted headline properties do not hold");
    }
    if written.is_err() {
        return std::process::ExitCode::FAILURE;
    }
    let lag = aggregates
        .iter()
        .map(|a| a.lag_p99)
        .max()
        .unwrap_or_default();
    if args.quick && failing > 0 && lag > checks::LAG_LIMIT {
        eprintln!(
            "outage-lab: inconclusive: the lab fell behind its own schedule ({} ms late, p99), \
             so the machine was too busy for these figures to judge the library; rerun on a \
             quieter machine (exit code {INCONCLUSIVE})",
            lag.as_millis()
        );
        return std::process::ExitCode::from(INCONCLUSIVE);
    }
    if args.quick && failing > 0 {
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
