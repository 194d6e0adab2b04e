//! The attempt loop on tokio's paused clock: delays, Retry-After, deadlines, budgets, ambiguity,
//! shared allowances and what is held during a backoff.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_fixtures::{AdapterError, DropProbe};
use retry_runtime::backoff::{Backoff, Jitter};
use retry_runtime::budget::BudgetConfig;
use retry_runtime::{
    AmbiguityReason, Attempt, Classify, Error, Evidence, Method, Reconciled, Registry,
    Replayability, Retry, UpstreamConfig, operation,
};
use tokio::time::Instant;

fn registry(config: UpstreamConfig) -> Registry {
    // The throttle is tested on its own (`throttle` unit tests, `throttle_admission`); here
    // it would refuse some of the scripted failures' retries.
    let config = if config.throttle == UpstreamConfig::new().throttle {
        config.with_throttle(None)
    } else {
        config
    };
    Registry::builder()
        .upstream("up", config)
        .seed(42)
        .build()
        .unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs a GET that always fails with `fail()` and returns the attempt start times.
async fn starts_of_failing_call(
    reg: &Registry,
    fail: impl Fn() -> AdapterError,
) -> (Vec<Instant>, Result<(), AdapterError>) {
    let starts = Mutex::new(Vec::new());
    let result = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|_| {
            starts.lock().unwrap().push(Instant::now());
            let f = fail();
            async move { Err::<(), _>(f) }
        })
        .await;
    (starts.into_inner().unwrap(), result)
}

