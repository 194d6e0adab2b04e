//! The outage lab: API -> middle -> catalog on loopback, under forced faults, for each retry
//! design; see `src/bin/outage-lab.rs` for the command.
//!
//! For each scenario every design runs **side by side** with every seed, each (design, seed)
//! with its own catalog, middle and API servers and the seed's load schedule, so the designs
//! see the same operations, the same faults on the same requests, and the same clock. A
//! scenario where the catalog's capacity is the point (the brief slowdowns) runs the designs
//! one after another instead (unless [`LabConfig::isolate`] is off), so one design's retry
//! storm does not take the machine from the others. A scenario's load starts when the previous
//! one's load has ended: its stragglers (design A's operations wait up to 13 s) finish while
//! the next one runs, on catalogs of their own, unless what the next one may open does not fit
//! beside what the lab holds then: it then waits for the earlier ones to finish. Each design
//! and seed serves a bounded number of operations at once, and sheds the rest ([`files`]).
//!
//! - [`scenarios`]: the faults.
//! - [`servers`]: the HTTP servers; [`catalog`]: the dependency and its counters.
//! - [`designs`]: how the API and the middle call downstream under each design.
//! - [`config`]: designs B and B-tuned's registry entries.
//! - [`files`]: the open-file limit and the bound on operations in flight;
//! - [`load`]: the load driver, and [`users`], its HTTP client; [`metrics`]: what is measured,
//!   and its spread across seeds;
//!   [`cpu`]: the lab's own CPU use; [`checks`]: the headline properties `--quick` asserts;
//!   [`report`]: table, JSON, HTML.

pub mod catalog;
pub mod checks;
pub mod config;
pub mod cpu;
pub mod designs;
pub mod files;
pub mod load;
pub mod metrics;
pub mod report;
pub mod scenarios;
pub mod servers;
pub mod trace;
pub mod users;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use designs::Design;
pub use metrics::{Aggregate, RunMetrics};
pub use scenarios::Scenario;

/// The default warm-up before each scenario ([`LabConfig::warmup`]).
pub const WARMUP: Duration = Duration::from_secs(10);

/// Mixed into a run's seed for its warm-up schedule.
const WARMUP_SEED: u64 = 0x5741_524d;

/// How often the catalog's concurrency is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The longest the lab waits for operations still in flight after the load stops (longer
/// than a user waits, [`load::USER_TIMEOUT`]).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// What to run.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// How long the load runs per scenario (the fault's span: a fault that clears is followed
    /// by [`scenarios::AFTER_FAULT`] more).
    pub duration: Duration,
    /// How long each chain serves healthy load at the same rate before a scenario's measured
    /// load starts, so that its budget, throttle and breaker have seen a service that has been
    /// running (a service meets an outage warm, not at start-up). Not in the figures.
    pub warmup: Duration,
    /// Operations per second, per design and seed.
    pub load: f64,
    /// The first seed: seeds the load, the faults and the registries' jitter.
    pub seed: u64,
    /// How many seeds each scenario runs with (side by side); each figure is reported over
    /// all of them, with its spread between seeds.
    pub seeds: u32,
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The designs.
    pub designs: Vec<Design>,
    /// Run a scenario whose catalog has a limited capacity one design at a time.
    pub isolate: bool,
    /// Where the report goes.
    pub out: PathBuf,
    /// Designs B and B-tuned's upstreams.
    pub upstreams: config::LabUpstreams,
    /// The durable queue's PostgreSQL database (a schema per run); `None`: an SQLite file in
    /// a temporary directory.
    pub database_url: Option<String>,
    /// Operations each design and seed serves at once (`None`: as many as a user can keep in
    /// flight at the load, within the open-file limit; see [`files::bound`]).
    pub max_in_flight: Option<usize>,
    /// Where `--trace` writes every operation and catalog request of each run ([`trace`]);
    /// `None`: nowhere.
    pub trace: Option<PathBuf>,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            duration: Duration::from_secs(4),
            warmup: WARMUP,
            load: 40.0,
            seed: 42,
            seeds: 3,
            scenarios: Scenario::ALL.to_vec(),
            designs: Design::ALL.to_vec(),
            isolate: true,
            out: PathBuf::from("target/outage-lab"),
            upstreams: config::LabUpstreams::builtin(),
            database_url: None,
            max_in_flight: None,
            trace: None,
        }
    }
}

