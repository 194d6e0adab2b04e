//! Amplification under outage: calls reaching a dependency that always answers 503, per
//! operation, when two layers each retry (API -> middle -> catalog).
//!
//! - retry-runtime: nested `Retry` calls in one process; the outer call opens the operation
//!   scope and the inner one joins it (shared allowance, "already retried" signal);
//! - backon in each layer (in process);
//! - reqwest-retry in each layer, over real HTTP on loopback (a hyper middle service whose
//!   handler calls the catalog through reqwest-middleware + reqwest-retry).
//!
//! Every layer allows 3 attempts with 1-4 ms backoff. Counts are deterministic.
//!
//! `cargo run --release -p retry-benches --bin amplification`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use retry_benches::BenchError;
use retry_benches::server::{self, Endpoint};
use retry_runtime::{Method, Registry, Retry};

const OPERATIONS: [u64; 2] = [20, 200];

/// Runs `ops` operations one after another; returns (mean, max) catalog calls per operation.
async fn per_operation<F, Fut>(ops: u64, hits: &AtomicU64, mut operation: F) -> (f64, u64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (mut total, mut max) = (0, 0);
    for _ in 0..ops {
        let before = hits.load(Ordering::Relaxed);
        operation().await;
        let n = hits.load(Ordering::Relaxed) - before;
        total += n;
        max = max.max(n);
    }
    (total as f64 / ops as f64, max)
}

async fn catalog(hits: &AtomicU64) -> Result<(), BenchError> {
    hits.fetch_add(1, Ordering::Relaxed);
    Err(BenchError::Status(503))
}

async fn ours(registry: &Registry, hits: &AtomicU64) {
    let result = Retry::in_registry(registry, "middle")
        .method(Method::GET)
        .run(|_| async {
            Retry::in_registry(registry, "catalog")
                .method(Method::GET)
                .run(|_| catalog(hits))
                .await
        })
        .await;
    assert!(result.is_err());
}

fn backon_policy() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(1))
        .with_max_delay(Duration::from_millis(4))
        .with_max_times(2)
}

async fn backon_layers(hits: &AtomicU64) {
    use backon::Retryable;
    let middle = || async { (|| catalog(hits)).retry(backon_policy()).await };
    assert!(middle.retry(backon_policy()).await.is_err());
}

fn reqwest_retry_client() -> reqwest_middleware::ClientWithMiddleware {
    let policy = reqwest_retry::policies::ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(1), Duration::from_millis(4))
        .build_with_max_retries(2);
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    reqwest_middleware::ClientBuilder::new(client)
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            policy,
        ))
        .build()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "catalog always 503; API -> middle -> catalog; every layer: 3 attempts, 1-4 ms backoff\n"
    );
    println!("| design | operations | catalog calls / op (mean) | max |");
    println!("|---|---|---|---|");

    for (label, config) in [
        (
            "retry-runtime, nested Retry (breaker off)",
            retry_benches::fast_config().with_breaker(None),
        ),
        (
            "retry-runtime, nested Retry (defaults: breaker on)",
            retry_benches::fast_config(),
        ),
    ] {
        for ops in OPERATIONS {
            let registry = retry_benches::registry(&["middle", "catalog"], config.clone());
            let hits = AtomicU64::new(0);
            let (mean, max) = per_operation(ops, &hits, || ours(&registry, &hits)).await;
            println!("| {label} | {ops} | {mean:.2} | {max} |");
        }
    }

    for ops in OPERATIONS {
        let hits = AtomicU64::new(0);
        let (mean, max) = per_operation(ops, &hits, || backon_layers(&hits)).await;
        println!("| backon in each layer | {ops} | {mean:.2} | {max} |");
    }

    let catalog = Endpoint::new(503);
    let catalog_url = format!("http://{}/item", catalog.serve().await);
    let inner = Arc::new(reqwest_retry_client());
    let middle_addr = server::serve(move |_req| {
        let inner = inner.clone();
        let url = catalog_url.clone();
        async move {
            let status = match inner.get(&url).send().await {
                Ok(r) => r.status().as_u16(),
                Err(_) => 502,
            };
            server::respond(status)
        }
    })
    .await;
    let middle_url = format!("http://{middle_addr}/item");
    let outer = reqwest_retry_client();
    for ops in OPERATIONS {
        let (mean, max) = per_operation(ops, &catalog.hits, || async {
            let r = outer.get(&middle_url).send().await.expect("send");
            assert_eq!(r.status().as_u16(), 503);
        })
        .await;
        println!("| reqwest-retry in each layer (loopback HTTP) | {ops} | {mean:.2} | {max} |");
    }
}
