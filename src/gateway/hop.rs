//! Hop-by-hop header hygiene (RFC 9110 §7.6.1), applied in both directions
//! to a message's field lines as they are written on (a request's for the
//! backend in `engine/encode.rs`, a response's for the client in
//! `engine/server.rs`, or into a map for HTTP/2 clients and chained writes).

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::http1::names::eq_lowercase;

/// The hop-by-hop names (RFC 9110 §7.6.1), plus the non-standard ones
/// proxies have always dropped: what [`is_hop_by_hop`] matches (the tests
/// hold the two together). `Trailer` is not among them: it declares the
/// trailer fields that travel end to end with a chunked body.
#[cfg(test)]
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    // Meant for this hop too.
    "proxy-authorization",
];

/// Whether the field `name` (any case) is hop-by-hop by the fixed list.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    // By length first: this runs for every line of both heads, and most
    // names have a length no hop-by-hop name has. The unit tests hold it to
    // `HOP_BY_HOP`.
    let is = |hop: &[u8]| eq_lowercase(name, hop);
    match name.len() {
        2 => is(b"te"),
        7 => is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        16 => is(b"proxy-connection"),
        17 => is(b"transfer-encoding"),
        18 => is(b"proxy-authenticate"),
        19 => is(b"proxy-authorization"),
        _ => false,
    }
}

/// The field names a `Connection` value lists besides `close` and the
/// fixed list: those fields are meant for this hop too. A value that is not
/// all visible ASCII names none (as `HeaderValue::to_str` reads it).
pub(crate) fn connection_options(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    // Bytes, not text: a backend's `Connection: keep-alive` is read on
    // every response, and a UTF-8 check and a `str` search cost more than
    // the rest of the hop-by-hop work together (callgrind).
    let visible = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    value
        .split(|&b| b == b',')
        .take_while(move |_| visible)
        .map(<[u8]>::trim_ascii)
        // `keep-alive` and `close`, by far the most common, need no lookup:
        // the first goes with the fixed list, the second names no header.
        .filter(|name| !name.is_empty() && !eq_lowercase(name, b"close") && !is_hop_by_hop(name))
}

/// The lines of a message that are not hop-by-hop: neither in the fixed
/// list nor named by any `Connection` line (a header may be split over
/// several lines). `fields` makes an iterator over the lines each time it is
/// called: `Connection` is read before any line goes.
pub(crate) fn end_to_end<'a, I>(
    fields: impl Fn() -> I,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])>
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut listed: Vec<&'a [u8]> = Vec::new();
    for (name, value) in fields() {
        // `keep-alive` and `close` alone, nearly every message's, name no
        // field to drop.
        if eq_lowercase(name, b"connection")
            && !eq_lowercase(value, b"keep-alive")
            && !eq_lowercase(value, b"close")
        {
            listed.extend(connection_options(value));
        }
    }
    fields().filter(move |(name, _)| {
        !is_hop_by_hop(name) && !listed.iter().any(|l| l.eq_ignore_ascii_case(name))
    })
}

/// The end-to-end lines of `fields` as a map (for HTTP/2 clients, and for
/// the chain, which reads an answer's `ETag` from it).
pub(crate) fn end_to_end_map<'a, I>(fields: impl Fn() -> I) -> HeaderMap
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut map = HeaderMap::new();
    for (name, value) in end_to_end(fields) {
        // Lines the engine read are valid names and values (httparse checked
        // them as a map would).
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            map.append(name, value);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept<'a>(lines: &'a [(&'a str, &'a str)]) -> Vec<&'a str> {
        end_to_end(|| lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
            .map(|(name, _)| std::str::from_utf8(name).unwrap())
            .collect()
    }

    #[test]
    fn drops_listed_and_fixed_names() {
        let lines = [
            ("Connection", "keep-alive, X-Secret"),
            ("connection", "x-other"),
            ("X-Secret", "1"),
            ("x-other", "1"),
            ("keep-alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("Upgrade", "websocket"),
            ("X-Fencing-Token", "3"),
        ];
        assert_eq!(kept(&lines), ["X-Fencing-Token"]);
        let map = end_to_end_map(|| lines.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        assert_eq!(map.len(), 1);
        assert_eq!(map["x-fencing-token"], "3");
    }

    #[test]
    fn every_fixed_name_is_hop_by_hop_in_any_case_and_nothing_else() {
        for name in HOP_BY_HOP {
            assert!(is_hop_by_hop(name.as_bytes()), "{name}");
            assert!(
                is_hop_by_hop(name.to_ascii_uppercase().as_bytes()),
                "{name}"
            );
            let mut near = name.as_bytes().to_vec();
            near[0] = b'x';
            assert!(!is_hop_by_hop(&near), "{name}");
        }
        assert!(!is_hop_by_hop(b"trailer") && !is_hop_by_hop(b"") && !is_hop_by_hop(b"host"));
    }

    #[test]
    fn drops_each_fixed_name_alone_and_keeps_the_rest() {
        for name in HOP_BY_HOP {
            assert_eq!(kept(&[(name, "x"), ("x-kept", "1")]), ["x-kept"], "{name}");
        }
        assert_eq!(kept(&[("x-kept", "1")]), ["x-kept"]);
    }

    #[test]
    fn connection_names_other_fields_only_in_a_visible_value() {
        let names: Vec<&[u8]> = connection_options(b" keep-alive ,X-Secret,, close,TE ").collect();
        assert_eq!(names, [&b"X-Secret"[..]]);
        assert_eq!(connection_options(b"X-Secret, caf\xc3\xa9").count(), 0);
        assert!(is_hop_by_hop(b"Transfer-Encoding") && !is_hop_by_hop(b"Trailer"));
    }
}
