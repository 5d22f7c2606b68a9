//! S3 upload ids under custody, bound to the object they write (SPEC,
//! "Deny by default": "Upload ids belong to one object"; issue 48, class
//! 4).
//!
//! A multipart upload is created for one key, and its parts, completion,
//! abort and listing name it by its `uploadId` alone: the store writes the
//! key the upload was created for whatever the path of the request that
//! completes it (moto does not even check that they match). The gateway
//! fences and authorises the path's key; without knowing which object an
//! id writes, a stale holder could complete its upload through a fresh
//! key's path, and land it on an object whose fence had moved past its
//! token.
//!
//! # The binding lives in the id
//!
//! The gateway never hands out the store's upload id. In a
//! `CreateMultipartUpload` answer, the store's `<UploadId>` becomes
//!
//! ```text
//! <the store's id>.<seal>
//! ```
//!
//! the seal being, in unpadded base64url, the first 16 bytes of an
//! HMAC-SHA256 over the store's id, the bucket and the key of the request
//! that created it (as S3 reads them: decoded, literal). The key is
//! derived from the store's credentials (`seal_keys.rs`, as WebDAV lock
//! tokens' are, with a salt of its own), which every instance in front of
//! the store holds: an id verifies at every instance and after a restart,
//! and after a rotation of the store's credentials the key before still
//! verifies. Ids stay opaque, URL-safe strings (S3's are; SDKs carry them
//! as they came).
//!
//! # What a request may carry
//!
//! Every operation of the table with the `uploadId` sub-resource
//! (UploadPart and UploadPartCopy, CompleteMultipartUpload,
//! AbortMultipartUpload, ListParts) carries exactly one; its seal must
//! verify over the request's own bucket and key, else 404 `NoSuchUpload`,
//! nothing forwarded. A store's raw id does not verify (no seal), nor does
//! an id through another key's path. The client's signature is verified
//! over the target as sent (the sealed id); the store's id is put back in
//! the target (and in a presigned URL's forwarded query) before the
//! gateway signs for the store, so the store sees its own id.
//!
//! A `ListMultipartUploads` answer hands out sealed ids too: each
//! upload's for its key, and its markers for their key markers; its
//! request's `upload-id-marker` must be one sealed for its `key-marker`,
//! and goes on as the store's. A `ListParts` answer's `<UploadId>` is
//! relayed as the store wrote it (SDKs do not read it back): refused if
//! sent back (docs/CUSTODY.md).

use base64::Engine as _;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Response};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use ring::hmac;

use super::denied::{Denied, DeniedKind};
use super::files::UpstreamCredentials;
use super::identities::constant_time_eq;
use super::seal_keys::SealKeys;
use super::verified::{AnswerKind, UploadAnswer};
use crate::gateway::body::response::FromProxy;
use crate::gateway::hop::end_to_end_map;

/// The salt of the key upload ids are sealed with.
const KEY_SALT: &[u8] = b"fencegate/s3-upload-binding/v1";
/// What the MAC covers first: its version.
const MAC_VERSION: &[u8] = b"fencegate upload id v1";
/// What separates the store's id from the seal (base64url has none).
const SEPARATOR: char = '.';
/// The longest store id the gateway binds (AWS's are about 100 bytes).
const MAX_STORE_ID: usize = 1024;
/// The most bytes of a `CreateMultipartUpload` answer the gateway reads to
/// rewrite (S3's are a few hundred).
const MAX_CREATE_ANSWER: usize = 64 * 1024;
/// The most bytes of a `ListMultipartUploads` answer the gateway reads to
/// rewrite: 1 000 uploads (S3's most per page) of 1 KiB keys, with room.
const MAX_LIST_ANSWER: usize = 8 * 1024 * 1024;
/// The query parameter that names an upload.
pub(crate) const UPLOAD_ID: &str = "uploadId";
/// `ListMultipartUploads`' parameter that names the upload to list after.
pub(crate) const UPLOAD_ID_MARKER: &str = "upload-id-marker";
/// `ListMultipartUploads`' parameter that names the key to list after.
const KEY_MARKER: &str = "key-marker";
/// What SigV4 leaves unencoded in a query value: the store's id goes
/// back in this form, its canonical one.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The keys that seal upload ids: the one derived from the store's
/// credentials in force, and the one before the last rotation.
#[derive(Debug)]
pub(crate) struct UploadKeys(SealKeys);

