//! The happy path as interleaved rounds: each round times `PER_ROUND` calls of every contender
//! in turn (the order rotating from round to round), so a slow phase of a shared machine hits
//! all of them alike, where criterion measures one contender after the other. A process
//! reports each contender's median round (ns per call) and the median over rounds of its
//! *overhead* (time less the bare call's in the same round) relative to backon's.
//!
//! One process is not enough (see `retry_benches::processes`): this runs itself `PROCESSES`
//! times and prints each process's figures and their median.
//!
//! `cargo run --release -p retry-benches --bin happy-ratio [PROCESSES]` (default 9; 1 runs a
//! single process in place)

use std::future::Future;
use std::time::Instant;

use retry_benches::happy;
use retry_benches::processes::{self, Columns, median_ratio};

const ROUNDS: usize = 61;
const PER_ROUND: u32 = 200_000;
const NAMES: [&str; 5] = [
    "bare",
    "#[retry]",
    "builder `run`",
    "builder `call`",
    "backon",
];
const BARE: usize = 0;
const BACKON: usize = 4;
/// Set in a child process: measure once and print one machine-readable line.
const CHILD: &str = "HAPPY_RATIO_CHILD";
const DEFAULT_PROCESSES: usize = 9;

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

/// One process's figures, per contender: its median round (ns per call) and the median over
/// rounds of its overhead relative to backon's (`NaN` for the bare call), one after the other.
fn measure() -> [f64; 2 * NAMES.len()] {
    let (rt, registry) = happy::setup();
    let mut times: [Vec<f64>; NAMES.len()] = Default::default();
    rt.block_on(async {
        // Round 0 warms caches and the per-thread upstream entry.
        for round in 0..=ROUNDS {
            for turn in 0..NAMES.len() {
                let who = (turn + round) % NAMES.len();
                let ns = match who {
                    BARE => time(happy::bare).await,
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
    let overhead = |who: usize| -> Vec<f64> {
        times[who]
            .iter()
            .zip(&times[BARE])
            .map(|(t, bare)| t - bare)
            .collect()
    };
    let backon = overhead(BACKON);
    processes::figures(&times, |who| match who {
        BARE => f64::NAN,
        _ => median_ratio(&overhead(who), &backon),
    })
}

fn main() {
    let processes = processes::count_from_args("happy-ratio", DEFAULT_PROCESSES);
    let runs = processes::measure_in(CHILD, processes, measure);
    println!(
        "happy path: {} process(es), each {ROUNDS} interleaved rounds x {PER_ROUND} calls\n",
        runs.len()
    );
    processes::print_table(
        &NAMES,
        &runs,
        Columns {
            time: "ns / call",
            time_digits: 2,
            ratio: "overhead (less bare) / backon's",
            reference: (BARE, "-"),
        },
    );
}
