//! Hop-by-hop header hygiene (RFC 9110 §7.6.1), applied in both directions.

use http::header::{HeaderMap, HeaderName, CONNECTION, TE, TRANSFER_ENCODING, UPGRADE};

const FIXED: usize = 7;

/// The fixed list, plus the non-standard ones proxies have always dropped.
/// `Trailer` is not among them: it declares the trailer fields that travel
/// end to end with a chunked body.
const HOP_BY_HOP: [HeaderName; FIXED] = [
    CONNECTION,
    TE,
    TRANSFER_ENCODING,
    UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("proxy-authenticate"),
];

/// `Proxy-Authorization` is meant for this hop too.
const PROXY_AUTHORIZATION: HeaderName = HeaderName::from_static("proxy-authorization");

/// Removes every hop-by-hop header: first the names listed in *all*
/// `Connection` values (a header may be split over several lines), then the
/// fixed list.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names present instead of a removal per name of the
    // list: most messages carry none or one of them (a backend's
    // `Connection: keep-alive`), and this runs twice per request.
    let mut present = [false; FIXED + 1];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|hop| hop == name) {
            present[i] = true;
        } else if name == PROXY_AUTHORIZATION {
            present[FIXED] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    // HOP_BY_HOP[0] is Connection.
    if present[0] {
        let listed: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in listed {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present[i] {
            headers.remove(name);
        }
    }
    if present[FIXED] {
        headers.remove(PROXY_AUTHORIZATION);
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
    fn strips_each_fixed_name_alone_and_keeps_the_rest() {
        for name in HOP_BY_HOP.iter().chain([&PROXY_AUTHORIZATION]) {
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
