//! The fields SigV4 authentication reads, each once: the payload hash,
//! the credential's scope, a presigned URL's parameters in every
//! spelling, SigV2's marks, and the field lines themselves.

use super::*;

/// What the payload hash says, checked: a hex hash or `UNSIGNED-PAYLOAD`
/// go on in `x-amz-content-sha256` (the store checks the body against the
/// former); an unsigned body is taken only over TLS.
pub(super) fn payload_form(value: &str, has_body: bool, tls: bool) -> Result<&str, Denied> {
    // Every byte looked at (no early exit): a few wide comparisons.
    let hex = value.len() == 64 && value.bytes().fold(true, |ok, b| ok & b.is_ascii_hexdigit());
    match value {
        _ if hex => Ok(value),
        "UNSIGNED-PAYLOAD" | "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => {
            if has_body && !tls {
                Err(Denied::new(
                    DeniedKind::Unauthenticated,
                    "an unsigned payload is taken only over TLS: sign the payload, or connect with https",
                ))
            } else {
                Ok(value)
            }
        }
        // Verified and re-signed chunk by chunk as the body passes
        // (`stream.rs`).
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" | "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => {
            Ok(value)
        }
        _ => Err(malformed(&format!(
            "x-amz-content-sha256 {value:?} is neither a SHA-256 nor a payload form the gateway knows"
        ))),
    }
}

/// The scope a client signed in must be S3's, of the day of its date.
pub(super) fn check_scope(credential: &sigv4::Credential, amz_date: &str) -> Result<(), Denied> {
    if credential.service() != "s3" {
        return Err(malformed(&format!(
            "the credential scope's service is {:?}; the gateway speaks s3",
            credential.service()
        )));
    }
    if !amz_date.starts_with(credential.date()) {
        return Err(malformed(&format!(
            "the credential scope's date {} is not the day of {amz_date}",
            credential.date()
        )));
    }
    Ok(())
}

/// Whether `name` is a presigned URL's authentication parameter in any
/// spelling of its case.
pub(super) fn is_presign_param_in_any_case(name: &str) -> bool {
    sigv4::is_presign_param(name)
        || [
            "X-Amz-Algorithm",
            "X-Amz-Credential",
            "X-Amz-Date",
            "X-Amz-Expires",
            "X-Amz-SignedHeaders",
            "X-Amz-Signature",
            "X-Amz-Security-Token",
        ]
        .iter()
        .any(|known| known.eq_ignore_ascii_case(name))
}

/// What a client signing with SigV2 is told: what it is, and what to do.
pub(super) const SIGV2_REFUSED: &str =
    "the request is signed with SigV2 (AWS AKID:signature, or a \
    presigned URL with AWSAccessKeyId and Signature), which the gateway does not verify: sign \
    with SigV4 (AWS4-HMAC-SHA256); with boto3, Config(signature_version=\"s3v4\"), which \
    presigned URLs need too";

/// Whether `query` is a SigV2 presigned URL's (`AWSAccessKeyId` and
/// `Signature`, names compared as S3 compares them: exactly).
pub(super) fn is_sigv2_presigned(query: &str) -> bool {
    let has = |name: &str| {
        query
            .split('&')
            .any(|pair| pair.split_once('=').map_or(pair, |(n, _)| n) == name)
    };
    !query.is_empty() && has("AWSAccessKeyId") && has("Signature")
}

pub(super) fn malformed(message: &str) -> Denied {
    Denied::new(DeniedKind::Malformed, message)
}

/// A SigV4 parse error (an unsupported algorithm, SigV2 or SigV4a,
/// included: refused, never taken for anonymous).
pub(super) fn malformed_sigv4(error: &SigV4Error) -> Denied {
    Denied::new(DeniedKind::Malformed, error.to_string())
}

