//! A request custody refuses, and its answer in the store's dialect: S3's
//! own error codes (`InvalidAccessKeyId`, `SignatureDoesNotMatch`,
//! `RequestTimeTooSkewed`, `AccessDenied`, `AuthorizationHeaderMalformed`)
//! as S3 error documents; for `webdav` and `http`, 401
//! `unauthenticated` with `WWW-Authenticate` and 403 `forbidden` in the
//! SPEC's JSON. Nothing about fences is in any of them.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use serde_json::json;

use crate::dialect::answer::{restyle, AnswerStyle};
use crate::dialect::azure_operations::Unsupported;
use crate::gateway::outcome::RequestOutcome;
use crate::refusal::json_response;

/// Why custody refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denied {
    pub(crate) kind: DeniedKind,
    /// For a person (the S3 document's `Message`, the JSON's `detail`).
    pub(crate) message: String,
}

/// The kinds of refusal, each with its S3 code and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeniedKind {
    /// No identity has this key id (403 `InvalidAccessKeyId`).
    UnknownKey,
    /// The signature does not verify (403 `SignatureDoesNotMatch`).
    BadSignature,
    /// `x-amz-date` more than 15 minutes off (403 `RequestTimeTooSkewed`).
    Skewed,
    /// Malformed or unsupported credentials (400
    /// `AuthorizationHeaderMalformed`).
    Malformed,
    /// Credentials missing where they are needed, a presigned URL expired,
    /// an unsigned header the gateway will not sign for (403
    /// `AccessDenied`; in `webdav`/`http`, 401 `unauthenticated`).
    Unauthenticated,
    /// Authenticated, but not allowed to touch `object` (403
    /// `AccessDenied`; `forbidden` in JSON).
    Forbidden { object: String },
    /// A request custody cannot make safe to sign (a key with a `..`
    /// segment, a `Host` naming no bucket): 400 `invalid_path`.
    InvalidPath,
    /// An operation, sub-resource, parameter or field the gateway does not
    /// read (S3: 501 `NotImplemented`; JSON: 501 `not_implemented`).
    NotImplemented,
    /// A field the gateway must read that does not parse by its grammar
    /// (a WebDAV `If` or `Lock-Token`): 400 `bad_request`, nothing
    /// forwarded.
    BadRequest,
    /// An Azure request the operation table does not read
    /// ([`azure_operations`](crate::dialect::azure_operations)): Azure's own
    /// code for what was not understood (400 `UnsupportedQueryParameter`,
    /// `UnsupportedHeader`, `InvalidQueryParameterValue`; 405
    /// `UnsupportedHttpVerb`); in S3's dialect and JSON as
    /// [`DeniedKind::NotImplemented`].
    Unsupported(Unsupported),
    /// An S3 upload id that is not one the gateway handed out for the
    /// request's bucket and key (`upload_ids.rs`): 404 `NoSuchUpload`
    /// (JSON: 404 `no_such_upload`), nothing forwarded.
    NoSuchUpload,
}

impl Denied {
    pub(crate) fn new(kind: DeniedKind, message: impl Into<String>) -> Self {
        Denied {
            kind,
            message: message.into(),
        }
    }

    /// What `fencegate_requests_total` counts it as.
    pub(crate) fn outcome(&self) -> RequestOutcome {
        match self.kind {
            DeniedKind::Forbidden { .. } => RequestOutcome::Forbidden,
            DeniedKind::InvalidPath => RequestOutcome::InvalidPath,
            DeniedKind::NotImplemented
            | DeniedKind::BadRequest
            | DeniedKind::Unsupported(_)
            | DeniedKind::NoSuchUpload => RequestOutcome::OtherRefusal,
            _ => RequestOutcome::Unauthenticated,
        }
    }

    /// The answer in `style`, with its outcome in the extensions.
    pub(crate) fn to_response(&self, style: AnswerStyle) -> Response<Bytes> {
        let mut response = match style {
            AnswerStyle::S3 | AnswerStyle::Azure => self.in_store_dialect(style),
            AnswerStyle::Json => self.in_json(),
        };
        response.extensions_mut().insert(self.outcome());
        response
    }

