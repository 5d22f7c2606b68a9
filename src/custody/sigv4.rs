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
//! use fencegate::custody::sigv4::*;
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

// ---------------------------------------------------------------------------
// Keys, hashes, signatures

/// A derived SigV4 signing key (HMAC chain over date, region, service,
/// `aws4_request`). Valid for one day, region and service; callers may cache
/// it under that scope. `Debug` prints nothing secret.
#[derive(Clone)]
pub struct SigningKey(hmac::Key);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// HMAC-SHA256 of `data` under this key.
    pub fn sign(&self, data: &[u8]) -> [u8; 32] {
        to_array(hmac::sign(&self.0, data).as_ref())
    }

    /// Whether `claimed` is the HMAC-SHA256 of `data` under this key,
    /// compared in constant time.
    pub fn verify(&self, data: &[u8], claimed: &[u8; 32]) -> bool {
        hmac::verify(&self.0, data, claimed).is_ok()
    }
}

/// Derives the signing key: `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date),
/// region), service), "aws4_request")`. `date` is the scope's `YYYYMMDD`.
pub fn signing_key(
    secret_access_key: &[u8],
    date: &str,
    region: &str,
    service: &str,
) -> SigningKey {
    let mut seed = Vec::with_capacity(4 + secret_access_key.len());
    seed.extend_from_slice(b"AWS4");
    seed.extend_from_slice(secret_access_key);
    let k_date = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &seed), date.as_bytes());
    // The copy of the secret goes as soon as it is used (best effort: the
    // allocator may have moved it, and ring keeps its own padded copies).
    seed.fill(0);
    let k_region = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_date.as_ref()),
        region.as_bytes(),
    );
    let k_service = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_region.as_ref()),
        service.as_bytes(),
    );
    let k_signing = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, k_service.as_ref()),
        b"aws4_request",
    );
    SigningKey(hmac::Key::new(hmac::HMAC_SHA256, k_signing.as_ref()))
}

/// The string to sign: `AWS4-HMAC-SHA256\n<amz_date>\n<scope>\n<hex sha256
/// of the canonical request>`.
pub fn string_to_sign(amz_date: &str, credential_scope: &str, canonical_request: &str) -> String {
    let hash = digest::digest(&digest::SHA256, canonical_request.as_bytes());
    let mut out =
        String::with_capacity(ALGORITHM.len() + amz_date.len() + credential_scope.len() + 67);
    push_string_to_sign(&mut out, amz_date, credential_scope, hash.as_ref());
    out
}

/// [`string_to_sign`], written into the canonical request's own buffer once
/// it is hashed: a verifier and a signer need the one right after the other,
/// and this saves an allocation on every signed request.
pub fn into_string_to_sign(
    amz_date: &str,
    credential_scope: &str,
    canonical_request: String,
) -> String {
    let hash = digest::digest(&digest::SHA256, canonical_request.as_bytes());
    let mut out = canonical_request;
    out.clear();
    push_string_to_sign(&mut out, amz_date, credential_scope, hash.as_ref());
    out
}

fn push_string_to_sign(out: &mut String, amz_date: &str, credential_scope: &str, hash: &[u8]) {
    out.push_str(ALGORITHM);
    out.push('\n');
    out.push_str(amz_date);
    out.push('\n');
    out.push_str(credential_scope);
    out.push('\n');
    push_hex(out, hash);
}

/// The signature of `string_to_sign` under `key`.
pub fn signature(key: &SigningKey, string_to_sign: &str) -> [u8; 32] {
    key.sign(string_to_sign.as_bytes())
}

/// Whether `claimed` is the signature of `string_to_sign` under `key`,
/// compared in constant time (ring's HMAC verification), so the time taken
/// says nothing about how much of a forged signature was right.
pub fn verify_signature(key: &SigningKey, string_to_sign: &str, claimed: &[u8; 32]) -> bool {
    key.verify(string_to_sign.as_bytes(), claimed)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Lowercase hex of the SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

/// The SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    to_array(digest::digest(&digest::SHA256, data).as_ref())
}

/// Decodes 64 hex digits (either case) into 32 bytes.
pub fn parse_hex32(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    // Every digit through a table, a bad one remembered rather than
    // branched on: a signature's 64 digits on every signed request.
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (
            HEX_DIGIT[usize::from(pair[0])],
            HEX_DIGIT[usize::from(pair[1])],
        );
        bad |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (bad & NOT_HEX == 0).then_some(out)
}

/// [`HEX_DIGIT`]'s mark of a byte that is not a hex digit.
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a hex digit (either case), or [`NOT_HEX`].
const HEX_DIGIT: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        if let Some(value) = hex_value(b as u8) {
            table[b] = value;
        }
        b += 1;
    }
    table
};

/// Copies a 32-byte digest or tag into an array. ring's SHA-256 and
/// HMAC-SHA256 outputs are 32 bytes; a shorter slice would leave zeros, which
/// no signature comparison could then match by accident of length.
fn to_array(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let n = bytes.len().min(32);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends lowercase hex of `bytes`.
/// Appends the lowercase hex of `bytes` to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    // Into a byte buffer, then one copy: `String::push` encodes each char.
    let mut digits = [0u8; 128];
    for chunk in bytes.chunks(digits.len() / 2) {
        for (pair, &b) in digits.chunks_exact_mut(2).zip(chunk) {
            pair[0] = HEX_LOWER[usize::from(b >> 4)];
            pair[1] = HEX_LOWER[usize::from(b & 0x0f)];
        }
        let written = &digits[..chunk.len() * 2];
        // Hex digits are ASCII.
        out.push_str(std::str::from_utf8(written).unwrap_or_default());
    }
}

/// The lowercase hex of a 32-byte hash or signature. Arithmetic rather
/// than a table lookup per digit: the compiler makes it a few vector
/// steps, where [`push_hex`]'s lookups cost several instructions a digit
/// (two of these on every signed request, and a third for the gateway's
/// `Authorization`).
///
/// ```
/// use fencegate::custody::sigv4::{hex, hex32};
///
/// let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37) as u8);
/// assert_eq!(&hex32(&bytes)[..], hex(&bytes).as_bytes());
/// ```
pub fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    /// `n` (below 16) as a lowercase hex digit: `a` is 39 past `'0' + 10`.
    const fn digit(n: u8) -> u8 {
        let above_nine = (9u8.wrapping_sub(n) >> 7) & 1;
        n + b'0' + above_nine * 39
    }
    let mut out = [0u8; 64];
    for i in 0..32 {
        out[2 * i] = digit(bytes[i] >> 4);
        out[2 * i + 1] = digit(bytes[i] & 0x0f);
    }
    out
}

const fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Credential, Authorization, presigned URLs

/// The credential scope: access key id, date `YYYYMMDD`, region, service.
///
/// Kept as the one string a request carries (`AKID/date/region/service/
/// aws4_request`) with where each part is: one allocation per signed
/// request where a `String` per part cost four, and the scope a slice of it.
///
/// ```
/// use fencegate::custody::sigv4::Credential;
///
/// let credential = Credential::parse("AKID/20130524/us-east-1/s3/aws4_request").unwrap();
/// assert_eq!(credential.access_key_id(), "AKID");
/// assert_eq!(credential.scope(), "20130524/us-east-1/s3/aws4_request");
/// assert_eq!(credential, Credential::new("AKID", "20130524", "us-east-1", "s3"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// `AKID/date/region/service/aws4_request`.
    text: String,
    /// The byte offsets of the three `/` after the access key id, the date
    /// and the region.
    slashes: [usize; 3],
}

impl Credential {
    /// A credential of these parts (a signer's: parts are not checked).
    pub fn new(access_key_id: &str, date: &str, region: &str, service: &str) -> Credential {
        let mut text = String::with_capacity(
            access_key_id.len() + date.len() + region.len() + service.len() + 16,
        );
        let mut slashes = [0; 3];
        for (i, part) in [access_key_id, date, region].into_iter().enumerate() {
            text.push_str(part);
            slashes[i] = text.len();
            text.push('/');
        }
        text.push_str(service);
        text.push_str("/aws4_request");
        Credential { text, slashes }
    }

    /// The access key id (which key signed).
    pub fn access_key_id(&self) -> &str {
        &self.text[..self.slashes[0]]
    }

    /// The scope's day, `YYYYMMDD`.
    pub fn date(&self) -> &str {
        &self.text[self.slashes[0] + 1..self.slashes[1]]
    }

    /// The scope's region (`us-east-1`).
    pub fn region(&self) -> &str {
        &self.text[self.slashes[1] + 1..self.slashes[2]]
    }

    /// The scope's service (`s3`).
    pub fn service(&self) -> &str {
        let end = self.text.len() - "/aws4_request".len();
        &self.text[self.slashes[2] + 1..end]
    }

    /// The credential scope: `date/region/service/aws4_request`.
    pub fn scope(&self) -> &str {
        &self.text[self.slashes[0] + 1..]
    }

    /// Parses `AKID/20130524/us-east-1/s3/aws4_request`. The access key id
    /// is what precedes the last four parts, so one with a `/` in it (some
    /// S3-compatible stores allow that) still parses.
    pub fn parse(text: &str) -> Result<Credential, SigV4Error> {
        // The last four `/`, found as bytes: each part then lies between
        // ASCII slashes, so slicing the text there is whole UTF-8.
        let bytes = text.as_bytes();
        let mut slashes = [0usize; 4];
        let mut end = bytes.len();
        for slot in slashes.iter_mut().rev() {
            let Some(at) = memchr::memrchr(b'/', &bytes[..end]) else {
                return Err(SigV4Error::MalformedCredential(
                    "it does not have five parts",
                ));
            };
            *slot = at;
            end = at;
        }
        let part = |from: usize, to: usize| &text[from..to];
        let access_key_id = part(0, slashes[0]);
        let date = part(slashes[0] + 1, slashes[1]);
        let region = part(slashes[1] + 1, slashes[2]);
        let service = part(slashes[2] + 1, slashes[3]);
        if part(slashes[3] + 1, text.len()) != "aws4_request" {
            return Err(SigV4Error::MalformedCredential(
                "it does not end in aws4_request",
            ));
        }
        if !is_scope_part(access_key_id) {
            return Err(SigV4Error::MalformedCredential(
                "the access key id is empty or not text",
            ));
        }
        if parse_scope_date(date).is_none() {
            return Err(SigV4Error::MalformedCredential(
                "the date is not a real YYYYMMDD",
            ));
        }
        if !is_scope_part(region) {
            return Err(SigV4Error::MalformedCredential(
                "the region is empty or not text",
            ));
        }
        if !is_scope_part(service) {
            return Err(SigV4Error::MalformedCredential(
                "the service is empty or not text",
            ));
        }
        Ok(Credential {
            text: text.to_owned(),
            slashes: [slashes[0], slashes[1], slashes[2]],
        })
    }

    /// Checks that the scope's date is the day of the request's time
    /// (`X-Amz-Date`), as S3 does: a signature is only good on its own day.
    pub fn check_date(&self, amz_date: &str) -> Result<(), SigV4Error> {
        if amz_date.len() >= 8 && amz_date.as_bytes()[..8] == *self.date().as_bytes() {
            Ok(())
        } else {
            Err(SigV4Error::CredentialDateMismatch {
                credential: quote(self.date()),
                amz_date: quote(amz_date),
            })
        }
    }

    /// The signing key of this scope for `secret_access_key`.
    pub fn signing_key(&self, secret_access_key: &[u8]) -> SigningKey {
        signing_key(
            secret_access_key,
            self.date(),
            self.region(),
            self.service(),
        )
    }
}