#[tokio::test(start_paused = true)]
async fn full_jitter_delays_stay_within_the_exponential_ceiling() {
    let backoff = Backoff::new()
        .with_initial(ms(100))
        .with_max_backoff(ms(1000));
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(5)
            .with_backoff(backoff)
            .with_attempt_timeout(ms(500)),
    );
    for _ in 0..20 {
        let (starts, result) = starts_of_failing_call(&reg, || AdapterError::Status(503)).await;
        assert_eq!(starts.len(), 5);
        assert_eq!(
            result.unwrap_err().status(),
            Some(503),
            "the last error is returned"
        );
        for (i, w) in starts.windows(2).enumerate() {
            let gap = w[1] - w[0];
            assert!(
                gap <= backoff.ceiling(i as u32 + 1),
                "retry {}: {gap:?}",
                i + 1
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn decorrelated_jitter_delays_stay_between_initial_and_cap() {
    let backoff = Backoff::new()
        .with_initial(ms(100))
        .with_max_backoff(ms(800))
        .with_jitter(Jitter::Decorrelated);
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(5)
            .with_backoff(backoff)
            .with_attempt_timeout(ms(500)),
    );
    for _ in 0..20 {
        let (starts, _) = starts_of_failing_call(&reg, || AdapterError::Status(503)).await;
        let gaps: Vec<_> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps.len(), 4);
        for (i, gap) in gaps.iter().enumerate() {
            assert!(*gap >= ms(100) && *gap <= ms(800), "{gap:?}");
            if i > 0 {
                assert!(gap.as_secs_f64() <= (gaps[i - 1].as_secs_f64() * 2.0).max(0.1) + 1e-6);
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn same_seed_gives_the_same_schedule() {
    let config = UpstreamConfig::new()
        .with_max_attempts(4)
        .with_attempt_timeout(ms(300));
    let gaps = |starts: Vec<Instant>| starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>();
    let (a, _) =
        starts_of_failing_call(&registry(config.clone()), || AdapterError::Status(503)).await;
    let (b, _) = starts_of_failing_call(&registry(config), || AdapterError::Status(503)).await;
    assert_eq!(gaps(a), gaps(b));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_above_the_backoff_is_the_delay() {
    let reg = registry(UpstreamConfig::new());
    let (starts, _) = starts_of_failing_call(&reg, || {
        AdapterError::Status(429).with_retry_after(Duration::from_secs(1))
    })
    .await;
    assert_eq!(starts.len(), 3);
    assert_eq!(starts[1] - starts[0], Duration::from_secs(1));
    assert_eq!(starts[2] - starts[1], Duration::from_secs(1));
}

/// `Retry-After` is a floor under the backoff, not a replacement for it: a 429 saying `0` (a
/// server meaning "now", or a proxy under overload) is retried after the same jittered backoff
/// as one without a hint, never at once.
#[tokio::test(start_paused = true)]
async fn retry_after_zero_still_waits_the_backoff() {
    let gaps = |starts: Vec<Instant>| starts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>();
    let (hinted, _) = starts_of_failing_call(&registry(UpstreamConfig::new()), || {
        AdapterError::Status(429).with_retry_after(Duration::ZERO)
    })
    .await;
    let (plain, _) = starts_of_failing_call(&registry(UpstreamConfig::new()), || {
        AdapterError::Status(429)
    })
    .await;
    assert_eq!(hinted.len(), 3);
    let hinted = gaps(hinted);
    assert!(hinted.iter().all(|gap| !gap.is_zero()), "{hinted:?}");
    assert_eq!(hinted, gaps(plain), "the backoff the same seed draws");
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_deadline_denies_instead_of_sleeping() {
    let reg = registry(UpstreamConfig::new());
    let t0 = Instant::now();
    let (starts, result) = starts_of_failing_call(&reg, || {
        AdapterError::Status(503).with_retry_after(Duration::from_secs(60))
    })
    .await;
    assert_eq!(starts.len(), 1);
    assert_eq!(Instant::now(), t0, "no sleep happened");
    assert_eq!(result.unwrap_err().status(), Some(503));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_the_loop() {
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(5)
            .with_backoff(
                Backoff::new()
                    .with_initial(ms(100))
                    .with_max_backoff(ms(400)),
            )
            .with_attempt_timeout(ms(200)),
    );
    let t0 = Instant::now();
    let calls = AtomicU32::new(0);
    let result: Result<(), AdapterError> = operation("checkout")
        .deadline(ms(300))
        .run(
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|a: Attempt| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    assert!(a.timeout() <= a.remaining());
                    async move {
                        tokio::time::sleep(ms(120)).await;
                        Err(AdapterError::Status(503))
                    }
                }),
        )
        .await;
    // Attempt 1: 120 ms, a 503, a backoff (seeded); attempt 2 gets what is left of the 300 ms
    // and is cut exactly at the deadline; nothing is left for a third.
    let error = result.unwrap_err();
    assert!(
        matches!(error.runtime(), Some(Error::AttemptTimeout { attempt: 2, timeout, .. }) if *timeout < ms(200)),
        "{error:?}"
    );
    assert_eq!(Instant::now() - t0, ms(300), "cut exactly at the deadline");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_cut_at_its_timeout_and_a_read_is_retried() {
    let reg = registry(UpstreamConfig::new().with_attempt_timeout(ms(200)));
    let calls = AtomicU32::new(0);
    let result: Result<u32, Error> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|a| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if a.number() == 1 {
                    std::future::pending::<()>().await;
                }
                Ok(a.number())
            }
        })
        .await;
    assert_eq!(result.unwrap(), 2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A hop to one of your own services (`propagate`) gives its callee half the deadline per
/// attempt by default, so a callee that waits 2 s for its own dependency is not cut: the
/// same call to an upstream that does not propagate is cut at 1 s and retried.
#[tokio::test(start_paused = true)]
async fn a_propagating_attempt_has_half_the_deadline_by_default() {
    async fn two_second_call(config: UpstreamConfig) -> (Vec<Duration>, Result<u32, Error>) {
        let reg = registry(config);
        let timeouts = Mutex::new(Vec::new());
        let result = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|a| {
                timeouts.lock().unwrap().push(a.timeout());
                async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(a.number())
                }
            })
            .await;
        (timeouts.into_inner().unwrap(), result)
    }
    let (told, result) = two_second_call(UpstreamConfig::new().with_propagate(true)).await;
    assert_eq!(result.unwrap(), 1, "not cut");
    assert_eq!(told, [ms(2500)]);

    let (told, result) = two_second_call(UpstreamConfig::new()).await;
    assert!(result.is_err(), "every attempt cut at 1 s");
    assert_eq!(told[0], ms(1000));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_write_without_key_is_ambiguous() {
    let reg = registry(UpstreamConfig::new().with_attempt_timeout(ms(200)));
    let result: Result<(), Error> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .run(|_| std::future::pending())
        .await;
    let err = result.unwrap_err();
    let amb = err.as_ambiguous().expect("ambiguous");
    assert_eq!(amb.attempts, 1);
    assert_eq!(amb.evidence, Evidence::SentNoResponse);
    assert_eq!(amb.reason, AmbiguityReason::SentNoResponse);
    assert_eq!(&*amb.upstream, "up");
    assert!(amb.idempotency_key.is_none());
}

#[tokio::test(start_paused = true)]
async fn nothing_from_a_failed_attempt_is_held_during_the_backoff() {
    let reg = registry(UpstreamConfig::new());
    let drops = Arc::new(Mutex::new(Vec::new()));
    let ends = Mutex::new(Vec::new());
    let starts = Mutex::new(Vec::new());
    let _ = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| {
            starts.lock().unwrap().push(Instant::now());
            let drops = drops.clone();
            let ends = &ends;
            async move {
                tokio::time::sleep(ms(10)).await;
                ends.lock().unwrap().push(Instant::now());
                Err::<(), _>(AdapterError::Status(503).holding(DropProbe(drops)))
            }
        })
        .await;
    let (drops, ends, starts) = (
        drops.lock().unwrap().clone(),
        ends.into_inner().unwrap(),
        starts.into_inner().unwrap(),
    );
    assert_eq!(starts.len(), 3);
    for i in 0..2 {
        // The error (standing in for a response or a bulkhead permit) is dropped when the attempt
        // ends, not when the next one starts: the backoff holds nothing.
        assert_eq!(drops[i], ends[i]);
        assert!(drops[i] < starts[i + 1]);
    }
}

#[tokio::test(start_paused = true)]
async fn the_budget_bounds_retries_across_calls_and_denials_are_free() {
    let config = UpstreamConfig::new()
        .with_backoff(Backoff::new().with_initial(ms(1)).with_max_backoff(ms(2)))
        .with_budget(BudgetConfig::new().with_ratio(0.1).with_min_per_second(1));
    let reg = registry(config);
    let calls = AtomicU32::new(0);
    for _ in 0..100 {
        let _: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(AdapterError::Status(503)) }
            })
            .await;
    }
    let retries = calls.load(Ordering::SeqCst) - 100;
    // Exactly the budget: the floor (1/s x 10 s window) + 10 % of 100 calls.
    assert_eq!(retries, 10 + 10);
    assert_eq!(reg.upstream("up").unwrap().budget().available(), 0);
    // Denied retries spent nothing: 404s (denied) do not drain what remains.
    let before = reg.upstream("up").unwrap().budget().available();
    for _ in 0..50 {
        let _: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|_| async { Err(AdapterError::Status(404)) })
            .await;
    }
    // ... and the 50 calls deposited 5 tokens.
    assert_eq!(reg.upstream("up").unwrap().budget().available(), before + 5);
}

