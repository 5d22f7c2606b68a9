//! S3 upload ids bound to their object without credential custody (issue
//! 48, item 5; SPEC "Deny by default"; docs/CUSTODY.md, "S3 upload ids
//! bound to their object").
//!
//! A multipart upload is created for one key, and its parts, completion,
//! abort and parts listing name it by `uploadId` alone: the store writes
//! the key the upload was created for, whatever the path (moto does not
//! check). The gateway fences the path's key. Under custody the id handed
//! out carries a seal of its key (`custody/upload_ids.rs`); without
//! custody the client signed the query, so the id cannot be rewritten, and
//! the gateway records instead, where the fences live, which key each id
//! writes:
//!
//! - A `CreateMultipartUpload` (`POST` on an object with `uploads`) that
//!   the store answers 200: its answer is read whole and strictly (the
//!   custody reader: one plain `<UploadId>`; a `<Bucket>` or `<Key>` that
//!   is not the path's is refused too), and `(namespace, bucket, id) ->
//!   key` is made durable in the [`FenceStore`](crate::store::FenceStore)
//!   (memory, the redb file, etcd) before the answer is relayed. If it
//!   cannot be, the client gets 503 `fence_store_unavailable` and the
//!   upload stays at the store, orphaned (no id reached the client; a
//!   lifecycle rule, or a listing and an abort at the store, removes it).
//! - Every request that carries an `uploadId` (UploadPart, UploadPartCopy,
//!   ListParts, CompleteMultipartUpload, AbortMultipartUpload, or anything
//!   else that names one): its id must be bound to the path's bucket and
//!   key, else 404 `NoSuchUpload`, before fencing, nothing forwarded. An id
//!   the gateway never saw created (one begun before the deploy, or at the
//!   store directly) is refused as well; with `--allow-unfenced-writes` it
//!   goes on, as every write the gateway cannot fence does, but one bound
//!   to another key never does.
//! - Once a completion (200 with a `CompleteMultipartUploadResult`) or an
//!   abort (2xx) went through, the binding is removed, best effort: one
//!   left behind only lets the same id through the same key's path.
//!
//! Only requests with a query look at any of this: a plain `PUT` or `GET`
//! pays one `Option` test.

use axum::body::Body;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{Method, Response, StatusCode};
use percent_encoding::percent_decode_str;

use super::answer::gateway_error;
use super::body::response::FromProxy;
use super::custody::denied::{Denied, DeniedKind};
use super::custody::upload_ids::{completed_answer, created_answer, find_param, UPLOAD_ID};
use super::hop::end_to_end_map;
use super::inbound::Inbound;
use super::outcome::RequestOutcome;
use super::proxy::Proxy;
use crate::dialect::answer::AnswerStyle;
use crate::dialect::s3_operations;
use crate::fencing::{Fencing, ResponseBody};
use crate::head::HeaderFields;
use crate::head::RequestView;

/// The most bytes of a `CreateMultipartUpload` or
/// `CompleteMultipartUpload` answer read (S3's are a few hundred).
const MAX_ANSWER: usize = 64 * 1024;

/// What a request does with an upload id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UploadStep {
    /// `CreateMultipartUpload` of `bucket`/`key`: its answer's id is bound.
    Create { bucket: String, key: String },
    /// A request naming upload `id`, through `bucket`/`key`'s path
    /// (`None`: a path that names no object, which no id is bound to).
    Named {
        object: Option<(String, String)>,
        id: String,
        /// A completion or an abort: the binding goes once it succeeded.
        ends: Option<Ends>,
    },
}

/// How an upload ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ends {
    /// `CompleteMultipartUpload` (`POST ?uploadId`).
    Complete,
    /// `AbortMultipartUpload` (`DELETE ?uploadId`).
    Abort,
}

/// What `request` (read path-style, on an S3 route without custody) does
/// with an upload id, if anything. A request without a query does
/// nothing, at the cost of one test. Two `uploadId`s are 400; a form body
/// on a request that names or creates an upload is 501 (moto reads
/// parameters from one, and then not the query).
#[inline]
pub(crate) fn upload_step<B>(request: &Inbound<B>) -> Result<Option<UploadStep>, Denied> {
    match request.uri().query() {
        None | Some("") => Ok(None),
        Some(query) => step_of(request, query),
    }
}

