//! Requests a store may read as another operation than the one they name,
//! refused in every mode (SPEC "Deny by default"), before anything else
//! reads them.
//!
//! A gateway decides what a request does from its method and target. Where
//! the store decides otherwise, the store does what the gateway neither
//! authorised nor fenced:
//!
//! - a **method override** (`X-HTTP-Method`, `X-HTTP-Method-Override`,
//!   `X-Method-Override`, a `_method` or `x-http-method` query parameter)
//!   turns a `GET`, which carries no token check, into a `DELETE` at a
//!   store that honours it: 400 `method_override`;
//! - **`TRACE`** makes a store echo the request it received, with the
//!   credentials the gateway signed it with, and **`CONNECT`** asks for a
//!   tunnel the gateway would not fence: 405 `method_not_allowed`;
//! - the **asterisk form** (`*`, RFC 9112 §3.2.4) names the server, not an
//!   object: valid only for `OPTIONS`; any other method would be forwarded
//!   as the upstream's base path (a `DELETE` of the whole tree): 400
//!   `invalid_path`;
//! - a **method in another case, or one no dialect lists**: methods are
//!   case-sensitive (RFC 9110 §9.1), and a store that upper-cases them would
//!   run `post` as the `POST` the gateway never recognised: 501
//!   `unknown_method`;
//! - a **path that climbs above the root** (`/../x`, `/%2e%2e/x`): a store
//!   may resolve it, or not; a route's prefix would not see it: 400
//!   `invalid_path`;
//! - a **`Host` that is malformed or given twice** (over HTTP/2, `:authority`
//!   and a `host` field that differ): routes, host scopes and the store
//!   could each pick another: 400 `invalid_path`;
//! - a field the gateway reads to decide what a request is or reaches
//!   ([`DECIDING_FIELDS`]) **given twice, or named in `Connection`**: the
//!   gateway would read one line while the store reads the other, or the
//!   gateway would read a field that is then dropped as hop-by-hop: 400
//!   `bad_request`.
//!
//! ```
//! use fencegate::misreading::{misreading, Misreading};
//! use http::Request;
//!
//! let get = Request::get("/bucket/report")
//!     .header("x-http-method-override", "DELETE")
//!     .body(())
//!     .unwrap();
//! let found = misreading(&get, http::Version::HTTP_11).unwrap();
//! assert_eq!(found.status(), 400);
//! assert_eq!(found.code(), "method_override");
//!
//! let trace = Request::builder().method("TRACE").uri("/x").body(()).unwrap();
//! assert_eq!(misreading(&trace, http::Version::HTTP_11).unwrap().status(), 405);
//!
//! let options = Request::builder().method("OPTIONS").uri("*").body(()).unwrap();
//! assert_eq!(misreading(&options, http::Version::HTTP_11), None);
//! ```

use http::header::HeaderName;
use http::Method;

use crate::head::{visible_str, HeaderFields, RequestView};
use crate::key::{check_host, climbs_above_root, normalize_host};

mod fields;
mod found;

pub use found::{
    Misreading, DECIDING_FIELDS, END_TO_END, KNOWN_METHODS, OVERRIDE_FIELDS, OVERRIDE_PARAMETERS,
};

pub use fields::names_in_connection;
use fields::{looked_up, plain_host, FieldScan};

/// What in `request` a store could read as another operation, if anything
/// (see the module docs). Cheap on the common request: a method
/// comparison, one pass over the fields, and a look at the query's
/// parameter names only when it has one.
///
/// `version` is the request's protocol version: over HTTP/2 and later a
/// `host` field beside `:authority` must name the same host (over
/// HTTP/1.1 the absolute form's authority replaces `Host`, RFC 9112
/// §3.2.2, and the gateway forwards only that).
pub fn misreading<R: RequestView + ?Sized>(
    request: &R,
    version: http::Version,
) -> Option<Misreading> {
    deciding_fields(request, version).err()
}

