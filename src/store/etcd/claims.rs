//! Claims, committed many to an etcd transaction (group commit).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::common::{unavailable, Counters, MAX_BATCH};
use super::layout::{pad, Entry, Layout};
use super::lease_keeper::LeaseKeeper;
use super::records::Records;
use super::watch::Watcher;
use crate::etcd_http::{b64, int, text, CallError, Client};
use crate::key::subtree_path;
use crate::store::{Claim, ClaimFuture, Lease, StoreError};

/// The claims that need a round trip: queued, committed many to a
/// transaction by one task ([`ClaimBatcher::commit_claims`]), each
/// answered with a hold on this holder's record or as stale.
pub(super) struct ClaimBatcher {
    client: Client,
    layout: Arc<Layout>,
    counters: Arc<Counters>,
    keeper: Arc<LeaseKeeper>,
    records: Arc<Records>,
    /// The replica: the subtree fences above a key, whether it is caught up.
    watcher: Arc<Watcher>,
    queue: mpsc::UnboundedSender<Pending>,
}

pub(super) struct Pending {
    pub(super) key: String,
    /// For a claim of several keys at once, or of a subtree key
    /// (`claim_all`): the other keys, in key order. Such a claim is a
    /// transaction of its own.
    pub(super) more: Option<Vec<String>>,
    pub(super) token: u64,
    pub(super) reply: oneshot::Sender<Result<Claim, StoreError>>,
}

impl Pending {
    fn keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.key.as_str()).chain(self.more.iter().flatten().map(String::as_str))
    }
}

use crate::store::MAX_SHARED_KEYS as MAX_KEYS;

/// A claim of several keys retries this often when a highest it read
/// changed before it could commit.
const MANY_ATTEMPTS: usize = 8;

/// A record a failed transaction may or may not have put (it timed out, or
/// the connection broke after sending): nobody uses it, and left alone it
/// would make other instances wait for as long as this lease lives.
struct Orphan {
    key: String,
    token: u64,
    lease: Lease,
}

/// Claim transactions sent to etcd at once, at most.
const IN_FLIGHT: usize = 4;

/// How often orphan records are retried while no claim comes.
const ORPHAN_RETRY: Duration = Duration::from_millis(200);

/// What one claim's nested transaction came to.
enum ClaimOutcome {
    /// Registered; the keys of the records of the key below the token.
    Granted(Vec<String>),
    /// A higher highest was there: nothing written.
    Stale(u64),
    Malformed,
}

/// A transaction came back: its keys are free again; the records it may
/// have left behind become orphans (whose keys stay busy until deleted).
fn finished(
    done: Result<(Vec<String>, Vec<Orphan>), tokio::task::JoinError>,
    flying: &mut HashSet<String>,
    orphans: &mut Vec<Orphan>,
) {
    // A transaction task ends by returning: it is aborted only with the
    // whole store, and nothing in it panics.
    let Ok((keys, left)) = done else { return };
    for key in keys {
        flying.remove(&key);
    }
    orphans.extend(left);
}

impl ClaimBatcher {
    /// A batcher whose claims `queue` sends to [`Self::commit_claims`].
    pub(super) fn new(
        client: Client,
        layout: Arc<Layout>,
        counters: Arc<Counters>,
        keeper: Arc<LeaseKeeper>,
        records: Arc<Records>,
        watcher: Arc<Watcher>,
        queue: mpsc::UnboundedSender<Pending>,
    ) -> Self {
        ClaimBatcher {
            client,
            layout,
            counters,
            keeper,
            records,
            watcher,
            queue,
        }
    }