/// The one value of `name` (a lowercase name), as text; two lines of it
/// are refused.
pub(super) fn single<'a>(fields: &'a Head, name: &str) -> Result<Option<&'a str>, Denied> {
    let mut values = fields.values_named(name);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(malformed(&format!("{name} appears more than once")));
    }
    visible_str(first)
        .map(Some)
        .ok_or_else(|| malformed(&format!("{name} is not visible ASCII")))
}

/// A request's signed field lines, `(place of the name in the signed
/// list, value)`: on the stack for any usual request (a `Vec` cost an
/// allocation each time, verified and again re-signed).
pub(crate) type SignedFields<'a> = smallvec::SmallVec<[(usize, &'a [u8]); 12]>;

/// The fields a SigV4 verifier reads before the signed ones, found in one
/// pass over the head (a lookup each scanned it once per name).
pub(super) struct AuthFields<'a> {
    pub(super) authorization: OneField<'a>,
    pub(super) amz_date: OneField<'a>,
    pub(super) content_sha256: OneField<'a>,
    /// `Transfer-Encoding`, or a `Content-Length` that is not zero.
    pub(super) has_body: bool,
}

/// A field that may be sent once: its first line, and whether it came again.
#[derive(Default)]
pub(super) struct OneField<'a> {
    pub(super) first: Option<&'a [u8]>,
    pub(super) repeated: bool,
}

impl<'a> AuthFields<'a> {
    pub(super) fn read(head: &'a Head) -> Self {
        let mut read = AuthFields {
            authorization: OneField::default(),
            amz_date: OneField::default(),
            content_sha256: OneField::default(),
            has_body: false,
        };
        let mut length_seen = false;
        for (name, value) in head.each_line() {
            let field = if name.eq_ignore_ascii_case(b"authorization") {
                &mut read.authorization
            } else if name.eq_ignore_ascii_case(b"x-amz-date") {
                &mut read.amz_date
            } else if name.eq_ignore_ascii_case(b"x-amz-content-sha256") {
                &mut read.content_sha256
            } else {
                if name.eq_ignore_ascii_case(b"transfer-encoding") {
                    read.has_body = true;
                } else if !length_seen && name.eq_ignore_ascii_case(b"content-length") {
                    // Its first line, as `has_body` reads it.
                    length_seen = true;
                    read.has_body |= value.iter().any(|b| *b != b'0');
                }
                continue;
            };
            field.repeated |= field.first.is_some();
            field.first.get_or_insert(value);
        }
        read
    }
}

impl<'a> OneField<'a> {
    /// Its one line; two are refused.
    pub(super) fn single(&self, name: &str) -> Result<Option<&'a [u8]>, Denied> {
        if self.repeated {
            return Err(malformed(&format!("{name} appears more than once")));
        }
        Ok(self.first)
    }

    /// Its one line, as text (visible ASCII).
    pub(super) fn visible(&self, name: &str) -> Result<Option<&'a str>, Denied> {
        match self.single(name)? {
            None => Ok(None),
            Some(value) => visible_str(value)
                .map(Some)
                .ok_or_else(|| malformed(&format!("{name} is not visible ASCII"))),
        }
    }
}

/// Every value of `name` (lowercase).
pub(crate) fn lookup<'a>(fields: &'a Head, name: &str) -> Vec<&'a [u8]> {
    fields.values_named(name).collect()
}

/// The request's path as sent.
pub(crate) fn raw_path<B>(request: &Inbound<B>) -> &str {
    request.uri().path()
}

pub(super) fn query_of<B>(request: &Inbound<B>) -> &str {
    request.uri().query().unwrap_or("")
}

pub(super) fn has_body<B>(request: &Inbound<B>) -> bool {
    let fields = request.fields();
    fields.contains(&http::header::TRANSFER_ENCODING)
        || fields
            .first(&http::header::CONTENT_LENGTH)
            .is_some_and(|length| length.iter().any(|b| *b != b'0'))
}

/// Whether `name` starts with `prefix` (lowercase), in any case.
pub(super) fn starts_with_ignore_case(name: &[u8], prefix: &[u8]) -> bool {
    name.len() >= prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix)
}
