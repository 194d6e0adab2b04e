//! What the builder's calls' attempts are and see: `call` (a closure that is not given its
//! attempt) and `run` (given it) side by side: each call counted in the budget at once, the
//! attempt and scope available when asked (with the builder's method, key and scope name),
//! failures retried with the builder's spec, waits timed out from the attempt's start, nothing
//! left behind by a panic.
//!
//! Each test has its own registry, on tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_runtime::{Attempt, Method, Operation, Registry, Retry, UpstreamConfig};
use retry_tests::AdapterError;
use tokio::time::Instant;

/// What a body saw of its attempt and scope.
#[derive(Debug, PartialEq)]
struct Seen {
    number: u32,
    method: Method,
    key: Option<String>,
    remaining: Duration,
    retries_left: Option<u32>,
    operation: String,
}

fn seen() -> Seen {
    let attempt = Attempt::current().expect("an attempt is installed");
    Seen {
        number: attempt.number(),
        method: attempt.method().clone(),
        key: attempt.idempotency_key().map(|k| k.as_str().to_owned()),
        remaining: attempt.remaining(),
        retries_left: attempt.retries_left(),
        operation: Operation::current().expect("a scope").name().to_owned(),
    }
}

fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream("fast", config)
        .build()
        .expect("valid test upstream")
}

fn config() -> UpstreamConfig {
    UpstreamConfig::new()
        .with_max_attempts(3)
        .with_deadline(Duration::from_secs(4))
        // Keyed writes are retried only where the upstream deduplicates on the key.
        .with_dedups_idempotency_key(true)
}

/// What a plain read of `upstream` through `call` (GET, no key, no name of its own) sees when
/// it asks.
async fn seen_by_a_read(registry: &Registry, upstream: &str) -> Seen {
    Retry::in_registry(registry, upstream)
        .method(Method::GET)
        .call(|| async { Ok::<_, AdapterError>(seen()) })
        .await
        .expect("a read that succeeds at once")
}

fn budget(registry: &Registry) -> u64 {
    registry.upstream("fast").unwrap().budget().available()
}

