//! A profiling aid, not a benchmark: the builder's happy path in a tight loop, to run under
//! `perf record`. Prints the size of one call's future (each `.await` moves it) and a rough time
//! per call; quote criterion's `happy_path` bench for time, not this.
//!
//! ```sh
//! cargo build --release -p retry-benches --bin happy-profile
//! perf record -g target/release/happy-profile 3000000 && perf report --no-children
//! ```

use retry_benches::happy::{self, UPSTREAM};
use retry_runtime::UpstreamConfig;

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let registry = retry_benches::registry(&[UPSTREAM], UpstreamConfig::new());
    println!(
        "one call's future: {} bytes",
        std::mem::size_of_val(&happy::ours(&registry))
    );
    rt.block_on(async {
        for _ in 0..1000 {
            happy::ours(&registry).await;
        }
        let start = std::time::Instant::now();
        let mut sum = 0;
        for _ in 0..calls {
            sum += happy::ours(&registry).await;
        }
        let per_call = start.elapsed().as_nanos() as f64 / calls as f64;
        println!("{per_call:.0} ns per call (rough; {sum} calls)");
    });
}
