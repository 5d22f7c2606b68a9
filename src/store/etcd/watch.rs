//! The watch that keeps the replica of records, and the table's view of
//! every highest, up to date with what other holders do.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::layout::Entry;
use super::{lock, Shared};
use crate::etcd_http::{int, text, CallError};

/// A watch that brought nothing for this long is reopened (from where it
/// was): a connection can die without a word (a partition, a member
/// paused), and a quiet prefix cannot be told from a dead stream.
const QUIET: Duration = Duration::from_secs(5);

/// A watch that has not brought back this instance's own committed claim
/// within this long is reopened: waiters depend on it.
const BEHIND: Duration = Duration::from_secs(1);

/// How often a watch is looked at while nothing comes.
const LOOK: Duration = Duration::from_millis(250);

impl Shared {
    /// Follows every change under the prefix from `from`, for the store's
    /// life: records into the replica, highest tokens into the table.
    pub(super) async fn watch(self: Arc<Self>, mut from: i64) {
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
                if let Some(applied) = self.apply(result) {
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
    pub(super) fn apply(&self, result: &Value) -> Option<i64> {
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
                    if self.idle_below(&fence, highest) {
                        self.sweep.notify_one();
                    }
                }
                None => view.set(&fence, None),
            }
        }
        for audit in &audits {
            self.apply_audit(audit);
        }
        touched.dedup();
        for key in touched {
            view.changed(&key);
        }
        newest
    }
}
