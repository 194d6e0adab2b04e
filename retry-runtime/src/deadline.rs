//! Deadlines as instants: a duration given in code may be anything up to `Duration::MAX`, and
//! an instant that far cannot be represented.

use std::time::Duration;

use tokio::time::Instant;

/// The instant `after` from `now`, saturating (a duration given in code may be anything up to
/// `Duration::MAX`; an instant that far cannot be represented, and a call that far away is a
/// call without a deadline in practice).
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    deadline_in(now, after).0
}

/// [`deadline_after`], with how long after `now` the instant it gives is (`after`, or less
/// where it saturated): a caller that knows `now` on another clock places the deadline there
/// too without reading the clock again.
pub(crate) fn deadline_in(now: Instant, after: Duration) -> (Instant, Duration) {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let after = after.min(FAR);
    match now.checked_add(after) {
        Some(deadline) => (deadline, after),
        None => now
            .checked_add(DAY)
            .map_or((now, Duration::ZERO), |deadline| (deadline, DAY)),
    }
}

/// The earlier of two optional deadlines.
pub(crate) fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_as_far_after_now_as_it_says() {
        let now = Instant::now();
        for after in [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_secs(200 * 365 * 24 * 3600),
            Duration::MAX,
        ] {
            let (deadline, within) = deadline_in(now, after);
            assert_eq!(deadline - now, within, "{after:?}");
            assert!(within <= after);
            assert_eq!(deadline_after(now, after), deadline);
        }
        assert_eq!(
            deadline_in(now, Duration::from_millis(250)).1,
            Duration::from_millis(250),
            "nothing saturates a deadline a program sets"
        );
    }
}
