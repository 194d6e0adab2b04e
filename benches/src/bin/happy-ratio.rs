//! The happy path as interleaved rounds: each round times `PER_ROUND` calls of every contender
//! in turn (the order rotating from round to round), so a slow phase of a shared machine hits
//! all of them alike, where criterion measures one contender after the other. A process
//! reports each contender's median round (ns per call) and the median over rounds of its
//! *overhead* (time less the bare call's in the same round) relative to backon's.
//!
//! One process is not enough: a contender's time moves from one process to the next by more
//! than the differences measured (backon's by up to a third on our VM: where the stack lands
//! changes how its future's copies meet the cache), and stays put within a process. So this
//! runs itself `PROCESSES` times (a new process each, placed anew) and prints each process's
//! figures and their median.
//!
//! `cargo run --release -p retry-benches --bin happy-ratio [PROCESSES]` (default 9; 1 runs a
//! single process in place)

use std::future::Future;
use std::process::Command;
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
const BARE: usize = 0;
const BACKON: usize = 4;
/// Set in a child process: measure once and print one machine-readable line.
const CHILD: &str = "HAPPY_RATIO_CHILD";
const DEFAULT_PROCESSES: usize = 9;

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

/// One process's figures per contender: its median round (ns per call) and the median over
/// rounds of its overhead relative to backon's (`NaN` for the bare call).
fn measure() -> [(f64, f64); NAMES.len()] {
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
    std::array::from_fn(|who| {
        let ratio = match who {
            BARE => f64::NAN,
            _ => median(
                overhead(who)
                    .iter()
                    .zip(&backon)
                    .map(|(o, b)| o / b)
                    .collect(),
            ),
        };
        (median(times[who].clone()), ratio)
    })
}

/// Runs one child process and reads its line back.
fn child() -> Result<[(f64, f64); NAMES.len()], String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let out = Command::new(exe)
        .env(CHILD, "1")
        .output()
        .map_err(|e| format!("cannot run a measuring process: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "a measuring process failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("a measuring process printed {line:?}: {e}"))?;
    if numbers.len() != 2 * NAMES.len() {
        return Err(format!(
            "a measuring process printed {} numbers, not {}",
            numbers.len(),
            2 * NAMES.len()
        ));
    }
    Ok(std::array::from_fn(|who| {
        (numbers[2 * who], numbers[2 * who + 1])
    }))
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        let line: Vec<String> = measure()
            .iter()
            .flat_map(|(ns, ratio)| [ns.to_string(), ratio.to_string()])
            .collect();
        println!("{}", line.join(" "));
        return;
    }
    let processes = match std::env::args().nth(1) {
        None => DEFAULT_PROCESSES,
        Some(arg) => match arg.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!(
                    "usage: happy-ratio [PROCESSES]\n  PROCESSES: how many measuring processes \
                     to run, at least 1 (default {DEFAULT_PROCESSES}); got {arg:?}"
                );
                std::process::exit(2);
            }
        },
    };
    let runs: Vec<[(f64, f64); NAMES.len()]> = if processes == 1 {
        vec![measure()]
    } else {
        let mut runs = Vec::with_capacity(processes);
        for i in 0..processes {
            eprint!("\rprocess {}/{processes}", i + 1);
            match child() {
                Ok(run) => runs.push(run),
                Err(e) => {
                    eprintln!("\n{e}");
                    std::process::exit(1);
                }
            }
        }
        eprintln!();
        runs
    };
    println!(
        "happy path: {} process(es), each {ROUNDS} interleaved rounds x {PER_ROUND} calls\n",
        runs.len()
    );
    println!(
        "| contender | ns / call, median process (each process's median round) | \
         overhead (less bare) / backon's, median process (each process's median round) |"
    );
    println!("|---|---|---|");
    let fmt = |values: Vec<f64>, digits: usize| -> String {
        let each: Vec<String> = values.iter().map(|v| format!("{v:.digits$}")).collect();
        format!("{:.digits$} ({})", median(values), each.join(", "))
    };
    for (who, name) in NAMES.iter().enumerate() {
        let ns = fmt(runs.iter().map(|run| run[who].0).collect(), 2);
        let ratio = match who {
            BARE => "-".to_string(),
            _ => fmt(runs.iter().map(|run| run[who].1).collect(), 3),
        };
        println!("| {name} | {ns} | {ratio} |");
    }
}