    /// Hands a claim to the committer; resolves with its answer.
    pub(super) fn queue_claim(
        &self,
        key: String,
        more: Option<Vec<String>>,
        token: u64,
    ) -> ClaimFuture {
        let (reply, answer) = oneshot::channel();
        let queued = self.queue.send(Pending {
            key,
            more,
            token,
            reply,
        });
        Box::pin(async move {
            if queued.is_err() {
                return Err(StoreError::Closed);
            }
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    /// Commits claims as they come, many per transaction, with up to
    /// [`IN_FLIGHT`] transactions at once (etcd commits concurrent
    /// proposals together, so waiting for each answer before sending the
    /// next would leave it idle). A key is in one transaction at a time:
    /// claims of one key are committed in the order they came.
    pub(super) async fn commit_claims(
        self: Arc<Self>,
        mut queue: mpsc::UnboundedReceiver<Pending>,
    ) {
        let mut deferred: VecDeque<Pending> = VecDeque::new();
        let mut orphans: Vec<Orphan> = Vec::new();
        // The keys of the transactions in flight.
        let mut flying: HashSet<String> = HashSet::new();
        let mut in_flight: JoinSet<(Vec<String>, Vec<Orphan>)> = JoinSet::new();
        let mut open = true;
        loop {
            while let Some(done) = in_flight.try_join_next() {
                finished(done, &mut flying, &mut orphans);
            }
            while let Ok(more) = queue.try_recv() {
                deferred.push_back(more);
            }
            if !orphans.is_empty() {
                // This task alone puts records, and no claim of an
                // orphan's key starts while it is one: a record deleted
                // here cannot be one a claim put again.
                self.delete_orphans(&mut orphans).await;
            }
            let mut started = false;
            while in_flight.len() < IN_FLIGHT {
                let busy = |key: &str| flying.contains(key) || orphans.iter().any(|o| o.key == key);
                let batch = self.take_batch(&mut deferred, busy);
                if batch.is_empty() {
                    break;
                }
                let keys: Vec<String> = batch
                    .iter()
                    .flat_map(|p| p.keys().map(str::to_owned))
                    .collect();
                flying.extend(keys.iter().cloned());
                let this = Arc::clone(&self);
                in_flight.spawn(async move { (keys, this.commit(batch).await) });
                started = true;
            }
            if started {
                continue;
            }
            if !open && in_flight.is_empty() {
                return;
            }
            tokio::select! {
                claim = queue.recv(), if open => match claim {
                    Some(claim) => deferred.push_back(claim),
                    None => open = false,
                },
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    finished(done, &mut flying, &mut orphans);
                }
                () = tokio::time::sleep(ORPHAN_RETRY), if !orphans.is_empty() => {}
            }
        }
    }

    /// Deletes the orphan records that no claim has put again since;
    /// those of a lease that ended are left to it. Keeps the ones that
    /// could not be deleted now.
    async fn delete_orphans(&self, orphans: &mut Vec<Orphan>) {
        let current = self.keeper.current().map(|lease| lease.id());
        orphans.retain(|orphan| Some(orphan.lease.id()) == current);
        let unused: Vec<String> = orphans
            .iter()
            .filter(|orphan| {
                !self
                    .records
                    .has_record(&orphan.key, orphan.token, &orphan.lease)
            })
            .map(|orphan| {
                let holder = self.keeper.holder(&orphan.lease);
                self.layout.record(&orphan.key, orphan.token, &holder)
            })
            .collect();
        let deletions: Vec<Value> = unused
            .iter()
            .map(|key| json!({ "request_delete_range": { "key": b64(key) } }))
            .collect();
        if deletions.is_empty()
            || self
                .client
                .call("/v3/kv/txn", &json!({ "success": deletions }))
                .await
                .is_ok()
        {
            orphans.clear();
        }
    }

    /// Up to [`MAX_BATCH`] claims on distinct keys (etcd refuses a
    /// transaction that puts one key twice); claims that can be answered
    /// from a record made meanwhile are answered at once.
    /// Claims of a key that is `busy` (in a transaction already, or left
    /// with an orphan record) wait for a later batch.
    fn take_batch(
        &self,
        deferred: &mut VecDeque<Pending>,
        busy: impl Fn(&str) -> bool,
    ) -> Vec<Pending> {
        let lease = self.keeper.current().filter(Lease::is_live);
        let mut batch: Vec<Pending> = Vec::new();
        let mut later = VecDeque::new();
        while let Some(pending) = deferred.pop_front() {
            let Some(lease) = &lease else {
                let _ = pending.reply.send(Err(self.keeper.no_lease()));
                continue;
            };
            if pending.more.is_some() {
                // A claim of several keys goes alone, once none is busy.
                if batch.is_empty() && !pending.keys().any(&busy) {
                    batch.push(pending);
                    break;
                }
                later.push_back(pending);
            } else if let Some(hold) = self.records.reuse(&pending.key, pending.token, lease) {
                self.counters.claims_local.fetch_add(1, Ordering::Relaxed);
                let _ = pending.reply.send(Ok(Claim {
                    highest: pending.token,
                    hold: Some(Box::new(hold)),
                }));
            } else if batch.len() < MAX_BATCH
                && !busy(&pending.key)
                && batch
                    .iter()
                    .all(|b| b.key != pending.key && b.more.is_none())
            {
                batch.push(pending);
            } else {
                later.push_back(pending);
            }
        }
        later.extend(deferred.drain(..));
        *deferred = later;
        batch
    }

    /// Commits `batch` in one transaction and answers each claim; returns
    /// the records the transaction may have put if its outcome is unknown.
    async fn commit(self: &Arc<Self>, batch: Vec<Pending>) -> Vec<Orphan> {
        let Some(lease) = self.keeper.current().filter(Lease::is_live) else {
            for pending in batch {
                let _ = pending.reply.send(Err(self.keeper.no_lease()));
            }
            return Vec::new();
        };
        if batch.first().is_some_and(|p| p.more.is_some()) {
            return self.commit_many(batch, lease).await;
        }
        let holder = self.keeper.holder(&lease);
        let (batch, guards) = self.check_subtrees_above(batch);
        if batch.is_empty() {
            return Vec::new();
        }
        let claims: Vec<Value> = batch
            .iter()
            .zip(guards)
            .map(|(p, guards)| {
                let claim = self.claim_txn(&p.key, p.token, &lease, &holder);
                if guards.is_empty() {
                    claim
                } else {
                    json!({ "request_txn": { "compare": guards, "success": [claim] } })
                }
            })
            .collect();
        let answer = self
            .client
            .call("/v3/kv/txn", &json!({ "success": claims }))
            .await;
        self.counters.transactions.fetch_add(1, Ordering::Relaxed);
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                if error.lease_gone() {
                    lease.revoke();
                }
                // Refused: nothing was written. Unreachable: perhaps it was.
                let ambiguous = matches!(error, CallError::Unreachable(_));
                let error = unavailable(error);
                let mut orphans = Vec::new();
                for pending in batch {
                    let _ = pending.reply.send(Err(error.clone()));
                    if ambiguous {
                        orphans.push(Orphan {
                            key: pending.key,
                            token: pending.token,
                            lease: lease.clone(),
                        });
                    }
                }
                return orphans;
            }
        };
        let revision = int(&answer["header"]["revision"]);
        for (index, pending) in batch.into_iter().enumerate() {
            let response = &answer["responses"][index];
            let guards = self.watcher.subtrees_above(&pending.key);
            let outcome = if guards.is_empty() {
                ClaimOutcome::parse(response)
            } else if response["response_txn"]["succeeded"] == Value::Bool(true) {
                ClaimOutcome::parse(&response["response_txn"]["responses"][0])
            } else {
                // A subtree fence above the key changed since the replica
                // saw it: claim again once the replica has caught up.
                self.retry_when_caught_up(pending, revision);
                continue;
            };
            let reply = match outcome {
                ClaimOutcome::Stale(highest) => Ok(Claim {
                    highest,
                    hold: None,
                }),
                ClaimOutcome::Granted(lower) => {
                    // The watch must bring this revision back (the record
                    // put): how far behind it is shows from here.
                    self.counters
                        .seen_revision
                        .fetch_max(u64::try_from(revision).unwrap_or(0), Ordering::Relaxed);
                    self.counters
                        .claims_committed
                        .fetch_add(1, Ordering::Relaxed);
                    let blocked = lower.iter().any(|key| match self.layout.parse(key) {
                        Entry::Record(record) => record.holder != holder,
                        _ => false,
                    });
                    if blocked {
                        self.counters.waits.fetch_add(1, Ordering::Relaxed);
                    }
                    // A subtree write above the key may be in flight at
                    // another holder: the replica tells.
                    let blocked = blocked || !guards.is_empty();
                    let hold = self.records.granted(
                        &pending.key,
                        pending.token,
                        &lease,
                        revision,
                        blocked,
                    );
                    Ok(Claim {
                        highest: pending.token,
                        hold: Some(Box::new(hold)),
                    })
                }
                ClaimOutcome::Malformed => Err(unavailable(format!(
                    "etcd answered a claim in an unexpected shape: {}",
                    answer["responses"][index]
                ))),
            };
            let _ = pending.reply.send(reply);
        }
        Vec::new()
    }

