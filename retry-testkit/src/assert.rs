//! Assertions for the questions a reviewer asks of an adapter: how many attempts, which key,
//! was a write repeated, were the delays the configured ones, what was refused and why.
//!
//! Each panics with the whole [`Run`] (decision trace and requests) in its message, and
//! returns the run so they chain.

use std::collections::HashMap;
use std::time::Duration;

use retry_runtime::DenyReason;
use retry_runtime::backoff::Backoff;

use crate::kit::Run;

impl<T> Run<T> {
    /// Asserts that the calls made `n` attempts in all (by the runtime's count: a rotation
    /// retry, sent again at once for free, is an attempt here).
    #[track_caller]
    pub fn assert_attempts(&self, n: usize) -> &Self {
        let made = self.trace.attempts().count();
        assert!(
            made == n,
            "expected {n} attempts, the runtime made {made}\n{self}"
        );
        self
    }

    /// Asserts that the upstream received `n` requests.
    #[track_caller]
    pub fn assert_requests(&self, n: usize) -> &Self {
        self.require_requests("assert_requests");
        let received = self.requests.len();
        assert!(
            received == n,
            "expected the upstream to receive {n} requests, it received {received}\n{self}"
        );
        self
    }

    /// Asserts that every request the upstream received carried the same `Idempotency-Key`,
    /// and returns it.
    #[track_caller]
    pub fn assert_one_key(&self) -> String {
        self.require_requests("assert_one_key");
        let keys: Vec<Option<&str>> = self.requests.iter().map(|r| r.key()).collect();
        match keys.first() {
            None => panic!("expected requests with one idempotency key, none arrived\n{self}"),
            Some(None) => panic!("request 1 arrived without an idempotency key\n{self}"),
            Some(Some(first)) => {
                if let Some(i) = keys.iter().position(|k| k != &Some(*first)) {
                    panic!(
                        "request {} carried key {:?}, request 1 carried {first:?}\n{self}",
                        i + 1,
                        keys[i]
                    );
                }
                (*first).to_owned()
            }
        }
    }

    /// Asserts that no write without an idempotency key was processed twice by the upstream
    /// (the same method and target): the double charge a retry library must never cause. A
    /// request the upstream turned away before reading it ([`Step::RefuseBeforeRead`] over
    /// h2c) is not counted: the client can prove it was not processed, and sending it again
    /// is safe.
    ///
    /// [`Step::RefuseBeforeRead`]: crate::Step::RefuseBeforeRead
    #[track_caller]
    pub fn assert_no_unkeyed_write_twice(&self) -> &Self {
        self.require_requests("assert_no_unkeyed_write_twice");
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        for request in self
            .requests
            .iter()
            .filter(|r| r.processed && r.is_write() && r.key().is_none())
        {
            let count = seen.entry((&request.method, &request.path)).or_default();
            *count += 1;
            assert!(
                *count < 2,
                "{} {} was processed {} times without an idempotency key\n{self}",
                request.method,
                request.path,
                count
            );
        }
        self
    }

    /// Asserts that every backoff delay the runtime chose lies within the bounds of the
    /// upstream's configured backoff (as the registry holds it): for full jitter, at most
    /// `min(max_backoff, initial * multiplier^(n-1))` before retry `n`; for decorrelated
    /// jitter, between `initial` and `max_backoff`.
    ///
    /// A `Retry-After` the upstream sends overrides the backoff (the runtime honours it), so
    /// script no `Retry-After` for this assertion, or check [`Trace::delays`](crate::Trace::delays)
    /// yourself. Rotation retries (reason `connection_rotated`) are sent at once and skipped.
    #[track_caller]
    pub fn assert_delays_within_backoff(&self) -> &Self {
        for call in &self.trace.calls {
            let Ok(upstream) = self.registry.upstream(&call.upstream) else {
                panic!(
                    "upstream `{}` is not in the kit's registry\n{self}",
                    call.upstream
                );
            };
            let backoff = upstream.config().backoff;
            let retries = call
                .attempts
                .iter()
                .flat_map(|a| a.decisions.iter())
                .filter(|d| d.decision == "retry")
                .filter(|d| !is_rotation(d.reason.as_deref()));
            for (n, decision) in retries.enumerate() {
                let Some(delay) = decision.delay else {
                    panic!("retry {} logged no delay\n{self}", n + 1);
                };
                let (low, high) = bounds(&backoff, n as u32 + 1);
                assert!(
                    low <= delay && delay <= high,
                    "retry {} waited {delay:?}, outside the backoff's bounds [{low:?}, {high:?}] \
                     ({backoff:?})\n{self}",
                    n + 1
                );
            }
        }
        self
    }