    fn in_store_dialect(&self, style: AnswerStyle) -> Response<Bytes> {
        let (status, code) = match (&self.kind, style) {
            // Azure answers every credential it cannot take with one code.
            (DeniedKind::Forbidden { .. }, AnswerStyle::Azure) => {
                (StatusCode::FORBIDDEN, "AuthorizationPermissionMismatch")
            }
            (DeniedKind::InvalidPath, _) => (StatusCode::BAD_REQUEST, "invalid_path"),
            (DeniedKind::BadRequest, AnswerStyle::Azure) => {
                (StatusCode::BAD_REQUEST, "InvalidHeaderValue")
            }
            (DeniedKind::NotImplemented, AnswerStyle::Azure) => {
                (StatusCode::BAD_REQUEST, "UnsupportedQueryParameter")
            }
            (DeniedKind::Unsupported(what), AnswerStyle::Azure) => (
                StatusCode::from_u16(what.status()).unwrap_or(StatusCode::BAD_REQUEST),
                what.code(),
            ),
            (_, AnswerStyle::Azure) => (StatusCode::FORBIDDEN, "AuthenticationFailed"),
            (kind, _) => s3_code(kind),
        };
        let mut fields = json!({ "error": code });
        if let DeniedKind::Forbidden { object } = &self.kind {
            fields["object"] = json!(object);
        }
        let Some(restyled) = restyle(style, &fields, &self.message) else {
            return self.in_json();
        };
        let mut response = Response::new(restyled.body);
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(restyled.content_type),
        );
        for (name, value) in restyled.headers {
            headers.insert(name, value);
        }
        response
    }

    fn in_json(&self) -> Response<Bytes> {
        match &self.kind {
            DeniedKind::Forbidden { object } => json_response(
                StatusCode::FORBIDDEN,
                &json!({ "error": "forbidden", "object": object, "detail": self.message }),
            ),
            DeniedKind::InvalidPath => json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "invalid_path", "detail": self.message }),
            ),
            DeniedKind::NotImplemented | DeniedKind::Unsupported(_) => json_response(
                StatusCode::NOT_IMPLEMENTED,
                &json!({ "error": "not_implemented", "detail": self.message }),
            ),
            DeniedKind::BadRequest => json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "bad_request", "detail": self.message }),
            ),
            DeniedKind::NoSuchUpload => json_response(
                StatusCode::NOT_FOUND,
                &json!({ "error": "no_such_upload", "detail": self.message }),
            ),
            _ => {
                let mut response = json_response(
                    StatusCode::UNAUTHORIZED,
                    &json!({ "error": "unauthenticated", "detail": self.message }),
                );
                response.headers_mut().insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static(
                        "Basic realm=\"fencegate\", Bearer realm=\"fencegate\"",
                    ),
                );
                response
            }
        }
    }
}

/// S3's status and code for `kind`.
fn s3_code(kind: &DeniedKind) -> (StatusCode, &'static str) {
    match kind {
        DeniedKind::UnknownKey => (StatusCode::FORBIDDEN, "InvalidAccessKeyId"),
        DeniedKind::BadSignature => (StatusCode::FORBIDDEN, "SignatureDoesNotMatch"),
        DeniedKind::Skewed => (StatusCode::FORBIDDEN, "RequestTimeTooSkewed"),
        DeniedKind::Malformed => (StatusCode::BAD_REQUEST, "AuthorizationHeaderMalformed"),
        DeniedKind::Unauthenticated | DeniedKind::Forbidden { .. } => {
            (StatusCode::FORBIDDEN, "AccessDenied")
        }
        DeniedKind::InvalidPath => (StatusCode::BAD_REQUEST, "invalid_path"),
        DeniedKind::NotImplemented | DeniedKind::Unsupported(_) => {
            (StatusCode::NOT_IMPLEMENTED, "NotImplemented")
        }
        DeniedKind::BadRequest => (StatusCode::BAD_REQUEST, "InvalidArgument"),
        DeniedKind::NoSuchUpload => (StatusCode::NOT_FOUND, "NoSuchUpload"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_codes_and_json_shapes() {
        let denied = Denied::new(DeniedKind::BadSignature, "the signature does not match");
        let s3 = denied.to_response(AnswerStyle::S3);
        assert_eq!(s3.status(), 403);
        let text = std::str::from_utf8(s3.body()).unwrap();
        assert!(
            text.contains("<Code>SignatureDoesNotMatch</Code>"),
            "{text}"
        );
        assert!(s3.headers().get("x-fencing-highest").is_none());
        let json = denied.to_response(AnswerStyle::Json);
        assert_eq!(json.status(), 401);
        assert!(json.headers().contains_key(WWW_AUTHENTICATE));
        let forbidden = Denied::new(
            DeniedKind::Forbidden {
                object: "/b/k".into(),
            },
            "no",
        );
        let json = forbidden.to_response(AnswerStyle::Json);
        assert_eq!(json.status(), 403);
        let body: serde_json::Value = serde_json::from_slice(json.body()).unwrap();
        assert_eq!(body["error"], "forbidden");
        assert_eq!(body["object"], "/b/k");
        let s3 = forbidden.to_response(AnswerStyle::S3);
        assert!(std::str::from_utf8(s3.body())
            .unwrap()
            .contains("<Code>AccessDenied</Code>"));
        assert_eq!(
            s3.extensions().get::<RequestOutcome>(),
            Some(&RequestOutcome::Forbidden)
        );
    }
}