/// As `Credential=` takes it: `AKID/date/region/service/aws4_request`.
impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A part of a credential scope: not empty, visible ASCII (a space, comma or
/// control character would change how the header around it reads).
fn is_scope_part(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic() && b != b',')
}

/// A parsed `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=a;b;c,
/// Signature=hex` header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Who signed, and the scope.
    pub credential: Credential,
    /// The signed header names, lowercase, in the (sorted) order listed.
    pub signed_headers: SignedHeaders,
    /// The claimed signature.
    pub signature: [u8; 32],
}

impl Authorization {
    /// The header value, as SDKs write it: `AWS4-HMAC-SHA256
    /// Credential=..., SignedHeaders=..., Signature=...`.
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(200);
        out.push_str(ALGORITHM);
        out.push_str(" Credential=");
        out.push_str(&self.credential.to_string());
        out.push_str(", SignedHeaders=");
        out.push_str(self.signed_headers.as_str());
        out.push_str(", Signature=");
        push_hex(&mut out, &self.signature);
        out
    }
}

/// Parses an `Authorization` header value. Tolerates spaces (and tabs)
/// around the components and any order of the three; refuses a duplicate,
/// missing or unknown component, a signature that is not 64 hex digits,
/// `SignedHeaders` that are empty, not lowercase, not sorted or without
/// `host`, and any algorithm but `AWS4-HMAC-SHA256`
/// ([`SigV4Error::UnsupportedAlgorithm`], so SigV2 `AWS AKID:sig` and SigV4a
/// can be told apart from garbage).
pub fn parse_authorization(value: &[u8]) -> Result<Authorization, SigV4Error> {
    // Byte by byte: every delimiter is ASCII, so each slice of the checked
    // UTF-8 text is whole characters, and no `char` is decoded on a path
    // every signed request takes.
    let text = std::str::from_utf8(value)
        .map_err(|_| SigV4Error::MalformedAuthorization("it is not valid UTF-8"))?;
    let text = trim_ows(text);
    if text.is_empty() {
        return Err(SigV4Error::MalformedAuthorization("it is empty"));
    }
    let (algorithm, rest) = match text.bytes().position(is_ows_byte) {
        Some(at) => (&text[..at], trim_ows(&text[at..])),
        None => (text, ""),
    };
    if !algorithm.bytes().all(is_tchar) {
        return Err(SigV4Error::MalformedAuthorization(
            "it does not start with an algorithm name",
        ));
    }
    if algorithm != ALGORITHM {
        return Err(SigV4Error::UnsupportedAlgorithm(quote(algorithm)));
    }

    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    let mut rest = rest;
    while !rest.is_empty() {
        // memchr's word-at-a-time search: the header is some 200 bytes.
        let (component, next) = match memchr::memchr(b',', rest.as_bytes()) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let component = trim_ows(component);
        let Some(equals) = memchr::memchr(b'=', component.as_bytes()) else {
            return Err(SigV4Error::MalformedAuthorization(
                "a component is not of the form key=value",
            ));
        };
        let (key, value) = (&component[..equals], &component[equals + 1..]);
        if memchr::memchr2(b' ', b'\t', value.as_bytes()).is_some() {
            return Err(SigV4Error::MalformedAuthorization(
                "a component's value has a space in it (are the components separated by commas?)",
            ));
        }
        let (slot, name) = match key {
            "Credential" => (&mut credential, "Credential"),
            "SignedHeaders" => (&mut signed_headers, "SignedHeaders"),
            "Signature" => (&mut signature, "Signature"),
            other => return Err(SigV4Error::UnknownComponent(quote(other))),
        };
        if slot.replace(value).is_some() {
            return Err(SigV4Error::DuplicateComponent(name));
        }
        match next {
            // A trailing comma leaves one empty component, refused as the
            // split did.
            Some("") => {
                return Err(SigV4Error::MalformedAuthorization(
                    "a component is not of the form key=value",
                ))
            }
            Some(next) => rest = next,
            None => break,
        }
    }
    let credential = credential.ok_or(SigV4Error::MissingComponent("Credential"))?;
    let signed_headers = signed_headers.ok_or(SigV4Error::MissingComponent("SignedHeaders"))?;
    let signature = signature.ok_or(SigV4Error::MissingComponent("Signature"))?;
    Ok(Authorization {
        credential: Credential::parse(credential)?,
        signed_headers: parse_signed_headers(signed_headers)?,
        signature: parse_hex32(signature.as_bytes()).ok_or(SigV4Error::MalformedSignature)?,
    })
}

/// `text` without spaces and tabs around it.
fn trim_ows(text: &str) -> &str {
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|&b| !is_ows_byte(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| !is_ows_byte(b))
        .map_or(start, |at| at + 1);
    &text[start..end.max(start)]
}

/// Optional white space (RFC 9110 `OWS`): space or tab.
fn is_ows_byte(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Parses a `SignedHeaders` list (`host;range;x-amz-date`): header names,
/// lowercase, sorted, no duplicates, `host` among them. Sorted is what every
/// signer sends and what lets a verifier rebuild the canonical request
/// without guessing an order; `host` is required so a signature cannot be
/// replayed at another bucket of a virtual-hosted store.
pub fn parse_signed_headers(text: &str) -> Result<SignedHeaders, SigV4Error> {
    SignedHeaders::parse(text)
}

/// A checked `SignedHeaders` list: header names, lowercase, sorted, no
/// duplicates, `host` among them, kept as the one `;`-joined string SigV4
/// writes. One allocation, where a `String` per name cost one each on every
/// signed request, verified and then re-signed.
///
/// ```
/// use fencegate::custody::sigv4::SignedHeaders;
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// assert!(signed.contains("x-amz-date"));
/// assert_eq!(signed.iter().collect::<Vec<_>>(), ["host", "x-amz-date"]);
/// // Made from names in any order, as a signer lists what it signs.
/// let made = SignedHeaders::from_names(["x-amz-date", "host", "host"]).unwrap();
/// assert_eq!(made, signed);
/// assert!(SignedHeaders::parse("x-amz-date;host").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `host;x-amz-date`, checked.
    text: String,
    /// Where the names start and end in `text`, found when it was checked:
    /// every field line of a signed request is looked up in the list, and
    /// a lookup that compares lengths first is a few instructions a name,
    /// where finding the `;`s again cost more than the comparisons.
    index: NameIndex,
}

/// Whether `name`, ASCII letters folded to lowercase, is `listed` (a
/// lowercase name of the same length). Eight bytes at a time: the list is
/// lowercase, so only `name` needs folding, and folding a word is a few
/// operations where a byte at a time took several per byte (every field
/// line of a signed request is looked up, verified and re-signed).
fn eq_folded(listed: &[u8], name: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    /// Each byte in `A..=Z` gets 0x20 added; no other changes.
    fn fold(word: u64) -> u64 {
        let low7 = word & (0x7f * ONES);
        // The high bit of each byte: `low7 >= b'A'`, then `low7 > b'Z'`
        // (no carry leaves a byte: `low7` is at most 0x7f).
        let at_least_a = low7 + (0x80 - u64::from(b'A')) * ONES;
        let above_z = low7 + (0x80 - u64::from(b'Z') - 1) * ONES;
        let upper = at_least_a & !above_z & !word & (0x80 * ONES);
        word | (upper >> 2)
    }
    if listed.len() != name.len() {
        return false;
    }
    let mut listed_words = listed.chunks_exact(8);
    let mut name_words = name.chunks_exact(8);
    for (l, n) in (&mut listed_words).zip(&mut name_words) {
        let (Ok(l), Ok(n)) = (<[u8; 8]>::try_from(l), <[u8; 8]>::try_from(n)) else {
            return false;
        };
        if u64::from_le_bytes(l) != fold(u64::from_le_bytes(n)) {
            return false;
        }
    }
    listed_words
        .remainder()
        .iter()
        .zip(name_words.remainder())
        .all(|(l, n)| *l == n.to_ascii_lowercase())
}

/// How many names a [`SignedHeaders`] indexes (a longer list, rare, is
/// scanned for each lookup).
const INDEXED_NAMES: usize = 24;

/// The end of each of the first [`INDEXED_NAMES`] names; `count` is `None`
/// for a longer list (or one too long for `u16`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NameIndex {
    ends: [u16; INDEXED_NAMES],
    count: Option<u8>,
}

impl SignedHeaders {
    /// Parses a list as a request carries it (see [`parse_signed_headers`]).
    pub fn parse(text: &str) -> Result<SignedHeaders, SigV4Error> {
        let index = check_signed_list(text)?;
        Ok(SignedHeaders {
            text: text.to_owned(),
            index,
        })
    }

    /// The list of `names` (lowercase header names, any order, repeats
    /// dropped); `host` must be among them.
    pub fn from_names<'a>(
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<SignedHeaders, SigV4Error> {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        let mut text = String::with_capacity(names.iter().map(|name| name.len() + 1).sum());
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                text.push(';');
            }
            text.push_str(name);
        }
        let index = check_signed_list(&text)?;
        Ok(SignedHeaders { text, index })
    }

    /// The names, in order.
    pub fn iter(&self) -> SignedNames<'_> {
        let ends = match self.index.count {
            Some(count) => &self.index.ends[..usize::from(count)],
            None => &[],
        };
        SignedNames {
            text: &self.text,
            ends,
            start: 0,
            scan: self.index.count.is_none(),
        }
    }

    /// Whether `name` (lowercase) is signed.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Where `name` (lowercase) is in the list (its index in
    /// [`SignedHeaders::iter`]).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.find(name.as_bytes(), |listed, name| listed == name)
    }

    /// Whether `name`, in any case, is signed.
    pub fn contains_ignore_case(&self, name: &[u8]) -> bool {
        self.position_ignore_case(name).is_some()
    }

    /// Where `name`, in any case, is in the list (its index in
    /// [`SignedHeaders::iter`]): how a reader of field lines files each
    /// line for [`canonical_request_of`].
    pub fn position_ignore_case(&self, name: &[u8]) -> Option<usize> {
        self.find(name, eq_folded)
    }

    /// The place of the first name `same` as `name` (given the listed name,
    /// of `name`'s length, and `name`).
    fn find(&self, name: &[u8], same: impl Fn(&[u8], &[u8]) -> bool) -> Option<usize> {
        let Some(count) = self.index.count else {
            return self
                .iter()
                .position(|signed| signed.len() == name.len() && same(signed.as_bytes(), name));
        };
        let text = self.text.as_bytes();
        let mut start = 0;
        for (i, &end) in self.index.ends[..usize::from(count)].iter().enumerate() {
            let end = usize::from(end);
            if end - start == name.len() && same(&text[start..end], name) {
                return Some(i);
            }
            start = end + 1;
        }
        None
    }

    /// The list as SigV4 writes it: `host;x-amz-date`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for SignedHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The names of a [`SignedHeaders`], in order: cut where the list's index
/// says its names end, or (a list too long to index) at each `;`.
#[derive(Debug, Clone)]
pub struct SignedNames<'a> {
    text: &'a str,
    /// The ends of the names not given yet (indexed lists).
    ends: &'a [u16],
    start: usize,
    /// Cut at each `;` (a list too long to index).
    scan: bool,
}

impl<'a> Iterator for SignedNames<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.text.get(self.start..)?;
        let length = if self.scan {
            memchr::memchr(b';', rest.as_bytes()).unwrap_or(rest.len())
        } else {
            let (&end, ends) = self.ends.split_first()?;
            self.ends = ends;
            usize::from(end).checked_sub(self.start)?
        };
        let name = rest.get(..length)?;
        self.start += length + 1;
        Some(name)
    }
}

