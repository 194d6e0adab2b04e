//! Every figure of `BENCHMARKS.md`, in one command:
//!
//! ```sh
//! cargo build --release -p retry-benches --bin figures
//! target/release/figures all            # or some of: http http-wall wait tracing upstreams
//!                                       #   failure failure-http contention faults
//! ```
//!
//! Instruction counts come from callgrind (`valgrind` must be installed): each contender runs in
//! its own process, `probe`, twice (at `n1` and `n2` operations after the same warm-up), and
//! the difference divided by `n2 - n1` is its instructions per operation, set-up cancelled.
//! Allocations per operation come from a counting global allocator in a native run of the same
//! probe. Wall-clock figures (`http-wall`, `contention`) are interleaved rounds, reported as the
//! median of several processes (`retry_benches::processes`).
//!
//! `FIGURES_WORKERS=N` runs `contention` on `N` workers instead of two (on one, the workers'
//! sharing of the upstream drops out of the ratio).
//!
//! `figures probe CASE N [off|info|debug]` runs one contender `N` times (after its warm-up),
//! with a `tracing_subscriber::fmt` subscriber at that level writing to a sink, and prints its
//! allocations, bytes and nanoseconds per operation. `figures check` runs every case a few
//! times that way (no valgrind needed): the test suite runs it, so a contender that breaks
//! shows before the next measurement.

use std::future::Future;
use std::path::PathBuf;
use std::time::Instant;

use retry_benches::alloc::{self, Counting};
use retry_benches::contention::{self, Contender};
use retry_benches::inproc::{self, UPSTREAM};
use retry_benches::loopback::Loopback;
use retry_benches::processes::{self, Columns, median_ratio};
use retry_benches::{callgrind, server};

#[global_allocator]
static ALLOC: Counting = Counting;

const SECTIONS: [&str; 9] = [
    "http",
    "http-wall",
    "wait",
    "tracing",
    "upstreams",
    "failure",
    "failure-http",
    "contention",
    "faults",
];

/// Set in the measuring processes of the wall-clock sections.
const HTTP_WALL_CHILD: &str = "FIGURES_HTTP_WALL";
const CONTENTION_CHILD: &str = "FIGURES_CONTENTION";

fn main() {
    if std::env::var_os(HTTP_WALL_CHILD).is_some() {
        http_wall(1);
    }
    if std::env::var_os(CONTENTION_CHILD).is_some() {
        contention_wall(1);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("probe") => probe(&args[1..]),
        Some("check") => check(),
        Some(_) => {
            let all = args.iter().any(|a| a == "all");
            for section in SECTIONS {
                if all || args.iter().any(|a| a == section) {
                    run_section(section);
                }
            }
            if let Some(bad) = args
                .iter()
                .find(|a| *a != "all" && !SECTIONS.contains(&a.as_str()))
            {
                usage(&format!("unknown section {bad:?}"));
            }
        }
        None => usage("name a section, or `all`"),
    }
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "figures: {problem}\nusage: figures all | figures SECTION... ({})\n       figures probe \
         CASE N [off|info|debug]\n       figures check",
        SECTIONS.join(", ")
    );
    std::process::exit(2);
}

fn run_section(section: &str) {
    if !matches!(section, "http-wall" | "contention") && !callgrind::available() {
        eprintln!("figures: `{section}` counts instructions with valgrind, which is not installed");
        std::process::exit(1);
    }
    match section {
        "http" => http(),
        "http-wall" => http_wall(9),
        "wait" => wait(),
        "tracing" => tracing_levels(),
        "upstreams" => upstreams(),
        "failure" => failure(),
        "failure-http" => failure_http(),
        "faults" => faults(),
        _ => contention_wall(7),
    }
}

// ---------------------------------------------------------------------------------------------
// Probes: one contender in its own process.

/// Operations before measuring, per family of cases.
fn warm_up(case: &str) -> u64 {
    match family(case) {
        "http" => 200,
        "http-fail" => 50,
        "fail" => 100,
        "upstreams" => 2 * upstreams_of(case),
        _ => 1_000,
    }
}