    /// Asserts that the (single) call ended by a denied retry for `reason`.
    #[track_caller]
    pub fn assert_denied(&self, reason: DenyReason) -> &Self {
        let want = reason.to_string();
        let denied = self
            .trace
            .decisions()
            .any(|d| d.decision == "denied" && d.reason.as_deref() == Some(&want));
        assert!(denied, "expected a retry denied for `{want}`\n{self}");
        self
    }

    /// Asserts that the call ended ambiguous: a write that may have executed, neither retried
    /// nor reported as a plain failure.
    #[track_caller]
    pub fn assert_ambiguous(&self) -> &Self {
        let ambiguous = self.trace.decisions().any(|d| d.decision == "ambiguous");
        assert!(ambiguous, "expected an ambiguous outcome\n{self}");
        self
    }

    /// Asserts that no retry was refused (no `denied` and no `ambiguous` decision).
    #[track_caller]
    pub fn assert_nothing_refused(&self) -> &Self {
        let refused = self
            .trace
            .decisions()
            .find(|d| matches!(d.decision.as_str(), "denied" | "ambiguous"));
        assert!(
            refused.is_none(),
            "expected no refusal, got `{}`\n{self}",
            refused.map(ToString::to_string).unwrap_or_default()
        );
        self
    }
}

/// A rotation retry's reason, as the runtime logs it (`connection_rotated`; the Display form
/// `connection rotated` accepted too).
fn is_rotation(reason: Option<&str>) -> bool {
    matches!(reason, Some("connection_rotated" | "connection rotated"))
}

/// The range a delay before retry `retry` (1-based) falls in, at the millisecond resolution
/// the runtime logs (the low end rounded down, the high end up).
fn bounds(backoff: &Backoff, retry: u32) -> (Duration, Duration) {
    let (low, high) = backoff.bounds(retry);
    let floor = Duration::from_millis(u64::try_from(low.as_millis()).unwrap_or(u64::MAX));
    let ceil =
        Duration::from_millis(u64::try_from(high.as_micros().div_ceil(1000)).unwrap_or(u64::MAX));
    (floor, ceil)
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_runtime::backoff::Jitter;

    #[test]
    fn bounds_follow_the_jitter_scheme_at_millisecond_resolution() {
        let full = Backoff::new()
            .with_initial(Duration::from_micros(1500))
            .with_max_backoff(Duration::from_millis(5));
        assert_eq!(bounds(&full, 1), (Duration::ZERO, Duration::from_millis(2)));
        assert_eq!(bounds(&full, 2), (Duration::ZERO, Duration::from_millis(3)));
        assert_eq!(bounds(&full, 9), (Duration::ZERO, Duration::from_millis(5)));
        let equal = full.with_jitter(Jitter::Equal);
        assert_eq!(
            bounds(&equal, 2),
            (Duration::from_millis(1), Duration::from_millis(3))
        );
        let none = full.with_jitter(Jitter::None);
        assert_eq!(
            bounds(&none, 2),
            (Duration::from_millis(3), Duration::from_millis(3))
        );
        let decorrelated = full.with_jitter(Jitter::Decorrelated);
        assert_eq!(
            bounds(&decorrelated, 3),
            (Duration::from_millis(1), Duration::from_millis(5))
        );
    }
}
