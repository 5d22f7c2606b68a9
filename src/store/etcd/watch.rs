//! The watch that keeps the replica of records, and the table's view of
//! every highest, up to date with what other holders do; and the reads of
//! everything under the prefix it starts from (at connect, and again when
//! it lost its place).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::common::{lock, Counters};
use super::layout::{Entry, Layout};
use super::replica::Replica;
use crate::admin::audit::{AuditAction, AuditEntry};
use crate::etcd_http::{b64, int, text, CallError, Client};
use crate::key::{covering_subtrees, subtree_path};
use crate::store::FenceEvents;

/// Keys per page of the load at start.
const PAGE: usize = 10_000;

/// A watch that brought nothing for this long is reopened (from where it
/// was): a connection can die without a word (a partition, a member
/// paused), and a quiet prefix cannot be told from a dead stream.
const QUIET: Duration = Duration::from_secs(5);

/// A watch that has not brought back this instance's own committed claim
/// within this long is reopened: waiters depend on it.
const BEHIND: Duration = Duration::from_secs(1);

/// How often a watch is looked at while nothing comes.
const LOOK: Duration = Duration::from_millis(250);

/// What this holder knows of the others, and where it learns it: the
/// replica of every in-flight record and subtree fence, the table's view
/// of every highest, and the watch that keeps both up to date. Claims
/// and the requests they hold read the replica; only the watch (and a
/// full read) writes it.
pub(super) struct Watcher {
    client: Client,
    layout: Arc<Layout>,
    counters: Arc<Counters>,
    view: OnceLock<Arc<dyn FenceEvents>>,
    replica: Mutex<Replica>,
    /// Keys shaped like subtree keys are subtrees (`FenceStore::use_subtrees`):
    /// every claim checks the subtree fences above its key.
    subtrees: AtomicBool,
    /// The store closed: the watch is not reopened any more.
    closed: AtomicBool,
    /// Every fence is read at start and handed to the table (an unbounded
    /// table); else only subtree fences are (a bounded table reads the
    /// rest with its claims, `fences/cache.rs`).
    every_fence: AtomicBool,
}

impl Watcher {
    pub(super) fn new(client: Client, layout: Arc<Layout>, counters: Arc<Counters>) -> Self {
        Watcher {
            client,
            layout,
            counters,
            view: OnceLock::new(),
            replica: Mutex::new(Replica::default()),
            subtrees: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            every_fence: AtomicBool::new(true),
        }
    }

    /// Attaches the table's view; whether it was the first (only the first
    /// is kept, and only then is the watch to be started).
    pub(super) fn attach(&self, view: Arc<dyn FenceEvents>) -> bool {
        self.view.set(view).is_ok()
    }

    /// The table's view, once attached.
    pub(super) fn view(&self) -> Option<&Arc<dyn FenceEvents>> {
        self.view.get()
    }

