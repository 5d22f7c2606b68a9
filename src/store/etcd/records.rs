//! This holder's in-flight records: who uses each, the hold a request
//! keeps, and the sweeper that deletes a record once no request needs it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::common::{lock, Counters, MAX_BATCH};
use super::layout::Layout;
use super::lease_keeper::LeaseKeeper;
use super::watch::Watcher;
use crate::etcd_http::{b64, Client};
use crate::store::{ClaimHold, Lease};

/// How long a record stays after its last request, in case the same token
/// comes again (the steady state of one lock holder).
const LINGER: Duration = Duration::from_secs(2);

/// One record of this holder.
#[derive(Debug)]
pub(super) struct Own {
    token: u64,
    lease: i64,
    /// Requests waiting or in flight under it.
    users: usize,
    /// The revision of the transaction that last put it: a deletion is
    /// guarded by it, so that it never removes a newer put.
    put_revision: i64,
    /// The revision of the claim that found lower records of others, while
    /// they may still be there.
    blocked_at: Option<i64>,
    idle_since: Option<Instant>,
}

/// This holder's in-flight records and the requests that use them: a
/// claim of a token this holder already has a record of needs no round
/// trip, and a record is deleted only once no request needs it.
pub(super) struct Records {
    client: Client,
    layout: Arc<Layout>,
    counters: Arc<Counters>,
    keeper: Arc<LeaseKeeper>,
    /// The table's view (is a record outdated?) and the replica (must a
    /// hold wait?).
    watcher: Arc<Watcher>,
    /// This holder's records, by fence key.
    own: Mutex<HashMap<String, Vec<Own>>>,
    /// Wakes the record sweeper (a higher highest arrived, a record idled).
    sweep: Notify,
}

/// A claim of this holder, kept by a waiting or in-flight request.
pub(super) struct Hold {
    records: Arc<Records>,
    key: String,
    token: u64,
    lease: Lease,
    holder: String,
    blocked_at: Option<i64>,
}

impl Records {
    pub(super) fn new(
        client: Client,
        layout: Arc<Layout>,
        counters: Arc<Counters>,
        keeper: Arc<LeaseKeeper>,
        watcher: Arc<Watcher>,
    ) -> Self {
        Records {
            client,
            layout,
            counters,
            keeper,
            watcher,
            own: Mutex::new(HashMap::new()),
            sweep: Notify::new(),
        }
    }

    /// Forgets every record (their lease is lost: they vanish with it).
    pub(super) fn forget_all(&self) {
        lock(&self.own).clear();
    }

    /// `key`'s highest is now `highest`: a record of this holder below it
    /// that no request uses is deleted now, not after its linger.
    pub(super) fn raised(&self, key: &str, highest: u64) {
        if self.idle_below(key, highest) {
            self.sweep.notify_one();
        }
    }

    /// A claim answered from this holder's own record of `(key, token)`
    /// on the current lease: no round trip.
    pub(super) fn reuse(self: &Arc<Self>, key: &str, token: u64, lease: &Lease) -> Option<Hold> {
        let mut own = lock(&self.own);
        let record = own
            .get_mut(key)?
            .iter_mut()
            .find(|r| r.token == token && r.lease == lease.id())?;
        record.users += 1;
        record.idle_since = None;
        let blocked_at = record.blocked_at;
        Some(self.hold(key, token, lease, blocked_at))
    }

    /// The hold of one more request under this holder's record of
    /// `(key, token)` (already counted in its users).
    fn hold(
        self: &Arc<Self>,
        key: &str,
        token: u64,
        lease: &Lease,
        blocked_at: Option<i64>,
    ) -> Hold {
        Hold {
            records: Arc::clone(self),
            key: key.to_owned(),
            token,
            lease: lease.clone(),
            holder: self.keeper.holder(lease),
            blocked_at,
        }
    }

    /// Registers this holder's record of `(key, token)`, put at `revision`.
    pub(super) fn granted(
        self: &Arc<Self>,
        key: &str,
        token: u64,
        lease: &Lease,
        revision: i64,
        blocked: bool,
    ) -> Hold {
        let mut own = lock(&self.own);
        let records = own.entry(key.to_owned()).or_default();
        records.retain(|r| r.lease == lease.id() || r.users > 0);
        let record = match records
            .iter_mut()
            .position(|r| r.token == token && r.lease == lease.id())
        {
            Some(index) => &mut records[index],
            None => {
                records.push(Own {
                    token,
                    lease: lease.id(),
                    users: 0,
                    put_revision: revision,
                    blocked_at: None,
                    idle_since: None,
                });
                let last = records.len() - 1;
                &mut records[last]
            }
        };
        record.put_revision = revision;
        record.users += 1;
        record.idle_since = None;
        if blocked {
            record.blocked_at = Some(revision);
        }
        let blocked_at = record.blocked_at;
        drop(own);
        self.hold(key, token, lease, blocked_at)
    }

    /// Whether this holder knows it has a record of `(key, token)` on `lease`.
    pub(super) fn has_record(&self, key: &str, token: u64, lease: &Lease) -> bool {
        lock(&self.own).get(key).is_some_and(|records| {
            records
                .iter()
                .any(|r| r.token == token && r.lease == lease.id())
        })
    }