#[tokio::test(start_paused = true)]
async fn draining_stops_new_retries() {
    let reg = registry(UpstreamConfig::new());
    reg.drain().start();
    let (starts, _) = starts_of_failing_call(&reg, || AdapterError::Status(503)).await;
    assert_eq!(starts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn nested_retrying_calls_share_one_allowance() {
    // Two layers that each allow 3 attempts against an always-failing dependency: 3 calls, not 9.
    // The catalog's backoffs are short so the inner loop fits in the middle's attempt timeout
    // (which would otherwise, rightly, cut it short).
    let quick = Backoff::new().with_initial(ms(10)).with_max_backoff(ms(20));
    let reg = Registry::builder()
        .upstream("middle", UpstreamConfig::new())
        .upstream("catalog", UpstreamConfig::new().with_backoff(quick))
        .build()
        .unwrap();
    let catalog_calls = AtomicU32::new(0);
    let middle_calls = AtomicU32::new(0);
    let result: Result<(), Error> = Retry::in_registry(&reg, "middle")
        .method(Method::GET)
        .run(|_| {
            middle_calls.fetch_add(1, Ordering::SeqCst);
            let reg = &reg;
            let catalog_calls = &catalog_calls;
            async move {
                Retry::in_registry(reg, "catalog")
                    .method(Method::GET)
                    .run(|_| {
                        catalog_calls.fetch_add(1, Ordering::SeqCst);
                        async {
                            Err(Error::AttemptTimeout {
                                upstream: "catalog".into(),
                                attempt: 1,
                                timeout: ms(1),
                            })
                        }
                    })
                    .await
            }
        })
        .await;
    assert!(result.is_err());
    assert_eq!(catalog_calls.load(Ordering::SeqCst), 3);
    assert_eq!(middle_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_key_is_fixed_once_and_visible_to_every_attempt() {
    let reg = registry(UpstreamConfig::new());
    let seen = Mutex::new(Vec::new());
    let result: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .idempotency("order-7:register")
        .run(|a| {
            let current = Attempt::current().and_then(|c| c.idempotency_key().cloned());
            seen.lock()
                .unwrap()
                .push((a.idempotency_key().cloned(), current));
            async { Err(AdapterError::new(Evidence::SentNoResponse)) }
        })
        .await;
    // Out of attempts with the last one unanswered: the write may have happened, so the outcome
    // is ambiguous, carrying the key to replay with, never a plain failure.
    let err = result.unwrap_err();
    let amb = err
        .runtime()
        .and_then(Error::as_ambiguous)
        .expect("ambiguous");
    assert_eq!(amb.attempts, 3);
    assert_eq!(
        amb.idempotency_key.as_ref().unwrap().as_str(),
        "order-7:register"
    );
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen.len(),
        3,
        "a keyed write is retried after SentNoResponse"
    );
    for (given, _) in &seen {
        assert_eq!(given.as_ref().unwrap().as_str(), "order-7:register");
    }
}

#[tokio::test(start_paused = true)]
async fn an_invalid_key_fails_before_anything_is_sent() {
    let reg = registry(UpstreamConfig::new());
    let calls = AtomicU32::new(0);
    let result: Result<(), Error> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .idempotency("bad\r\nkey")
        .run(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .await;
    assert!(matches!(result, Err(Error::InvalidIdempotencyKey(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_upstream_is_an_error_never_a_default() {
    let reg = registry(UpstreamConfig::new());
    let result: Result<(), Error> = Retry::in_registry(&reg, "nope")
        .method(Method::GET)
        .run(|_| async { Ok(()) })
        .await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, Error::UnknownUpstream { name, known } if name == "nope" && known == &["up"])
    );
    assert!(err.to_string().contains("add it to the retry registry"));
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_body_is_sent_once() {
    let reg = registry(UpstreamConfig::new());
    let calls = AtomicU32::new(0);
    let result: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::PUT)
        .idempotency("k")
        .body(Replayability::OneShot)
        .run(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(AdapterError::Status(503)) }
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(result.unwrap_err().status(), Some(503));
}

async fn reconciled(answer: Reconciled<u32>) -> (u32, Result<u32, Error>) {
    let reg = registry(UpstreamConfig::new());
    let calls = AtomicU32::new(0);
    let answer = Mutex::new(Some(answer));
    let result = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .run_reconciled(
            |a| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if a.number() == 1 {
                        Err(Error::AttemptTimeout {
                            upstream: "up".into(),
                            attempt: 1,
                            timeout: ms(1),
                        })
                    } else {
                        Ok(200)
                    }
                }
            },
            || {
                let a = answer.lock().unwrap().take().unwrap_or(Reconciled::Unknown);
                async move { a }
            },
        )
        .await;
    (calls.load(Ordering::SeqCst), result)
}

#[tokio::test(start_paused = true)]
async fn reconcile_answers_lead_where_they_should() {
    let (calls, r) = reconciled(Reconciled::Happened(7)).await;
    assert_eq!((calls, r.unwrap()), (1, 7), "happened: its value, no retry");
    let (calls, r) = reconciled(Reconciled::NotHappened).await;
    assert_eq!((calls, r.unwrap()), (2, 200), "did not happen: retried");
    let (calls, r) = reconciled(Reconciled::Unknown).await;
    assert_eq!(calls, 1);
    assert!(
        r.unwrap_err().as_ambiguous().is_some(),
        "unknown: stays ambiguous"
    );
}

#[tokio::test(start_paused = true)]
async fn a_401_refreshes_once_then_replays() {
    let reg = registry(UpstreamConfig::new());
    let refreshes = Arc::new(AtomicU32::new(0));
    let r = refreshes.clone();
    reg.on_unauthorized("up", move || {
        r.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    });
    let (starts, result) = starts_of_failing_call(&reg, || AdapterError::Status(401)).await;
    assert_eq!(starts.len(), 2, "one refresh-and-replay, then denied");
    assert_eq!(refreshes.load(Ordering::SeqCst), 1);
    assert_eq!(result.unwrap_err().status(), Some(401));
}

#[tokio::test(start_paused = true)]
async fn the_bulkhead_permit_is_released_before_the_backoff() {
    let reg = registry(UpstreamConfig::new().with_bulkhead(Some(1)));
    let upstream = reg.upstream("up").unwrap();
    let in_flight_during_attempts = Mutex::new(Vec::new());
    let call = Retry::in_registry(&reg, "up").method(Method::GET).run(|_| {
        in_flight_during_attempts
            .lock()
            .unwrap()
            .push(upstream.in_flight());
        async {
            tokio::time::sleep(ms(10)).await;
            Err::<(), _>(AdapterError::Status(503).with_retry_after(Duration::from_secs(1)))
        }
    });
    let probe = async {
        tokio::time::sleep(ms(500)).await; // in the middle of the first backoff
        upstream.in_flight()
    };
    let (result, during_backoff) = tokio::join!(call, probe);
    assert!(result.is_err());
    assert_eq!(
        *in_flight_during_attempts.lock().unwrap(),
        [1, 1, 1],
        "each attempt holds the permit"
    );
    assert_eq!(
        during_backoff, 0,
        "no permit is held while the backoff waits"
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_rejects_locally_as_not_sent_within_the_deadline() {
    let reg = registry(UpstreamConfig::new().with_bulkhead(Some(1)));
    let t0 = Instant::now();
    let hog = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| async {
            tokio::time::sleep(ms(900)).await;
            Ok::<_, Error>(())
        });
    let calls = AtomicU32::new(0);
    let starved = async {
        let result = operation("starved")
            .deadline(ms(200))
            .run(
                Retry::in_registry(&reg, "up")
                    .method(Method::POST)
                    .run(|_| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        async { Ok::<_, Error>(()) }
                    }),
            )
            .await;
        (result, Instant::now() - t0)
    };
    let (hog, (starved, gave_up)) = tokio::join!(hog, starved);
    assert!(hog.is_ok());
    // It waited for a slot until its deadline left less than the minimum attempt budget.
    assert_eq!(gave_up, ms(200) - UpstreamConfig::new().min_attempt_budget);
    let err = starved.unwrap_err();
    assert!(matches!(err, Error::BulkheadFull { .. }), "{err}");
    assert_eq!(err.evidence(), Evidence::NotSent);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_admitted_after_waiting_for_a_slot_starts_then_with_what_is_left() {
    let reg = registry(UpstreamConfig::new().with_bulkhead(Some(1)));
    let t0 = Instant::now();
    let hog = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| async {
            tokio::time::sleep(ms(200)).await;
            Ok::<_, Error>(())
        });
    let seen = Mutex::new(None);
    let waiter = operation("waiter").deadline(ms(500)).run(
        Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|attempt| {
                *seen.lock().unwrap() = Some((Instant::now() - t0, attempt.timeout()));
                async { Ok::<_, Error>(()) }
            }),
    );
    let (hog, waiter) = tokio::join!(hog, waiter);
    assert!(hog.is_ok() && waiter.is_ok());
    let (started, timeout) = seen
        .lock()
        .unwrap()
        .expect("the waiter's attempt ran, once");
    assert_eq!(started, ms(200), "made only once the slot freed up");
    assert_eq!(
        timeout,
        ms(300),
        "its timeout is what the wait left of the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_mid_attempt_frees_its_slot_leaves_nothing_installed_and_still_counts() {
    let reg = registry(UpstreamConfig::new().with_bulkhead(Some(1)));
    let upstream = reg.upstream("up").unwrap();
    let tokens = upstream.budget().available();
    // Five calls (a fifth of a token each, at the default 20 %), each dropped by its caller's
    // own timeout while its attempt waits.
    for _ in 0..5 {
        let call = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|_| async {
                tokio::time::sleep(ms(1_000)).await;
                Ok::<_, Error>(())
            });
        let cancelled = tokio::time::timeout(ms(100), call).await;
        assert!(cancelled.is_err(), "the caller gave up first");
        assert_eq!(upstream.in_flight(), 0, "the bulkhead slot is free again");
        assert!(Attempt::current().is_none(), "no attempt left installed");
        assert!(
            retry_runtime::Operation::current().is_none(),
            "no scope left installed"
        );
    }
    assert_eq!(
        upstream.budget().available(),
        tokens + 1,
        "a cancelled call still counts in the budget"
    );
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_fails_fast_without_calling_the_upstream_and_recovers() {
    use retry_runtime::breaker::{BreakerConfig, BreakerState};
    let breaker = BreakerConfig::new()
        .with_min_attempts(4)
        .with_failure_rate(0.5)
        .with_half_open_probes(1);
    let reg = registry(
        UpstreamConfig::new()
            .with_breaker(Some(breaker))
            .with_max_attempts(2),
    );
    let calls = AtomicU32::new(0);
    let healthy = std::sync::atomic::AtomicBool::new(false);
    let call = || {
        Retry::in_registry(&reg, "up").method(Method::GET).run(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            let ok = healthy.load(Ordering::SeqCst);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(AdapterError::Status(503))
                }
            }
        })
    };
    for _ in 0..2 {
        let _ = call().await;
    }
    let upstream = reg.upstream("up").unwrap();
    assert_eq!(upstream.breaker().unwrap().state(), BreakerState::Open);
    let before = calls.load(Ordering::SeqCst);
    let t = Instant::now();
    let err = call().await.unwrap_err();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before,
        "no attempt reached the upstream"
    );
    assert!(matches!(err.runtime(), Some(Error::CircuitOpen { .. })));
    assert_eq!(Instant::now(), t, "failed fast: no backoff");
    tokio::time::advance(Duration::from_secs(5)).await;
    healthy.store(true, Ordering::SeqCst);
    assert!(call().await.is_ok(), "a half-open probe goes through");
    assert_eq!(upstream.breaker().unwrap().state(), BreakerState::Closed);
}

/// The breaker sees every attempt when it ends, so it judges a failure against every earlier
/// attempt: after 10 successes, 9 failures stay below a 50 % rate, the 10th reaches it (with
/// the successes unseen, the 4th failure would have opened it).
#[tokio::test(start_paused = true)]
async fn the_breaker_judges_a_failure_against_every_earlier_success() {
    use retry_runtime::breaker::{BreakerConfig, BreakerState};
    let breaker = BreakerConfig::new()
        .with_min_attempts(4)
        .with_failure_rate(0.5);
    let reg = registry(
        UpstreamConfig::new()
            .with_breaker(Some(breaker))
            .with_max_attempts(1),
    );
    let call = |ok: bool| {
        Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(move |_| async move {
                if ok {
                    Ok(())
                } else {
                    Err(AdapterError::Status(503))
                }
            })
    };
    for _ in 0..10 {
        call(true).await.unwrap();
    }
    let state = || reg.upstream("up").unwrap().breaker().unwrap().state();
    for n in 1..=10 {
        assert!(call(false).await.is_err());
        let expected = if n < 10 {
            BreakerState::Closed
        } else {
            BreakerState::Open
        };
        assert_eq!(state(), expected, "after {n} failures");
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_against_a_dead_upstream_is_bounded_by_the_budget() {
    // 1,000 operations, 3 attempts each, against an upstream that always answers 503. Without a
    // budget that is 3,000 calls; with 20 % + 10/s over 10 s it is at most 1.2 x 1,000 + 100.
    let reg = Arc::new(registry(UpstreamConfig::new()));
    let calls = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..1000 {
        let (reg, calls) = (reg.clone(), calls.clone());
        tasks.spawn(async move {
            let _: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .run(|_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Err(AdapterError::Status(503)) }
                })
                .await;
        });
    }
    while tasks.join_next().await.is_some() {}
    // Exactly the bound: every token of the floor and of the 20 % is spent, none more.
    assert_eq!(calls.load(Ordering::SeqCst), 1000 + 200 + 100);
}

#[tokio::test(start_paused = true)]
async fn a_write_stopped_by_any_gate_after_an_unanswered_attempt_is_ambiguous_and_a_read_is_not() {
    for (method, max_attempts) in [(Method::POST, 1), (Method::PUT, 2)] {
        let reg = registry(UpstreamConfig::new().with_max_attempts(max_attempts));
        let result: Result<(), Error> = Retry::in_registry(&reg, "up")
            .method(method.clone())
            .idempotency("k-1")
            .run(|_| async {
                Err(Error::AttemptTimeout {
                    upstream: "up".into(),
                    attempt: 1,
                    timeout: ms(1),
                })
            })
            .await;
        let err = result.unwrap_err();
        assert!(err.as_ambiguous().is_some(), "{method}: {err}");
    }
    let reg = registry(UpstreamConfig::new().with_max_attempts(1));
    let result: Result<(), Error> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| async {
            Err(Error::AttemptTimeout {
                upstream: "up".into(),
                attempt: 1,
                timeout: ms(1),
            })
        })
        .await;
    assert!(
        matches!(result, Err(Error::AttemptTimeout { .. })),
        "a read is simply failed"
    );
    // A response that settles the write is a plain failure even for a write.
    let result: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .run(|_| async { Err(AdapterError::Status(409)) })
        .await;
    assert_eq!(result.unwrap_err().status(), Some(409));
}

