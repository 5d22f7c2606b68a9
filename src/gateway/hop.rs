//! Hop-by-hop header hygiene (RFC 9110 §7.6.1), applied in both directions:
//! to a request's field lines as they are written for the backend
//! (`engine/encode.rs`), and to a response's map.

use http::header::{
    HeaderMap, HeaderName, CONNECTION, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE,
    TRANSFER_ENCODING, UPGRADE,
};

/// The hop-by-hop names (RFC 9110 §7.6.1), plus the non-standard ones
/// proxies have always dropped. `Trailer` is not among them: it declares the
/// trailer fields that travel end to end with a chunked body.
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

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The position of `name` in [`HOP_BY_HOP`]. A `match` on the text, which
/// compiles to a switch on the length: a `const` array of `HeaderName`s
/// would be built and dropped at every use (about 300 instructions per
/// request on this path), a `static` one compared slower still.
fn hop_index(name: &HeaderName) -> Option<usize> {
    hop_index_of(name.as_str())
}

fn hop_index_of(name: &str) -> Option<usize> {
    Some(match name {
        "connection" => 0,
        "te" => 1,
        "transfer-encoding" => 2,
        "upgrade" => 3,
        "keep-alive" => 4,
        "proxy-connection" => 5,
        "proxy-authenticate" => 6,
        "proxy-authorization" => 7,
        _ => return None,
    })
}

/// Whether the field `name` (any case) is hop-by-hop by the fixed list.
pub(crate) fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|hop| name.eq_ignore_ascii_case(hop.as_bytes()))
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
        .filter(|name| {
            !name.is_empty() && !name.eq_ignore_ascii_case(b"close") && !is_hop_by_hop(name)
        })
}

/// Removes every hop-by-hop header: first the names listed in *all*
/// `Connection` values (a header may be split over several lines), then the
/// fixed list.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names present instead of a removal per name of the
    // list: most messages carry none or one of them (a backend's
    // `Connection: keep-alive`), and this runs twice per request.
    let mut present = [false; HOP_BY_HOP.len()];
    let mut any = false;
    for name in headers.keys() {
        if let Some(i) = hop_index(name) {
            present[i] = true;
            any = true;
        }
    }
    if !any {
        return;
    }
    // HOP_BY_HOP[0] is Connection.
    if present[0] {
        let listed: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .flat_map(|value| connection_options(value.as_bytes()))
            .filter_map(|name| HeaderName::from_bytes(name).ok())
            .collect();
        for name in listed {
            headers.remove(name);
        }
    }
    for (i, present) in present.into_iter().enumerate() {
        if present {
            headers.remove(hop_name(i));
        }
    }
}

/// The name at position `i` of [`HOP_BY_HOP`], without parsing it.
fn hop_name(i: usize) -> HeaderName {
    match i {
        0 => CONNECTION,
        1 => TE,
        2 => TRANSFER_ENCODING,
        3 => UPGRADE,
        4 => KEEP_ALIVE,
        5 => PROXY_CONNECTION,
        6 => PROXY_AUTHENTICATE,
        _ => PROXY_AUTHORIZATION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_listed_and_fixed_names() {
        let mut h = HeaderMap::new();
        h.append(CONNECTION, "keep-alive, X-Secret".parse().unwrap());
        h.append(CONNECTION, "x-other".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("x-other", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert(UPGRADE, "websocket".parse().unwrap());
        h.insert("x-fencing-token", "3".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-fencing-token"));
    }

    #[test]
    fn connection_names_other_fields_only_in_a_visible_value() {
        let names: Vec<&[u8]> = connection_options(b" keep-alive ,X-Secret,, close,TE ").collect();
        assert_eq!(names, [&b"X-Secret"[..]]);
        assert_eq!(connection_options(b"X-Secret, caf\xc3\xa9").count(), 0);
        assert!(is_hop_by_hop(b"Transfer-Encoding") && !is_hop_by_hop(b"Trailer"));
    }

    #[test]
    fn strips_each_fixed_name_alone_and_keeps_the_rest() {
        for name in HOP_BY_HOP {
            let mut h = HeaderMap::new();
            h.insert(name, "x".parse().unwrap());
            h.insert("x-kept", "1".parse().unwrap());
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name}: {h:?}");
            assert!(h.contains_key("x-kept"), "{name}");
        }
        let mut h = HeaderMap::new();
        h.insert("x-kept", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
    }
}
