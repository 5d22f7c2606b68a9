//! S3 under custody, the client's side: a SigV4 request (the
//! `Authorization` header, or a presigned URL) verified against the
//! identity's secret, the bucket and key read from a path-style target or
//! from `BUCKET.<--s3-domain>`, and every object the request reaches with
//! the access it needs. What the gateway signs for the store is
//! `sign.rs`'s.
//!
//! The signature is checked over the request exactly as the client sent it
//! (S3 signs the request-target as sent, never normalised), so what is
//! verified here is the bytes the gateway read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderName;

use super::denied::{Denied, DeniedKind};
use super::files::{Access, Identity};
use super::identities::Identities;
use super::stream;
use super::verified::{Forwarding, Verified};
use crate::dialect::s3_operations;
use crate::dialect::sigv4::{self, SigV4Error, SignedHeaders, SigningKey};
use crate::gateway::inbound::{Head, Inbound};
use crate::gateway::s3_hosts::{bare_host, bucket_of};
use crate::head::{visible_str, HeaderFields, RequestView};

mod fields;
mod reached;

use self::fields::*;
pub(crate) use self::fields::{lookup, raw_path, SignedFields};
pub(crate) use self::reached::Addressed;
#[cfg(test)]
use self::reached::*;
pub(crate) use self::reached::{is_presigned, operation_of, reached};
use super::verified::{Filed, FiledLines, PayloadHash};

/// The most a client's clock may be off (S3's own bound).
const MAX_SKEW_SECS: u64 = 15 * 60;
/// The longest a presigned URL may live (7 days, as S3).
const MAX_PRESIGNED_SECS: u64 = 7 * 24 * 3600;
/// The hash of an empty payload.
pub(crate) const EMPTY_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Signing keys kept; the cache is emptied when it would grow past this
/// (keys change daily, and only configured regions are kept).
const MAX_CACHED_KEYS: usize = 4096;

/// The S3 side of custody: how bucket names arrive, which header carries
/// the token, and the signing keys derived so far.
#[derive(Debug)]
pub(crate) struct S3Clients {
    /// `--s3-domain`: `BUCKET.<domain>` is virtual-hosted.
    domain: Option<String>,
    /// The token header and, in `header` scope, the lock header: each must
    /// be signed when present.
    must_sign: Vec<HeaderName>,
    /// The regions whose keys are cached (the configuration's); a key for
    /// any other is derived each time, so invented regions cannot fill
    /// memory.
    regions: Vec<String>,
    /// By identity name: (date, region, key). Looked up without an
    /// allocation; emptied when the identities are reloaded (a rotated
    /// secret must not keep its old key). Its names are the file's, so
    /// foldhash (fast, not built to resist chosen keys) is safe here.
    keys: Mutex<HashMap<String, Vec<ScopedKey>, foldhash::fast::RandomState>>,
}

/// A signing key with the date and region of its scope.
type ScopedKey = (String, String, SigningKey);

impl S3Clients {
    pub(crate) fn new(
        domain: Option<String>,
        must_sign: Vec<HeaderName>,
        regions: Vec<String>,
    ) -> Self {
        S3Clients {
            domain: domain.map(|d| d.trim_end_matches('.').to_ascii_lowercase()),
            must_sign,
            regions,
            keys: Mutex::new(HashMap::default()),
        }
    }

    /// The fields a client must sign that the gateway reads itself (the
    /// token and lock headers), not S3's to honour.
    pub(crate) fn must_sign(&self) -> &[HeaderName] {
        &self.must_sign
    }

