//! One contender, `N` sequential loopback GETs, for deterministic instruction counts: wall time
//! on a shared VM moves by more than the 3 % being measured, instruction counts do not.
//!
//! ```sh
//! cargo build --release -p retry-benches --bin http-one
//! for who in plain builder send; do for n in 1000 3000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg-$who-$n.out \
//!     target/release/http-one $who $n 2>&1 | grep Collected
//! done; done
//! ```
//!
//! Instructions per request = (collected at 3000 - collected at 1000) / 2000, which cancels
//! start-up. Contenders: `plain` (reqwest), `builder` (our loop around the same reqwest call),
//! `send` (our loop and the `retry_runtime::http` send path: propagation headers, evidence,
//! body read inside the attempt), `send-quiet` (the same to an upstream with
//! `propagate = false`: no propagation headers), `macro` (`send` through a `#[retry]` adapter),
//! `reqwest-retry` (reqwest-middleware + reqwest-retry), `sendonly` (the send path outside any
//! loop), `timer` (plain
//! inside `tokio::time::timeout`, the cost of one timer).

use std::time::Duration;

use retry_benches::adapter::Catalog;
use retry_benches::get;
use retry_benches::server::Endpoint;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Retry, UpstreamConfig};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let who = args.next().unwrap_or_else(|| "plain".to_owned());
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let addr = Endpoint::new(200).serve().await;
    let url = format!("http://{addr}/item");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let registry = retry_benches::registry(&["catalog"], UpstreamConfig::new());
    let quiet = retry_benches::registry(&["catalog"], UpstreamConfig::new().with_propagate(false));
    let policy = reqwest_retry::policies::ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(500), Duration::from_secs(2))
        .build_with_max_retries(2);
    let middleware = reqwest_middleware::ClientBuilder::new(client.clone())
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            policy,
        ))
        .build();
    let catalog = Catalog {
        client: client.clone(),
        url: url.clone(),
        registry: &registry,
    };
    for _ in 0..200 {
        get(&client, &url).await.expect("warm-up");
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        match who.as_str() {
            "plain" => {
                get(&client, &url).await.expect("plain");
            }
            "builder" => {
                Retry::in_registry(&registry, "catalog")
                    .method(Method::GET)
                    .run(|_| get(&client, &url))
                    .await
                    .expect("builder");
            }
            "send" => {
                Retry::in_registry(&registry, "catalog")
                    .method(Method::GET)
                    .run(|_| async {
                        let response = client.get(&url).send_attempt().await?;
                        Ok::<_, Error>(response.read_bytes().await?)
                    })
                    .await
                    .expect("send path");
            }
            "send-quiet" => {
                Retry::in_registry(&quiet, "catalog")
                    .method(Method::GET)
                    .run(|_| async {
                        let response = client.get(&url).send_attempt().await?;
                        Ok::<_, Error>(response.read_bytes().await?)
                    })
                    .await
                    .expect("send path");
            }
            "macro" => {
                catalog.item().await.expect("adapter");
            }
            "reqwest-retry" => {
                let r = middleware.get(&url).send().await.expect("send");
                assert!(r.status().is_success());
                r.bytes().await.expect("body");
            }
            "sendonly" => {
                let response = client.get(&url).send_attempt().await.expect("send");
                response.read_bytes().await.expect("body");
            }
            "timer" => {
                tokio::time::timeout(Duration::from_secs(1), get(&client, &url))
                    .await
                    .expect("in time")
                    .expect("timer");
            }
            other => {
                panic!(
                    "unknown contender {other:?}: plain, builder, send, send-quiet, macro, reqwest-retry, sendonly, timer"
                )
            }
        }
    }
    let per_request = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("{who}: {per_request:.1} µs per request (wall clock, rough)");
}
