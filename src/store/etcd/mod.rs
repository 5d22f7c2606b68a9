//! Shared fences: every holder (gateway instance, Rust service) sharing an
//! etcd prefix fences as one. The design, its invariants and the timing
//! assumptions they rest on are in `docs/SHARED.md`; in short:
//!
//! - A **claim** of token `t` on key `k` is one etcd transaction (several
//!   claims share one: group commit) that raises `hw/k` to `t` if it is
//!   lower, puts this holder's in-flight record `fl/k/t/holder` on its
//!   lease, and lists the records of `k` below `t`. If `hw/k` is already
//!   above `t`, nothing is written and the request is stale.
//! - A claimed request waits until this holder's replica (fed by a watch)
//!   has caught up to the claim's revision and shows no record of another
//!   holder below `t`: records below `t` can only vanish after the claim,
//!   never appear, because every record is put in the transaction that
//!   checks `hw`.
//! - A record outlives its last request for a short linger, so that a
//!   steady token needs no round trip; it is deleted as soon as a higher
//!   highest shows up, and always vanishes with the lease.
//! - The **lease** is kept alive every TTL/6; this holder's deadline is the
//!   send time of the last acknowledged keep-alive plus the TTL minus a
//!   margin, on a clock that runs through suspend. Past it the lease is
//!   revoked locally: requests in flight under it are cut, new claims get
//!   503 until a fresh lease is held.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;

use self::client::{b64, int, text, CallError, Client};
use self::layout::{pad, Entry, Layout};
use self::replica::Replica;
use super::lease::boot_clock;
use super::{Claim, ClaimFuture, ClaimHold, FenceStore, FenceView, Lease, StoreError, StoreStats};

mod client;
mod layout;
mod replica;

/// Claims in one transaction at most. etcd refuses a transaction with more
/// than 128 operations at one level (`--max-txn-ops`); each claim is one
/// nested transaction.
const MAX_BATCH: usize = 100;

/// How long a record stays after its last request, in case the same token
/// comes again (the steady state of one lock holder).
const LINGER: Duration = Duration::from_secs(2);

/// Keys per page of the load at start.
const PAGE: usize = 10_000;

/// How to reach and share the fences in etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `http://host:port` of the cluster's members.
    pub endpoints: Vec<String>,
    /// Every key written starts with it; holders with the same prefix share
    /// fences. Ends with `/`.
    pub prefix: String,
    /// This holder's lease: its in-flight records vanish this long after it
    /// stops renewing. Whole seconds, at least 2.
    pub lease_ttl: Duration,
    /// Shown in records, logs and metrics.
    pub instance: String,
    /// What every holder of the prefix must agree on (for the gateway: the
    /// scope and the token header). Recorded by the first holder; a holder
    /// whose settings differ is refused at start.
    pub settings: Value,
}