/// `(n1, n2)` of the instruction counts, per family.
fn counts(case: &str) -> (u64, u64) {
    match family(case) {
        "http" => (500, 1_500),
        "http-fail" => (150, 450),
        "fail" => (300, 900),
        _ => (10_000, 30_000),
    }
}

fn family(case: &str) -> &str {
    case.split_once('/').map_or(case, |(family, _)| family)
}

fn upstreams_of(case: &str) -> u64 {
    case.strip_prefix("upstreams/")
        .and_then(|k| k.parse().ok())
        .unwrap_or(1)
}

fn probe(args: &[String]) {
    let (Some(case), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        usage("probe needs CASE and N");
    };
    let level = match args.get(2).map(String::as_str) {
        None | Some("off") => None,
        Some("info") => Some(tracing::Level::INFO),
        Some("debug") => Some(tracing::Level::DEBUG),
        Some(other) => usage(&format!("unknown tracing level {other:?}")),
    };
    if let Some(level) = level {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    }
    let rt = inproc::runtime();
    let (warm, case) = (warm_up(case), case.as_str());
    let figures = rt.block_on(async {
        match family(case) {
            "http" | "http-fail" => {
                let lo = Loopback::start().await;
                let connections = server::connections();
                let figures = match case {
                    "http/plain" => drive(warm, n, || lo.plain()).await,
                    "http/plain-timeout" => drive(warm, n, || lo.plain_timeout()).await,
                    "http/plain-headers" => drive(warm, n, || lo.plain_headers()).await,
                    "http/plain-tower" => drive(warm, n, || lo.plain_tower()).await,
                    "http/plain-faults-off" => drive(warm, n, || lo.plain_faults_off()).await,
                    "http/builder" => drive(warm, n, || lo.builder()).await,
                    "http/builder-quiet" => drive(warm, n, || lo.builder_quiet()).await,
                    "http/macro" => drive(warm, n, || lo.adapter()).await,
                    "http/backon" => drive(warm, n, || lo.backon()).await,
                    "http/reqwest-retry" => drive(warm, n, || lo.reqwest_retry()).await,
                    "http-fail/loop" => drive(warm, n, || lo.flaky_loop()).await,
                    "http-fail/backon" => drive(warm, n, || lo.flaky_backon()).await,
                    "http-fail/backon-timeout" => {
                        drive(warm, n, || lo.flaky_backon_timeout()).await
                    }
                    "http-fail/builder" => drive(warm, n, || lo.flaky_builder()).await,
                    "http-fail/builder-quiet" => drive(warm, n, || lo.flaky_builder_quiet()).await,
                    "http-fail/macro" => drive(warm, n, || lo.flaky_adapter()).await,
                    "http-fail/reqwest-retry" => drive(warm, n, || lo.flaky_reqwest_retry()).await,
                    _ => usage(&format!("unknown case {case:?}")),
                };
                // A contender that loses its connections measures TCP set-up too: say so.
                let opened = server::connections() - connections;
                [figures[0], figures[1], figures[2], opened as f64]
            }
            _ => {
                let [a, b, ns] = probe_in_process(case, warm, n).await;
                [a, b, ns, 0.0]
            }
        }
    });
    let line: Vec<String> = figures.iter().map(f64::to_string).collect();
    println!("{}", line.join(" "));
}

