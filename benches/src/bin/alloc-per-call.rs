//! Heap allocations per call on the happy path (first attempt succeeds), counted by a global
//! allocator. Criterion measures time (`benches/happy_path.rs`); this measures allocations.
//!
//! `cargo run --release -p retry-benches --bin alloc-per-call`

use std::future::Future;

use retry_benches::alloc::{self, Counting};
use retry_benches::happy;

#[global_allocator]
static ALLOC: Counting = Counting;

const WARMUP: u64 = 1_000;
const CALLS: u64 = 100_000;

/// Runs `call` WARMUP times, then CALLS times, inside one `block_on`, and returns the
/// allocations and bytes per call of the measured part.
fn measure<F, Fut>(rt: &tokio::runtime::Runtime, mut call: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = u64>,
{
    rt.block_on(async {
        for _ in 0..WARMUP {
            call().await;
        }
        let (a0, b0) = alloc::snapshot();
        for _ in 0..CALLS {
            call().await;
        }
        let (a1, b1) = alloc::snapshot();
        (
            (a1 - a0) as f64 / CALLS as f64,
            (b1 - b0) as f64 / CALLS as f64,
        )
    })
}

fn main() {
    let (rt, registry) = happy::setup();
    let tower = happy::tower_service();
    let rows = [
        ("bare async call", measure(&rt, happy::bare)),
        (
            "retry-runtime builder",
            measure(&rt, || happy::ours(&registry)),
        ),
        (
            "retry-runtime builder, `call`",
            measure(&rt, || happy::ours_call(&registry)),
        ),
        ("`#[retry]`", measure(&rt, || happy::ours_macro(&registry))),
        ("backon", measure(&rt, happy::backon)),
        (
            "tower::retry + TpsBudget",
            measure(&rt, || happy::tower(&tower)),
        ),
        ("tokio-retry", measure(&rt, happy::tokio_retry)),
    ];
    println!("heap allocations per call, happy path ({CALLS} calls after {WARMUP} warm-up)\n");
    println!("| contender | allocations / call | bytes / call |");
    println!("|---|---|---|");
    for (name, (allocs, bytes)) in rows {
        println!("| {name} | {allocs:.2} | {bytes:.1} |");
    }
}
