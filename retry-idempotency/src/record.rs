//! The chosen headers of a stored response, as bytes in one column: for each header, its name's
//! length (2 bytes, big-endian), the name, its value's length (4 bytes, big-endian), the value.
//! Decoding never panics: a row it cannot read (written by another version, or damaged) yields
//! the headers read so far and says so.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Encodes the headers of `headers` named in `chosen` (every value of each).
pub fn encode(headers: &HeaderMap, chosen: &[HeaderName]) -> Vec<u8> {
    let mut out = Vec::new();
    for name in chosen {
        for value in headers.get_all(name) {
            let (Ok(n), Ok(v)) = (
                u16::try_from(name.as_str().len()),
                u32::try_from(value.len()),
            ) else {
                continue;
            };
            out.extend_from_slice(&n.to_be_bytes());
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(&v.to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
    }
    out
}

/// Decodes what [`encode`] wrote into `into`: `false` if the bytes ended early or held an
/// invalid name or value (what was read before stays).
pub fn decode(mut bytes: &[u8], into: &mut HeaderMap) -> bool {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if bytes.len() < n {
            return None;
        }
        let (head, tail) = bytes.split_at(n);
        *bytes = tail;
        Some(head)
    }
    while !bytes.is_empty() {
        let entry = (|| {
            let n = u16::from_be_bytes(take(&mut bytes, 2)?.try_into().ok()?);
            let name = HeaderName::from_bytes(take(&mut bytes, usize::from(n))?).ok()?;
            let v = u32::from_be_bytes(take(&mut bytes, 4)?.try_into().ok()?);
            let value =
                HeaderValue::from_bytes(take(&mut bytes, usize::try_from(v).ok()?)?).ok()?;
            Some((name, value))
        })();
        match entry {
            Some((name, value)) => {
                into.append(name, value);
            }
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn chosen_headers_round_trip() {
        let mut h = HeaderMap::new();
        h.insert("content-type", "application/json".parse().unwrap());
        h.append("set-cookie", "a=1".parse().unwrap());
        h.append("location", "/orders/7".parse().unwrap());
        h.append("location", "/orders/8".parse().unwrap());
        let chosen = [
            HeaderName::from_static("content-type"),
            HeaderName::from_static("location"),
        ];
        let mut back = HeaderMap::new();
        assert!(decode(&encode(&h, &chosen), &mut back));
        assert_eq!(back.len(), 3);
        assert_eq!(back["content-type"], "application/json");
        assert_eq!(back.get_all("location").iter().count(), 2);
        assert!(
            back.get("set-cookie").is_none(),
            "only chosen headers are kept"
        );
    }

    proptest! {
        #[test]
        fn damaged_rows_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut into = HeaderMap::new();
            let _ = decode(&bytes, &mut into);
        }
    }
}