/// [`upload_step`] of a request with a query: kept out of line, as the
/// common request has none.
#[inline(never)]
fn step_of<B>(request: &Inbound<B>, query: &str) -> Result<Option<UploadStep>, Denied> {
    let object = bucket_and_key(request.uri().path());
    let step = match find_param(query, UPLOAD_ID)? {
        Some((_, id)) => UploadStep::Named {
            object,
            id,
            ends: match *request.method() {
                Method::POST => Some(Ends::Complete),
                Method::DELETE => Some(Ends::Abort),
                _ => None,
            },
        },
        None => match object {
            Some((bucket, key))
                if *request.method() == Method::POST && find_param(query, "uploads")?.is_some() =>
            {
                UploadStep::Create { bucket, key }
            }
            _ => return Ok(None),
        },
    };
    // A store that reads parameters out of a form body (moto takes its
    // fields in place of the query) would act on the upload id there.
    if request
        .fields()
        .first(&CONTENT_TYPE)
        .is_some_and(s3_operations::is_form_body)
    {
        return Err(Denied::new(
            DeniedKind::NotImplemented,
            s3_operations::form_body_refused("A multipart upload's request").0,
        ));
    }
    Ok(Some(step))
}

/// The bucket and key a path-style `path` names as S3 reads them (each
/// percent-decoded, the key's trailing `/` kept); `None` for a path that
/// names no object.
fn bucket_and_key(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix('/')?;
    let (bucket, key) = rest.split_once('/')?;
    let decode = |text: &str| {
        percent_decode_str(text)
            .decode_utf8()
            .ok()
            .map(|text| text.into_owned())
    };
    let (bucket, key) = (decode(bucket)?, decode(key)?);
    (!bucket.is_empty() && !bucket.contains('/') && !key.is_empty()).then_some((bucket, key))
}

/// The answer to a request of `step`: refused 404 `NoSuchUpload` (in the
/// route's dialect, `answers`) unless its id is bound to its path's object
/// (or unbound, with `allow_unbound`: `--allow-unfenced-writes`), else
/// fenced and forwarded by `fencing`, and then the binding made (a
/// creation) or removed (a completion, an abort).
/// [`forward`], boxed, and made out of line: the data plane's request
/// function holds neither its state nor its code (inlined there, they cost
/// every plain W1 request about 140 instructions in lost inlining).
#[inline(never)]
pub(crate) fn forward_boxed<'a>(
    fencing: &'a Fencing<Proxy>,
    step: UploadStep,
    request: Inbound<Body>,
    answers: AnswerStyle,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Response<ResponseBody<FromProxy>>> + Send + 'a>,
> {
    let allow_unbound = fencing.allows_unfenced_writes();
    Box::pin(forward(fencing, step, request, answers, allow_unbound))
}

pub(crate) async fn forward(
    fencing: &Fencing<Proxy>,
    step: UploadStep,
    request: Inbound<Body>,
    answers: AnswerStyle,
    allow_unbound: bool,
) -> Response<ResponseBody<FromProxy>> {
    let fences = fencing.fences();
    if let UploadStep::Named { object, id, .. } = &step {
        let (bucket, key) = object
            .as_ref()
            .map_or(("", ""), |(bucket, key)| (bucket.as_str(), key.as_str()));
        let bound = match object {
            Some(_) => match fences.upload_key(bucket, id).await {
                Ok(bound) => bound,
                Err(error) => return store_unavailable(&error.to_string()),
            },
            None => None,
        };
        let refused = match bound {
            Some(bound) => bound != key,
            None => !(allow_unbound && object.is_some()),
        };
        if refused {
            let denied = Denied::new(
                DeniedKind::NoSuchUpload,
                format!(
                    "The specified upload does not exist: the upload id is none the gateway saw created for /{bucket}/{key} (another key's, one begun before the gateway bound upload ids, or none)"
                ),
            );
            return denied.to_response(answers).map(ResponseBody::refusal);
        }
    }
    let response = match fencing.forward_fenced(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    match step {
        UploadStep::Create { bucket, key } if response.status() == StatusCode::OK => {
            Box::pin(bind_created(fencing, response, &bucket, &key)).await
        }
        UploadStep::Named {
            object: Some((bucket, _)),
            id,
            ends: Some(ends),
        } if response.status().is_success() => match ends {
            Ends::Abort => {
                unbind(fencing, &bucket, &id).await;
                response
            }
            Ends::Complete => Box::pin(unbind_completed(fencing, response, &bucket, &id)).await,
        },
        _ => response,
    }
}

/// Forgets the binding of `bucket`'s upload `id`, best effort: one left
/// behind only lets the same id through the same key's path.
async fn unbind(fencing: &Fencing<Proxy>, bucket: &str, id: &str) {
    if let Err(error) = fencing.fences().unbind_upload(bucket, id).await {
        tracing::warn!(bucket, upload_id = id, %error, "an ended upload's binding could not be removed; it stays bound to its own key");
    }
}

/// 503 `fence_store_unavailable`: the binding could not be read or made.
fn store_unavailable(detail: &str) -> Response<ResponseBody<FromProxy>> {
    gateway_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "fence_store_unavailable",
        detail,
        RequestOutcome::FenceStoreUnavailable,
    )
    .map(|body| ResponseBody::inner(FromProxy::from(body), None))
}