/// Checks a `;`-joined list: each name a lowercase header name, each above
/// the one before, `host` among them; and where its names end. One pass
/// over its bytes.
fn check_signed_list(text: &str) -> Result<NameIndex, SigV4Error> {
    const NOT_A_NAME: SigV4Error =
        SigV4Error::MalformedSignedHeaders("a name is empty, not lowercase or not a header name");
    if text.is_empty() {
        return Err(SigV4Error::MalformedSignedHeaders("it is empty"));
    }
    let bytes = text.as_bytes();
    let mut last: Option<&[u8]> = None;
    let mut host = false;
    let mut index = NameIndex {
        ends: [0; INDEXED_NAMES],
        count: u16::try_from(text.len()).ok().map(|_| 0),
    };
    let mut start = 0;
    for end in 0..=bytes.len() {
        match bytes.get(end) {
            Some(b';') | None => {}
            Some(&b) if BYTE_CLASS[usize::from(b)] & LOWER_TCHAR != 0 => continue,
            Some(_) => return Err(NOT_A_NAME),
        }
        let name = &bytes[start..end];
        if name.is_empty() {
            return Err(NOT_A_NAME);
        }
        if last.is_some_and(|last| last >= name) {
            return Err(SigV4Error::MalformedSignedHeaders(
                "the names are not sorted or are repeated",
            ));
        }
        host |= name == b"host";
        last = Some(name);
        index.count = match (index.count, u16::try_from(end)) {
            (Some(count), Ok(end)) if usize::from(count) < INDEXED_NAMES => {
                index.ends[usize::from(count)] = end;
                Some(count + 1)
            }
            _ => None,
        };
        start = end + 1;
    }
    if !host {
        return Err(SigV4Error::MalformedSignedHeaders("host is not signed"));
    }
    Ok(index)
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    BYTE_CLASS[usize::from(b)] & TCHAR != 0
}

/// [`BYTE_CLASS`] bit: an RFC 9110 `tchar`.
const TCHAR: u8 = 1;
/// [`BYTE_CLASS`] bit: SigV4's unreserved `A-Za-z0-9-_.~`, written as is.
const UNRESERVED: u8 = 2;
/// [`BYTE_CLASS`] bit: a `tchar` that is not an uppercase letter (a byte of
/// a `SignedHeaders` name).
const LOWER_TCHAR: u8 = 4;

/// What each byte is, as bits: a canonical request looks at every byte of
/// every signed name, path and query, twice per request (verified, then
/// re-signed), and a table is one load where the tests were a dozen
/// comparisons.
const BYTE_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let alphanumeric = c.is_ascii_alphanumeric();
        let mut class = 0;
        if alphanumeric || matches!(c, b'-' | b'_' | b'.' | b'~') {
            class |= UNRESERVED;
        }
        if alphanumeric
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            )
        {
            class |= TCHAR;
            if !c.is_ascii_uppercase() {
                class |= LOWER_TCHAR;
            }
        }
        table[b] = class;
        b += 1;
    }
    table
};

/// Checks that every `x-amz-*` header present in the request is signed, as
/// S3 does for header-signed requests: otherwise anyone on the path could
/// add `x-amz-copy-source`, `x-amz-acl` or `x-amz-server-side-encryption` to
/// a signed request, and the gateway would sign the addition upstream.
/// `present` yields the request's header names (any case).
pub fn check_amz_headers_signed<'a>(
    present: impl IntoIterator<Item = &'a str>,
    signed_headers: &SignedHeaders,
) -> Result<(), SigV4Error> {
    for name in present {
        let is_amz = name.len() >= 6 && name.as_bytes()[..6].eq_ignore_ascii_case(b"x-amz-");
        if is_amz && !signed_headers.contains_ignore_case(name.as_bytes()) {
            return Err(SigV4Error::UnsignedHeader(quote(name)));
        }
    }
    Ok(())
}

/// Checks a header-signed request's time (`X-Amz-Date`) against the clock:
/// at most [`MAX_CLOCK_SKEW`] either way, as S3 allows.
pub fn check_skew(amz_date: &str, now_unix_secs: u64) -> Result<(), SigV4Error> {
    let at = parse_amz_date(amz_date)?;
    if at.abs_diff(now_unix_secs) > MAX_CLOCK_SKEW {
        return Err(SigV4Error::RequestTimeTooSkewed);
    }
    Ok(())
}

/// The authentication parameters of a presigned URL (`X-Amz-Algorithm`,
/// `-Credential`, `-Date`, `-Expires`, `-SignedHeaders`, `-Signature`,
/// optional `-Security-Token`), decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presigned {
    /// Who signed, and the scope.
    pub credential: Credential,
    /// `X-Amz-Date`: when the URL was signed, `YYYYMMDD'T'HHMMSS'Z'`.
    pub amz_date: String,
    /// `X-Amz-Expires`: for how many seconds after `amz_date` it is good.
    pub expires: u64,
    /// The signed header names, lowercase and sorted.
    pub signed_headers: SignedHeaders,
    /// The claimed signature.
    pub signature: [u8; 32],
    /// `X-Amz-Security-Token`, for temporary credentials.
    pub security_token: Option<String>,
}

impl Presigned {
    /// Checks the URL is within its lifetime at `now_unix_secs`: not before
    /// `X-Amz-Date` (less [`MAX_CLOCK_SKEW`], for clocks a little apart)
    /// and not after `X-Amz-Date` + `X-Amz-Expires`.
    pub fn check_time(&self, now_unix_secs: u64) -> Result<(), SigV4Error> {
        let signed_at = parse_amz_date(&self.amz_date)?;
        if now_unix_secs.saturating_add(MAX_CLOCK_SKEW) < signed_at {
            return Err(SigV4Error::NotYetValid);
        }
        if now_unix_secs > signed_at.saturating_add(self.expires) {
            return Err(SigV4Error::Expired);
        }
        Ok(())
    }
}

/// Whether a query parameter name (decoded) is one of the presigned
/// authentication parameters: what the gateway strips before it signs a
/// request it forwards. Case-sensitive, as AWS is.
pub fn is_presign_param(name: &str) -> bool {
    matches!(
        name,
        X_AMZ_ALGORITHM
            | X_AMZ_CREDENTIAL
            | X_AMZ_DATE
            | X_AMZ_EXPIRES
            | X_AMZ_SIGNED_HEADERS
            | X_AMZ_SIGNATURE
            | X_AMZ_SECURITY_TOKEN
    )
}

/// Whether a query parameter name (decoded) is `X-Amz-Signature`: the one
/// parameter a presigned URL's canonical request leaves out (pass it as
/// `skip_query` to [`canonical_request`]).
pub fn is_signature_param(name: &str) -> bool {
    name == X_AMZ_SIGNATURE
}

/// Reads a presigned URL's authentication from the raw query string
/// (without `?`). `Ok(None)` when the query has none of `X-Amz-Algorithm`,
/// `-Credential`, `-Date`, `-Expires`, `-SignedHeaders`, `-Signature`: not a
/// presigned URL. Any one of them makes it one, and then all six must be
/// there, once each, well formed, with the credential's date the day of
/// `X-Amz-Date` (a half-presigned URL is refused, never taken as anonymous).
pub fn parse_presigned(query: &str) -> Result<Option<Presigned>, SigV4Error> {
    let mut algorithm = None;
    let mut credential = None;
    let mut amz_date = None;
    let mut expires = None;
    let mut signed_headers = None;
    let mut signature = None;
    let mut security_token = None;
    let mut name_buf = Vec::new();
    for (raw_name, raw_value) in query_params(query) {
        name_buf.clear();
        decode_into(&mut name_buf, raw_name)?;
        let (slot, name) = match name_buf.as_slice() {
            b"X-Amz-Algorithm" => (&mut algorithm, X_AMZ_ALGORITHM),
            b"X-Amz-Credential" => (&mut credential, X_AMZ_CREDENTIAL),
            b"X-Amz-Date" => (&mut amz_date, X_AMZ_DATE),
            b"X-Amz-Expires" => (&mut expires, X_AMZ_EXPIRES),
            b"X-Amz-SignedHeaders" => (&mut signed_headers, X_AMZ_SIGNED_HEADERS),
            b"X-Amz-Signature" => (&mut signature, X_AMZ_SIGNATURE),
            b"X-Amz-Security-Token" => (&mut security_token, X_AMZ_SECURITY_TOKEN),
            _ => continue,
        };
        if slot.is_some() {
            return Err(SigV4Error::DuplicateQueryParameter(name));
        }
        let mut value = Vec::with_capacity(raw_value.len());
        decode_into(&mut value, raw_value)?;
        *slot =
            Some(String::from_utf8(value).map_err(|_| SigV4Error::QueryParameterNotText(name))?);
    }
    if algorithm.is_none()
        && credential.is_none()
        && amz_date.is_none()
        && expires.is_none()
        && signed_headers.is_none()
        && signature.is_none()
    {
        return Ok(None);
    }
    let algorithm = algorithm.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_ALGORITHM))?;
    if algorithm != ALGORITHM {
        return Err(SigV4Error::UnsupportedAlgorithm(quote(&algorithm)));
    }
    let credential = credential.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_CREDENTIAL))?;
    let amz_date = amz_date.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_DATE))?;
    let expires = expires.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_EXPIRES))?;
    let signed_headers =
        signed_headers.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_SIGNED_HEADERS))?;
    let signature = signature.ok_or(SigV4Error::MissingQueryParameter(X_AMZ_SIGNATURE))?;

    let credential = Credential::parse(&credential)?;
    parse_amz_date(&amz_date)?;
    credential.check_date(&amz_date)?;
    let expires = parse_expires(&expires).ok_or(SigV4Error::MalformedExpires)?;
    Ok(Some(Presigned {
        credential,
        amz_date,
        expires,
        signed_headers: parse_signed_headers(&signed_headers)?,
        signature: parse_hex32(signature.as_bytes()).ok_or(SigV4Error::MalformedSignature)?,
        security_token,
    }))
}

/// `X-Amz-Expires`: decimal digits only (no sign, no space), at most seven
/// days.
fn parse_expires(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 7 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = text.parse().ok()?;
    (value <= MAX_PRESIGN_EXPIRES).then_some(value)
}

// ---------------------------------------------------------------------------
// The canonical request

/// Builds the canonical request:
///
/// ```text
/// METHOD
/// canonical path
/// canonical query
/// name:value      (one line per signed header)
///
/// signed;header;names
/// payload hash
/// ```
///
/// `path` is the request-target's path exactly as sent. S3 does not
/// normalise it (no dot-segment removal, no slash merging): each `%XX` is
/// decoded, then every byte but the unreserved `A-Za-z0-9-_.~` and `/` is
/// encoded as `%XX` (uppercase); an empty path is `/`. `query` is the raw
/// query string (without `?`), or `""`: every parameter is decoded (`+` as a
/// space, as S3 reads a query) and re-encoded (here `/` is encoded too), a
/// parameter without `=` has an empty value, and they are sorted by encoded
/// name, then encoded value. `skip_query` names (decoded) the parameters to
/// leave out: `X-Amz-Signature` ([`is_signature_param`]) when verifying a
/// presigned URL.
///
/// `header` appends the values of a lowercase header name to the buffer it
/// is given, all of them, in order; each is trimmed, inner runs of spaces and tabs become one space,
/// and several are joined with `,`. `signed_headers` are used in the order
/// given (sorted, for anything a verifier is to check). `payload_hash` goes
/// in as given (hex, `UNSIGNED-PAYLOAD`, `STREAMING-...`).
///
/// Refuses a malformed `%` escape, a signed header missing from the request
/// or whose value is not text, and a signed header name that is not a
/// lowercase header name.
pub fn canonical_request<'h>(
    method: &str,
    path: &str,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
    header: &dyn Fn(&str, &mut Vec<&'h [u8]>),
    signed_headers: &SignedHeaders,
    payload_hash: &str,
) -> Result<String, SigV4Error> {
    // One buffer for every field's values.
    let mut values = Vec::with_capacity(2);
    let request = CanonicalParts {
        method,
        path,
        query,
        skip_query,
        signed_headers,
        payload_hash,
    };
    canonical_text(&request, |_, name, out| {
        values.clear();
        header(name, &mut values);
        push_values(out, name, values.iter().copied())
    })
}