impl UploadKeys {
    /// The keys of `credentials`.
    pub(crate) fn new(credentials: &UpstreamCredentials) -> UploadKeys {
        UploadKeys(SealKeys::new(credentials, KEY_SALT))
    }

    /// Seals with `credentials` from now on (a reload of their file); ids
    /// sealed until now still verify.
    pub(crate) fn rotate(&self, credentials: &UpstreamCredentials) {
        self.0.rotate(credentials);
    }

    /// What a `CreateMultipartUpload` of `bucket`/`key` needs to hand out
    /// a sealed id.
    pub(crate) fn created(&self, bucket: &str, key: &str) -> UploadAnswer {
        UploadAnswer {
            key: self.0.sealing_key(),
            bucket: bucket.to_owned(),
            kind: AnswerKind::Created {
                object_key: key.to_owned(),
            },
        }
    }

    /// What a `ListMultipartUploads` of `bucket` needs to hand out sealed
    /// ids; `url_encoded`: it asked for `encoding-type=url` (the answer's
    /// keys are URL-encoded).
    pub(crate) fn listed(&self, bucket: &str, url_encoded: bool) -> UploadAnswer {
        UploadAnswer {
            key: self.0.sealing_key(),
            bucket: bucket.to_owned(),
            kind: AnswerKind::Listed { url_encoded },
        }
    }

    /// The store's id in `sealed`, if the gateway sealed it for `bucket`
    /// and `key`.
    pub(crate) fn unseal(&self, sealed: &str, bucket: &str, key: &str) -> Option<String> {
        let (store, seal) = sealed.rsplit_once(SEPARATOR)?;
        if !is_store_id(store) {
            return None;
        }
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mac: [u8; 16] = b64.decode(seal).ok()?.try_into().ok()?;
        let pair = self.0.pair();
        let verified = pair
            .iter()
            .any(|k| constant_time_eq(&mac_of(k, store, bucket, key), &mac));
        verified.then(|| store.to_owned())
    }
}

impl AnswerKind {
    /// The operation's name, and the most bytes of its answer read.
    fn what(&self) -> (&'static str, usize) {
        match self {
            AnswerKind::Created { .. } => ("CreateMultipartUpload", MAX_CREATE_ANSWER),
            AnswerKind::Listed { .. } => ("ListMultipartUploads", MAX_LIST_ANSWER),
        }
    }
}

impl std::fmt::Debug for UploadAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadAnswer")
            .field("bucket", &self.bucket)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Why an answer cannot be relayed with the gateway's ids in it (the proxy
/// answers 502: never with the store's ids).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadAnswerError {
    /// The body failed, or is longer than the most read.
    #[error("the store's {what} answer could not be read whole (at most {limit} bytes): {detail}")]
    Body {
        what: &'static str,
        limit: usize,
        detail: String,
    },
    /// The body is not what S3 answers, with plain upload ids the gateway
    /// can bind.
    #[error("the store's {what} answer holds upload ids the gateway cannot bind: {detail}")]
    Id { what: &'static str, detail: String },
}

/// Whether `id` is a store's upload id the gateway binds: at most
/// [`MAX_STORE_ID`] bytes of URL-safe characters (and base64's), nothing
/// XML or a query would escape but `+`, `/` and `=`.
fn is_store_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_STORE_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b))
}

/// The first 128 bits of the MAC of an id under `key`: over the store's
/// id, the bucket and the key, each with its length.
fn mac_of(key: &hmac::Key, store: &str, bucket: &str, object_key: &str) -> [u8; 16] {
    let mut context = hmac::Context::with_key(key);
    for field in [
        MAC_VERSION,
        store.as_bytes(),
        bucket.as_bytes(),
        object_key.as_bytes(),
    ] {
        context.update(&(field.len() as u64).to_be_bytes());
        context.update(field);
    }
    let tag = context.sign();
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag.as_ref()[..16]);
    out
}

/// The id the gateway hands out for the store's id `store`, of an upload
/// of `bucket`/`object_key`, sealed with `key`.
pub(crate) fn seal(key: &hmac::Key, store: &str, bucket: &str, object_key: &str) -> String {
    let mac = mac_of(key, store, bucket, object_key);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!("{store}{SEPARATOR}{}", b64.encode(mac))
}

/// The refusal of an upload id that is not one of `object`'s.
fn no_such_upload(object: &str) -> Denied {
    Denied::new(
        DeniedKind::NoSuchUpload,
        format!("The specified upload does not exist: the upload id is none the gateway handed out for {object} (another key's, the store's own, or none)"),
    )
}

