//! The token parser against the contract's rule, written the plain way:
//! spaces and tabs trimmed, 1 to 20 ASCII digits, a value that fits in u64.
//! A parsed token prints back to its digits without leading zeros.

#![no_main]

use libfuzzer_sys::fuzz_target;

fn reference(raw: &[u8]) -> Option<u64> {
    let is_blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_blank(b))?;
    let end = raw.iter().rposition(|b| !is_blank(b))? + 1;
    let digits = &raw[start..end];
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0u128, |n, d| n * 10 + u128::from(d - b'0'));
    u64::try_from(value).ok()
}

fuzz_target!(|raw: &[u8]| {
    let parsed = fencegate::token::parse_token_value(raw).ok();
    assert_eq!(parsed, reference(raw), "{raw:?}");
    if let Some(token) = parsed {
        let text = String::from_utf8_lossy(raw);
        let digits = text.trim_matches([' ', '\t']).trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        assert_eq!(token.to_string(), digits);
    }
});
