//! Presigned URLs: the authentication parameters of a query.

use super::*;

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
pub(super) fn parse_expires(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 7 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = text.parse().ok()?;
    (value <= MAX_PRESIGN_EXPIRES).then_some(value)
}
