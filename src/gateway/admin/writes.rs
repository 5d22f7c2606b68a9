//! Admin writes (`PUT` and `DELETE /fences/{key}`) and the audit log
//! (`GET /audit`).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::answers::{bad_namespace, encoded_key, error, invalid, json_error};
use super::state::Admin;
use crate::admin::audit::AuditEntry;
use crate::admin::input::{self, audit_limit, DeleteFence, InvalidInput, PutFence};
use crate::fences::{AdminWriteError, FenceWritten};

/// `PUT /fences/{key}`: raise, or force lower.
pub(super) async fn put_fence(
    State(admin): State<Admin>,
    Extension(peer): Extension<SocketAddr>,
    uri: Uri,
    body: Bytes,
) -> Response {
    let key = match write_key(&admin, &uri) {
        Ok(key) => key,
        Err(refusal) => return refusal.answer(),
    };
    let request = match PutFence::parse(&body) {
        Ok(put) => put.into_set_fence(peer.to_string()),
        Err(e) => return invalid(&e),
    };
    // A subtree's fence (`/dir/`) is over every key under it from the
    // moment it is set: see `fences/many.rs`.
    let fences = match admin.namespaced(uri.query()) {
        Some((fences, _)) => fences,
        None => return bad_namespace(),
    };
    let subtree = admin.scope_of(&fences) != crate::key::Scope::Header
        && crate::key::subtree_path(&key).is_some();
    let written = run_write(fences, &key, move |fences, key| async move {
        if subtree {
            fences.enable_subtrees();
        }
        fences.set_fence(&key, request).await
    })
    .await;
    written.map_or_else(
        |response| response,
        |FenceWritten { previous, highest }| {
            Json(json!({ "resource": key, "highest": highest, "previous": previous }))
                .into_response()
        },
    )
}

/// Runs an admin write in a task of its own (a client that hangs up must not
/// cut a write short between its durable commit and its effect in memory),
/// and turns its errors into answers.
async fn run_write<F, Fut>(
    fences: crate::Fences,
    key: &str,
    write: F,
) -> Result<FenceWritten, Response>
where
    F: FnOnce(crate::Fences, String) -> Fut,
    Fut: std::future::Future<Output = Result<FenceWritten, AdminWriteError>> + Send + 'static,
{
    let task = tokio::spawn(write(fences, key.to_owned()));
    match task.await {
        Ok(Ok(written)) => Ok(written),
        Ok(Err(e)) => Err(write_error(e)),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            &e.to_string(),
        )),
    }
}

/// `DELETE /fences/{key}?if_highest=N[&reason=...]`: forget.
pub(super) async fn delete_fence(
    State(admin): State<Admin>,
    Extension(peer): Extension<SocketAddr>,
    uri: Uri,
    RawQuery(query): RawQuery,
) -> Response {
    let key = match write_key(&admin, &uri) {
        Ok(key) => key,
        Err(refusal) => return refusal.answer(),
    };
    let (fences, query) = match admin.namespaced(query.as_deref()) {
        Some(namespaced) => namespaced,
        None => return bad_namespace(),
    };
    let DeleteFence { if_highest, reason } = match DeleteFence::parse(query.as_deref()) {
        Ok(delete) => delete,
        Err(e) => return invalid(&e),
    };
    let actor = peer.to_string();
    let written = run_write(fences, &key, move |fences, key| async move {
        fences.forget_fence(&key, if_highest, actor, reason).await
    })
    .await;
    written.map_or_else(
        |response| response,
        |FenceWritten { previous, .. }| {
            Json(json!({ "resource": key, "previous": previous })).into_response()
        },
    )
}

/// `GET /audit?limit=N`, newest first.
pub(super) async fn audit(State(admin): State<Admin>, RawQuery(query): RawQuery) -> Response {
    let limit = match audit_limit(query.as_deref()) {
        Ok(limit) => limit,
        Err(e) => return invalid(&e),
    };
    match admin.fences.audit(limit).await {
        Ok(entries) => {
            let entries: Vec<_> = entries.iter().map(entry_json).collect();
            Json(json!({ "entries": entries })).into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "fence_store_unavailable",
            &e.to_string(),
        ),
    }
}

fn entry_json(entry: &AuditEntry) -> serde_json::Value {
    json!({
        "time": humantime::format_rfc3339_millis(entry.time).to_string(),
        "actor": entry.actor,
        "action": entry.action.as_str(),
        "resource": entry.resource,
        "previous": entry.previous,
        "highest": entry.highest,
        "reason": entry.reason,
    })
}

/// Why an admin write is refused before it starts.
enum WriteRefusal {
    /// No `--admin-token-file`: 403.
    Disabled,
    /// A key no request maps to: 400.
    InvalidKey(InvalidInput),
}

impl WriteRefusal {
    fn answer(self) -> Response {
        match self {
            WriteRefusal::Disabled => writes_disabled(),
            WriteRefusal::InvalidKey(e) => invalid(&e),
        }
    }
}

/// The key of an admin write, checked against the gateway's scope, if
/// admin writes are enabled at all.
/// (In the scope of the fence namespace `?namespace=` names.)
fn write_key(admin: &Admin, uri: &Uri) -> Result<String, WriteRefusal> {
    if !admin.writes_enabled {
        return Err(WriteRefusal::Disabled);
    }
    let scope = match admin.namespaced(uri.query()) {
        Some((fences, _)) => admin.scope_of(&fences),
        None => admin.scope,
    };
    input::write_key(encoded_key(uri), scope).map_err(WriteRefusal::InvalidKey)
}

fn writes_disabled() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "admin_writes_disabled",
        "admin writes need --admin-token-file",
    )
}

fn write_error(e: AdminWriteError) -> Response {
    let detail = e.to_string();
    let (status, body) = match e {
        AdminWriteError::WouldLower { highest } => (
            StatusCode::CONFLICT,
            json!({ "error": "would_lower", "highest": highest, "detail": detail }),
        ),
        AdminWriteError::HighestChanged { highest } => (
            StatusCode::CONFLICT,
            json!({ "error": "highest_changed", "highest": highest, "detail": detail }),
        ),
        AdminWriteError::Busy => (
            StatusCode::CONFLICT,
            json!({ "error": "fence_busy", "detail": detail }),
        ),
        AdminWriteError::Unknown => (
            StatusCode::NOT_FOUND,
            json!({ "error": "unknown_fence", "detail": detail }),
        ),
        AdminWriteError::Store(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "fence_store_unavailable", "detail": detail }),
        ),
    };
    json_error(status, &body)
}
