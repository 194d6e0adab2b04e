//! The `Idempotency-Key` header, parsed strictly and bounded.
//!
//! The draft (draft-ietf-httpapi-idempotency-key-header-07, section 2) defines the field as an
//! RFC 8941 structured-field *Item* whose value is a *String*: a quoted string on the wire,
//! `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. An sf-string holds printable
//! ASCII only (0x20-0x7E), with `"` and `\` escaped by a backslash (RFC 8941 section 3.3.3).
//! Parameters are allowed by the grammar; the draft defines none, so they are ignored.
//!
//! Parsing is done by the `sfv` crate (a maintained RFC 8941/9651 implementation) after two
//! checks of our own that bound the work a client can cause: the field is one line, at most
//! [`MAX_FIELD_LEN`] bytes; the key it carries is not empty and at most the configured number of
//! characters. Anything else (a token instead of a string, a second field line, a bad escape,
//! trailing bytes) is refused with 400 and a detail saying which.

use std::fmt;
use std::sync::Arc;

use http::HeaderMap;
use http::header::HeaderName;

/// The longest `Idempotency-Key` field line read, in bytes: the longest key (255 characters,
/// every one escaped: 510) plus its quotes, with room for parameters. A longer line is refused
/// before it is parsed.
pub const MAX_FIELD_LEN: usize = 1024;

/// The longest key accepted by default, in characters (the client side refuses longer keys too).
pub const DEFAULT_MAX_KEY_LEN: usize = 255;

/// A key read from a request: the sf-string's content, unescaped.
///
/// `Debug` prints the key's length only: a key may identify a payment.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Arc<str>);

impl Key {
    /// The key, as the client chose it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} chars)", self.0.len())
    }
}

/// Why a request's key was refused (each answered 400, this text as the problem's detail).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// No `Idempotency-Key` field on a request that needs one.
    Missing,
    /// The field appears on more than one line (an Item cannot be combined).
    Repeated,
    /// The field line is longer than [`MAX_FIELD_LEN`].
    FieldTooLong(usize),
    /// The field is not an RFC 8941 Item, or not a String.
    NotAString(String),
    /// The string is empty.
    Empty,
    /// The key is longer than the configured limit (characters).
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing => f.write_str(
                "this request needs an Idempotency-Key header: send a unique key (a UUID) as a \
                 structured-field string, e.g. Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
            ),
            KeyError::Repeated => {
                f.write_str("the Idempotency-Key header appears more than once: send it once")
            }
            KeyError::FieldTooLong(n) => write!(
                f,
                "the Idempotency-Key header is {n} bytes, above {MAX_FIELD_LEN}: use a UUID"
            ),
            KeyError::NotAString(why) => write!(
                f,
                "the Idempotency-Key header must be a structured-field string (RFC 8941), a \
                 quoted value such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\": {why}"
            ),
            KeyError::Empty => f.write_str("the Idempotency-Key is empty: send a unique key"),
            KeyError::TooLong { len, max } => write!(
                f,
                "the Idempotency-Key is {len} characters, above {max}: use a UUID"
            ),
        }
    }
}

impl std::error::Error for KeyError {}

/// Reads the key from `headers`: `Ok(None)` when the field is absent.
pub fn parse(
    headers: &HeaderMap,
    name: &HeaderName,
    max_key_len: usize,
) -> Result<Option<Key>, KeyError> {
    let mut lines = headers.get_all(name).iter();
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() {
        return Err(KeyError::Repeated);
    }
    parse_value(line.as_bytes(), max_key_len).map(Some)
}

/// Parses one field value as the draft's sf-string.
pub fn parse_value(value: &[u8], max_key_len: usize) -> Result<Key, KeyError> {
    if value.len() > MAX_FIELD_LEN {
        return Err(KeyError::FieldTooLong(value.len()));
    }
    let item = sfv::Parser::new(value)
        .parse_item::<sfv::Item>()
        .map_err(|e| KeyError::NotAString(e.to_string()))?;
    let sfv::BareItem::String(s) = item.bare_item else {
        return Err(KeyError::NotAString(format!(
            "found a {} instead",
            kind(&item.bare_item)
        )));
    };
    let key = s.as_str();
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > max_key_len {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: max_key_len,
        });
    }
    Ok(Key(Arc::from(key)))
}

fn kind(item: &sfv::BareItem) -> &'static str {
    match item {
        sfv::BareItem::Integer(_) => "number",
        sfv::BareItem::Decimal(_) => "decimal",
        sfv::BareItem::String(_) => "string",
        sfv::BareItem::ByteSequence(_) => "byte sequence",
        sfv::BareItem::Boolean(_) => "boolean",
        sfv::BareItem::Token(_) => "token (an unquoted value)",
        _ => "value of another type",
    }
}

