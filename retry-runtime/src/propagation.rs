//! Carrying one operation's deadline and retry allowance across processes.
//!
//! A callee that does not know its caller gave up keeps working (and retrying) for nobody; a
//! callee that does not know its caller will retry adds its own retries on top (3 x 3 = 9). The
//! caller therefore sends, on every attempt:
//!
//! | header | value |
//! |---|---|
//! | [`DEADLINE_MS`] `retry-deadline-ms` | milliseconds the caller still waits for this attempt: the earlier of the operation's deadline and the attempt's timeout (relative: clocks differ) |
//! | [`ATTEMPT`] `retry-attempt` | this attempt's number, sent from the second attempt on (absent: the first) |
//! | [`RETRIES_LEFT`] `retry-retries-left` | retries the operation may still make, across all layers |
//!
//! and a callee answers an error with [`PUSHBACK`] `retry-pushback: retries-spent` when it
//! already retried for this operation, or `overloaded` when it sheds load: the caller's engine
//! then denies its own retry with [`DenyReason::Pushback`](crate::DenyReason).
//!
//! Only an upstream configured with `propagate = true` is sent these headers (off by default:
//! a third-party API does not read them, and would only learn your timeouts and retry counts).
//!
//! Inbound values only ever **shrink** the callee's own limits: a hostile or buggy client cannot
//! grant itself a longer deadline or more retries than the callee's configuration allows.
//! Malformed, negative or huge values are ignored with a trace event.

use std::time::Duration;

use crate::category::Pushback;

/// Milliseconds the caller still waits for this attempt (the earlier of the operation's
/// deadline and the attempt's timeout): past it, whatever the callee does is done for nobody.
pub const DEADLINE_MS: &str = "retry-deadline-ms";
/// The attempt number, 1-based.
pub const ATTEMPT: &str = "retry-attempt";
/// Retries the operation may still make across all layers.
pub const RETRIES_LEFT: &str = "retry-retries-left";
/// A callee's "do not retry": `retries-spent` or `overloaded`.
pub const PUSHBACK: &str = "retry-pushback";

// The names as `HeaderName`s: inserting a `&str` name parses it again on every request.
pub(crate) const DEADLINE_MS_NAME: http::HeaderName = http::HeaderName::from_static(DEADLINE_MS);
pub(crate) const ATTEMPT_NAME: http::HeaderName = http::HeaderName::from_static(ATTEMPT);
pub(crate) const RETRIES_LEFT_NAME: http::HeaderName = http::HeaderName::from_static(RETRIES_LEFT);
pub(crate) const PUSHBACK_NAME: http::HeaderName = http::HeaderName::from_static(PUSHBACK);

/// The largest deadline accepted from a caller (one day): anything above is treated as garbage.
const MAX_DEADLINE_MS: u64 = 24 * 60 * 60 * 1000;

/// What a caller said about its operation, after validation. Non-exhaustive, so that a new
/// header does not break code that reads it: build one with [`Inbound::default`] and the
/// `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Inbound {
    /// Time the caller has left.
    pub deadline: Option<Duration>,
    /// The caller's attempt number.
    pub attempt: Option<u32>,
    /// Retries the caller's operation may still make.
    pub retries_left: Option<u32>,
}

impl Inbound {
    /// With `deadline` left to the caller.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// With the caller at its attempt number `attempt`.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    /// With `retries_left` retries left to the caller's operation.
    #[must_use]
    pub fn with_retries_left(mut self, retries_left: u32) -> Self {
        self.retries_left = Some(retries_left);
        self
    }

    /// Reads the propagation headers, ignoring (with a trace event) any malformed value.
    pub fn from_headers(headers: &http::HeaderMap) -> Inbound {
        Inbound {
            deadline: number(headers, &DEADLINE_MS_NAME, MAX_DEADLINE_MS)
                .map(Duration::from_millis),
            attempt: number(headers, &ATTEMPT_NAME, u64::from(u32::MAX)).map(|n| n as u32),
            retries_left: number(headers, &RETRIES_LEFT_NAME, u64::from(u32::MAX))
                .map(|n| n as u32),
        }
        .first_attempt_implied()
    }

    /// A caller that propagates (it sent a deadline or its retries left) but no attempt number
    /// is on its first attempt: the number is only sent on retries.
    fn first_attempt_implied(mut self) -> Self {
        if self.attempt.is_none() && (self.deadline.is_some() || self.retries_left.is_some()) {
            self.attempt = Some(1);
        }
        self
    }
}

/// A strictly decimal header value in `0..=max`, else `None` (traced).
fn number(headers: &http::HeaderMap, name: &http::HeaderName, max: u64) -> Option<u64> {
    let value = headers.get(name)?;
    let parsed = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|n| *n <= max);
    if parsed.is_none() {
        tracing::debug!(
            target: "retry_runtime::propagation",
            header = name.as_str(),
            value = ?value,
            "ignoring malformed propagation header"
        );
    }
    parsed
}