/// [`misreading`], and when there is none, which [`DECIDING_FIELDS`] the
/// request carries (each once): the operation tables read them from this
/// one pass instead of looking each up again.
///
/// ```
/// use fencegate::misreading::deciding_fields;
/// use http::Request;
///
/// let copy = Request::builder()
///     .method("COPY")
///     .uri("/dav/a")
///     .header("destination", "/dav/b")
///     .body(())
///     .unwrap();
/// let fields = deciding_fields(&copy, http::Version::HTTP_11).unwrap();
/// assert!(fields.contains(&http::HeaderName::from_static("destination")));
/// assert!(!fields.contains(&http::HeaderName::from_static("depth")));
/// ```
pub fn deciding_fields<R: RequestView + ?Sized>(
    request: &R,
    version: http::Version,
) -> Result<DecidingFields, Misreading> {
    read_head(request, version).map(|(deciding, _)| deciding)
}

/// The value of a request's `Host` as the one pass over its fields found
/// it: `Some(None)` without one, `None` where the fields could not be
/// walked (look it up).
pub(crate) type HostField<'r> = Option<Option<&'r [u8]>>;

/// [`deciding_fields`], and the `Host` field the pass saw: a reader of the
/// host after it (S3's virtual-hosted reading) needs no lookup of its own.
pub(crate) fn read_head<R: RequestView + ?Sized>(
    request: &R,
    version: http::Version,
) -> Result<(DecidingFields, HostField<'_>), Misreading> {
    let method = request.method();
    if method == Method::TRACE || method == Method::CONNECT {
        return Err(Misreading::MethodNotAllowed {
            method: method.clone(),
        });
    }
    if !is_known(method) {
        return Err(Misreading::UnknownMethod {
            method: method.clone(),
        });
    }
    let uri = request.uri();
    if uri.path() == "*" && method != Method::OPTIONS {
        return Err(Misreading::AsteriskForm {
            method: method.clone(),
        });
    }
    let fields = request.fields();
    let scanned = FieldScan::of(fields);
    if let Some(found) = scanned
        .as_ref()
        .map_or_else(|| looked_up(fields), |scan| scan.overridden_or_ambiguous())
    {
        return Err(found);
    }
    let host = match &scanned {
        // Every request has a Host (HTTP/1.1): a look at its bytes first,
        // the whole check only for an unusual one.
        Some(scan) if scan.hosts == 1 && uri.authority().is_none() => scan
            .host
            .filter(|host| !plain_host(host))
            .and_then(|_| bad_host(uri, fields, version)),
        Some(scan) if scan.hosts == 0 && uri.authority().is_none() => None,
        _ => bad_host(uri, fields, version),
    };
    if let Some(found) = host {
        return Err(found);
    }
    // With a token (or lock) header the fencing layer reads the path,
    // after the token's syntax (SPEC "Order of checks"); a route that does
    // not enforce checks it after routing (the gateway's data plane).
    let fenced = scanned.as_ref().is_some_and(|scan| scan.token);
    if !fenced && climbs_above_root(uri.path()) {
        return Err(Misreading::ClimbingPath);
    }
    if let Some(named) = uri.query().and_then(override_parameter) {
        return Err(Misreading::MethodOverride {
            named: format!("the {named} query parameter"),
        });
    }
    Ok(match &scanned {
        Some(scan) => (
            DecidingFields(
                scan.seen
                    | if scan.amz { AMZ_FIELDS } else { 0 }
                    | if scan.upgrade { UPGRADE } else { 0 }
                    | if scan.expect { EXPECT } else { 0 },
            ),
            // More than one Host was refused above.
            Some(scan.host),
        ),
        // Not walked: as if an `x-amz-*`, an `Upgrade` and an `Expect`
        // field came (their readers look).
        None => (
            DecidingFields(DecidingFields::looked_up(fields).0 | AMZ_FIELDS | UPGRADE | EXPECT),
            None,
        ),
    })
}

/// Which of [`DECIDING_FIELDS`] a request carries: see [`deciding_fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecidingFields(u16);

/// The bit of [`DecidingFields`] that says an `x-amz-*` field came (or
/// may have: fields that could not be walked); above every deciding
/// field's.
const AMZ_FIELDS: u16 = 1 << 15;

/// The bit of [`DecidingFields`] that says an `Upgrade` field came (or may
/// have).
const UPGRADE: u16 = 1 << 14;

/// The bit of [`DecidingFields`] that says an `Expect` field came (or may
/// have).
const EXPECT: u16 = 1 << 13;

impl DecidingFields {
    /// Whether the request may carry an `x-amz-*` field (any case): `false`
    /// only when the one pass over its fields saw none. An S3 write
    /// without one, and without a query, is decided by its method and
    /// path alone.
    pub fn may_carry_amz_fields(self) -> bool {
        self.0 & AMZ_FIELDS != 0
    }