/// Where `query`'s one `name` value is (a byte range of `query`), and that
/// value percent-decoded; `None` if it has none. Names are compared
/// percent-decoded, as the operation table reads them; two are refused.
pub(crate) fn find_param(
    query: &str,
    name: &str,
) -> Result<Option<(std::ops::Range<usize>, String)>, Denied> {
    let mut found = None;
    let mut at = 0;
    for pair in query.split('&') {
        let start = at;
        at += pair.len() + 1;
        let (raw_name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode_str(raw_name).decode_utf8_lossy() != name {
            continue;
        }
        if found.is_some() {
            return Err(Denied::new(
                DeniedKind::BadRequest,
                format!("{name} is given more than once"),
            ));
        }
        let decoded = percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| Denied::new(DeniedKind::BadRequest, format!("{name} is not UTF-8")))?;
        let value_start = start + raw_name.len() + 1;
        let range = value_start.min(start + pair.len())..start + pair.len();
        found = Some((range, decoded.into_owned()));
    }
    Ok(found)
}

/// A store's id put back in place of the gateway's: `store` is the value
/// of the query parameter `param`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsealed {
    /// [`UPLOAD_ID`] or [`UPLOAD_ID_MARKER`].
    pub(crate) param: &'static str,
    /// The store's id.
    pub(crate) store: String,
}

impl Unsealed {
    /// `query` with its one [`Unsealed::param`] value replaced by the
    /// store's id (encoded as SigV4 writes it); `query` as it is when it
    /// has none.
    pub(crate) fn put_back(&self, query: &str) -> Result<String, Denied> {
        with_param(query, self.param, &self.store)
    }
}

/// `query` with its one `name` value replaced by `store` (encoded as SigV4
/// writes it); `query` as it is when it has none.
fn with_param(query: &str, name: &str, store: &str) -> Result<String, Denied> {
    let Some((range, _)) = find_param(query, name)? else {
        return Ok(query.to_owned());
    };
    let encoded = utf8_percent_encode(store, QUERY_VALUE).to_string();
    let mut out = String::with_capacity(query.len() + encoded.len());
    out.push_str(&query[..range.start]);
    if range.start == range.end && !query[..range.end].ends_with('=') {
        // A name without `=`: the value goes after one.
        out.push('=');
    }
    out.push_str(&encoded);
    out.push_str(&query[range.end..]);
    Ok(out)
}

/// The store's id of the upload `query` names, verified as one the gateway
/// handed out for `bucket`/`key` (`object` names them in a refusal); 404
/// `NoSuchUpload` if it is not, or if there is none.
pub(crate) fn unseal_query(
    keys: &UploadKeys,
    query: &str,
    bucket: &str,
    key: &str,
    object: &str,
) -> Result<Unsealed, Denied> {
    let (_, sealed) = find_param(query, UPLOAD_ID)?.ok_or_else(|| no_such_upload(object))?;
    let store = keys
        .unseal(&sealed, bucket, key)
        .ok_or_else(|| no_such_upload(object))?;
    Ok(Unsealed {
        param: UPLOAD_ID,
        store,
    })
}

/// A `ListMultipartUploads` of `bucket`: its `upload-id-marker` (if any,
/// not empty) verified as an id the gateway handed out for its
/// `key-marker`'s key (as the answer it came from paired them), else 404
/// `NoSuchUpload`; and whether it asks for URL-encoded keys.
pub(crate) fn unseal_marker(
    keys: &UploadKeys,
    query: &str,
    bucket: &str,
) -> Result<(Option<Unsealed>, bool), Denied> {
    let url_encoded = find_param(query, "encoding-type")?.is_some_and(|(_, v)| v == "url");
    let marker = match find_param(query, UPLOAD_ID_MARKER)? {
        Some((_, marker)) if !marker.is_empty() => marker,
        _ => return Ok((None, url_encoded)),
    };
    let key = find_param(query, KEY_MARKER)?.map(|(_, key)| key);
    let store = keys
        .unseal(&marker, bucket, key.as_deref().unwrap_or(""))
        .ok_or_else(|| no_such_upload(&format!("/{bucket}")))?;
    Ok((
        Some(Unsealed {
            param: UPLOAD_ID_MARKER,
            store,
        }),
        url_encoded,
    ))
}