/// [`canonical_request`] with the signed fields' values already found:
/// `fields` holds `(i, value)` for every line of the `i`th name of
/// `signed_headers`, each name's lines in the request's order (names in
/// any order). A reader that looked at each field line once (matching it
/// with [`SignedHeaders::position_ignore_case`]) gives them so, where a
/// lookup per signed name would scan the head once per name.
///
/// ```
/// use fencegate::custody::sigv4::{canonical_request_of, SignedHeaders};
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
/// let canonical = canonical_request_of("GET", "/k", "", &|_| false, &fields, &signed, "UNSIGNED-PAYLOAD").unwrap();
/// assert_eq!(
///     canonical,
///     "GET\n/k\n\nhost:b.example\nx-amz-date:20130524T000000Z\n\nhost;x-amz-date\nUNSIGNED-PAYLOAD"
/// );
/// ```
pub fn canonical_request_of(
    method: &str,
    path: &str,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
    fields: &[(usize, &[u8])],
    signed_headers: &SignedHeaders,
    payload_hash: &str,
) -> Result<String, SigV4Error> {
    let request = CanonicalParts {
        method,
        path,
        query,
        skip_query,
        signed_headers,
        payload_hash,
    };
    canonical_text(&request, filed_values(fields))
}

/// The canonical request written into `out` (cleared first), with
/// `values(i, name, out)` writing the `i`th signed name's values (and saying
/// whether there was any). Every piece is ASCII but the header values, each
/// checked as UTF-8 when it is not ASCII, so `out` holds UTF-8.
fn write_canonical(
    out: &mut Vec<u8>,
    request: &CanonicalParts<'_>,
    mut values: impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error>,
) -> Result<(), SigV4Error> {
    let signed_headers = request.signed_headers;
    out.clear();
    out.reserve(
        request.method.len()
            + request.path.len()
            + request.query.len()
            + request.payload_hash.len()
            + 2 * signed_headers.as_str().len()
            + 256,
    );
    out.extend_from_slice(request.method.as_bytes());
    out.push(b'\n');
    push_canonical_path(out, request.path)?;
    out.push(b'\n');
    push_canonical_query(out, request.query, request.skip_query)?;
    out.push(b'\n');
    // Each name is a lowercase header name: `SignedHeaders` checked it.
    for (i, name) in signed_headers.iter().enumerate() {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        if !values(i, name, out)? {
            return Err(SigV4Error::MissingSignedHeader(quote(name)));
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(signed_headers.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(request.payload_hash.as_bytes());
    Ok(())
}

/// The canonical request of `request` as text.
fn canonical_text(
    request: &CanonicalParts<'_>,
    values: impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error>,
) -> Result<String, SigV4Error> {
    let mut out = Vec::new();
    write_canonical(&mut out, request, values)?;
    String::from_utf8(out).map_err(|_| SigV4Error::InvalidHeaderValue("a signed header".into()))
}

/// The values of the `i`th signed name among `fields` (`(i, value)` pairs).
fn filed_values<'f>(
    fields: &'f [(usize, &'f [u8])],
) -> impl FnMut(usize, &str, &mut Vec<u8>) -> Result<bool, SigV4Error> + 'f {
    move |i, name, out| {
        let values = fields
            .iter()
            .filter(|(at, _)| *at == i)
            .map(|(_, value)| *value);
        push_values(out, name, values)
    }
}

/// A request's parts as a canonical request takes them, but for the signed
/// fields' values: what a verifier and a signer each compute a string to
/// sign over ([`CanonicalParts::string_to_sign_of`]).
///
/// ```
/// use fencegate::custody::sigv4::{canonical_request_of, string_to_sign, CanonicalParts, SignedHeaders};
///
/// let signed = SignedHeaders::parse("host;x-amz-date").unwrap();
/// let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
/// let parts = CanonicalParts {
///     method: "GET",
///     path: "/k",
///     query: "",
///     skip_query: &|_| false,
///     signed_headers: &signed,
///     payload_hash: "UNSIGNED-PAYLOAD",
/// };
/// let scope = "20130524/us-east-1/s3/aws4_request";
/// let to_sign = parts.string_to_sign_of(&fields, "20130524T000000Z", scope).unwrap();
/// let canonical = canonical_request_of("GET", "/k", "", &|_| false, &fields, &signed, "UNSIGNED-PAYLOAD").unwrap();
/// assert_eq!(to_sign.as_bytes(), string_to_sign("20130524T000000Z", scope, &canonical).as_bytes());
/// ```
#[derive(Clone, Copy)]
pub struct CanonicalParts<'a> {
    /// The method, as sent.
    pub method: &'a str,
    /// The path, as sent (percent-encoded).
    pub path: &'a str,
    /// The query, as sent, without `?`.
    pub query: &'a str,
    /// Which query parameters (decoded names) to leave out.
    pub skip_query: &'a dyn Fn(&str) -> bool,
    /// The signed header names, in the order they are written.
    pub signed_headers: &'a SignedHeaders,
    /// The payload hash, as given.
    pub payload_hash: &'a str,
}

impl fmt::Debug for CanonicalParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CanonicalParts")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query)
            .field("signed_headers", &self.signed_headers)
            .field("payload_hash", &self.payload_hash)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The buffer a thread writes canonical requests into before hashing
    /// them: they are only hashed, so a signed request need allocate none.
    static CANONICAL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A canonical request bigger than this gives its buffer back when hashed
/// (a thread keeps at most this much).
const KEPT_CANONICAL_CAPACITY: usize = 16 * 1024;

impl CanonicalParts<'_> {
    /// The string to sign at `amz_date` in `credential_scope` of this
    /// request with the signed fields `fields` (as for
    /// [`canonical_request_of`]): [`string_to_sign`] of
    /// [`canonical_request_of`], without the canonical request's text
    /// (written into a buffer the thread keeps, and hashed).
    pub fn string_to_sign_of(
        &self,
        fields: &[(usize, &[u8])],
        amz_date: &str,
        credential_scope: &str,
    ) -> Result<StringToSign, SigV4Error> {
        let hash = CANONICAL.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buffer) => {
                let hashed = write_canonical(&mut buffer, self, filed_values(fields))
                    .map(|()| digest::digest(&digest::SHA256, &buffer));
                if buffer.capacity() > KEPT_CANONICAL_CAPACITY {
                    *buffer = Vec::new();
                }
                hashed
            }
            // Never borrowed across a call out, so never busy; a fresh
            // buffer keeps this total all the same.
            Err(_) => {
                let mut buffer = Vec::new();
                write_canonical(&mut buffer, self, filed_values(fields))
                    .map(|()| digest::digest(&digest::SHA256, &buffer))
            }
        })?;
        let hex = hex32(&to_array(hash.as_ref()));
        let parts = [
            ALGORITHM.as_bytes(),
            b"\n",
            amz_date.as_bytes(),
            b"\n",
            credential_scope.as_bytes(),
            b"\n",
            &hex,
        ];
        Ok(StringToSign::of(&parts))
    }
}

/// A string to sign as bytes, on the stack when it is of the usual length
/// ([`CanonicalParts::string_to_sign_of`]).
#[derive(Debug, Clone)]
pub struct StringToSign(ToSignBytes);

/// The length of a string to sign kept on the stack: the algorithm, a date,
/// a scope of up to 64 bytes and a hash, with the line breaks between.
const INLINE_TO_SIGN: usize = 17 + 17 + 65 + 64;

#[derive(Debug, Clone)]
enum ToSignBytes {
    Inline {
        bytes: [u8; INLINE_TO_SIGN],
        len: usize,
    },
    Heap(Vec<u8>),
}

impl StringToSign {
    /// `parts` one after the other.
    fn of(parts: &[&[u8]]) -> StringToSign {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > INLINE_TO_SIGN {
            return StringToSign(ToSignBytes::Heap(parts.concat()));
        }
        let mut bytes = [0u8; INLINE_TO_SIGN];
        let mut len = 0;
        for part in parts {
            bytes[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        StringToSign(ToSignBytes::Inline { bytes, len })
    }

    /// The string to sign, the bytes an HMAC is taken over.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            ToSignBytes::Inline { bytes, len } => &bytes[..*len],
            ToSignBytes::Heap(bytes) => bytes,
        }
    }
}

/// A signed field's values, joined with `,`; whether there was any.
fn push_values<'v>(
    out: &mut Vec<u8>,
    name: &str,
    values: impl Iterator<Item = &'v [u8]>,
) -> Result<bool, SigV4Error> {
    let mut any = false;
    for value in values {
        if any {
            out.push(b',');
        }
        push_canonical_value(out, name, value)?;
        any = true;
    }
    Ok(any)
}

/// The canonical form of a request path: `%XX` decoded, then re-encoded per
/// SigV4 with `/` kept. A `%2F` thus becomes `/`, as S3 (which has no other
/// reading of a key's slash) computes it.
pub fn canonical_path(path: &str) -> Result<String, SigV4Error> {
    let mut out = Vec::with_capacity(path.len() + 8);
    push_canonical_path(&mut out, path)?;
    // Encoded, so ASCII.
    String::from_utf8(out).map_err(|_| SigV4Error::MalformedPercentEncoding)
}

/// The canonical form of a raw query string, as in [`canonical_request`].
/// A gateway that forwards what it verified can send this instead of the
/// raw query: it is unambiguous (`+`, `%20` and `%2B` no longer differ only
/// by the reader's convention) and the signature covers it exactly.
pub fn canonical_query(
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
) -> Result<String, SigV4Error> {
    let mut out = Vec::with_capacity(query.len() + 8);
    push_canonical_query(&mut out, query, skip_query)?;
    // Encoded, so ASCII.
    String::from_utf8(out).map_err(|_| SigV4Error::MalformedPercentEncoding)
}

fn push_canonical_path(out: &mut Vec<u8>, path: &str) -> Result<(), SigV4Error> {
    if path.is_empty() {
        out.push(b'/');
        return Ok(());
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // A run that stays as it is goes in whole (a key's path is mostly
        // one).
        let run = bytes[i..]
            .iter()
            .take_while(|&&b| BYTE_CLASS[usize::from(b)] & UNRESERVED != 0 || b == b'/')
            .count();
        out.extend_from_slice(&bytes[i..i + run]);
        i += run;
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if b == b'%' {
            let decoded = decode_escape(bytes, i)?;
            push_encoded_byte(out, decoded, true);
            i += 3;
        } else {
            push_encoded_byte(out, b, true);
            i += 1;
        }
    }
    Ok(())
}