    /// Whether this holder has an idle record of `key` below `highest`.
    fn idle_below(&self, key: &str, highest: u64) -> bool {
        lock(&self.own)
            .get(key)
            .is_some_and(|records| records.iter().any(|r| r.users == 0 && r.token < highest))
    }

    /// Deletes this holder's records that no request uses any more, once
    /// their linger is over or a higher highest makes them useless.
    pub(super) async fn sweep_records(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.sweep.notified() => {}
                () = tokio::time::sleep(LINGER / 4) => {}
            }
            let done = self.collect_done();
            self.delete_records(&done).await;
        }
    }

    /// Deletes this holder's idle records of `key` now (before an admin
    /// write, which needs the key free of records).
    pub(super) async fn delete_idle(&self, key: &str) {
        let Some(lease) = self.keeper.current() else {
            return;
        };
        let holder = self.keeper.holder(&lease);
        let mut done = Vec::new();
        if let Some(records) = lock(&self.own).get_mut(key) {
            records.retain(|record| {
                let idle = record.users == 0;
                if idle && record.lease == lease.id() {
                    done.push((
                        self.layout.record(key, record.token, &holder),
                        record.put_revision,
                    ));
                }
                !idle
            });
        }
        self.delete_records(&done).await;
    }

    /// Deletes records (etcd key, put revision), each only if it was not
    /// put again since.
    async fn delete_records(&self, done: &[(String, i64)]) {
        for chunk in done.chunks(MAX_BATCH) {
            let deletions: Vec<Value> = chunk
                .iter()
                .map(|(key, revision)| {
                    let key = b64(key);
                    json!({ "request_txn": {
                        "compare": [{ "key": key, "target": "MOD", "result": "EQUAL",
                                      "mod_revision": revision.to_string() }],
                        "success": [{ "request_delete_range": { "key": key } }],
                    }})
                })
                .collect();
            // A failure leaves the record to its lease's expiry: late,
            // never unsafe.
            if self
                .client
                .call("/v3/kv/txn", &json!({ "success": deletions }))
                .await
                .is_ok()
            {
                self.counters
                    .records_deleted
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Takes the records to delete out of `own`: (etcd key, put revision).
    pub(super) fn collect_done(&self) -> Vec<(String, i64)> {
        let Some(view) = self.watcher.view() else {
            return Vec::new();
        };
        let Some(lease) = self.keeper.current() else {
            return Vec::new();
        };
        let holder = self.keeper.holder(&lease);
        let now = Instant::now();
        let mut done = Vec::new();
        let mut own = lock(&self.own);
        own.retain(|key, records| {
            let highest = view.highest(key);
            records.retain(|record| {
                let idle = record.users == 0
                    && (record.idle_since.is_some_and(|since| now - since >= LINGER)
                        || highest > Some(record.token));
                if !idle {
                    return true;
                }
                if record.lease == lease.id() {
                    done.push((
                        self.layout.record(key, record.token, &holder),
                        record.put_revision,
                    ));
                }
                false
            });
            !records.is_empty()
        });
        done
    }
}

/// The claims of a request admitted on several keys at once: it waits
/// while any of them would, or while another holder has a lower record
/// under one of its subtree keys.
pub(super) struct ManyHold {
    holds: Vec<Hold>,
    /// The subtree keys among them.
    under: Vec<String>,
    token: u64,
    holder: String,
    revision: i64,
    lease: Lease,
    watcher: Arc<Watcher>,
}

impl Records {
    pub(super) fn many_hold(
        &self,
        holds: Vec<Hold>,
        under: Vec<String>,
        token: u64,
        lease: &Lease,
        revision: i64,
    ) -> ManyHold {
        ManyHold {
            holds,
            under,
            token,
            holder: self.keeper.holder(lease),
            revision,
            lease: lease.clone(),
            watcher: Arc::clone(&self.watcher),
        }
    }
}

impl ClaimHold for ManyHold {
    fn waits(&self) -> bool {
        if self.holds.iter().any(ClaimHold::waits) {
            return true;
        }
        let replica = self.watcher.replica();
        self.under
            .iter()
            .any(|subtree| replica.blocks_under(subtree, self.token, &self.holder, self.revision))
    }

    fn lease(&self) -> &Lease {
        &self.lease
    }
}

impl ClaimHold for Hold {
    fn waits(&self) -> bool {
        self.blocked_at.is_some_and(|revision| {
            let replica = self.records.watcher.replica();
            replica.blocks(&self.key, self.token, &self.holder, revision)
                || self
                    .records
                    .watcher
                    .subtrees_above(&self.key)
                    .into_iter()
                    .any(|subtree| replica.blocks(&subtree, self.token, &self.holder, revision))
        })
    }

    fn lease(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut own = lock(&self.records.own);
        let Some(records) = own.get_mut(&self.key) else {
            return;
        };
        let Some(record) = records
            .iter_mut()
            .find(|r| r.token == self.token && r.lease == self.lease.id())
        else {
            return;
        };
        record.users = record.users.saturating_sub(1);
        if record.users == 0 {
            record.idle_since = Some(Instant::now());
            // Known to be outdated: no need to linger.
            let outdated = self
                .records
                .watcher
                .view()
                .and_then(|view| view.highest(&self.key))
                > Some(self.token);
            drop(own);
            if outdated {
                self.records.sweep.notify_one();
            }
        }
    }
}