    /// The identity `request` is signed by, and how it goes on; or why not.
    /// `tls`: the client's connection is TLS (an unsigned payload is taken
    /// only over it). `now`: seconds since the Unix epoch.
    pub(crate) fn authenticate<B>(
        &self,
        identities: &Identities,
        request: &Inbound<B>,
        tls: bool,
        now: u64,
    ) -> Result<Verified, Denied> {
        let read = AuthFields::read(request.fields());
        let authorization = read.authorization.single("Authorization")?;
        let query = request.uri().query().unwrap_or("");
        if authorization.is_some_and(|value| value.starts_with(b"AWS "))
            || is_sigv2_presigned(query)
        {
            return Err(malformed(SIGV2_REFUSED));
        }
        let presigned = sigv4::parse_presigned(query).map_err(|e| malformed_sigv4(&e))?;
        match (authorization, presigned) {
            (Some(_), Some(_)) => Err(malformed(
                "a request is signed in its Authorization header or in its query, not both",
            )),
            (Some(value), None) => self.header_signed(identities, request, &read, value, tls, now),
            (None, Some(presigned)) => self.presigned(identities, request, presigned, tls, now),
            (None, None) => super::identities::without_credentials(
                identities,
                request,
                "the request carries no credentials, and anonymous access is off",
            ),
        }
    }

    fn header_signed<B>(
        &self,
        identities: &Identities,
        request: &Inbound<B>,
        read: &AuthFields<'_>,
        value: &[u8],
        tls: bool,
        now: u64,
    ) -> Result<Verified, Denied> {
        let auth = sigv4::parse_authorization(value).map_err(|e| malformed_sigv4(&e))?;
        let amz_date = read.amz_date.visible("x-amz-date")?.ok_or_else(|| {
            Denied::new(
                DeniedKind::Unauthenticated,
                "x-amz-date is missing: sign with SigV4's x-amz-date",
            )
        })?;
        let signed_at = sigv4::parse_amz_date(amz_date).map_err(|e| malformed_sigv4(&e))?;
        if now.abs_diff(signed_at) > MAX_SKEW_SECS {
            return Err(Denied::new(
                DeniedKind::Skewed,
                format!("the difference between the request time ({amz_date}) and the gateway's time is too large"),
            ));
        }
        let identity = self.identity(identities, auth.credential.access_key_id())?;
        check_scope(&auth.credential, amz_date)?;
        let payload = read
            .content_sha256
            .visible("x-amz-content-sha256")?
            .ok_or_else(|| {
                Denied::new(
                    DeniedKind::Unauthenticated,
                    "x-amz-content-sha256 is missing",
                )
            })?;
        let payload = payload_form(payload, read.has_body, tls)?;
        let mut own = [0u8; 3];
        for (slot, required) in own.iter_mut().zip(Filed::OWN) {
            let Some(at) = auth.signed_headers.position(required) else {
                return Err(Denied::new(
                    DeniedKind::Unauthenticated,
                    format!("{required} must be among the signed headers"),
                ));
            };
            *slot = u8::try_from(at).unwrap_or(u8::MAX);
        }
        let (signed_fields, lines) =
            self.signed_fields_filed(request.fields(), &auth.signed_headers)?;
        let to_sign = sigv4::CanonicalParts {
            method: request.method().as_str(),
            path: raw_path(request),
            query: query_of(request),
            skip_query: &|_| false,
            signed_headers: &auth.signed_headers,
            payload_hash: payload,
        }
        .string_to_sign_of(&signed_fields, amz_date, auth.credential.scope())
        .map_err(|e| malformed_sigv4(&e))?;
        let key = self.signing_key(&identity, &auth.credential);
        if !key.verify(to_sign.as_bytes(), &auth.signature) {
            return Err(Denied::new(
                DeniedKind::BadSignature,
                "the request signature the gateway calculated does not match the signature provided; check the identity's secret key and signing method",
            ));
        }
        let chunked = stream::streaming_trailer(payload).map(|trailer| {
            Box::new((
                stream::client_side(&auth, amz_date, key, trailer),
                stream::SeedCell::default(),
            ))
        });
        let filed = lines
            .filter(|_| !own.contains(&u8::MAX))
            .map(|lines| Filed { lines, own });
        Ok(Verified {
            identity,
            forward: Forwarding::Signed {
                names: auth.signed_headers,
                payload: PayloadHash::new(payload).ok_or_else(|| {
                    malformed("x-amz-content-sha256 is longer than any payload form")
                })?,
                filed,
                chunked,
            },
            may_raise: false,
            answer: None,
        })
    }

