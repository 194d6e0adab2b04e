//! Real HTTP on loopback, time per request: a GET to a hyper server in the same process, plain
//! reqwest vs the builder and a `#[retry]` adapter on our send path vs backon and
//! reqwest-middleware + reqwest-retry. The first attempt succeeds. (`figures http` counts the
//! instructions; `figures http-wall` gives the interleaved wall-clock ratio.)
//!
//! `cargo bench -p retry-benches --bench loopback_http`

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::loopback::Loopback;

fn loopback_http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let lo = rt.block_on(Loopback::start());
    let mut g = c.benchmark_group("loopback_http");
    g.bench_function("plain_reqwest", |b| b.to_async(&rt).iter(|| lo.plain()));
    g.bench_function("retry_runtime_builder_send_path", |b| {
        b.to_async(&rt).iter(|| lo.builder())
    });
    g.bench_function("retry_macro_send_path", |b| {
        b.to_async(&rt).iter(|| lo.adapter())
    });
    g.bench_function("backon", |b| b.to_async(&rt).iter(|| lo.backon()));
    g.bench_function("reqwest_middleware_retry", |b| {
        b.to_async(&rt).iter(|| lo.reqwest_retry())
    });
    g.finish();
}

criterion_group!(benches, loopback_http);
criterion_main!(benches);
