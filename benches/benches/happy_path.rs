//! Happy path, one process: time per call when the first attempt succeeds.
//!
//! `cargo bench -p retry-benches --bench happy_path`

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::happy;

fn happy_path(c: &mut Criterion) {
    let (rt, registry) = happy::setup();
    let tower = happy::tower_service();
    let mut g = c.benchmark_group("happy_path");
    g.bench_function("bare", |b| b.to_async(&rt).iter(happy::bare));
    g.bench_function("retry_runtime_builder", |b| {
        b.to_async(&rt).iter(|| happy::ours(&registry))
    });
    g.bench_function("retry_runtime_builder_call", |b| {
        b.to_async(&rt).iter(|| happy::ours_call(&registry))
    });
    g.bench_function("retry_runtime_macro", |b| {
        b.to_async(&rt).iter(|| happy::ours_macro(&registry))
    });
    g.bench_function("backon", |b| b.to_async(&rt).iter(happy::backon));
    g.bench_function("tower_retry_tps_budget", |b| {
        b.to_async(&rt).iter(|| happy::tower(&tower))
    });
    g.bench_function("tokio_retry", |b| b.to_async(&rt).iter(happy::tokio_retry));
    g.finish();
}

criterion_group!(benches, happy_path);
criterion_main!(benches);
