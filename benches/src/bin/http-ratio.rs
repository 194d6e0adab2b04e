//! Real HTTP on loopback, as interleaved rounds: each round sends `PER_ROUND` sequential GETs
//! through every contender in turn (in an order that rotates from round to round), so load from
//! other processes hits all of them alike. A process reports each contender's median round (µs
//! per request) and the median over rounds of its ratio to plain reqwest. The contenders are in
//! `retry_benches::loopback`.
//!
//! One process is not enough (see `retry_benches::processes`; plain reqwest read 54 µs in one
//! and 67 µs in the next): this runs itself `PROCESSES` times and prints each process's figures
//! and their median.
//!
//! `cargo run --release -p retry-benches --bin http-ratio [PROCESSES]` (default 9; 1 runs a
//! single process in place)

use std::time::Instant;

use retry_benches::loopback::Loopback;
use retry_benches::processes::{self, Columns, median_ratio};

const ROUNDS: usize = 41;
const PER_ROUND: u32 = 200;
const NAMES: [&str; 5] = [
    "plain reqwest",
    "retry-runtime builder",
    "retry-runtime builder + `retry_runtime::http` send path",
    "`#[retry]` adapter method + send path",
    "reqwest-middleware + reqwest-retry",
];
const PLAIN: usize = 0;
const BUILDER: usize = 1;
const SEND_PATH: usize = 2;
const ADAPTER: usize = 3;
/// Set in a child process: measure once and print one machine-readable line.
const CHILD: &str = "HTTP_RATIO_CHILD";
const DEFAULT_PROCESSES: usize = 9;

/// One process's figures, per contender: its median round (µs per request) and the median over
/// rounds of its ratio to plain reqwest, one after the other.
fn measure() -> [f64; 2 * NAMES.len()] {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let times = rt.block_on(async {
        let lo = Loopback::start().await;
        // Per contender, the µs per request of each round. The order within a round rotates,
        // so no contender always runs first (right after the previous round's last one).
        let mut times: [Vec<f64>; NAMES.len()] = Default::default();
        for round in 0..=ROUNDS {
            for turn in 0..NAMES.len() {
                let who = (turn + round) % NAMES.len();
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
        times
    });
    processes::figures(&times, |who| median_ratio(&times[who], &times[PLAIN]))
}

fn main() {
    let processes = processes::count_from_args("http-ratio", DEFAULT_PROCESSES);
    let runs = processes::measure_in(CHILD, processes, measure);
    println!(
        "loopback GET: {} process(es), each {ROUNDS} interleaved rounds x {PER_ROUND} requests\n",
        runs.len()
    );
    processes::print_table(
        &NAMES,
        &runs,
        Columns {
            time: "µs / request",
            time_digits: 1,
            ratio: "ratio to plain",
            reference: (PLAIN, "1"),
        },
    );
}
