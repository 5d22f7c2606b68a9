//! The admin plane, on its own listener: fence lookups, metrics, liveness
//! and readiness; with `--admin-token-file`, bearer authentication
//! ([`auth`]) and admin writes with their audit log (`writes`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::metrics::Metrics;
use crate::key::Scope;
use crate::Fences;

pub(crate) mod auth;
mod writes;

pub(crate) use self::auth::AdminToken;
pub use self::auth::AdminTokenError;

/// The default and largest page of `GET /fences`.
const DEFAULT_LIMIT: usize = 1000;

#[derive(Clone)]
struct Admin {
    fences: Fences,
    metrics: Metrics,
    readiness: Readiness,
    scope: Scope,
    writes_enabled: bool,
}

/// Whether the gateway can admit requests (`GET /readyz`): it is not
/// draining, and its fence store can be written.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    fences: Fences,
    draining: Arc<AtomicBool>,
    /// With shared fences, this instance's name, in every answer.
    instance: Option<Arc<str>>,
}

impl Readiness {
    /// Ready while the fence store of `fences` is healthy, until
    /// [`Readiness::set_draining`].
    pub(crate) fn new(fences: Fences, instance: Option<String>) -> Self {
        Readiness {
            fences,
            draining: Arc::new(AtomicBool::new(false)),
            instance: instance.map(Into::into),
        }
    }

    /// The gateway is shutting down: not ready from now on.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// `Ok` when ready, else why not.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.draining.load(Ordering::Acquire) {
            return Err("draining: the gateway is shutting down".into());
        }
        self.fences
            .store_health()
            .map_err(|e| format!("fence store: {e}"))
    }
}

/// The admin routes. With a `token`, every route but `/healthz` and
/// `/readyz` needs it, and admin writes are enabled; without, the plane is
/// read-only. `scope` is the data plane's, against which the keys of admin
/// writes are checked. Requests must carry the client's address as an
/// extension (`SocketAddr`), the actor of the audit log.
pub(crate) fn router(
    fences: Fences,
    metrics: Metrics,
    readiness: Readiness,
    scope: Scope,
    token: Option<AdminToken>,
) -> Router {
    let routes = Router::new()
        .route("/fences", get(list_fences))
        .route("/fences/", get(list_fences))
        .route(
            "/fences/{*key}",
            get(one_fence)
                .put(writes::put_fence)
                .delete(writes::delete_fence),
        )
        .route("/audit", get(writes::audit))
        .route("/metrics", get(metrics_text))
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .route("/readyz", get(ready))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such admin route") })
        .with_state(Admin {
            fences,
            metrics,
            readiness,
            scope,
            writes_enabled: token.is_some(),
        });
    match token {
        Some(token) => routes.layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_bearer,
        )),
        None => routes,
    }
}

/// `GET /readyz`: 200 `{"status":"ready"}`, or 503 with the reason.
async fn ready(State(admin): State<Admin>) -> Response {
    let (status, mut body) = match admin.readiness.check() {
        Ok(()) => (StatusCode::OK, json!({ "status": "ready" })),
        Err(detail) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "not_ready", "detail": detail }),
        ),
    };
    if let Some(instance) = &admin.readiness.instance {
        body["instance"] = json!(instance.as_ref());
    }
    (status, Json(body)).into_response()
}

/// The fence key of a `/fences/{key}` URI, percent-decoded.
fn key_of(uri: &Uri) -> Result<String, String> {
    let raw = uri.path().strip_prefix("/fences/").unwrap_or_default();
    match percent_encoding::percent_decode_str(raw).decode_utf8() {
        Ok(key) if key.is_empty() => Err("no key after /fences/".to_owned()),
        Ok(key) => Ok(key.into_owned()),
        Err(_) => Err("the key is not UTF-8".to_owned()),
    }
}

/// An admin answer in the gateway's one error shape.
fn error(status: StatusCode, code: &str, detail: &str) -> Response {
    crate::refusal::error_response(status, code, detail)
        .map(axum::body::Body::from)
        .into_response()
}

/// An admin answer with a JSON body of its own (more fields than `detail`).
fn json_error(status: StatusCode, body: &serde_json::Value) -> Response {
    crate::refusal::json_response(status, body)
        .map(axum::body::Body::from)
        .into_response()
}

/// `GET /fences/{key}`, key percent-encoded. Read from the raw URI rather
/// than a path extractor: an encoded key starts with `%2F`, an unencoded one
/// with `/`, and both must find the same fence.
async fn one_fence(State(admin): State<Admin>, uri: Uri) -> Response {
    let key = match key_of(&uri) {
        Ok(key) => key,
        Err(detail) => return error(StatusCode::BAD_REQUEST, "invalid_key", &detail),
    };
    match admin.fences.highest(&key) {
        Some(highest) => Json(json!({ "resource": key, "highest": highest })).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "unknown_fence",
            &format!("no fence for {key:?}"),
        ),
    }
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    limit: Option<String>,
}

/// `GET /fences?prefix=P&limit=N`, sorted by key.
async fn list_fences(
    State(admin): State<Admin>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            "expected ?prefix=P&limit=N",
        );
    };
    let limit = match query.limit.as_deref().map(str::parse::<usize>) {
        None => DEFAULT_LIMIT,
        Some(Ok(limit)) => limit,
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "limit must be a non-negative integer",
            )
        }
    };
    let fences: Vec<_> = admin
        .fences
        .list(&query.prefix, limit)
        .into_iter()
        .map(|(resource, highest)| json!({ "resource": resource, "highest": highest }))
        .collect();
    Json(json!({ "fences": fences })).into_response()
}

async fn metrics_text(State(admin): State<Admin>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        admin.metrics.render(),
    )
        .into_response()
}