    /// The replica, locked.
    pub(super) fn replica(&self) -> MutexGuard<'_, Replica> {
        lock(&self.replica)
    }

    /// The newest revision the replica applied.
    pub(super) fn revision(&self) -> i64 {
        lock(&self.replica).revision
    }

    /// From now on keys shaped like subtree keys are subtrees.
    pub(super) fn use_subtrees(&self) {
        self.subtrees.store(true, Ordering::SeqCst);
    }

    /// Whether keys shaped like subtree keys are subtrees here.
    pub(super) fn subtrees(&self) -> bool {
        self.subtrees.load(Ordering::SeqCst)
    }

    /// The subtree keys above `key` whose fences a claim of it must not
    /// pass (none unless keys shaped like subtree keys are subtrees here).
    pub(super) fn subtrees_above<'k>(&self, key: &'k str) -> Vec<Cow<'k, str>> {
        if !self.subtrees.load(Ordering::SeqCst) {
            return Vec::new();
        }
        covering_subtrees(key).collect()
    }

    /// From now on the reads of everything keep only subtree fences (and
    /// every record): memory holds what the table uses.
    pub(super) fn load_only_subtrees(&self) {
        self.every_fence.store(false, Ordering::SeqCst);
    }

    /// The store closes: the watch is not reopened from now on.
    pub(super) fn stop(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Follows every change under the prefix from `from`, for the store's
    /// life: records into the replica, highest tokens into the table, and
    /// each raise to `raised` (this holder's records may have become
    /// useless: the wiring in `mod.rs` tells them).
    pub(super) async fn watch(
        self: Arc<Self>,
        mut from: i64,
        raised: impl Fn(&str, u64) + Send + Sync + 'static,
    ) {
        let (start, end) = self.layout.everything();
        loop {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let mut stream = match self.client.watch(&start, &end, from).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%error, "etcd watch not opened; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let mut last_message = Instant::now();
            let mut behind_since: Option<Instant> = None;
            loop {
                let message = match tokio::time::timeout(LOOK, stream.next()).await {
                    Ok(Ok(message)) => message,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "etcd watch broke; reopening");
                        break;
                    }
                    Err(_) => {
                        if self.watch_looks_dead(last_message, &mut behind_since) {
                            tracing::debug!("etcd watch silent; reopening");
                            break;
                        }
                        continue;
                    }
                };
                last_message = Instant::now();
                behind_since = None;
                let result = &message["result"];
                if int(&result["compact_revision"]) > 0 {
                    // Missed events were compacted away: start over.
                    match self.reload().await {
                        Ok(revision) => from = revision + 1,
                        Err(error) => {
                            tracing::warn!(%error, "cannot reload the shared fences");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                    break;
                }
                if result["canceled"] == Value::Bool(true) {
                    break;
                }
                if let Some(applied) = self.apply(result, &raised) {
                    from = applied + 1;
                }
            }
        }
    }

    /// Whether a silent watch should be reopened: quiet for [`QUIET`], or
    /// behind a revision this instance committed for [`BEHIND`].
    fn watch_looks_dead(&self, last_message: Instant, behind_since: &mut Option<Instant>) -> bool {
        if last_message.elapsed() >= QUIET {
            return true;
        }
        let committed = self.counters.seen_revision.load(Ordering::Relaxed);
        let applied = u64::try_from(lock(&self.replica).revision).unwrap_or(0);
        if committed <= applied {
            *behind_since = None;
            return false;
        }
        behind_since.get_or_insert_with(Instant::now).elapsed() >= BEHIND
    }

    /// Every fence under the prefix (only the subtree fences, after
    /// [`Watcher::load_only_subtrees`]) and every record, as of one
    /// revision.
    pub(super) async fn load_all(&self) -> Result<(Vec<(String, u64)>, i64), CallError> {
        let every_fence = self.every_fence.load(Ordering::SeqCst);
        let mut fences = Vec::new();
        let mut records = Vec::new();
        let mut revision = 0;
        for (start, end) in self.layout.loaded_ranges() {
            let mut from = start;
            loop {
                let mut request = json!({
                    "key": b64(&from),
                    "range_end": b64(&end),
                    "limit": PAGE.to_string(),
                });
                if revision > 0 {
                    request["revision"] = json!(revision.to_string());
                }
                let answer = self.client.call("/v3/kv/range", &request).await?;
                if revision == 0 {
                    revision = int(&answer["header"]["revision"]);
                }
                let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
                let mut last = None;
                for kv in &kvs {
                    let Some(key) = text(&kv["key"]) else {
                        continue;
                    };
                    match self.layout.parse(&key) {
                        Entry::Highest(fence) if every_fence || subtree_path(&fence).is_some() => {
                            if let Some(highest) = text(&kv["value"]).and_then(|v| v.parse().ok()) {
                                fences.push((fence, highest));
                            }
                        }
                        Entry::Highest(_) => {}
                        Entry::Record(record) => records.push(record),
                        Entry::Audit | Entry::Other => {}
                    }
                    last = Some(key);
                }
                match last {
                    Some(last) if answer["more"] == Value::Bool(true) => from = format!("{last}\0"),
                    _ => break,
                }
            }
        }
        let mut replica = lock(&self.replica);
        replica.reset(revision);
        for record in records {
            replica.insert(record.key, record.token, record.holder);
        }
        for (key, highest) in &fences {
            replica.highest(key, Some(*highest));
        }
        Ok((fences, revision))
    }

    /// Reads everything again after the watch lost its place.
    pub(super) async fn reload(&self) -> Result<i64, CallError> {
        let (fences, revision) = self.load_all().await?;
        if let Some(view) = self.view.get() {
            for (key, highest) in fences {
                view.raised(&key, highest);
            }
        }
        Ok(revision)
    }

    /// Applies one watch message; the newest revision it carried.
    pub(super) fn apply(&self, result: &Value, on_raise: &dyn Fn(&str, u64)) -> Option<i64> {
        let events = result["events"].as_array()?;
        let view = self.view.get()?;
        let mut touched = Vec::new();
        let mut newest = None;
        let mut raised = Vec::new();
        let mut audits = Vec::new();
        {
            let mut replica = lock(&self.replica);
            for event in events {
                let kv = &event["kv"];
                let revision = int(&kv["mod_revision"]);
                newest = newest.max(Some(revision));
                let deleted = event["type"].as_str() == Some("DELETE");
                let Some(key) = text(&kv["key"]) else {
                    continue;
                };
                match self.layout.parse(&key) {
                    Entry::Record(record) => {
                        if deleted {
                            replica.remove(&record.key, record.token, &record.holder);
                        } else {
                            replica.insert(record.key.clone(), record.token, record.holder);
                        }
                        touched.push(record.key);
                    }
                    Entry::Highest(fence) => {
                        let highest = text(&kv["value"]).and_then(|v| v.parse::<u64>().ok());
                        let highest = if deleted { None } else { highest };
                        replica.highest(&fence, highest);
                        raised.push((fence, highest));
                    }
                    Entry::Audit if !deleted => audits.push(kv["value"].clone()),
                    Entry::Audit | Entry::Other => {}
                }
            }
            if let Some(newest) = newest {
                replica.revision = replica.revision.max(newest);
            }
        }
        for (fence, highest) in raised {
            match highest {
                Some(highest) => {
                    view.raised(&fence, highest);
                    on_raise(&fence, highest);
                }
                None => view.set(&fence, None),
            }
        }
        for audit in &audits {
            apply_audit(view.as_ref(), audit);
        }
        touched.dedup();
        for key in touched {
            view.changed(&key);
        }
        newest
    }
}

/// Applies an audit entry another instance wrote (from the watch, its only
/// reader): lowerings reach the table this way (a raise arrives as a raise
/// of the highest, a deletion as the highest's deletion). A free function,
/// not `AdminLog`'s: it uses none of its state, and as a method it tied
/// the watch to the admin log and back.
fn apply_audit(view: &dyn FenceEvents, value: &Value) {
    let Some(entry) = text(value).and_then(|t| serde_json::from_str::<AuditEntry>(&t).ok()) else {
        return;
    };
    if entry.action == AuditAction::Lower {
        view.set(&entry.resource, entry.highest);
    }
}
