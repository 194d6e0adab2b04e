//! Deadlines as instants: a duration given in code may be anything up to `Duration::MAX`, and
//! an instant that far cannot be represented.

use std::time::Duration;

use tokio::time::Instant;

/// The instant `after` from `now`, saturating (a duration given in code may be anything up to
/// `Duration::MAX`; an instant that far cannot be represented, and a call that far away is a
/// call without a deadline in practice).
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(after.min(FAR))
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now)
}

/// The earlier of two optional deadlines.
pub(crate) fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
