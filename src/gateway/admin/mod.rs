//! The admin plane, on its own listener: fence lookups, metrics, liveness
//! and readiness; with `--admin-token-file`, bearer authentication
//! ([`auth`]) and admin writes with their audit log (`writes`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::metrics::Metrics;
use super::reload::ConfigReloader;
use crate::admin::input::{fence_key, InvalidInput, ListQuery};
use crate::key::Scope;
use crate::Fences;

pub(crate) mod auth;
mod writes;

pub(crate) use self::auth::AdminToken;
pub use super::error::AdminTokenError;

#[derive(Clone)]
struct Admin {
    /// The default namespace's view; `?namespace=NAME` picks another.
    fences: Fences,
    /// The configuration in force: its generation, and what `GET /config`
    /// shows.
    config: ConfigReloader,
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

impl Admin {
    /// The fences of the namespace `?namespace=NAME` of `query` names
    /// (the default without it), and the query without that parameter.
    /// `None` (answer [`bad_namespace`]) if the name is not one.
    fn namespaced(&self, query: Option<&str>) -> Option<(Fences, Option<String>)> {
        let Some(query) = query else {
            return Some((self.fences.clone(), None));
        };
        let mut namespace = None;
        let mut rest = Vec::new();
        for pair in query.split('&') {
            match pair.strip_prefix("namespace=") {
                Some(name) => namespace = Some(name.to_owned()),
                None => rest.push(pair),
            }
        }
        let fences = match namespace {
            None => self.fences.clone(),
            Some(name) => {
                let valid = name.len() <= 64
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !valid {
                    return None;
                }
                self.fences.namespace(&name)
            }
        };
        let rest = rest.join("&");
        Some((fences, (!rest.is_empty()).then_some(rest)))
    }
}

impl Admin {
    /// The key scope of `fences`' namespace: its route's, else the
    /// gateway's.
    fn scope_of(&self, fences: &Fences) -> Scope {
        self.config
            .scope_of(fences.namespace_name())
            .unwrap_or(self.scope)
    }
}

/// 400 for a `?namespace=` that names none.
fn bad_namespace() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_query",
        "namespace: a route's fence namespace, up to 64 of a-z, A-Z, 0-9, '-', '_', '.'",
    )
}

/// What follows `/fences/` in `uri`'s path, still percent-encoded.
fn encoded_key(uri: &Uri) -> &str {
    uri.path().strip_prefix("/fences/").unwrap_or_default()
}

/// The 400 answer to an admin input refused.
fn invalid(input: &InvalidInput) -> Response {
    error(StatusCode::BAD_REQUEST, input.code(), &input.to_string())
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
    let key = match fence_key(encoded_key(&uri)) {
        Ok(key) => key,
        Err(e) => return invalid(&e),
    };
    let fences = match admin.namespaced(uri.query()) {
        Some((fences, _)) => fences,
        None => return bad_namespace(),
    };
    match fences.highest(&key) {
        Some(highest) => Json(json!({ "resource": key, "highest": highest })).into_response(),
        None => error(
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
    let fences: Vec<_> = fences
        .list(&query.prefix, query.limit)
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
