//! Contention: 64 tasks on a two-worker runtime, every call to the same upstream (one budget,
//! one breaker), each attempt 10 µs of CPU. Reports time per call; throughput ratio = bare /
//! ours. (`figures contention` gives the interleaved ratio, median of several processes.)
//!
//! `cargo bench -p retry-benches --bench contention`

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::contention;

fn contention(c: &mut Criterion) {
    let rt = contention::runtime();
    let registry = contention::registry();
    let mut g = c.benchmark_group("contention_64_tasks_10us");
    g.bench_function("bare", |b| {
        b.iter_custom(|iters| contention::run(&rt, None, iters))
    });
    g.bench_function("retry_runtime_builder_call", |b| {
        b.iter_custom(|iters| contention::run(&rt, Some(&registry), iters))
    });
    g.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
