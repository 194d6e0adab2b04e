//! Hostile input, as permanent property tests: whatever a server, a caller or a configuration
//! file sends, the runtime answers with a value or an error, never a panic, and never lets the
//! input widen a limit. (TOML documents are covered next to the loader, in `registry/file.rs`;
//! durations given in code in `config.rs`.)

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use retry_runtime::propagation::{DEADLINE_MS, Inbound, RETRIES_LEFT};
use retry_runtime::retry_after::{self, MAX_DELAY};
use retry_runtime::tower::InboundLimits;
use retry_runtime::{IdempotencyKey, KeyError};

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000)
}

/// Values shaped like `Retry-After`, and the ways they go wrong: huge, signed, fractional,
/// padded, dates far in the past or future or out of range, and plain garbage.
fn retry_after_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,40}",
        "[ \t]{0,3}[+-]?[0-9]{0,12}([.,][0-9]{0,4})?[ \t]{0,3}",
        "(Mon|Tue|Sun|Xyz), [0-9]{1,3} (Jan|Feb|Dec|Foo) [0-9]{1,6} [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3} (GMT|UTC|)",
        "(Monday|Sunday), [0-9]{2}-(Jan|Dec)-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        "(Mon|Sun) (Jan|Dec) [ 0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{1,5}",
        "\\PC{0,60}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A server's `Retry-After` is parsed to a bounded delay or refused; never a panic.
    #[test]
    fn retry_after_is_bounded_or_refused(value in retry_after_value()) {
        if let Ok(delay) = retry_after::parse(&value, now()) {
            prop_assert!(delay <= MAX_DELAY, "{value:?} -> {delay:?}");
        }
        if let Some(delay) = retry_after::parse_header(value.as_bytes(), now()) {
            prop_assert!(delay <= MAX_DELAY);
        }
    }

    #[test]
    fn retry_after_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(delay) = retry_after::parse_header(&bytes, now()) {
            prop_assert!(delay <= MAX_DELAY);
        }
    }

    /// Whatever a caller sends in the propagation headers (repeated, garbage, huge, signed), the
    /// server layer never gives a request more time or more retries than its own limits, nor
    /// more than the caller itself asked for.
    #[test]
    fn a_caller_never_extends_a_deadline_or_gains_a_retry(
        deadlines in proptest::collection::vec(header_value(), 0..3),
        retries in proptest::collection::vec(header_value(), 0..3),
        our_deadline_ms in 0u64..100_000,
        our_retries in 0u32..10,
        margin_ms in 0u64..1_000,
    ) {
        let mut headers = http::HeaderMap::new();
        for v in &deadlines {
            if let Ok(v) = http::HeaderValue::from_bytes(v) {
                headers.append(DEADLINE_MS, v);
            }
        }
        for v in &retries {
            if let Ok(v) = http::HeaderValue::from_bytes(v) {
                headers.append(RETRIES_LEFT, v);
            }
        }
        let inbound = Inbound::from_headers(&headers);
        let limits = InboundLimits::new()
            .with_deadline(Duration::from_millis(our_deadline_ms))
            .with_max_retries(our_retries)
            .with_transit_margin(Duration::from_millis(margin_ms));
        let (deadline, retries_left) = limits.apply(&inbound);
        prop_assert!(deadline <= limits.deadline);
        prop_assert!(retries_left <= limits.max_retries);
        if let Some(asked) = inbound.deadline {
            prop_assert!(deadline <= asked);
        }
        if let Some(asked) = inbound.retries_left {
            prop_assert!(retries_left <= asked);
        }
    }

    /// A key holding CR, LF, NUL or another control byte is refused (it would split or
    /// truncate a header); an accepted key is always a valid header value, of printable ASCII
    /// (an RFC 8941 string).
    #[test]
    fn idempotency_keys_with_control_bytes_are_refused(
        prefix in "\\PC{0,20}",
        control in prop_oneof![Just('\r'), Just('\n'), Just('\0'), Just('\u{7f}'), Just('\u{1b}')],
        suffix in "\\PC{0,20}",
    ) {
        let key = format!("{prefix}{control}{suffix}");
        prop_assert!(matches!(IdempotencyKey::new(key), Err(KeyError::NotAHeaderValue)));
    }

    #[test]
    fn an_accepted_idempotency_key_is_a_valid_header_value(key in "\\PC{0,300}|[\\x00-\\x7f]{0,40}") {
        match IdempotencyKey::new(key.clone()) {
            Ok(k) => {
                prop_assert_eq!(k.as_str(), key.as_str());
                prop_assert!(http::HeaderValue::from_bytes(k.as_str().as_bytes()).is_ok(), "{:?}", key);
                // What the upstream receives: HTTP strips whitespace around a header value.
                prop_assert_eq!(k.as_str().trim_matches([' ', '\t']), key.as_str());
            }
            Err(KeyError::Empty) => prop_assert!(key.is_empty()),
            Err(KeyError::TooLong(n)) => prop_assert!(n > 255),
            Err(KeyError::Whitespace) => {
                prop_assert_ne!(key.trim_matches([' ', '\t']), key.as_str());
            }
            Err(_) => prop_assert!(key.bytes().any(|b| !(0x20..0x7f).contains(&b))),
        }
    }
}

/// Header values a caller might send: numbers in and out of range, signs, spaces, garbage.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[0-9]{1,25}".prop_map(String::into_bytes),
        "[ +-]{0,2}[0-9]{0,12}[ .e]{0,2}[0-9]{0,3}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}