/// 502 `upstream_unavailable`: the store's answer could not be read as S3
/// writes it.
fn unreadable(detail: &str) -> Response<ResponseBody<FromProxy>> {
    tracing::warn!(detail, "a multipart upload's answer could not be read");
    gateway_error(
        StatusCode::BAD_GATEWAY,
        "upstream_unavailable",
        detail,
        RequestOutcome::UpstreamError,
    )
    .map(|body| ResponseBody::inner(FromProxy::from(body), None))
}

/// The body of the store's answer in `response`, read whole (at most
/// [`MAX_ANSWER`] bytes), its lines moved into the map; `None` for an
/// answer of the gateway's own.
async fn read_answer(
    response: &mut Response<ResponseBody<FromProxy>>,
) -> Option<Result<bytes::Bytes, String>> {
    let inner = response.body_mut().inner_mut()?;
    let mut body = std::mem::replace(inner, FromProxy::from(Body::empty()));
    // The backend's lines go into the map: the body is replaced by the
    // bytes read, which the lines' framing must not contradict.
    if let Some(fields) = body.take_fields() {
        response
            .headers_mut()
            .extend(end_to_end_map(|| fields.iter()));
    }
    let limited = http_body_util::Limited::new(body, MAX_ANSWER);
    Some(
        http_body_util::BodyExt::collect(limited)
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|e| format!("at most {MAX_ANSWER} bytes: {e}")),
    )
}

/// `response` with `bytes` as its body again.
fn with_body(
    mut response: Response<ResponseBody<FromProxy>>,
    bytes: bytes::Bytes,
) -> Response<ResponseBody<FromProxy>> {
    let headers = response.headers_mut();
    headers.remove(TRANSFER_ENCODING);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    if let Some(inner) = response.body_mut().inner_mut() {
        *inner = FromProxy::from(Body::from(bytes));
    }
    response
}

/// A `CreateMultipartUpload` of `bucket`/`key` answered 200: its upload id
/// bound to `key`, durably, before the answer goes on; 503 if it cannot
/// be (the upload is left at the store, orphaned), 502 if the answer does
/// not read as S3's for this object.
async fn bind_created(
    fencing: &Fencing<Proxy>,
    mut response: Response<ResponseBody<FromProxy>>,
    bucket: &str,
    key: &str,
) -> Response<ResponseBody<FromProxy>> {
    let bytes = match read_answer(&mut response).await {
        None => return response,
        Some(Ok(bytes)) => bytes,
        Some(Err(detail)) => {
            return unreadable(&format!(
                "the store's CreateMultipartUpload answer could not be read whole ({detail})"
            ))
        }
    };
    let created = match created_answer(&bytes) {
        Ok(created) => created,
        Err(detail) => {
            return unreadable(&format!(
                "the store's CreateMultipartUpload answer holds no upload id the gateway can bind: {detail}"
            ))
        }
    };
    let other = |named: &Option<String>, ours: &str| named.as_deref().is_some_and(|n| n != ours);
    if other(&created.bucket, bucket) || other(&created.key, key) {
        return unreadable(&format!(
            "the store created an upload of {:?}/{:?}, not of the path's {bucket:?}/{key:?}",
            created.bucket, created.key
        ));
    }
    if let Err(error) = fencing.fences().bind_upload(bucket, &created.id, key).await {
        tracing::error!(bucket, key, upload_id = created.id, %error, "an upload's binding could not be made; its id is not handed out (the upload stays at the store, orphaned)");
        return store_unavailable(&format!(
            "the upload could not be bound to its key where the fences live ({error}); it was created at the store and is left there unused: begin it again"
        ));
    }
    with_body(response, bytes)
}

