use std::time::Duration;

use super::*;

fn breaker() -> CircuitBreaker {
    CircuitBreaker::new(BreakerConfig {
        min_attempts: 4,
        failure_rate: 0.5,
        half_open_probes: 2,
        ..BreakerConfig::new()
    })
}

/// An `open_for` longer than the breaker's nanosecond clock can hold is refused by
/// validation, located at its key; a breaker built with one anyway stays open (it does not
/// wrap round to a fraction of a second).
#[tokio::test(start_paused = true)]
async fn an_open_for_beyond_the_clock_is_refused_and_never_wraps() {
    let huge = Duration::from_secs(18_446_744_074);
    let config = BreakerConfig {
        open_for: huge,
        min_attempts: 1,
        ..BreakerConfig::new()
    };
    let errors = crate::registry::Registry::builder()
        .upstream(
            "bank",
            crate::config::UpstreamConfig::new().with_breaker(Some(config)),
        )
        .build()
        .unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].field, "breaker.open_for", "{errors}");
    assert_eq!(errors.0[0].upstream, "bank", "{errors}");
    assert!(errors.0[0].message.contains("584 years"), "{errors}");
    let longest = BreakerConfig {
        open_for: Duration::from_nanos(u64::MAX),
        ..config
    };
    assert_eq!(longest.violations(), vec![]);

    let b = CircuitBreaker::new(config);
    b.record(b.admit().unwrap(), true);
    assert_eq!(b.state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(b.state(), BreakerState::Open, "still open an hour later");
    assert!(b.admit().is_none());
}

/// The default: a flaky upstream (half its attempts fail) is left to the retries and their
/// budget; an upstream that fails four attempts in five is down, and the breaker opens.
#[tokio::test(start_paused = true)]
async fn by_default_half_failing_keeps_it_closed_and_four_in_five_opens_it() {
    assert_eq!(BreakerConfig::new().failure_rate, 0.8);
    let b = CircuitBreaker::new(BreakerConfig::new());
    for i in 0..100 {
        b.record(b.admit().unwrap(), i % 2 == 0);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "50 % failures: flaky, not down"
    );
    let b = CircuitBreaker::new(BreakerConfig::new());
    for i in 0..19 {
        b.record(b.admit().unwrap(), i % 5 != 0);
    }
    assert_eq!(b.state(), BreakerState::Closed, "below min_attempts");
    b.record(b.admit().unwrap(), true); // 16 of 20 = 0.8
    assert_eq!(b.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn opens_on_the_failure_rate_fails_fast_and_recovers_through_half_open() {
    let b = breaker();
    for failed in [false, true, false] {
        b.record(b.admit().unwrap(), failed);
    }
    assert_eq!(b.state(), BreakerState::Closed, "below min_attempts");
    b.record(b.admit().unwrap(), true); // 2 of 4 = 0.5
    assert_eq!(b.state(), BreakerState::Open);
    assert!(b.admit().is_none(), "fails fast while open");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(b.state(), BreakerState::HalfOpen);
    let p1 = b.admit().unwrap();
    let p2 = b.admit().unwrap();
    assert!(b.admit().is_none(), "only the probes pass");
    b.record(p1, false);
    b.record(p2, false);
    assert_eq!(b.state(), BreakerState::Closed);
    assert!(b.admit().is_some());
}

/// A probe admission dropped unrecorded (its attempt never started, or was cancelled) frees
/// its slot at once; one from an earlier round never frees a slot of a later round.
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_gives_its_slot_back_in_its_own_round_only() {
    let b = breaker();
    for _ in 0..4 {
        b.record(b.admit().unwrap(), true);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    let p1 = b.admit().unwrap();
    let p2 = b.admit().unwrap();
    assert!(b.admit().is_none(), "both probe slots taken");
    drop(p2);
    let p3 = b.admit().expect("the dropped probe's slot is free again");
    b.record(p3, true);
    assert_eq!(b.state(), BreakerState::Open, "a failed probe reopens");
    tokio::time::advance(Duration::from_secs(5)).await;
    let q1 = b.admit().unwrap();
    let q2 = b.admit().unwrap();
    drop(p1); // from the round before: frees nothing now
    assert!(b.admit().is_none(), "the new round's slots are both taken");
    b.record(q1, false);
    b.record(q2, false);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens() {
    let b = breaker();
    for _ in 0..4 {
        b.record(b.admit().unwrap(), true);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    let p = b.admit().unwrap();
    b.record(p, true);
    assert_eq!(b.state(), BreakerState::Open);
    assert!(b.admit().is_none());
}

/// An attempt longer than the window is counted at its start, in the slot that now holds
/// the newest counts: it must not erase them (here, the successes that keep the rate low).
#[tokio::test(start_paused = true)]
async fn a_late_attempt_does_not_erase_newer_counts() {
    let b = CircuitBreaker::new(BreakerConfig {
        min_attempts: 4,
        window: Duration::from_secs(1),
        ..BreakerConfig::new()
    });
    tokio::time::advance(Duration::from_secs(5)).await;
    for _ in 0..3 {
        b.record(b.admit().unwrap(), true);
    }
    tokio::time::advance(Duration::from_millis(300)).await;
    for _ in 0..12 {
        b.record(b.admit().unwrap(), false);
    }
    // Started 1 s ago (a whole window): outside the window, and lands in the newest slot.
    let started = Instant::now() - Duration::from_secs(1);
    b.record_at(b.admit().unwrap(), true, started);
    b.record(b.admit().unwrap(), true);
    // 4 failures of 16 attempts in the window: 25 %, below the 50 % threshold.
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.successes.sum(b.clock.epoch()), 12);
    assert_eq!(b.failures.sum(b.clock.epoch()), 4);
}

#[test]
fn what_counts_as_an_upstream_failure() {
    assert!(is_upstream_failure(&Failure::status(503)));
    assert!(is_upstream_failure(&Failure::status(429)));
    assert!(!is_upstream_failure(&Failure::status(404)));
    assert!(is_upstream_failure(&Failure::new(Evidence::SentNoResponse)));
    assert!(is_upstream_failure(&Failure::new(Evidence::NotSent)));
    let mut local = Failure::new(Evidence::NotSent);
    local.rejection = Some(crate::category::Rejection::CircuitOpen);
    assert!(!is_upstream_failure(&local));
}

#[test]
fn connection_rotation_is_not_an_upstream_failure() {
    // GOAWAY NO_ERROR (sent, maybe processed), REFUSED_STREAM or a request handed back.
    assert!(!is_upstream_failure(
        &Failure::new(Evidence::SentNoResponse).rotated()
    ));
    assert!(!is_upstream_failure(
        &Failure::new(Evidence::NotSent).rotated()
    ));
    // A connect failure is NotSent too, and does say the upstream is down.
    assert!(is_upstream_failure(&Failure::new(Evidence::NotSent)));
    // A reset after the request was sent, a timeout: the upstream may be failing.
    assert!(is_upstream_failure(&Failure::new(Evidence::SentNoResponse)));
}