fn push_canonical_query(
    out: &mut Vec<u8>,
    query: &str,
    skip_query: &dyn Fn(&str) -> bool,
) -> Result<(), SigV4Error> {
    if query.is_empty() {
        return Ok(());
    }
    // Each pair as one string (encoded name, then encoded value) and the
    // name's length: one allocation per parameter, sorted without copying.
    let mut pairs: Vec<(Vec<u8>, usize)> = Vec::with_capacity(query.len() / 8 + 1);
    let mut name_buf = Vec::new();
    for (raw_name, raw_value) in query_params(query) {
        name_buf.clear();
        decode_into(&mut name_buf, raw_name)?;
        if let Ok(name) = std::str::from_utf8(&name_buf) {
            if skip_query(name) {
                continue;
            }
        }
        let mut pair = Vec::with_capacity(raw_name.len() + raw_value.len() + 8);
        for &b in &name_buf {
            push_encoded_byte(&mut pair, b, false);
        }
        let name_len = pair.len();
        push_recoded(&mut pair, raw_value)?;
        pairs.push((pair, name_len));
    }
    pairs.sort_unstable_by(|(a, an), (b, bn)| (&a[..*an], &a[*an..]).cmp(&(&b[..*bn], &b[*bn..])));
    for (i, (pair, name_len)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(&pair[..*name_len]);
        out.push(b'=');
        out.extend_from_slice(&pair[*name_len..]);
    }
    Ok(())
}

/// The raw `(name, value)` pairs of a query string: split at `&`, then at
/// the first `=` (none: empty value). Empty pieces (`a&&b`, a trailing `&`)
/// are no parameters.
fn query_params(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| piece.split_once('=').unwrap_or((piece, "")))
}

/// Decodes a query component (`%XX`, and `+` as a space) onto `out`.
fn decode_into(out: &mut Vec<u8>, raw: &str) -> Result<(), SigV4Error> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                out.push(decode_escape(bytes, i)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(())
}

/// Decodes a query component and encodes it again in one pass.
fn push_recoded(out: &mut Vec<u8>, raw: &str) -> Result<(), SigV4Error> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                push_encoded_byte(out, decode_escape(bytes, i)?, false);
                i += 3;
            }
            b'+' => {
                push_encoded_byte(out, b' ', false);
                i += 1;
            }
            b => {
                push_encoded_byte(out, b, false);
                i += 1;
            }
        }
    }
    Ok(())
}

/// The byte a `%XX` at `bytes[at]` stands for.
fn decode_escape(bytes: &[u8], at: usize) -> Result<u8, SigV4Error> {
    let high = bytes.get(at + 1).copied().and_then(hex_value);
    let low = bytes.get(at + 2).copied().and_then(hex_value);
    match (high, low) {
        (Some(high), Some(low)) => Ok((high << 4) | low),
        _ => Err(SigV4Error::MalformedPercentEncoding),
    }
}

/// SigV4's URI encoding of one byte: the unreserved `A-Za-z0-9-_.~` as they
/// are (and `/` where `keep_slash`), everything else `%XX` uppercase.
fn push_encoded_byte(out: &mut Vec<u8>, b: u8, keep_slash: bool) {
    if BYTE_CLASS[usize::from(b)] & UNRESERVED != 0 || (keep_slash && b == b'/') {
        out.push(b);
    } else {
        out.extend_from_slice(&[
            b'%',
            HEX_UPPER[usize::from(b >> 4)],
            HEX_UPPER[usize::from(b & 0x0f)],
        ]);
    }
}

