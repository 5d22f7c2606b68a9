//! `x-amz-date` timestamps and the civil calendar behind them.

use super::*;

// ---------------------------------------------------------------------------
// Timestamps

/// Parses a SigV4 timestamp, `20130524T000000Z` (UTC, no leap seconds), into
/// seconds since the Unix epoch. Refuses any other shape, a time before
/// 1970 and a date that does not exist (`20130230`).
pub fn parse_amz_date(text: &str) -> Result<u64, SigV4Error> {
    let malformed = || SigV4Error::MalformedDate(quote(text));
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return Err(malformed());
    }
    let days = parse_scope_date(&text[..8]).ok_or_else(malformed)?;
    let hour = digits(&b[9..11]).ok_or_else(malformed)?;
    let minute = digits(&b[11..13]).ok_or_else(malformed)?;
    let second = digits(&b[13..15]).ok_or_else(malformed)?;
    if hour > 23 || minute > 59 || second > 59 {
        return Err(malformed());
    }
    Ok(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Formats seconds since the Unix epoch as a SigV4 timestamp,
/// `20130524T000000Z`.
pub fn format_amz_date(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rest = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    // Written digit by digit: this is on every re-signed request, and
    // `format!`'s padding machinery costs more than the rest of it.
    let push = |out: &mut String, value: u64, width: u32| {
        for place in (0..width).rev() {
            let digit = (value / 10u64.pow(place) % 10) as u8;
            out.push(char::from(b'0' + digit));
        }
    };
    let mut out = String::with_capacity(16);
    push(&mut out, year, 4);
    push(&mut out, month, 2);
    push(&mut out, day, 2);
    out.push('T');
    push(&mut out, rest / 3_600, 2);
    push(&mut out, rest % 3_600 / 60, 2);
    push(&mut out, rest % 60, 2);
    out.push('Z');
    out
}

/// A scope date `YYYYMMDD` as days since the Unix epoch, if it is one
/// (1970 or later, a real day).
pub(super) fn parse_scope_date(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 8 {
        return None;
    }
    let year = digits(&b[..4])?;
    let month = digits(&b[4..6])?;
    let day = digits(&b[6..8])?;
    if year < 1970 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// The value of a run of ASCII digits (at most four here, so no overflow).
pub(super) fn digits(b: &[u8]) -> Option<u64> {
    b.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

pub(super) fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

pub(super) fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to a date of 1970 or later (Howard Hinnant's
/// `days_from_civil`, on unsigned numbers since no date is before 1970).
pub(super) fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    // Years start in March, so the leap day is the last of its year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719468: days from 0000-03-01 to 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (Hinnant's `civil_from_days`).
pub(super) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}
