//! Admin writes on shared fences, each in one transaction with its audit
//! entry (`P audit/<time>-<instance>-<n>`, JSON).
//!
//! A raise needs nothing more than a claim's compare-and-set. A lowering or
//! a deletion must be made while no request is on the key at *any*
//! instance: the table proves it for its own instance (it holds the only
//! reference to the fence, frozen), and the transaction proves it for the
//! others by comparing that no in-flight record of the key exists and that
//! the highest is still the one the admin saw. Other instances apply it to
//! their view when the watch brings the audit entry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::common::unavailable;
use super::layout::{pad, Layout};
use super::records::Records;
use crate::admin::audit::AuditEntry;
use crate::etcd_http::{b64, text, Client};
use crate::store::{FenceChange, Setting, StoreError};

/// Makes audit keys written in the same millisecond by one instance distinct.
static AUDIT_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Admin writes and the audit log they leave under the prefix: the one way
/// a fence is lowered or removed, and what every instance reads back to
/// see who changed what.
pub(super) struct AdminLog {
    client: Client,
    layout: Arc<Layout>,
    instance: String,
    /// This holder's idle records of a key go before a lowering of it.
    records: Arc<Records>,
}

impl AdminLog {
    pub(super) fn new(
        client: Client,
        layout: Arc<Layout>,
        instance: String,
        records: Arc<Records>,
    ) -> Self {
        AdminLog {
            client,
            layout,
            instance,
            records,
        }
    }

    /// Makes `change` and its audit entry one committed transaction.
    pub(super) async fn record(&self, change: FenceChange) -> Result<(), StoreError> {
        let entry = serde_json::to_string(&change.entry)
            .map_err(|e| unavailable(format!("audit entry: {e}")))?;
        let put_audit = json!({ "request_put": {
            "key": b64(&self.audit_key(&change.entry)),
            "value": b64(&entry),
        }});
        let hw = b64(&self.layout.highest(&change.key));
        let request = match change.set {
            Setting::AtLeast(target) => {
                let value = b64(&pad(target));
                let put_hw = json!({ "request_put": { "key": hw, "value": value } });
                json!({ "success": [put_audit, { "request_txn": {
                    "compare": [{ "key": hw, "target": "VALUE", "result": "LESS", "value": value }],
                    "success": [put_hw],
                    "failure": [{ "request_txn": {
                        "compare": [{ "key": hw, "target": "VERSION", "result": "EQUAL", "version": "0" }],
                        "success": [put_hw],
                    }}],
                }}]})
            }
            Setting::Exactly(_) | Setting::Forget => {
                // This instance's own idle records would make the key look
                // busy: they go first (no request of ours can start on the
                // key meanwhile: the table holds its fence frozen).
                self.records.delete_idle(&change.key).await;
                let (records, records_end) = self.layout.records_of(&change.key);
                let mut compare = vec![json!({
                    "key": b64(&records), "range_end": b64(&records_end),
                    "target": "CREATE", "result": "EQUAL", "create_revision": "0",
                })];
                compare.push(match change.entry.previous {
                    Some(previous) => json!({
                        "key": hw, "target": "VALUE", "result": "EQUAL", "value": b64(&pad(previous)),
                    }),
                    None => json!({ "key": hw, "target": "VERSION", "result": "EQUAL", "version": "0" }),
                });
                let write = match change.set {
                    Setting::Exactly(target) => {
                        json!({ "request_put": { "key": hw, "value": b64(&pad(target)) } })
                    }
                    _ => json!({ "request_delete_range": { "key": hw } }),
                };
                json!({ "compare": compare, "success": [write, put_audit] })
            }
        };
        let answer = self
            .client
            .call("/v3/kv/txn", &request)
            .await
            .map_err(unavailable)?;
        let lowering = !matches!(change.set, Setting::AtLeast(_));
        if lowering && answer["succeeded"] != Value::Bool(true) {
            return Err(StoreError::Busy(
                "another instance has a request on the fence, or changed it".into(),
            ));
        }
        Ok(())
    }

    /// Up to `limit` audit entries of every instance, newest first.
    pub(super) async fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let (start, end) = self.layout.audit_range();
        let answer = self
            .client
            .call(
                "/v3/kv/range",
                &json!({
                    "key": b64(&start), "range_end": b64(&end),
                    "sort_order": "DESCEND", "sort_target": "KEY",
                    "limit": limit.to_string(),
                }),
            )
            .await
            .map_err(unavailable)?;
        let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
        kvs.iter()
            .map(|kv| {
                let text = text(&kv["value"]).unwrap_or_default();
                serde_json::from_str(&text)
                    .map_err(|e| unavailable(format!("unreadable audit entry: {e}")))
            })
            .collect()
    }

    fn audit_key(&self, entry: &AuditEntry) -> String {
        let millis = entry
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let n = AUDIT_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        self.layout.audit(millis, &self.instance, n)
    }
}
