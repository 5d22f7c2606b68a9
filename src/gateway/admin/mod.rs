//! The admin plane, on its own listener: fence lookups, metrics, liveness
//! and readiness; with `--admin-token-file`, bearer authentication
//! ([`auth`]) and admin writes with their audit log (`writes`). The
//! handlers share `state.rs` (the plane's state, readiness) and
//! `answers.rs` (its refusals); this file holds the router and the reads.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::metrics::Metrics;
use super::reload::ConfigReloader;
use crate::admin::input::{fence_key, ListQuery};
use crate::key::Scope;
use crate::Fences;

mod answers;
pub(crate) mod auth;
mod state;
mod writes;

pub(crate) use self::auth::AdminToken;
pub(crate) use self::state::Readiness;

use self::answers::{bad_namespace, encoded_key, error, invalid};
use self::state::Admin;
pub use super::error::AdminTokenError;

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
    config: ConfigReloader,
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
        .route("/config", get(show_config))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such admin route") })
        .with_state(Admin {
            fences,
            config,
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
    body["generation"] = json!(admin.config.generation());
    (status, Json(body)).into_response()
}

/// `GET /config`: the effective configuration and its generation. Only
/// behind the admin token: it names identities, keys and upstreams
/// (secrets, URL user-info and queries are masked already).
async fn show_config(State(admin): State<Admin>) -> Response {
    if !admin.writes_enabled {
        return error(
            StatusCode::FORBIDDEN,
            "config_needs_admin_token",
            "GET /config is served only with --admin-token-file set (it names identities, keys and upstreams)",
        );
    }
    Json(json!({
        "generation": admin.config.generation(),
        "configuration": admin.config.shown(),
    }))
    .into_response()
}

/// `GET /fences/{key}`, key percent-encoded. Read from the raw URI rather
/// than a path extractor: an encoded key starts with `%2F`, an unencoded one
/// with `/`, and both must find the same fence.
async fn one_fence(State(admin): State<Admin>, uri: Uri) -> Response {
    let key = match fence_key(encoded_key(&uri)) {
        Ok(key) => key,
        Err(e) => return invalid(&e),
    };
    let fences = match admin.namespaced(uri.query()) {
        Some((fences, _)) => fences,
        None => return bad_namespace(),
    };
    match fences.highest_anywhere(&key).await {
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "fence_store_unavailable",
            &format!("cannot read the fence of {key:?}: {e}"),
        ),
        Ok(Some(highest)) => Json(json!({ "resource": key, "highest": highest })).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "unknown_fence",
            &format!("no fence for {key:?}"),
        ),
    }
}

/// `GET /fences?prefix=P&limit=N`, sorted by key.
async fn list_fences(State(admin): State<Admin>, RawQuery(query): RawQuery) -> Response {
    let (fences, query) = match admin.namespaced(query.as_deref()) {
        Some(namespaced) => namespaced,
        None => return bad_namespace(),
    };
    let query = match ListQuery::parse(query.as_deref()) {
        Ok(query) => query,
        Err(e) => return invalid(&e),
    };
    let listed = match fences.list_anywhere(&query.prefix, query.limit).await {
        Ok(listed) => listed,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "fence_store_unavailable",
                &format!("cannot list fences: {e}"),
            )
        }
    };
    let fences: Vec<_> = listed
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