/// Fences shared through an etcd cluster (feature `etcd`). See the
/// [module docs](self) and `docs/SHARED.md`.
///
/// ```no_run
/// # async fn run() -> Result<(), fencegate::store::StoreError> {
/// use fencegate::store::EtcdOptions;
/// let fences = fencegate::Fences::etcd(EtcdOptions {
///     endpoints: vec!["http://127.0.0.1:2379".into()],
///     prefix: "/fencegate/".into(),
///     lease_ttl: std::time::Duration::from_secs(6),
///     instance: "billing-1".into(),
///     settings: serde_json::json!({ "scope": "path" }),
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub struct EtcdStore {
    shared: Arc<Shared>,
    /// The fences read at connect, handed to the table once by `load`.
    loaded: Mutex<Option<Vec<(String, u64)>>>,
    /// The watch revision to start from, once the table is attached.
    watch_from: i64,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

struct Shared {
    client: Client,
    layout: Layout,
    instance: String,
    ttl: Duration,
    view: OnceLock<FenceView>,
    /// The lease claims are made under; `None` between losing one and
    /// being granted the next.
    lease: Mutex<Option<Lease>>,
    /// Why the store cannot take claims now, if it cannot.
    failure: Mutex<Option<Arc<str>>>,
    replica: Mutex<Replica>,
    /// This holder's records, by fence key.
    own: Mutex<HashMap<String, Vec<Own>>>,
    queue: mpsc::UnboundedSender<Pending>,
    /// Wakes the record sweeper (a higher highest arrived, a record idled).
    sweep: Notify,
    counters: Counters,
    closed: AtomicBool,
}

/// One record of this holder.
#[derive(Debug)]
struct Own {
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

#[derive(Debug, Default)]
struct Counters {
    claims_local: AtomicU64,
    claims_committed: AtomicU64,
    transactions: AtomicU64,
    waits: AtomicU64,
    lease_losses: AtomicU64,
    records_deleted: AtomicU64,
    /// The newest revision etcd reported in a transaction answer; with the
    /// replica's revision, the local view's lag.
    seen_revision: AtomicU64,
}

struct Pending {
    key: String,
    token: u64,
    reply: oneshot::Sender<Result<Claim, StoreError>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.shared.layout.prefix())
            .field("instance", &self.shared.instance)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unavailable(detail: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(detail.to_string().into())
}

impl EtcdStore {
    /// Connects to the cluster: checks the settings recorded under the
    /// prefix (recording them if none are), takes a lease, and reads every
    /// fence. Fails if no member answers, or if the settings differ.
    pub async fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        if options.endpoints.is_empty() {
            return Err(unavailable("no etcd endpoint given"));
        }
        if !options.prefix.ends_with('/') || !options.prefix.is_ascii() {
            return Err(unavailable(format!(
                "the etcd prefix must be ASCII and end with '/': {:?}",
                options.prefix
            )));
        }
        let ttl = Duration::from_secs(options.lease_ttl.as_secs().max(2));
        let (queue, pending) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            client: Client::new(&options.endpoints),
            layout: Layout::new(&options.prefix),
            instance: options.instance,
            ttl,
            view: OnceLock::new(),
            lease: Mutex::new(None),
            failure: Mutex::new(None),
            replica: Mutex::new(Replica::default()),
            own: Mutex::new(HashMap::new()),
            queue,
            sweep: Notify::new(),
            counters: Counters::default(),
            closed: AtomicBool::new(false),
        });
        shared.check_settings(&options.settings).await?;
        let lease = shared.grant().await.map_err(unavailable)?;
        let (fences, revision) = shared.load_all().await.map_err(unavailable)?;
        let store = EtcdStore {
            shared: Arc::clone(&shared),
            loaded: Mutex::new(Some(fences)),
            watch_from: revision + 1,
            tasks: Mutex::new(Vec::new()),
        };
        let mut tasks = lock(&store.tasks);
        tasks.push(tokio::spawn(Arc::clone(&shared).keep_lease(lease)));
        tasks.push(tokio::spawn(Arc::clone(&shared).commit_claims(pending)));
        tasks.push(tokio::spawn(Arc::clone(&shared).sweep_records()));
        drop(tasks);
        Ok(store)
    }

    /// This holder's current lease, if it holds one.
    pub fn lease(&self) -> Option<Lease> {
        self.shared.current_lease()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl FenceStore for EtcdStore {
    fn load(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        let fences = lock(&self.loaded)
            .take()
            .ok_or_else(|| unavailable("the store was already loaded"))?;
        for (key, highest) in &fences {
            each(key, *highest);
        }
        Ok(())
    }

    fn attach(&self, view: FenceView) {
        if self.shared.view.set(view).is_ok() {
            let watcher = tokio::spawn(Arc::clone(&self.shared).watch(self.watch_from));
            lock(&self.tasks).push(watcher);
        }
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn claim(&self, key: &str, token: u64) -> ClaimFuture {
        let shared = &self.shared;
        let Some(lease) = shared.current_lease().filter(Lease::is_live) else {
            return Box::pin(std::future::ready(Err(shared.no_lease())));
        };
        if let Some(hold) = shared.reuse(key, token, &lease) {
            shared.counters.claims_local.fetch_add(1, Ordering::Relaxed);
            return Box::pin(std::future::ready(Ok(Claim {
                highest: token,
                hold: Some(Box::new(hold)),
            })));
        }
        let (reply, answer) = oneshot::channel();
        let queued = shared.queue.send(Pending {
            key: key.to_owned(),
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

    fn is_durable(&self) -> bool {
        true
    }

    fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        if let Some(lease) = lock(&self.shared.lease).take() {
            lease.revoke();
            // Best effort: lets the other holders go at once instead of
            // after the TTL. Needs a runtime; at exit there may be none.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let client = self.shared.client.clone();
                runtime.spawn(async move {
                    let _ = client
                        .call("/v3/lease/revoke", &json!({ "ID": lease.id().to_string() }))
                        .await;
                });
            }
        }
    }

    fn health(&self) -> Result<(), StoreError> {
        match self.shared.current_lease() {
            Some(lease) if lease.is_live() => Ok(()),
            _ => Err(self.shared.no_lease()),
        }
    }

    fn stats(&self) -> StoreStats {
        let counters = &self.shared.counters;
        let calls = &self.shared.client.stats;
        let replica_revision = lock(&self.shared.replica).revision;
        let seen = counters.seen_revision.load(Ordering::Relaxed);
        StoreStats {
            raises: counters.claims_committed.load(Ordering::Relaxed),
            commits: counters.transactions.load(Ordering::Relaxed),
            shared: Some(super::SharedStats {
                lease_held: self.health().is_ok(),
                lease_losses: counters.lease_losses.load(Ordering::Relaxed),
                claims_local: counters.claims_local.load(Ordering::Relaxed),
                round_trips: calls.calls.load(Ordering::Relaxed),
                round_trip_failures: calls.failures.load(Ordering::Relaxed),
                round_trip_seconds: calls.micros.load(Ordering::Relaxed) as f64 / 1e6,
                waits: counters.waits.load(Ordering::Relaxed),
                records_deleted: counters.records_deleted.load(Ordering::Relaxed),
                view_lag: seen.saturating_sub(u64::try_from(replica_revision).unwrap_or(0)),
            }),
        }
    }
}

impl Shared {
    fn current_lease(&self) -> Option<Lease> {
        lock(&self.lease).clone()
    }

    fn no_lease(&self) -> StoreError {
        let failure = lock(&self.failure).clone();
        unavailable(format!(
            "instance {} holds no lease on the shared fences{}",
            self.instance,
            failure.map_or_else(String::new, |f| format!(" ({f})"))
        ))
    }

    fn holder(&self, lease: &Lease) -> String {
        Layout::holder(&self.instance, lease.id())
    }

    /// A claim answered from this holder's own record of `(key, token)`
    /// on the current lease: no round trip.
    fn reuse(self: &Arc<Self>, key: &str, token: u64, lease: &Lease) -> Option<Hold> {
        let mut own = lock(&self.own);
        let record = own
            .get_mut(key)?
            .iter_mut()
            .find(|r| r.token == token && r.lease == lease.id())?;
        record.users += 1;
        record.idle_since = None;
        Some(Hold {
            shared: Arc::clone(self),
            key: key.to_owned(),
            token,
            lease: lease.clone(),
            holder: self.holder(lease),
            blocked_at: record.blocked_at,
        })
    }

    /// Records the settings under the prefix if none are, else compares.
    async fn check_settings(&self, settings: &Value) -> Result<(), StoreError> {
        let key = b64(&self.layout.config());
        let mine = settings.to_string();
        let answer = self
            .client
            .call(
                "/v3/kv/txn",
                &json!({
                    "compare": [{ "key": key, "target": "VERSION", "result": "EQUAL", "version": "0" }],
                    "success": [{ "request_put": { "key": key, "value": b64(&mine) } }],
                    "failure": [{ "request_range": { "key": key } }],
                }),
            )
            .await
            .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
        if answer["succeeded"] == Value::Bool(true) {
            return Ok(());
        }
        let recorded =
            text(&answer["responses"][0]["response_range"]["kvs"][0]["value"]).unwrap_or_default();
        let recorded_json: Value = serde_json::from_str(&recorded).unwrap_or(Value::Null);
        if recorded_json == *settings {
            return Ok(());
        }
        Err(StoreError::Mismatch(
            format!(
                "the instances sharing etcd prefix {} use {recorded}, this one {mine}: \
                 every instance must use the same settings",
                self.layout.prefix()
            )
            .into(),
        ))
    }

    /// Grants a fresh lease and announces this holder under `members/`.
    async fn grant(&self) -> Result<Lease, CallError> {
        let sent = boot_clock();
        let answer = self
            .client
            .call("/v3/lease/grant", &json!({ "TTL": self.ttl.as_secs() }))
            .await?;
        let id = int(&answer["ID"]);
        let ttl = int(&answer["TTL"]);
        if id == 0 || ttl <= 0 {
            return Err(CallError::Refused(format!("lease not granted: {answer}")));
        }
        let lease = Lease::new(id, self.deadline(sent, ttl));
        let member = json!({
            "instance": self.instance,
            "lease": format!("{id:x}"),
            "since": unix_seconds(SystemTime::now()),
        });
        self.client
            .call(
                "/v3/kv/put",
                &json!({
                    "key": b64(&self.layout.member(&self.instance)),
                    "value": b64(&member.to_string()),
                    "lease": id.to_string(),
                }),
            )
            .await?;
        *lock(&self.lease) = Some(lease.clone());
        *lock(&self.failure) = None;
        Ok(lease)
    }

    /// The deadline of a lease whose keep-alive (or grant) was sent at
    /// `sent` and answered with `ttl` seconds: the lease lives at least
    /// until `sent + ttl` in etcd's eyes; a margin of a quarter of the TTL
    /// (at least 250 ms) covers clock drift within the TTL, a pause between
    /// a check and a write, and the time the backend may still apply a
    /// request whose connection was cut (docs/SHARED.md).
    fn deadline(&self, sent: Duration, ttl: i64) -> Duration {
        let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
        let margin = (ttl / 4).max(Duration::from_millis(250));
        (sent + ttl).saturating_sub(margin)
    }

    /// Every fence under the prefix and every record, as of one revision.
    async fn load_all(&self) -> Result<(Vec<(String, u64)>, i64), CallError> {
        let mut fences = Vec::new();
        let mut records = Vec::new();
        let (start, end) = self.layout.everything();
        let mut from = start;
        let mut revision = 0;
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
                    Entry::Highest(fence) => {
                        if let Some(highest) = text(&kv["value"]).and_then(|v| v.parse().ok()) {
                            fences.push((fence, highest));
                        }
                    }
                    Entry::Record(record) => records.push(record),
                    Entry::Other => {}
                }
                last = Some(key);
            }
            match last {
                Some(last) if answer["more"] == Value::Bool(true) => from = format!("{last}\0"),
                _ => break,
            }
        }
        let mut replica = lock(&self.replica);
        replica.reset(revision);
        for record in records {
            replica.insert(record.key, record.token, record.holder);
        }
        Ok((fences, revision))
    }

    /// Keeps `lease` alive; at its deadline (or when etcd says it is gone)
    /// revokes it, then takes a fresh one. Runs for the store's life.
    async fn keep_lease(self: Arc<Self>, mut lease: Lease) {
        let interval = (self.ttl / 6).max(Duration::from_millis(100));
        loop {
            self.renew_until_lost(&lease, interval).await;
            lease.revoke();
            self.counters.lease_losses.fetch_add(1, Ordering::Relaxed);
            *lock(&self.lease) = None;
            lock(&self.own).clear();
            tracing::error!(
                instance = self.instance.as_str(),
                lease = format!("{:x}", lease.id()),
                "lost the lease on the shared fences: requests in flight cut, new ones refused (503) until a new lease is held"
            );
            // Best effort: the records of the old lease vanish now rather
            // than at its expiry, so the other instances go on sooner.
            let _ = self
                .client
                .call("/v3/lease/revoke", &json!({ "ID": lease.id().to_string() }))
                .await;
            lease = loop {
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                match self.grant().await {
                    Ok(fresh) => break fresh,
                    Err(error) => {
                        *lock(&self.failure) = Some(error.to_string().into());
                        tokio::time::sleep(interval).await;
                    }
                }
            };
            tracing::warn!(
                instance = self.instance.as_str(),
                lease = format!("{:x}", lease.id()),
                "holds a lease on the shared fences again"
            );
        }
    }

    /// Renews `lease` every `interval` until it is past its deadline or
    /// revoked (by etcd's word or a failed claim).
    async fn renew_until_lost(&self, lease: &Lease, interval: Duration) {
        let id = lease.id().to_string();
        let mut failing = false;
        loop {
            let left = lease.deadline().saturating_sub(boot_clock());
            if left.is_zero() || lease.is_revoked() {
                return;
            }
            // Also wakes at the deadline, to cut what is in flight on time.
            tokio::time::sleep(interval.min(left)).await;
            if !lease.is_live() {
                return;
            }
            let sent = boot_clock();
            match self
                .client
                .call("/v3/lease/keepalive", &json!({ "ID": id }))
                .await
            {
                Ok(answer) => {
                    let ttl = int(&answer["result"]["TTL"]);
                    if ttl <= 0 {
                        *lock(&self.failure) = Some("etcd expired the lease".into());
                        return;
                    }
                    lease.extend(self.deadline(sent, ttl));
                    if failing {
                        tracing::warn!(instance = self.instance.as_str(), "reaches etcd again");
                        failing = false;
                    }
                    *lock(&self.failure) = None;
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(
                            instance = self.instance.as_str(),
                            %error,
                            "cannot renew the lease on the shared fences; retrying until its deadline"
                        );
                        failing = true;
                    }
                    *lock(&self.failure) = Some(error.to_string().into());
                }
            }
        }
    }

    /// Commits claims as they come, many per transaction.
    async fn commit_claims(self: Arc<Self>, mut queue: mpsc::UnboundedReceiver<Pending>) {
        let mut deferred: VecDeque<Pending> = VecDeque::new();
        loop {
            if deferred.is_empty() {
                match queue.recv().await {
                    Some(first) => deferred.push_back(first),
                    None => return,
                }
            }
            while let Ok(more) = queue.try_recv() {
                deferred.push_back(more);
            }
            let batch = self.take_batch(&mut deferred);
            if !batch.is_empty() {
                self.commit(batch).await;
            }
        }
    }

    /// Up to [`MAX_BATCH`] claims on distinct keys (etcd refuses a
    /// transaction that puts one key twice); claims that can be answered
    /// from a record made meanwhile are answered at once.
    fn take_batch(self: &Arc<Self>, deferred: &mut VecDeque<Pending>) -> Vec<Pending> {
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
            } else if batch.len() < MAX_BATCH && batch.iter().all(|b| b.key != pending.key) {
                batch.push(pending);
            } else {
                later.push_back(pending);
            }
        }
        *deferred = later;
        batch
    }

    async fn commit(self: &Arc<Self>, batch: Vec<Pending>) {
        let Some(lease) = self.current_lease().filter(Lease::is_live) else {
            for pending in batch {
                let _ = pending.reply.send(Err(self.no_lease()));
            }
            return;
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
                let error = unavailable(error);
                for pending in batch {
                    let _ = pending.reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let revision = int(&answer["header"]["revision"]);
        self.counters
            .seen_revision
            .fetch_max(u64::try_from(revision).unwrap_or(0), Ordering::Relaxed);
        for (index, pending) in batch.into_iter().enumerate() {
            let outcome = ClaimOutcome::parse(&answer["responses"][index]);
            let reply = match outcome {
                ClaimOutcome::Stale(highest) => Ok(Claim {
                    highest,
                    hold: None,
                }),
                ClaimOutcome::Granted(lower) => {
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
    }

    /// Registers this holder's record of `(key, token)`, put at `revision`.
    fn granted(
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
        let record = match records.iter_mut().position(|r| r.token == token) {
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
        record.lease = lease.id();
        record.put_revision = revision;
        record.users += 1;
        record.idle_since = None;
        if blocked {
            record.blocked_at = Some(revision);
        }
        Hold {
            shared: Arc::clone(self),
            key: key.to_owned(),
            token,
            lease: lease.clone(),
            holder: self.holder(lease),
            blocked_at: record.blocked_at,
        }
    }

    /// One claim as a nested transaction (see the module docs):
    /// `hw < t`: raise, put the record, list lower records;
    /// `hw == t`: put the record, list lower records;
    /// no `hw`: as `hw < t`; `hw > t`: read `hw` (stale).
    fn claim_txn(&self, key: &str, token: u64, lease: &Lease, holder: &str) -> Value {
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

    /// Follows every change under the prefix from `from`, for the store's
    /// life: records into the replica, highest tokens into the table.
    async fn watch(self: Arc<Self>, mut from: i64) {
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
            loop {
                let message = match stream.next().await {
                    Ok(message) => message,
                    Err(error) => {
                        tracing::debug!(%error, "etcd watch broke; reopening");
                        break;
                    }
                };
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

    /// Reads everything again after the watch lost its place.
    async fn reload(&self) -> Result<i64, CallError> {
        let (fences, revision) = self.load_all().await?;
        if let Some(view) = self.view.get() {
            for (key, highest) in fences {
                view.raised(&key, highest);
            }
        }
        Ok(revision)
    }

    /// Applies one watch message; the newest revision it carried.
    fn apply(&self, result: &Value) -> Option<i64> {
        let events = result["events"].as_array()?;
        let view = self.view.get()?;
        let mut touched = Vec::new();
        let mut newest = None;
        let mut raised = Vec::new();
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
                        raised.push((fence, if deleted { None } else { highest }));
                    }
                    Entry::Other => {}
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
        touched.dedup();
        for key in touched {
            view.changed(&key);
        }
        newest
    }

    /// Whether this holder has an idle record of `key` below `highest`.
    fn idle_below(&self, key: &str, highest: u64) -> bool {
        lock(&self.own)
            .get(key)
            .is_some_and(|records| records.iter().any(|r| r.users == 0 && r.token < highest))
    }

    /// Deletes this holder's records that no request uses any more, once
    /// their linger is over or a higher highest makes them useless.
    async fn sweep_records(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.sweep.notified() => {}
                () = tokio::time::sleep(LINGER / 4) => {}
            }
            let done = self.collect_done();
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
    }

    /// Takes the records to delete out of `own`: (etcd key, put revision).
    fn collect_done(&self) -> Vec<(String, i64)> {
        let Some(view) = self.view.get() else {
            return Vec::new();
        };
        let Some(lease) = self.current_lease() else {
            return Vec::new();
        };
        let holder = self.holder(&lease);
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

/// What one claim's nested transaction came to.
enum ClaimOutcome {
    /// Registered; the keys of the records of the key below the token.
    Granted(Vec<String>),
    /// A higher highest was there: nothing written.
    Stale(u64),
    Malformed,
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

/// A claim of this holder, kept by a waiting or in-flight request.
struct Hold {
    shared: Arc<Shared>,
    key: String,
    token: u64,
    lease: Lease,
    holder: String,
    blocked_at: Option<i64>,
}

impl ClaimHold for Hold {
    fn waits(&self) -> bool {
        self.blocked_at.is_some_and(|revision| {
            lock(&self.shared.replica).blocks(&self.key, self.token, &self.holder, revision)
        })
    }

    fn lease(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut own = lock(&self.shared.own);
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
                .shared
                .view
                .get()
                .and_then(|view| view.highest(&self.key))
                > Some(self.token);
            drop(own);
            if outdated {
                self.shared.sweep.notify_one();
            }
        }
    }
}

/// Seconds since the Unix epoch: when an instance started, in its member
/// record.
fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
