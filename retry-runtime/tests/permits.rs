//! Whatever ends an attempt, what its admission holds goes back: the upstream's bulkhead slot,
//! and a half-open breaker's probe admission. A call dropped mid-attempt or mid-backoff, a body
//! that panics, hedged copies cancelled because another copy won, copies that all fail: none
//! of them may leave a slot taken (the upstream would serve fewer attempts for good) or a probe
//! unanswered (the breaker would refuse every attempt until another `open_for` passed).
//!
//! Each test opens the upstream's breaker and lets it turn half-open, so an attempt is admitted
//! only as a probe, on tokio's paused clock.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use retry_fixtures::AdapterError;
use retry_runtime::breaker::{BreakerConfig, BreakerState, CircuitBreaker};
use retry_runtime::hedge::HedgeConfig;
use retry_runtime::{Attempt, Method, Registry, Retry, Upstream, UpstreamConfig};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const OPEN_FOR: Duration = Duration::from_secs(1);

/// An upstream with `slots` bulkhead slots and a breaker letting `probes` probes through while
/// half-open, hedging after 50 ms when `hedge`.
fn registry(slots: usize, probes: u32, hedge: bool) -> Registry {
    let breaker = BreakerConfig::new()
        .with_failure_rate(1.0)
        .with_min_attempts(1)
        .with_window(Duration::from_secs(10))
        .with_open_for(OPEN_FOR)
        .with_half_open_probes(probes);
    let config = UpstreamConfig::new()
        .with_max_attempts(2)
        .with_bulkhead(Some(slots))
        .with_breaker(Some(breaker))
        .with_hedge(hedge.then(|| HedgeConfig::after(ms(50))));
    Registry::builder()
        .upstream("up", config)
        .seed(7)
        .build()
        .unwrap()
}

fn breaker(up: &Upstream) -> &CircuitBreaker {
    up.breaker().expect("the upstream has a breaker")
}

/// Opens the breaker (one failure is enough) and waits until it lets probes through.
async fn half_open(up: &Upstream) {
    let b = breaker(up);
    b.record(b.admit().unwrap(), true);
    assert_eq!(b.state(), BreakerState::Open);
    tokio::time::advance(OPEN_FOR).await;
    assert_eq!(b.state(), BreakerState::HalfOpen);
}

/// How many probes the breaker admits now (each given back as it is dropped, after counting).
fn free_probes(up: &Upstream) -> usize {
    let b = breaker(up);
    let admitted: Vec<_> = std::iter::from_fn(|| b.admit()).take(10).collect();
    admitted.len()
}

/// Polls `future` once.
fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_attempt_gives_its_slot_and_its_probe_back() {
    let reg = registry(1, 1, false);
    let up = reg.upstream("up").unwrap();
    half_open(&up).await;
    {
        let call = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .call(std::future::pending::<Result<u32, AdapterError>>);
        let mut call = pin!(call);
        assert!(poll_once(call.as_mut()).is_pending());
        assert_eq!(up.in_flight(), 1, "the attempt holds the only slot");
        assert_eq!(free_probes(&up), 0, "and the only probe");
    }
    assert_eq!(up.in_flight(), 0, "dropped: the slot is free");
    assert_eq!(free_probes(&up), 1, "and so is the probe");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_backoff_holds_nothing() {
    let reg = registry(1, 1, false);
    let up = reg.upstream("up").unwrap();
    {
        let call = Retry::in_registry(&reg, "up")
            .method(Method::GET)
            .call(|| async { Err::<u32, _>(AdapterError::Status(503)) });
        let mut call = pin!(call);
        // The first attempt fails at once; the call then waits out its backoff.
        assert!(poll_once(call.as_mut()).is_pending());
        assert_eq!(up.in_flight(), 0, "the slot went back before the backoff");
        assert_eq!(
            breaker(&up).state(),
            BreakerState::Open,
            "the failure counted"
        );
    }
    assert_eq!(up.in_flight(), 0);
    tokio::time::advance(OPEN_FOR).await;
    assert_eq!(
        free_probes(&up),
        1,
        "no probe was taken by the retry that never ran"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_panics_gives_its_slot_and_its_probe_back() {
    let reg = Arc::new(registry(1, 1, false));
    let up = reg.upstream("up").unwrap();
    half_open(&up).await;
    let task = tokio::spawn({
        let reg = reg.clone();
        async move {
            Retry::in_registry(&reg, "up")
                .method(Method::GET)
                .call(|| async {
                    tokio::task::yield_now().await;
                    if Attempt::current().is_some() {
                        panic!("the body panics inside its attempt");
                    }
                    Ok::<u32, AdapterError>(1)
                })
                .await
        }
    });
    let ended = task.await.expect_err("the task panicked");
    assert!(ended.is_panic());
    assert_eq!(up.in_flight(), 0);
    assert_eq!(free_probes(&up), 1);
}

/// One copy answers; the slow one is cancelled: its slot and its probe go back at once.
#[tokio::test(start_paused = true)]
async fn hedged_copies_that_lose_the_race_give_their_slots_and_probes_back() {
    let reg = registry(3, 3, true);
    let up = reg.upstream("up").unwrap();
    half_open(&up).await;
    let won = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .hedged()
        .call(|| async {
            let number = Attempt::current().map_or(0, |a| a.number());
            match number {
                1 => std::future::pending().await,
                n => {
                    tokio::time::sleep(ms(10)).await;
                    Ok::<u32, AdapterError>(n)
                }
            }
        })
        .await;
    assert_eq!(won.unwrap(), 2, "the hedge won");
    assert_eq!(up.in_flight(), 0, "the cancelled copy's slot is free");
    // Three probes: the winner's success counted (its probe stays taken), the loser's is free.
    assert_eq!(breaker(&up).state(), BreakerState::HalfOpen);
    assert_eq!(free_probes(&up), 2);
}

/// Every copy fails: each is counted, and nothing stays taken.
#[tokio::test(start_paused = true)]
async fn hedged_copies_that_all_fail_leave_nothing_taken() {
    let reg = registry(3, 3, true);
    let up = reg.upstream("up").unwrap();
    half_open(&up).await;
    let lost = Retry::in_registry(&reg, "up")
        .method(Method::GET)
        .hedged()
        .call(|| async {
            tokio::time::sleep(ms(100)).await;
            Err::<u32, _>(AdapterError::Status(503))
        })
        .await;
    assert!(matches!(lost, Err(AdapterError::Status(503))), "{lost:?}");
    assert_eq!(up.in_flight(), 0);
    assert_eq!(breaker(&up).state(), BreakerState::Open, "failed probes");
    tokio::time::advance(OPEN_FOR).await;
    assert_eq!(free_probes(&up), 3, "the next round has every probe");
}
