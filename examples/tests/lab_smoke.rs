//! A tiny outage lab (about a second of load per scenario) asserting the headline properties.
//! Counts only, never durations: the assertions hold however slow the machine is.

use std::sync::Arc;
use std::time::Duration;

use retry_examples::lab::{self, Design, LabConfig, Quiet, RunMetrics, Scenario};

fn config(scenarios: &[Scenario], designs: &[Design]) -> LabConfig {
    LabConfig {
        duration: Duration::from_secs(1),
        load: 15.0,
        seed: 7,
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
async fn one_retry_owner_bounds_calls_and_never_duplicates_writes() {
    let results = lab::run(
        &config(&[Scenario::Always503], &[Design::A, Design::B]),
        Arc::new(Quiet),
    )
    .await
    .unwrap();
    let a = find(&results, Scenario::Always503, Design::A);
    let b = find(&results, Scenario::Always503, Design::B);
    assert!(
        a.ops > 0 && a.ops == b.ops,
        "same schedule: {} vs {}",
        a.ops,
        b.ops
    );
    assert_eq!(a.ok + b.ok, 0, "the catalog is dead");
    assert!(
        b.calls_max <= 3,
        "B: at most 3 catalog calls per operation, got {}",
        b.calls_max
    );
    assert!(
        a.calls_mean > 3.0,
        "A: retries multiply across layers, got {:.2} calls per operation",
        a.calls_mean
    );

    let writes = [Scenario::ResetKeyed, Scenario::ResetUnkeyed];
    let results = lab::run(&config(&writes, &[Design::B]), Arc::new(Quiet))
        .await
        .unwrap();
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
    assert_eq!(
        unkeyed.ok + unkeyed.ambiguous,
        unkeyed.ops,
        "every unkeyed write either succeeded or was reported ambiguous, none silently failed"
    );
}
