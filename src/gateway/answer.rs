//! The gateway's own answers, made one way: a JSON error marked with its
//! outcome ([`gateway_error`]), the connection closed after it where the
//! rest of a request cannot be told from the next ([`close_after`]), and
//! any answer the gateway made put in the route's dialect on its way out
//! ([`in_dialect`]). Custody's refusals (`custody/denied.rs`) and the
//! fencing layer's (`crate::refusal`) arrive here as an [`OwnAnswer`] too.

use axum::body::Body;
use http::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::body::response::FromProxy;
use super::outcome::RequestOutcome;
use crate::dialect::answer::{restyle, AnswerStyle};
use crate::fencing::ResponseBody;
use crate::refusal::{error_response, OwnAnswer};

/// A JSON answer made by the gateway, as `Response<Body>`, marked with its
/// outcome.
pub(crate) fn gateway_error(
    status: StatusCode,
    error: &str,
    detail: &str,
    outcome: RequestOutcome,
) -> Response<Body> {
    let mut response = error_response(status, error, detail).map(Body::from);
    response.extensions_mut().insert(outcome);
    response
}

/// Asks the server to close the client connection after this answer: the
/// rest of a request body that failed cannot be told from the next request.
pub(crate) fn close_after(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// An answer the gateway made itself ([`OwnAnswer`] in its extensions),
/// made again in `style`: an S3 or Azure error document, so that an SDK
/// shows the SPEC's error name and a sentence instead of a bare status.
/// Status, `X-Fencing-Highest` and the rest of the head stay.
pub(crate) fn in_dialect(response: &mut Response<ResponseBody<FromProxy>>, style: AnswerStyle) {
    let Some(own) = response.extensions().get::<OwnAnswer>() else {
        return;
    };
    let Some(restyled) = restyle(style, &own.json, &own.message) else {
        return;
    };
    *response.body_mut() = ResponseBody::refusal(restyled.body);
    let headers = response.headers_mut();
    headers.remove(CONTENT_LENGTH);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(restyled.content_type),
    );
    for (name, value) in restyled.headers {
        headers.insert(name, value);
    }
}