    /// Answers at once the claims whose key lies under a subtree fence
    /// above their token (as the replica shows it): stale. For the others,
    /// the compares that run a claim only if every subtree fence above its
    /// key is still what the replica showed at this one look (a value at
    /// most the token, or no key): exact compares, so a replica that lags
    /// only costs a retry.
    fn check_subtrees_above(&self, batch: Vec<Pending>) -> (Vec<Pending>, Vec<Vec<Value>>) {
        let replica = self.watcher.replica();
        let mut kept = Vec::with_capacity(batch.len());
        let mut guards = Vec::with_capacity(batch.len());
        for pending in batch {
            let subtrees = self.watcher.subtrees_above(&pending.key);
            let above = subtrees
                .iter()
                .filter_map(|subtree| replica.subtree_highest(subtree))
                .max()
                .filter(|highest| *highest > pending.token);
            if let Some(highest) = above {
                let _ = pending.reply.send(Ok(Claim {
                    highest,
                    hold: None,
                }));
                continue;
            }
            let compares = subtrees
                .iter()
                .map(|subtree| {
                    let hw = b64(&self.layout.highest(subtree));
                    match replica.subtree_highest(subtree) {
                        Some(highest) => json!({ "key": hw, "target": "VALUE", "result": "EQUAL",
                                                 "value": b64(&pad(highest)) }),
                        None => json!({ "key": hw, "target": "VERSION", "result": "EQUAL",
                                        "version": "0" }),
                    }
                })
                .collect();
            kept.push(pending);
            guards.push(compares);
        }
        (kept, guards)
    }

