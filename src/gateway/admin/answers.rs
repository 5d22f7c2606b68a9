//! The admin plane's answers: its refusals in the gateway's one error
//! shape, and the fence key as its paths carry it.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::admin::input::InvalidInput;

/// 400 for a `?namespace=` that names none.
pub(super) fn bad_namespace() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_query",
        "namespace: a route's fence namespace, up to 64 of a-z, A-Z, 0-9, '-', '_', '.'",
    )
}

/// What follows `/fences/` in `uri`'s path, still percent-encoded.
pub(super) fn encoded_key(uri: &Uri) -> &str {
    uri.path().strip_prefix("/fences/").unwrap_or_default()
}

/// The 400 answer to an admin input refused.
pub(super) fn invalid(input: &InvalidInput) -> Response {
    error(StatusCode::BAD_REQUEST, input.code(), &input.to_string())
}

/// An admin answer in the gateway's one error shape.
pub(super) fn error(status: StatusCode, code: &str, detail: &str) -> Response {
    crate::refusal::error_response(status, code, detail)
        .map(axum::body::Body::from)
        .into_response()
}

/// An admin answer with a JSON body of its own (more fields than `detail`).
pub(super) fn json_error(status: StatusCode, body: &serde_json::Value) -> Response {
    crate::refusal::json_response(status, body)
        .map(axum::body::Body::from)
        .into_response()
}
