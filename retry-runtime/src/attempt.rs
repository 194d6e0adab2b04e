//! What one attempt knows about itself, visible to the code it runs and to integrations.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::registry::Upstream;

/// An idempotency key, fixed before the first attempt and sent on every attempt.
///
/// Its `Debug` and `Display` never print the key itself (it may identify a payment): they print
/// a short fingerprint. Use [`IdempotencyKey::as_str`] to send it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string cannot be an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key is empty.
    Empty,
    /// The key is longer than 255 bytes.
    TooLong(usize),
    /// The key holds a byte not allowed in an HTTP header value (CR, LF, NUL, other controls).
    NotAHeaderValue,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("the idempotency key is empty: derive it from the operation (e.g. UUID v5 of order id + operation)"),
            KeyError::TooLong(n) => write!(f, "the idempotency key is {n} bytes, above 255: use a UUID"),
            KeyError::NotAHeaderValue => f.write_str("the idempotency key contains control characters (CR, LF, ...) that cannot go in a header: use a UUID"),
        }
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// The longest key accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `key`: non-empty, at most 255 bytes, a valid visible header value.
    pub fn new(key: impl Into<Arc<str>>) -> Result<Self, KeyError> {
        let key: Arc<str> = key.into();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > Self::MAX_LEN {
            return Err(KeyError::TooLong(key.len()));
        }
        if !key
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
        {
            return Err(KeyError::NotAHeaderValue);
        }
        Ok(IdempotencyKey(key))
    }

    /// The key, to send.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A short, non-reversible fingerprint for logs.
    pub fn fingerprint(&self) -> u32 {
        // FNV-1a: stable across runs, enough to correlate log lines.
        self.0.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(#{:08x})", self.fingerprint())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:08x}", self.fingerprint())
    }
}

/// A key-producing value accepted by `idempotency = ...` and [`RetryCall::idempotency`](crate::RetryCall::idempotency).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an idempotency key",
    label = "expected a `String`, `&str`, `Arc<str>` or `IdempotencyKey`",
    note = "derive the key from the operation, e.g. `Uuid::new_v5(&NS, format!(\"{{order}}:register\").as_bytes()).to_string()`"
)]
pub trait IntoIdempotencyKey {
    /// Converts, validating.
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError>;
}

impl IntoIdempotencyKey for IdempotencyKey {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        Ok(self)
    }
}
impl IntoIdempotencyKey for String {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}
impl IntoIdempotencyKey for &str {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}
impl IntoIdempotencyKey for &String {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self.as_str())
    }
}
impl IntoIdempotencyKey for Arc<str> {
    fn into_idempotency_key(self) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::new(self)
    }
}

/// One attempt of a retrying call: its number, key, deadline and upstream.
///
/// Given to the attempt closure of [`RetryCall::run`](crate::RetryCall::run) and available to
/// integrations through [`Attempt::current`] and [`Attempt::with_current`], so the HTTP layer can
/// send the key, the attempt number and the remaining deadline. A plain value: a clone is a copy
/// of the attempt's facts (the upstream entry, the key and the span are shared handles).
#[derive(Clone)]
pub struct Attempt {
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) number: u32,
    pub(crate) method: http::Method,
    pub(crate) key: Option<IdempotencyKey>,
    /// The operation's absolute deadline.
    pub(crate) deadline: Instant,
    /// This attempt's timeout, counted from `started`, never past the deadline.
    pub(crate) timeout: Duration,
    /// When the attempt was admitted (after any wait for a bulkhead slot).
    pub(crate) started: Instant,
    pub(crate) retries_left: Option<u32>,
    pub(crate) span: tracing::Span,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("upstream", &self.upstream.name())
            .field("number", &self.number)
            .field("method", &self.method)
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .field("retries_left", &self.retries_left)
            .finish_non_exhaustive()
    }
}

impl Attempt {
    /// 1 for the first attempt.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// How many times the request was re-sent before this attempt (OpenTelemetry's
    /// `http.request.resend_count`).
    pub fn resend_count(&self) -> u32 {
        self.number.saturating_sub(1)
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        self.upstream.name()
    }

    /// The upstream's entry (its config).
    pub fn upstream_entry(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    /// The declared method.
    pub fn method(&self) -> &http::Method {
        &self.method
    }

    /// The idempotency key, the same on every attempt.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The operation's absolute deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// When this attempt is cut: its timeout after it was admitted, never past the deadline.
    pub(crate) fn ends(&self) -> Instant {
        self.started
            .checked_add(self.timeout)
            .map_or(self.deadline, |ends| ends.min(self.deadline))
    }

    /// Time left before this attempt is cut (its timeout, counted from when it was admitted,
    /// never past the deadline). Integrations use a little less, so their own, classified
    /// timeout fires before the loop's.
    pub fn time_left(&self) -> Duration {
        self.ends().saturating_duration_since(Instant::now())
    }

    /// Retries the operation may still make across every layer, when it started (sent to the
    /// callee so it does not add retries of its own on top).
    pub fn retries_left(&self) -> Option<u32> {
        self.retries_left
    }

    /// This attempt's timeout: the upstream's attempt timeout clamped to the remaining deadline.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The attempt's span (`retry.attempt`), to record OpenTelemetry attributes on
    /// (`server.address`, `http.response.status_code`, ...) whatever span is current. Disabled
    /// (a no-op) unless a subscriber enables `DEBUG` for `retry_runtime`.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An upstream for unit tests.
    pub(crate) fn upstream() -> Arc<Upstream> {
        crate::Registry::builder()
            .upstream("up", crate::UpstreamConfig::new())
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
            timeout: Duration::from_millis(100),
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
        let mut a = attempt();
        assert_eq!(a.ends(), a.started + Duration::from_millis(100));
        a.timeout = Duration::MAX;
        assert_eq!(a.ends(), a.deadline, "no overflow, clamped to the deadline");
        assert_eq!(a.time_left(), Duration::from_secs(1));
    }

    #[test]
    fn hostile_keys_are_refused() {
        assert_eq!(IdempotencyKey::new(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::new("a".repeat(256)),
            Err(KeyError::TooLong(256))
        );
        assert!(IdempotencyKey::new("a".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::new("abc\r\nX-Evil: 1"),
            Err(KeyError::NotAHeaderValue)
        );
        assert_eq!(IdempotencyKey::new("a\0b"), Err(KeyError::NotAHeaderValue));
    }

    #[test]
    fn debug_never_prints_the_key() {
        let k = IdempotencyKey::new("secret-payment-42").unwrap();
        assert!(!format!("{k:?} {k}").contains("secret"));
        assert_eq!(k.as_str(), "secret-payment-42");
    }
}
