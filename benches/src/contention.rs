//! Contention: [`TASKS`] tasks on a two-worker multi-thread runtime, every call to the same
//! upstream (one registry entry, one budget, one breaker window), each attempt [`ATTEMPT`] of
//! CPU. Throughput ratio = the bare calls' wall time / ours for the same number of calls.

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_runtime::{Method, Registry, Retry, UpstreamConfig};

use crate::BenchError;

/// Tasks sharing the upstream.
pub const TASKS: u64 = 64;

/// The CPU time of one attempt.
pub const ATTEMPT: Duration = Duration::from_micros(10);

/// The runtime the tasks run on: two workers, time enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime")
}

/// A registry with `catalog`, defaults.
pub fn registry() -> Arc<Registry> {
    Arc::new(crate::registry(&["catalog"], UpstreamConfig::new()))
}

/// Spins for [`ATTEMPT`] by the clock: the same work whatever the compiler makes of the loop.
#[inline(never)]
fn spin() -> u64 {
    let start = Instant::now();
    let mut spins = 0u64;
    while start.elapsed() < ATTEMPT {
        spins = black_box(spins + 1);
    }
    spins
}

async fn attempt() -> Result<u64, BenchError> {
    Ok(black_box(spin()))
}

async fn no_work() -> Result<u64, BenchError> {
    Ok(black_box(1))
}

/// One call of `attempt`: bare (`None`) or through the builder's `call` in `registry`.
async fn one_call<F, Fut>(registry: Option<&Registry>, mut attempt: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, BenchError>>,
{
    let result = match registry {
        Some(r) => {
            Retry::in_registry(r, "catalog")
                .method(Method::GET)
                .call(attempt)
                .await
        }
        None => attempt().await,
    };
    result.expect("attempt")
}

/// One call as [`run`] makes it, with an attempt that does no work: what the call itself costs
/// each of the contending tasks (counted with callgrind on one thread).
pub async fn call_alone(registry: Option<&Registry>) -> u64 {
    one_call(registry, no_work).await
}

/// Runs `calls` calls spread over [`TASKS`] tasks, bare (`None`) or through the builder's
/// `call` in `registry`, and returns the wall time of all of them.
pub fn run(rt: &tokio::runtime::Runtime, registry: Option<&Arc<Registry>>, calls: u64) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|task| {
            let per_task = calls / TASKS + u64::from(task < calls % TASKS);
            let registry = registry.cloned();
            rt.spawn(async move {
                for _ in 0..per_task {
                    black_box(one_call(registry.as_deref(), attempt).await);
                }
            })
        })
        .collect();
    rt.block_on(async {
        for h in handles {
            h.await.expect("task");
        }
    });
    start.elapsed()
}