#[tokio::test(start_paused = true)]
async fn every_call_is_counted_in_the_budget_as_it_happens() {
    let registry = registry(config());
    let before = budget(&registry);
    let attempts = AtomicU32::new(0);
    let calls = 10;
    for n in 1..=calls {
        let value = Retry::in_registry(&registry, "fast")
            .method(Method::GET)
            .call(|| async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Ok::<_, AdapterError>(7)
            })
            .await
            .unwrap();
        assert_eq!(value, 7);
        // Each call is counted as it happens: 20 % of the calls so far, in whole tokens.
        assert_eq!(
            budget(&registry),
            before + u64::from(n) / 5,
            "after {n} calls"
        );
    }
    assert_eq!(attempts.load(Ordering::SeqCst), calls, "one attempt each");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_asks_gets_the_attempt_with_the_builders_method_key_and_name() {
    let registry = registry(config());
    let cases = [
        (Method::POST, None, "fast"),
        (Method::DELETE, None, "fast"),
        (Method::GET, None, "fast"),
        (Method::POST, Some("checkout"), "checkout"),
    ];
    for (method, name, operation) in cases {
        let retry = Retry::in_registry(&registry, "fast");
        let retry = match name {
            Some(name) => retry.operation(name),
            None => retry,
        };
        let seen = retry
            .method(method.clone())
            .idempotency("order-1:pay")
            .call(|| async { Ok::<_, AdapterError>(seen()) })
            .await
            .unwrap();
        assert_eq!(
            seen,
            Seen {
                number: 1,
                method,
                key: Some("order-1:pay".into()),
                remaining: Duration::from_secs(4),
                retries_left: Some(2),
                operation: operation.into(),
            }
        );
        assert!(Attempt::current().is_none(), "nothing left installed");
        assert!(Operation::current().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_keeps_the_builders_spec() {
    let registry = registry(config());
    let attempts = AtomicU32::new(0);
    let seen = Retry::in_registry(&registry, "fast")
        .method(Method::PUT)
        .idempotency("order-2:put")
        .call(|| async {
            match attempts.fetch_add(1, Ordering::SeqCst) {
                // Fails at once, asking nothing: the second attempt is made from the call's
                // own spec.
                0 => Err(AdapterError::status(503)),
                _ => Ok(seen()),
            }
        })
        .await
        .unwrap();
    assert_eq!(seen.number, 2, "the second attempt");
    assert_eq!(seen.method, Method::PUT);
    assert_eq!(seen.key.as_deref(), Some("order-2:put"));
    assert_eq!(seen.operation, "fast");
    assert_eq!(seen.retries_left, Some(1), "one retry spent");
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_waits_is_timed_out_from_its_start() {
    let registry = registry(
        config()
            .with_max_attempts(1)
            .with_attempt_timeout(Duration::from_millis(300)),
    );
    let start = Instant::now();
    let error = Retry::in_registry(&registry, "fast")
        .method(Method::GET)
        .call(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, AdapterError>(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            AdapterError::Runtime(retry_runtime::Error::AttemptTimeout { attempt: 1, .. })
        ),
        "{error:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn the_closure_is_not_called_when_the_upstream_is_unknown() {
    let registry = registry(config());
    let calls = AtomicU32::new(0);
    let error = Retry::in_registry(&registry, "missing")
        .method(Method::GET)
        .call(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, AdapterError>(()) }
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            AdapterError::Runtime(retry_runtime::Error::UnknownUpstream { name, .. }) if name == "missing"
        ),
        "{error:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing ran");
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_an_attempt_leaves_nothing_installed() {
    let registry = Arc::new(registry(config()));
    let task = {
        let registry = registry.clone();
        tokio::spawn(async move {
            Retry::in_registry(&registry, "fast")
                .method(Method::DELETE)
                .idempotency("doomed")
                .call(|| async {
                    if Attempt::current().is_some() {
                        panic!("the body panicked");
                    }
                    Ok::<_, AdapterError>(())
                })
                .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    assert!(Operation::current().is_none(), "no scope left installed");
    assert!(Attempt::current().is_none(), "no attempt left installed");
    // What the panicked call installed is gone: the next call sees its own method and no key.
    let seen = seen_by_a_read(&registry, "fast").await;
    assert_eq!(seen.method, Method::GET);
    assert_eq!(seen.key, None);
    assert_eq!(seen.operation, "fast", "named after its upstream");
}

/// Each builder call finds its own upstream's entry by name.
#[tokio::test(start_paused = true)]
async fn calls_to_two_upstreams_with_one_method_each_find_their_own_entry() {
    let registry = Registry::builder()
        .upstream("fast", config())
        .upstream(
            "other",
            UpstreamConfig::new()
                .with_max_attempts(2)
                .with_deadline(Duration::from_secs(2)),
        )
        .build()
        .expect("valid test upstreams");
    for _ in 0..3 {
        let fast = seen_by_a_read(&registry, "fast").await;
        assert_eq!(
            (fast.operation.as_str(), fast.retries_left),
            ("fast", Some(2))
        );
        assert_eq!(fast.remaining, Duration::from_secs(4));
        let other = seen_by_a_read(&registry, "other").await;
        assert_eq!(
            (other.operation.as_str(), other.retries_left),
            ("other", Some(1))
        );
        assert_eq!(other.remaining, Duration::from_secs(2));
    }
}

#[tokio::test(start_paused = true)]
async fn run_and_call_side_by_side_each_see_their_own_attempt() {
    let registry = registry(config());
    for round in 0..3 {
        let given = Retry::in_registry(&registry, "fast")
            .method(Method::PATCH)
            .idempotency(format!("run-{round}"))
            .run(|attempt| async move {
                let current = seen();
                assert_eq!(current.method, *attempt.method(), "the same attempt");
                Ok::<_, AdapterError>(current)
            })
            .await
            .unwrap();
        assert_eq!(given.method, Method::PATCH);
        assert_eq!(given.key, Some(format!("run-{round}")));

        let asked = seen_by_a_read(&registry, "fast").await;
        assert_eq!(asked.method, Method::GET);
        assert_eq!(asked.key, None, "nothing carried over from `run`");
    }
}
