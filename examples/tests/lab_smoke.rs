//! A tiny outage lab (about a second of load per scenario) asserting how design B treats writes
//! whose response is lost, and how the limited catalog treats a caller that stopped waiting.
//! Counts only, never durations: the assertions hold however slow the machine is. (The
//! headline properties over every scenario are `outage-lab --quick`'s, run by `quick.rs`.)

use std::sync::Arc;
use std::time::Duration;

use retry_examples::lab::{self, Design, LabConfig, Quiet, RunMetrics, Scenario};

fn config(scenarios: &[Scenario], designs: &[Design]) -> LabConfig {
    LabConfig {
        duration: Duration::from_secs(1),
        // Counts of single operations: a cold start shows them as well as a warm one.
        warmup: Duration::ZERO,
        load: 15.0,
        seed: 7,
        seeds: 1,
        scenarios: scenarios.to_vec(),
        designs: designs.to_vec(),
        ..LabConfig::default()
    }
}

fn find(results: &[RunMetrics], scenario: Scenario, design: Design) -> &RunMetrics {
    results
        .iter()
        .find(|m| m.scenario == scenario && m.design == design)
        .expect("the run was made")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_retry_owner_never_duplicates_writes() {
    let writes = [Scenario::ResetKeyed, Scenario::ResetUnkeyed];
    let results = lab::run(&config(&writes, &[Design::B]), Arc::new(Quiet))
        .await
        .unwrap()
        .runs;
    let keyed = find(&results, Scenario::ResetKeyed, Design::B);
    assert!(keyed.ops > 0);
    assert_eq!(
        keyed.duplicates, 0,
        "a keyed write is deduplicated by the catalog"
    );
    assert!(
        keyed.calls_max > 1,
        "keyed writes whose response was lost are retried"
    );

    let unkeyed = find(&results, Scenario::ResetUnkeyed, Design::B);
    assert_eq!(unkeyed.duplicates, 0, "an unkeyed write is never repeated");
    assert!(
        unkeyed.calls_max <= 1,
        "not retried: {} calls",
        unkeyed.calls_max
    );
    assert!(
        unkeyed.ambiguous > 0,
        "a reset after the write is reported as ambiguous"
    );
    // A write reported as failed was never executed: it succeeded, was reported ambiguous,
    // or was refused before anything was sent (the throttle, while the catalog's resets count
    // against it).
    assert_eq!(
        unkeyed.failed_but_done, 0,
        "a write the catalog executed was reported as failed"
    );
    assert!(unkeyed.ok + unkeyed.ambiguous > 0);
}

/// The brief slowdown's catalog has one worker and serves a queued request whose client has
/// gone, unless the client said how long it would wait (design B propagates that): a request
/// whose caller stopped waiting before a worker was free is skipped, not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limited_catalog_skips_work_whose_caller_stopped_waiting() {
    use retry_examples::lab::catalog::{self, CatalogState};
    use retry_runtime::propagation::DEADLINE_MS;

    let state = CatalogState::new(Scenario::Slowdown, 7, Duration::from_secs(5), 40.0);
    let server = catalog::start(state.clone()).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/orders/1", server.url());

    let cases = [
        (None, 200, "no deadline sent: served"),
        (Some("60000"), 200, "the caller still waits: served"),
        (
            Some("0"),
            504,
            "the caller had stopped waiting when the worker was free: skipped",
        ),
    ];
    for (waits_ms, status, why) in cases {
        let mut request = client.get(&url);
        if let Some(ms) = waits_ms {
            request = request.header(DEADLINE_MS, ms);
        }
        assert_eq!(request.send().await.unwrap().status(), status, "{why}");
    }
    assert_eq!(state.counts().calls[&1], 3, "all three reached the catalog");
}
