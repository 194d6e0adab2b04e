//! The safety property, in loops for the racy cases: whenever the server processed a request,
//! the classification is never `NotSent`. Runs sequentially on fresh servers; each iteration
//! takes a few milliseconds. Before looking at what the server recorded, each round waits for
//! the server to finish serving its connections (an event, not a sleep), and each fault's rounds
//! must show the outcome the fault is built for, so the property is never checked vacuously.

use std::collections::BTreeMap;
use std::time::Duration;

use retry_runtime::Evidence;
use retry_runtime::http::RequestBuilderExt;
use retry_tests::fault::GroundTruth;
use retry_tests::fault::h1::{H1Fault, H1Server};
use retry_tests::fault::h2::{H2Fault, H2Server, code};
use retry_tests::support;

const ROUNDS: usize = 60;

/// Waits until the server has served every connection to the end. The bound only turns a hang
/// into a clear failure; nothing is timed.
async fn settled(truth: &GroundTruth) {
    tokio::time::timeout(Duration::from_secs(30), truth.settled())
        .await
        .expect("the server finishes serving its connections");
}

/// Per fault: rounds processed by the server, and the evidence classes seen.
#[derive(Debug, Default)]
struct Seen {
    processed: usize,
    classes: BTreeMap<&'static str, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_a_processed_request_is_never_not_sent() {
    let client = support::client();
    let mut seen = BTreeMap::<String, Seen>::new();
    for fault in [
        H1Fault::CloseBeforeRead,
        H1Fault::ResetBeforeRead,
        H1Fault::ReadThenReset,
        H1Fault::ReadThenClose,
        H1Fault::PartialHead,
    ] {
        let entry = seen.entry(format!("{fault:?}")).or_default();
        for _ in 0..ROUNDS {
            let server = H1Server::start([fault.clone()]).await;
            let error = client
                .post(server.url("/pay"))
                .body("charge")
                .send_attempt()
                .await
                .expect_err("fault");
            settled(server.truth()).await;
            let processed = server.truth().processed() > 0;
            assert!(
                !(processed && error.evidence() == Evidence::NotSent),
                "{fault:?}: processed but NotSent: {error}"
            );
            entry.processed += usize::from(processed);
            *entry.classes.entry(error.evidence().as_str()).or_default() += 1;
        }
    }
    eprintln!("observed: {seen:?}");
    // The faults that read the request processed it in every round: the property was checked
    // on each of them. The ones that close before reading processed nothing.
    for fault in ["ReadThenReset", "ReadThenClose", "PartialHead"] {
        assert_eq!(seen[fault].processed, ROUNDS, "{fault}: {:?}", seen[fault]);
        assert_eq!(seen[fault].classes.get("not_sent"), None, "{fault}");
    }
    for fault in ["CloseBeforeRead", "ResetBeforeRead"] {
        assert_eq!(seen[fault].processed, 0, "{fault}: {:?}", seen[fault]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_a_processed_stream_is_never_not_sent() {
    let mut seen = BTreeMap::<String, Seen>::new();
    for fault in [
        H2Fault::ResetBeforeHeaders(code::INTERNAL_ERROR),
        H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM),
        H2Fault::GoAwayAbove,
        H2Fault::GoAwayBelow(code::NO_ERROR),
    ] {
        let entry = seen.entry(format!("{fault:?}")).or_default();
        for _ in 0..ROUNDS / 2 {
            let server = H2Server::start([fault]).await;
            let client = support::h2_client();
            let error = client
                .post(server.url("/pay"))
                .body("charge")
                .send_attempt()
                .await
                .expect_err("fault");
            // The pooled connection closes with its client.
            drop(client);
            settled(server.truth()).await;
            let processed = server.truth().processed() > 0;
            assert!(
                !(processed && error.evidence() == Evidence::NotSent),
                "{fault:?}: processed but NotSent: {error}"
            );
            entry.processed += usize::from(processed);
            *entry.classes.entry(error.evidence().as_str()).or_default() += 1;
        }
    }
    eprintln!("observed: {seen:?}");
    let half = ROUNDS / 2;
    // Refused before processing: proven not sent, every round.
    let refused = &seen[&format!("{:?}", H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM))];
    assert_eq!(refused.processed, 0, "{refused:?}");
    assert_eq!(refused.classes.get("not_sent"), Some(&half), "{refused:?}");
    // A GOAWAY whose last stream is below this one: not processed, yet not trusted as proof
    // (h2 does not say which stream a GOAWAY was reported for), so never NotSent either.
    let below = &seen[&format!("{:?}", H2Fault::GoAwayBelow(code::NO_ERROR))];
    assert_eq!(below.processed, 0, "{below:?}");
    assert_eq!(below.classes.get("not_sent"), None, "{below:?}");
    // Processed, then the stream reset or the connection told to go away without an answer:
    // never NotSent, and the property was checked on every round.
    for fault in [
        H2Fault::ResetBeforeHeaders(code::INTERNAL_ERROR),
        H2Fault::GoAwayAbove,
    ] {
        let s = &seen[&format!("{fault:?}")];
        assert_eq!(s.processed, half, "{fault:?}: {s:?}");
        assert_eq!(s.classes.get("not_sent"), None, "{fault:?}: {s:?}");
    }
}