impl LabConfig {
    /// The seeds of the `index`th scenario.
    pub fn seeds_of(&self, index: usize) -> Vec<u64> {
        (0..u64::from(self.seeds.max(1)))
            .map(|k| self.seed.wrapping_add(index as u64).wrapping_add(k * 1_000))
            .collect()
    }

    /// The designs that run in `scenario` (see [`Design::runs_in`]).
    pub fn designs_in(&self, scenario: Scenario) -> Vec<Design> {
        self.designs
            .iter()
            .copied()
            .filter(|d| d.runs_in(scenario))
            .collect()
    }

    /// Seconds of load in a run of this configuration, warm-ups included (without the
    /// drains).
    pub fn measured_seconds(&self) -> f64 {
        self.scenarios
            .iter()
            .map(|s| {
                let rounds = if self.isolate && s.isolated() {
                    self.designs_in(*s).len()
                } else {
                    1
                };
                rounds as f64 * (self.warmup + s.run_length(self.duration)).as_secs_f64()
            })
            .sum()
    }
}

/// Called as the lab progresses.
pub trait Progress: Send + Sync {
    /// The run starts; `ops` operations will run in it (all scenarios, designs and seeds).
    fn begin(&self, ops: u64);
    /// A scenario's load starts.
    fn scenario(&self, scenario: Scenario);
    /// One operation ended.
    fn op_done(&self);
}

/// No progress output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&self, _: u64) {}
    fn scenario(&self, _: Scenario) {}
    fn op_done(&self) {}
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct LabResults {
    /// One entry per scenario x design x seed, scenario-major, then design, then seed.
    pub runs: Vec<RunMetrics>,
    /// The lab's own CPU use over the whole run.
    pub cpu: cpu::CpuUse,
    /// The bounds on operations in flight the run used, per scenario.
    pub bounds: files::Bounds,
    /// The open-file limit, after the lab raised it (`None`: unknown here).
    pub file_limit: Option<files::FileLimit>,
    /// The most files the process held open at once (sampled; `None`: not measurable here).
    pub peak_files: Option<usize>,
}

impl LabResults {
    /// One line on the lab's open files: the bound, the limit and the peak.
    pub fn describe_files(&self) -> String {
        let mut out = format!("lab {}", self.bounds.describe());
        match (self.peak_files, self.file_limit) {
            (Some(peak), Some(limit)) => {
                let _ = std::fmt::Write::write_fmt(
                    &mut out,
                    format_args!(
                        "; at most {peak} files open at once, of a limit of {}{}",
                        limit.soft,
                        limit
                            .raised_from
                            .map_or_else(String::new, |from| format!(" (raised from {from})"))
                    ),
                );
                if peak as f64 > 0.9 * limit.soft as f64 {
                    out.push_str(
                        ": near the limit, so some connections may have failed for want of a \
                         file; lower --load, --seeds or --max-in-flight",
                    );
                }
            }
            (Some(peak), None) => {
                let _ = std::fmt::Write::write_fmt(
                    &mut out,
                    format_args!("; at most {peak} files open at once"),
                );
            }
            _ => {}
        }
        out
    }
}

impl LabResults {
    /// The runs of each scenario x design, pooled over seeds, in report order.
    pub fn aggregates(&self) -> Vec<Aggregate> {
        metrics::aggregate(&self.runs)
    }
}

