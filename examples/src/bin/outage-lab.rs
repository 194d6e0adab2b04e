//! The outage lab (placeholder until the lab lands): one retrying call against a flaky fake
//! upstream, showing the decision trace.

use std::sync::atomic::{AtomicU32, Ordering};

use retry_runtime::{Error, Evidence, Method, Registry, Retry, UpstreamConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let registry = Registry::builder()
        .upstream("catalog", UpstreamConfig::new())
        .seed(7)
        .build()
        .expect("valid config");
    let calls = AtomicU32::new(0);
    let result: Result<u32, Error> = Retry::upstream("catalog")
        .registry(&registry)
        .method(Method::GET)
        .run(|attempt| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n < 3 {
                    // A refused connection: proven not sent.
                    Err(Error::DeadlineExceeded {
                        upstream: attempt.upstream_entry().name_arc().clone(),
                    })
                } else {
                    Ok(attempt.number())
                }
            }
        })
        .await;
    println!(
        "result: {result:?}, upstream calls: {}",
        calls.load(Ordering::SeqCst)
    );
    let _ = Evidence::NotSent;
}
