//! AWS Signature Version 4 as S3 speaks it, written once for both sides of
//! the gateway: verifying what a client signed (the `Authorization` header
//! and presigned URLs) and signing what the gateway forwards. No I/O and no
//! clock: the caller passes the request's parts and the time.
//!
//! Written here rather than taken from the `aws-sigv4` crate: that crate
//! signs a request the way the AWS SDKs do, but verifying needs the same
//! computation over a request as it was received (its target unnormalised,
//! the client's signed-header list, a presigned query less its signature),
//! and the gateway's head is its field lines as read, not an `http`
//! request; one implementation serves both sides, checked against AWS's
//! published vectors (the tests below) and by an independent verifier in
//! the test suite.
//!
//! The steps are AWS's: [`canonical_request`], then [`string_to_sign`], then
//! [`signature`] with a [`signing_key`] derived from the secret and the
//! credential scope (or [`verify_signature`], which compares in constant
//! time). The gateway's own paths take the first two steps at once with
//! [`CanonicalParts::string_to_sign_of`], which hashes the canonical request
//! without making it a `String`.
//!
//! ```
//! use fencegate::dialect::sigv4::*;
//!
//! let auth = parse_authorization(
//!     b"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
//!       SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
//!       Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
//! )
//! .unwrap();
//! let headers = [
//!     ("host", "examplebucket.s3.amazonaws.com"),
//!     ("x-amz-content-sha256", EMPTY_SHA256),
//!     ("x-amz-date", "20130524T000000Z"),
//! ];
//! let canonical = canonical_request(
//!     "GET",
//!     "/",
//!     "lifecycle",
//!     &|_| false,
//!     // Appends the values of a field (named in lowercase) to `out`.
//!     &|name, out| out.extend(headers.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_bytes())),
//!     &auth.signed_headers,
//!     EMPTY_SHA256,
//! )
//! .unwrap();
//! let to_sign = string_to_sign("20130524T000000Z", &auth.credential.scope(), &canonical);
//! let key = signing_key(b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3");
//! assert!(verify_signature(&key, &to_sign, &auth.signature));
//! ```

use std::fmt;

use ring::{digest, hmac};

/// The one signing algorithm accepted: `AWS4-HMAC-SHA256`.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The payload hash of a request whose body is not signed (presigned URLs).
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// The payload hash of an aws-chunked body with a signature per chunk.
pub const STREAMING_PAYLOAD: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";

/// The payload hash of an aws-chunked body with a signature per chunk and
/// signed trailers.
pub const STREAMING_PAYLOAD_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";

/// The SHA-256 of nothing, in hex: the payload hash of an empty body.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// The longest `X-Amz-Expires` S3 accepts: seven days, in seconds.
pub const MAX_PRESIGN_EXPIRES: u64 = 604_800;

/// How far a header-signed request's time may be from the gateway's clock,
/// in seconds: S3 allows 15 minutes either way.
pub const MAX_CLOCK_SKEW: u64 = 900;

/// The parameter names of a presigned URL, as AWS spells them (they are
/// case-sensitive).
const X_AMZ_ALGORITHM: &str = "X-Amz-Algorithm";
const X_AMZ_CREDENTIAL: &str = "X-Amz-Credential";
const X_AMZ_DATE: &str = "X-Amz-Date";
const X_AMZ_EXPIRES: &str = "X-Amz-Expires";
const X_AMZ_SIGNED_HEADERS: &str = "X-Amz-SignedHeaders";
const X_AMZ_SIGNATURE: &str = "X-Amz-Signature";
const X_AMZ_SECURITY_TOKEN: &str = "X-Amz-Security-Token";

