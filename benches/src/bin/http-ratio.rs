//! Real HTTP on loopback, as interleaved rounds: each round sends `PER_ROUND` sequential GETs
//! through every contender in turn (in an order that rotates from round to round), so load from
//! other processes hits all of them alike. Prints the median round (µs per request) and its
//! ratio to plain reqwest. The contenders are in `retry_benches::loopback`.
//!
//! `cargo run --release -p retry-benches --bin http-ratio`

use std::time::Instant;

use retry_benches::loopback::Loopback;

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
    let lo = Loopback::start().await;
    // Per contender, the µs per request of each round. The order within a round rotates, so
    // no contender always runs first (right after the previous round's last one).
    let mut times: [Vec<f64>; CONTENDERS] = Default::default();
    for round in 0..=ROUNDS {
        for turn in 0..CONTENDERS {
            let who = (turn + round) % CONTENDERS;
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                match who {
                    PLAIN => drop(lo.plain().await.expect("plain")),
                    BUILDER => drop(lo.builder().await.expect("builder")),
                    SEND_PATH => drop(lo.send_path(&lo.registry).await.expect("send path")),
                    ADAPTER => drop(lo.adapter().await.expect("adapter")),
                    _ => drop(lo.reqwest_retry().await),
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