/// Runs every scenario under every design and seed.
pub async fn run(config: &LabConfig, progress: Arc<dyn Progress>) -> std::io::Result<LabResults> {
    let file_limit = files::raise_limit();
    let bounds =
        files::bounds(config, file_limit.map(|l| l.soft)).map_err(std::io::Error::other)?;
    let meter = cpu::Meter::start();
    let peak_files = files::PeakFiles::start();
    let limit = file_limit.map_or(usize::MAX, |l| l.soft as usize);
    let config = Arc::new(config.clone());
    let plan: Vec<(Scenario, Vec<u64>)> = config
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, config.seeds_of(i)))
        .collect();
    let total: usize = plan
        .iter()
        .map(|(scenario, seeds)| {
            let length = scenario.run_length(config.duration);
            let ops: usize = seeds
                .iter()
                .map(|seed| load::schedule(*seed, config.load, length).len())
                .sum();
            ops * config.designs_in(*scenario).len()
        })
        .sum();
    progress.begin(total as u64);
    let mut results = Vec::new();
    let mut pending: JoinSet<std::io::Result<Vec<RunMetrics>>> = JoinSet::new();
    for (scenario, seeds) in plan {
        let bound = bounds.of(scenario).expect("a bound per scenario");
        if config.isolate && scenario.isolated() {
            // Alone on the machine: what runs before finishes first.
            while let Some(done) = pending.join_next().await {
                results.extend(done.expect("a scenario task does not panic")?);
            }
            for design in config.designs_in(scenario) {
                progress.scenario(scenario);
                results.extend(
                    run_together(
                        config.clone(),
                        scenario,
                        seeds.clone(),
                        vec![design],
                        progress.clone(),
                        None,
                        bound.per_chain,
                    )
                    .await?,
                );
            }
        } else {
            // Beside earlier scenarios still finishing only while the files allow it.
            while !pending.is_empty()
                && files::open_now().is_some_and(|n| n + bound.files_needed() > limit)
            {
                if let Some(done) = pending.join_next().await {
                    results.extend(done.expect("a scenario task does not panic")?);
                }
            }
            progress.scenario(scenario);
            let (started, load_start) = oneshot::channel();
            pending.spawn(run_together(
                config.clone(),
                scenario,
                seeds,
                config.designs_in(scenario),
                progress.clone(),
                Some(started),
                bound.per_chain,
            ));
            // The next scenario starts when this one's load ends.
            if let Ok(start) = load_start.await {
                tokio::time::sleep_until(start + scenario.run_length(config.duration)).await;
            }
        }
    }
    while let Some(done) = pending.join_next().await {
        results.extend(done.expect("a scenario task does not panic")?);
    }
    let order = |s: Scenario| config.scenarios.iter().position(|x| *x == s);
    results.sort_by_key(|m| (order(m.scenario), m.design, m.seed));
    Ok(LabResults {
        runs: results,
        cpu: cpu::CpuUse {
            operations: total as u64,
            ..meter.finish()
        },
        bounds,
        file_limit,
        peak_files: peak_files.map(files::PeakFiles::finish),
    })
}