/// The attempt's timer is created only when the attempt first waits; an attempt that keeps
/// using up the task's cooperative budget (it is always ready to make progress, never done)
/// must still be cut at its timeout, as under tokio's own `timeout`. Real time: a paused clock
/// never advances while a task is always ready. The outer guard only turns a hang into a failure.
#[tokio::test]
async fn an_attempt_that_uses_up_the_cooperative_budget_is_still_cut_at_its_timeout() {
    let reg = registry(
        UpstreamConfig::new()
            .with_attempt_timeout(ms(100))
            .with_max_attempts(1),
    );
    let call = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| async {
            loop {
                tokio::task::consume_budget().await;
            }
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        });
    let result = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the attempt timeout fired");
    assert!(
        matches!(result, Err(Error::AttemptTimeout { attempt: 1, .. })),
        "{result:?}"
    );
}

/// A handle kept past its attempt stays that attempt's: the next attempt reuses the call's
/// allocation only when no handle to it is left, never by changing a live one.
#[tokio::test(start_paused = true)]
async fn an_attempt_handle_kept_past_its_attempt_still_describes_that_attempt() {
    let reg = registry(UpstreamConfig::new());
    let kept = Mutex::new(Vec::new());
    let result: Result<u32, AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|a| {
            kept.lock().unwrap().push(a.clone());
            async move {
                let installed = Attempt::current().map(|c| c.number());
                assert_eq!(installed, Some(a.number()), "installed while polled");
                if a.number() < 3 {
                    Err(AdapterError::new(Evidence::NotSent))
                } else {
                    Ok(a.number())
                }
            }
        })
        .await;
    assert_eq!(result.unwrap(), 3);
    let numbers: Vec<u32> = kept.lock().unwrap().iter().map(Attempt::number).collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert!(
        Attempt::current().is_none(),
        "nothing installed after the call"
    );
}