    /// Whether the request may carry `Upgrade`: `false` only when the one
    /// pass over its fields saw none, so that the proxy's check for a
    /// protocol switch needs no walk of its own.
    pub fn may_carry_upgrade(self) -> bool {
        self.0 & UPGRADE != 0
    }

    /// Whether the request may carry `Expect`: `false` only when the one
    /// pass over its fields saw none.
    pub fn may_carry_expect(self) -> bool {
        self.0 & EXPECT != 0
    }

    /// Whether the request carries `Content-Type` ([`DECIDING_FIELDS`]`[0]`):
    /// a bit test, where [`contains`](Self::contains) compares names.
    pub fn has_content_type(self) -> bool {
        self.0 & 1 != 0
    }

    /// Whether `name`, one of [`DECIDING_FIELDS`], is among them (any other
    /// name never is).
    pub fn contains(self, name: &HeaderName) -> bool {
        DECIDING_FIELDS
            .iter()
            .position(|known| known == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// Whether the request carries none of [`DECIDING_FIELDS`] whose bit is
    /// set in `mask` (bit `i`: `DECIDING_FIELDS[i]`).
    pub fn none_of(self, mask: u16) -> bool {
        self.0 & mask == 0
    }

    /// The fields carried, in [`DECIDING_FIELDS`]' order.
    pub fn names(self) -> impl Iterator<Item = &'static HeaderName> {
        // A `static` (the `const` would be a temporary each time).
        static NAMES: [HeaderName; 11] = DECIDING_FIELDS;
        NAMES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, name)| name)
    }

    /// Of fields that could not be walked in one pass: by name.
    fn looked_up<H: HeaderFields + ?Sized>(fields: &H) -> Self {
        DecidingFields(
            DECIDING_FIELDS
                .iter()
                .enumerate()
                .filter(|(_, name)| fields.contains(name))
                .fold(0, |seen, (i, _)| seen | (1 << i)),
        )
    }
}

/// Whether the request path `raw`, read as an S3 object's path
/// (`/bucket/key`, or `/key` virtual-hosted), has an empty segment inside
/// its key, or a `.` or `..` segment: S3 keys are literal, so the store
/// reads such a key as it is while the fence key (and a route's prefix)
/// would read it normalised; one object would have two fence keys
/// (SPEC: refused in every mode under the S3 dialect, 400
/// `invalid_path`). A trailing `/` is a key of its own in S3 (a "folder"
/// marker), kept.
pub fn misread_s3_key(raw: &str) -> bool {
    // One look at each byte: this runs on every S3 request (three
    // substring searches were about 500 instructions of a W1 PUT).
    let bytes = raw.as_bytes();
    let suspect = bytes
        .iter()
        .enumerate()
        .any(|(at, &b)| b == b'%' || (b == b'/' && matches!(bytes.get(at + 1), Some(b'/' | b'.'))));
    if !suspect {
        return false;
    }
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
    let path = decoded.trim_end_matches('/');
    path.split('/')
        .skip(2)
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
        || path
            .split('/')
            .nth(1)
            .is_some_and(|first| first == "." || first == "..")
}

/// Whether the request path `raw` holds a separator a store may read
/// otherwise than the gateway: a backslash (raw or `%5C`), which Azure
/// Blob and other stores take for `/`, and with `encoded_slash` a `%2F`,
/// which a store may keep literal (Apache's `AllowEncodedSlashes NoDecode`)
/// while the gateway's fence key and authorisation read a `/`. One object
/// would have two fence keys (SPEC: 400 `invalid_path`). Not for S3,
/// whose keys may hold a backslash and read `%2F` as `/`.
pub fn misread_separator(raw: &str, encoded_slash: bool) -> bool {
    // One look at each byte: this runs on every request.
    let (backslash, percent) = raw.bytes().fold((false, false), |(bs, pc), b| {
        (bs | (b == b'\\'), pc | (b == b'%'))
    });
    if backslash {
        return true;
    }
    if !percent {
        return false;
    }
    raw.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && (w[1..].eq_ignore_ascii_case(b"5c")
                || (encoded_slash && w[1..].eq_ignore_ascii_case(b"2f")))
    })
}

