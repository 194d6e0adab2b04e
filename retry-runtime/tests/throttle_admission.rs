//! What the default adaptive throttle holds against an upstream, through the attempt loop on
//! tokio's paused clock: failing answers and timeouts (the loop's, or one the error reports)
//! lower admission; connections that fail with no answer (a server closing them under load looks the same) and answers carrying a
//! pushback do not.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::{
    Error, Evidence, Method, Pushback, Registry, Retry, UpstreamConfig, throttle::ThrottleConfig,
};

/// A registry whose one upstream keeps the library's defaults (the throttle on), with one
/// attempt per call, so that each call is one first attempt the throttle judges, and refused
/// calls failing at once (`wait` off), so that each call's admission shows; waiting for
/// admission is `throttle_waiting.rs`'s.
fn registry() -> Arc<Registry> {
    let config = UpstreamConfig::new().with_max_attempts(1);
    assert!(config.throttle.is_some(), "the throttle is on by default");
    let config = config.with_throttle(Some(ThrottleConfig::new().with_wait(false)));
    Arc::new(
        Registry::builder()
            .upstream("up", config)
            .seed(7)
            .build()
            .unwrap(),
    )
}

/// Runs `n` calls one after another, each answered by `fail()`; returns how many reached the
/// upstream and how many the throttle refused.
async fn calls(reg: &Registry, n: u32, fail: impl Fn() -> AdapterError) -> (u32, u32) {
    let reached = AtomicU32::new(0);
    let mut refused = 0;
    for _ in 0..n {
        let result: Result<(), AdapterError> = Retry::in_registry(reg, "up")
            .method(Method::GET)
            .run(|_| {
                reached.fetch_add(1, Ordering::SeqCst);
                let failure = fail();
                async move { Err(failure) }
            })
            .await;
        if result.unwrap_err().is_throttled() {
            refused += 1;
        }
    }
    (reached.load(Ordering::SeqCst), refused)
}

#[tokio::test(start_paused = true)]
async fn connections_that_fail_with_no_answer_are_not_held_against_the_upstream() {
    let reg = registry();
    // Resets after the request was written (a server closing a connection it was rotating
    // looks the same), then refused connections: all within one window.
    let (reached, refused) = calls(&reg, 100, || AdapterError::new(Evidence::SentNoResponse)).await;
    assert_eq!((reached, refused), (100, 0));
    let (reached, refused) = calls(&reg, 100, || AdapterError::new(Evidence::NotSent)).await;
    assert_eq!((reached, refused), (100, 0));
    let upstream = reg.upstream("up").unwrap();
    let throttle = upstream.throttle().unwrap();
    assert_eq!(throttle.refusal_probability(), 0.0);
}

#[tokio::test(start_paused = true)]
async fn failing_answers_lower_admission_and_refusals_never_reach_the_upstream() {
    let reg = registry();
    let (reached, refused) = calls(&reg, 100, || AdapterError::Status(503)).await;
    // Every call either reached the upstream or was refused locally, and most were refused:
    // with nothing accepted, the window settles at about the square root of the calls.
    assert_eq!(reached + refused, 100);
    assert!(reached <= 20, "{reached} of 100 reached a failing upstream");
    let upstream = reg.upstream("up").unwrap();
    let throttle = upstream.throttle().unwrap();
    assert!(throttle.refusal_probability() > 0.8);
    // The window forgets: once it has passed, the next call goes through.
    tokio::time::advance(Duration::from_millis(600)).await;
    assert_eq!(throttle.refusal_probability(), 0.0);
    let (reached, refused) = calls(&reg, 1, || AdapterError::Status(503)).await;
    assert_eq!((reached, refused), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn attempts_that_time_out_are_not_accepted() {
    let reg = registry();
    // 20 concurrent calls to an upstream that takes longer than the 1 s attempt timeout.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let reg = reg.clone();
        tasks.spawn(async move {
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok::<(), AdapterError>(())
                })
                .await
                .unwrap_err()
        });
    }
    while let Some(error) = tasks.join_next().await {
        assert!(matches!(
            error.unwrap().runtime(),
            Some(Error::AttemptTimeout { .. })
        ));
    }
    let upstream = reg.upstream("up").unwrap();
    let throttle = upstream.throttle().unwrap();
    // 20 sent, none accepted: 20 / 21.
    assert!(throttle.refusal_probability() > 0.9);
}

#[tokio::test(start_paused = true)]
async fn an_answer_with_a_pushback_counts_as_accepted() {
    let reg = registry();
    for pushback in [Pushback::RetriesSpent, Pushback::Overloaded] {
        let (reached, refused) = calls(&reg, 100, || {
            AdapterError::Status(503).with_pushback(pushback)
        })
        .await;
        assert_eq!((reached, refused), (100, 0), "{pushback:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_the_error_reports_is_not_accepted() {
    // The adapter's own client gave up waiting (no status, the request may have been sent).
    let reg = registry();
    let (reached, refused) = calls(&reg, 100, || {
        AdapterError::new(Evidence::SentNoResponse).with_timed_out()
    })
    .await;
    assert_eq!(reached + refused, 100);
    assert!(
        reached <= 20,
        "{reached} of 100 reached an upstream that never answers in time"
    );
    // The same through the runtime's own error, passed on by an adapter.
    let reg = registry();
    let (reached, _) = calls(&reg, 100, || {
        AdapterError::new(Evidence::SentNoResponse).passing_on(Error::AttemptTimeout {
            upstream: "up".into(),
            attempt: 1,
            timeout: Duration::from_secs(1),
        })
    })
    .await;
    assert!(reached <= 20, "{reached} of 100");
}
