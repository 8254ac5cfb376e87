//! Timestamps on the wire: RFC 3339, as the server writes them with chrono
//! (`2025-01-01T12:00:00.123456Z`), read back by a small strict reader. Reading them with
//! chrono's general parser would put that parser into the web chat's bundle for no gain:
//! every timestamp a client reads is one the server wrote.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, Utc};
use serde::{Deserialize, Deserializer, de::Error};

/// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, and the signed years chrono writes
/// outside 0000–9999 (`+10000-01-01T…`, `-0001-…`); `None` for anything else.
pub fn parse(text: &str) -> Option<DateTime<Utc>> {
    let bytes = text.as_bytes();
    // The year: four digits, or a sign and at least four (chrono's form past 9999).
    let (negative, year_from) = match bytes.first()? {
        b'+' => (false, 1),
        b'-' => (true, 1),
        _ => (false, 0),
    };
    let year_digits = bytes[year_from..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if year_digits < 4 || (year_from == 0 && year_digits != 4) || year_digits > 6 {
        return None;
    }
    // Everything after the year has fixed positions from `at` on.
    let at = year_from + year_digits;
    let digits = |from: usize, to: usize| -> Option<u32> {
        let part = bytes.get(at + from..at + to)?;
        part.iter().try_fold(0u32, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
        })
    };
    let is =
        |index: usize, expected: &[u8]| bytes.get(at + index).is_some_and(|b| expected.contains(b));
    if !(is(0, b"-") && is(3, b"-") && is(6, b"Tt") && is(9, b":") && is(12, b":")) {
        return None;
    }
    let year = bytes[year_from..at]
        .iter()
        .fold(0i32, |n, &b| n * 10 + i32::from(b - b'0'));
    let year = if negative { -year } else { year };
    let date = NaiveDate::from_ymd_opt(year, digits(1, 3)?, digits(4, 6)?)?;
    let (hour, minute, second) = (digits(7, 9)?, digits(10, 12)?, digits(13, 15)?);

    let mut rest = bytes.get(at + 15..)?;
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let count = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
        if count == 0 {
            return None;
        }
        for (place, digit) in fraction[..count.min(9)].iter().enumerate() {
            nanos += u32::from(digit - b'0') * 10u32.pow(8 - place as u32);
        }
        rest = &fraction[count..];
    }
    let offset_minutes = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let (hours, minutes) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 60 + minutes;
            if *sign == b'-' { -total } else { total }
        }
        _ => return None,
    };
    // A leap second is written as second 60; chrono holds it as 59 with a second's
    // worth of nanoseconds more.
    let time = if second == 60 {
        NaiveTime::from_hms_nano_opt(hour, minute, 59, nanos + 1_000_000_000)?
    } else {
        NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)?
    };
    let utc = NaiveDateTime::new(date, time)
        .checked_sub_signed(TimeDelta::try_minutes(offset_minutes)?)?;
    Some(utc.and_utc())
}

/// `#[serde(deserialize_with)]` for a timestamp.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).ok_or_else(|| unreadable(&text))
}

/// `#[serde(deserialize_with)]` for a timestamp that may be `null`.
pub fn deserialize_option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) => parse(&text).map(Some).ok_or_else(|| unreadable(&text)),
    }
}

/// What a field that did not read says: its text, cut short when long.
fn unreadable<E: Error>(text: &str) -> E {
    let shown: String = text.chars().take(40).collect();
    let more = if shown.len() < text.len() { "…" } else { "" };
    E::custom(format!("`{shown}{more}` is not an RFC 3339 timestamp"))
}

#[cfg(test)]
mod tests {
    use chrono::{FixedOffset, SecondsFormat, TimeZone};

    use super::*;

    #[test]
    fn what_chrono_writes_reads_back_as_the_same_moment() {
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .map(|t| t.and_utc());
        let moments = [
            Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).single(),
            Utc.timestamp_opt(1_764_072_000, 123_000_000).single(),
            Utc.timestamp_opt(1_764_072_000, 123_456_000).single(),
            Utc.timestamp_opt(1_764_072_000, 123_456_789).single(),
            Utc.with_ymd_and_hms(2024, 2, 29, 23, 59, 59).single(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).single(),
            Utc.with_ymd_and_hms(262_142, 12, 31, 23, 59, 59).single(),
            Utc.with_ymd_and_hms(-1, 6, 1, 12, 0, 0).single(),
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).single(),
            leap,
        ];
        for moment in moments {
            let moment = moment.expect("a valid moment");
            let written = serde_json::to_string(&moment).expect("serialise");
            let text: String = serde_json::from_str(&written).expect("a string");
            assert_eq!(parse(&text), Some(moment), "{text}");
            for format in [
                SecondsFormat::Secs,
                SecondsFormat::Millis,
                SecondsFormat::Nanos,
            ] {
                // chrono's strict reader refuses the signed years; serde's form above
                // covers those.
                let text = moment.to_rfc3339_opts(format, false);
                if let Ok(expected) = DateTime::parse_from_rfc3339(&text) {
                    assert_eq!(parse(&text), Some(expected.to_utc()), "{text}");
                }
            }
        }
    }

    #[test]
    fn an_offset_is_taken_into_account() {
        let east = FixedOffset::east_opt(5 * 3600 + 30 * 60).expect("offset");
        let moment = east
            .with_ymd_and_hms(2025, 3, 1, 1, 15, 0)
            .single()
            .expect("moment");
        assert_eq!(parse("2025-03-01T01:15:00+05:30"), Some(moment.to_utc()));
        assert_eq!(
            parse("2025-02-28t20:00:00-05:00"),
            Utc.with_ymd_and_hms(2025, 3, 1, 1, 0, 0).single()
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "2025-01-01",
            "2025-01-01T00:00:00",
            "2025-01-01 00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-02-30T00:00:00Z",
            "2025-01-01T24:00:00Z",
            "2025-01-01T00:00:00.Z",
            "2025-01-01T00:00:00Zjunk",
            "2025-01-01T00:00:00+24:00",
            "2025-01-01T00:00:00+0100",
            "2025-01-01T00:00:0\u{e9}Z",
            "２０２５-01-01T00:00:00Z",
            "12025-01-01T00:00:00Z",
            "+025-01-01T00:00:00Z",
            "+1234567-01-01T00:00:00Z",
            "-",
            "+",
            "2025-01-01T23:59:61Z",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_field_names_the_text_it_could_not_read() {
        #[derive(Debug, Deserialize)]
        struct At {
            #[serde(deserialize_with = "deserialize")]
            _at: DateTime<Utc>,
            #[serde(default, deserialize_with = "deserialize_option")]
            _until: Option<DateTime<Utc>>,
        }
        let ok: Result<At, _> = serde_json::from_str(r#"{"_at": "2025-01-01T00:00:00Z"}"#);
        assert!(ok.is_ok(), "{ok:?}");
        let err = serde_json::from_str::<At>(r#"{"_at": "yesterday"}"#).expect_err("refused");
        assert!(err.to_string().contains("`yesterday`"), "{err}");
        let long = format!(r#"{{"_at": "{}"}}"#, "9".repeat(5_000));
        let err = serde_json::from_str::<At>(&long).expect_err("refused");
        assert!(err.to_string().len() < 200, "{err}");
        let null: Result<At, _> =
            serde_json::from_str(r#"{"_at": "2025-01-01T00:00:00Z", "_until": null}"#);
        assert!(null.is_ok_and(|at| at._until.is_none()));
    }
}