/// A `CreateMultipartUpload` or `ListMultipartUploads` answer with the
/// gateway's ids in place of the store's. Any other answer than a success
/// is returned as it came.
pub(crate) async fn bind_answer(
    response: Response<FromProxy>,
    answer: &UploadAnswer,
) -> Result<Response<FromProxy>, UploadAnswerError> {
    if !response.status().is_success() {
        return Ok(response);
    }
    let (mut parts, mut body) = response.into_parts();
    // The backend's lines go into the map: the body is replaced by the
    // bytes rewritten, which the lines' framing must not contradict.
    if let Some(fields) = body.take_fields() {
        parts.headers.extend(end_to_end_map(|| fields.iter()));
    }
    let (what, limit) = answer.kind.what();
    let limited = http_body_util::Limited::new(body, limit);
    let bytes = http_body_util::BodyExt::collect(limited)
        .await
        .map_err(|e| UploadAnswerError::Body {
            what,
            limit,
            detail: e.to_string(),
        })?
        .to_bytes();
    let rewritten = match &answer.kind {
        AnswerKind::Created { object_key } => rewrite_create_answer(&bytes, answer, object_key),
        AnswerKind::Listed { url_encoded } => rewrite_listing(&bytes, answer, *url_encoded),
    }
    .map_err(|detail| UploadAnswerError::Id { what, detail })?;
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
    Ok(Response::from_parts(
        parts,
        FromProxy::from(axum::body::Body::from(rewritten)),
    ))
}

/// The one element child of `parent` named `name`, if any; two are
/// refused.
fn one_child<'a, 'i>(
    parent: roxmltree::Node<'a, 'i>,
    name: &str,
) -> Result<Option<roxmltree::Node<'a, 'i>>, String> {
    let mut found = parent
        .children()
        .filter(|node| node.is_element() && node.tag_name().name() == name);
    let first = found.next();
    if found.next().is_some() {
        return Err(format!("two <{name}>s in <{}>", parent.tag_name().name()));
    }
    Ok(first)
}

/// The store's id in `element` and where its text is in `text` (`None`
/// if it is empty). Read strictly: nothing but text, written plainly (no
/// reference, no CDATA: the bytes between the start tag's `>` and the end
/// tag's `</` are the id), and an id [`is_store_id`] takes.
fn plain_id(
    text: &str,
    element: roxmltree::Node<'_, '_>,
) -> Result<Option<(std::ops::Range<usize>, String)>, String> {
    let name = element.tag_name().name();
    let store = crate::reach::whole_text(element)?;
    if store.is_empty() {
        return Ok(None);
    }
    if !is_store_id(&store) {
        return Err(format!(
            "an <{name}> of other than 1 to {MAX_STORE_ID} URL-safe characters"
        ));
    }
    let range = element.range();
    let raw = text.get(range.clone()).ok_or("an element's place")?;
    let open = raw.find('>').ok_or("a start tag")? + 1;
    let close = raw.rfind("</").ok_or("an end tag")?;
    if raw.get(open..close) != Some(store.as_str()) {
        return Err(format!("an <{name}> written with references or CDATA"));
    }
    Ok(Some((range.start + open..range.start + close, store)))
}

/// `body` with each `(range, replacement)` in place (ranges in order, not
/// overlapping).
fn splice(body: &str, mut swaps: Vec<(std::ops::Range<usize>, String)>) -> Vec<u8> {
    swaps.sort_by_key(|(range, _)| range.start);
    let mut out = Vec::with_capacity(body.len() + swaps.len() * 24);
    let mut at = 0;
    for (range, replacement) in swaps {
        out.extend_from_slice(body.as_bytes().get(at..range.start).unwrap_or_default());
        out.extend_from_slice(replacement.as_bytes());
        at = range.end;
    }
    out.extend_from_slice(body.as_bytes().get(at..).unwrap_or_default());
    out
}

/// `body` as a document whose root is `root`.
fn document<'i>(body: &'i [u8], root: &str) -> Result<roxmltree::Document<'i>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "not UTF-8".to_owned())?;
    let document = roxmltree::Document::parse(text).map_err(|e| e.to_string())?;
    let name = document.root_element().tag_name().name();
    if name != root {
        return Err(format!("the root element is <{name}>"));
    }
    Ok(document)
}

