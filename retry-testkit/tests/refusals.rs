//! What was refused and why: the trace names the rule and shows the budget it read.

use std::time::Duration;

use retry_runtime::budget::BudgetConfig;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{DenyReason, Method, Retry, UpstreamConfig};
use retry_testkit::{CallError, Kit, Upstream};

async fn get(kit: &Kit, upstream: &Upstream) -> retry_testkit::Run<Result<String, CallError>> {
    let client = upstream.client();
    let call = Retry::in_registry(kit.registry(), "up")
        .method(Method::GET)
        .run(|_| async {
            let response = client.get(upstream.url("/items/1")).send_attempt().await?;
            Ok::<_, CallError>(response.read_text().await?)
        });
    kit.run(upstream, call).await
}

#[tokio::test]
async fn an_empty_budget_refuses_the_retry_and_the_trace_says_so() {
    let empty = BudgetConfig::new().with_ratio(0.0).with_min_per_second(0);
    let config = UpstreamConfig::new()
        .with_budget(empty)
        .with_attempt_timeout(Duration::from_millis(500));
    let kit = Kit::new("up", config).unwrap();
    let upstream = Upstream::http1([503.into()]).await;

    let run = get(&kit, &upstream).await;

    run.assert_requests(1)
        .assert_denied(DenyReason::BudgetExhausted);
    let denied = run
        .trace
        .decisions()
        .find(|d| d.decision == "denied")
        .unwrap();
    assert_eq!(denied.budget_left, Some(0), "{run}");
    assert_eq!(run.output.as_ref().unwrap_err().status(), Some(503));
}

#[tokio::test]
async fn a_failing_assertion_prints_the_trace_and_the_requests() {
    let kit = Kit::new("up", UpstreamConfig::new()).unwrap();
    let upstream = Upstream::http1([404.into()]).await;
    let run = get(&kit, &upstream).await;
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run.assert_attempts(2);
    }))
    .expect_err("one attempt, not two");
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(
        message.starts_with("expected 2 attempts, the runtime made 1"),
        "{message}"
    );
    assert!(
        message.contains("#1 response_received 404 -> denied (status 404 is not retryable)"),
        "{message}"
    );
    assert!(
        message.contains("GET /items/1 no key processed"),
        "{message}"
    );
}
