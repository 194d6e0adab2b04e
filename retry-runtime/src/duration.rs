//! The strict duration syntax of configuration files: one number, one unit.
//!
//! `"500ms"`, `"2s"`, `"1m"`, `"1.5s"`, `"250us"`. Accepted units: `ns`, `us`, `ms`, `s`, `m`,
//! `h`. Refused: an empty string, a missing unit (`"500"` could mean seconds or milliseconds), an
//! unknown unit, a sign, spaces, compound forms (`"1m30s"`), precision finer than a nanosecond and
//! anything longer than `u64::MAX` nanoseconds (about 584 years).

use std::fmt;
use std::time::Duration;

/// Units and their length in nanoseconds. Longest names first is not needed: a unit is the whole
/// suffix after the number.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The list shown in messages.
pub(crate) const UNIT_LIST: &str = "ns, us, ms, s, m, h";

/// Fraction digits beyond this cannot change a nanosecond count of any unit (an hour is
/// 3.6e12 ns), so longer fractions are refused rather than risking overflow.
const MAX_FRACTION_DIGITS: usize = 18;

/// Why a duration string was refused. Each message names the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// `""`.
    Empty,
    /// `"-1s"` or `"+1s"`.
    Signed,
    /// `"500"`: the number without a unit.
    MissingUnit(String),
    /// `"5sec"`: a unit outside [`UNIT_LIST`].
    UnknownUnit(String),
    /// Anything else that is not `<digits>[.<digits>]<unit>`.
    Malformed,
    /// `"1.0000000001ms"`: a fraction of a nanosecond.
    TooPrecise,
    /// Longer than `u64::MAX` nanoseconds.
    Overflow,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => write!(
                f,
                "it is empty: write a number and a unit such as \"500ms\""
            ),
            DurationError::Signed => write!(f, "a duration takes no sign: write it like \"500ms\""),
            DurationError::MissingUnit(n) => {
                write!(f, "it has no unit: write \"{n}ms\" or \"{n}s\"")
            }
            DurationError::UnknownUnit(u) => {
                write!(f, "unknown unit `{u}`: use one of {UNIT_LIST}")
            }
            DurationError::Malformed => write!(
                f,
                "expected one number and one unit, such as \"500ms\" or \"1.5s\" (units: {UNIT_LIST})"
            ),
            DurationError::TooPrecise => {
                write!(f, "it is finer than a nanosecond: drop the extra digits")
            }
            DurationError::Overflow => write!(f, "it is too long: use a shorter duration"),
        }
    }
}

impl std::error::Error for DurationError {}

/// A duration as a person reads it and the configuration accepts it: `259ms`, `1.25s`, `80us`
/// (where `Debug` prints `259.447999ms`). Rounded to three significant digits, which is what a
/// message needs; the exact value stays in the fields of the error that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readable(pub(crate) Duration);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        let (value, unit) = match nanos {
            0 => return f.write_str("0s"),
            1..1_000 => return write!(f, "{nanos}ns"),
            1_000..1_000_000 => (nanos as f64 / 1e3, "us"),
            1_000_000..1_000_000_000 => (nanos as f64 / 1e6, "ms"),
            _ => (self.0.as_secs_f64(), "s"),
        };
        // Three significant digits, trailing zeros dropped: 1.25, 12.5, 259, 3600.
        let decimals = match value {
            v if v < 10.0 => 2,
            v if v < 100.0 => 1,
            _ => 0,
        };
        let text = format!("{value:.decimals$}");
        let text = match text.contains('.') {
            true => text.trim_end_matches('0').trim_end_matches('.'),
            false => &text,
        };
        write!(f, "{text}{unit}")
    }
}

