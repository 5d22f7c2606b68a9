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
use http::{Method, StatusCode};

use crate::head::{visible_str, HeaderFields, RequestView};
use crate::key::{check_host, climbs_above_root, normalize_host};

/// The header fields with which some stores and frameworks let a request
/// say it is another method than its request line's.
pub const OVERRIDE_FIELDS: [HeaderName; 3] = [
    HeaderName::from_static("x-http-method"),
    HeaderName::from_static("x-http-method-override"),
    HeaderName::from_static("x-method-override"),
];

/// The query parameters that do the same (compared after percent-decoding,
/// case-insensitively, as the frameworks that honour them do; the header
/// names are refused as parameters too, since some stores copy parameters
/// into fields).
pub const OVERRIDE_PARAMETERS: [&str; 4] = [
    "_method",
    "x-http-method",
    "x-http-method-override",
    "x-method-override",
];

/// Every method some dialect's table lists, as registered (upper case):
/// RFC 9110's (but `TRACE` and `CONNECT`, refused), `PATCH` (RFC 5789) and
/// WebDAV's (RFC 4918).
pub const KNOWN_METHODS: [&str; 14] = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "OPTIONS",
    "PATCH",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
];

/// The fields the gateway reads to decide what a request is or which
/// objects it reaches: each must come once, and never be hop-by-hop.
///
/// The token and `X-Fencing-Lock` headers are the fencing layer's, which
/// refuses them repeated already (400 `invalid_token`).
pub const DECIDING_FIELDS: [HeaderName; 11] = [
    http::header::CONTENT_TYPE,
    HeaderName::from_static("depth"),
    HeaderName::from_static("destination"),
    HeaderName::from_static("overwrite"),
    HeaderName::from_static("if"),
    HeaderName::from_static("lock-token"),
    HeaderName::from_static("x-amz-copy-source"),
    HeaderName::from_static("x-amz-copy-source-range"),
    HeaderName::from_static("x-ms-copy-source"),
    HeaderName::from_static("x-ms-rename-source"),
    HeaderName::from_static("x-goog-copy-source"),
];

/// Fields that must reach the store as the gateway read them, besides
/// [`DECIDING_FIELDS`]: named in `Connection` (so dropped as hop-by-hop
/// after the gateway read them) they are refused too. `Host` picks the
/// route, the host scopes' key and a virtual-hosted bucket; the token and
/// lock headers are the fence's (their default names: a route's own token
/// header is checked by the fencing layer).
pub const END_TO_END: [HeaderName; 4] = [
    http::header::HOST,
    HeaderName::from_static("x-fencing-token"),
    HeaderName::from_static("x-ms-fencing-token"),
    HeaderName::from_static("x-fencing-lock"),
];

/// What a store could read differently in a request: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misreading {
    /// 400 `method_override`: a header field or query parameter that a
    /// store may take for the method.
    MethodOverride {
        /// The field or parameter, as the request spelled it.
        named: String,
    },
    /// 405 `method_not_allowed`: `TRACE` or `CONNECT`.
    MethodNotAllowed {
        /// The method.
        method: Method,
    },
    /// 400 `invalid_path`: the asterisk form with a method other than
    /// `OPTIONS`.
    AsteriskForm {
        /// The method.
        method: Method,
    },
    /// 501 `unknown_method`: a method in another case than registered, or
    /// one no dialect lists.
    UnknownMethod {
        /// The method as sent.
        method: Method,
    },
    /// 400 `invalid_path`: the path climbs above the root.
    ClimbingPath,
    /// 400 `invalid_path`: under the S3 dialect, a key with an empty, `.`
    /// or `..` segment ([`misread_s3_key`]).
    S3Key,
    /// 400 `unfenceable_write`: a rename in place (S3's RenameObject,
    /// Azure Data Lake's rename), which deletes a source named in a field
    /// the gateway does not fence.
    Rename,
    /// 400 `unfenceable_write`: a `Destination` to an upstream with a base
    /// path, which the gateway forwards as sent (the store would read it
    /// outside the base, where the gateway did not fence).
    DestinationUnderBase,
    /// 400 `invalid_path`: a backslash, or under custody an encoded slash,
    /// in the path of a store that may read it otherwise
    /// ([`misread_separator`]).
    Separator,
    /// 400 `invalid_path`: a `Host` that is malformed, or two host fields.
    BadHost {
        /// What is wrong with it.
        detail: &'static str,
    },
    /// 400 `invalid_path`: under `--store s3` without custody, a host the
    /// store may read another bucket from than the gateway would (neither
    /// `--s3-domain` nor `BUCKET.` it, nor a host that names no bucket):
    /// which bucket the store reads is not known.
    NotTheStoresHost {
        /// The host and the domain, in words.
        detail: String,
    },
    /// 400 `unfenceable_write`: without custody, a write of a dialect's
    /// store that its operation table does not list: what it changes is
    /// not known.
    UnknownWrite {
        /// What was not understood.
        detail: String,
    },
    /// 400 `bad_request`: a deciding field given twice or named in
    /// `Connection`.
    AmbiguousField {
        /// The field.
        name: HeaderName,
        /// Named in `Connection` (else: given twice).
        hop_by_hop: bool,
    },
}

