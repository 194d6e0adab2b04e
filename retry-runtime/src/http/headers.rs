//! Header names the integration sends and reads, in one place.
//!
//! | header | direction | value |
//! |---|---|---|
//! | [`IDEMPOTENCY_KEY`] (per upstream: `idempotency_header`) | request | the call's key, the same on every attempt |
//! | [`ATTEMPT`] | request | the attempt number, from the second attempt on (absent on the first) |
//! | [`DEADLINE_MS`] | request | the operation's remaining deadline in whole milliseconds, relative (never an absolute clock) |
//! | [`RETRIES_LEFT`] | request | retries the operation may still make across every layer |
//! | `Retry-After` | response | delay-seconds or HTTP-date; malformed values are ignored with a trace event |
//! | [`PUSHBACK`] | response | `overloaded` or `retries-spent` ([`Pushback`](crate::Pushback)); other values are ignored with a trace event |

/// The default idempotency key header (IETF `draft-ietf-httpapi-idempotency-key-header`).
/// Each upstream can rename it (`idempotency_header`).
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

pub use crate::propagation::{ATTEMPT, DEADLINE_MS, PUSHBACK, RETRIES_LEFT, parse_pushback};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Pushback;

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
