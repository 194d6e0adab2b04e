//! The happy path as interleaved rounds: each round times `PER_ROUND` calls of every contender
//! in turn (the order rotating from round to round), so a slow phase of a shared machine hits
//! all of them alike, where criterion measures one contender after the other. Prints each
//! contender's median round (ns per call) and the median over rounds of its *overhead* (time
//! less the bare call's in the same round) relative to backon's.
//!
//! `cargo run --release -p retry-benches --bin happy-ratio`

use std::future::Future;
use std::time::Instant;

use retry_benches::happy;

const ROUNDS: usize = 61;
const PER_ROUND: u32 = 200_000;
const NAMES: [&str; 5] = [
    "bare",
    "#[retry]",
    "builder `run`",
    "builder `call`",
    "backon",
];
const BACKON: usize = 4;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `PER_ROUND` sequential calls (each contender's loop is its own function).
async fn time<F: Future<Output = u64>>(call: impl Fn() -> F) -> f64 {
    let start = Instant::now();
    let mut sum = 0;
    for _ in 0..PER_ROUND {
        sum += call().await;
    }
    std::hint::black_box(sum);
    start.elapsed().as_nanos() as f64 / f64::from(PER_ROUND)
}

fn main() {
    let (rt, registry) = happy::setup();
    let mut times: [Vec<f64>; NAMES.len()] = Default::default();
    rt.block_on(async {
        // Round 0 warms caches and the per-thread upstream entry.
        for round in 0..=ROUNDS {
            for turn in 0..NAMES.len() {
                let who = (turn + round) % NAMES.len();
                let ns = match who {
                    0 => time(happy::bare).await,
                    1 => time(|| happy::ours_macro(&registry)).await,
                    2 => time(|| happy::ours(&registry)).await,
                    3 => time(|| happy::ours_call(&registry)).await,
                    _ => time(happy::backon).await,
                };
                if round > 0 {
                    times[who].push(ns);
                }
            }
        }
    });
    println!("happy path, {ROUNDS} interleaved rounds x {PER_ROUND} calls (median round)\n");
    println!("| contender | ns / call | overhead (less bare) / backon's, median of rounds |");
    println!("|---|---|---|");
    let overhead = |who: usize| -> Vec<f64> {
        times[who]
            .iter()
            .zip(&times[0])
            .map(|(t, bare)| t - bare)
            .collect()
    };
    let backon = overhead(BACKON);
    for (who, name) in NAMES.iter().enumerate() {
        let ratio = match who {
            0 => "-".to_string(),
            _ => {
                let ours = overhead(who);
                let ratios = ours.iter().zip(&backon).map(|(o, b)| o / b);
                format!("{:.3}", median(ratios.collect()))
            }
        };
        println!("| {name} | {:.2} | {ratio} |", median(times[who].clone()));
    }
}