/// `body`, an `InitiateMultipartUploadResult`, with its one `UploadId`
/// sealed for `object_key`. Read strictly (the gateway's XML reader, no
/// DTD; [`plain_id`]); anything else is refused, never relayed with the
/// store's id.
fn rewrite_create_answer(
    body: &[u8],
    answer: &UploadAnswer,
    object_key: &str,
) -> Result<Vec<u8>, String> {
    let document = document(body, "InitiateMultipartUploadResult")?;
    let element = one_child(document.root_element(), "UploadId")?.ok_or("no <UploadId>")?;
    let (range, store) = plain_id(document.input_text(), element)?.ok_or("an empty <UploadId>")?;
    let sealed = seal(&answer.key, &store, &answer.bucket, object_key);
    Ok(splice(document.input_text(), vec![(range, sealed)]))
}

/// What a `CreateMultipartUpload` answer says, read as strictly as one
/// whose id is sealed ([`rewrite_create_answer`]): for the binding of ids
/// without custody (`gateway/s3_uploads.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatedUpload {
    /// The store's id (one [`is_store_id`] takes, written plainly).
    pub(crate) id: String,
    /// Its `<Bucket>`, if it has one.
    pub(crate) bucket: Option<String>,
    /// Its `<Key>`, if it has one.
    pub(crate) key: Option<String>,
}

/// `body`, an `InitiateMultipartUploadResult`, read: its one plain
/// `UploadId`, and its `Bucket` and `Key` (at most one of each).
pub(crate) fn created_answer(body: &[u8]) -> Result<CreatedUpload, String> {
    let document = document(body, "InitiateMultipartUploadResult")?;
    let root = document.root_element();
    let element = one_child(root, "UploadId")?.ok_or("no <UploadId>")?;
    let (_, id) = plain_id(document.input_text(), element)?.ok_or("an empty <UploadId>")?;
    let text_of = |name: &str| -> Result<Option<String>, String> {
        one_child(root, name)?
            .map(crate::reach::whole_text)
            .transpose()
    };
    Ok(CreatedUpload {
        id,
        bucket: text_of("Bucket")?,
        key: text_of("Key")?,
    })
}

/// Whether `body` is a `CompleteMultipartUploadResult` (S3 may answer a
/// completion 200 with an `<Error>`, and the upload is then not done).
pub(crate) fn completed_answer(body: &[u8]) -> bool {
    document(body, "CompleteMultipartUploadResult").is_ok()
}