impl Misreading {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Misreading::MethodOverride { .. }
            | Misreading::AsteriskForm { .. }
            | Misreading::AmbiguousField { .. }
            | Misreading::ClimbingPath
            | Misreading::S3Key
            | Misreading::Separator
            | Misreading::DestinationUnderBase
            | Misreading::Rename
            | Misreading::BadHost { .. }
            | Misreading::NotTheStoresHost { .. }
            | Misreading::UnknownWrite { .. } => StatusCode::BAD_REQUEST,
            Misreading::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Misreading::UnknownMethod { .. } => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The `error` code of the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Misreading::MethodOverride { .. } => "method_override",
            Misreading::MethodNotAllowed { .. } => "method_not_allowed",
            Misreading::AsteriskForm { .. }
            | Misreading::ClimbingPath
            | Misreading::S3Key
            | Misreading::Separator
            | Misreading::BadHost { .. }
            | Misreading::NotTheStoresHost { .. } => "invalid_path",
            Misreading::UnknownMethod { .. } => "unknown_method",
            Misreading::AmbiguousField { .. } => "bad_request",
            Misreading::DestinationUnderBase
            | Misreading::Rename
            | Misreading::UnknownWrite { .. } => "unfenceable_write",
        }
    }

    /// The sentence the refusal's `detail` carries.
    pub fn detail(&self) -> String {
        match self {
            Misreading::MethodOverride { named } => format!(
                "{named} would let a store run this request as another method than the \
                 request line's; send that method itself"
            ),
            Misreading::MethodNotAllowed { method } => format!(
                "{method} is never forwarded: a store that echoes a TRACE would echo the \
                 gateway's credentials, and CONNECT opens a tunnel nothing fences"
            ),
            Misreading::AsteriskForm { method } => format!(
                "the asterisk form (*) names no object and is valid only for OPTIONS, not {method}"
            ),
            Misreading::ClimbingPath => {
                "the path climbs above the root with '..': a store could read it as another path"
                    .to_owned()
            }
            Misreading::BadHost { detail } => (*detail).to_owned(),
            Misreading::UnknownWrite { detail } => format!(
                "{detail}: the gateway cannot tell what this write changes, so it cannot fence \
                 it (--allow-unfenced-writes forwards it unfenced)"
            ),
            Misreading::NotTheStoresHost { detail } => format!(
                "{detail}: the gateway cannot tell which bucket the store reads"
            ),
            Misreading::Rename => "a rename (x-amz-rename-source, x-ms-rename-source) deletes its \
                source, which the gateway does not fence: copy, then delete"
                .to_owned(),
            Misreading::DestinationUnderBase => "the upstream puts requests under a base path, \
                and a Destination is forwarded as sent: the store would read it outside the base, \
                where the gateway did not fence; give the upstream without a base path"
                .to_owned(),
            Misreading::Separator => "the path holds a backslash (or, under credential custody, \
                an encoded slash), which the store may read as another separator than the gateway: \
                one object would have two names"
                .to_owned(),
            Misreading::S3Key => "an S3 key may not have an empty, '.' or '..' segment: S3 keys \
                are literal, and the store would write another object than the gateway fences"
                .to_owned(),
            Misreading::UnknownMethod { method } => format!(
                "the method {method:?} is not one the gateway reads (methods are case-sensitive: {})",
                KNOWN_METHODS.join(", ")
            ),
            Misreading::AmbiguousField {
                name,
                hop_by_hop: false,
            } => format!("{name} is given more than once: a store could read another line than the gateway"),
            Misreading::AmbiguousField {
                name,
                hop_by_hop: true,
            } => format!("{name} is named in Connection: it would be read here and dropped before the store"),
        }
    }
}

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
        Some(scan) => DecidingFields(scan.seen),
        None => DecidingFields::looked_up(fields),
    })
}

/// Which of [`DECIDING_FIELDS`] a request carries: see [`deciding_fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecidingFields(u16);

