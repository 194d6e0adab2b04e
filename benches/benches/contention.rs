//! Contention: many tasks on two threads, every call going to one upstream (one budget,
//! one breaker, one registry entry). Reports time per call; throughput ratio = bare / ours.
//!
//! Three attempt bodies: `empty` (returns at once: pure overhead, the worst case for the
//! ratio), `yield` (one trip through the scheduler, the cheapest stand-in for real I/O) and
//! `work10us` (about 7 µs of CPU, a small but real attempt: the ratio then shows what sharing
//! one budget and breaker costs when calls do something).
//!
//! `cargo bench -p retry-benches --bench contention`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::BenchError;
use retry_runtime::{Method, Registry, Retry, UpstreamConfig};

const TASKS: u64 = 64;

#[derive(Clone, Copy)]
enum Body {
    Empty,
    Yield,
    Work,
}

/// About 7 µs of CPU on the 2-core VM the numbers in BENCHMARKS.md come from. Never inlined:
/// inlined into two different futures, the same loop compiled to code running at twice the
/// speed in one of them, and the ratio measured the compiler rather than the retry layer.
#[inline(never)]
fn spin() -> u64 {
    let mut x = 0u64;
    for i in 0..20_000u64 {
        x = black_box(x.wrapping_add(i));
    }
    x
}

async fn attempt(body: Body) -> Result<u64, BenchError> {
    match body {
        Body::Empty => {}
        Body::Yield => tokio::task::yield_now().await,
        Body::Work => {
            black_box(spin());
        }
    }
    Ok(black_box(1))
}

async fn ours(registry: &Registry, body: Body) -> u64 {
    Retry::in_registry(registry, "catalog")
        .method(Method::GET)
        .run(|_| attempt(body))
        .await
        .unwrap()
}

/// Spreads `iters` calls over `TASKS` tasks, half on each of two threads (a current-thread
/// runtime each, all sharing one registry entry), and returns the wall time of all of them.
/// Two single-threaded runtimes rather than one with two workers: the work-stealing scheduler
/// sometimes leaves a worker parked while tasks that never wait keep the other busy, and the
/// bare and the retrying contender then ran on different numbers of threads.
fn run(
    rts: &[tokio::runtime::Runtime; 2],
    registry: Option<&Arc<Registry>>,
    body: Body,
    iters: u64,
) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (thread, rt) in rts.iter().enumerate() {
            let registry = registry.cloned();
            scope.spawn(move || {
                rt.block_on(async move {
                    let handles: Vec<_> = (0..TASKS / 2)
                        .map(|i| {
                            let task = i * 2 + thread as u64;
                            let per_task = iters / TASKS + u64::from(task < iters % TASKS);
                            let registry = registry.clone();
                            tokio::spawn(async move {
                                for _ in 0..per_task {
                                    match &registry {
                                        Some(r) => black_box(ours(r, body).await),
                                        None => black_box(attempt(body).await.unwrap()),
                                    };
                                }
                            })
                        })
                        .collect();
                    for h in handles {
                        h.await.expect("task");
                    }
                })
            });
        }
    });
    start.elapsed()
}

fn contention(c: &mut Criterion) {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    };
    let rts = [runtime(), runtime()];
    let registry = Arc::new(retry_benches::registry(&["catalog"], UpstreamConfig::new()));
    let mut g = c.benchmark_group("contention_64_tasks_2_threads");
    for (name, body) in [
        ("empty", Body::Empty),
        ("yield", Body::Yield),
        ("work10us", Body::Work),
    ] {
        g.bench_function(format!("bare/{name}"), |b| {
            b.iter_custom(|iters| run(&rts, None, body, iters))
        });
        g.bench_function(format!("retry_runtime_builder/{name}"), |b| {
            b.iter_custom(|iters| run(&rts, Some(&registry), body, iters))
        });
    }
    g.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