/// Whether `method` is listed, compared exactly: the standard methods are
/// `http::Method`'s own constants (a comparison of a tag), the rest by
/// their bytes.
fn is_known(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::POST | Method::DELETE | Method::OPTIONS
    ) || KNOWN_METHODS.contains(&method.as_str())
}

/// A `Host` field that is malformed or repeated, or that differs from
/// HTTP/2's `:authority`.
fn bad_host<H: HeaderFields + ?Sized>(
    uri: &http::Uri,
    fields: &H,
    version: http::Version,
) -> Option<Misreading> {
    if let Some(authority) = uri.authority() {
        // An absolute target's (or HTTP/2's `:authority`): a host as a
        // `Host` field would be, of an http(s) URI.
        let scheme_ok = uri.scheme_str().is_none_or(|scheme| {
            scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
        });
        if !scheme_ok || check_host(authority.as_str()).is_err() {
            return Some(Misreading::BadHost {
                detail: "the request target's authority is not an http(s) host[:port]",
            });
        }
    }
    let mut hosts = fields.values_of(&http::header::HOST);
    let host = hosts.next()?;
    if hosts.next().is_some() {
        return Some(Misreading::BadHost {
            detail: "Host is given more than once",
        });
    }
    let Some(host) = visible_str(host).filter(|host| check_host(host.trim()).is_ok()) else {
        return Some(Misreading::BadHost {
            detail: "Host is not a valid host[:port]",
        });
    };
    match uri.authority() {
        Some(authority)
            if version >= http::Version::HTTP_2
                && !authority.as_str().eq_ignore_ascii_case(host.trim())
                && normalize_host(authority.as_str()).ok() != normalize_host(host.trim()).ok() =>
        {
            Some(Misreading::BadHost {
                detail: "the host field names another host than :authority",
            })
        }
        _ => None,
    }
}