async fn probe_in_process(case: &str, warm: u64, n: u64) -> [f64; 3] {
    let registry = retry_benches::registry(&[UPSTREAM], retry_runtime::UpstreamConfig::new());
    let failing = {
        let config = inproc::failing_config();
        retry_benches::registry(&[UPSTREAM], config)
    };
    let (tower_work, tower_flaky) = (inproc::tower_work(), inproc::tower_flaky());
    match case {
        "wait/bare" => drive(warm, n, inproc::bare).await,
        "wait/macro" => drive(warm, n, || inproc::ours_macro(&registry)).await,
        "wait/call" => drive(warm, n, || inproc::ours_call(&registry)).await,
        "wait/run" => drive(warm, n, || inproc::ours_run(&registry)).await,
        "wait/backon" => drive(warm, n, inproc::backon).await,
        "wait/backon-timeout" => drive(warm, n, inproc::backon_timeout).await,
        "wait/floor" => {
            let with_breaker = retry_runtime::UpstreamConfig::new()
                .with_breaker(Some(retry_runtime::breaker::BreakerConfig::new()));
            let registry = retry_benches::registry(&[UPSTREAM], with_breaker);
            let upstream = registry.upstream(UPSTREAM).expect("registered");
            drive(warm, n, || inproc::floor(&upstream)).await
        }
        "wait/tokio-retry" => drive(warm, n, inproc::tokio_retry).await,
        "wait/tower" => drive(warm, n, || inproc::tower(&tower_work)).await,
        "alone/bare" | "alone/macro" | "alone/call" => {
            let who = match case {
                "alone/bare" => Contender::Bare,
                "alone/macro" => Contender::Macro,
                _ => Contender::Builder,
            };
            let registry = contention::registry();
            drive(warm, n, || contention::call_alone(who, &registry)).await
        }
        "fail/loop" => drive(warm, n, inproc::flaky_loop).await,
        "fail/macro" => drive(warm, n, || inproc::flaky_macro(&failing)).await,
        "fail/call" => drive(warm, n, || inproc::flaky_call(&failing)).await,
        "fail/backon" => drive(warm, n, inproc::flaky_backon).await,
        "fail/backon-timeout" => drive(warm, n, inproc::flaky_backon_timeout).await,
        "fail/tokio-retry" => drive(warm, n, inproc::flaky_tokio_retry).await,
        "fail/tower" => drive(warm, n, || inproc::tower(&tower_flaky)).await,
        _ if family(case) == "upstreams" => {
            let k = upstreams_of(case);
            let names: Vec<String> = (0..k).map(|i| format!("up-{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let registry = retry_benches::registry(&refs, retry_runtime::UpstreamConfig::new());
            let mut next = 0;
            let mut call = || {
                let name = refs[next];
                next = (next + 1) % refs.len();
                inproc::ours_to(&registry, name)
            };
            drive(warm, n, &mut call).await
        }
        _ => usage(&format!("unknown case {case:?}")),
    }
}

/// Runs `op` `warm` times, then `n` times; returns allocations, bytes and nanoseconds per
/// operation of the second part.
async fn drive<F, Fut>(warm: u64, n: u64, mut op: F) -> [f64; 3]
where
    F: FnMut() -> Fut,
    Fut: Future,
{
    for _ in 0..warm {
        std::hint::black_box(op().await);
    }
    let (a0, b0) = alloc::snapshot();
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(op().await);
    }
    let ns = start.elapsed().as_nanos() as f64;
    let (a1, b1) = alloc::snapshot();
    let n = n.max(1) as f64;
    [(a1 - a0) as f64 / n, (b1 - b0) as f64 / n, ns / n]
}

// ---------------------------------------------------------------------------------------------
// Measuring probes: instructions under callgrind, allocations natively.

/// One contender's figures.
#[derive(Debug, Clone, Copy)]
struct Probed {
    instructions: f64,
    allocations: f64,
    bytes: f64,
    ns: f64,
    /// Connections the servers accepted over the whole probe (warm-up included).
    connections: f64,
}

fn this_program() -> PathBuf {
    std::env::current_exe().expect("this program's path")
}

fn probe_args(case: &str, n: u64, level: &str) -> Vec<String> {
    vec!["probe".into(), case.into(), n.to_string(), level.into()]
}

/// Runs `case` `n` times natively in its own process: allocations, bytes, nanoseconds per
/// operation and connections opened, or what the probe wrote when it failed.
fn run_probe(case: &str, n: u64, level: &str) -> Result<[f64; 4], String> {
    let out = std::process::Command::new(this_program())
        .args(probe_args(case, n, level))
        .output()
        .map_err(|e| format!("could not start a probe: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = line
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    match (out.status.success(), <[f64; 4]>::try_from(numbers)) {
        (true, Ok(numbers)) => Ok(numbers),
        _ => Err(format!(
            "the probe {case} ({level}) failed: {}{}",
            line.trim(),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn measure(case: &str, level: &str) -> Probed {
    let args = |n: u64| probe_args(case, n, level);
    eprint!("  {case} ({level}) ...");
    let instructions = callgrind::per_op(
        &this_program(),
        args,
        counts(case),
        &format!("{case}-{level}"),
    )
    .unwrap_or_else(|e| {
        eprintln!("\n{e}");
        std::process::exit(1);
    });
    let [allocations, bytes, ns, connections] = run_probe(case, counts(case).1, level)
        .unwrap_or_else(|e| {
            eprintln!("\n{e}");
            std::process::exit(1);
        });
    eprintln!(" {instructions:.0}");
    Probed {
        instructions,
        allocations,
        bytes,
        ns,
        connections,
    }
}

/// Every case of the instruction-count sections, once for each level it is measured at.
fn every_case() -> Vec<(String, &'static str)> {
    let plain = [&HTTP[..], &WAIT, &TRACING, &FAILURE, &FAILURE_HTTP, &FAULTS]
        .into_iter()
        .flatten()
        .map(|(_, case)| (*case).to_owned())
        .chain(UPSTREAMS.iter().map(|k| format!("upstreams/{k}")))
        .chain(ALONE.iter().map(|case| (*case).to_owned()))
        .map(|case| (case, "off"));
    let traced = TRACING
        .iter()
        .flat_map(|(_, case)| ["info", "debug"].map(|level| ((*case).to_owned(), level)));
    let mut cases: Vec<_> = plain.chain(traced).collect();
    cases.sort();
    cases.dedup();
    cases
}

/// `figures check`: runs every case a few times, natively (no valgrind), so that a contender
/// that fails, or a case a section names and the probe does not know, shows before anyone
/// measures.
fn check() {
    let mut failed = 0;
    for (case, level) in every_case() {
        match run_probe(&case, 3, level) {
            Ok(_) => println!("ok {case} ({level})"),
            Err(e) => {
                eprintln!("{e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        eprintln!("figures check: {failed} case(s) failed");
        std::process::exit(1);
    }
}

fn header(title: &str, columns: &[&str]) {
    println!("\n### {title}\n");
    println!("| {} |", columns.join(" | "));
    println!("|{}", "---|".repeat(columns.len()));
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

// ---------------------------------------------------------------------------------------------
// The cases of the instruction-count sections: (what the table calls it, the probe's case).

const HTTP: [(&str, &str); 8] = [
    ("plain reqwest", "http/plain"),
    (
        "plain reqwest in `tokio::time::timeout`",
        "http/plain-timeout",
    ),
    (
        "plain reqwest in `timeout` + the propagation headers, by hand",
        "http/plain-headers",
    ),
    ("builder `call` + `send_attempt`", "http/builder"),
    ("`#[retry]` adapter + `send_attempt`", "http/macro"),
    (
        "builder `call` + `send_attempt`, propagation off",
        "http/builder-quiet",
    ),
    ("backon + plain reqwest", "http/backon"),
    ("reqwest-middleware + reqwest-retry", "http/reqwest-retry"),
];

const WAIT: [(&str, &str); 9] = [
    ("bare call", "wait/bare"),
    ("`#[retry]`", "wait/macro"),
    ("builder `call`", "wait/call"),
    ("builder `run`", "wait/run"),
    ("backon", "wait/backon"),
    ("backon + `tokio::time::timeout`", "wait/backon-timeout"),
    ("tokio-retry", "wait/tokio-retry"),
    ("tower `Retry` + `TpsBudget`", "wait/tower"),
    (
        "backon + timeout + the upstream's budget and breaker, by hand",
        "wait/floor",
    ),
];

const TRACING: [(&str, &str); 3] = [
    ("`#[retry]`, succeeds (waits once)", "wait/macro"),
    ("builder `call`, succeeds (waits once)", "wait/call"),
    ("`#[retry]`, fails twice then succeeds", "fail/macro"),
];

/// Upstream names in use, for the `upstreams` section's cases (`upstreams/K`).
const UPSTREAMS: [u64; 5] = [1, 10, 100, 1_000, 10_000];

const FAILURE: [(&str, &str); 7] = [
    ("plain loop (3 tries, `sleep(1 µs)`)", "fail/loop"),
    ("`#[retry]`", "fail/macro"),
    ("builder `call`", "fail/call"),
    ("backon", "fail/backon"),
    ("backon + `tokio::time::timeout`", "fail/backon-timeout"),
    ("tokio-retry", "fail/tokio-retry"),
    ("tower `Retry` + `TpsBudget`", "fail/tower"),
];

const FAILURE_HTTP: [(&str, &str); 7] = [
    (
        "plain 3-try loop (reqwest, `sleep(1 µs)`)",
        "http-fail/loop",
    ),
    ("backon + plain reqwest", "http-fail/backon"),
    (
        "backon + `tokio::time::timeout` + plain reqwest",
        "http-fail/backon-timeout",
    ),
    ("builder `call` + `send_attempt`", "http-fail/builder"),
    ("`#[retry]` adapter + `send_attempt`", "http-fail/macro"),
    (
        "builder `call` + `send_attempt`, propagation off",
        "http-fail/builder-quiet",
    ),
    (
        "reqwest-middleware + reqwest-retry",
        "http-fail/reqwest-retry",
    ),
];

/// The fault layer, off, in front of the loopback server (a tower service either way).
const FAULTS: [(&str, &str); 3] = [
    ("plain reqwest, hyper `service_fn` server", "http/plain"),
    (
        "plain reqwest, tower `service_fn` server",
        "http/plain-tower",
    ),
    (
        "plain reqwest, the same server behind `FaultLayer`, off",
        "http/plain-faults-off",
    ),
];

/// One call with an attempt that does no work, in `contention`'s callgrind line.
const ALONE: [&str; 3] = ["alone/bare", "alone/macro", "alone/call"];

// ---------------------------------------------------------------------------------------------
// Sections.

fn http() {
    header(
        &format!(
            "Loopback GET, first attempt succeeds: per request, client + server (at {})",
            commit()
        ),
        &[
            "contender",
            "instructions / request",
            "ratio to plain",
            "allocations / request",
            "connections opened (whole run)",
        ],
    );
    let probed: Vec<Probed> = HTTP.iter().map(|(_, case)| measure(case, "off")).collect();
    let plain = probed[0].instructions;
    for ((name, _), p) in HTTP.iter().zip(&probed) {
        println!(
            "| {name} | {:.0} | {:.3} | {:.1} | {} |",
            p.instructions,
            p.instructions / plain,
            p.allocations,
            p.connections
        );
    }
}

fn faults() {
    header(
        &format!(
            "Loopback GET through the test kit's fault layer, switched off: per request, client + server (at {})",
            commit()
        ),
        &[
            "server",
            "instructions / request",
            "added to a loopback GET",
            "allocations / request",
        ],
    );
    let probed: Vec<Probed> = FAULTS
        .iter()
        .map(|(_, case)| measure(case, "off"))
        .collect();
    let (plain, tower) = (probed[0].instructions, probed[1].instructions);
    for ((name, _), p) in FAULTS.iter().zip(&probed) {
        let added = match name.contains("FaultLayer") {
            true => format!(
                "{:+.0} ({:+.2} %)",
                p.instructions - tower,
                100.0 * (p.instructions - tower) / plain
            ),
            false => String::new(),
        };
        println!(
            "| {name} | {:.0} | {added} | {:.1} |",
            p.instructions, p.allocations
        );
    }
}

fn wait() {
    header(
        &format!(
            "A successful call whose body waits once, no subscriber (at {})",
            commit()
        ),
        &[
            "contender",
            "instructions / call",
            "over bare",
            "over bare / backon + timeout's",
            "allocations / call",
        ],
    );
    let probed: Vec<Probed> = WAIT.iter().map(|(_, case)| measure(case, "off")).collect();
    let bare = probed[0].instructions;
    let peer = probed[5].instructions - bare;
    for ((name, _), p) in WAIT.iter().zip(&probed) {
        let over = p.instructions - bare;
        println!(
            "| {name} | {:.0} | {over:.0} | {:.2} | {:.2} ({:.0} B) |",
            p.instructions,
            over / peer,
            p.allocations,
            p.bytes
        );
    }
}

fn tracing_levels() {
    header(
        &format!(
            "Tracing: a `tracing_subscriber::fmt` subscriber writing to a sink (at {})",
            commit()
        ),
        &[
            "call",
            "subscriber",
            "instructions / call",
            "ratio to no subscriber",
            "allocations / call",
        ],
    );
    for (name, case) in TRACING {
        let off = measure(case, "off");
        for level in ["off", "info", "debug"] {
            let p = match level {
                "off" => off,
                _ => measure(case, level),
            };
            let shown = match level {
                "off" => "none",
                "info" => "INFO",
                _ => "DEBUG",
            };
            println!(
                "| {name} | {shown} | {:.0} | {:.2} | {:.2} |",
                p.instructions,
                p.instructions / off.instructions,
                p.allocations
            );
        }
    }
}

fn upstreams() {
    header(
        &format!(
            "Many upstreams: builder `call`, body waits once, calls rotating through K names (at {})",
            commit()
        ),
        &[
            "upstreams in use",
            "instructions / call",
            "ratio to 1 upstream",
            "allocations / call",
            "ns / call (one native run, rough)",
        ],
    );
    let mut one = f64::NAN;
    for k in UPSTREAMS {
        let p = measure(&format!("upstreams/{k}"), "off");
        if k == 1 {
            one = p.instructions;
        }
        println!(
            "| {k} | {:.0} | {:.3} | {:.2} | {:.0} |",
            p.instructions,
            p.instructions / one,
            p.allocations,
            p.ns
        );
    }
}

fn failure() {
    header(
        &format!(
            "Failure path in process: fails twice (503), succeeds on the third attempt, 1 µs \
             backoff, body waits once per attempt (at {})",
            commit()
        ),
        &[
            "contender",
            "instructions / operation",
            "ratio to backon",
            "over the plain loop",
            "allocations / operation",
        ],
    );
    let probed: Vec<Probed> = FAILURE
        .iter()
        .map(|(_, case)| measure(case, "off"))
        .collect();
    let (plain, backon) = (probed[0].instructions, probed[3].instructions);
    for ((name, _), p) in FAILURE.iter().zip(&probed) {
        println!(
            "| {name} | {:.0} | {:.2} | {:.0} | {:.1} |",
            p.instructions,
            p.instructions / backon,
            p.instructions - plain,
            p.allocations
        );
    }
}

fn failure_http() {
    header(
        &format!(
            "Failure path over loopback HTTP: 503, 503, 200, 1 µs backoff; client + server (at {})",
            commit()
        ),
        &[
            "contender",
            "instructions / operation",
            "added to the plain 3-try loop",
            "added / backon's",
            "allocations / operation",
            "connections opened (whole run)",
        ],
    );
    let probed: Vec<Probed> = FAILURE_HTTP
        .iter()
        .map(|(_, case)| measure(case, "off"))
        .collect();
    let plain = probed[0].instructions;
    let backon = probed[1].instructions - plain;
    for ((name, _), p) in FAILURE_HTTP.iter().zip(&probed) {
        let added = p.instructions - plain;
        println!(
            "| {name} | {:.0} | {added:.0} | {:.2} | {:.1} | {} |",
            p.instructions,
            added / backon,
            p.allocations,
            p.connections
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Wall-clock sections: interleaved rounds, several processes.

const HTTP_NAMES: [&str; 7] = [
    "plain reqwest",
    "plain reqwest in `tokio::time::timeout`",
    "plain reqwest in `timeout` + the propagation headers",
    "builder `call` + `send_attempt`",
    "`#[retry]` adapter + `send_attempt`",
    "backon + plain reqwest",
    "reqwest-middleware + reqwest-retry",
];

/// Loopback GETs as interleaved rounds of 200 sequential requests per contender (the order
/// rotating every round) on a two-worker runtime; per process, each contender's median round
/// and its median per-round ratio to plain reqwest.
fn http_wall(processes: usize) {
    const ROUNDS: usize = 31;
    const PER_ROUND: u32 = 200;
    let measure = || -> [f64; 2 * HTTP_NAMES.len()] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let times = rt.block_on(async {
            let lo = Loopback::start().await;
            let mut times: [Vec<f64>; HTTP_NAMES.len()] = Default::default();
            for round in 0..=ROUNDS {
                for turn in 0..HTTP_NAMES.len() {
                    let who = (turn + round) % HTTP_NAMES.len();
                    let start = Instant::now();
                    for _ in 0..PER_ROUND {
                        match who {
                            0 => drop(lo.plain().await),
                            1 => drop(lo.plain_timeout().await),
                            2 => drop(lo.plain_headers().await),
                            3 => drop(lo.builder().await),
                            4 => drop(lo.adapter().await),
                            5 => drop(lo.backon().await),
                            _ => drop(lo.reqwest_retry().await),
                        }
                    }
                    // Round 0 warms connections and pools.
                    if round > 0 {
                        let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(PER_ROUND);
                        times[who].push(us);
                    }
                }
            }
            times
        });
        processes::figures(&times, |who| median_ratio(&times[who], &times[0]))
    };
    let runs = processes::measure_in(HTTP_WALL_CHILD, processes, measure);
    println!(
        "\n### Loopback GET, wall clock: {} processes x {ROUNDS} interleaved rounds x {PER_ROUND} \
         requests, two-worker runtime (at {})\n",
        runs.len(),
        commit()
    );
    processes::print_table(
        &HTTP_NAMES,
        &runs,
        Columns {
            time: "µs / request",
            time_digits: 1,
            ratio: "ratio to plain",
            reference: (0, "1"),
        },
    );
}

const CONTENTION_NAMES: [&str; 3] = ["bare", "`#[retry]`", "builder `call`"];

/// Interleaved rounds of bare and ours (the order rotating every round), each `CALLS` calls
/// over the tasks; per process, each one's median ns per call and its median throughput ratio
/// to bare.
fn contention_wall(processes: usize) {
    let workers = std::env::var("FIGURES_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(contention::WORKERS);
    const ROUNDS: usize = 21;
    const CALLS: u64 = 6_400;
    const WHO: [Contender; 3] = [Contender::Bare, Contender::Macro, Contender::Builder];
    let rounds = || -> [f64; 2 * WHO.len()] {
        let rt = contention::runtime(workers);
        let registry = contention::registry();
        let mut times: [Vec<f64>; WHO.len()] = Default::default();
        for round in 0..=ROUNDS {
            for turn in 0..WHO.len() {
                let who = (turn + round) % WHO.len();
                let elapsed = contention::run(&rt, WHO[who], &registry, CALLS);
                if round > 0 {
                    times[who].push(elapsed.as_nanos() as f64 / CALLS as f64);
                }
            }
        }
        // Throughput ratio: bare's time / ours, round by round.
        processes::figures(&times, |who| median_ratio(&times[0], &times[who]))
    };
    let runs = processes::measure_in(CONTENTION_CHILD, processes, rounds);
    println!(
        "\n### Contention: {} tasks, {workers}-worker runtime, one upstream, {} µs attempts: {} \
         processes x {ROUNDS} interleaved rounds x {CALLS} calls (at {})\n",
        contention::TASKS,
        contention::ATTEMPT.as_micros(),
        runs.len(),
        commit()
    );
    processes::print_table(
        &CONTENTION_NAMES,
        &runs,
        Columns {
            time: "ns / call (wall / calls)",
            time_digits: 0,
            ratio: "throughput ratio to bare",
            reference: (0, "1"),
        },
    );
    // What each call adds, in instructions (the attempt's spin left out): the stable figure
    // behind the ratio.
    if callgrind::available() {
        let [bare, with_macro, call] = ALONE.map(|case| measure(case, "off").instructions);
        println!(
            "\nOne call with an attempt that does no work, current-thread runtime (callgrind): \
             bare {bare:.0} instructions, `#[retry]` {with_macro:.0} ({:.0} above bare), \
             builder `call` {call:.0} ({:.0} above bare).",
            with_macro - bare,
            call - bare
        );
    }
}