/// A header value in canonical form: trimmed, inner runs of spaces and tabs
/// as one space. Refuses bytes that are not UTF-8 and control characters (a
/// line break in a value could otherwise forge lines of the canonical
/// request).
fn push_canonical_value(out: &mut Vec<u8>, name: &str, value: &[u8]) -> Result<(), SigV4Error> {
    // Most values are visible ASCII: one pass over every byte (no early
    // exit, which the compiler makes a few wide comparisons), one copy.
    if value
        .iter()
        .fold(true, |ok, &b| ok & (b > b' ' && b < 0x7f))
    {
        out.extend_from_slice(value);
        return Ok(());
    }
    if std::str::from_utf8(value).is_err()
        || value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(SigV4Error::InvalidHeaderValue(quote(name)));
    }
    // Words are runs between ASCII spaces and tabs, so each is whole UTF-8.
    let mut i = 0;
    let mut first = true;
    while i < value.len() {
        let gap = value[i..]
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        i += gap;
        let word = value[i..]
            .iter()
            .take_while(|&&b| b != b' ' && b != b'\t')
            .count();
        if word == 0 {
            break;
        }
        if !first {
            out.push(b' ');
        }
        out.extend_from_slice(&value[i..i + word]);
        first = false;
        i += word;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Timestamps

/// Parses a SigV4 timestamp, `20130524T000000Z` (UTC, no leap seconds), into
/// seconds since the Unix epoch. Refuses any other shape, a time before
/// 1970 and a date that does not exist (`20130230`).
pub fn parse_amz_date(text: &str) -> Result<u64, SigV4Error> {
    let malformed = || SigV4Error::MalformedDate(quote(text));
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return Err(malformed());
    }
    let days = parse_scope_date(&text[..8]).ok_or_else(malformed)?;
    let hour = digits(&b[9..11]).ok_or_else(malformed)?;
    let minute = digits(&b[11..13]).ok_or_else(malformed)?;
    let second = digits(&b[13..15]).ok_or_else(malformed)?;
    if hour > 23 || minute > 59 || second > 59 {
        return Err(malformed());
    }
    Ok(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Formats seconds since the Unix epoch as a SigV4 timestamp,
/// `20130524T000000Z`.
pub fn format_amz_date(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rest = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    // Written digit by digit: this is on every re-signed request, and
    // `format!`'s padding machinery costs more than the rest of it.
    let push = |out: &mut String, value: u64, width: u32| {
        for place in (0..width).rev() {
            let digit = (value / 10u64.pow(place) % 10) as u8;
            out.push(char::from(b'0' + digit));
        }
    };
    let mut out = String::with_capacity(16);
    push(&mut out, year, 4);
    push(&mut out, month, 2);
    push(&mut out, day, 2);
    out.push('T');
    push(&mut out, rest / 3_600, 2);
    push(&mut out, rest % 3_600 / 60, 2);
    push(&mut out, rest % 60, 2);
    out.push('Z');
    out
}

/// A scope date `YYYYMMDD` as days since the Unix epoch, if it is one
/// (1970 or later, a real day).
fn parse_scope_date(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 8 {
        return None;
    }
    let year = digits(&b[..4])?;
    let month = digits(&b[4..6])?;
    let day = digits(&b[6..8])?;
    if year < 1970 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// The value of a run of ASCII digits (at most four here, so no overflow).
fn digits(b: &[u8]) -> Option<u64> {
    b.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to a date of 1970 or later (Howard Hinnant's
/// `days_from_civil`, on unsigned numbers since no date is before 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    // Years start in March, so the leap day is the last of its year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    // 719468: days from 0000-03-01 to 1970-01-01.
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &[u8] = b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const AMZ_DATE: &str = "20130524T000000Z";
    const HOST: &str = "examplebucket.s3.amazonaws.com";
    const SCOPE: &str = "20130524/us-east-1/s3/aws4_request";

    fn names(list: &str) -> SignedHeaders {
        SignedHeaders::parse(list).unwrap()
    }

    /// A header lookup over `(name, value)` pairs; names lowercase.
    fn lookup<'a>(headers: &'a [(&'a str, &'a str)]) -> impl Fn(&str, &mut Vec<&'a [u8]>) + 'a {
        move |name, out| {
            out.extend(
                headers
                    .iter()
                    .filter(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_bytes()),
            )
        }
    }

    fn key() -> SigningKey {
        signing_key(SECRET, "20130524", "us-east-1", "s3")
    }

    /// Signs an AWS example and returns the signature in hex.
    fn sign_example(
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        signed: &str,
        payload_hash: &str,
    ) -> String {
        let canonical = canonical_request(
            method,
            path,
            query,
            &|_| false,
            &lookup(headers),
            &names(signed),
            payload_hash,
        )
        .unwrap();
        hex(&signature(
            &key(),
            &string_to_sign(AMZ_DATE, SCOPE, &canonical),
        ))
    }

    // AWS examples: "Signature Calculations for the Authorization Header:
    // Transferring Payload in a Single Chunk" (Amazon S3 API reference).

    #[test]
    fn aws_example_get_object() {
        let headers = [
            ("host", HOST),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", AMZ_DATE),
        ];
        let signed = names("host;range;x-amz-content-sha256;x-amz-date");
        let canonical = canonical_request(
            "GET",
            "/test.txt",
            "",
            &|_| false,
            &lookup(&headers),
            &signed,
            EMPTY_SHA256,
        )
        .unwrap();
        assert_eq!(
            canonical,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
             x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let to_sign = string_to_sign(AMZ_DATE, SCOPE, &canonical);
        assert_eq!(
            to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
             7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        );
        assert_eq!(
            hex(&signature(&key(), &to_sign)),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn aws_example_put_object() {
        let body_hash = sha256_hex(b"Welcome to Amazon S3.");
        assert_eq!(
            body_hash,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let headers = [
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("host", HOST),
            ("x-amz-content-sha256", body_hash.as_str()),
            ("x-amz-date", AMZ_DATE),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ];
        let signed = "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class";
        let expected = "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd";
        // As sent (`$` encoded) and as a client might send it raw: both are
        // the canonical `/test%24file.text`.
        for path in ["/test%24file.text", "/test$file.text"] {
            assert_eq!(
                sign_example("PUT", path, "", &headers, signed, &body_hash),
                expected
            );
        }
    }

    #[test]
    fn aws_example_get_lifecycle() {
        let headers = [
            ("host", HOST),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", AMZ_DATE),
        ];
        let signed = "host;x-amz-content-sha256;x-amz-date";
        assert_eq!(
            sign_example("GET", "/", "lifecycle", &headers, signed, EMPTY_SHA256),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        );
    }

    #[test]
    fn aws_example_list_objects() {
        let headers = [
            ("host", HOST),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", AMZ_DATE),
        ];
        let signed = "host;x-amz-content-sha256;x-amz-date";
        let expected = "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
        // The order of the parameters as sent does not matter.
        for query in ["max-keys=2&prefix=J", "prefix=J&max-keys=2"] {
            assert_eq!(
                sign_example("GET", "/", query, &headers, signed, EMPTY_SHA256),
                expected
            );
        }
    }

    #[test]
    fn aws_example_presigned_get() {
        let query = "X-Amz-Algorithm=AWS4-HMAC-SHA256\
            &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
            &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
            &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        let presigned = parse_presigned(query).unwrap().unwrap();
        assert_eq!(presigned.credential.access_key_id(), "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(presigned.credential.scope(), SCOPE);
        assert_eq!(presigned.amz_date, AMZ_DATE);
        assert_eq!(presigned.expires, 86_400);
        assert_eq!(presigned.signed_headers.as_str(), "host");
        assert_eq!(presigned.security_token, None);

        let headers = [("host", HOST)];
        let canonical = canonical_request(
            "GET",
            "/test.txt",
            query,
            &is_signature_param,
            &lookup(&headers),
            &presigned.signed_headers,
            UNSIGNED_PAYLOAD,
        )
        .unwrap();
        assert_eq!(
            canonical,
            "GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n\
             host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD"
        );
        let to_sign = string_to_sign(
            &presigned.amz_date,
            presigned.credential.scope(),
            &canonical,
        );
        let key = presigned.credential.signing_key(SECRET);
        assert!(verify_signature(&key, &to_sign, &presigned.signature));
        assert_eq!(
            hex(&signature(&key, &to_sign)),
            "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );

        // Within its day; expired after it; not yet valid well before.
        let at = parse_amz_date(AMZ_DATE).unwrap();
        assert_eq!(presigned.check_time(at + 86_400), Ok(()));
        assert_eq!(presigned.check_time(at + 86_401), Err(SigV4Error::Expired));
        assert_eq!(presigned.check_time(at - MAX_CLOCK_SKEW), Ok(()));
        assert_eq!(
            presigned.check_time(at - MAX_CLOCK_SKEW - 1),
            Err(SigV4Error::NotYetValid)
        );
    }

    /// The seed signature of AWS's example "Signature Calculations for the
    /// Authorization Header: Transferring Payload in Multiple Chunks". The
    /// example's request is path-style: `PUT /examplebucket/chunkObject.txt`
    /// to `Host: s3.amazonaws.com`.
    #[test]
    fn aws_example_streaming_seed() {
        let headers = [
            ("content-encoding", "aws-chunked"),
            ("content-length", "66824"),
            ("host", "s3.amazonaws.com"),
            ("x-amz-content-sha256", STREAMING_PAYLOAD),
            ("x-amz-date", AMZ_DATE),
            ("x-amz-decoded-content-length", "66560"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ];
        let signed = "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
                      x-amz-decoded-content-length;x-amz-storage-class";
        assert_eq!(
            sign_example(
                "PUT",
                "/examplebucket/chunkObject.txt",
                "",
                &headers,
                signed,
                STREAMING_PAYLOAD
            ),
            "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
        );
    }

    /// The seed signature of AWS's example "Signature calculations for
    /// trailing headers (chunked uploads)".
    #[test]
    fn aws_example_streaming_trailer_seed() {
        let headers = [
            ("content-encoding", "aws-chunked"),
            ("host", "s3.amazonaws.com"),
            ("x-amz-content-sha256", STREAMING_PAYLOAD_TRAILER),
            ("x-amz-date", AMZ_DATE),
            ("x-amz-decoded-content-length", "66560"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("x-amz-trailer", "x-amz-checksum-crc32c"),
        ];
        let signed = "content-encoding;host;x-amz-content-sha256;x-amz-date;\
                      x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer";
        assert_eq!(
            sign_example(
                "PUT",
                "/examplebucket/chunkObject.txt",
                "",
                &headers,
                signed,
                STREAMING_PAYLOAD_TRAILER
            ),
            "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
        );
    }

    #[test]
    fn another_secret_does_not_verify() {
        let headers = [
            ("host", HOST),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", AMZ_DATE),
        ];
        let signed = names("host;range;x-amz-content-sha256;x-amz-date");
        let canonical = canonical_request(
            "GET",
            "/test.txt",
            "",
            &|_| false,
            &lookup(&headers),
            &signed,
            EMPTY_SHA256,
        )
        .unwrap();
        let to_sign = string_to_sign(AMZ_DATE, SCOPE, &canonical);
        let claimed = signature(&key(), &to_sign);
        assert!(verify_signature(&key(), &to_sign, &claimed));
        let other = signing_key(
            b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ",
            "20130524",
            "us-east-1",
            "s3",
        );
        assert!(!verify_signature(&other, &to_sign, &claimed));
        // Same secret, another scope: another key.
        let elsewhere = signing_key(SECRET, "20130524", "eu-west-1", "s3");
        assert!(!verify_signature(&elsewhere, &to_sign, &claimed));
        let mut flipped = claimed;
        flipped[31] ^= 1;
        assert!(!verify_signature(&key(), &to_sign, &flipped));
        assert_eq!(format!("{:?}", key()), "SigningKey(..)");
    }

    const AUTH: &str =
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
        SignedHeaders=host;range;x-amz-date, \
        Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";

    #[test]
    fn parses_authorization() {
        let auth = parse_authorization(AUTH.as_bytes()).unwrap();
        assert_eq!(
            auth.credential,
            Credential::new("AKIAIOSFODNN7EXAMPLE", "20130524", "us-east-1", "s3")
        );
        assert_eq!(
            auth.signed_headers.iter().collect::<Vec<_>>(),
            ["host", "range", "x-amz-date"]
        );
        assert_eq!(
            hex(&auth.signature),
            "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
        );
        // What it writes, it reads back the same.
        assert_eq!(auth.header_value(), AUTH);
        assert_eq!(
            parse_authorization(auth.header_value().as_bytes()).unwrap(),
            auth
        );

        // No spaces, other orders, tabs and surrounding white space.
        let sig = "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
        let cred = "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";
        let heads = "SignedHeaders=host;range;x-amz-date";
        for value in [
            format!("AWS4-HMAC-SHA256 {cred},{heads},{sig}"),
            format!("AWS4-HMAC-SHA256 {sig}, {cred}, {heads}"),
            format!("AWS4-HMAC-SHA256   {heads} ,\t{sig},  {cred}  "),
            format!("  AWS4-HMAC-SHA256\t{cred}, {heads}, {sig}"),
        ] {
            assert_eq!(
                parse_authorization(value.as_bytes()).unwrap(),
                auth,
                "{value}"
            );
        }
        // Uppercase hex is still the same signature.
        let upper = AUTH.replace("fe5f80f77d5fa3beca038a", "FE5F80F77D5FA3BECA038A");
        assert_eq!(parse_authorization(upper.as_bytes()).unwrap(), auth);
    }

    #[test]
    fn refuses_malformed_authorization() {
        use SigV4Error::*;
        let sig = "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
        let cred = "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";
        let heads = "SignedHeaders=host;range;x-amz-date";
        let cases: Vec<(String, SigV4Error)> = vec![
            (String::new(), MalformedAuthorization("it is empty")),
            ("   ".into(), MalformedAuthorization("it is empty")),
            (
                "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=".into(),
                UnsupportedAlgorithm("AWS".into()),
            ),
            (
                format!("AWS4-ECDSA-P256-SHA256 {cred}, {heads}, {sig}"),
                UnsupportedAlgorithm("AWS4-ECDSA-P256-SHA256".into()),
            ),
            ("Bearer abc".into(), UnsupportedAlgorithm("Bearer".into())),
            ("aws4-hmac-sha256 x=y".into(), UnsupportedAlgorithm("aws4-hmac-sha256".into())),
            ("\"quoted\" x".into(), MalformedAuthorization("it does not start with an algorithm name")),
            ("AWS4-HMAC-SHA256".into(), MissingComponent("Credential")),
            (format!("AWS4-HMAC-SHA256 {cred}, {heads}"), MissingComponent("Signature")),
            (format!("AWS4-HMAC-SHA256 {cred}, {sig}"), MissingComponent("SignedHeaders")),
            (format!("AWS4-HMAC-SHA256 {heads}, {sig}"), MissingComponent("Credential")),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}, {sig}"),
                DuplicateComponent("Signature"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {cred}, {heads}, {sig}"),
                DuplicateComponent("Credential"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {heads}, {heads}, {sig}"),
                DuplicateComponent("SignedHeaders"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}, Extra=1"),
                UnknownComponent("Extra".into()),
            ),
            (
                format!("AWS4-HMAC-SHA256 credential=AKID/20130524/us-east-1/s3/aws4_request, {heads}, {sig}"),
                UnknownComponent("credential".into()),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig},"),
                MalformedAuthorization("a component is not of the form key=value"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred} {heads}, {sig}"),
                MalformedAuthorization(
                    "a component's value has a space in it (are the components separated by commas?)",
                ),
            ),
            (format!("AWS4-HMAC-SHA256 {cred}, {heads}, Signature=abc"), MalformedSignature),
            (format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}0"), MalformedSignature),
            (
                format!("AWS4-HMAC-SHA256 {cred}, {heads}, Signature={}", "g".repeat(64)),
                MalformedSignature,
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=, {sig}"),
                MalformedSignedHeaders("it is empty"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=range;host, {sig}"),
                MalformedSignedHeaders("the names are not sorted or are repeated"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=host;host, {sig}"),
                MalformedSignedHeaders("the names are not sorted or are repeated"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=Host;range, {sig}"),
                MalformedSignedHeaders("a name is empty, not lowercase or not a header name"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=host;;range, {sig}"),
                MalformedSignedHeaders("a name is empty, not lowercase or not a header name"),
            ),
            (
                format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=range;x-amz-date, {sig}"),
                MalformedSignedHeaders("host is not signed"),
            ),
            (
                format!("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3, {heads}, {sig}"),
                MalformedCredential("it does not have five parts"),
            ),
            (
                format!("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_requesT, {heads}, {sig}"),
                MalformedCredential("it does not end in aws4_request"),
            ),
            (
                format!("AWS4-HMAC-SHA256 Credential=AKID/20130532/us-east-1/s3/aws4_request, {heads}, {sig}"),
                MalformedCredential("the date is not a real YYYYMMDD"),
            ),
            (
                format!("AWS4-HMAC-SHA256 Credential=/20130524/us-east-1/s3/aws4_request, {heads}, {sig}"),
                MalformedCredential("the access key id is empty or not text"),
            ),
            (
                format!("AWS4-HMAC-SHA256 Credential=AKID/20130524//s3/aws4_request, {heads}, {sig}"),
                MalformedCredential("the region is empty or not text"),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(
                parse_authorization(value.as_bytes()),
                Err(expected),
                "{value:?}"
            );
        }
        assert_eq!(
            parse_authorization(b"AWS4-HMAC-SHA256 \xff"),
            Err(MalformedAuthorization("it is not valid UTF-8"))
        );
        // What an error quotes of the request is bounded.
        let long = format!("X{}", "y".repeat(10_000));
        let Err(UnsupportedAlgorithm(quoted)) = parse_authorization(long.as_bytes()) else {
            panic!("expected UnsupportedAlgorithm");
        };
        assert!(quoted.len() < 80);
    }

    #[test]
    fn credential_with_slash_in_access_key() {
        let credential =
            Credential::parse("tenant/user/20130524/us-east-1/s3/aws4_request").unwrap();
        assert_eq!(credential.access_key_id(), "tenant/user");
        assert_eq!(credential.scope(), SCOPE);
        assert_eq!(
            credential.to_string(),
            "tenant/user/20130524/us-east-1/s3/aws4_request"
        );
        assert_eq!(credential.check_date(AMZ_DATE), Ok(()));
        assert!(matches!(
            credential.check_date("20130525T000000Z"),
            Err(SigV4Error::CredentialDateMismatch { .. })
        ));
        assert!(credential.check_date("2013").is_err());
    }

    #[test]
    fn presigned_parameters() {
        use SigV4Error::*;
        let full = "X-Amz-Algorithm=AWS4-HMAC-SHA256\
            &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
            &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
            &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        // Not presigned at all.
        for query in [
            "",
            "a=b",
            "versionId=3&uploads",
            "X-Amz-Security-Token=abc",
            "x-amz-date=1",
        ] {
            assert_eq!(parse_presigned(query), Ok(None), "{query}");
        }
        // One missing parameter is refused, whichever it is.
        for (drop, name) in [
            ("X-Amz-Algorithm", X_AMZ_ALGORITHM),
            ("X-Amz-Credential", X_AMZ_CREDENTIAL),
            ("X-Amz-Date", X_AMZ_DATE),
            ("X-Amz-Expires", X_AMZ_EXPIRES),
            ("X-Amz-SignedHeaders", X_AMZ_SIGNED_HEADERS),
            ("X-Amz-Signature", X_AMZ_SIGNATURE),
        ] {
            let query: Vec<&str> = full
                .split('&')
                .filter(|p| !p.starts_with(&format!("{drop}=")))
                .collect();
            assert_eq!(
                parse_presigned(&query.join("&")),
                Err(MissingQueryParameter(name)),
                "{drop}"
            );
        }
        assert_eq!(
            parse_presigned(&format!("{full}&X-Amz-Date=20130524T000000Z")),
            Err(DuplicateQueryParameter(X_AMZ_DATE))
        );
        assert_eq!(
            parse_presigned(&full.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256")),
            Err(UnsupportedAlgorithm("AWS4-ECDSA-P256-SHA256".into()))
        );
        for expires in ["604801", "-1", "", "1e3", " 5", "99999999999999999999"] {
            assert_eq!(
                parse_presigned(
                    &full.replace("X-Amz-Expires=86400", &format!("X-Amz-Expires={expires}"))
                ),
                Err(MalformedExpires),
                "{expires}"
            );
        }
        let week = parse_presigned(&full.replace("X-Amz-Expires=86400", "X-Amz-Expires=604800"));
        assert_eq!(week.unwrap().unwrap().expires, 604_800);
        assert!(matches!(
            parse_presigned(
                &full.replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130525T000000Z")
            ),
            Err(CredentialDateMismatch { .. })
        ));
        assert!(matches!(
            parse_presigned(&full.replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130524")),
            Err(MalformedDate(_))
        ));
        assert_eq!(
            parse_presigned(&full.replace("X-Amz-Signature=aeee", "X-Amz-Signature=zeee")),
            Err(MalformedSignature)
        );
        assert_eq!(
            parse_presigned(&format!("{full}&a=%zz")),
            Ok(parse_presigned(full).unwrap()),
            "an unrelated parameter is not read"
        );
        assert_eq!(
            parse_presigned("X-Amz-Signature=%4"),
            Err(MalformedPercentEncoding)
        );
        let with_token = parse_presigned(&format!("{full}&X-Amz-Security-Token=a%2Bb%2Fc"))
            .unwrap()
            .unwrap();
        assert_eq!(with_token.security_token.as_deref(), Some("a+b/c"));
        // A name encoded needlessly is still the name.
        let encoded = full.replace("X-Amz-Expires", "X%2DAmz%2DExpires");
        assert_eq!(parse_presigned(&encoded).unwrap().unwrap().expires, 86_400);

        for name in [
            X_AMZ_ALGORITHM,
            X_AMZ_CREDENTIAL,
            X_AMZ_DATE,
            X_AMZ_EXPIRES,
            X_AMZ_SIGNED_HEADERS,
            X_AMZ_SIGNATURE,
            X_AMZ_SECURITY_TOKEN,
        ] {
            assert!(is_presign_param(name));
        }
        assert!(!is_presign_param("x-amz-signature"));
        assert!(!is_presign_param("versionId"));
        assert!(is_signature_param("X-Amz-Signature"));
        assert!(!is_signature_param("X-Amz-Credential"));
    }

    #[test]
    fn canonical_paths() {
        let cases = [
            ("", "/"),
            ("/", "/"),
            ("/test.txt", "/test.txt"),
            ("/test%24file.text", "/test%24file.text"),
            ("/test$file.text", "/test%24file.text"),
            ("/%7e%7E~", "/~~~"),
            ("/a b", "/a%20b"),
            ("/a%20b+c", "/a%20b%2Bc"),
            ("/a%2Fb", "/a/b"),
            ("/a//b/../c/./d", "/a//b/../c/./d"),
            ("/é", "/%C3%A9"),
            ("/%c3%a9", "/%C3%A9"),
            ("/%00%ff", "/%00%FF"),
            ("/a?b#c", "/a%3Fb%23c"),
        ];
        for (path, expected) in cases {
            assert_eq!(canonical_path(path).unwrap(), expected, "{path}");
        }
        for bad in ["/%", "/%4", "/%zz", "/%4g", "/a%"] {
            assert_eq!(
                canonical_path(bad),
                Err(SigV4Error::MalformedPercentEncoding),
                "{bad}"
            );
        }
    }

    #[test]
    fn canonical_queries() {
        let none = |_: &str| false;
        let cases = [
            ("", ""),
            ("lifecycle", "lifecycle="),
            ("b=2&a=1&a=0", "a=0&a=1&b=2"),
            ("a-b=2&a=1", "a=1&a-b=2"),
            ("a+b=c+d", "a%20b=c%20d"),
            ("x=%2b&y=%2B", "x=%2B&y=%2B"),
            ("prefix=a/b&delimiter=/", "delimiter=%2F&prefix=a%2Fb"),
            ("a=1&&b=&", "a=1&b="),
            ("=v", "=v"),
            ("k=a=b", "k=a%3Db"),
            ("k=%7e~", "k=~~"),
            ("k=é", "k=%C3%A9"),
            ("Z=1&a=1", "Z=1&a=1"),
            ("uploads&partNumber=1", "partNumber=1&uploads="),
        ];
        for (query, expected) in cases {
            assert_eq!(canonical_query(query, &none).unwrap(), expected, "{query}");
        }
        assert_eq!(
            canonical_query("a=1&X-Amz-Signature=abc&b=2", &is_signature_param).unwrap(),
            "a=1&b=2"
        );
        assert_eq!(
            canonical_query("a=1&X-Amz-Date=x&X%2DAmz-Signature=abc", &is_presign_param).unwrap(),
            "a=1"
        );
        assert_eq!(
            canonical_query("a=%", &none),
            Err(SigV4Error::MalformedPercentEncoding)
        );
    }

    #[test]
    fn canonical_header_values() {
        let headers = [
            ("host", "h"),
            ("x-amz-meta-a", "  one   two\t\tthree  "),
            ("x-amz-meta-b", "first"),
            ("x-amz-meta-b", " second "),
            ("x-amz-meta-c", ""),
        ];
        let signed = names("host;x-amz-meta-a;x-amz-meta-b;x-amz-meta-c");
        let canonical = canonical_request(
            "PUT",
            "/k",
            "",
            &|_| false,
            &lookup(&headers),
            &signed,
            "UNSIGNED-PAYLOAD",
        )
        .unwrap();
        assert_eq!(
            canonical,
            "PUT\n/k\n\nhost:h\nx-amz-meta-a:one two three\nx-amz-meta-b:first,second\nx-amz-meta-c:\n\n\
             host;x-amz-meta-a;x-amz-meta-b;x-amz-meta-c\nUNSIGNED-PAYLOAD"
        );

        let missing = names("host;range");
        assert_eq!(
            canonical_request(
                "GET",
                "/",
                "",
                &|_| false,
                &lookup(&headers),
                &missing,
                EMPTY_SHA256
            ),
            Err(SigV4Error::MissingSignedHeader("range".into()))
        );
        for bad in ["a\nb", "a\rb", "a\0b", "a\x7fb"] {
            let headers = [("host", bad)];
            assert_eq!(
                canonical_request(
                    "GET",
                    "/",
                    "",
                    &|_| false,
                    &lookup(&headers),
                    &names("host"),
                    EMPTY_SHA256
                ),
                Err(SigV4Error::InvalidHeaderValue("host".into())),
                "{bad:?}"
            );
        }
        assert_eq!(
            canonical_request(
                "GET",
                "/",
                "",
                &|_| false,
                &|_, out| out.push(b"\xff"),
                &names("host"),
                EMPTY_SHA256
            ),
            Err(SigV4Error::InvalidHeaderValue("host".into()))
        );
        // A list with a name that is not lowercase cannot be made at all.
        assert!(matches!(
            SignedHeaders::parse("Host"),
            Err(SigV4Error::MalformedSignedHeaders(_))
        ));
        assert!(matches!(
            SignedHeaders::from_names(["host", "X-Amz-Date"]),
            Err(SigV4Error::MalformedSignedHeaders(_))
        ));
    }

    #[test]
    fn folding_eight_bytes_at_a_time_is_ascii_lowercase_exactly() {
        // Every byte against every byte, at each place of a word and of
        // the tail: equal exactly when `to_ascii_lowercase` says so.
        for at in [0, 7, 8, 12] {
            for listed in 0..=255u8 {
                for sent in 0..=255u8 {
                    let mut l = *b"x-amz-content-s";
                    let mut n = *b"X-Amz-Content-S";
                    if !(listed as char).is_ascii_uppercase() {
                        l[at] = listed;
                    }
                    n[at] = sent;
                    let expected = l.to_vec() == n.to_ascii_lowercase();
                    assert_eq!(eq_folded(&l, &n), expected, "{listed} {sent} at {at}");
                }
            }
        }
        assert!(!eq_folded(b"host", b"hos"));
    }

    #[test]
    fn a_name_is_found_in_any_case_in_short_and_long_lists() {
        // 1 to 40 names: the first 24 are indexed, a longer list is scanned.
        for count in 1..=40 {
            let mut made: Vec<String> = (0..count).map(|i| format!("x-n{i:02}")).collect();
            made.push("host".to_owned());
            let signed = SignedHeaders::from_names(made.iter().map(String::as_str)).unwrap();
            for (i, name) in signed.iter().enumerate() {
                assert_eq!(signed.position_ignore_case(name.as_bytes()), Some(i));
                let upper = name.to_ascii_uppercase();
                assert_eq!(signed.position_ignore_case(upper.as_bytes()), Some(i));
            }
            for absent in ["", "x-n", "x-n0", "x-n000", "hos", "hostx", "x-n40;"] {
                assert_eq!(
                    signed.position_ignore_case(absent.as_bytes()),
                    None,
                    "{absent}"
                );
            }
        }
    }

    #[test]
    fn fields_filed_by_name_give_the_same_canonical_request_as_lookups() {
        let signed = names("host;x-amz-date;x-amz-meta-a");
        let lines: [(&str, &[u8]); 5] = [
            ("X-Amz-Meta-A", b" one  two "),
            ("Host", b"b.example"),
            ("x-amz-meta-a", b"three"),
            ("X-Amz-Date", b"20130524T000000Z"),
            ("Other", b"not signed"),
        ];
        let filed: Vec<(usize, &[u8])> = lines
            .iter()
            .filter_map(|(name, value)| {
                signed
                    .position_ignore_case(name.as_bytes())
                    .map(|at| (at, *value))
            })
            .collect();
        let by_lookup = canonical_request(
            "PUT",
            "/k",
            "a=1",
            &|_| false,
            &|name, out| {
                out.extend(
                    lines
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| *v),
                )
            },
            &signed,
            EMPTY_SHA256,
        )
        .unwrap();
        let by_position = canonical_request_of(
            "PUT",
            "/k",
            "a=1",
            &|_| false,
            &filed,
            &signed,
            EMPTY_SHA256,
        )
        .unwrap();
        assert_eq!(by_position, by_lookup);
        assert!(by_position.contains("\nx-amz-meta-a:one two,three\n"));
        // A signed name with no line is refused, as by lookups.
        assert_eq!(
            canonical_request_of(
                "PUT",
                "/k",
                "",
                &|_| false,
                &filed[..1],
                &signed,
                EMPTY_SHA256
            ),
            Err(SigV4Error::MissingSignedHeader("host".into()))
        );
    }

    #[test]
    fn hex32_is_push_hex_for_every_byte() {
        for block in 0..8u8 {
            let bytes: [u8; 32] = std::array::from_fn(|i| block * 32 + i as u8);
            assert_eq!(&hex32(&bytes)[..], hex(&bytes).as_bytes());
        }
    }

    #[test]
    fn a_string_to_sign_of_filed_fields_is_that_of_the_canonical_request() {
        let signed = names("host;x-amz-date");
        let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
        let canonical = canonical_request_of(
            "GET",
            "/k",
            "a=1",
            &|_| false,
            &fields,
            &signed,
            EMPTY_SHA256,
        )
        .unwrap();
        let parts = CanonicalParts {
            method: "GET",
            path: "/k",
            query: "a=1",
            skip_query: &|_| false,
            signed_headers: &signed,
            payload_hash: EMPTY_SHA256,
        };
        // A scope of the usual length (on the stack) and a long one (not).
        let long_scope = format!("20130524/{}/s3/aws4_request", "r".repeat(200));
        for scope in [SCOPE, long_scope.as_str()] {
            let to_sign = parts.string_to_sign_of(&fields, AMZ_DATE, scope).unwrap();
            assert_eq!(
                to_sign.as_bytes(),
                string_to_sign(AMZ_DATE, scope, &canonical).as_bytes()
            );
        }
        // A missing signed field is refused, as in the canonical request.
        assert_eq!(
            parts.string_to_sign_of(&fields[..1], AMZ_DATE, SCOPE).err(),
            Some(SigV4Error::MissingSignedHeader("host".into()))
        );
        // The thread's buffer is used again: a second string is the same.
        let again = parts.string_to_sign_of(&fields, AMZ_DATE, SCOPE).unwrap();
        assert_eq!(
            again.as_bytes(),
            string_to_sign(AMZ_DATE, SCOPE, &canonical).as_bytes()
        );
    }

    #[test]
    fn the_string_to_sign_is_the_same_in_the_canonical_requests_buffer() {
        let canonical = "GET\n/\n\nhost:h\n\nhost\n".to_owned() + EMPTY_SHA256;
        assert_eq!(
            into_string_to_sign(AMZ_DATE, SCOPE, canonical.clone()),
            string_to_sign(AMZ_DATE, SCOPE, &canonical)
        );
    }

    #[test]
    fn amz_headers_must_be_signed() {
        let signed = names("host;x-amz-content-sha256;x-amz-date");
        assert_eq!(
            check_amz_headers_signed(
                ["Host", "X-Amz-Date", "x-amz-content-sha256", "range"],
                &signed
            ),
            Ok(())
        );
        assert_eq!(
            check_amz_headers_signed(["host", "X-Amz-Copy-Source"], &signed),
            Err(SigV4Error::UnsignedHeader("X-Amz-Copy-Source".into()))
        );
    }

    #[test]
    fn amz_dates() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Ok(0));
        assert_eq!(parse_amz_date(AMZ_DATE), Ok(1_369_353_600));
        assert_eq!(parse_amz_date("20000229T235959Z"), Ok(951_868_799));
        assert_eq!(parse_amz_date("20380119T031408Z"), Ok(2_147_483_648));
        assert_eq!(format_amz_date(1_369_353_600), AMZ_DATE);
        assert_eq!(format_amz_date(0), "19700101T000000Z");
        assert_eq!(format_amz_date(951_868_799), "20000229T235959Z");
        for bad in [
            "",
            "20130524",
            "20130524T000000",
            "20130524T000000z",
            "20130524t000000Z",
            "2013-05-24T00:00:00Z",
            "20130524T240000Z",
            "20130524T006000Z",
            "20130524T000060Z",
            "20130229T000000Z",
            "19000229T000000Z",
            "20131301T000000Z",
            "20130001T000000Z",
            "20130500T000000Z",
            "19691231T235959Z",
            "2013052AT000000Z",
            "+0130524T000000Z",
            "20130524T00000+Z",
            "２0130524T000000Z",
        ] {
            assert!(
                matches!(parse_amz_date(bad), Err(SigV4Error::MalformedDate(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_amz_date("20240229T120000Z")
                .map(format_amz_date)
                .as_deref(),
            Ok("20240229T120000Z")
        );

        let at = parse_amz_date(AMZ_DATE).unwrap();
        assert_eq!(check_skew(AMZ_DATE, at + MAX_CLOCK_SKEW), Ok(()));
        assert_eq!(check_skew(AMZ_DATE, at - MAX_CLOCK_SKEW), Ok(()));
        assert_eq!(
            check_skew(AMZ_DATE, at + MAX_CLOCK_SKEW + 1),
            Err(SigV4Error::RequestTimeTooSkewed)
        );
        assert_eq!(
            check_skew(AMZ_DATE, at - MAX_CLOCK_SKEW - 1),
            Err(SigV4Error::RequestTimeTooSkewed)
        );
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(sha256_hex(b""), EMPTY_SHA256);
        assert_eq!(hex(&sha256(b"")), EMPTY_SHA256);
        let bytes = parse_hex32(EMPTY_SHA256.as_bytes()).unwrap();
        assert_eq!(hex(&bytes), EMPTY_SHA256);
        assert_eq!(parse_hex32(&EMPTY_SHA256.as_bytes()[1..]), None);
        assert_eq!(
            parse_hex32(EMPTY_SHA256.to_ascii_uppercase().as_bytes()),
            Some(bytes)
        );
        // Any byte that is not a hex digit, at any place, is refused.
        for at in [0, 1, 31, 62, 63] {
            for bad in [b'g', b'G', b' ', b'/', b':', b'@', b'`', 0x80, 0xff] {
                let mut text = EMPTY_SHA256.as_bytes().to_vec();
                text[at] = bad;
                assert_eq!(parse_hex32(&text), None, "{bad} at {at}");
            }
        }
    }

    // Property-style checks against an independent encoder (the
    // percent-encoding crate) standing in for a client's signer.

    const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    const UNRESERVED_AND_SLASH: &percent_encoding::AsciiSet = &UNRESERVED.remove(b'/');

    /// How a client might put one byte of a path or query on the wire:
    /// `style` 0 raw where the byte may go raw, 1 `%xx`, 2 `%XX`. In a
    /// query a space may also go as `+` (style 0).
    fn client_encode(bytes: &[u8], styles: &[u8], in_query: bool) -> String {
        let mut out = String::new();
        for (i, &b) in bytes.iter().enumerate() {
            let style = styles.get(i).copied().unwrap_or(0);
            let raw_ok = b.is_ascii_alphanumeric()
                || b"-_.~!$'()*,;:@".contains(&b)
                || (b == b'/')
                || (!in_query && b"&=+".contains(&b))
                || (in_query && b == b'?');
            match style {
                0 if in_query && b == b' ' => out.push('+'),
                0 if raw_ok => out.push(char::from(b)),
                1 => out.push_str(&format!("%{b:02x}")),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        out
    }

    fn reference_path(key: &[u8]) -> String {
        format!(
            "/{}",
            percent_encoding::percent_encode(key, UNRESERVED_AND_SLASH)
        )
    }

    fn reference_query(params: &[(Vec<u8>, Vec<u8>)]) -> String {
        let mut pairs: Vec<(String, String)> = params
            .iter()
            .map(|(n, v)| {
                (
                    percent_encoding::percent_encode(n, UNRESERVED).to_string(),
                    percent_encoding::percent_encode(v, UNRESERVED).to_string(),
                )
            })
            .collect();
        pairs.sort();
        pairs
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    }

    fn wire_query(params: &[(Vec<u8>, Vec<u8>)], styles: &[u8], order: &[usize]) -> String {
        order
            .iter()
            .map(|&i| {
                let (n, v) = &params[i];
                format!(
                    "{}={}",
                    client_encode(n, styles, true),
                    client_encode(v, &styles[1..], true)
                )
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    fn byte_string(max: usize) -> impl Strategy<Value = Vec<u8>> {
        // Mostly the characters that matter (reserved, space, '%', '+',
        // '/', multi-byte), some of anything.
        let interesting =
            prop::sample::select(b" %+/=&?#~-_.!*'();:@,$[]aZ09\xc3\xa9\x00\xff".to_vec());
        prop::collection::vec(prop_oneof![3 => interesting, 1 => any::<u8>()], 0..max)
    }

    fn params() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
        prop::collection::vec(
            (
                byte_string(8).prop_filter("a name", |n| !n.is_empty()),
                byte_string(12),
            ),
            0..6,
        )
    }

    proptest! {
        #[test]
        fn path_encodings_agree(
            key in byte_string(40),
            styles_a in prop::collection::vec(0u8..3, 40),
            styles_b in prop::collection::vec(0u8..3, 40),
        ) {
            let reference = reference_path(&key);
            let a = format!("/{}", client_encode(&key, &styles_a, false));
            let b = format!("/{}", client_encode(&key, &styles_b, false));
            prop_assert_eq!(canonical_path(&a).unwrap(), reference.clone());
            prop_assert_eq!(canonical_path(&b).unwrap(), reference.clone());
            // Canonical is a fixed point.
            prop_assert_eq!(canonical_path(&reference).unwrap(), reference);
        }

        #[test]
        fn query_encodings_agree(
            params in params(),
            styles_a in prop::collection::vec(0u8..3, 16),
            styles_b in prop::collection::vec(0u8..3, 16),
            order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
        ) {
            let in_order: Vec<usize> = (0..params.len()).collect();
            let shuffled: Vec<usize> = order.into_iter().filter(|&i| i < params.len()).collect();
            let a = wire_query(&params, &styles_a, &in_order);
            let b = wire_query(&params, &styles_b, &shuffled);
            let reference = reference_query(&params);
            prop_assert_eq!(canonical_query(&a, &|_| false).unwrap(), reference.clone());
            prop_assert_eq!(canonical_query(&b, &|_| false).unwrap(), reference.clone());
            prop_assert_eq!(canonical_query(&reference, &|_| false).unwrap(), reference);
        }

        /// A client signs the request as it sends it; the gateway, given the
        /// same request however it was encoded, verifies it; given another
        /// key or query, it does not.
        #[test]
        fn sign_then_verify(
            key_bytes in byte_string(30),
            params in params(),
            styles_a in prop::collection::vec(0u8..3, 40),
            styles_b in prop::collection::vec(0u8..3, 40),
            meta in "[ -~]{0,20}",
        ) {
            let headers = [
                ("host", HOST),
                ("x-amz-content-sha256", EMPTY_SHA256),
                ("x-amz-date", AMZ_DATE),
                ("x-amz-meta-note", meta.as_str()),
            ];
            let signed = names("host;x-amz-content-sha256;x-amz-date;x-amz-meta-note");
            let order: Vec<usize> = (0..params.len()).collect();
            let build = |path: &str, query: &str| {
                let canonical = canonical_request(
                    "PUT", path, query, &|_| false, &lookup(&headers), &signed, EMPTY_SHA256,
                ).unwrap();
                string_to_sign(AMZ_DATE, SCOPE, &canonical)
            };
            let client_path = reference_path(&key_bytes);
            let client_query = reference_query(&params);
            let claimed = signature(&key(), &build(&client_path, &client_query));

            let path_b = format!("/{}", client_encode(&key_bytes, &styles_b, false));
            let mut reversed = order.clone();
            reversed.reverse();
            let query_b = wire_query(&params, &styles_a, &reversed);
            prop_assert!(verify_signature(&key(), &build(&path_b, &query_b), &claimed));

            let other = signing_key(b"another secret", "20130524", "us-east-1", "s3");
            prop_assert!(!verify_signature(&other, &build(&path_b, &query_b), &claimed));
            let moved = format!("{client_path}x");
            prop_assert!(!verify_signature(&key(), &build(&moved, &client_query), &claimed));
            let extra = if client_query.is_empty() { "x=1".to_owned() } else { format!("{client_query}&x=1") };
            prop_assert!(!verify_signature(&key(), &build(&client_path, &extra), &claimed));
        }

        #[test]
        fn amz_date_round_trip(secs in 0u64..253_402_300_800) {
            let text = format_amz_date(secs);
            prop_assert_eq!(parse_amz_date(&text), Ok(secs));
        }

        #[test]
        fn authorization_round_trip(
            akid in "[A-Z0-9]{1,24}",
            region in "[a-z0-9-]{1,16}",
            extra in prop::collection::btree_set("x-amz-[a-z-]{1,10}", 0..4),
            sig in any::<[u8; 32]>(),
        ) {
            let signed_headers = SignedHeaders::from_names(
                std::iter::once("host").chain(extra.iter().map(String::as_str)),
            )
            .unwrap();
            let auth = Authorization {
                credential: Credential::new(&akid, "20240229", &region, "s3"),
                signed_headers,
                signature: sig,
            };
            prop_assert_eq!(parse_authorization(auth.header_value().as_bytes()), Ok(auth));
        }
    }
}
