//! What [`misreading`](super::misreading) finds, and the names it looks
//! for: values, below the code that reads a request for them.

use http::header::HeaderName;
use http::{Method, StatusCode};

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
    /// or `..` segment ([`misread_s3_key`](super::misread_s3_key)).
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
    /// ([`misread_separator`](super::misread_separator)).
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
