//! What a retry the throttle makes wait holds and spends, through the attempt loop on tokio's
//! paused clock: nothing of its failed attempt but the facts; its retry spent once, before the
//! wait, and given back if it is never let go; a wait cut to the time left, never given up
//! while time remains.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_fixtures::{AdapterError, DropProbe};
use retry_runtime::backoff::Backoff;
use retry_runtime::budget::BudgetConfig;
use retry_runtime::throttle::ThrottleConfig;
use retry_runtime::{Method, Registry, Retry, UpstreamConfig};
use tokio::time::Instant;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn registry(config: UpstreamConfig) -> Registry {
    Registry::builder()
        .upstream("up", config)
        .seed(3)
        .build()
        .unwrap()
}

/// A call whose first attempt fails with a 503 holding `probe` (as an HTTP error holds the
/// unread response and its connection), then succeeds. Another call has just failed with a 500
/// (not retried, counted against the upstream), so the throttle refuses the retry (the others'
/// attempts: none accepted), and the retry waits to be let go, as the probe.
async fn refused_retry(
    reg: &Registry,
    probe: DropProbe,
) -> (Result<(), AdapterError>, Vec<Instant>) {
    let other: Result<(), AdapterError> = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|_| async { Err(AdapterError::Status(500)) })
        .await;
    assert!(other.is_err());
    let attempts = Mutex::new(Vec::new());
    let probe = Mutex::new(Some(probe));
    let result = Retry::in_registry(reg, "up")
        .method(Method::GET)
        .run(|_| {
            attempts.lock().unwrap().push(Instant::now());
            let held = probe.lock().unwrap().take();
            async move {
                match held {
                    Some(probe) => Err(AdapterError::Status(503).holding(probe)),
                    None => Ok(()),
                }
            }
        })
        .await;
    (result, attempts.into_inner().unwrap())
}

/// The failed attempt's error (and the response in it) is dropped when the attempt fails, not
/// when the retry is let go: a call waiting out an outage pins no connection.
#[tokio::test(start_paused = true)]
async fn a_waiting_retry_holds_nothing_of_its_failed_attempt() {
    let reg = registry(UpstreamConfig::new());
    let drops = Arc::new(Mutex::new(Vec::new()));
    let (result, attempts) = refused_retry(&reg, DropProbe(drops.clone())).await;
    assert!(result.is_ok());
    assert_eq!(attempts.len(), 2);
    assert!(attempts[1] > attempts[0], "the retry waited");
    let dropped = drops.lock().unwrap().clone();
    assert_eq!(
        dropped,
        [attempts[0]],
        "dropped as the attempt failed, before the wait"
    );
}

/// A retry the throttle makes wait has spent its budget token before waiting: draining the
/// budget meanwhile does not fail it when it is let go.
#[tokio::test(start_paused = true)]
async fn a_retry_that_waited_never_then_fails_for_want_of_budget() {
    let budget = BudgetConfig::new()
        .with_ratio(0.0)
        .with_min_per_second(1)
        .with_window(Duration::from_secs(1));
    let reg = Arc::new(registry(UpstreamConfig::new().with_budget(budget)));
    let drained = Arc::new(AtomicU32::new(0));
    let drainer = {
        let (reg, drained) = (reg.clone(), drained.clone());
        tokio::spawn(async move {
            // While the retry waits, spend whatever the budget has left.
            tokio::time::sleep(ms(1)).await;
            let upstream = reg.upstream("up").unwrap();
            while upstream.budget().withdraw() {
                drained.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let drops = Arc::new(Mutex::new(Vec::new()));
    let (result, attempts) = refused_retry(&reg, DropProbe(drops)).await;
    drainer.await.unwrap();
    assert_eq!(attempts.len(), 2, "{result:?}");
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        drained.load(Ordering::SeqCst),
        0,
        "the waiting retry held the only token"
    );
}

/// A retry that waits and is never let go gets its budget token back.
#[tokio::test(start_paused = true)]
async fn a_retry_never_let_go_gets_its_budget_back() {
    let budget = BudgetConfig::new()
        .with_ratio(0.0)
        .with_min_per_second(2)
        .with_window(Duration::from_secs(1));
    // The first backoff step (up to 2 s) outlasts the hold (100 ms): the wait ends unlet.
    let slow = Backoff::new()
        .with_initial(Duration::from_secs(2))
        .with_max_backoff(Duration::from_secs(2));
    let config = UpstreamConfig::new()
        .with_budget(budget)
        .with_max_attempts(2)
        .with_backoff(slow)
        .with_throttle(Some(ThrottleConfig::new().with_hold(ms(100))));
    let reg = registry(config);
    let upstream = reg.upstream("up").unwrap();
    let before = upstream.budget().available();
    // Every attempt fails: the retry waits, the hold ends, the call fails unsent.
    let result: Result<(), AdapterError> = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .run(|_| async { Err(AdapterError::Status(503)) })
        .await;
    assert!(
        result.as_ref().is_err_and(AdapterError::is_throttled),
        "{result:?}"
    );
    assert_eq!(upstream.budget().available(), before);
}

/// A waiting retry whose drawn backoff overruns the deadline waits for the time left (and
/// goes, if it is let go then) rather than failing at once while time remains.
#[tokio::test(start_paused = true)]
async fn a_wait_is_cut_to_the_time_left_not_given_up() {
    let long = Backoff::new()
        .with_initial(Duration::from_secs(4))
        .with_max_backoff(Duration::from_secs(4));
    let config = UpstreamConfig::new()
        .with_backoff(long)
        .with_max_attempts(2)
        .with_attempt_timeout(ms(300))
        .with_deadline(ms(500));
    for seed in 0..10 {
        let reg = Registry::builder()
            .upstream("up", config.clone())
            .seed(seed)
            .build()
            .unwrap();
        let drops = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let (result, attempts) = refused_retry(&reg, DropProbe(drops)).await;
        let took = start.elapsed();
        // Let go (as the upstream's probe), it went and succeeded; otherwise it waited to the
        // deadline (500 ms) less the minimum attempt budget (50 ms), a timer tick aside.
        assert!(
            result.is_ok() || took >= ms(440),
            "seed {seed}: gave up after {took:?}: {result:?}"
        );
        assert!(took <= ms(500), "seed {seed}: {took:?}");
        assert!(
            result.is_ok() || attempts.len() == 1,
            "seed {seed}: {result:?}"
        );
    }
}
