//! Parsing `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
//!
//! A server's hint is honoured only inside the deadline and the budget (the engine decides
//! that); this module only turns the header into a delay, refusing anything hostile. Callers
//! ignore an invalid value and emit a trace event: a malformed hint must never stall the loop
//! or panic.

use std::fmt;
use std::time::{Duration, SystemTime};

/// Why a `Retry-After` value was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryAfterError {
    /// Empty or whitespace only.
    Empty,
    /// Digits too large for a delay (overflow).
    Overflow,
    /// Neither delay-seconds nor an HTTP-date (negative numbers and fractions included).
    Malformed,
}

impl fmt::Display for RetryAfterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryAfterError::Empty => "empty Retry-After value",
            RetryAfterError::Overflow => "Retry-After delay overflows",
            RetryAfterError::Malformed => "Retry-After is neither delay-seconds nor an HTTP-date",
        })
    }
}

impl std::error::Error for RetryAfterError {}

/// The largest delay accepted: anything above (about 31 years) is treated as overflow rather
/// than turned into an absurd `Instant` arithmetic.
pub const MAX_DELAY: Duration = Duration::from_secs(1 << 30);

/// Parses a `Retry-After` value into a delay counted from `now`.
///
/// - delay-seconds (`"120"`): that many seconds; leading/trailing whitespace is allowed.
/// - HTTP-date (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the obsolete RFC 850 / asctime forms):
///   the time until that date; a date in the past is a zero delay.
/// - negative, fractional, garbage or overflowing values are errors.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use retry_runtime::retry_after::parse;
///
/// assert_eq!(parse("3", SystemTime::now()), Ok(Duration::from_secs(3)));
/// assert!(parse("-1", SystemTime::now()).is_err());
/// assert_eq!(parse("Thu, 01 Jan 1970 00:00:00 GMT", SystemTime::now()), Ok(Duration::ZERO));
/// ```
pub fn parse(value: &str, now: SystemTime) -> Result<Duration, RetryAfterError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(RetryAfterError::Empty);
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = value.parse().map_err(|_| RetryAfterError::Overflow)?;
        let delay = Duration::from_secs(secs);
        return if delay > MAX_DELAY {
            Err(RetryAfterError::Overflow)
        } else {
            Ok(delay)
        };
    }
    let date = httpdate::parse_http_date(value).map_err(|_| RetryAfterError::Malformed)?;
    let delay = date.duration_since(now).unwrap_or(Duration::ZERO);
    if delay > MAX_DELAY {
        Err(RetryAfterError::Overflow)
    } else {
        Ok(delay)
    }
}

/// Parses raw header bytes (which may not be UTF-8), emitting a trace event when the value is
/// ignored. This is what integrations call.
pub fn parse_header(value: &[u8], now: SystemTime) -> Option<Duration> {
    let parsed = std::str::from_utf8(value)
        .map_err(|_| RetryAfterError::Malformed)
        .and_then(|s| parse(s, now));
    match parsed {
        Ok(delay) => Some(delay),
        Err(error) => {
            tracing::debug!(
                target: "retry_runtime::retry_after",
                %error,
                value = %String::from_utf8_lossy(&value[..value.len().min(64)]),
                "ignoring malformed Retry-After"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480) // 2015-10-21 07:28:00 GMT
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(parse("0", now()), Ok(Duration::ZERO));
        assert_eq!(parse(" 120 ", now()), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:28:10 GMT", now()),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            parse("Wednesday, 21-Oct-15 07:28:10 GMT", now()),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            parse("Wed Oct 21 07:28:10 2015", now()),
            Ok(Duration::from_secs(10))
        );
    }

    #[test]
    fn past_dates_are_zero() {
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:27:00 GMT", now()),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn hostile_values_are_refused() {
        assert_eq!(parse("", now()), Err(RetryAfterError::Empty));
        assert_eq!(parse("   ", now()), Err(RetryAfterError::Empty));
        assert_eq!(parse("-5", now()), Err(RetryAfterError::Malformed));
        assert_eq!(parse("1.5", now()), Err(RetryAfterError::Malformed));
        assert_eq!(parse("+5", now()), Err(RetryAfterError::Malformed));
        assert_eq!(parse("5s", now()), Err(RetryAfterError::Malformed));
        assert_eq!(
            parse("99999999999999999999999", now()),
            Err(RetryAfterError::Overflow)
        );
        assert_eq!(
            parse("18446744073709551615", now()),
            Err(RetryAfterError::Overflow)
        );
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:28:00", now()),
            Err(RetryAfterError::Malformed)
        );
        assert_eq!(parse("tomorrow", now()), Err(RetryAfterError::Malformed));
    }

    #[test]
    fn non_utf8_header_is_ignored() {
        assert_eq!(parse_header(&[0xff, 0xfe, b'1'], now()), None);
        assert_eq!(parse_header(b"7", now()), Some(Duration::from_secs(7)));
    }

    proptest! {
        #[test]
        fn never_panics_on_any_string(s in ".{0,80}") {
            let _ = parse(&s, now());
        }

        #[test]
        fn never_panics_on_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = parse_header(&b, now());
        }

        #[test]
        fn accepted_delays_are_bounded(s in "[0-9]{1,25}") {
            if let Ok(d) = parse(&s, now()) {
                prop_assert!(d <= MAX_DELAY);
            }
        }
    }
}
