use super::*;

#[test]
fn defaults_are_valid_and_fit_the_window() {
    let c = UpstreamConfig::new();
    assert_eq!(c.violations(), vec![]);
    assert_eq!(c.retry_window(), Duration::from_millis(4500));
}

#[test]
fn every_violation_is_reported_at_once() {
    let c = UpstreamConfig::new()
        .with_max_attempts(7)
        .with_backoff(Backoff::new().with_multiplier(1.0))
        .with_attempt_timeout(Duration::ZERO);
    let fields: Vec<_> = c.violations().iter().map(|v| v.field).collect();
    assert_eq!(fields, ["max_attempts", "multiplier", "attempt_timeout"]);
    assert!(c.violations()[0].message.contains("durable queue"));
}

#[test]
fn defaults_fit_the_window_with_decorrelated_jitter_too() {
    let backoff = UpstreamConfig::new()
        .backoff
        .with_jitter(Jitter::Decorrelated);
    let c = UpstreamConfig::new().with_backoff(backoff);
    assert_eq!(c.violations(), vec![]);
    assert_eq!(c.retry_window(), Duration::from_secs(5));
}

#[test]
fn a_deadline_beyond_the_in_memory_window_is_refused() {
    let c = UpstreamConfig::new().with_deadline(Duration::from_secs(3600));
    let v = c.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "deadline");
    assert!(v[0].message.contains("above the 5s"), "{}", v[0].message);
    assert_eq!(
        UpstreamConfig::new()
            .with_deadline(UpstreamConfig::MAX_IN_MEMORY_WINDOW)
            .violations(),
        vec![]
    );
}

#[test]
fn extreme_durations_are_violations_not_panics() {
    let max = Duration::MAX;
    let c = UpstreamConfig::new()
        .with_attempt_timeout(max)
        .with_deadline(max)
        .with_min_attempt_budget(max)
        .with_backoff(Backoff::new().with_initial(max).with_max_backoff(max));
    assert_eq!(c.retry_window(), max);
    let fields: Vec<_> = c.violations().iter().map(|v| v.field).collect();
    assert_eq!(fields, ["deadline", "min_attempt_budget", "max_attempts"]);
}

proptest::proptest! {
    /// Any durations a program may pass: validation answers, it never panics, and what it
    /// accepts fits the in-memory window.
    #[test]
    fn validation_never_panics_and_what_passes_fits_the_window(
        max_attempts in 0u32..8,
        initial in any_duration(),
        max_backoff in any_duration(),
        multiplier in proptest::num::f64::ANY,
        attempt_timeout in any_duration(),
        deadline in any_duration(),
        min_attempt_budget in any_duration(),
        decorrelated: bool,
        propagate: bool,
        default_timeout: bool,
    ) {
        let jitter = if decorrelated { Jitter::Decorrelated } else { Jitter::Full };
        let c = UpstreamConfig::new()
            .with_max_attempts(max_attempts)
            .with_backoff(
                Backoff::new()
                    .with_initial(initial)
                    .with_max_backoff(max_backoff)
                    .with_multiplier(multiplier)
                    .with_jitter(jitter),
            )
            .with_attempt_timeout(attempt_timeout)
            .with_deadline(deadline)
            .with_min_attempt_budget(min_attempt_budget)
            .with_propagate(propagate);
        let c = UpstreamConfig {
            attempt_timeout: (!default_timeout).then_some(attempt_timeout),
            ..c
        };
        let violations = c.violations();
        if violations.is_empty() {
            proptest::prop_assert!(c.retry_window() <= UpstreamConfig::MAX_IN_MEMORY_WINDOW);
            proptest::prop_assert!(c.deadline <= UpstreamConfig::MAX_IN_MEMORY_WINDOW);
            proptest::prop_assert!(crate::registry::Registry::builder().upstream("u", c).build().is_ok());
        } else {
            proptest::prop_assert!(crate::registry::Registry::builder().upstream("u", c).build().is_err());
        }
    }
}

/// Durations from zero to [`Duration::MAX`], weighted towards the edges and the window.
fn any_duration() -> impl proptest::strategy::Strategy<Value = Duration> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..10_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// `retry_window` is public: any `max_attempts`, up to `u32::MAX`, is answered at once and
/// saturates (validation refuses it, but a caller may ask first).
#[test]
fn the_retry_window_of_any_max_attempts_is_answered() {
    let c = UpstreamConfig::new().with_max_attempts(u32::MAX);
    // 500 ms, then the 1 s cap, for u32::MAX - 1 retries; a 1 s timeout for every attempt.
    let backoffs = Duration::from_secs(u64::from(u32::MAX) - 2) + Duration::from_millis(500);
    let attempts = Duration::from_secs(u64::from(u32::MAX));
    assert_eq!(c.retry_window(), backoffs + attempts);
    assert_eq!(c.violations()[0].field, "max_attempts");
}

#[test]
fn window_above_five_seconds_is_refused() {
    let c = UpstreamConfig::new().with_attempt_timeout(Duration::from_secs(2));
    let v = c.violations();
    assert_eq!(v.len(), 1);
    assert!(v[0].message.contains("above 5s"), "{}", v[0].message);
}

#[test]
fn a_propagating_hop_gives_its_callee_half_the_deadline_by_default() {
    assert_eq!(
        UpstreamConfig::new().attempt_timeout(),
        UpstreamConfig::DEFAULT_ATTEMPT_TIMEOUT
    );
    let hop = UpstreamConfig::new().with_propagate(true);
    assert_eq!(hop.attempt_timeout(), Duration::from_millis(2500));
    assert_eq!(
        hop.clone()
            .with_deadline(Duration::from_secs(2))
            .attempt_timeout(),
        Duration::from_secs(1)
    );
    assert_eq!(hop.violations(), vec![]);
    // 0.5 + 1 + 3 x 2.5 = 9 s of attempts, bounded by the 5 s deadline the callee is sent.
    assert_eq!(hop.retry_window(), Duration::from_secs(5));
    // A timeout that is set is kept, propagating or not.
    let set = hop.with_attempt_timeout(Duration::from_millis(300));
    assert_eq!(set.attempt_timeout(), Duration::from_millis(300));
}

#[test]
fn a_long_attempt_fits_the_window_only_when_the_callee_is_told_the_deadline() {
    let long = UpstreamConfig::new().with_attempt_timeout(Duration::from_secs(2));
    assert_eq!(long.violations()[0].field, "max_attempts");
    let told = long.with_propagate(true);
    assert_eq!(told.violations(), vec![]);
    assert_eq!(told.retry_window(), told.deadline);
}

#[test]
fn a_violation_names_an_attempt_timeout_derived_from_the_deadline() {
    let c = UpstreamConfig::new()
        .with_propagate(true)
        .with_deadline(Duration::from_millis(80));
    let v = c.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "min_attempt_budget");
    assert!(
        v[0].message.contains("(40ms, half the deadline)"),
        "{}",
        v[0].message
    );
}
