//! Real HTTP on loopback, as interleaved rounds: each round sends `PER_ROUND` sequential GETs
//! through every contender in turn (in an order that rotates from round to round), so load from
//! other processes hits all of them alike. Prints
//! the median round (µs per request) and its ratio to plain reqwest.
//!
//! `cargo run --release -p retry-benches --bin http-ratio`

use std::time::{Duration, Instant};

use retry_benches::adapter::Catalog;
use retry_benches::get;
use retry_benches::server::Endpoint;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Retry, UpstreamConfig};

const ROUNDS: usize = 41;
const PER_ROUND: u32 = 200;

const PLAIN: usize = 0;
const BUILDER: usize = 1;
const SEND_PATH: usize = 2;
const ADAPTER: usize = 3;
const CONTENDERS: usize = 5; // the fifth: reqwest-middleware + reqwest-retry

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let addr = Endpoint::new(200).serve().await;
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

    let catalog = Catalog {
        client: client.clone(),
        url: url.clone(),
        registry: &registry,
    };

    // Per contender, the µs per request of each round. The order within a round rotates, so
    // no contender always runs first (right after the previous round's last one).
    let mut times: [Vec<f64>; CONTENDERS] = Default::default();
    for round in 0..=ROUNDS {
        for turn in 0..CONTENDERS {
            let who = (turn + round) % CONTENDERS;
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                match who {
                    PLAIN => {
                        get(&client, &url).await.expect("plain");
                    }
                    BUILDER => {
                        Retry::in_registry(&registry, "catalog")
                            .method(Method::GET)
                            .run(|_| get(&client, &url))
                            .await
                            .expect("ours");
                    }
                    SEND_PATH => {
                        Retry::in_registry(&registry, "catalog")
                            .method(Method::GET)
                            .run(|_| async {
                                let response = client.get(&url).send_attempt().await?;
                                Ok::<_, Error>(response.read_bytes().await?)
                            })
                            .await
                            .expect("send path");
                    }
                    ADAPTER => {
                        catalog.item().await.expect("adapter");
                    }
                    _ => {
                        let r = middleware.get(&url).send().await.expect("send");
                        assert!(r.status().is_success());
                        r.bytes().await.expect("body");
                    }
                }
            }
            // Round 0 warms connections and pools.
            if round > 0 {
                let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND);
                times[who].push(us);
            }
        }
    }
    let [plain, ours, send_path, adapter, rr] = times;
    let ratios = |v: &[f64]| -> f64 { median(v.iter().zip(&plain).map(|(x, p)| x / p).collect()) };
    println!("loopback GET, {ROUNDS} interleaved rounds x {PER_ROUND} requests (median round)\n");
    println!("| contender | µs / request | ratio to plain (median of per-round ratios) |");
    println!("|---|---|---|");
    println!("| plain reqwest | {:.1} | 1.000 |", median(plain.clone()));
    println!(
        "| retry-runtime builder | {:.1} | {:.3} |",
        median(ours.clone()),
        ratios(&ours)
    );
    println!(
        "| retry-runtime builder + `retry_runtime::http` send path | {:.1} | {:.3} |",
        median(send_path.clone()),
        ratios(&send_path)
    );
    println!(
        "| `#[retry]` adapter method + send path | {:.1} | {:.3} |",
        median(adapter.clone()),
        ratios(&adapter)
    );
    println!(
        "| reqwest-middleware + reqwest-retry | {:.1} | {:.3} |",
        median(rr.clone()),
        ratios(&rr)
    );
}