impl DecidingFields {
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

/// The deciding fields' names, in [`DECIDING_FIELDS`]' order, as bytes:
/// matched in [`FieldScan`]'s one pass.
const DECIDING_NAMES: [&[u8]; 11] = [
    b"content-type",
    b"depth",
    b"destination",
    b"overwrite",
    b"if",
    b"lock-token",
    b"x-amz-copy-source",
    b"x-amz-copy-source-range",
    b"x-ms-copy-source",
    b"x-ms-rename-source",
    b"x-goog-copy-source",
];

/// [`END_TO_END`]'s names, as bytes.
const END_TO_END_NAMES: [&[u8]; 4] = [
    b"host",
    b"x-fencing-token",
    b"x-ms-fencing-token",
    b"x-fencing-lock",
];

/// [`OVERRIDE_FIELDS`]' names, as bytes.
const OVERRIDE_NAMES: [&[u8]; 3] = [
    b"x-http-method",
    b"x-http-method-override",
    b"x-method-override",
];

/// What one pass over a request's fields found: this runs on every
/// request, so the fields are walked once (a lookup per name was 18
/// lookups and a sixth of a request's instructions), and a name is
/// compared only when its length is one of the names looked for.
struct FieldScan<'a> {
    /// The first override field.
    overridden: Option<&'a [u8]>,
    /// The index of the first deciding field given twice.
    twice: Option<usize>,
    /// A field named in `Connection` that must reach the store.
    hop: Option<HeaderName>,
    /// Deciding fields seen so far (bit `i`: [`DECIDING_NAMES`]`[i]`).
    seen: u16,
    hosts: u8,
    host: Option<&'a [u8]>,
    /// A token or lock header under one of its default names.
    token: bool,
    /// A rename field (`x-amz-rename-source`, `x-ms-rename-source`).
    renames: bool,
}

