//! One contender, `N` sequential loopback GETs, for deterministic instruction counts: wall time
//! on a shared VM moves by more than the 3 % being measured, instruction counts do not.
//!
//! ```sh
//! cargo build --release -p retry-benches --bin http-one
//! for who in plain builder send; do for n in 1000 3000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg-$who-$n.out \
//!     target/release/http-one $who $n 2>&1 | grep Collected
//! done; done
//! ```
//!
//! Instructions per request = (collected at 3000 - collected at 1000) / 2000, which cancels
//! start-up. Contenders: `plain` (reqwest), `builder` (our loop around the same reqwest call),
//! `send` (our loop and the `retry_runtime::http` send path: propagation headers, evidence,
//! body read inside the attempt), `send-quiet` (the same to an upstream with
//! `propagate = false`: no propagation headers), `macro` (`send` through a `#[retry]` adapter),
//! `reqwest-retry` (reqwest-middleware + reqwest-retry), `sendonly` (the send path outside any
//! loop), `timer` (plain
//! inside `tokio::time::timeout`, the cost of one timer).

use std::time::Duration;

use retry_benches::loopback::Loopback;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let who = args.next().unwrap_or_else(|| "plain".to_owned());
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let lo = Loopback::start().await;
    for _ in 0..200 {
        lo.plain().await.expect("warm-up");
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        match who.as_str() {
            "plain" => drop(lo.plain().await.expect("plain")),
            "builder" => drop(lo.builder().await.expect("builder")),
            "send" => drop(lo.send_path(&lo.registry).await.expect("send path")),
            "send-quiet" => drop(lo.send_path(&lo.quiet).await.expect("send path")),
            "macro" => drop(lo.adapter().await.expect("adapter")),
            "reqwest-retry" => drop(lo.reqwest_retry().await),
            "sendonly" => {
                let response = lo.client.get(&lo.url).send_attempt().await.expect("send");
                response.read_bytes().await.expect("body");
            }
            "timer" => {
                let timed = tokio::time::timeout(Duration::from_secs(1), lo.plain());
                timed.await.expect("in time").expect("timer");
            }
            other => panic!(
                "unknown contender {other:?}: plain, builder, send, send-quiet, macro, \
                 reqwest-retry, sendonly, timer"
            ),
        }
    }
    let per_request = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("{who}: {per_request:.1} µs per request (wall clock, rough)");
}
