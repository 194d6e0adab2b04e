use super::*;

/// An upstream for unit tests.
pub(crate) fn upstream() -> Arc<Upstream> {
    crate::registry::Registry::builder()
        .upstream("up", crate::config::UpstreamConfig::new())
        .build()
        .expect("registry")
        .upstream("up")
        .expect("upstream")
}

/// Attempt `number` for unit tests.
pub(crate) fn attempt_number(number: u32) -> Attempt {
    let now = Instant::now();
    Attempt {
        upstream: upstream(),
        number,
        method: http::Method::GET,
        key: None,
        deadline: now + Duration::from_secs(1),
        ends: now + Duration::from_millis(100),
        started: now,
        retries_left: None,
        span: tracing::Span::none(),
    }
}

/// A first attempt for unit tests.
pub(crate) fn attempt() -> Attempt {
    attempt_number(1)
}

#[tokio::test(start_paused = true)]
async fn an_attempt_ends_at_its_timeout_or_the_deadline_whichever_is_first() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(1);
    let ms = Duration::from_millis;
    assert_eq!(Attempt::ends_at(now, ms(100), deadline), now + ms(100));
    assert_eq!(Attempt::ends_at(now, ms(2000), deadline), deadline);
    assert_eq!(
        Attempt::ends_at(now, Duration::MAX, deadline),
        deadline,
        "no overflow, clamped to the deadline"
    );
    let mut a = attempt();
    assert_eq!(a.timeout(), ms(100));
    a.ends = a.deadline;
    assert_eq!(a.time_left(), Duration::from_secs(1));
    assert_eq!(a.timeout(), Duration::from_secs(1));
}