/// The 401 refresh hook runs inside the operation's deadline: a hook that hangs does not hold
/// the caller past it.
#[tokio::test(start_paused = true)]
async fn a_refresh_hook_that_hangs_is_cut_at_the_deadline() {
    let reg = registry(UpstreamConfig::new().with_deadline(Duration::from_secs(2)));
    reg.on_unauthorized("up", || async {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok(())
    });
    let start = Instant::now();
    let (starts, result) = starts_of_failing_call(&reg, || AdapterError::Status(401)).await;
    assert_eq!(
        starts.len(),
        1,
        "no replay after a refresh that never finished"
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "cut exactly at the deadline"
    );
    let error = result.unwrap_err();
    assert!(
        matches!(error.runtime(), Some(Error::DeadlineExceeded { .. })),
        "{error:?}"
    );
}

/// Shutdown wakes a call waiting out its backoff: it ends then, without sending the attempt it
/// was waiting for, with what its last failure means (ambiguous for a write that may have
/// executed).
#[tokio::test(start_paused = true)]
async fn draining_wakes_a_call_waiting_out_its_backoff_and_sends_nothing_more() {
    let backoff = Backoff::new()
        .with_initial(ms(1000))
        .with_max_backoff(ms(1000))
        .with_jitter(Jitter::Decorrelated);
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(3)
            .with_attempt_timeout(ms(500))
            .with_backoff(backoff),
    );
    let start = Instant::now();
    let drain_soon = async {
        tokio::time::sleep(ms(300)).await;
        reg.drain().start();
    };
    let ((starts, result), ()) = tokio::join!(
        starts_of_failing_call(&reg, || AdapterError::Status(503)),
        drain_soon
    );
    assert_eq!(starts.len(), 1, "the scheduled attempt is never sent");
    assert_eq!(start.elapsed(), ms(300), "woken when draining started");
    let error = result.unwrap_err();
    assert!(
        matches!(error.runtime(), Some(Error::Draining { attempts: 1, last_error, .. }) if last_error.contains("503")),
        "{error:?}"
    );

    // A read whose attempt may have executed: a plain failure.
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(3)
            .with_attempt_timeout(ms(500))
            .with_backoff(backoff),
    );
    let attempts = AtomicU32::new(0);
    let read = Retry::in_registry(&reg, "up").method(Method::GET).run(|_| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(AdapterError::new(Evidence::SentNoResponse)) }
    });
    let drain_soon = async {
        tokio::time::sleep(ms(300)).await;
        reg.drain().start();
    };
    let (read, ()) = tokio::join!(read, drain_soon);
    assert!(
        matches!(read.unwrap_err().runtime(), Some(Error::Draining { .. })),
        "a read is a plain failure"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);

    // A keyed write whose attempt may have executed: ambiguous (with its key), never a failure.
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(3)
            .with_attempt_timeout(ms(500))
            .with_backoff(backoff)
            .with_dedups_idempotency_key(true),
    );
    let write = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .idempotency("order-7:pay")
        .run(|_| async { Err::<(), _>(AdapterError::Status(503)) });
    let drain_soon = async {
        tokio::time::sleep(ms(300)).await;
        reg.drain().start();
    };
    let (written, ()) = tokio::join!(write, drain_soon);
    let error = written.unwrap_err();
    let ambiguous = error
        .runtime()
        .and_then(Error::as_ambiguous)
        .unwrap_or_else(|| panic!("ambiguous: {error:?}"));
    assert_eq!(ambiguous.reason, AmbiguityReason::Status(503));
    assert_eq!(ambiguous.attempts, 1);
    assert_eq!(
        ambiguous.idempotency_key.as_ref().map(|k| k.as_str()),
        Some("order-7:pay")
    );
}

