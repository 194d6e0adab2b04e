//! Contention: 64 tasks on a two-worker runtime, every call to the same upstream (one budget,
//! one breaker), each attempt 10 µs of CPU. Reports time per call; throughput ratio = bare /
//! ours. (`figures contention` gives the interleaved ratio, median of several processes.)
//!
//! `cargo bench -p retry-benches --bench contention`

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::contention::{self, Contender};

fn contention(c: &mut Criterion) {
    let rt = contention::runtime(contention::WORKERS);
    let registry = contention::registry();
    let mut g = c.benchmark_group("contention_64_tasks_10us");
    let contenders = [
        ("bare", Contender::Bare),
        ("retry_runtime_macro", Contender::Macro),
        ("retry_runtime_builder_call", Contender::Builder),
    ];
    for (name, who) in contenders {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| contention::run(&rt, who, &registry, iters))
        });
    }
    g.finish();
}

criterion_group!(benches, contention);
criterion_main!(benches);