/// The first parameter of `query` whose name, percent-decoded, is an
/// override parameter, as the query spelled it.
fn override_parameter(query: &str) -> Option<&str> {
    query
        .split(['&', ';'])
        .map(|pair| pair.split_once('=').map_or(pair, |(name, _)| name))
        .find(|name| {
            let decoded: Vec<u8> = if name.contains(['%', '+']) {
                percent_encoding::percent_decode_str(&name.replace('+', " ")).collect()
            } else {
                name.as_bytes().to_vec()
            };
            let decoded = decoded.trim_ascii();
            OVERRIDE_PARAMETERS
                .iter()
                .any(|known| decoded.eq_ignore_ascii_case(known.as_bytes()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, StatusCode};

    const V1: http::Version = http::Version::HTTP_11;

    fn request(method: &str, target: &str, fields: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(target);
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request")
    }

    #[test]
    fn the_content_type_bit_is_the_content_type_field() {
        assert_eq!(DECIDING_FIELDS[0], http::header::CONTENT_TYPE);
        let typed = request("PUT", "/b/k", &[("Content-Type", "text/plain")]);
        let plain = request("PUT", "/b/k", &[("X-Fencing-Token", "1")]);
        for fields in [deciding_fields(&typed, V1), deciding_fields(&plain, V1)] {
            let fields = fields.expect("read");
            assert_eq!(
                fields.has_content_type(),
                fields.contains(&http::header::CONTENT_TYPE)
            );
        }
        assert!(deciding_fields(&typed, V1)
            .expect("read")
            .has_content_type());
        let plain = deciding_fields(&plain, V1).expect("read");
        assert!(!plain.may_carry_expect() && !plain.may_carry_upgrade());
        let asks = request(
            "PUT",
            "/b/k",
            &[("EXPECT", "100-continue"), ("Upgrade", "websocket")],
        );
        let asks = deciding_fields(&asks, V1).expect("read");
        assert!(asks.may_carry_expect() && asks.may_carry_upgrade());
    }

    #[test]
    fn override_fields_are_refused_whatever_their_case() {
        for name in [
            "X-HTTP-Method",
            "x-http-method-override",
            "X-Method-Override",
        ] {
            let found = misreading(&request("GET", "/b/k", &[(name, "DELETE")]), V1);
            assert_eq!(found.map(|m| m.code()), Some("method_override"), "{name}");
        }
    }

    #[test]
    fn override_parameters_are_refused_in_every_spelling() {
        for target in [
            "/b/k?_method=DELETE",
            "/b/k?x=1&_METHOD=DELETE",
            "/b/k?%5Fmethod=DELETE",
            "/b/k?x-http-method=DELETE",
            "/b/k?X%2DHTTP%2DMethod%2DOverride=DELETE",
            "/b/k?a=b;_method=DELETE",
            "/b/k?_method",
        ] {
            let found = misreading(&request("GET", target, &[]), V1);
            assert_eq!(found.map(|m| m.code()), Some("method_override"), "{target}");
        }
    }

    #[test]
    fn ordinary_requests_pass() {
        for target in [
            "/b/k",
            "/b/k?versionId=3",
            "/b/k?prefix=_method",
            "/b/k?comp=list&restype=container",
            "/b/k?method=1",
        ] {
            assert_eq!(
                misreading(&request("GET", target, &[]), V1),
                None,
                "{target}"
            );
        }
        assert_eq!(
            misreading(
                &request("PUT", "/b/k", &[("x-amz-meta-method", "DELETE")]),
                V1
            ),
            None
        );
    }

    #[test]
    fn trace_and_connect_are_405() {
        assert_eq!(
            misreading(&request("TRACE", "/b/k", &[]), V1).map(|m| m.status()),
            Some(StatusCode::METHOD_NOT_ALLOWED)
        );
        let connect = request("CONNECT", "example.com:443", &[]);
        assert_eq!(
            misreading(&connect, V1).map(|m| m.status()),
            Some(StatusCode::METHOD_NOT_ALLOWED)
        );
    }

    #[test]
    fn methods_are_read_as_registered() {
        for method in ["post", "Post", "delete", "pUT", "FROBNICATE", "REPORT"] {
            let found = misreading(&request(method, "/b/k?delete", &[]), V1);
            assert_eq!(
                found.map(|m| m.status()),
                Some(StatusCode::NOT_IMPLEMENTED),
                "{method}"
            );
        }
        for method in KNOWN_METHODS {
            assert_eq!(
                misreading(&request(method, "/b/k", &[]), V1),
                None,
                "{method}"
            );
        }
    }

    #[test]
    fn the_pass_says_whether_an_amz_field_came() {
        let carries = |headers: &[(&str, &str)]| {
            deciding_fields(&request("PUT", "/b/k", headers), V1)
                .expect("read")
                .may_carry_amz_fields()
        };
        assert!(!carries(&[]));
        assert!(!carries(&[
            ("x-fencing-token", "1"),
            ("x-am", "1"),
            ("x-ms-meta-a", "1")
        ]));
        assert!(carries(&[("X-Amz-Meta-A", "1")]));
        assert!(carries(&[("x-amz-acl", "public-read")]));
        assert!(carries(&[("x-amz-copy-source", "/b/o")]));
    }

    #[test]
    fn deciding_fields_come_once_and_end_to_end() {
        let twice = Request::builder()
            .method("POST")
            .uri("/b")
            .header("content-type", "text/plain")
            .header("content-type", "multipart/form-data; boundary=x")
            .body(())
            .expect("a request");
        assert_eq!(
            misreading(&twice, V1).map(|m| m.code()),
            Some("bad_request")
        );
        let hop = request(
            "COPY",
            "/d/a",
            &[("Depth", "0"), ("Connection", "keep-alive, Depth")],
        );
        let found = misreading(&hop, V1);
        assert!(
            matches!(
                found,
                Some(Misreading::AmbiguousField {
                    hop_by_hop: true,
                    ..
                })
            ),
            "{found:?}"
        );
        let fine = request(
            "COPY",
            "/d/a",
            &[("Depth", "0"), ("Connection", "keep-alive")],
        );
        assert_eq!(misreading(&fine, V1), None);
    }

    #[test]
    fn climbing_paths_and_bad_hosts_are_refused() {
        for target in ["/../x", "/a/../../x", "/%2e%2e/x", "/%2E%2E/%2e%2e/x"] {
            let found = misreading(&request("GET", target, &[]), V1);
            assert_eq!(found, Some(Misreading::ClimbingPath), "{target}");
        }
        assert_eq!(misreading(&request("GET", "/a/../x", &[]), V1), None);
        for host in ["a b", "user@gw", "gw:", "gw:99999", "[::1"] {
            let found = misreading(&request("GET", "/x", &[("host", host)]), V1);
            assert!(
                matches!(found, Some(Misreading::BadHost { .. })),
                "{host}: {found:?}"
            );
        }
        let twice = Request::builder()
            .uri("/x")
            .header("host", "a")
            .header("host", "b")
            .body(())
            .expect("a request");
        assert!(matches!(
            misreading(&twice, V1),
            Some(Misreading::BadHost { .. })
        ));
        let h2 = request("GET", "https://a.example/x", &[("host", "b.example")]);
        assert!(matches!(
            misreading(&h2, http::Version::HTTP_2),
            Some(Misreading::BadHost { .. })
        ));
        assert_eq!(
            misreading(&h2, V1),
            None,
            "HTTP/1.1: the target's authority wins"
        );
        let same = request("GET", "https://a.example/x", &[("host", "A.example")]);
        assert_eq!(misreading(&same, http::Version::HTTP_2), None);
        let port = request("GET", "https://gw/x", &[("host", "gw:443")]);
        assert_eq!(misreading(&port, http::Version::HTTP_2), None);
        for target in ["http://x@h.example/a", "ftp://h.example/a"] {
            let found = misreading(&request("PUT", target, &[]), V1);
            assert!(
                matches!(found, Some(Misreading::BadHost { .. })),
                "{target}: {found:?}"
            );
        }
        let comma = request("GET", "/x", &[("host", "h.example,gw")]);
        assert!(matches!(
            misreading(&comma, V1),
            Some(Misreading::BadHost { .. })
        ));
        for named in ["host", "X-Fencing-Token", "x-fencing-lock"] {
            let hop = request("PUT", "/x", &[("connection", named)]);
            assert!(
                matches!(
                    misreading(&hop, V1),
                    Some(Misreading::AmbiguousField {
                        hop_by_hop: true,
                        ..
                    })
                ),
                "{named}"
            );
        }
    }

    #[test]
    fn separators_a_store_may_read_otherwise() {
        for raw in ["/c/a\\b", "/c/a%5Cb", "/c/a%5cb"] {
            assert!(misread_separator(raw, false), "{raw}");
        }
        assert!(misread_separator("/c/a%2Fb", true));
        assert!(!misread_separator("/c/a%2Fb", false));
        assert!(!misread_separator("/c/a%252Fb", true));
        assert!(!misread_separator("/c/a b%41", true));
    }

    #[test]
    fn the_s3_key_check_looks_further_exactly_when_the_substring_searches_did() {
        // Every path of up to six bytes of these: the one pass must read
        // as the three searches it replaced, then the same decoding.
        let reference = |raw: &str| {
            if !raw.contains("//") && !raw.contains("/.") && !raw.contains('%') {
                return false;
            }
            let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
            let path = decoded.trim_end_matches('/');
            path.split('/')
                .skip(2)
                .any(|segment| segment.is_empty() || segment == "." || segment == "..")
                || path
                    .split('/')
                    .nth(1)
                    .is_some_and(|first| first == "." || first == "..")
        };
        let alphabet = ['/', '.', '%', '2', 'e', 'a'];
        let mut paths = vec![String::new()];
        for _ in 0..6 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}")))
                .collect();
            for path in &longer {
                assert_eq!(misread_s3_key(path), reference(path), "{path:?}");
            }
            paths = longer;
        }
    }

    #[test]
    fn s3_keys_are_literal() {
        for raw in [
            "/b/a//k",
            "/b/./k",
            "/b/k/..",
            "/b/%2e%2e/k",
            "/b/a%2F%2Fk",
            "/../k",
            "/b/a/./",
        ] {
            assert!(misread_s3_key(raw), "{raw}");
        }
        for raw in [
            "/b/k",
            "/b/dir/",
            "/b/.hidden",
            "/b/a..b",
            "/",
            "/b",
            "/b/",
            "/b/%41",
        ] {
            assert!(!misread_s3_key(raw), "{raw}");
        }
    }

    #[test]
    fn the_asterisk_form_is_only_for_options() {
        assert_eq!(misreading(&request("OPTIONS", "*", &[]), V1), None);
        for method in ["DELETE", "GET", "PUT", "PROPFIND", "MKCOL"] {
            let found = misreading(&request(method, "*", &[]), V1);
            assert_eq!(found.map(|m| m.code()), Some("invalid_path"), "{method}");
        }
    }
}
