//! A profiling aid, not a benchmark: the builder's `run` (or, with the second argument,
//! `macro` for `#[retry]`, `call` for the builder's `call`; `backon` or `bare` for comparison)
//! happy path in a tight loop, to run under `perf record` or callgrind. Prints the size of one
//! call's future (each `.await` moves it) and a rough time per call; quote criterion's
//! `happy_path` bench (or `happy-ratio`) for time, not this.
//!
//! ```sh
//! cargo build --release -p retry-benches --bin happy-profile
//! perf record -g target/release/happy-profile 3000000 && perf report --no-children
//! valgrind --tool=callgrind target/release/happy-profile 100000 macro
//! ```

use retry_benches::happy;

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000_000);
    let contender = std::env::args().nth(2).unwrap_or_default();
    let (rt, registry) = happy::setup();
    println!(
        "one call's future: {} bytes (builder), {} bytes (#[retry])",
        std::mem::size_of_val(&happy::ours(&registry)),
        std::mem::size_of_val(&happy::ours_macro(&registry)),
    );
    rt.block_on(async {
        let call = async || match contender.as_str() {
            "macro" => happy::ours_macro(&registry).await,
            "call" => happy::ours_call(&registry).await,
            "backon" => happy::backon().await,
            "bare" => happy::bare().await,
            _ => happy::ours(&registry).await,
        };
        for _ in 0..1000 {
            call().await;
        }
        let start = std::time::Instant::now();
        let mut sum = 0;
        for _ in 0..calls {
            sum += call().await;
        }
        let per_call = start.elapsed().as_nanos() as f64 / calls as f64;
        println!("{per_call:.0} ns per call (rough; {sum} calls)");
    });
}
