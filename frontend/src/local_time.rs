//! Date-and-time fields: the browser's `datetime-local` input shows wall time with no
//! offset, while the protocol wants RFC 3339. The offset is the browser's own for that
//! date (so summer time is right), never the server's.

use wasm_bindgen::JsValue;

/// `2025-03-31T17:30` as typed, with the browser's offset for that moment:
/// `2025-03-31T17:30+02:00`. Anything else is passed on unchanged for the rules to judge.
pub fn with_browser_offset(wall_time: &str) -> String {
    let Some([year, month, day, hour, minute]) = parse_wall_time(wall_time) else {
        return wall_time.to_owned();
    };
    let local = js_sys::Date::new_with_year_month_day_hr_min(
        year as u32,
        month as i32 - 1,
        day as i32,
        hour as i32,
        minute as i32,
    );
    // Minutes to add to local time to get UTC: -120 east of Greenwich in summer.
    let east_minutes = -(local.get_timezone_offset() as i64);
    format!("{wall_time}{}", offset_text(east_minutes))
}

/// An RFC 3339 value (a default) as the browser's wall time, for the input to show.
/// The browser parses it (no date-format code in the bundle for this).
pub fn to_wall_time(value: &str) -> String {
    if value.is_empty() {
        return String::new();
    }
    let local = js_sys::Date::new(&JsValue::from_str(value));
    if local.get_time().is_nan() {
        return value.to_owned();
    }
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}",
        local.get_full_year(),
        local.get_month() + 1,
        local.get_date(),
        local.get_hours(),
        local.get_minutes()
    )
}

/// `YYYY-MM-DDTHH:MM` with optional `:SS`, as `[year, month, day, hour, minute]`.
fn parse_wall_time(text: &str) -> Option<[u16; 5]> {
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-');
    let mut time_parts = time.splitn(3, ':');
    let number = |part: Option<&str>, digits: usize| {
        part.filter(|p| p.len() == digits && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
    };
    let parsed = [
        number(date_parts.next(), 4)?,
        number(date_parts.next(), 2)?,
        number(date_parts.next(), 2)?,
        number(time_parts.next(), 2)?,
        number(time_parts.next(), 2)?,
    ];
    if let Some(seconds) = time_parts.next() {
        number(Some(seconds), 2)?;
    }
    let [_, month, day, hour, minute] = parsed;
    ((1..=12).contains(&month) && (1..=31).contains(&day) && hour < 24 && minute < 60)
        .then_some(parsed)
}

/// `+02:00`, `-05:30`, `+00:00`.
fn offset_text(east_minutes: i64) -> String {
    let sign = if east_minutes < 0 { '-' } else { '+' };
    let minutes = east_minutes.abs();
    format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_written_as_rfc3339_wants_them() {
        assert_eq!(offset_text(120), "+02:00");
        assert_eq!(offset_text(-330), "-05:30");
        assert_eq!(offset_text(0), "+00:00");
    }

    #[test]
    fn only_wall_times_are_recognised() {
        assert_eq!(
            parse_wall_time("2025-03-31T17:30"),
            Some([2025, 3, 31, 17, 30])
        );
        assert!(parse_wall_time("2025-03-31T17:30:15").is_some());
        assert!(parse_wall_time("2025-03-31T17:30+02:00").is_none());
        assert!(parse_wall_time("soon").is_none());
        assert!(parse_wall_time("2025-13-01T10:00").is_none());
    }
}
