//! Field names (and tokens such as `chunked`) compared as RFC 9110 §5.1
//! says, without regard to case, against a name the gateway knows in
//! lowercase: eight bytes at a time. The gateway compares every line of
//! both heads with a few names; byte by byte, folding both sides, that
//! was a tenth of its own instructions per request (docs/BENCHMARKS.md).

/// Whether `text` is `lowercase` in any case. `lowercase` has no
/// uppercase ASCII letter (a `HeaderName`'s text, a literal).
///
/// ```
/// use fencegate::http1::names::eq_lowercase;
/// assert!(eq_lowercase(b"X-Fencing-Token", b"x-fencing-token"));
/// assert!(!eq_lowercase(b"X-Fencing-Tokens", b"x-fencing-token"));
/// assert!(!eq_lowercase(b"x~y", b"x^y"));
/// ```
#[inline]
pub fn eq_lowercase(text: &[u8], lowercase: &[u8]) -> bool {
    debug_assert!(!lowercase.iter().any(u8::is_ascii_uppercase));
    if text.len() != lowercase.len() {
        return false;
    }
    let (mut text, mut lowercase) = (text, lowercase);
    while let (Some((a, rest_a)), Some((b, rest_b))) = (
        text.split_first_chunk::<8>(),
        lowercase.split_first_chunk::<8>(),
    ) {
        if fold8(u64::from_le_bytes(*a)) != u64::from_le_bytes(*b) {
            return false;
        }
        text = rest_a;
        lowercase = rest_b;
    }
    text.iter()
        .zip(lowercase)
        .all(|(a, b)| a.to_ascii_lowercase() == *b)
}

/// Each byte of `word` that is an ASCII uppercase letter made lowercase,
/// every other byte as it was.
#[inline]
fn fold8(word: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let low = word & LOW7;
    // Bit 7 of each byte: set where the byte (high bit aside) is at least
    // 'A' (0x41 + 0x3f = 0x80), and where it is above 'Z' (0x5b + 0x25);
    // no sum carries into the next byte.
    let at_least_a = low.wrapping_add(0x3f3f_3f3f_3f3f_3f3f);
    let above_z = low.wrapping_add(0x2525_2525_2525_2525);
    let upper = !word & at_least_a & !above_z & HIGH;
    word | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_exactly_the_uppercase_letters_of_every_byte() {
        for b in 0..=255u8 {
            for lane in 0..8 {
                let word =
                    u64::from(b) << (8 * lane) | 0x6161_6161_6161_6161 & !(0xff << (8 * lane));
                let folded = fold8(word).to_le_bytes();
                assert_eq!(
                    folded[lane],
                    b.to_ascii_lowercase(),
                    "byte {b:#x} in lane {lane}"
                );
                for (other, &byte) in folded.iter().enumerate() {
                    if other != lane {
                        assert_eq!(byte, b'a');
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_standard_library(
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            flips in proptest::collection::vec(proptest::prelude::any::<bool>(), 0..40),
        ) {
            // Half the cases equal up to case: the interesting ones.
            let lowercase: Vec<u8> = text.iter().map(u8::to_ascii_lowercase).collect();
            let mixed: Vec<u8> = text
                .iter()
                .zip(flips.iter().chain(std::iter::repeat(&false)))
                .map(|(b, &up)| if up { b.to_ascii_uppercase() } else { *b })
                .collect();
            proptest::prop_assert_eq!(
                eq_lowercase(&mixed, &lowercase),
                mixed.eq_ignore_ascii_case(&lowercase)
            );
            proptest::prop_assert_eq!(
                eq_lowercase(&text, &lowercase[..lowercase.len().saturating_sub(1)]),
                text.eq_ignore_ascii_case(&lowercase[..lowercase.len().saturating_sub(1)])
            );
            let mut other = lowercase.clone();
            if let Some(last) = other.last_mut() {
                *last = last.wrapping_add(1).to_ascii_lowercase();
            }
            proptest::prop_assert_eq!(
                eq_lowercase(&mixed, &other),
                mixed.eq_ignore_ascii_case(&other)
            );
        }
    }
}
