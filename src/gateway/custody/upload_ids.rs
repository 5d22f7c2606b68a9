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
//! `ListMultipartUploads` and `ListParts` answers are relayed as the store
//! wrote them: they show the store's ids, which are refused if sent back.
//! A client uses the id of its `CreateMultipartUpload` answer
//! (docs/CUSTODY.md).

use base64::Engine as _;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Response};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use ring::hmac;

use super::denied::{Denied, DeniedKind};
use super::files::UpstreamCredentials;
use super::identities::constant_time_eq;
use super::seal_keys::SealKeys;
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
/// The query parameter that names an upload.
pub(crate) const UPLOAD_ID: &str = "uploadId";
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
    pub(crate) fn answer(&self, bucket: &str, key: &str) -> UploadAnswer {
        UploadAnswer {
            key: self.0.sealing_key(),
            bucket: bucket.to_owned(),
            object_key: key.to_owned(),
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

/// What a `CreateMultipartUpload` answer needs to hand out the gateway's
/// id for the store's: sealed with `key` over the store's id, `bucket`
/// and `object_key`.
#[derive(Clone)]
pub(crate) struct UploadAnswer {
    /// The key ids are sealed with.
    key: hmac::Key,
    /// The request's bucket.
    bucket: String,
    /// The request's key, as S3 reads it.
    object_key: String,
}

impl std::fmt::Debug for UploadAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadAnswer")
            .field("bucket", &self.bucket)
            .field("object_key", &self.object_key)
            .finish_non_exhaustive()
    }
}

/// Why a `CreateMultipartUpload` answer cannot be relayed with the
/// gateway's id in it (the proxy answers 502: never with the store's id).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadAnswerError {
    /// The body failed, or is longer than [`MAX_CREATE_ANSWER`].
    #[error("the store's CreateMultipartUpload answer could not be read whole (at most {MAX_CREATE_ANSWER} bytes): {0}")]
    Body(String),
    /// The body is no `InitiateMultipartUploadResult` with one plain
    /// `UploadId` the gateway can bind.
    #[error(
        "the store's CreateMultipartUpload answer holds no upload id the gateway can bind: {0}"
    )]
    Id(String),
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

/// Where `query`'s one `uploadId` value is (a byte range of `query`), and
/// that value decoded; `None` if it has none. Names are compared
/// percent-decoded, as the operation table reads them; two are refused.
fn find_upload_id(query: &str) -> Result<Option<(std::ops::Range<usize>, String)>, Denied> {
    let mut found = None;
    let mut at = 0;
    for pair in query.split('&') {
        let start = at;
        at += pair.len() + 1;
        let (raw_name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode_str(raw_name).decode_utf8_lossy() != UPLOAD_ID {
            continue;
        }
        if found.is_some() {
            return Err(Denied::new(
                DeniedKind::BadRequest,
                "uploadId is given more than once",
            ));
        }
        let decoded = percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| Denied::new(DeniedKind::BadRequest, "uploadId is not UTF-8"))?;
        let value_start = start + raw_name.len() + 1;
        let range = value_start.min(start + pair.len())..start + pair.len();
        found = Some((range, decoded.into_owned()));
    }
    Ok(found)
}

/// `query` with its one `uploadId` value replaced by `store` (encoded as
/// SigV4 writes it); `query` as it is when it has none.
pub(crate) fn with_store_id(query: &str, store: &str) -> Result<String, Denied> {
    let Some((range, _)) = find_upload_id(query)? else {
        return Ok(query.to_owned());
    };
    let encoded = utf8_percent_encode(store, QUERY_VALUE).to_string();
    let mut out = String::with_capacity(query.len() + encoded.len());
    out.push_str(&query[..range.start]);
    if range.start == range.end && !query[..range.end].ends_with('=') {
        // `uploadId` without `=`: the value goes after one.
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
) -> Result<String, Denied> {
    let (_, sealed) = find_upload_id(query)?.ok_or_else(|| no_such_upload(object))?;
    keys.unseal(&sealed, bucket, key)
        .ok_or_else(|| no_such_upload(object))
}

/// A `CreateMultipartUpload` answer with the gateway's id in place of the
/// store's. Any other answer than a success is returned as it came.
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
    let limited = http_body_util::Limited::new(body, MAX_CREATE_ANSWER);
    let bytes = http_body_util::BodyExt::collect(limited)
        .await
        .map_err(|e| UploadAnswerError::Body(e.to_string()))?
        .to_bytes();
    let rewritten = rewrite_create_answer(&bytes, answer).map_err(UploadAnswerError::Id)?;
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
    Ok(Response::from_parts(
        parts,
        FromProxy::from(axum::body::Body::from(rewritten)),
    ))
}