/// Runs `designs` x `seeds` at once on one scenario and returns their metrics. `started`
/// learns when the load starts; each API serves at most `max_in_flight` operations at once.
async fn run_together(
    config: Arc<LabConfig>,
    scenario: Scenario,
    seeds: Vec<u64>,
    designs: Vec<Design>,
    progress: Arc<dyn Progress>,
    started: Option<oneshot::Sender<Instant>>,
    max_in_flight: usize,
) -> std::io::Result<Vec<RunMetrics>> {
    let mut chains = Vec::new();
    let duration = scenario.run_length(config.duration);
    for seed in seeds.iter().copied() {
        let schedule = Arc::new(load::schedule(seed, config.load, duration));
        for design in designs.iter().copied() {
            let state = catalog::CatalogState::new(scenario, seed, duration, config.load);
            let catalog_server = catalog::start(state.clone()).await?;
            let chain = designs::start(
                design,
                scenario.write_contract(),
                catalog_server.url(),
                config
                    .upstreams
                    .fleet(design, seed, scenario.middle_replicas()),
                config.database_url.as_deref(),
                max_in_flight,
            )
            .await?;
            chains.push((design, seed, schedule.clone(), state, catalog_server, chain));
        }
    }
    // Let every server reach its accept loop before the clock starts.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The warm-up: healthy operations (ids the catalog serves without the fault) at the same
    // rate, ending where the measured load starts.
    let warmup_start = Instant::now();
    let start = warmup_start + config.warmup;
    let mut warmups = JoinSet::new();
    for (_, seed, _, _, _, chain) in &chains {
        let schedule = load::schedule(seed ^ WARMUP_SEED, config.load, config.warmup);
        let api = chain.api.addr();
        let write = scenario.is_write();
        warmups.spawn(async move {
            load::drive(
                api,
                write,
                &schedule,
                warmup_start,
                catalog::WARMUP_IDS,
                max_in_flight,
                || {},
            )
            .await
        });
    }
    tokio::time::sleep_until(start).await;
    if let Some(started) = started {
        let _ = started.send(start);
    }
    let mut runs = JoinSet::new();
    for (design, seed, schedule, state, _, chain) in &chains {
        state.start(start);
        let (design, seed, state, schedule) = (*design, *seed, state.clone(), schedule.clone());
        let api = chain.api.addr();
        let refusals = chain.local_refusals.clone();
        let progress = progress.clone();
        let queue = chain.durable.as_ref().map(|tier| tier.queue.clone());
        runs.spawn(async move {
            let sampler = tokio::spawn(sample(state.clone(), start));
            let backlog = Arc::new(std::sync::Mutex::new(Vec::new()));
            let backlog_sampler = queue
                .clone()
                .map(|queue| tokio::spawn(sample_backlog(queue, start, backlog.clone())));
            let done = move || progress.op_done();
            let records = tokio::time::timeout(
                schedule.last().copied().unwrap_or_default() + DRAIN_LIMIT,
                load::drive(
                    api,
                    scenario.is_write(),
                    &schedule,
                    start,
                    1,
                    max_in_flight,
                    done,
                ),
            )
            .await
            .unwrap_or_default();
            // Let the catalog finish work nobody waits for any more (design A's orphans).
            let quiet_by = Instant::now() + Duration::from_secs(2);
            while state.in_flight() > 0 && Instant::now() < quiet_by {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The durable tier's backlog drains after the outage: wait for it (bounded).
            if let Some(queue) = &queue {
                let drained_by = Instant::now() + DRAIN_LIMIT;
                while queue.outstanding().await.unwrap_or(0) > 0 && Instant::now() < drained_by {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
            }
            if let Some(sampler) = backlog_sampler {
                sampler.abort();
            }
            // The last word: the backlog when the run ended (empty once drained).
            if let Some(queue) = &queue
                && let Ok(n) = queue.outstanding().await
            {
                backlog
                    .lock()
                    .unwrap()
                    .push((start.elapsed().as_secs_f64(), n));
            }
            sampler.abort();
            let refused = refusals.get();
            let backlog = std::mem::take(&mut *backlog.lock().unwrap());
            (design, seed, state, records, refused, backlog)
        });
    }
    // The warm-up's stragglers ended long before the measured load did.
    while warmups.join_next().await.is_some() {}
    let mut results = Vec::new();
    while let Some(run) = runs.join_next().await {
        let (design, seed, state, records, refused, backlog) =
            run.expect("a run task does not panic");
        let run = metrics::Run {
            scenario,
            design,
            seed,
            duration,
        };
        let counts = state.counts();
        if let Some(dir) = &config.trace {
            trace::write(dir, &run, &records, &counts)?;
        }
        let mut metrics = metrics::compute(run, &records, &counts, state.series());
        metrics.local_refusals = refused;
        metrics.set_backlog(backlog);
        results.push(metrics);
    }
    drop(chains);
    Ok(results)
}

/// Samples the durable queue's outstanding tasks every [`SAMPLE_EVERY`] into `into`.
async fn sample_backlog(
    queue: designs::LabQueue,
    start: Instant,
    into: Arc<std::sync::Mutex<Vec<(f64, u64)>>>,
) {
    let mut tick = tokio::time::interval_at(start, SAMPLE_EVERY);
    loop {
        tick.tick().await;
        if let Ok(n) = queue.outstanding().await {
            into.lock()
                .unwrap()
                .push((start.elapsed().as_secs_f64(), n));
        }
    }
}

/// Samples the catalog's in-flight peak every [`SAMPLE_EVERY`] into its series.
async fn sample(state: Arc<catalog::CatalogState>, start: Instant) {
    let mut tick = tokio::time::interval_at(start + SAMPLE_EVERY, SAMPLE_EVERY);
    loop {
        tick.tick().await;
        let peak = state.take_interval_peak();
        state.record_sample(start.elapsed().as_secs_f64(), peak);
    }
}
