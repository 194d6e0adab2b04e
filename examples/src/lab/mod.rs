//! The outage lab: API -> middle -> catalog on loopback, under forced faults, for each retry
//! design of spec 004; see `src/bin/outage-lab.rs` for the command.
//!
//! For each scenario the three designs run **side by side**, each with its own catalog, middle
//! and API servers and the same seeded load schedule, so they see the same operations, the
//! same faults on the same requests, and the same clock. A scenario where the catalog's
//! capacity is the point (`brief-slowdown`) runs them one after another instead, so one
//! design's retry storm does not take the machine from the others.
//!
//! - [`scenarios`]: the faults.
//! - [`servers`]: the HTTP servers; [`catalog`]: the dependency and its counters.
//! - [`designs`]: how the API and the middle call downstream under A, B and C.
//! - [`config`]: design B's registry entries.
//! - [`load`]: the load driver; [`metrics`]: what is measured; [`report`]: table, JSON, HTML.

pub mod catalog;
pub mod config;
pub mod designs;
pub mod load;
pub mod metrics;
pub mod report;
pub mod scenarios;
pub mod servers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

pub use designs::Design;
pub use metrics::RunMetrics;
pub use scenarios::Scenario;

/// How often the catalog's concurrency is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The longest the lab waits for operations still in flight after the load stops.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// What to run.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// How long the load runs per scenario.
    pub duration: Duration,
    /// Operations per second, per design.
    pub load: f64,
    /// Seeds the load, the faults and the registries' jitter.
    pub seed: u64,
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The designs.
    pub designs: Vec<Design>,
    /// Where the report goes.
    pub out: PathBuf,
    /// Design B's upstreams (`examples/lab.toml`).
    pub upstreams: config::LabUpstreams,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            duration: Duration::from_secs(5),
            load: 40.0,
            seed: 42,
            scenarios: Scenario::ALL.to_vec(),
            designs: Design::ALL.to_vec(),
            out: PathBuf::from("target/outage-lab"),
            upstreams: config::LabUpstreams::builtin(),
        }
    }
}

/// Called as the lab progresses.
pub trait Progress: Send + Sync {
    /// A scenario starts; `ops` operations will run in it (all designs together).
    fn scenario(&self, scenario: Scenario, ops: u64);
    /// One operation ended.
    fn op_done(&self);
}

/// No progress output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn scenario(&self, _: Scenario, _: u64) {}
    fn op_done(&self) {}
}

/// Runs every scenario under every design and returns the metrics, scenario-major.
pub async fn run(
    config: &LabConfig,
    progress: Arc<dyn Progress>,
) -> std::io::Result<Vec<RunMetrics>> {
    let mut results = Vec::new();
    for (i, scenario) in config.scenarios.iter().copied().enumerate() {
        let seed = config.seed.wrapping_add(i as u64);
        let schedule = Arc::new(load::schedule(seed, config.load, config.duration));
        progress.scenario(scenario, (schedule.len() * config.designs.len()) as u64);
        // Side by side, the designs share the machine: a design whose retries saturate its
        // catalog would slow the others' too where capacity is the point of the scenario.
        let groups: Vec<Vec<Design>> = if scenario.workers().is_some() {
            config.designs.iter().map(|d| vec![*d]).collect()
        } else {
            vec![config.designs.clone()]
        };
        for designs in groups {
            results.extend(
                run_side_by_side(config, scenario, seed, &schedule, &designs, &progress).await?,
            );
        }
    }
    Ok(results)
}

/// Runs `designs` at once on one scenario and returns their metrics, in design order.
async fn run_side_by_side(
    config: &LabConfig,
    scenario: Scenario,
    seed: u64,
    schedule: &Arc<Vec<Duration>>,
    designs: &[Design],
    progress: &Arc<dyn Progress>,
) -> std::io::Result<Vec<RunMetrics>> {
    let mut results = Vec::new();
    let mut chains = Vec::new();
    for design in designs.iter().copied() {
        let state = catalog::CatalogState::new(scenario, seed, config.duration);
        let catalog_server = catalog::start(state.clone()).await?;
        let chain = designs::start(
            design,
            scenario.write_contract(),
            catalog_server.url(),
            config.upstreams.registries(seed),
        )
        .await?;
        chains.push((design, state, catalog_server, chain));
    }
    // Let every server reach its accept loop before the clock starts.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let mut runs = JoinSet::new();
    for (design, state, _, chain) in &chains {
        state.start(start);
        let (design, state) = (*design, state.clone());
        let api = chain.api.url();
        let schedule = schedule.clone();
        let progress = progress.clone();
        runs.spawn(async move {
            let sampler = tokio::spawn(sample(state.clone(), start));
            let done = move || progress.op_done();
            let records = tokio::time::timeout(
                schedule.last().copied().unwrap_or_default() + DRAIN_LIMIT,
                load::drive(api, scenario.is_write(), &schedule, start, done),
            )
            .await
            .unwrap_or_default();
            // Let the catalog finish work nobody waits for any more (design A's orphans).
            let quiet_by = Instant::now() + Duration::from_secs(2);
            while state.in_flight() > 0 && Instant::now() < quiet_by {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sampler.abort();
            (design, state, records)
        });
    }
    let mut finished = Vec::new();
    while let Some(run) = runs.join_next().await {
        finished.push(run.expect("a run task does not panic"));
    }
    finished.sort_by_key(|(design, ..)| *design);
    for (design, state, records) in finished {
        let series = state.series();
        results.push(metrics::compute(
            scenario,
            design,
            &records,
            &state.counts(),
            series,
            config.duration,
        ));
    }
    drop(chains);
    Ok(results)
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
