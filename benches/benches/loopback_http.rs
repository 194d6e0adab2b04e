//! Real HTTP on loopback: a GET to a hyper server in the same process, plain reqwest vs through
//! our retry vs reqwest-middleware + reqwest-retry. The first attempt succeeds.
//!
//! `cargo bench -p retry-benches --bench loopback_http`

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use retry_benches::adapter::Catalog;
use retry_benches::get;
use retry_benches::server::Endpoint;
use retry_runtime::{Method, Retry, UpstreamConfig};

fn loopback_http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let addr = rt.block_on(Endpoint::new(200).serve());
    let url = format!("http://{addr}/item");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let registry = retry_benches::registry(&["catalog"], UpstreamConfig::new());
    let policy = reqwest_retry::policies::ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(500), Duration::from_secs(2))
        .build_with_max_retries(2);
    let middleware = reqwest_middleware::ClientBuilder::new(client.clone())
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            policy,
        ))
        .build();

    let mut g = c.benchmark_group("loopback_http");
    g.bench_function("plain_reqwest", |b| {
        b.to_async(&rt).iter(|| get(&client, &url))
    });
    g.bench_function("retry_runtime_builder", |b| {
        b.to_async(&rt).iter(|| {
            Retry::in_registry(&registry, "catalog")
                .method(Method::GET)
                .run(|_attempt| get(&client, &url))
        })
    });
    let catalog = Catalog {
        client: client.clone(),
        url: url.clone(),
        registry: &registry,
    };
    g.bench_function("retry_macro_send_path", |b| {
        b.to_async(&rt).iter(|| catalog.item())
    });
    g.bench_function("reqwest_middleware_retry", |b| {
        b.to_async(&rt).iter(|| async {
            let response = middleware.get(&url).send().await.expect("send");
            assert!(response.status().is_success());
            response.bytes().await.expect("body")
        })
    });
    g.finish();
}

criterion_group!(benches, loopback_http);
criterion_main!(benches);