impl<'a> FieldScan<'a> {
    /// The scan of `fields`; `None` if they cannot be walked.
    fn of<H: HeaderFields + ?Sized>(fields: &'a H) -> Option<FieldScan<'a>> {
        let mut scan = FieldScan {
            overridden: None,
            twice: None,
            hop: None,
            seen: 0,
            hosts: 0,
            host: None,
            token: false,
            renames: false,
        };
        let walked = fields.each_field(|name, value| {
            let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
            // One arm per length a looked-for name has: a field is compared
            // with the one or two names of its length, or with none.
            let deciding = match name.len() {
                4 if is(b"host") => {
                    scan.hosts = scan.hosts.saturating_add(1);
                    scan.host = Some(value);
                    return;
                }
                14 | 15 if is(b"x-fencing-lock") || is(b"x-fencing-token") => {
                    scan.token = true;
                    return;
                }
                18 if is(b"x-ms-fencing-token") => {
                    scan.token = true;
                    return;
                }
                10 if is(b"connection") => {
                    if scan.hop.is_none() {
                        scan.hop = named_in_connection(value);
                    }
                    return;
                }
                13 | 17 | 22 if OVERRIDE_NAMES.iter().any(|known| is(known)) => {
                    if scan.overridden.is_none() {
                        scan.overridden = Some(match name.len() {
                            13 => OVERRIDE_NAMES[0],
                            22 => OVERRIDE_NAMES[1],
                            _ => OVERRIDE_NAMES[2],
                        });
                    }
                    return;
                }
                19 if is(b"x-amz-rename-source") => {
                    scan.renames = true;
                    return;
                }
                2 | 5 | 9 | 10 | 11 | 12 | 16 | 17 | 18 | 23 => {
                    DECIDING_NAMES.iter().position(|known| is(known))
                }
                _ => None,
            };
            if let Some(i) = deciding {
                let bit = 1u16 << i;
                if scan.seen & bit != 0 && scan.twice.is_none() {
                    scan.twice = Some(i);
                }
                scan.seen |= bit;
                // DECIDING_NAMES[9]: x-ms-rename-source.
                scan.renames |= i == 9;
            }
        });
        if !walked {
            return None;
        }
        Some(scan)
    }

    /// An override field, else a deciding field twice or named in
    /// `Connection`, in [`misreading`]'s order.
    fn overridden_or_ambiguous(&self) -> Option<Misreading> {
        if let Some(name) = self.overridden {
            return Some(Misreading::MethodOverride {
                named: format!("the {} header", String::from_utf8_lossy(name)),
            });
        }
        if let Some(i) = self.twice {
            return Some(Misreading::AmbiguousField {
                name: DECIDING_FIELDS[i].clone(),
                hop_by_hop: false,
            });
        }
        if let Some(name) = self.hop.clone() {
            return Some(Misreading::AmbiguousField {
                name,
                hop_by_hop: true,
            });
        }
        self.renames.then_some(Misreading::Rename)
    }
}

/// The first deciding or end-to-end field a `Connection` value names.
fn named_in_connection(value: &[u8]) -> Option<HeaderName> {
    value.split(|&b| b == b',').find_map(|option| {
        let option = option.trim_ascii();
        DECIDING_NAMES
            .iter()
            .position(|known| known.eq_ignore_ascii_case(option))
            .map(|i| DECIDING_FIELDS[i].clone())
            .or_else(|| {
                END_TO_END_NAMES
                    .iter()
                    .position(|known| known.eq_ignore_ascii_case(option))
                    .map(|i| END_TO_END[i].clone())
            })
    })
}

/// The override, duplicate and `Connection` checks by a lookup per name,
/// for fields that cannot be walked.
fn looked_up<H: HeaderFields + ?Sized>(fields: &H) -> Option<Misreading> {
    if let Some(name) = OVERRIDE_FIELDS.iter().find(|name| fields.contains(name)) {
        return Some(Misreading::MethodOverride {
            named: format!("the {name} header"),
        });
    }
    ambiguous_field(fields)
}

/// Whether `host` is certainly a valid `Host` value, by one look at its
/// bytes: letters, digits, `-` and `.`, then an optional `:` and 1 to 5
/// digits of a port up to 65535. Anything else goes to [`bad_host`]'s
/// whole check, which decides.
fn plain_host(host: &[u8]) -> bool {
    // Two short passes measured cheaper here than one fold that classifies
    // each byte (callgrind, W1: 191 against 309 and 406 instructions).
    let (name, port) = match host.iter().position(|&b| b == b':') {
        Some(at) => (&host[..at], Some(&host[at + 1..])),
        None => (host, None),
    };
    let name_ok = !name.is_empty() && name.iter().all(|&b| HOST_BYTES[usize::from(b)] == 1);
    let port_ok = match port {
        None => true,
        Some(port) => {
            (1..=5).contains(&port.len())
                && port.iter().all(u8::is_ascii_digit)
                && port.iter().fold(0u32, |n, &b| n * 10 + u32::from(b - b'0'))
                    <= u32::from(u16::MAX)
        }
    };
    name_ok && port_ok
}

/// What [`plain_host`] takes of each byte: 1 in a host name (letters,
/// digits, `-`, `.`), 2 for `:`, 0 for anything else.
static HOST_BYTES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = if c.is_ascii_alphanumeric() || c == b'-' || c == b'.' {
            1
        } else if c == b':' {
            2
        } else {
            0
        };
        b += 1;
    }
    table
};

/// The route's token header (`token_header`) named in `Connection`: it
/// would be read for the fence, then dropped before the store, which may
/// check it too (400 `bad_request`). The default names are refused before
/// routing already ([`END_TO_END`]).
pub fn names_in_connection<R: RequestView + ?Sized>(
    request: &R,
    token_header: &HeaderName,
) -> Option<Misreading> {
    let named = request
        .fields()
        .values_of(&http::header::CONNECTION)
        .flat_map(|value| value.split(|&b| b == b','))
        .any(|option| {
            option
                .trim_ascii()
                .eq_ignore_ascii_case(token_header.as_str().as_bytes())
        });
    named.then(|| Misreading::AmbiguousField {
        name: token_header.clone(),
        hop_by_hop: true,
    })
}

/// A deciding field given twice or named in `Connection`.
fn ambiguous_field<H: HeaderFields + ?Sized>(fields: &H) -> Option<Misreading> {
    for name in &DECIDING_FIELDS {
        if fields.values_of(name).nth(1).is_some() {
            return Some(Misreading::AmbiguousField {
                name: name.clone(),
                hop_by_hop: false,
            });
        }
    }
    for value in fields.values_of(&http::header::CONNECTION) {
        for option in value.split(|&b| b == b',') {
            let option = option.trim_ascii();
            if let Some(name) = DECIDING_FIELDS
                .iter()
                .chain(&END_TO_END)
                .find(|name| option.eq_ignore_ascii_case(name.as_str().as_bytes()))
            {
                return Some(Misreading::AmbiguousField {
                    name: name.clone(),
                    hop_by_hop: true,
                });
            }
        }
    }
    None
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
    use http::Request;

    const V1: http::Version = http::Version::HTTP_11;

    fn request(method: &str, target: &str, fields: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(target);
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request")
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