    /// Queues `pending` again once the replica has seen `revision` (or
    /// after a second, if the watch is slower than that).
    fn retry_when_caught_up(self: &Arc<Self>, pending: Pending, revision: i64) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            for _ in 0..100 {
                if this.watcher.revision() >= revision {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if let Err(unsent) = this.queue.send(pending) {
                let _ = unsent.0.reply.send(Err(StoreError::Closed));
            }
        });
    }

    /// A claim of several keys (`pending.key` and `pending.more`), all or
    /// none: reads every highest it must not pass (each key's, every one
    /// under a subtree key, the subtree fences above each key) at one
    /// revision, then raises every key and puts its records in a
    /// transaction that runs only if none of what was read changed since.
    async fn commit_many(self: &Arc<Self>, batch: Vec<Pending>, lease: Lease) -> Vec<Orphan> {
        let mut orphans = Vec::new();
        for pending in batch {
            let keys: Vec<String> = pending.keys().map(str::to_owned).collect();
            let token = pending.token;
            let (reply, ambiguous) = self.claim_many(&keys, token, &lease).await;
            if ambiguous {
                orphans.extend(keys.into_iter().map(|key| Orphan {
                    key,
                    token,
                    lease: lease.clone(),
                }));
            }
            let _ = pending.reply.send(reply);
        }
        orphans
    }

    /// [`Self::commit_many`] for one claim: the answer, and whether its
    /// records may have been put although the answer is an error.
    async fn claim_many(
        self: &Arc<Self>,
        keys: &[String],
        token: u64,
        lease: &Lease,
    ) -> (Result<Claim, StoreError>, bool) {
        if keys.len() > MAX_KEYS {
            return (
                Err(StoreError::Unsupported(
                    "shared fences claim at most 60 keys at once",
                )),
                false,
            );
        }
        let holder = self.keeper.holder(lease);
        let subtrees = self.watcher.subtrees();
        // What must not be above the token: `(start, end)` of a range, or
        // `(key, None)` for one key.
        let mut watched: Vec<(String, Option<String>)> = Vec::new();
        for key in keys {
            if subtrees && subtree_path(key).is_some() {
                let (start, end) = self.layout.highests_under(key);
                watched.push((start, Some(end)));
            } else {
                watched.push((self.layout.highest(key), None));
            }
            for above in self.watcher.subtrees_above(key) {
                watched.push((self.layout.highest(&above), None));
            }
        }
        watched.sort();
        watched.dedup();
        if watched.len() > 2 * MAX_KEYS {
            return (
                Err(StoreError::Unsupported(
                    "a claim of several keys in shared fences may look at 120 fences at most",
                )),
                false,
            );
        }
        for _ in 0..MANY_ATTEMPTS {
            let reads: Vec<Value> = watched
                .iter()
                .map(|(start, end)| match end {
                    Some(end) => {
                        json!({ "request_range": { "key": b64(start), "range_end": b64(end) } })
                    }
                    None => json!({ "request_range": { "key": b64(start) } }),
                })
                .collect();
            let read = match self
                .client
                .call("/v3/kv/txn", &json!({ "success": reads }))
                .await
            {
                Ok(read) => read,
                Err(error) => return (Err(unavailable(error)), false),
            };
            let seen = int(&read["header"]["revision"]);
            let mut above: Option<(String, u64)> = None;
            for response in read["responses"].as_array().into_iter().flatten() {
                for kv in response["response_range"]["kvs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let (Some(raw), Some(value)) = (text(&kv["key"]), text(&kv["value"])) else {
                        continue;
                    };
                    let (Entry::Highest(key), Ok(highest)) =
                        (self.layout.parse(&raw), value.parse::<u64>())
                    else {
                        continue;
                    };
                    if highest > token && above.as_ref().is_none_or(|(_, h)| highest > *h) {
                        above = Some((key, highest));
                    }
                }
            }
            if let Some((key, highest)) = above {
                return (
                    Err(StoreError::Above {
                        key: key.into(),
                        highest,
                    }),
                    false,
                );
            }
            let unchanged: Vec<Value> = watched
                .iter()
                .map(|(start, end)| {
                    let mut compare = json!({ "key": b64(start), "target": "MOD", "result": "LESS",
                                              "mod_revision": (seen + 1).to_string() });
                    if let Some(end) = end {
                        compare["range_end"] = json!(b64(end));
                    }
                    compare
                })
                .collect();
            let mut writes = Vec::new();
            for key in keys {
                writes.push(json!({ "request_put": {
                    "key": b64(&self.layout.highest(key)), "value": b64(&pad(token)) } }));
                writes.push(json!({ "request_put": {
                    "key": b64(&self.layout.record(key, token, &holder)),
                    "lease": lease.id().to_string() } }));
            }
            let answer = self
                .client
                .call(
                    "/v3/kv/txn",
                    &json!({ "compare": unchanged, "success": writes }),
                )
                .await;
            self.counters.transactions.fetch_add(1, Ordering::Relaxed);
            let answer = match answer {
                Ok(answer) => answer,
                Err(error) => {
                    if error.lease_gone() {
                        lease.revoke();
                    }
                    let ambiguous = matches!(error, CallError::Unreachable(_));
                    return (Err(unavailable(error)), ambiguous);
                }
            };
            if answer["succeeded"] != Value::Bool(true) {
                continue;
            }
            let revision = int(&answer["header"]["revision"]);
            self.counters
                .seen_revision
                .fetch_max(u64::try_from(revision).unwrap_or(0), Ordering::Relaxed);
            self.counters
                .claims_committed
                .fetch_add(1, Ordering::Relaxed);
            let holds = keys
                .iter()
                .map(|key| self.records.granted(key, token, lease, revision, true))
                .collect();
            let under = keys
                .iter()
                .filter(|key| subtrees && subtree_path(key).is_some())
                .cloned()
                .collect();
            let hold = self.records.many_hold(holds, under, token, lease, revision);
            return (
                Ok(Claim {
                    highest: token,
                    hold: Some(Box::new(hold)),
                }),
                false,
            );
        }
        (
            Err(unavailable(
                "the fences of a claim of several keys kept changing while it was made; retry",
            )),
            false,
        )
    }

    /// One claim as a nested transaction (see the module docs):
    /// `hw < t`: raise, put the record, list lower records;
    /// `hw == t`: put the record, list lower records;
    /// no `hw`: as `hw < t`; `hw > t`: read `hw` (stale).
    pub(super) fn claim_txn(&self, key: &str, token: u64, lease: &Lease, holder: &str) -> Value {
        let hw = b64(&self.layout.highest(key));
        let value = b64(&pad(token));
        let put_hw = json!({ "request_put": { "key": hw, "value": value } });
        let put_record = json!({ "request_put": {
            "key": b64(&self.layout.record(key, token, holder)),
            "lease": lease.id().to_string(),
        }});
        let (from, below) = self.layout.records_below(key, token);
        let lower = json!({ "request_range": {
            "key": b64(&from), "range_end": b64(&below), "keys_only": true,
        }});
        let compare = |target: &str, result: &str| {
            let mut compare = json!({ "key": hw, "target": target, "result": result });
            if target == "VALUE" {
                compare["value"] = json!(value);
            } else {
                compare["version"] = json!("0");
            }
            compare
        };
        let missing_or_stale = json!({ "request_txn": {
            "compare": [compare("VERSION", "EQUAL")],
            "success": [put_hw, put_record, lower],
            "failure": [{ "request_range": { "key": hw } }],
        }});
        let equal_or_above = json!({ "request_txn": {
            "compare": [compare("VALUE", "EQUAL")],
            "success": [put_record, lower],
            "failure": [missing_or_stale],
        }});
        json!({ "request_txn": {
            "compare": [compare("VALUE", "LESS")],
            "success": [put_hw, put_record, lower],
            "failure": [equal_or_above],
        }})
    }
}