/// A backoff that uses up the deadline leaves no time for the retry it was waiting for. The
/// caller is still told what the attempts got: a read's `DeadlineExceeded` keeps the last
/// status; a keyed write whose last attempt may have executed is ambiguous, with its key.
#[tokio::test(start_paused = true)]
async fn a_deadline_after_a_retry_keeps_what_the_last_attempt_got() {
    // The backoff is clamped to what is left of the deadline (less the minimum attempt budget,
    // zero here), so the retry finds no time. (With a real clock a timer's late wake-up does
    // the same with any minimum.)
    let long = Backoff::new()
        .with_initial(Duration::from_secs(1))
        .with_max_backoff(Duration::from_secs(1))
        .with_jitter(Jitter::Decorrelated);
    let reg = registry(
        UpstreamConfig::new()
            .with_max_attempts(2)
            .with_attempt_timeout(ms(500))
            .with_backoff(long)
            .with_deadline(Duration::from_secs(1))
            .with_min_attempt_budget(Duration::ZERO)
            .with_dedups_idempotency_key(true),
    );
    let (starts, result) = starts_of_failing_call(&reg, || AdapterError::Status(503)).await;
    assert_eq!(starts.len(), 1);
    let error = result.unwrap_err();
    assert!(
        matches!(
            error.runtime(),
            Some(Error::DeadlineExceeded {
                attempts: 1,
                last_status: Some(503),
                last_evidence: Some(Evidence::ResponseReceived),
                ..
            })
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("the last answered 503"),
        "{error}"
    );

    let write: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::POST)
        .idempotency("order-9:pay")
        .run(|_| async { Err(AdapterError::new(Evidence::SentNoResponse)) })
        .await;
    let error = write.unwrap_err();
    let ambiguous = error
        .runtime()
        .and_then(Error::as_ambiguous)
        .unwrap_or_else(|| panic!("ambiguous: {error:?}"));
    assert_eq!(ambiguous.reason, AmbiguityReason::SentNoResponse);
    assert_eq!(ambiguous.attempts, 1);
    assert_eq!(
        ambiguous.idempotency_key.as_ref().map(|k| k.as_str()),
        Some("order-9:pay")
    );
}

