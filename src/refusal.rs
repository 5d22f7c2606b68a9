//! The answers fencegate makes itself: JSON bodies with an `error` code, as
//! the contract lists them. Refusals are responses, never connection errors,
//! so a client always learns why.
//!
//! ```
//! use fencegate::refusal::Refusal;
//! use fencegate::{Stale, StaleReason};
//!
//! let refusal = Refusal::Stale {
//!     resource: "/bucket/report".into(),
//!     stale: Stale { token: 33, highest: 34, reason: StaleReason::BelowHighest },
//! };
//! let response = refusal.to_response();
//! assert_eq!(response.status(), 409);
//! assert_eq!(response.headers()["x-fencing-highest"], "34");
//! let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
//! assert_eq!(body["error"], "stale_token");
//! assert_eq!(body["reason"], "below_highest");
//! ```

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::json;

use crate::fences::Stale;

/// The header carrying the fence's highest token on a 409.
pub const HIGHEST_HEADER: HeaderName = HeaderName::from_static("x-fencing-highest");

/// Why the fencing layer refused a request. A copy is put in the response's
/// extensions, so that outer layers (metrics, logs) can tell refusals apart
/// without parsing bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 400 `invalid_token`: the token header is malformed or repeated, or
    /// `X-Fencing-Lock` is missing or bad in header scope.
    InvalidToken {
        /// What exactly is wrong.
        detail: String,
    },
    /// 400 `invalid_path`: the path climbs above the root or is not UTF-8.
    InvalidPath {
        /// What exactly is wrong.
        detail: String,
    },
    /// 400 `unfenceable_write`: a write that changes objects the gateway
    /// cannot determine (see [`crate::reach`]).
    Unfenceable {
        /// Why.
        detail: String,
    },
    /// 428 `missing_token`: a write without a token.
    MissingToken {
        /// The fence key the write would have needed a token for.
        resource: String,
    },
    /// 409 `stale_token`: below the highest, or overtaken while waiting.
    Stale {
        /// The fence key.
        resource: String,
        /// Token, highest and reason.
        stale: Stale,
    },
    /// 503 `fence_store_unavailable`: the new highest could not be made
    /// durable; nothing was forwarded.
    StoreUnavailable {
        /// The store's error.
        detail: String,
    },
    /// 403 `token_not_issued`: the token would raise the fence, and is
    /// above the highest its issuer has handed out.
    TokenNotIssued {
        /// The fence key.
        resource: String,
        /// The token the request carried.
        token: u64,
        /// The issuer's bound.
        issued: u64,
    },
    /// 503 `token_issuer_unavailable`: the issuer could not be asked in
    /// time; nothing was forwarded.
    IssuerUnavailable {
        /// Why.
        detail: String,
    },
    /// 409 `version_conflict`: the store refused the condition the gateway
    /// added to a chained write ([`crate::chain`]).
    VersionConflict {
        /// The fence key.
        resource: String,
        /// The object the write was chained on.
        object: String,
        /// The write's token.
        token: u64,
        /// No higher token was admitted meanwhile: the object changed under
        /// an older, an equal-token or an unfenced write, and a retry with
        /// the same token (after a fenced `HEAD`) may go through.
        retry: bool,
    },
    /// 428 `version_unknown`: a chained write whose object's version the
    /// gateway does not know; a fenced `HEAD` of the object teaches it.
    VersionUnknown {
        /// The fence key.
        resource: String,
        /// The object.
        object: String,
    },
    /// 428 `precondition_not_chainable`: the client's own precondition on a
    /// chained write names no single version.
    PreconditionNotChainable {
        /// Why it cannot stand for the chain.
        detail: String,
    },
    /// 400 `unchainable_write`: a chained write whose signature covers the
    /// condition headers (Azure `SharedKey`) and that carries no condition
    /// of its own: the gateway cannot add one.
    Unchainable {
        /// Why.
        detail: String,
    },
    /// 429 `new_fence_limit`: the key has no fence yet, and the client
    /// (identity, or IP address) made new fences faster than
    /// `--new-fence-rate` allows; `Retry-After` says when it may.
    NewFenceLimit {
        /// Who, the limit, and what was asked.
        detail: String,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// 503 `version_unavailable`: the gateway's own `HEAD` of the object
    /// failed, so the write cannot be chained; nothing was forwarded.
    VersionUnavailable {
        /// Why.
        detail: String,
    },
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::InvalidToken { .. }
            | Refusal::InvalidPath { .. }
            | Refusal::Unfenceable { .. }
            | Refusal::Unchainable { .. } => StatusCode::BAD_REQUEST,
            Refusal::MissingToken { .. }
            | Refusal::VersionUnknown { .. }
            | Refusal::PreconditionNotChainable { .. } => StatusCode::PRECONDITION_REQUIRED,
            Refusal::Stale { .. } | Refusal::VersionConflict { .. } => StatusCode::CONFLICT,
            Refusal::TokenNotIssued { .. } => StatusCode::FORBIDDEN,
            Refusal::NewFenceLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::StoreUnavailable { .. }
            | Refusal::IssuerUnavailable { .. }
            | Refusal::VersionUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `error` code of the body (also the metrics outcome).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::InvalidToken { .. } => "invalid_token",
            Refusal::InvalidPath { .. } => "invalid_path",
            Refusal::Unfenceable { .. } => "unfenceable_write",
            Refusal::MissingToken { .. } => "missing_token",
            Refusal::Stale { .. } => "stale_token",
            Refusal::StoreUnavailable { .. } => "fence_store_unavailable",
            Refusal::TokenNotIssued { .. } => "token_not_issued",
            Refusal::IssuerUnavailable { .. } => "token_issuer_unavailable",
            Refusal::VersionConflict { .. } => "version_conflict",
            Refusal::VersionUnknown { .. } => "version_unknown",
            Refusal::PreconditionNotChainable { .. } => "precondition_not_chainable",
            Refusal::VersionUnavailable { .. } => "version_unavailable",
            Refusal::Unchainable { .. } => "unchainable_write",
            Refusal::NewFenceLimit { .. } => "new_fence_limit",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let error = self.code();
        match self {
            Refusal::InvalidToken { detail }
            | Refusal::InvalidPath { detail }
            | Refusal::Unfenceable { detail }
            | Refusal::StoreUnavailable { detail }
            | Refusal::IssuerUnavailable { detail }
            | Refusal::PreconditionNotChainable { detail }
            | Refusal::VersionUnavailable { detail }
            | Refusal::Unchainable { detail } => {
                json!({ "error": error, "detail": detail })
            }
            Refusal::VersionConflict {
                resource,
                object,
                token,
                retry,
            } => json!({
                "error": error,
                "resource": resource,
                "object": object,
                "token": token,
                "retry": retry,
            }),
            Refusal::VersionUnknown { resource, object } => json!({
                "error": error,
                "resource": resource,
                "object": object,
            }),
            Refusal::MissingToken { resource } => json!({ "error": error, "resource": resource }),
            Refusal::Stale { resource, stale } => json!({
                "error": error,
                "resource": resource,
                "token": stale.token,
                "highest": stale.highest,
                "reason": stale.reason.as_str(),
            }),
            Refusal::NewFenceLimit {
                detail,
                retry_after,
            } => json!({ "error": error, "detail": detail, "retry_after": retry_after }),
            Refusal::TokenNotIssued {
                resource,
                token,
                issued,
            } => json!({
                "error": error,
                "resource": resource,
                "token": token,
                "issued": issued,
            }),
        }
    }

    /// One sentence saying what happened, for a person (the `Message` of
    /// an answer in a store's dialect, where SDKs show it).
    pub fn message(&self) -> String {
        match self {
            Refusal::InvalidToken { detail }
            | Refusal::InvalidPath { detail }
            | Refusal::Unfenceable { detail }
            | Refusal::StoreUnavailable { detail }
            | Refusal::IssuerUnavailable { detail }
            | Refusal::PreconditionNotChainable { detail }
            | Refusal::VersionUnavailable { detail }
            | Refusal::Unchainable { detail }
            | Refusal::NewFenceLimit { detail, .. } => detail.clone(),
            Refusal::MissingToken { resource } => {
                format!("a write to {resource} must carry a fencing token")
            }
            Refusal::Stale { resource, stale } => match stale.reason {
                crate::fences::StaleReason::BelowHighest => format!(
                    "token {} is below the highest {} admitted for {resource}",
                    stale.token, stale.highest
                ),
                crate::fences::StaleReason::Overtaken => format!(
                    "token {} was overtaken by {} on {resource} while it waited",
                    stale.token, stale.highest
                ),
            },
            Refusal::TokenNotIssued {
                resource,
                token,
                issued,
            } => format!(
                "token {token} for {resource} is above the highest its issuer handed out ({issued})"
            ),
            Refusal::VersionConflict {
                object,
                token,
                retry,
                ..
            } => {
                if *retry {
                    format!("the store refused the write of {object} with token {token}: the object changed under an older or equal token; a retry may go through")
                } else {
                    format!("the store refused the write of {object} with token {token}: a higher token wrote meanwhile")
                }
            }
            Refusal::VersionUnknown { object, .. } => format!(
                "the version of {object} is not known to the gateway; send a fenced HEAD of it first"
            ),
        }
    }

    /// The full response: status, JSON body, `X-Fencing-Highest` on a 409,
    /// and a copy of `self` and of the answer ([`OwnAnswer`]) in the
    /// extensions.
    pub fn to_response(&self) -> Response<Bytes> {
        let body = self.body();
        let mut response = json_response(self.status(), &body);
        if let Refusal::Stale { stale, .. } = self {
            response
                .headers_mut()
                .insert(HIGHEST_HEADER, HeaderValue::from(stale.highest));
        }
        if let Refusal::NewFenceLimit { retry_after, .. } = self {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        response.extensions_mut().insert(self.clone());
        response.extensions_mut().insert(OwnAnswer {
            json: body,
            message: self.message(),
        });
        response
    }
}

/// A copy of an answer the gateway made itself, in that response's
/// extensions: what a store's dialect renders again in its own shape
/// (`--store s3`: an S3 error document).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnAnswer {
    /// The JSON body, `error` first among its fields.
    pub json: serde_json::Value,
    /// One sentence for a person.
    pub message: String,
}

/// A gateway answer with an `error` code and a `detail`, the common shape
/// of the answers the proxy and the admin plane make (with an
/// [`OwnAnswer`] in its extensions).
pub fn error_response(status: StatusCode, error: &str, detail: &str) -> Response<Bytes> {
    let body = json!({ "error": error, "detail": detail });
    let mut response = json_response(status, &body);
    response.extensions_mut().insert(OwnAnswer {
        json: body,
        message: detail.to_owned(),
    });
    response
}

/// A JSON response with `Content-Type: application/json`, for every answer
/// the gateway makes itself (also 502 and 504, outside the layer).
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
