//! Claims, committed many to an etcd transaction (group commit).

use std::collections::HashSet;

use tokio::task::JoinSet;

use super::*;

pub(super) struct Pending {
    pub(super) key: String,
    pub(super) token: u64,
    pub(super) reply: oneshot::Sender<Result<Claim, StoreError>>,
}

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

impl Shared {
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
                let keys: Vec<String> = batch.iter().map(|p| p.key.clone()).collect();
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
        let current = self.current_lease().map(|lease| lease.id());
        orphans.retain(|orphan| Some(orphan.lease.id()) == current);
        let unused: Vec<String> = orphans
            .iter()
            .filter(|orphan| !self.has_record(&orphan.key, orphan.token, &orphan.lease))
            .map(|orphan| {
                let holder = self.holder(&orphan.lease);
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
        self: &Arc<Self>,
        deferred: &mut VecDeque<Pending>,
        busy: impl Fn(&str) -> bool,
    ) -> Vec<Pending> {
        let lease = self.current_lease().filter(Lease::is_live);
        let mut batch: Vec<Pending> = Vec::new();
        let mut later = VecDeque::new();
        while let Some(pending) = deferred.pop_front() {
            let Some(lease) = &lease else {
                let _ = pending.reply.send(Err(self.no_lease()));
                continue;
            };
            if let Some(hold) = self.reuse(&pending.key, pending.token, lease) {
                self.counters.claims_local.fetch_add(1, Ordering::Relaxed);
                let _ = pending.reply.send(Ok(Claim {
                    highest: pending.token,
                    hold: Some(Box::new(hold)),
                }));
            } else if batch.len() < MAX_BATCH
                && !busy(&pending.key)
                && batch.iter().all(|b| b.key != pending.key)
            {
                batch.push(pending);
            } else {
                later.push_back(pending);
            }
        }
        *deferred = later;
        batch
    }

    /// Commits `batch` in one transaction and answers each claim; returns
    /// the records the transaction may have put if its outcome is unknown.
    async fn commit(self: &Arc<Self>, batch: Vec<Pending>) -> Vec<Orphan> {
        let Some(lease) = self.current_lease().filter(Lease::is_live) else {
            for pending in batch {
                let _ = pending.reply.send(Err(self.no_lease()));
            }
            return Vec::new();
        };
        let holder = self.holder(&lease);
        let claims: Vec<Value> = batch
            .iter()
            .map(|p| self.claim_txn(&p.key, p.token, &lease, &holder))
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
            let outcome = ClaimOutcome::parse(&answer["responses"][index]);
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
                    let hold = self.granted(&pending.key, pending.token, &lease, revision, blocked);
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