/// Attempts after a backoff are timed by the call's backoff timer, reset for each: every attempt
/// is still cut exactly at its own timeout, and none starts before its backoff is over.
#[tokio::test(start_paused = true)]
async fn every_attempt_is_cut_at_its_own_timeout_after_backoffs_too() {
    let backoff = Backoff::new()
        .with_initial(ms(100))
        .with_max_backoff(ms(1000));
    let reg = registry(
        UpstreamConfig::new()
            .with_attempt_timeout(ms(200))
            .with_backoff(backoff)
            .with_deadline(Duration::from_secs(5)),
    );
    struct Ends(Arc<Mutex<Vec<(u32, Instant, Instant)>>>, u32, Instant);
    impl Drop for Ends {
        fn drop(&mut self) {
            self.0
                .lock()
                .unwrap()
                .push((self.1, self.2, Instant::now()));
        }
    }
    for _ in 0..10 {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let result: Result<(), Error> = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .run(|a| {
                let ends = Ends(seen.clone(), a.number(), Instant::now());
                async move {
                    let _ends = ends;
                    std::future::pending().await
                }
            })
            .await;
        assert!(
            matches!(result, Err(Error::AttemptTimeout { attempt: 3, .. })),
            "{result:?}"
        );
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        for (i, (number, start, end)) in seen.iter().enumerate() {
            assert_eq!(*number, i as u32 + 1);
            assert_eq!(
                *end - *start,
                ms(200),
                "attempt {number} cut at its timeout"
            );
        }
        for pair in seen.windows(2) {
            assert!(
                pair[1].1 >= pair[0].2,
                "an attempt starts after the previous one ended"
            );
        }
    }
}

/// A call's future, and a scope's, can be spawned on a multi-thread runtime (what an attempt
/// installs around its body lives in the future and moves with it).
#[test]
fn a_calls_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let registry = registry(UpstreamConfig::new());
    let call = Retry::in_registry(&registry, "up")
        .method(Method::GET)
        .call(|| async { Ok::<u32, AdapterError>(1) });
    send(&call);
    let run = Retry::in_registry(&registry, "up")
        .method(Method::GET)
        .run(|attempt: Attempt| async move { Ok::<u32, AdapterError>(attempt.number()) });
    send(&run);
    send(&operation("op").run(call));
}
