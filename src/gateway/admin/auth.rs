//! Bearer authentication of the admin plane (`--admin-token-file`).

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;
use subtle::ConstantTimeEq;

use super::super::error::AdminTokenError;

/// The admin plane's bearer token, read once at start.
#[derive(Clone)]
pub(crate) struct AdminToken(Arc<[u8]>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token in `path`: the file's content, surrounding whitespace
    /// trimmed.
    pub(crate) fn read(path: &Path) -> Result<Self, AdminTokenError> {
        let shown = path.display().to_string();
        let text = crate::client_tls::read_text_bounded(path).map_err(|source| {
            AdminTokenError::Unreadable {
                path: shown.clone(),
                source,
            }
        })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(AdminTokenError::Unusable {
                path: shown,
                problem: "is empty",
            });
        }
        // RFC 6750's token68 is narrower; anything a header can carry after
        // "Bearer " without a space works, and a token with a space or a
        // control character could never be sent.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminTokenError::Unusable {
                path: shown,
                problem: "holds a space or a character that is not printable ASCII",
            });
        }
        Ok(AdminToken(token.as_bytes().into()))
    }

    /// Whether `authorization` (an `Authorization` header) carries the
    /// token. The comparison takes the same time wherever the first
    /// difference is; only the token's length can be learnt from timing.
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.map(HeaderValue::as_bytes) else {
            return false;
        };
        // The scheme is case-insensitive (RFC 9110 §11.1).
        let Some((scheme, credentials)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(credentials.ct_eq(&self.0))
    }
}

/// Paths a load balancer or an orchestrator probes without credentials.
const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Middleware: every admin request but the probes carries the token, else
/// 401 with `WWW-Authenticate: Bearer`.
pub(crate) async fn require_bearer(
    State(token): State<AdminToken>,
    request: Request,
    next: Next,
) -> Response {
    if OPEN_PATHS.contains(&request.uri().path())
        || token.admits(request.headers().get(header::AUTHORIZATION))
    {
        return next.run(request).await;
    }
    let mut response = super::answers::json_error(
        StatusCode::UNAUTHORIZED,
        &json!({ "error": "unauthorized" }),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> AdminToken {
        AdminToken(text.as_bytes().into())
    }

    #[test]
    fn only_the_exact_token_after_bearer_is_admitted() {
        let t = token("s3cret-token");
        let header = |v: &str| HeaderValue::from_str(v).unwrap();
        assert!(t.admits(Some(&header("Bearer s3cret-token"))));
        assert!(t.admits(Some(&header("bearer s3cret-token"))));
        assert!(!t.admits(Some(&header("Bearer s3cret-toke"))));
        assert!(!t.admits(Some(&header("Bearer s3cret-token2"))));
        assert!(!t.admits(Some(&header("Basic s3cret-token"))));
        assert!(!t.admits(Some(&header("Bearer"))));
        assert!(!t.admits(None));
    }

    #[test]
    fn an_empty_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, " \n").unwrap();
        assert!(matches!(
            AdminToken::read(&path),
            Err(AdminTokenError::Unusable { .. })
        ));
        std::fs::write(&path, "abc def\n").unwrap();
        assert!(AdminToken::read(&path).is_err());
        std::fs::write(&path, "  abc\n").unwrap();
        assert!(AdminToken::read(&path)
            .unwrap()
            .admits(Some(&HeaderValue::from_static("Bearer abc"))));
        assert!(AdminToken::read(&dir.path().join("missing")).is_err());
    }
}
