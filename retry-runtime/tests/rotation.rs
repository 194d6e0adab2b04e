//! Connection rotation in the attempt loop, on tokio's paused clock: free and immediate while
//! the upstream makes progress, ordinary retries (backoff, attempts, budget) when it does not,
//! never counted by the circuit breaker, and never a reason to re-send an unkeyed write that
//! may have been processed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::breaker::{BreakerConfig, BreakerState};
use retry_runtime::budget::BudgetConfig;
use retry_runtime::{Error, Evidence, Method, Registry, Retry, UpstreamConfig};
use tokio::time::Instant;

/// A GOAWAY with `NO_ERROR`: sent, maybe processed, rotation.
fn goaway() -> AdapterError {
    AdapterError::new(Evidence::SentNoResponse).rotated()
}

/// A reset after the request was sent: not rotation.
fn reset() -> AdapterError {
    AdapterError::new(Evidence::SentNoResponse)
}

fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream("up", config)
        .seed(42)
        .build()
        .unwrap()
}

/// A call of `method` (keyed when `key`) whose attempts answer `outcome(n)` for the n-th
/// attempt (1-based); returns the result and the attempts made.
async fn call(
    reg: &Registry,
    method: Method,
    key: bool,
    outcome: impl Fn(u32) -> Result<(), AdapterError>,
) -> (Result<(), AdapterError>, u32) {
    let attempts = AtomicU32::new(0);
    let retry = Retry::in_registry(reg, "up").method(method);
    let retry = match key {
        true => retry.idempotency("order-1"),
        false => retry,
    };
    let result = retry
        .run(|a| {
            attempts.store(a.number(), Ordering::Relaxed);
            let r = outcome(a.number());
            async move { r }
        })
        .await;
    (result, attempts.load(Ordering::Relaxed))
}

#[tokio::test(start_paused = true)]
async fn while_the_upstream_makes_progress_rotation_retries_are_immediate_and_free() {
    // One connection serving 3 requests among 200 concurrent callers: a caller can be turned
    // away by dozens of GOAWAYs in a row while the others' requests succeed between them.
    let with_breaker =
        UpstreamConfig::new().with_breaker(Some(retry_runtime::breaker::BreakerConfig::new()));
    let reg = Arc::new(registry(with_breaker));
    let up = reg.upstream("up").unwrap();
    let tokens = up.budget().available();
    let start = Instant::now();
    let progress = up.clone();
    let (result, attempts) = call(&reg, Method::GET, false, move |n| {
        // Someone else's request succeeds on each connection.
        progress.budget().record_progress();
        match n {
            1..=40 => Err(goaway()),
            _ => Ok(()),
        }
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(attempts, 41, "40 rotations, then the success");
    assert_eq!(start.elapsed(), Duration::ZERO, "no backoff");
    assert_eq!(up.budget().available(), tokens, "no budget token spent");
    let breaker = up.breaker().expect("a breaker");
    assert_eq!(breaker.state(), BreakerState::Closed);
    // Nor does the throttle count the rotations against the upstream.
    let throttle = up.throttle().expect("a throttle");
    assert_eq!(throttle.refusal_probability(), 0.0);
}

#[tokio::test(start_paused = true)]
async fn without_progress_a_rotation_storm_is_an_ordinary_retry_and_the_budget_stops_it() {
    // A server that turns every request away (no success anywhere): after the first two free
    // rotation retries, each is an ordinary retry: backoff, a budget token, the attempt limit.
    let reg = registry(UpstreamConfig::new());
    let start = Instant::now();
    let (result, attempts) = call(&reg, Method::GET, false, |_| Err(goaway())).await;
    assert!(result.is_err());
    assert_eq!(
        attempts,
        2 + 3,
        "two free rotation retries, then max_attempts (3)"
    );
    assert!(
        start.elapsed() > Duration::ZERO,
        "the ordinary retries backed off"
    );

    // Many calls at once: the budget (10/s floor over 10 s = 100 tokens, plus 20 % of calls)
    // bounds the ordinary retries of the whole storm; the free ones are two per call.
    let reg = Arc::new(registry(
        UpstreamConfig::new().with_budget(BudgetConfig::new()),
    ));
    let calls = 1_000u32;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..calls {
        let reg = reg.clone();
        tasks.spawn(async move { call(&reg, Method::GET, false, |_| Err(goaway())).await.1 });
    }
    let mut total = 0;
    while let Some(a) = tasks.join_next().await {
        total += a.unwrap();
    }
    let ordinary = total - 3 * calls; // each call: its first attempt and two free retries
    eprintln!("rotation storm: {calls} calls, {total} attempts, {ordinary} ordinary retries");
    // 100 floor tokens + 20 % of 1000 calls = 300 ordinary retries at most.
    assert!(ordinary <= 300, "{ordinary} ordinary retries");
    assert!(ordinary >= 250, "the budget was used: {ordinary}");
}

#[tokio::test(start_paused = true)]
async fn rotation_never_opens_the_breaker_but_resets_still_do() {
    let breaker = BreakerConfig::new()
        .with_min_attempts(5)
        .with_failure_rate(0.5);
    let reg = registry(UpstreamConfig::new().with_breaker(Some(breaker)));
    let up = reg.upstream("up").unwrap();
    for _ in 0..20 {
        let _ = call(&reg, Method::GET, false, |_| Err(goaway())).await;
    }
    assert_eq!(up.breaker().unwrap().state(), BreakerState::Closed);
    for _ in 0..5 {
        let _ = call(&reg, Method::GET, false, |_| Err(reset())).await;
    }
    assert_eq!(up.breaker().unwrap().state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn an_unkeyed_write_after_a_goaway_stays_ambiguous_a_keyed_one_is_retried() {
    let reg = registry(UpstreamConfig::new());
    let (result, attempts) = call(&reg, Method::POST, false, |_| Err(goaway())).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error.runtime(), Some(Error::Ambiguous(_))),
        "{error}"
    );
    assert_eq!(attempts, 1);

    // Nothing sent (a request handed back, REFUSED_STREAM): retried at once, any method.
    let start = Instant::now();
    let (result, attempts) = call(&reg, Method::POST, false, |n| match n {
        1 => Err(goaway().with_evidence(Evidence::NotSent)),
        _ => Ok(()),
    })
    .await;
    assert!(result.is_ok());
    assert_eq!((attempts, start.elapsed()), (2, Duration::ZERO));

    let (result, attempts) = call(&reg, Method::POST, true, |n| match n {
        1 => Err(goaway()),
        _ => Ok(()),
    })
    .await;
    assert!(result.is_ok());
    assert_eq!((attempts, start.elapsed()), (2, Duration::ZERO));
}
