//! What the fencing core reads of a request, whoever parsed it: its method,
//! its target and its header fields by name. [`http::Request`] provides it
//! (the tower layer, HTTP/2), and so does the gateway's HTTP/1.1 engine from
//! the bytes it read, without building a `HeaderMap` (docs/BENCHMARKS.md:
//! the maps were the largest share of a proxied request's instructions).

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};

/// A request's header fields, read by name.
///
/// ```
/// use fencegate::head::HeaderFields;
/// let mut map = http::HeaderMap::new();
/// map.append("x-fencing-token", "7".parse().unwrap());
/// let name = http::HeaderName::from_static("x-fencing-token");
/// assert_eq!(map.values_of(&name).collect::<Vec<_>>(), [&b"7"[..]]);
/// assert_eq!(map.first(&name), Some(&b"7"[..]));
/// ```
pub trait HeaderFields {
    /// Every value of the field `name` (lowercase, as `HeaderName`s are),
    /// in the order they came.
    fn values_of<'a, 'n>(&'a self, name: &'n HeaderName) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n;

    /// The first value of `name`.
    fn first<'a>(&'a self, name: &HeaderName) -> Option<&'a [u8]> {
        self.values_of(name).next()
    }

    /// Whether `name` is present.
    fn contains(&self, name: &HeaderName) -> bool {
        self.values_of(name).next().is_some()
    }

    /// Calls `each` with every field, `(name, value)` (the name in any
    /// case), in order: for a reader that looks at many names, one pass
    /// instead of a lookup per name. `false` where the fields cannot be
    /// walked (the default): the reader then looks names up one by one.
    fn each_field<'a>(&'a self, each: impl FnMut(&'a [u8], &'a [u8])) -> bool {
        let _ = each;
        false
    }
}

impl HeaderFields for HeaderMap {
    fn values_of<'a, 'n>(&'a self, name: &'n HeaderName) -> impl Iterator<Item = &'a [u8]> + 'n
    where
        'a: 'n,
    {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }

    fn each_field<'a>(&'a self, mut each: impl FnMut(&'a [u8], &'a [u8])) -> bool {
        for (name, value) in self {
            each(name.as_str().as_bytes(), value.as_bytes());
        }
        true
    }

    fn contains(&self, name: &HeaderName) -> bool {
        self.contains_key(name)
    }
}

/// Header fields a request is given before it is forwarded (a chained
/// write's condition): each replaces every field of its name.
pub trait SetHeader {
    /// Sets `name` to `value` alone.
    fn set(&mut self, name: HeaderName, value: HeaderValue);
}

impl SetHeader for HeaderMap {
    fn set(&mut self, name: HeaderName, value: HeaderValue) {
        self.insert(name, value);
    }
}

impl<B> SetHeader for Request<B> {
    fn set(&mut self, name: HeaderName, value: HeaderValue) {
        self.headers_mut().insert(name, value);
    }
}

/// A request as the fencing core reads it (see the module docs): a view of
/// its head.
pub trait RequestView {
    /// Its header fields.
    type Fields: HeaderFields + ?Sized;

    /// The method.
    fn method(&self) -> &Method;

    /// The request target.
    fn uri(&self) -> &Uri;

    /// The header fields.
    fn fields(&self) -> &Self::Fields;

    /// The objects an S3 `DeleteObjects` lists, once the gateway read its
    /// body ([`crate::reach`]); `None` before, and for every other request.
    fn listed_objects(&self) -> Option<&ListedObjects>;

    /// The gateway signs this request again before the store sees it
    /// (credential custody): a condition it adds breaks no signature of
    /// the client's.
    fn signed_by_gateway(&self) -> bool {
        false
    }
}

impl<B> RequestView for Request<B> {
    type Fields = HeaderMap;

    fn method(&self) -> &Method {
        Request::method(self)
    }

    fn uri(&self) -> &Uri {
        Request::uri(self)
    }

    fn fields(&self) -> &HeaderMap {
        self.headers()
    }

    fn listed_objects(&self) -> Option<&ListedObjects> {
        self.extensions().get()
    }
}

/// A field value as text, if it is all visible ASCII, spaces and tabs: what
/// [`HeaderValue::to_str`] accepts, for values read as bytes.
///
/// ```
/// use fencegate::head::visible_str;
/// assert_eq!(visible_str(b"a, b"), Some("a, b"));
/// assert_eq!(visible_str(b"caf\xc3\xa9"), None);
/// ```
pub fn visible_str(value: &[u8]) -> Option<&str> {
    // Every byte looked at (no early exit), which the compiler makes a few
    // wide comparisons: custody reads two such fields per request.
    if value.iter().fold(true, |ok, &b| {
        // `0x20..0x7f` as one unsigned comparison; `|` not `||`, so no
        // branch per byte.
        ok & ((b.wrapping_sub(0x20) < 0x5f) | (b == b'\t'))
    }) {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// The object keys an S3 `DeleteObjects` request lists in its body, as read
/// by whoever could read the body before the fencing layer (the gateway
/// does): put it in the request's extensions. Without it such a request is
/// refused as unfenceable (`crate::reach`). A plain value, on the lowest
/// floor that names it (`reach` re-exports it, its parser).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObjects(pub Vec<String>);

// Field names (and tokens such as `chunked`) are compared as RFC 9110 §5.1
// says, without regard to case, against a name the gateway knows in
// lowercase: eight bytes at a time. The gateway compares every line of
// both heads with a few names; byte by byte, folding both sides, that
// was a tenth of its own instructions per request (docs/BENCHMARKS.md).

/// Whether `text` is `lowercase` in any case. `lowercase` has no
/// uppercase ASCII letter (a `HeaderName`'s text, a literal).
///
/// ```
/// use fencegate::head::eq_lowercase;
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