impl ClaimOutcome {
    fn parse(response: &Value) -> Self {
        let outer = &response["response_txn"];
        if outer["succeeded"] == Value::Bool(true) {
            return Self::granted(&outer["responses"][2]);
        }
        let equal = &outer["responses"][0]["response_txn"];
        if equal["succeeded"] == Value::Bool(true) {
            return Self::granted(&equal["responses"][1]);
        }
        let missing = &equal["responses"][0]["response_txn"];
        if missing["succeeded"] == Value::Bool(true) {
            return Self::granted(&missing["responses"][2]);
        }
        let kv = &missing["responses"][0]["response_range"]["kvs"][0];
        match text(&kv["value"]).and_then(|v| v.parse().ok()) {
            Some(highest) => Self::Stale(highest),
            None => Self::Malformed,
        }
    }

    fn granted(range: &Value) -> Self {
        let keys = range["response_range"]["kvs"]
            .as_array()
            .map(|kvs| kvs.iter().filter_map(|kv| text(&kv["key"])).collect())
            .unwrap_or_default();
        Self::Granted(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range_of(keys: &[&str]) -> Value {
        let kvs: Vec<Value> = keys.iter().map(|k| json!({ "key": b64(k) })).collect();
        json!({ "response_range": { "kvs": kvs } })
    }

    #[test]
    fn each_branch_of_a_claim_is_read_back() {
        let put = json!({ "response_put": {} });
        let lower = range_of(&["/p/fl/k/00000000000000000033/a.1"]);
        // hw < t: raised.
        let raised =
            json!({ "response_txn": { "succeeded": true, "responses": [put, put, lower] } });
        assert!(
            matches!(ClaimOutcome::parse(&raised), ClaimOutcome::Granted(keys) if keys.len() == 1)
        );
        // hw == t.
        let equal = json!({ "response_txn": { "responses": [
            { "response_txn": { "succeeded": true, "responses": [put, range_of(&[])] } }
        ] } });
        assert!(
            matches!(ClaimOutcome::parse(&equal), ClaimOutcome::Granted(keys) if keys.is_empty())
        );
        // No hw yet.
        let missing = json!({ "response_txn": { "responses": [
            { "response_txn": { "responses": [
                { "response_txn": { "succeeded": true, "responses": [put, put, range_of(&[])] } }
            ] } }
        ] } });
        assert!(matches!(
            ClaimOutcome::parse(&missing),
            ClaimOutcome::Granted(_)
        ));
        // hw > t: stale, with the stored highest.
        let stale = json!({ "response_txn": { "responses": [
            { "response_txn": { "responses": [
                { "response_txn": { "responses": [
                    { "response_range": { "kvs": [{ "key": b64("/p/hw/k"), "value": b64(&pad(35)) }] } }
                ] } }
            ] } }
        ] } });
        assert!(matches!(
            ClaimOutcome::parse(&stale),
            ClaimOutcome::Stale(35)
        ));
        assert!(matches!(
            ClaimOutcome::parse(&json!({})),
            ClaimOutcome::Malformed
        ));
    }
}