/// Writes the propagation headers for the current attempt (called by the HTTP integration).
///
/// The attempt number is written from the second attempt on: on the first, its absence says
/// "first", and every header costs the request (both ends parse it; reqwest copies the header
/// map once per request), which the happy path should not pay for a constant.
pub fn write_headers(
    headers: &mut http::HeaderMap,
    remaining: Duration,
    attempt: u32,
    retries_left: Option<u32>,
) {
    headers.insert(
        DEADLINE_MS_NAME,
        http::HeaderValue::from(remaining.as_millis().min(u128::from(MAX_DEADLINE_MS)) as u64),
    );
    if attempt > 1 {
        headers.insert(ATTEMPT_NAME, small_number(attempt));
    } else {
        headers.remove(ATTEMPT_NAME);
    }
    if let Some(n) = retries_left {
        headers.insert(RETRIES_LEFT_NAME, small_number(n));
    }
}

/// Attempt numbers and retries left are nearly always one digit: those values are static, so
/// writing them allocates nothing.
fn small_number(n: u32) -> http::HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(n as usize) {
        Some(digit) => http::HeaderValue::from_static(digit),
        None => http::HeaderValue::from(n),
    }
}

/// Reads a callee's pushback header (unknown values are ignored, traced).
pub fn pushback(headers: &http::HeaderMap) -> Option<Pushback> {
    parse_pushback(headers.get(&PUSHBACK_NAME)?.as_bytes())
}

/// Parses a [`PUSHBACK`] value (case-insensitive, surrounding spaces allowed); an unknown value
/// is ignored with a trace event.
pub fn parse_pushback(value: &[u8]) -> Option<Pushback> {
    let trimmed = value.trim_ascii();
    if trimmed.eq_ignore_ascii_case(Pushback::Overloaded.as_str().as_bytes()) {
        Some(Pushback::Overloaded)
    } else if trimmed.eq_ignore_ascii_case(Pushback::RetriesSpent.as_str().as_bytes()) {
        Some(Pushback::RetriesSpent)
    } else {
        tracing::debug!(
            target: "retry_runtime::propagation",
            value = %String::from_utf8_lossy(&value[..value.len().min(64)]),
            "ignoring unknown pushback value"
        );
        None
    }
}

/// Marks a response with a pushback signal.
pub fn set_pushback(headers: &mut http::HeaderMap, pushback: Pushback) {
    headers.insert(
        PUSHBACK_NAME,
        http::HeaderValue::from_static(pushback.as_str()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, http::HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn valid_values_are_read() {
        let h = headers(&[(DEADLINE_MS, "250"), (ATTEMPT, "2"), (RETRIES_LEFT, "1")]);
        assert_eq!(
            Inbound::from_headers(&h),
            Inbound {
                deadline: Some(Duration::from_millis(250)),
                attempt: Some(2),
                retries_left: Some(1)
            }
        );
    }

    #[test]
    fn hostile_values_are_ignored() {
        for bad in [
            "-5",
            "1e3",
            "",
            " ",
            "99999999999999999999999",
            "86400001",
            "0x10",
            "12ms",
        ] {
            let h = headers(&[(DEADLINE_MS, bad), (RETRIES_LEFT, bad)]);
            let inbound = Inbound::from_headers(&h);
            assert_eq!(inbound.deadline, None, "{bad:?}");
            if bad != "86400001" {
                assert_eq!(inbound.retries_left, None, "{bad:?}");
            }
        }
    }

    #[test]
    fn the_first_attempt_sends_no_number_and_reads_as_the_first() {
        let mut h = http::HeaderMap::new();
        h.insert(ATTEMPT, http::HeaderValue::from_static("7"));
        write_headers(&mut h, Duration::from_millis(100), 1, None);
        assert!(h.get(ATTEMPT).is_none(), "a stale number is not forwarded");
        assert_eq!(Inbound::from_headers(&h).attempt, Some(1));
        assert_eq!(
            Inbound::from_headers(&http::HeaderMap::new()),
            Inbound::default(),
            "no propagation at all: nothing implied"
        );
    }

    #[test]
    fn round_trip_and_pushback() {
        let mut h = http::HeaderMap::new();
        write_headers(&mut h, Duration::from_millis(1234), 3, Some(0));
        let i = Inbound::from_headers(&h);
        assert_eq!(
            (i.deadline, i.attempt, i.retries_left),
            (Some(Duration::from_millis(1234)), Some(3), Some(0))
        );
        set_pushback(&mut h, Pushback::RetriesSpent);
        assert_eq!(pushback(&h), Some(Pushback::RetriesSpent));
        assert_eq!(pushback(&headers(&[(PUSHBACK, "please-retry")])), None);
    }

    proptest! {
        #[test]
        fn any_written_numbers_read_back(ms in 0u64..MAX_DEADLINE_MS, attempt in 1u32.., left: u32) {
            let mut h = http::HeaderMap::new();
            write_headers(&mut h, Duration::from_millis(ms), attempt, Some(left));
            let i = Inbound::from_headers(&h);
            prop_assert_eq!(
                (i.deadline, i.attempt, i.retries_left),
                (Some(Duration::from_millis(ms)), Some(attempt), Some(left))
            );
        }

        #[test]
        fn any_header_bytes_never_panic(v in proptest::collection::vec(0x20u8..0x7f, 0..40)) {
            let mut h = http::HeaderMap::new();
            let value = http::HeaderValue::from_bytes(&v).unwrap();
            h.insert(DEADLINE_MS, value.clone());
            h.insert(PUSHBACK, value);
            let _ = Inbound::from_headers(&h);
            let _ = pushback(&h);
        }
    }
}
