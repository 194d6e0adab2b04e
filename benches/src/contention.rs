//! Contention: [`TASKS`] tasks on a multi-thread runtime ([`WORKERS`] workers unless told
//! otherwise), every call to the same upstream (one registry entry, one budget, one breaker
//! window), each attempt [`ATTEMPT`] of CPU. Throughput ratio = the bare calls' wall time /
//! ours for the same number of calls. Ours is measured twice: through a `#[retry]` method (the
//! site keeps the upstream's entry) and through the builder (which looks the upstream up by
//! name on every call).

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

/// The workers the tasks run on, unless told otherwise.
pub const WORKERS: usize = 2;

/// The runtime the tasks run on: `workers` workers, time enabled.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
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

/// Who makes the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// The attempt alone.
    Bare,
    /// A `#[retry]` method.
    Macro,
    /// The builder's `call`.
    Builder,
}

/// The upstream's adapter, as an application writes it.
struct Catalog<'r> {
    registry: &'r Registry,
}

impl Catalog<'_> {
    #[retry_runtime::retry(upstream = "catalog", method = GET, registry = self.registry)]
    async fn fetch(&self) -> Result<u64, BenchError> {
        attempt().await
    }

    #[retry_runtime::retry(upstream = "catalog", method = GET, registry = self.registry)]
    async fn fetch_no_work(&self) -> Result<u64, BenchError> {
        no_work().await
    }
}

/// One call of `attempt` by `who`; `work` picks the `#[retry]` method that runs it.
async fn one_call<F, Fut>(who: Contender, registry: &Registry, work: bool, mut attempt: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, BenchError>>,
{
    let result = match who {
        Contender::Bare => attempt().await,
        Contender::Macro if work => Catalog { registry }.fetch().await,
        Contender::Macro => Catalog { registry }.fetch_no_work().await,
        Contender::Builder => {
            Retry::in_registry(registry, "catalog")
                .method(Method::GET)
                .call(attempt)
                .await
        }
    };
    result.expect("attempt")
}

/// One call as [`run`] makes it, with an attempt that does no work: what the call itself costs
/// each of the contending tasks (counted with callgrind on one thread).
pub async fn call_alone(who: Contender, registry: &Registry) -> u64 {
    one_call(who, registry, false, no_work).await
}

/// Runs `calls` calls by `who` spread over [`TASKS`] tasks, and returns the wall time of all of
/// them.
pub fn run(
    rt: &tokio::runtime::Runtime,
    who: Contender,
    registry: &Arc<Registry>,
    calls: u64,
) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|task| {
            let per_task = calls / TASKS + u64::from(task < calls % TASKS);
            let registry = registry.clone();
            rt.spawn(async move {
                for _ in 0..per_task {
                    black_box(one_call(who, &registry, true, attempt).await);
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
