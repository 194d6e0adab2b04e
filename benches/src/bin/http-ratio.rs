//! Real HTTP on loopback, as interleaved rounds: each round sends `PER_ROUND` sequential GETs
//! through every contender in turn, so load from other processes hits all of them alike. Prints
//! the median round (µs per request) and its ratio to plain reqwest.
//!
//! `cargo run --release -p retry-benches --bin http-ratio`

use std::time::{Duration, Instant};

use retry_benches::get;
use retry_benches::server::Endpoint;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Method, Retry, UpstreamConfig};

const ROUNDS: usize = 41;
const PER_ROUND: u32 = 200;

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

    let mut plain = Vec::new();
    let mut ours = Vec::new();
    let mut rr = Vec::new();
    let mut send_path = Vec::new();
    for round in 0..=ROUNDS {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            get(&client, &url).await.expect("plain");
        }
        let p = t.elapsed();
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            Retry::in_registry(&registry, "catalog")
                .method(Method::GET)
                .run(|_| get(&client, &url))
                .await
                .expect("ours");
        }
        let o = t.elapsed();
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            let r = middleware.get(&url).send().await.expect("send");
            assert!(r.status().is_success());
            r.bytes().await.expect("body");
        }
        let m = t.elapsed();
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            Retry::in_registry(&registry, "catalog")
                .method(Method::GET)
                .run(|_| async {
                    let response = client.get(&url).send_attempt().await?;
                    Ok::<_, Error>(response.read_bytes().await?)
                })
                .await
                .expect("send path");
        }
        let h = t.elapsed();
        if round == 0 {
            continue; // warm-up: connections, pools
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(PER_ROUND);
        plain.push(us(p));
        ours.push(us(o));
        rr.push(us(m));
        send_path.push(us(h));
    }
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
        "| reqwest-middleware + reqwest-retry | {:.1} | {:.3} |",
        median(rr.clone()),
        ratios(&rr)
    );
}
