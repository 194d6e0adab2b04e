//! Header names the integration sends and reads, in one place.
//!
//! | header | direction | value |
//! |---|---|---|
//! | [`IDEMPOTENCY_KEY`] (per upstream: `idempotency_header`) | request | the call's key, the same on every attempt |
//! | [`ATTEMPT`] | request | the attempt number, 1 for the first |
//! | [`DEADLINE_MS`] | request | the operation's remaining deadline in whole milliseconds, relative (never an absolute clock) |
//! | `Retry-After` | response | delay-seconds or HTTP-date; malformed values are ignored with a trace event |
//! | [`PUSHBACK`] | response | `overloaded` or `retries-spent` ([`Pushback`]); other values are ignored with a trace event |

use crate::Pushback;

/// The default idempotency key header (IETF `draft-ietf-httpapi-idempotency-key-header`).
/// Each upstream can rename it (`idempotency_header`).
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The attempt number (1 for the first attempt), so the upstream can tell retries apart in its
/// logs and metrics.
pub const ATTEMPT: &str = "Retry-Attempt";

/// The remaining deadline of the business operation, in relative milliseconds: the callee
/// should stop once it has passed, since its caller has given up.
pub const DEADLINE_MS: &str = "Retry-Deadline-Ms";

/// A callee's "do not retry" signal on its error response; values are [`Pushback::as_str`].
pub const PUSHBACK: &str = "Retry-Pushback";

/// Parses a [`PUSHBACK`] value; an unknown value is ignored with a trace event.
pub fn parse_pushback(value: &[u8]) -> Option<Pushback> {
    let trimmed = value.trim_ascii();
    if trimmed.eq_ignore_ascii_case(Pushback::Overloaded.as_str().as_bytes()) {
        Some(Pushback::Overloaded)
    } else if trimmed.eq_ignore_ascii_case(Pushback::RetriesSpent.as_str().as_bytes()) {
        Some(Pushback::RetriesSpent)
    } else {
        tracing::debug!(
            target: "retry_runtime::http",
            value = %String::from_utf8_lossy(&value[..value.len().min(64)]),
            "ignoring malformed {PUSHBACK} header"
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushback_values() {
        assert_eq!(parse_pushback(b"overloaded"), Some(Pushback::Overloaded));
        assert_eq!(
            parse_pushback(b" Retries-Spent "),
            Some(Pushback::RetriesSpent)
        );
        assert_eq!(parse_pushback(b"please stop"), None);
        assert_eq!(parse_pushback(&[0xff, 0x00]), None);
    }
}