    fn presigned<B>(
        &self,
        identities: &Identities,
        request: &Inbound<B>,
        presigned: sigv4::Presigned,
        tls: bool,
        now: u64,
    ) -> Result<Verified, Denied> {
        let fields = request.fields();
        if presigned.expires == 0 || presigned.expires > MAX_PRESIGNED_SECS {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                "X-Amz-Expires must be between 1 and 604800 seconds",
            ));
        }
        let signed_at =
            sigv4::parse_amz_date(&presigned.amz_date).map_err(|e| malformed_sigv4(&e))?;
        if now + MAX_SKEW_SECS < signed_at {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                "the presigned URL is not valid yet",
            ));
        }
        if now > signed_at.saturating_add(presigned.expires) {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                "Request has expired",
            ));
        }
        let identity = self.identity(identities, presigned.credential.access_key_id())?;
        check_scope(&presigned.credential, &presigned.amz_date)?;
        if !presigned.signed_headers.contains("host") {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                "host must be among the signed headers",
            ));
        }
        if has_body(request) && !tls {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                "a presigned request with a body has no signed payload, and is taken only over TLS",
            ));
        }
        let signed_fields = self.signed_fields(fields, &presigned.signed_headers)?;
        let to_sign = sigv4::CanonicalParts {
            method: request.method().as_str(),
            path: raw_path(request),
            query: query_of(request),
            skip_query: &|name| name == "X-Amz-Signature",
            signed_headers: &presigned.signed_headers,
            payload_hash: sigv4::UNSIGNED_PAYLOAD,
        }
        .string_to_sign_of(
            &signed_fields,
            &presigned.amz_date,
            presigned.credential.scope(),
        )
        .map_err(|e| malformed_sigv4(&e))?;
        let key = self.signing_key(&identity, &presigned.credential);
        if !key.verify(to_sign.as_bytes(), &presigned.signature) {
            return Err(Denied::new(
                DeniedKind::BadSignature,
                "the request signature the gateway calculated does not match the signature provided",
            ));
        }
        // The query without the authentication parameters; the other
        // signed x-amz-* parameters become headers the gateway signs.
        let mut kept = Vec::new();
        let mut moved_names = Vec::new();
        let mut moved = Vec::new();
        for pair in query_of(request).split('&').filter(|p| !p.is_empty()) {
            let raw_name = pair.split('=').next().unwrap_or("");
            let name = percent_encoding::percent_decode_str(raw_name).decode_utf8_lossy();
            // In any case: a client's credential in another spelling must
            // not reach the store (a session token among them).
            if is_presign_param_in_any_case(&name) {
                continue;
            }
            if name.to_ascii_lowercase().starts_with("x-amz-") {
                let value = pair.split_once('=').map_or("", |(_, v)| v);
                let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
                let lower = name.to_ascii_lowercase();
                if let (Ok(header), Ok(value)) = (
                    HeaderName::from_bytes(lower.as_bytes()),
                    http::HeaderValue::from_str(&value),
                ) {
                    moved_names.push(lower);
                    moved.push((header, value));
                    continue;
                }
            }
            kept.push(pair);
        }
        let names = SignedHeaders::from_names(
            presigned
                .signed_headers
                .iter()
                .chain(moved_names.iter().map(String::as_str)),
        )
        .map_err(|e| malformed_sigv4(&e))?;
        Ok(Verified {
            identity,
            forward: Forwarding::Presigned {
                names,
                query: kept.join("&"),
                moved,
            },
            may_raise: false,
            answer: None,
        })
    }

    /// The identity whose access key id is `id`.
    fn identity(&self, identities: &Identities, id: &str) -> Result<Arc<Identity>, Denied> {
        identities.by_key(id).cloned().ok_or_else(|| {
            Denied::new(
                DeniedKind::UnknownKey,
                "the access key id you provided does not exist in the gateway's identities",
            )
        })
    }

    /// The values of the fields `signed` names, filed by their place in it
    /// (for [`sigv4::canonical_request_of`]), read in one pass over the
    /// head that also checks what a client must have signed: the token
    /// header (and the lock header) when sent, and every `x-amz-*`,
    /// `Content-Type` and `Content-MD5` field (the gateway signs only what
    /// the client did, as S3 refuses such a header unsigned).
    fn signed_fields<'a>(
        &self,
        head: &'a Head,
        signed: &SignedHeaders,
    ) -> Result<SignedFields<'a>, Denied> {
        self.signed_fields_filed(head, signed)
            .map(|(fields, _)| fields)
    }

    /// [`S3Clients::signed_fields`], with where each was found in the head
    /// as read (`None` when the head is not as read, or a place does not
    /// fit [`Filed`]'s).
    fn signed_fields_filed<'a>(
        &self,
        head: &'a Head,
        signed: &SignedHeaders,
    ) -> Result<(SignedFields<'a>, Option<FiledLines>), Denied> {
        let mut fields = SignedFields::new();
        let mut filed = head.lines_as_read().map(|_| FiledLines::new());
        // The first of `must_sign` sent unsigned, and the first other field
        // that must be signed and is not: the former is the graver (a token
        // anyone on the path could change), so it is the one answered.
        let mut unsigned_must: Option<usize> = None;
        let mut unsigned_amz: Option<&[u8]> = None;
        for (line, (name, value)) in head.each_line().enumerate() {
            if let Some(at) = signed.position_ignore_case(name) {
                fields.push((at, value));
                if let Some(lines) = &mut filed {
                    match (u16::try_from(line), u8::try_from(at)) {
                        (Ok(line), Ok(at)) => lines.push((line, at)),
                        _ => filed = None,
                    }
                }
                continue;
            }
            // Compared as bytes, any case: no string per field.
            if let Some(must) = self
                .must_sign
                .iter()
                .position(|must| must.as_str().as_bytes().eq_ignore_ascii_case(name))
            {
                unsigned_must = Some(unsigned_must.map_or(must, |before| before.min(must)));
            } else if unsigned_amz.is_none()
                && (starts_with_ignore_case(name, b"x-amz-")
                    || name.eq_ignore_ascii_case(b"content-type")
                    || name.eq_ignore_ascii_case(b"content-md5"))
            {
                unsigned_amz = Some(name);
            }
        }
        if let Some(must) = unsigned_must.and_then(|at| self.must_sign.get(at)) {
            return Err(Denied::new(
                DeniedKind::BadSignature,
                format!("{must} must be among the signed headers"),
            ));
        }
        if let Some(name) = unsigned_amz {
            return Err(Denied::new(
                DeniedKind::Unauthenticated,
                format!(
                    "there were headers present in the request which were not signed: {}",
                    String::from_utf8_lossy(name).to_ascii_lowercase()
                ),
            ));
        }
        Ok((fields, filed))
    }

    /// The identity's signing key for `credential`'s scope, cached for the
    /// configured regions.
    fn signing_key(&self, identity: &Identity, credential: &sigv4::Credential) -> SigningKey {
        let secret = identity.secret.as_ref().map_or("", |s| s.expose());
        let derive = || {
            sigv4::signing_key(
                secret.as_bytes(),
                credential.date(),
                credential.region(),
                credential.service(),
            )
        };
        if !self
            .regions
            .iter()
            .any(|region| region == credential.region())
        {
            return derive();
        }
        let Ok(mut keys) = self.keys.lock() else {
            return derive();
        };
        let cached = keys.get(identity.name.as_str()).and_then(|entries| {
            entries
                .iter()
                .find(|(date, region, _)| {
                    *date == credential.date() && *region == credential.region()
                })
                .map(|(_, _, key)| key.clone())
        });
        if let Some(key) = cached {
            return key;
        }
        if keys.len() >= MAX_CACHED_KEYS {
            keys.clear();
        }
        let key = derive();
        let entries = keys.entry(identity.name.clone()).or_default();
        // Keys change daily: yesterday's and today's are enough.
        if entries.len() >= 4 {
            entries.remove(0);
        }
        entries.push((
            credential.date().to_owned(),
            credential.region().to_owned(),
            key.clone(),
        ));
        key
    }

    /// Forgets every cached signing key (the identities were reloaded).
    pub(crate) fn forget_keys(&self) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.clear();
        }
    }

    /// Where `request`'s bucket and key are: its path-style target, or
    /// `BUCKET.<--s3-domain>` and its path. A key with an empty, `.` or
    /// `..` segment is refused (S3 keys are literal: normalising one would
    /// let a check of one prefix pass a write stored under another).
    pub(crate) fn address<B>(&self, request: &Inbound<B>) -> Result<Addressed, Denied> {
        let uri = request.uri();
        let raw = raw_path(request);
        let virtual_bucket = match &self.domain {
            None if uri.authority().is_some() => {
                return Err(Denied::new(
                    DeniedKind::InvalidPath,
                    "under credential custody an absolute-form target must name --s3-domain or BUCKET.<--s3-domain>, and none is set",
                ));
            }
            None => None,
            Some(domain) => {
                // The target's authority (a client using the gateway as its
                // HTTP proxy) wins over Host, as RFC 9112 says.
                let host = match uri.authority() {
                    Some(authority) => authority.as_str(),
                    None => single(request.fields(), "host")?.unwrap_or(""),
                };
                bucket_of(domain, &bare_host(host))
                    .map_err(|detail| Denied::new(DeniedKind::InvalidPath, detail))?
            }
        };
        // A path without escapes is its own decoding (most are).
        let decoded = if memchr::memchr(b'%', raw.as_bytes()).is_none() {
            Cow::Borrowed(raw)
        } else {
            percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .map_err(|_| {
                    Denied::new(
                        DeniedKind::InvalidPath,
                        "the percent-decoded path is not UTF-8",
                    )
                })?
        };
        let (mut object, path_style) = match virtual_bucket {
            Some(bucket) => {
                let target = match uri.query() {
                    Some(query) => format!("/{bucket}{raw}?{query}"),
                    None => format!("/{bucket}{raw}"),
                };
                (format!("/{bucket}{decoded}"), Some(target))
            }
            None => (decoded.into_owned(), None),
        };
        let mut trailing_slashes = 0;
        if object.len() > 1 {
            // In place: no second copy of the path per request.
            let trimmed = object.trim_end_matches('/').len();
            trailing_slashes = object.len() - trimmed;
            object.truncate(trimmed);
        }
        let mut segments = object.split('/').skip(1);
        segments.next();
        // A trailing `/` is a key of its own in S3 (a "folder" marker),
        // kept; an empty segment inside, `.` or `..` is refused.
        if segments.any(|s| s.is_empty() || s == "." || s == "..") {
            return Err(Denied::new(
                DeniedKind::InvalidPath,
                "under credential custody an S3 key may not have an empty, '.' or '..' segment (S3 keys are literal)",
            ));
        }
        Ok(Addressed {
            object,
            path_style,
            trailing_slashes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_name_prefixes_are_compared_without_case() {
        assert!(starts_with_ignore_case(b"X-Amz-Date", b"x-amz-"));
        assert!(!starts_with_ignore_case(b"x-am", b"x-amz-"));
    }

    #[test]
    fn copy_sources_and_query_parameters() {
        assert_eq!(copy_source("bkt/a%20b?versionId=3").unwrap(), "/bkt/a b");
        assert_eq!(copy_source("/bkt/k").unwrap(), "/bkt/k");
        assert!(copy_source("/bkt/../other/k").is_err());
        assert!(copy_source("//bkt/other/k").is_err());
        assert_eq!(
            param("list-type=2&prefix=a%2Fb+c", "prefix").as_deref(),
            Some("a/b c")
        );
    }
}