/// `body`, an `InitiateMultipartUploadResult`, with its one `UploadId`'s
/// text sealed. Read strictly: XML the gateway's reader takes (no DTD),
/// the root S3 names, exactly one `UploadId` child whose text is written
/// plainly (no reference, no CDATA) and is a store id [`is_store_id`]
/// takes; anything else is refused, never relayed with the store's id.
fn rewrite_create_answer(body: &[u8], answer: &UploadAnswer) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "not UTF-8".to_owned())?;
    let document = roxmltree::Document::parse(text).map_err(|e| e.to_string())?;
    let root = document.root_element();
    if root.tag_name().name() != "InitiateMultipartUploadResult" {
        return Err(format!("the root element is <{}>", root.tag_name().name()));
    }
    let mut ids = root
        .children()
        .filter(|node| node.is_element() && node.tag_name().name() == "UploadId");
    let element = ids.next().ok_or("no <UploadId>")?;
    if ids.next().is_some() {
        return Err("two <UploadId>s".into());
    }
    let store = crate::reach::whole_text(element)?;
    if !is_store_id(&store) {
        return Err(format!(
            "an <UploadId> of other than 1 to {MAX_STORE_ID} URL-safe characters"
        ));
    }
    // Where its text is, as written: between the start tag's `>` and the
    // end tag's `</`, which must be the id itself (no reference, CDATA).
    let range = element.range();
    let raw = text.get(range.clone()).ok_or("the element's place")?;
    let open = raw.find('>').ok_or("an <UploadId> start tag")? + 1;
    let close = raw.rfind("</").ok_or("an <UploadId> end tag")?;
    if raw.get(open..close) != Some(store.as_str()) {
        return Err("an <UploadId> written with references or CDATA".into());
    }
    let sealed = seal(&answer.key, &store, &answer.bucket, &answer.object_key);
    let mut out = Vec::with_capacity(body.len() + sealed.len());
    out.extend_from_slice(&body[..range.start + open]);
    out.extend_from_slice(sealed.as_bytes());
    out.extend_from_slice(&body[range.start + close..]);
    Ok(out)
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
        let answer = keys.answer("b", "dir/a");
        let body = rewrite_create_answer(CREATED.as_bytes(), &answer).unwrap();
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
    fn create_answers_are_read_strictly() {
        let keys = UploadKeys::new(&credentials("s1"));
        let answer = keys.answer("b", "a");
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
            assert!(rewrite_create_answer(bad.as_bytes(), &answer).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_query_gets_the_stores_id_back() {
        let keys = UploadKeys::new(&credentials("s1"));
        let sealed = seal(&keys.0.sealing_key(), "u+1/=", "b", "k");
        let encoded = utf8_percent_encode(&sealed, NON_ALPHANUMERIC).to_string();
        let query = format!("partNumber=2&upload%49d={encoded}&x-id=UploadPart");
        let store = unseal_query(&keys, &query, "b", "k", "/b/k").unwrap();
        assert_eq!(store, "u+1/=");
        assert_eq!(
            with_store_id(&query, &store).unwrap(),
            "partNumber=2&upload%49d=u%2B1%2F%3D&x-id=UploadPart"
        );
        let refused = unseal_query(&keys, &query, "b", "other", "/b/other").unwrap_err();
        assert!(matches!(refused.kind, DeniedKind::NoSuchUpload));
        let twice = format!("uploadId={encoded}&uploadId={encoded}");
        assert!(unseal_query(&keys, &twice, "b", "k", "/b/k").is_err());
        assert_eq!(with_store_id("uploadId", "s").unwrap(), "uploadId=s");
        assert_eq!(with_store_id("uploadId=", "s").unwrap(), "uploadId=s");
        assert_eq!(with_store_id("a=1", "s").unwrap(), "a=1");
    }
}
