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
use super::{Forwarding, Verified};
use crate::custody::s3_operations;
use crate::custody::sigv4::{self, SigV4Error, SignedHeaders, SigningKey};
use crate::gateway::inbound::{Head, Inbound};
use crate::gateway::s3_hosts::{bare_host, bucket_of};
use crate::head::{visible_str, HeaderFields, RequestView};

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

/// Where an S3 request's bucket and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addressed {
    /// `/bucket/key`, decoded, as S3 stores it (`/` alone for the service,
    /// `/bucket` for a bucket).
    pub(crate) object: String,
    /// For a virtual-hosted request, its path-style target (`/bucket` in
    /// front of the path as sent, query kept).
    pub(crate) path_style: Option<String>,
}

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
            (None, None) => super::without_credentials(
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
        if object.len() > 1 {
            // In place: no second copy of the path per request.
            let trimmed = object.trim_end_matches('/').len();
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
        Ok(Addressed { object, path_style })
    }
}

impl Addressed {
    /// The bucket, if the request names one (not the service's `/`).
    pub(crate) fn bucket(&self) -> Option<&str> {
        self.object
            .get(1..)
            .and_then(|rest| rest.split('/').next())
            .filter(|bucket| !bucket.is_empty())
    }
}

/// Every object `request` reaches, addressed at `addressed`, with the
/// access each needs (SPEC, "What a client may reach with the store's
/// key"). An S3 `DeleteObjects`' listed keys are added once its body was
/// read.
pub(crate) fn reached<'a, B>(
    request: &Inbound<B>,
    addressed: &'a Addressed,
    read_fields: &[HeaderName],
) -> Result<Reached<'a>, Denied> {
    let method = request.method();
    let query = query_of(request);
    let write = !matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS");
    // The table's reading decides the access: one reading of the
    // request, for what it is and what it needs.
    let operation = recognised(request, addressed, read_fields)?;
    let mut reached = Reached::new();
    let Some(bucket) = addressed.bucket() else {
        // The service: ListBuckets, or nothing a client may do.
        reached.push((
            Cow::Borrowed("/"),
            if write { Access::Admin } else { Access::Read },
        ));
        return Ok(reached);
    };
    let on_bucket = addressed.object.strip_prefix('/') == Some(bucket);
    let admin_resource = operation.need == s3_operations::Need::Admin;
    // A presigned URL's other x-amz-* parameters become fields of the
    // request the store gets: authorised exactly as those fields.
    let moved: &[(HeaderName, http::HeaderValue)] = match request.custody.as_deref() {
        Some(Verified {
            forward: Forwarding::Presigned { moved, .. },
            ..
        }) => moved,
        _ => &[],
    };
    let mut names = request
        .fields()
        .names()
        .chain(moved.iter().map(|(name, _)| name.as_str().as_bytes()));
    let admin_header = names.any(is_admin_field);
    if on_bucket {
        let bucket_prefix = format!("/{bucket}/");
        if operation.name == "DeleteObjects" {
            // DeleteObjects: each key it lists is a write of its own,
            // authorised once the body is read (`Custody::authorise_listed`).
        } else if write {
            // Create, delete or reconfigure a bucket; and a POST-policy
            // form upload, whose key is in its body (refused by the fencing
            // layer when fenced; without a token, as an admin's only).
            reached.push((Cow::Owned(bucket_prefix), Access::Admin));
        } else if operation.need == s3_operations::Need::ReadBucket {
            // A configuration read: of the whole bucket, whatever other
            // parameter (a `prefix` the store ignores here) it carries.
            reached.push((Cow::Owned(bucket_prefix), Access::Read));
        } else {
            // A listing reaches what its prefix names.
            let prefix = param(query, "prefix").unwrap_or_default();
            reached.push((Cow::Owned(format!("/{bucket}/{prefix}")), Access::Read));
        }
        return Ok(reached);
    }
    let need = if !write {
        Access::Read
    } else if admin_resource || admin_header {
        Access::Admin
    } else {
        Access::Write
    };
    reached.push((Cow::Borrowed(addressed.object.as_str()), need));
    let moved_source = moved
        .iter()
        .filter(|(name, _)| name == "x-amz-copy-source")
        .map(|(_, value)| value.to_str().map_err(|_| invalid_copy_source()))
        .collect::<Result<Vec<_>, _>>()?;
    let source = match (
        single(request.fields(), "x-amz-copy-source")?,
        moved_source.as_slice(),
    ) {
        (None, []) => None,
        (Some(source), []) => Some(source),
        (None, [source]) => Some(*source),
        _ => return Err(Denied::new(
            DeniedKind::Malformed,
            "x-amz-copy-source is given more than once (as a field and as a presigned parameter)",
        )),
    };
    if let Some(source) = source {
        reached.push((Cow::Owned(copy_source(source)?), Access::Read));
    }
    Ok(reached)
}

