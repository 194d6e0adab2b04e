//! The safety property, in loops for the racy cases: whenever the server processed a request,
//! the classification is never `NotSent`. Runs sequentially on fresh servers; each iteration
//! takes a few milliseconds.

use retry_runtime::Evidence;
use retry_runtime::http::RequestBuilderExt;
use retry_tests::fault::h1::{H1Fault, H1Server};
use retry_tests::fault::h2::{H2Fault, H2Server, code};
use retry_tests::support;

const ROUNDS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_a_processed_request_is_never_not_sent() {
    let client = support::client();
    let mut classes = std::collections::BTreeMap::<(String, &str), usize>::new();
    for fault in [
        H1Fault::CloseBeforeRead,
        H1Fault::ResetBeforeRead,
        H1Fault::ReadThenReset,
        H1Fault::ReadThenClose,
        H1Fault::PartialHead,
    ] {
        for _ in 0..ROUNDS {
            let server = H1Server::start([fault.clone()]).await;
            let error = client
                .post(server.url("/pay"))
                .body("charge")
                .send_attempt()
                .await
                .expect_err("fault");
            // Let the server task record what it read before looking.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let processed = server.truth().processed() > 0;
            assert!(
                !(processed && error.evidence() == Evidence::NotSent),
                "{fault:?}: processed but NotSent: {error}"
            );
            *classes
                .entry((format!("{fault:?}"), error.evidence().as_str()))
                .or_default() += 1;
        }
    }
    eprintln!("observed classes: {classes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_a_processed_stream_is_never_not_sent() {
    for fault in [
        H2Fault::ResetBeforeHeaders(code::INTERNAL_ERROR),
        H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM),
        H2Fault::GoAwayAbove,
        H2Fault::GoAwayBelow(code::NO_ERROR),
    ] {
        for _ in 0..ROUNDS / 2 {
            let server = H2Server::start([fault]).await;
            let error = support::h2_client()
                .post(server.url("/pay"))
                .body("charge")
                .send_attempt()
                .await
                .expect_err("fault");
            let processed = server.truth().processed() > 0;
            assert!(
                !(processed && error.evidence() == Evidence::NotSent),
                "{fault:?}: processed but NotSent: {error}"
            );
        }
    }
}
