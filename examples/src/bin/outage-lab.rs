//! The outage lab: one command, no setup.
//!
//! ```text
//! cargo run --release -p retry-examples --bin outage-lab
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use retry_examples::lab::{self, Design, LabConfig, Progress, Scenario, report};

/// Starts API -> middle -> catalog on 127.0.0.1, forces faults on the catalog, and measures
/// three retry designs side by side: A retries in every layer (3 x 3 attempts), B has one retry
/// owner (shared allowance, budget, deadline propagation, breaker, bulkhead), C does not retry.
///
/// Scenarios: always-503, 429-retry-after, 503-no-retry-after, transient-outage,
/// brief-slowdown, slow-catalog, reset-write-keyed, reset-write-unkeyed, reset-write-reconciled.
///
/// Prints a table, writes outage-lab.json and outage-lab.html (charts) under --out.
#[derive(Parser, Debug)]
#[command(name = "outage-lab", version)]
struct Args {
    /// Seconds of load per scenario (the three designs run side by side).
    #[arg(long, default_value_t = 5.0, value_parser = positive)]
    duration: f64,
    /// User operations per second, per design (Poisson arrivals).
    #[arg(long, default_value_t = 40.0, value_parser = positive)]
    load: f64,
    /// Seeds the load schedule, the injected faults and the registries' jitter.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Scenarios to run (repeat the flag or give a comma list); all by default.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<Scenario>,
    /// Designs to run: A, B, C (repeat or comma list); all by default.
    #[arg(long, value_delimiter = ',')]
    design: Vec<Design>,
    /// Design B's upstream configuration (TOML, loaded through the registry; `RETRY__*`
    /// environment overrides apply).
    #[arg(long, default_value_os_t = lab::config::default_path())]
    config: PathBuf,
    /// Directory for the JSON and HTML reports.
    #[arg(long, default_value = "target/outage-lab")]
    out: PathBuf,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

struct Bar(ProgressBar);

impl Progress for Bar {
    fn scenario(&self, scenario: Scenario, ops: u64) {
        self.0.set_position(0);
        self.0.set_length(ops);
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
    let config = LabConfig {
        duration: Duration::from_secs_f64(args.duration),
        load: args.load,
        seed: args.seed,
        scenarios: if args.scenario.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            args.scenario
        },
        designs: if args.design.is_empty() {
            Design::ALL.to_vec()
        } else {
            let mut d = args.design;
            d.sort();
            d.dedup();
            d
        },
        out: args.out,
        upstreams,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{prefix} {msg:24} [{bar:40}] {pos}/{len} ops  {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let progress = Arc::new(Bar(bar.clone()));
    let mut scenario_no = 0;
    let total = config.scenarios.len();
    let results = runtime.block_on(async {
        let mut all = Vec::new();
        for scenario in config.scenarios.clone() {
            scenario_no += 1;
            bar.set_prefix(format!("[{scenario_no}/{total}]"));
            let one = LabConfig {
                scenarios: vec![scenario],
                seed: config.seed.wrapping_add(scenario_no as u64 - 1),
                ..config.clone()
            };
            all.extend(lab::run(&one, progress.clone()).await?);
        }
        Ok::<_, std::io::Error>(all)
    });
    bar.finish_and_clear();
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("outage-lab: cannot start the servers: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("{}", report::table(&results));
    println!("{}\n", report::LEGEND);
    match report::write(&config.out, &config, &results) {
        Ok((json, html)) => {
            println!("JSON: {}\nHTML: {}", json.display(), html.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "outage-lab: cannot write the report under {}: {e}",
                config.out.display()
            );
            std::process::ExitCode::FAILURE
        }
    }
}