/// A `CompleteMultipartUpload` of `bucket`'s upload `id` answered 2xx:
/// its binding goes once the answer reads as a completion (S3 may answer
/// 200 with an `<Error>` in the body, and the upload is then still there).
async fn unbind_completed(
    fencing: &Fencing<Proxy>,
    mut response: Response<ResponseBody<FromProxy>>,
    bucket: &str,
    id: &str,
) -> Response<ResponseBody<FromProxy>> {
    let bytes = match read_answer(&mut response).await {
        None => return response,
        Some(Ok(bytes)) => bytes,
        Some(Err(detail)) => {
            return unreadable(&format!(
                "the store's CompleteMultipartUpload answer could not be read whole ({detail})"
            ))
        }
    };
    if completed_answer(&bytes) {
        unbind(fencing, bucket, id).await;
    }
    with_body(response, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_bucket_and_key_as_s3_reads_them() {
        let read = |path: &str| bucket_and_key(path);
        assert_eq!(read("/b/k"), Some(("b".into(), "k".into())));
        assert_eq!(read("/b/dir/a%20b/"), Some(("b".into(), "dir/a b/".into())));
        assert_eq!(read("/b/a+b"), Some(("b".into(), "a+b".into())));
        assert_eq!(read("/b"), None);
        assert_eq!(read("/b/"), None);
        assert_eq!(read("/"), None);
        assert_eq!(read("/b%2Fc/k"), None);
        assert_eq!(read("/b/%FF"), None);
    }

    fn step(
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
    ) -> Result<Option<UploadStep>, Denied> {
        let mut builder = http::Request::builder().method(method).uri(target);
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        let request = Inbound::from(builder.body(()).unwrap());
        upload_step(&request)
    }

    #[test]
    fn only_requests_that_create_or_name_an_upload_take_a_step() {
        assert_eq!(step("PUT", "/b/k", &[]), Ok(None));
        assert_eq!(step("GET", "/b?uploads", &[]), Ok(None));
        assert_eq!(step("GET", "/b/k?uploads", &[]), Ok(None));
        assert_eq!(step("PUT", "/b/k?tagging", &[]), Ok(None));
        assert_eq!(
            step("POST", "/b/k?uploads", &[]),
            Ok(Some(UploadStep::Create {
                bucket: "b".into(),
                key: "k".into()
            }))
        );
        let named = |object: Option<(&str, &str)>, ends| {
            Ok(Some(UploadStep::Named {
                object: object.map(|(b, k)| (b.into(), k.into())),
                id: "u/1=".into(),
                ends,
            }))
        };
        assert_eq!(
            step("PUT", "/b/k?partNumber=1&uploadId=u%2F1%3D", &[]),
            named(Some(("b", "k")), None)
        );
        // The name percent-encoded, as the operation table reads it.
        assert_eq!(
            step("POST", "/b/k?upload%49d=u%2F1%3D", &[]),
            named(Some(("b", "k")), Some(Ends::Complete))
        );
        assert_eq!(
            step("DELETE", "/b/k?uploadId=u%2F1%3D", &[]),
            named(Some(("b", "k")), Some(Ends::Abort))
        );
        assert_eq!(
            step("DELETE", "/b?uploadId=u%2F1%3D", &[]),
            named(None, Some(Ends::Abort))
        );
        assert!(step("PUT", "/b/k?uploadId=a&uploadId=b", &[]).is_err());
        let form = [("content-type", "application/x-www-form-urlencoded")];
        assert!(step("DELETE", "/b/k?uploadId=a", &form).is_err());
        assert!(step("POST", "/b/k?uploads", &form).is_err());
        assert_eq!(step("PUT", "/b/k", &form), Ok(None));
    }
}
