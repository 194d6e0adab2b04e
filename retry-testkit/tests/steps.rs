//! Each scripted step is the fault it says, as the client's evidence classification sees it,
//! over both protocols: one attempt, the evidence the trace records, and whether the upstream
//! read the request whole.

use std::time::Duration;

use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Method, Retry, UpstreamConfig};
use retry_testkit::{CallError, Kit, Protocol, Reply, Step, Upstream};

/// One GET with one attempt; the first attempt's evidence and the requests' `processed`.
async fn evidence_of(protocol: Protocol, step: Step) -> (Option<String>, Vec<bool>) {
    let upstream = Upstream::start(protocol, [step.clone()]).await;
    let config = UpstreamConfig::new()
        .with_max_attempts(1)
        .with_attempt_timeout(Duration::from_millis(500));
    let kit = Kit::new("up", config).unwrap();
    let client = upstream.client();
    let call = Retry::in_registry(kit.registry(), "up")
        .method(Method::GET)
        .run(|_| async {
            let response = client.get(upstream.url("/x")).send_attempt().await?;
            Ok::<_, CallError>(response.read_bytes().await?)
        });
    let run = kit.run(&upstream, call).await;
    let attempt = run.trace.attempts().next().expect("one attempt").clone();
    (
        attempt.evidence,
        run.requests.iter().map(|r| r.processed).collect(),
    )
}

#[tokio::test]
async fn each_step_is_the_evidence_it_documents_over_http1_and_h2c() {
    use Protocol::*;
    let ambiguous: &[&str] = &["sent_no_response"];
    let racy: &[&str] = &["sent_no_response", "not_sent"];
    let rows: [(Protocol, Step, &[&str], &[bool]); 12] = [
        (
            Http1,
            Reply::status(503).into(),
            &["response_received"],
            &[true],
        ),
        (Http1, Step::RefuseBeforeRead, racy, &[]),
        (Http1, Step::CloseBeforeRead, racy, &[]),
        (Http1, Step::ResetAfterRead, ambiguous, &[true]),
        (Http1, Step::CloseAfterRead, ambiguous, &[true]),
        (Http1, Step::TruncatedBody, &["partial_response"], &[true]),
        (
            H2c,
            Reply::status(503).into(),
            &["response_received"],
            &[true],
        ),
        (H2c, Step::RefuseBeforeRead, &["not_sent"], &[false]),
        (H2c, Step::CloseBeforeRead, ambiguous, &[]),
        (H2c, Step::ResetAfterRead, ambiguous, &[true]),
        (H2c, Step::CloseAfterRead, ambiguous, &[true]),
        (H2c, Step::TruncatedBody, &["partial_response"], &[true]),
    ];
    for (protocol, step, expect, processed) in rows {
        let (evidence, seen) = evidence_of(protocol, step.clone()).await;
        let evidence = evidence.unwrap_or_default();
        assert!(
            expect.contains(&evidence.as_str()),
            "{protocol:?} {step:?}: evidence {evidence}, expected one of {expect:?}"
        );
        assert_eq!(
            seen, processed,
            "{protocol:?} {step:?}: what the upstream read"
        );
    }
}

#[tokio::test]
async fn a_delayed_reply_outlasting_the_attempt_timeout_is_sent_no_response() {
    let step = Step::from(Reply::status(200).delay(Duration::from_secs(2)));
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let (evidence, processed) = evidence_of(protocol, step.clone()).await;
        assert_eq!(
            evidence.as_deref(),
            Some("sent_no_response"),
            "{protocol:?}"
        );
        assert_eq!(processed, [true]);
    }
}

#[tokio::test]
async fn the_record_holds_method_path_headers_and_body_over_both_protocols() {
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let upstream = Upstream::start(protocol, []).await;
        let response = upstream
            .client()
            .put(upstream.url("/items/9?dry=1"))
            .header("x-trace", "abc")
            .body("hello")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let request = &upstream.requests()[0];
        assert_eq!(request.method, "PUT");
        assert_eq!(request.path, "/items/9?dry=1");
        assert_eq!(request.header("X-Trace"), Some("abc"));
        assert_eq!(request.body_text(), "hello");
        assert!(request.processed && request.is_write());
    }
}