/// The operation `request` is, by the table of
/// [`s3_operations`](crate::custody::s3_operations); refused 501
/// `NotImplemented`, naming what is not understood, if it is none. The
/// fields the gateway reads itself (`read_fields`: the token and lock
/// headers) are not S3's to honour.
fn recognised<B>(
    request: &Inbound<B>,
    addressed: &Addressed,
    read_fields: &[HeaderName],
) -> Result<&'static s3_operations::Operation, Denied> {
    let level = match addressed.bucket() {
        None => s3_operations::Level::Service,
        Some(bucket) if addressed.object.strip_prefix('/') == Some(bucket) => {
            s3_operations::Level::Bucket
        }
        Some(_) => s3_operations::Level::Object,
    };
    let presigned = matches!(
        request.custody.as_deref(),
        Some(Verified {
            forward: Forwarding::Presigned { .. },
            ..
        })
    );
    operation_of(request, level, presigned, read_fields)
        .map_err(|refused| Denied::new(DeniedKind::NotImplemented, refused.0))
}

/// The row of the table `request` is at `level`: its method, its query
/// parameters' names (percent-decoded; a presigned URL's authentication
/// parameters left out, and its other `x-amz-*` parameters read as the
/// fields they become) and its `x-amz-*` fields but `read_fields`. With
/// custody and without alike.
pub(crate) fn operation_of<B>(
    request: &Inbound<B>,
    level: s3_operations::Level,
    presigned: bool,
    read_fields: &[HeaderName],
) -> Result<&'static s3_operations::Operation, s3_operations::NotRecognised> {
    let mut params: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    for pair in query_of(request).split('&').filter(|pair| !pair.is_empty()) {
        let raw = pair.split('=').next().unwrap_or("");
        let name = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
        if presigned && is_presign_param_in_any_case(&name) {
            continue;
        }
        if presigned && name.to_ascii_lowercase().starts_with("x-amz-") {
            // It becomes a field of the request the store gets.
            fields.push(name.to_ascii_lowercase());
            continue;
        }
        params.push(name);
    }
    for name in request.fields().names() {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let own = read_fields.iter().any(|read| read.as_str() == name);
        if name.starts_with("x-amz-") && !own {
            fields.push(name);
        }
    }
    let params: Vec<&str> = params.iter().map(|param| &**param).collect();
    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
    s3_operations::recognise(request.method().as_str(), level, &params, &fields)
}

/// Whether a request's query holds a presigned URL's authentication
/// parameters (SigV4, in any case).
pub(crate) fn is_presigned<B>(request: &Inbound<B>) -> bool {
    query_of(request).split('&').any(|pair| {
        let raw = pair.split('=').next().unwrap_or("");
        is_presign_param_in_any_case(&percent_encoding::percent_decode_str(raw).decode_utf8_lossy())
    })
}

fn invalid_copy_source() -> Denied {
    Denied::new(
        DeniedKind::InvalidPath,
        "x-amz-copy-source is not visible ASCII",
    )
}

/// Whether the field `name` changes who may read an object or what the
/// store does by itself (an ACL, a grant, object lock, a governance
/// bypass): a write carrying it needs `admin` (SPEC "Deny by default").
fn is_admin_field(name: &[u8]) -> bool {
    std::str::from_utf8(name)
        .is_ok_and(|name| s3_operations::admin_field(&name.to_ascii_lowercase()))
}

/// Every object a request reaches, with the access each needs: its own
/// (borrowed from where it is addressed) and at most a copy's source, on
/// the stack.
pub(crate) type Reached<'a> = smallvec::SmallVec<[(Cow<'a, str>, Access); 2]>;

/// `x-amz-copy-source` (`bucket/key` or `/bucket/key`, percent-encoded,
/// maybe `?versionId=`) as the object path it reads.
fn copy_source(value: &str) -> Result<String, Denied> {
    let path = value.split('?').next().unwrap_or("");
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| Denied::new(DeniedKind::InvalidPath, "x-amz-copy-source is not UTF-8"))?;
    let object = format!("/{}", decoded.trim_start_matches('/'));
    if object.split('/').skip(2).any(|s| s == "." || s == "..") {
        return Err(Denied::new(
            DeniedKind::InvalidPath,
            "x-amz-copy-source may not have a '.' or '..' segment",
        ));
    }
    Ok(object)
}

fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| {
            percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// What the payload hash says, checked: a hex hash or `UNSIGNED-PAYLOAD`
/// go on in `x-amz-content-sha256` (the store checks the body against the
/// former); an unsigned body is taken only over TLS.
fn payload_form(value: &str, has_body: bool, tls: bool) -> Result<&str, Denied> {
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
fn check_scope(credential: &sigv4::Credential, amz_date: &str) -> Result<(), Denied> {
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
fn is_presign_param_in_any_case(name: &str) -> bool {
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
const SIGV2_REFUSED: &str = "the request is signed with SigV2 (AWS AKID:signature, or a \
    presigned URL with AWSAccessKeyId and Signature), which the gateway does not verify: sign \
    with SigV4 (AWS4-HMAC-SHA256); with boto3, Config(signature_version=\"s3v4\"), which \
    presigned URLs need too";

/// Whether `query` is a SigV2 presigned URL's (`AWSAccessKeyId` and
/// `Signature`, names compared as S3 compares them: exactly).
fn is_sigv2_presigned(query: &str) -> bool {
    let has = |name: &str| {
        query
            .split('&')
            .any(|pair| pair.split_once('=').map_or(pair, |(n, _)| n) == name)
    };
    !query.is_empty() && has("AWSAccessKeyId") && has("Signature")
}

fn malformed(message: &str) -> Denied {
    Denied::new(DeniedKind::Malformed, message)
}

/// A SigV4 parse error (an unsupported algorithm, SigV2 or SigV4a,
/// included: refused, never taken for anonymous).
fn malformed_sigv4(error: &SigV4Error) -> Denied {
    Denied::new(DeniedKind::Malformed, error.to_string())
}

/// The one value of `name` (a lowercase name), as text; two lines of it
/// are refused.
fn single<'a>(fields: &'a Head, name: &str) -> Result<Option<&'a str>, Denied> {
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

/// A verified `x-amz-content-sha256` (a SHA-256 in hex or a payload form,
/// at most 64 bytes), kept inline: a `String` of it cost an allocation on
/// every signed request.
#[derive(Clone, Copy)]
pub(crate) struct PayloadHash {
    bytes: [u8; 64],
    len: u8,
}

impl PayloadHash {
    /// `text`, if it is at most 64 bytes.
    pub(crate) fn new(text: &str) -> Option<PayloadHash> {
        let mut bytes = [0u8; 64];
        bytes
            .get_mut(..text.len())?
            .copy_from_slice(text.as_bytes());
        Some(PayloadHash {
            bytes,
            len: u8::try_from(text.len()).ok()?,
        })
    }

    /// The value, as the client sent it.
    pub(crate) fn as_str(&self) -> &str {
        // A copy of a `&str`'s bytes whole: always UTF-8.
        self.bytes
            .get(..usize::from(self.len))
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for PayloadHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `(line, place)`: the head's `line`th line as read is a value of the
/// `place`th signed name.
pub(crate) type FiledLines = smallvec::SmallVec<[(u16, u8); 12]>;

/// Where a header-signed request's signed lines are, found once by the
/// verifier: the re-signer, which signs over the same list when the head is
/// still as read and nothing is added, takes them from here rather than
/// looking each line up again.
#[derive(Debug, Clone)]
pub(crate) struct Filed {
    /// The signed lines, in the head's order.
    pub(crate) lines: FiledLines,
    /// The places of [`Filed::OWN`] in the list: the gateway writes
    /// these values itself.
    pub(crate) own: [u8; 3],
}

impl Filed {
    /// The fields every header-signed request signs and whose values the
    /// gateway sets when it signs again.
    pub(crate) const OWN: [&'static str; 3] = ["host", "x-amz-date", "x-amz-content-sha256"];
}

/// The fields a SigV4 verifier reads before the signed ones, found in one
/// pass over the head (a lookup each scanned it once per name).
struct AuthFields<'a> {
    authorization: OneField<'a>,
    amz_date: OneField<'a>,
    content_sha256: OneField<'a>,
    /// `Transfer-Encoding`, or a `Content-Length` that is not zero.
    has_body: bool,
}

/// A field that may be sent once: its first line, and whether it came again.
#[derive(Default)]
struct OneField<'a> {
    first: Option<&'a [u8]>,
    repeated: bool,
}

impl<'a> AuthFields<'a> {
    fn read(head: &'a Head) -> Self {
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
    fn single(&self, name: &str) -> Result<Option<&'a [u8]>, Denied> {
        if self.repeated {
            return Err(malformed(&format!("{name} appears more than once")));
        }
        Ok(self.first)
    }

    /// Its one line, as text (visible ASCII).
    fn visible(&self, name: &str) -> Result<Option<&'a str>, Denied> {
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

fn query_of<B>(request: &Inbound<B>) -> &str {
    request.uri().query().unwrap_or("")
}

fn has_body<B>(request: &Inbound<B>) -> bool {
    let fields = request.fields();
    fields.contains(&http::header::TRANSFER_ENCODING)
        || fields
            .first(&http::header::CONTENT_LENGTH)
            .is_some_and(|length| length.iter().any(|b| *b != b'0'))
}

/// Whether `name` starts with `prefix` (lowercase), in any case.
fn starts_with_ignore_case(name: &[u8], prefix: &[u8]) -> bool {
    name.len() >= prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix)
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
        assert_eq!(
            param("list-type=2&prefix=a%2Fb+c", "prefix").as_deref(),
            Some("a/b c")
        );
    }
}