/// Why a request's SigV4 authentication could not be read. The messages go
/// to clients (S3's `AuthorizationHeaderMalformed` and kin); whatever they
/// quote of the request is cut to a few dozen characters, and the caller
/// still escapes it for XML.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SigV4Error {
    /// The algorithm is not `AWS4-HMAC-SHA256`: SigV2 (`AWS`), SigV4a
    /// (`AWS4-ECDSA-P256-SHA256`) or another scheme altogether.
    #[error("unsupported authorization type {0:?}: only AWS4-HMAC-SHA256 is accepted")]
    UnsupportedAlgorithm(String),
    /// The `Authorization` value is not of the form `ALGORITHM k=v, k=v, k=v`.
    #[error("the authorization header is malformed: {0}")]
    MalformedAuthorization(&'static str),
    /// One of `Credential`, `SignedHeaders`, `Signature` is missing.
    #[error("the authorization header is malformed: it has no {0}")]
    MissingComponent(&'static str),
    /// One of `Credential`, `SignedHeaders`, `Signature` is given twice.
    #[error("the authorization header is malformed: it has {0} more than once")]
    DuplicateComponent(&'static str),
    /// A component other than `Credential`, `SignedHeaders`, `Signature`.
    #[error("the authorization header is malformed: unknown component {0:?}")]
    UnknownComponent(String),
    /// The credential is not `AKID/YYYYMMDD/region/service/aws4_request`.
    #[error(
        "the Credential is malformed ({0}); expecting \
         \"<access key id>/YYYYMMDD/<region>/<service>/aws4_request\""
    )]
    MalformedCredential(&'static str),
    /// The signed header list is empty, unsorted, not lowercase, or lacks
    /// `host`.
    #[error("SignedHeaders is malformed: {0}")]
    MalformedSignedHeaders(&'static str),
    /// The signature is not 64 hexadecimal digits.
    #[error("the signature is malformed: it must be 64 hexadecimal digits")]
    MalformedSignature,
    /// A presigned URL lacks one of its authentication parameters.
    #[error("the presigned URL has no {0} parameter")]
    MissingQueryParameter(&'static str),
    /// A presigned URL gives one of its authentication parameters twice.
    #[error("the presigned URL has the {0} parameter more than once")]
    DuplicateQueryParameter(&'static str),
    /// A presigned URL's authentication parameter is not valid text.
    #[error("the presigned URL's {0} parameter is not valid UTF-8")]
    QueryParameterNotText(&'static str),
    /// `X-Amz-Expires` is not a number of seconds up to seven days.
    #[error("X-Amz-Expires must be a number of seconds from 0 to 604800 (seven days)")]
    MalformedExpires,
    /// A timestamp is not `YYYYMMDD'T'HHMMSS'Z'` (or a date not `YYYYMMDD`),
    /// or names no real time.
    #[error("the date {0:?} is malformed: expecting YYYYMMDD'T'HHMMSS'Z' in UTC")]
    MalformedDate(String),
    /// The credential scope's date is not the day of the request's time.
    #[error("the credential date {credential:?} is not the day of the request time {amz_date:?}")]
    CredentialDateMismatch {
        /// The scope's `YYYYMMDD`.
        credential: String,
        /// The request's `X-Amz-Date`.
        amz_date: String,
    },
    /// A `%` in the path or query not followed by two hexadecimal digits.
    #[error("the request-target has a malformed percent-encoding")]
    MalformedPercentEncoding,
    /// A header listed in `SignedHeaders` is not in the request.
    #[error("the signed header {0:?} is not in the request")]
    MissingSignedHeader(String),
    /// A signed header's value is not UTF-8 text or holds control characters.
    #[error("the value of the signed header {0:?} is not valid text")]
    InvalidHeaderValue(String),
    /// An `x-amz-*` header is in the request but not signed.
    #[error("the header {0:?} is in the request but not signed")]
    UnsignedHeader(String),
    /// A presigned URL used after `X-Amz-Date` + `X-Amz-Expires`.
    #[error("the presigned URL has expired")]
    Expired,
    /// A presigned URL used before its `X-Amz-Date` (beyond the allowed skew).
    #[error("the presigned URL is not valid yet")]
    NotYetValid,
    /// A header-signed request's time is more than 15 minutes from the
    /// gateway's clock.
    #[error("the difference between the request time and the current time is too large")]
    RequestTimeTooSkewed,
}

/// Quotes at most this many characters of the request in an error message.
const QUOTE_MAX: usize = 64;

/// What an error message quotes of the request: bounded, so a client cannot
/// make the gateway's answer as large as its header.
fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

mod authorization;
mod canonical;
mod date;
mod keys;
mod presigned;
#[cfg(test)]
mod tests;

pub use authorization::*;
pub use canonical::*;
pub use date::*;
pub use keys::*;
pub use presigned::*;