/// `body`, a `ListMultipartUploadsResult`, with each upload's `UploadId`
/// sealed for its `Key`, and the markers (`UploadIdMarker`,
/// `NextUploadIdMarker`) for theirs (`KeyMarker`, `NextKeyMarker`), so
/// that a client may page on and abort what it lists. Keys are decoded
/// when the listing asked for `encoding-type=url` (`url_encoded`).
fn rewrite_listing(
    body: &[u8],
    answer: &UploadAnswer,
    url_encoded: bool,
) -> Result<Vec<u8>, String> {
    let document = document(body, "ListMultipartUploadsResult")?;
    let text = document.input_text();
    let root = document.root_element();
    let key_of = |parent: roxmltree::Node<'_, '_>, name: &str| -> Result<String, String> {
        let key = match one_child(parent, name)? {
            Some(element) => crate::reach::whole_text(element)?,
            None => String::new(),
        };
        if !url_encoded {
            return Ok(key);
        }
        percent_decode_str(&key.replace('+', " "))
            .decode_utf8()
            .map(|key| key.into_owned())
            .map_err(|_| format!("a URL-encoded <{name}> that is not UTF-8"))
    };
    let mut swaps = Vec::new();
    for (id_name, key_name) in [
        ("UploadIdMarker", "KeyMarker"),
        ("NextUploadIdMarker", "NextKeyMarker"),
    ] {
        let Some(element) = one_child(root, id_name)? else {
            continue;
        };
        if let Some((range, store)) = plain_id(text, element)? {
            let key = key_of(root, key_name)?;
            swaps.push((range, seal(&answer.key, &store, &answer.bucket, &key)));
        }
    }
    for upload in root
        .children()
        .filter(|node| node.is_element() && node.tag_name().name() == "Upload")
    {
        let element = one_child(upload, "UploadId")?.ok_or("an <Upload> without <UploadId>")?;
        let (range, store) = plain_id(text, element)?.ok_or("an empty <UploadId>")?;
        if one_child(upload, "Key")?.is_none() {
            return Err("an <Upload> without <Key>".into());
        }
        let key = key_of(upload, "Key")?;
        swaps.push((range, seal(&answer.key, &store, &answer.bucket, &key)));
    }
    Ok(splice(text, swaps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_tls::Secret;

    fn credentials(secret: &str) -> UpstreamCredentials {
        UpstreamCredentials::AwsSigV4 {
            access_key_id: "AKID".into(),
            secret_access_key: Secret::new(secret),
            region: "us-east-1".into(),
            service: "s3".into(),
            session_token: None,
        }
    }

    const CREATED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><Key>a</Key><UploadId>Zm9v-bar_baz.1</UploadId></InitiateMultipartUploadResult>"#;

    #[test]
    fn an_id_verifies_for_its_own_object_only() {
        let keys = UploadKeys::new(&credentials("s1"));
        let answer = keys.created("b", "dir/a");
        let body = rewrite_create_answer(CREATED.as_bytes(), &answer, "dir/a").unwrap();
        let body = String::from_utf8(body).unwrap();
        let sealed = body
            .split_once("<UploadId>")
            .and_then(|(_, rest)| rest.split_once("</UploadId>"))
            .map(|(id, _)| id.to_owned())
            .unwrap();
        assert!(sealed.starts_with("Zm9v-bar_baz.1."), "{sealed}");
        assert!(body.ends_with("</UploadId></InitiateMultipartUploadResult>"));
        assert_eq!(
            keys.unseal(&sealed, "b", "dir/a").as_deref(),
            Some("Zm9v-bar_baz.1")
        );
        // Another key, another bucket, a trailing slash, the raw id.
        assert_eq!(keys.unseal(&sealed, "b", "dir/b"), None);
        assert_eq!(keys.unseal(&sealed, "c", "dir/a"), None);
        assert_eq!(keys.unseal(&sealed, "b", "dir/a/"), None);
        assert_eq!(keys.unseal("Zm9v-bar_baz.1", "b", "dir/a"), None);
        // Another instance with the same credentials agrees; other
        // credentials do not, until rotated to (the old key kept).
        let twin = UploadKeys::new(&credentials("s1"));
        assert!(twin.unseal(&sealed, "b", "dir/a").is_some());
        let other = UploadKeys::new(&credentials("s2"));
        assert!(other.unseal(&sealed, "b", "dir/a").is_none());
        twin.rotate(&credentials("s2"));
        assert!(twin.unseal(&sealed, "b", "dir/a").is_some());
        // A lock key of the same credentials seals nothing here.
        let lock = super::super::dav_locks::LockKeys::new(&credentials("s1"));
        let forged = seal(&lock.sealing_key(), "Zm9v-bar_baz.1", "b", "dir/a");
        assert!(keys.unseal(&forged, "b", "dir/a").is_none());
    }

    #[test]
    fn a_created_upload_is_read_with_its_object() {
        let created = created_answer(CREATED.as_bytes()).unwrap();
        assert_eq!(
            created,
            CreatedUpload {
                id: "Zm9v-bar_baz.1".into(),
                bucket: Some("b".into()),
                key: Some("a".into()),
            }
        );
        let bare =
            "<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(created_answer(bare.as_bytes()).unwrap().key, None);
        for bad in [
            "<InitiateMultipartUploadResult><Key>a</Key><Key>b</Key><UploadId>u</UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult><UploadId>a&#46;b</UploadId></InitiateMultipartUploadResult>",
            "<Error><UploadId>u</UploadId></Error>",
        ] {
            assert!(created_answer(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(completed_answer(
            b"<CompleteMultipartUploadResult><Key>a</Key></CompleteMultipartUploadResult>"
        ));
        assert!(!completed_answer(
            b"<Error><Code>InternalError</Code></Error>"
        ));
        assert!(!completed_answer(b""));
    }

    #[test]
    fn create_answers_are_read_strictly() {
        let keys = UploadKeys::new(&credentials("s1"));
        let answer = keys.created("b", "a");
        for bad in [
            "<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult></InitiateMultipartUploadResult>",
            "<Other><UploadId>a</UploadId></Other>",
            "<InitiateMultipartUploadResult><UploadId>a&#46;b</UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult><UploadId><![CDATA[ab]]></UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult><UploadId>a<!--x-->b</UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult><UploadId>a b</UploadId></InitiateMultipartUploadResult>",
            "<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>",
            "<!DOCTYPE x [<!ENTITY e \"a\">]><InitiateMultipartUploadResult><UploadId>&e;</UploadId></InitiateMultipartUploadResult>",
        ] {
            assert!(
                rewrite_create_answer(bad.as_bytes(), &answer, "a").is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_query_gets_the_stores_id_back() {
        let keys = UploadKeys::new(&credentials("s1"));
        let sealed = seal(&keys.0.sealing_key(), "u+1/=", "b", "k");
        let encoded = utf8_percent_encode(&sealed, NON_ALPHANUMERIC).to_string();
        let query = format!("partNumber=2&upload%49d={encoded}&x-id=UploadPart");
        let unsealed = unseal_query(&keys, &query, "b", "k", "/b/k").unwrap();
        assert_eq!(unsealed.store, "u+1/=");
        assert_eq!(
            unsealed.put_back(&query).unwrap(),
            "partNumber=2&upload%49d=u%2B1%2F%3D&x-id=UploadPart"
        );
        let refused = unseal_query(&keys, &query, "b", "other", "/b/other").unwrap_err();
        assert!(matches!(refused.kind, DeniedKind::NoSuchUpload));
        let twice = format!("uploadId={encoded}&uploadId={encoded}");
        assert!(unseal_query(&keys, &twice, "b", "k", "/b/k").is_err());
        let put_back = |query: &str| {
            Unsealed {
                param: UPLOAD_ID,
                store: "s".into(),
            }
            .put_back(query)
            .unwrap()
        };
        assert_eq!(put_back("uploadId"), "uploadId=s");
        assert_eq!(put_back("uploadId="), "uploadId=s");
        assert_eq!(put_back("a=1"), "a=1");
    }

    #[test]
    fn a_listing_hands_out_sealed_ids_and_takes_its_markers_back() {
        let keys = UploadKeys::new(&credentials("s1"));
        let listing = "<ListMultipartUploadsResult><Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker/><NextKeyMarker>a+b%2Fc</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker><Upload><Key>x</Key><UploadId>u1</UploadId></Upload><Upload><Key>a+b%2Fc</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>";
        let body = rewrite_listing(listing.as_bytes(), &keys.listed("b", true), true).unwrap();
        let body = String::from_utf8(body).unwrap();
        let ids: Vec<&str> = body
            .split("<UploadId>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</UploadId>").map(|(id, _)| id))
            .collect();
        assert_eq!(keys.unseal(ids[0], "b", "x").as_deref(), Some("u1"));
        assert_eq!(keys.unseal(ids[1], "b", "a b/c").as_deref(), Some("u2"));
        let next = body
            .split_once("<NextUploadIdMarker>")
            .and_then(|(_, rest)| rest.split_once("</NextUploadIdMarker>"))
            .map(|(id, _)| id)
            .unwrap();
        let query = format!(
            "uploads&key-marker=a%20b%2Fc&upload-id-marker={}&encoding-type=url",
            utf8_percent_encode(next, NON_ALPHANUMERIC)
        );
        let (unsealed, url_encoded) = unseal_marker(&keys, &query, "b").unwrap();
        assert!(url_encoded);
        let unsealed = unsealed.unwrap();
        assert_eq!(unsealed.store, "u2");
        assert_eq!(
            unsealed.put_back(&query).unwrap(),
            "uploads&key-marker=a%20b%2Fc&upload-id-marker=u2&encoding-type=url"
        );
        // A marker of another key, or the store's own: refused.
        let other = format!("key-marker=x&upload-id-marker={next}");
        assert!(unseal_marker(&keys, &other, "b").is_err());
        assert!(unseal_marker(&keys, "key-marker=x&upload-id-marker=u1", "b").is_err());
        assert_eq!(unseal_marker(&keys, "uploads", "b").unwrap(), (None, false));
        // Strictly read: an upload without a key, a plain id with a reference.
        for bad in [
            "<ListMultipartUploadsResult><Upload><UploadId>u1</UploadId></Upload></ListMultipartUploadsResult>",
            "<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>u&#49;</UploadId></Upload></ListMultipartUploadsResult>",
            "<ListMultipartUploadsResult><Upload><Key>k</Key><Key>j</Key><UploadId>u1</UploadId></Upload></ListMultipartUploadsResult>",
        ] {
            assert!(
                rewrite_listing(bad.as_bytes(), &keys.listed("b", false), false).is_err(),
                "{bad}"
            );
        }
    }
}