/// Parses `"<digits>[.<digits>]<unit>"` into a [`Duration`].
pub(crate) fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with(['-', '+']) {
        return Err(DurationError::Signed);
    }
    let number_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(number_len);
    let (int, frac) = match number.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (number, None),
    };
    let well_formed = !int.is_empty()
        && frac.is_none_or(|f| !f.is_empty() && !f.contains('.'))
        && int.bytes().all(|b| b.is_ascii_digit());
    if !well_formed {
        return Err(DurationError::Malformed);
    }
    if unit.is_empty() {
        return Err(DurationError::MissingUnit(number.to_owned()));
    }
    let Some(&(_, unit_ns)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        // A unit must be letters (or `µs`); "5s3" or "1 s" is malformed, not an unknown unit.
        return if unit.chars().all(char::is_alphabetic) {
            Err(DurationError::UnknownUnit(unit.to_owned()))
        } else {
            Err(DurationError::Malformed)
        };
    };
    let mut nanos: u128 = 0;
    for b in int.bytes() {
        nanos = nanos
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(b - b'0')))
            .filter(|n| *n <= u128::from(u64::MAX))
            .ok_or(DurationError::Overflow)?;
    }
    nanos = nanos.checked_mul(unit_ns).ok_or(DurationError::Overflow)?;
    if let Some(frac) = frac {
        let frac = frac.trim_end_matches('0');
        if frac.len() > MAX_FRACTION_DIGITS {
            return Err(DurationError::TooPrecise);
        }
        let digits: u128 = frac.bytes().fold(0, |n, b| n * 10 + u128::from(b - b'0'));
        let scale = 10u128.pow(frac.len() as u32);
        // digits < 10^18 and unit_ns < 2^42: the product fits in u128.
        let scaled = digits * unit_ns;
        if !scaled.is_multiple_of(scale) {
            return Err(DurationError::TooPrecise);
        }
        nanos = nanos
            .checked_add(scaled / scale)
            .ok_or(DurationError::Overflow)?;
    }
    let nanos = u64::try_from(nanos).map_err(|_| DurationError::Overflow)?;
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> Duration {
        parse_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn accepts_every_unit_and_fractions() {
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("2s"), Duration::from_secs(2));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("0.25ms"), Duration::from_micros(250));
        assert_eq!(ok("1.500000000000000000000s"), Duration::from_millis(1500));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("007ms"), Duration::from_millis(7));
    }

    #[test]
    fn refuses_with_a_named_reason() {
        use DurationError::*;
        let cases: &[(&str, DurationError)] = &[
            ("", Empty),
            ("-1s", Signed),
            ("+1s", Signed),
            ("500", MissingUnit("500".into())),
            ("1.5", MissingUnit("1.5".into())),
            ("5sec", UnknownUnit("sec".into())),
            ("5S", UnknownUnit("S".into())),
            ("5µs", UnknownUnit("µs".into())),
            ("ms", Malformed),
            ("1.s", Malformed),
            (".5s", Malformed),
            ("1..5s", Malformed),
            ("1.2.3s", Malformed),
            ("1m30s", Malformed),
            (" 1s", Malformed),
            ("1 s", Malformed),
            ("1s ", Malformed),
            ("1_000ms", Malformed),
            ("1.5ns", TooPrecise),
            ("0.0000000001s", TooPrecise),
            ("18446744073709551616ns", Overflow),
            ("99999999999999999999999999999999999999999h", Overflow),
            ("5124096h", Overflow),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input).as_ref(), Err(want), "{input:?}");
        }
        assert_eq!(
            parse_duration("18446744073709551615ns"),
            Ok(Duration::from_nanos(u64::MAX))
        );
    }

    #[test]
    fn durations_print_readably_and_parse_back() {
        for (duration, text) in [
            (Duration::from_nanos(259_447_999), "259ms"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_micros(80), "80us"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1_250), "1.25s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(3_600), "3600s"),
        ] {
            assert_eq!(Readable(duration).to_string(), text, "{duration:?}");
            assert!(parse_duration(text).is_ok(), "{text} parses back");
        }
    }

    #[test]
    fn messages_name_the_fix() {
        assert_eq!(
            DurationError::MissingUnit("500".into()).to_string(),
            "it has no unit: write \"500ms\" or \"500s\""
        );
        assert_eq!(
            DurationError::UnknownUnit("sec".into()).to_string(),
            "unknown unit `sec`: use one of ns, us, ms, s, m, h"
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_any_string(s in "\\PC*") {
            let _ = parse_duration(&s);
        }

        #[test]
        fn never_panics_on_near_misses(s in "[-+0-9.a-z µ]{0,40}") {
            let _ = parse_duration(&s);
        }

        #[test]
        fn whole_milliseconds_round_trip(ms in 0u64..=u64::MAX / 1_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        }

        #[test]
        fn fractions_of_a_second_are_exact(whole in 0u64..1_000_000, milli in 0u32..1000) {
            let parsed = parse_duration(&format!("{whole}.{milli:03}s"));
            prop_assert_eq!(parsed, Ok(Duration::new(whole, milli * 1_000_000)));
        }
    }
}
