//! Admin writes (`PUT` and `DELETE /fences/{key}`) and the audit log
//! (`GET /audit`).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::{error, json_error, key_of, Admin};
use crate::audit::AuditEntry;
use crate::fences::{AdminWriteError, FenceWritten, SetFence};

/// The longest `reason` of an admin write, in characters.
const MAX_REASON: usize = 200;

/// The default page of `GET /audit`.
const DEFAULT_AUDIT_LIMIT: usize = 100;

/// The body of `PUT /fences/{key}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PutBody {
    highest: u64,
    reason: String,
    #[serde(default)]
    force: bool,
    if_highest: Option<u64>,
}

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
    let body: PutBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return invalid_request(&format!(
                "expected {{\"highest\": n, \"reason\": \"...\"}} (plus \"force\" and \"if_highest\" to lower): {e}"
            ))
        }
    };
    if let Err(detail) = check_reason(&body.reason) {
        return invalid_request(&detail);
    }
    let request = SetFence {
        highest: body.highest,
        force: body.force,
        if_highest: body.if_highest,
        actor: peer.to_string(),
        reason: body.reason,
    };
    let written = run_write(&admin, &key, move |fences, key| async move {
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
async fn run_write<F, Fut>(admin: &Admin, key: &str, write: F) -> Result<FenceWritten, Response>
where
    F: FnOnce(crate::Fences, String) -> Fut,
    Fut: std::future::Future<Output = Result<FenceWritten, AdminWriteError>> + Send + 'static,
{
    let task = tokio::spawn(write(admin.fences.clone(), key.to_owned()));
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    if_highest: Option<String>,
    reason: Option<String>,
}

/// `DELETE /fences/{key}?if_highest=N[&reason=...]`: forget.
pub(super) async fn delete_fence(
    State(admin): State<Admin>,
    Extension(peer): Extension<SocketAddr>,
    uri: Uri,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let key = match write_key(&admin, &uri) {
        Ok(key) => key,
        Err(refusal) => return refusal.answer(),
    };
    let Ok(Query(query)) = query else {
        return invalid_request("expected ?if_highest=N, optionally &reason=...");
    };
    let Some(if_highest) = query.if_highest else {
        return invalid_request(
            "if_highest=N is required: the highest you saw, which must still be current",
        );
    };
    let Ok(if_highest) = if_highest.parse::<u64>() else {
        return invalid_request("if_highest must be a token (0 to 18446744073709551615)");
    };
    if let Some(reason) = &query.reason {
        if let Err(detail) = check_reason(reason) {
            return invalid_request(&detail);
        }
    }
    let actor = peer.to_string();
    let written = run_write(&admin, &key, move |fences, key| async move {
        fences
            .forget_fence(&key, if_highest, actor, query.reason)
            .await
    })
    .await;
    written.map_or_else(
        |response| response,
        |FenceWritten { previous, .. }| {
            Json(json!({ "resource": key, "previous": previous })).into_response()
        },
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct AuditQuery {
    limit: Option<String>,
}

/// `GET /audit?limit=N`, newest first.
pub(super) async fn audit(
    State(admin): State<Admin>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let limit = match query.ok().map(|Query(q)| q.limit) {
        Some(None) => DEFAULT_AUDIT_LIMIT,
        Some(Some(limit)) => match limit.parse::<usize>() {
            Ok(limit) => limit,
            Err(_) => return invalid_query(),
        },
        None => return invalid_query(),
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

fn invalid_query() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_query",
        "limit must be a non-negative integer",
    )
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
    InvalidKey(String),
}

impl WriteRefusal {
    fn answer(self) -> Response {
        match self {
            WriteRefusal::Disabled => writes_disabled(),
            WriteRefusal::InvalidKey(detail) => invalid_request(&detail),
        }
    }
}

/// The key of an admin write, checked against the gateway's scope, if
/// admin writes are enabled at all.
fn write_key(admin: &Admin, uri: &Uri) -> Result<String, WriteRefusal> {
    if !admin.writes_enabled {
        return Err(WriteRefusal::Disabled);
    }
    let key = key_of(uri).map_err(WriteRefusal::InvalidKey)?;
    crate::key::check_key(&key, admin.scope).map_err(WriteRefusal::InvalidKey)?;
    Ok(key)
}

fn check_reason(reason: &str) -> Result<(), String> {
    let chars = reason.chars().count();
    if !(1..=MAX_REASON).contains(&chars) {
        return Err(format!(
            "reason must be 1 to {MAX_REASON} characters, not {chars}"
        ));
    }
    if reason.chars().any(char::is_control) {
        return Err("reason must not hold control characters".to_owned());
    }
    Ok(())
}

fn invalid_request(detail: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request", detail)
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
