//! Reproduces the AWS "Exponential Backoff And Jitter" OCC contention simulation with
//! `retry_runtime::backoff::Backoff` and prints it next to a re-run of the simulator AWS
//! published with the post (<https://github.com/aws-samples/aws-arch-backoff-simulator>,
//! `src/backoff_simulator.py`, unchanged, seeds 1-3, 100 runs per cell).
//!
//! `cargo run --release -p retry-benches --bin jitter-sim`

use retry_benches::sim::{self, Strategy};

const SEEDS: [u64; 3] = [1, 2, 3];
const RUNS: u32 = 100;

/// The published simulator re-run: (clients, [(time ms, calls); 5]) in `Strategy::ALL` order.
const PUBLISHED: [(usize, [(f64, f64); 5]); 6] = [
    (
        10,
        [
            (3437.0, 50.5),
            (382.0, 51.0),
            (729.0, 42.5),
            (464.0, 38.9),
            (433.0, 37.7),
        ],
    ),
    (
        20,
        [
            (14687.0, 151.4),
            (599.0, 151.8),
            (1669.0, 108.2),
            (993.0, 99.9),
            (824.0, 101.0),
        ],
    ),
    (
        30,
        [
            (22672.0, 278.3),
            (779.0, 287.8),
            (2632.0, 182.6),
            (1647.0, 171.6),
            (1244.0, 180.2),
        ],
    ),
    (
        40,
        [
            (29554.0, 435.7),
            (957.0, 466.9),
            (3535.0, 263.0),
            (2291.0, 249.3),
            (1700.0, 272.3),
        ],
    ),
    (
        50,
        [
            (36177.0, 623.8),
            (1136.0, 689.7),
            (4264.0, 347.3),
            (2927.0, 332.9),
            (2199.0, 374.2),
        ],
    ),
    (
        100,
        [
            (62984.0, 1851.2),
            (2036.0, 2425.4),
            (6552.0, 812.3),
            (4965.0, 796.4),
            (4559.0, 1002.9),
        ],
    ),
];

struct Cell {
    time: f64,
    time_lo: f64,
    time_hi: f64,
    calls: f64,
}

fn cell(clients: usize, strategy: Strategy) -> Cell {
    let runs: Vec<_> = SEEDS
        .iter()
        .map(|&seed| sim::mean(clients, strategy, seed, RUNS))
        .collect();
    let n = runs.len() as f64;
    Cell {
        time: runs.iter().map(|r| r.time_ms).sum::<f64>() / n,
        time_lo: runs.iter().map(|r| r.time_ms).fold(f64::INFINITY, f64::min),
        time_hi: runs.iter().map(|r| r.time_ms).fold(0.0, f64::max),
        calls: runs.iter().map(|r| r.calls).sum::<f64>() / n,
    }
}

fn main() {
    println!(
        "OCC contention simulation: base 5 ms, cap 2 s, network |N(10 ms, 2 ms)| per hop, \
         {RUNS} runs x seeds {SEEDS:?}"
    );
    println!("cells: ours = mean time ms [range over seeds], mean calls | published re-run\n");
    print!("| clients |");
    for s in Strategy::ALL {
        print!(" {} |", s.name());
    }
    println!();
    print!("|---|");
    for _ in Strategy::ALL {
        print!("---|");
    }
    println!();
    let mut failures = Vec::new();
    for (clients, published) in PUBLISHED {
        let cells: Vec<Cell> = Strategy::ALL.iter().map(|&s| cell(clients, s)).collect();
        print!("| {clients} |");
        for (c, (pt, pc)) in cells.iter().zip(published) {
            print!(
                " {:.0} [{:.0}-{:.0}], {:.1} calls \u{2016} pub {pt:.0}, {pc:.1} |",
                c.time, c.time_lo, c.time_hi, c.calls
            );
        }
        println!();
        // The claims the published table supports, checked on ours.
        let [expo, none, _equal, full, decorr] = [0, 1, 2, 3, 4].map(|i| &cells[i]);
        let mut check = |ok: bool, what: &str| {
            if !ok {
                failures.push(format!("{clients} clients: {what}"));
            }
        };
        check(
            full.calls < expo.calls && full.calls < none.calls,
            "full jitter does less work than exponential and no backoff",
        );
        check(
            decorr.calls < expo.calls && decorr.calls < none.calls,
            "decorrelated does less work than exponential and no backoff",
        );
        check(
            expo.time > full.time && expo.time > decorr.time,
            "exponential without jitter is the slowest",
        );
        check(none.time < full.time, "no backoff is fastest in wall time");
        if clients >= 20 {
            check(
                decorr.time < full.time,
                "decorrelated finishes before full jitter",
            );
            check(
                full.calls < decorr.calls,
                "full jitter does less work than decorrelated",
            );
        }
        for (name, ours, (pt, pc)) in [
            ("full", full, published[3]),
            ("decorrelated", decorr, published[4]),
        ] {
            let (rt, rc) = (ours.time / pt, ours.calls / pc);
            check(
                (0.85..=1.15).contains(&rt) && (0.85..=1.15).contains(&rc),
                &format!(
                    "{name} within 15 % of the published re-run (time x{rt:.2}, calls x{rc:.2})"
                ),
            );
        }
    }
    println!();
    if failures.is_empty() {
        println!(
            "all orderings of the published re-run hold; full and decorrelated within 15 % of it"
        );
    } else {
        println!("differences from the published re-run:");
        for f in &failures {
            println!("- {f}");
        }
    }
}
