//! Step 1 of the data path: reading the fencing token off a request.
//!
//! A token is the number a lock service hands out with every grant of the lock
//! (an etcd revision, a ZooKeeper zxid, a Redis `INCR`, a PostgreSQL sequence).
//! The syntax is deliberately narrow: the header value, with surrounding spaces
//! and tabs trimmed, must be 1 to 20 ASCII digits whose value fits in a `u64`.
//! Anything else (signs, hex, decimals, a comma list, a repeated header) is
//! refused instead of guessed at, because a token read wrongly is a fence
//! crossed silently.
//!
//! ```
//! use fencegate::token::{parse_token_value, TokenError};
//!
//! assert_eq!(parse_token_value(b" 34\t"), Ok(34));
//! assert_eq!(parse_token_value(b"+34"), Err(TokenError::NotDigits));
//! assert_eq!(parse_token_value(b"18446744073709551616"), Err(TokenError::Overflow));
//! ```

use http::header::HeaderName;

use crate::head::HeaderFields;

/// Why a token header was refused. Every variant is answered with
/// 400 `invalid_token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The value is empty once spaces and tabs are trimmed.
    #[error("the token is empty")]
    Empty,
    /// The value holds something other than ASCII digits.
    #[error("the token must be 1 to 20 ASCII digits")]
    NotDigits,
    /// More than 20 digits.
    #[error("the token has more than 20 digits")]
    TooLong,
    /// 20 digits whose value is above `u64::MAX`.
    #[error("the token is above 18446744073709551615")]
    Overflow,
    /// The header appears more than once.
    #[error("the token header appears more than once")]
    Repeated,
}

/// Parses one raw header value into a token.
///
/// Leading zeros are accepted (`007` is 7): they change the spelling, not the
/// number, and refusing them would only break clients that pad.
pub fn parse_token_value(raw: &[u8]) -> Result<u64, TokenError> {
    let digits = trim_spaces_and_tabs(raw);
    if digits.is_empty() {
        return Err(TokenError::Empty);
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(TokenError::NotDigits);
    }
    if digits.len() > 20 {
        return Err(TokenError::TooLong);
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)
            .and_then(|acc| acc.checked_add(u64::from(d - b'0')))
            .ok_or(TokenError::Overflow)
    })
}

/// Reads the token from `headers`: `Ok(None)` when the header is absent,
/// an error when it is malformed or repeated.
///
/// ```
/// use fencegate::token::{token_from_headers, TokenError};
/// use http::{HeaderMap, HeaderName, HeaderValue};
///
/// let name = HeaderName::from_static("x-fencing-token");
/// let mut headers = HeaderMap::new();
/// assert_eq!(token_from_headers(&headers, &name), Ok(None));
/// headers.insert(&name, HeaderValue::from_static("33"));
/// assert_eq!(token_from_headers(&headers, &name), Ok(Some(33)));
/// headers.append(&name, HeaderValue::from_static("34"));
/// assert_eq!(token_from_headers(&headers, &name), Err(TokenError::Repeated));
/// ```
pub fn token_from_headers<H: HeaderFields + ?Sized>(
    headers: &H,
    name: &HeaderName,
) -> Result<Option<u64>, TokenError> {
    let mut values = headers.values_of(name);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(TokenError::Repeated);
    }
    parse_token_value(first).map(Some)
}

fn trim_spaces_and_tabs(raw: &[u8]) -> &[u8] {
    let is_blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_blank(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_blank(b))
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use proptest::prelude::*;

    #[test]
    fn accepts_plain_and_trimmed_digits() {
        assert_eq!(parse_token_value(b"0"), Ok(0));
        assert_eq!(parse_token_value(b"33"), Ok(33));
        assert_eq!(parse_token_value(b"  33 \t"), Ok(33));
        assert_eq!(parse_token_value(b"\t\t7"), Ok(7));
        assert_eq!(parse_token_value(b"0007"), Ok(7));
        assert_eq!(parse_token_value(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_token_value(b"00000000000000000001"), Ok(1));
    }

    #[test]
    fn refuses_every_spec_example() {
        let cases: &[(&[u8], TokenError)] = &[
            (b"", TokenError::Empty),
            (b"   ", TokenError::Empty),
            (b" \t ", TokenError::Empty),
            (b"-1", TokenError::NotDigits),
            (b"+1", TokenError::NotDigits),
            (b"0x1f", TokenError::NotDigits),
            (b"1f", TokenError::NotDigits),
            (b"1.0", TokenError::NotDigits),
            (b"1e3", TokenError::NotDigits),
            (b"1,2", TokenError::NotDigits),
            (b"1 2", TokenError::NotDigits),
            (b"1\n", TokenError::NotDigits),
            (b"\xd9\xa3", TokenError::NotDigits), // ARABIC-INDIC DIGIT THREE
            (b"\xef\xbc\x93", TokenError::NotDigits), // FULLWIDTH DIGIT THREE
            (b"18446744073709551616", TokenError::Overflow),
            (b"99999999999999999999", TokenError::Overflow),
            (b"000000000000000000001", TokenError::TooLong),
            (b"123456789012345678901", TokenError::TooLong),
        ];
        for (raw, want) in cases {
            assert_eq!(
                parse_token_value(raw),
                Err(*want),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn header_absent_present_repeated() {
        let name = HeaderName::from_static("x-fencing-token");
        let mut headers = HeaderMap::new();
        assert_eq!(token_from_headers(&headers, &name), Ok(None));
        headers.insert(&name, http::HeaderValue::from_static(" 5 "));
        assert_eq!(token_from_headers(&headers, &name), Ok(Some(5)));
        headers.append(&name, http::HeaderValue::from_static("5"));
        assert_eq!(
            token_from_headers(&headers, &name),
            Err(TokenError::Repeated)
        );
    }

    proptest! {
        #[test]
        fn every_u64_round_trips(n: u64, pad_left in "[ \t]{0,3}", pad_right in "[ \t]{0,3}") {
            let raw = format!("{pad_left}{n}{pad_right}");
            prop_assert_eq!(parse_token_value(raw.as_bytes()), Ok(n));
        }

        #[test]
        fn nothing_else_is_accepted(raw in proptest::collection::vec(any::<u8>(), 0..32)) {
            // The reference: trim, then require 1..=20 digits and a u64 value.
            let trimmed = String::from_utf8_lossy(&raw)
                .trim_matches(|c| c == ' ' || c == '\t')
                .to_owned();
            let reference = (!trimmed.is_empty()
                && trimmed.len() <= 20
                && trimmed.bytes().all(|b| b.is_ascii_digit()))
            .then(|| trimmed.parse::<u64>().ok())
            .flatten();
            prop_assert_eq!(parse_token_value(&raw).ok(), reference);
        }

        #[test]
        fn digits_with_one_foreign_byte_are_refused(n: u64, at in 0usize..20, junk in any::<u8>()) {
            prop_assume!(!junk.is_ascii_digit() && junk != b' ' && junk != b'\t');
            let mut raw = n.to_string().into_bytes();
            let at = at % (raw.len() + 1);
            raw.insert(at, junk);
            // A foreign byte at either end is still inside the value (only spaces
            // and tabs are trimmed), so every placement must be refused.
            prop_assert!(parse_token_value(&raw).is_err());
        }
    }
}
