//! The idempotency key: what lets a write be retried after it may have executed.
//!
//! A write whose response was lost may have happened. Sending it again is safe only if the
//! upstream recognises the second request as the first (the IETF `Idempotency-Key` header draft,
//! Stripe's and most payment APIs' practice): the same key on every attempt, fixed before the
//! first. The key goes out in the draft's `Idempotency-Key` header as an RFC 8941
//! structured-field string (`Idempotency-Key: "order-42:capture"`), so it is printable ASCII; it
//! may identify a payment, so logs get a fingerprint, never the key.

use std::fmt;
use std::sync::Arc;

/// An idempotency key, fixed before the first attempt and sent on every attempt.
///
/// Its `Debug` and `Display` never print the key itself (it may identify a payment): they print
/// a short fingerprint. Use [`IdempotencyKey::as_str`] to send it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string cannot be an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    Empty,
    /// The key is longer than 255 bytes.
    TooLong(usize),
    /// The key holds a character outside printable ASCII: a control byte (CR, LF, NUL, tab)
    /// that would split or truncate a header, or a non-ASCII one that a structured-field string
    /// (RFC 8941 section 3.3.3), the draft's form of the key on the wire, cannot carry.
    NotAHeaderValue,
    /// The key begins or ends with a space or a tab (or is nothing else), which HTTP strips
    /// from a header value (RFC 9110 §5.5): the upstream would receive another key than the
    /// one the caller holds, empty or the same as a key without the whitespace.
    Whitespace,
    /// A durable replay computed a key other than the one stored with its task: the key
    /// expression does not depend on the arguments alone (a clock, a random UUID), so each
    /// replay would be a new write.
    ChangedOnReplay,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("the idempotency key is empty: derive it from the operation (e.g. UUID v5 of order id + operation)"),
            KeyError::TooLong(n) => write!(f, "the idempotency key is {n} bytes, above 255: use a UUID"),
            KeyError::NotAHeaderValue => f.write_str("the idempotency key contains characters outside printable ASCII (CR, LF, tab, non-ASCII letters, ...) that cannot go in the Idempotency-Key header's structured-field string: use a UUID"),
            KeyError::Whitespace => f.write_str("the idempotency key begins or ends with whitespace, which HTTP strips from header values, so the upstream would see another key: trim it, or use a UUID"),
            KeyError::ChangedOnReplay => f.write_str("the idempotency key of this durable replay differs from the one its task was queued with: derive the key from the call's arguments only (never a clock or a random UUID), so every replay is the same write"),
        }
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// The longest key accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates `key`: non-empty, at most 255 bytes of printable ASCII (what an RFC 8941
    /// string holds), with no space at either end (HTTP would strip it).
    pub fn new(key: impl Into<Arc<str>>) -> Result<Self, KeyError> {
        let key: Arc<str> = key.into();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > Self::MAX_LEN {
            return Err(KeyError::TooLong(key.len()));
        }
        if !key.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(KeyError::NotAHeaderValue);
        }
        if key.trim_matches([' ', '\t']).len() != key.len() {
            return Err(KeyError::Whitespace);
        }
        Ok(IdempotencyKey(key))
    }

    /// The key, to send.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as an RFC 8941 structured-field string, the form the IETF draft gives the
    /// `Idempotency-Key` header: in double quotes, `"` and `\` escaped with a backslash.
    ///
    /// ```
    /// # use retry_runtime::IdempotencyKey;
    /// let key = IdempotencyKey::new(r#"order "7" \ capture"#).unwrap();
    /// assert_eq!(key.to_sf_string(), r#""order \"7\" \\ capture""#);
    /// ```
    pub fn to_sf_string(&self) -> String {
        let mut out = String::with_capacity(self.0.len() + 2);
        out.push('"');
        for c in self.0.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // An sf-string holds printable ASCII only.
        assert_eq!(IdempotencyKey::new("ключ"), Err(KeyError::NotAHeaderValue));
        assert_eq!(IdempotencyKey::new("a\tb"), Err(KeyError::NotAHeaderValue));
    }

    #[test]
    fn the_wire_form_is_an_sf_string() {
        let k = IdempotencyKey::new("8e03978e-40d5").unwrap();
        assert_eq!(k.to_sf_string(), "\"8e03978e-40d5\"");
        let k = IdempotencyKey::new(r#"a"b\c"#).unwrap();
        assert_eq!(k.to_sf_string(), r#""a\"b\\c""#);
    }

    /// HTTP strips the whitespace around a header value (RFC 9110 §5.5): the upstream would
    /// receive an empty key, or one that collides with the key without it.
    #[test]
    fn keys_that_http_would_trim_are_refused() {
        for key in ["   ", " ", " k-1 ", " k-1", "k-1 "] {
            let refused = IdempotencyKey::new(key).map(|k| k.as_str().to_owned());
            assert!(
                matches!(&refused, Err(e) if e.to_string().contains("whitespace")),
                "{key:?}: {refused:?}"
            );
        }
        assert_eq!(IdempotencyKey::new("k 1").unwrap().as_str(), "k 1");
        // A tab is not printable ASCII: refused before the whitespace rule.
        assert_eq!(IdempotencyKey::new("k-1\t"), Err(KeyError::NotAHeaderValue));
    }

    #[test]
    fn debug_never_prints_the_key() {
        let k = IdempotencyKey::new("secret-payment-42").unwrap();
        assert!(!format!("{k:?} {k}").contains("secret"));
        assert_eq!(k.as_str(), "secret-payment-42");
    }
}
