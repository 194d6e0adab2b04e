//! Design B's upstream configuration: `examples/lab.toml`, loaded through the registry.
//!
//! Interim: until TOML loading lands in the runtime, the same values are built in code here.

use std::sync::Arc;
use std::time::Duration;

use retry_runtime::backoff::{Backoff, Jitter};
use retry_runtime::breaker::BreakerConfig;
use retry_runtime::budget::BudgetConfig;
use retry_runtime::{Registry, UpstreamConfig};

use super::designs::Registries;

/// The lab's configuration file, shipped in the repository.
pub const LAB_TOML: &str = include_str!("../../lab.toml");

fn backoff() -> Backoff {
    Backoff::new()
        .with_initial(Duration::from_millis(100))
        .with_multiplier(2.0)
        .with_max_backoff(Duration::from_millis(400))
        .with_jitter(Jitter::Full)
}

fn upstreams() -> Vec<(String, UpstreamConfig)> {
    let mut breaker = BreakerConfig::new();
    breaker.failure_rate = 0.75;
    breaker.window = Duration::from_secs(5);
    breaker.open_for = Duration::from_secs(1);
    let middle = UpstreamConfig::new()
        .with_backoff(backoff())
        .with_attempt_timeout(Duration::from_millis(1500))
        .with_deadline(Duration::from_millis(2500))
        .with_breaker(Some(breaker));
    let catalog = UpstreamConfig::new()
        .with_backoff(backoff())
        .with_attempt_timeout(Duration::from_millis(300))
        .with_deadline(Duration::from_millis(2500))
        .with_bulkhead(Some(32))
        .with_budget(BudgetConfig::new().with_ratio(0.5))
        .with_breaker(Some(breaker));
    vec![("middle".into(), middle), ("catalog".into(), catalog)]
}

/// Fresh registries for one run (budgets, breakers and bulkheads start empty), seeded.
pub fn registries(seed: u64) -> Registries {
    let build = |seed: u64| {
        let mut builder = Registry::builder().seed(seed);
        for (name, config) in upstreams() {
            builder = builder.upstream(name, config);
        }
        Arc::new(builder.build().expect("the lab's configuration is valid"))
    };
    Registries {
        api: build(seed),
        middle: build(seed ^ 0x5eed),
    }
}