/// The key as the client side sends it: an sf-string, `"` and `\` escaped. `None` when the key
/// has a character an sf-string cannot carry (outside printable ASCII).
pub fn serialize(key: &str) -> Option<String> {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => return None,
        }
    }
    out.push('"');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(v: &str) -> Result<String, KeyError> {
        parse_value(v.as_bytes(), DEFAULT_MAX_KEY_LEN).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn the_drafts_examples_parse() {
        assert_eq!(
            key("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
            Ok("8e03978e-40d5-43e8-bc93-6894a57f9324".to_owned())
        );
        assert_eq!(key(r#""a\"b\\c""#), Ok(r#"a"b\c"#.to_owned()));
        // Parameters are grammatical and ignored.
        assert_eq!(key(r#""k-1";v=2"#), Ok("k-1".to_owned()));
    }

    #[test]
    fn anything_but_one_bounded_sf_string_is_refused() {
        for bad in [
            "8e03978e-40d5-43e8-bc93-6894a57f9324", // bare: a number then garbage
            "k-1",                                  // a token, not a string
            "\"unterminated",
            "\"bad \\escape\"",
            "\"a\" trailing",
            "\"a\", \"b\"", // a list, or two lines combined
            "?1",
            ":aGVsbG8=:",
            "",
        ] {
            assert!(
                matches!(key(bad), Err(KeyError::NotAString(_))),
                "{bad:?}: {:?}",
                key(bad)
            );
        }
        assert_eq!(key("\"\""), Err(KeyError::Empty));
        let long = format!("\"{}\"", "a".repeat(256));
        assert_eq!(key(&long), Err(KeyError::TooLong { len: 256, max: 255 }));
        let huge = format!("\"{}\"", "a".repeat(5000));
        assert_eq!(key(&huge), Err(KeyError::FieldTooLong(5002)));
        // Non-ASCII bytes cannot be in an sf-string.
        assert!(matches!(
            parse_value("\"ключ\"".as_bytes(), 255),
            Err(KeyError::NotAString(_))
        ));
    }

    #[test]
    fn a_repeated_field_is_refused() {
        let name = HeaderName::from_static("idempotency-key");
        let mut headers = HeaderMap::new();
        assert_eq!(parse(&headers, &name, 255), Ok(None));
        headers.append(&name, "\"a\"".parse().unwrap());
        assert_eq!(
            parse(&headers, &name, 255).map(|k| k.map(|k| k.as_str().to_owned())),
            Ok(Some("a".to_owned()))
        );
        headers.append(&name, "\"a\"".parse().unwrap());
        assert_eq!(parse(&headers, &name, 255), Err(KeyError::Repeated));
    }

    #[test]
    fn debug_hides_the_key() {
        let k = parse_value(b"\"secret-42\"", 255).unwrap();
        assert_eq!(format!("{k:?}"), "Key(9 chars)");
    }

    proptest! {
        /// Every key of printable ASCII the client side serializes parses back to itself.
        #[test]
        fn serialized_keys_round_trip(k in "[ -~]{1,255}") {
            let wire = serialize(&k).expect("printable ASCII serializes");
            prop_assert!(wire.len() <= MAX_FIELD_LEN);
            let back = parse_value(wire.as_bytes(), DEFAULT_MAX_KEY_LEN).map(|k| k.as_str().to_owned());
            prop_assert_eq!(back, Ok(k));
        }

        /// Arbitrary bytes never panic, and whatever is accepted is a bounded, non-empty key of
        /// printable ASCII.
        #[test]
        fn arbitrary_bytes_never_panic(v in proptest::collection::vec(any::<u8>(), 0..2048), max in 1usize..300) {
            if let Ok(k) = parse_value(&v, max) {
                prop_assert!(!k.as_str().is_empty());
                prop_assert!(k.as_str().len() <= max);
                prop_assert!(k.as_str().bytes().all(|b| (0x20..=0x7e).contains(&b)));
                prop_assert!(v.len() <= MAX_FIELD_LEN);
            }
        }

        /// Near-misses of a valid value (one byte changed, inserted or removed) never panic and,
        /// when accepted, still satisfy the bounds.
        #[test]
        fn mutated_values_never_panic(k in "[ -~]{1,64}", at in any::<proptest::sample::Index>(), b in any::<u8>(), op in 0u8..3) {
            let mut v = serialize(&k).unwrap().into_bytes();
            let i = at.index(v.len());
            match op {
                0 => v[i] = b,
                1 => v.insert(i, b),
                _ => { v.remove(i); }
            }
            if let Ok(k) = parse_value(&v, DEFAULT_MAX_KEY_LEN) {
                prop_assert!(!k.as_str().is_empty());
                prop_assert!(k.as_str().bytes().all(|b| (0x20..=0x7e).contains(&b)));
            }
        }

        /// A key with a character outside printable ASCII cannot be serialized.
        #[test]
        fn non_ascii_keys_do_not_serialize(a in "[ -~]{0,8}", c in any::<char>().prop_filter("not printable ASCII", |c| !(' '..='~').contains(c)), z in "[ -~]{0,8}") {
            prop_assert_eq!(serialize(&format!("{a}{c}{z}")), None);
        }
    }
}
