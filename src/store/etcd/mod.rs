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
//!
//! The parts, one per file, each a struct that owns its state and offers
//! an interface: `LeaseKeeper` (`lease_keeper.rs`: the lease), `Records`
//! (`records.rs`: this holder's in-flight records and the holds on them),
//! `ClaimBatcher` (`claims.rs`: claims into transactions), `HighestReads`
//! (`reads.rs`: linearizable reads of highests, batched), `Watcher`
//! (`watch.rs`: the replica, `replica.rs`, and the table's view, fed by the
//! watch) and `AdminLog` (`admin.rs`: admin writes and their audit).
//! What they all use is below them (`common.rs`: the counters, the size
//! of a transaction, two helpers; `layout.rs`: the keys under the prefix).
//! `EtcdStore` composes them (this file); each part is handed the parts it
//! uses when it is made; where that would make two files import each
//! other, this file wires a callback instead (a lost lease makes the
//! records forget their own; a raise seen by the watch may make a record
//! useless).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use self::admin::AdminLog;
use self::claims::ClaimBatcher;
use self::common::{lock, unavailable, Counters};
use self::layout::Layout;
use self::lease_keeper::LeaseKeeper;
use self::reads::HighestReads;
use self::records::Records;
use self::watch::Watcher;
use super::{
    AuditFuture, Claim, ClaimFuture, FenceChange, FenceEvents, FenceStore, HighestsFuture, Lease,
    ListFuture, MatchesFuture, PersistFuture, StoreError, StoreStats, UploadFuture,
};
use crate::etcd_http::{b64, text, Client};

mod admin;
mod claims;
mod common;
mod layout;
mod lease_keeper;
mod reads;
mod records;
mod replica;
mod watch;

/// How to reach and share the fences in etcd.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `http://host:port` of the cluster's members, or all `https://`
    /// with [`EtcdOptions::tls`].
    pub endpoints: Vec<String>,
    /// TLS to `https://` members: the CA that signs their certificates and
    /// the client certificate shown to them (etcd's `--client-cert-auth`),
    /// re-read by [`ClientTls::reload`](crate::client_tls::ClientTls::reload).
    pub tls: Option<Arc<crate::client_tls::ClientTls>>,
    /// etcd's authentication (RBAC): the user every call acts as.
    pub credentials: Option<crate::client_tls::Credentials>,
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
/// module docs (`src/store/etcd/mod.rs`) and `docs/SHARED.md`.
///
/// ```no_run
/// # async fn run() -> Result<(), fencegate::store::StoreError> {
/// use fencegate::store::EtcdOptions;
/// let fences = fencegate::Fences::etcd(EtcdOptions {
///     endpoints: vec!["http://127.0.0.1:2379".into()],
///     tls: None,
///     credentials: None,
///     prefix: "/fencegate/".into(),
///     lease_ttl: std::time::Duration::from_secs(6),
///     instance: "billing-1".into(),
///     settings: serde_json::json!({ "scope": "path" }),
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub struct EtcdStore {
    client: Client,
    layout: Arc<Layout>,
    counters: Arc<Counters>,
    keeper: Arc<LeaseKeeper>,
    records: Arc<Records>,
    claims: Arc<ClaimBatcher>,
    reads: HighestReads,
    watcher: Arc<Watcher>,
    admin: Arc<AdminLog>,
    /// The fences read at connect, handed to the table once by `load`.
    loaded: Mutex<Option<Vec<(String, u64)>>>,
    /// The watch revision to start from, once the table is attached.
    watch_from: i64,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.layout.prefix())
            .field("instance", &self.keeper.instance())
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the cluster: checks the settings recorded under the
    /// prefix (recording them if none are), takes a lease, and reads every
    /// fence. Fails if no member answers, or if the settings differ.
    pub async fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        Self::connect_with(options, true).await
    }

    /// [`EtcdStore::connect`] for a table bounded in memory
    /// ([`Fences::etcd_with_cache`](crate::Fences::etcd_with_cache)): only
    /// the subtree fences are handed to the table, at start and when the
    /// watch reads everything again; a key's highest reaches memory with
    /// its claim.
    pub async fn connect_bounded(options: EtcdOptions) -> Result<Self, StoreError> {
        Self::connect_with(options, false).await
    }

    async fn connect_with(options: EtcdOptions, every_fence: bool) -> Result<Self, StoreError> {
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
        let client = Client::new(&options.endpoints, options.tls, options.credentials)
            .map_err(unavailable)?;
        let (queue, pending) = mpsc::unbounded_channel();
        let layout = Arc::new(Layout::new(&options.prefix));
        let counters = Arc::new(Counters::default());
        let keeper = Arc::new(LeaseKeeper::new(
            client.clone(),
            Arc::clone(&layout),
            options.instance.clone(),
            ttl,
            Arc::clone(&counters),
        ));
        let watcher = Arc::new(Watcher::new(
            client.clone(),
            Arc::clone(&layout),
            Arc::clone(&counters),
        ));
        let records = Arc::new(Records::new(
            client.clone(),
            Arc::clone(&layout),
            Arc::clone(&counters),
            Arc::clone(&keeper),
            Arc::clone(&watcher),
        ));
        let claims = Arc::new(ClaimBatcher::new(
            client.clone(),
            Arc::clone(&layout),
            Arc::clone(&counters),
            Arc::clone(&keeper),
            Arc::clone(&records),
            Arc::clone(&watcher),
            queue,
        ));
        let admin = Arc::new(AdminLog::new(
            client.clone(),
            Arc::clone(&layout),
            options.instance,
            Arc::clone(&records),
        ));
        let (reads, queued_reads) = HighestReads::new(Arc::clone(&counters));
        let reader = reads::etcd_reader(client.clone(), Arc::clone(&layout), Arc::clone(&counters));
        check_settings(&client, &layout, &options.settings).await?;
        let lease = keeper.grant().await.map_err(unavailable)?;
        if !every_fence {
            watcher.load_only_subtrees();
        }
        let (fences, revision) = watcher.load_all().await.map_err(unavailable)?;
        let store = EtcdStore {
            client,
            layout,
            counters,
            keeper: Arc::clone(&keeper),
            records: Arc::clone(&records),
            claims: Arc::clone(&claims),
            reads,
            watcher,
            admin,
            loaded: Mutex::new(Some(fences)),
            watch_from: revision + 1,
            tasks: Mutex::new(Vec::new()),
        };
        let mut tasks = lock(&store.tasks);
        tasks.push(tokio::spawn(Arc::clone(&keeper).keep_lease(lease, {
            let records = Arc::clone(&records);
            move || records.forget_all()
        })));
        tasks.push(tokio::spawn(claims.commit_claims(pending)));
        tasks.push(tokio::spawn(records.sweep_records()));
        tasks.push(tokio::spawn(reads::serve_reads(queued_reads, reader)));
        drop(tasks);
        Ok(store)
    }

    /// This holder's current lease, if it holds one.
    pub fn lease(&self) -> Option<Lease> {
        self.keeper.current()
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

    fn attach(&self, view: Arc<dyn FenceEvents>) {
        if self.watcher.attach(view) {
            let records = Arc::clone(&self.records);
            let watcher = tokio::spawn(
                Arc::clone(&self.watcher).watch(self.watch_from, move |fence, highest| {
                    records.raised(fence, highest)
                }),
            );
            lock(&self.tasks).push(watcher);
        }
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn claim(&self, key: &str, token: u64) -> ClaimFuture {
        let Some(lease) = self.keeper.current().filter(Lease::is_live) else {
            return Box::pin(std::future::ready(Err(self.keeper.no_lease())));
        };
        if let Some(hold) = self.records.reuse(key, token, &lease) {
            self.counters.claims_local.fetch_add(1, Ordering::Relaxed);
            return Box::pin(std::future::ready(Ok(Claim {
                highest: token,
                hold: Some(Box::new(hold)),
            })));
        }
        self.claims.queue_claim(key.to_owned(), None, token)
    }

    /// One transaction for every key (see `claims.rs`): all raised and
    /// registered, or none.
    fn claim_all(&self, keys: &[&str], token: u64) -> ClaimFuture {
        let mut keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
        keys.sort_unstable();
        keys.dedup();
        let subtree =
            |key: &String| self.watcher.subtrees() && crate::key::subtree_path(key).is_some();
        match keys.as_slice() {
            [] => {
                return Box::pin(std::future::ready(Err(StoreError::Unsupported(
                    "a claim needs at least one key",
                ))))
            }
            // A subtree key alone still needs the keys under it read.
            [key] if !subtree(key) => return self.claim(key, token),
            _ => {}
        }
        if self.keeper.current().filter(Lease::is_live).is_none() {
            return Box::pin(std::future::ready(Err(self.keeper.no_lease())));
        }
        let key = keys.remove(0);
        self.claims.queue_claim(key, Some(keys), token)
    }

    fn read_highests(&self, keys: &[&str]) -> HighestsFuture {
        self.reads
            .read(keys.iter().map(|key| (*key).to_owned()).collect())
    }

    fn list_stored(&self, prefix: &str, limit: usize) -> ListFuture {
        let client = self.client.clone();
        let layout = Arc::clone(&self.layout);
        let prefix = prefix.to_owned();
        Box::pin(async move {
            let (start, end) = layout.highests_with_prefix(&prefix);
            let answer = client
                .call(
                    "/v3/kv/range",
                    &json!({ "key": b64(&start), "range_end": b64(&end),
                             "limit": limit.to_string() }),
                )
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
            Ok(kvs
                .iter()
                .filter_map(|kv| {
                    let layout::Entry::Highest(key) = layout.parse(&text(&kv["key"])?) else {
                        return None;
                    };
                    Some((key, text(&kv["value"])?.parse().ok()?))
                })
                .collect())
        })
    }

    fn use_subtrees(&self) {
        self.watcher.use_subtrees();
    }

    fn record(&self, change: FenceChange) -> PersistFuture {
        let admin = Arc::clone(&self.admin);
        Box::pin(async move { admin.record(change).await })
    }

    fn check_namespace(&self, name: &str, shaping: &str) -> PersistFuture {
        let client = self.client.clone();
        let layout = Arc::clone(&self.layout);
        let (name, shaping) = (name.to_owned(), shaping.to_owned());
        Box::pin(async move {
            let key = layout.namespace(&name);
            let shaping: Value =
                serde_json::from_str(&shaping).unwrap_or_else(|_| Value::String(shaping.clone()));
            check_record(&client, &key, &shaping, || {
                format!(
                    "fence namespace {name:?} under etcd prefix {} keys its fences with",
                    layout.prefix()
                )
            })
            .await
        })
    }

    fn record_matches(&self, name: &str, matches: &str) -> PersistFuture {
        let client = self.client.clone();
        let key = self.layout.namespace_matches(name);
        let matches = matches.to_owned();
        Box::pin(async move {
            client
                .call(
                    "/v3/kv/put",
                    &json!({ "key": b64(&key), "value": b64(&matches) }),
                )
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            Ok(())
        })
    }

    fn namespace_matches(&self) -> MatchesFuture {
        let client = self.client.clone();
        let layout = Arc::clone(&self.layout);
        Box::pin(async move {
            let (start, end) = layout.namespace_matches_range();
            let answer = client
                .call(
                    "/v3/kv/range",
                    &json!({ "key": b64(&start), "range_end": b64(&end) }),
                )
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
            Ok(kvs
                .iter()
                .filter_map(|kv| {
                    let key = text(&kv["key"])?;
                    let name = layout.namespace_of_matches(&key)?;
                    Some((name, text(&kv["value"]).unwrap_or_default()))
                })
                .collect())
        })
    }

    fn bind_upload(&self, upload: &str, object: &str) -> PersistFuture {
        let client = self.client.clone();
        let key = self.layout.upload(upload);
        let object = object.to_owned();
        Box::pin(async move {
            // A put is answered once a quorum has it: every instance reads
            // it from then on.
            client
                .call(
                    "/v3/kv/put",
                    &json!({ "key": b64(&key), "value": b64(&object) }),
                )
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            Ok(())
        })
    }

    fn upload_object(&self, upload: &str) -> UploadFuture {
        let client = self.client.clone();
        let key = self.layout.upload(upload);
        Box::pin(async move {
            // Linearizable (etcd's default): a binding put by any
            // instance before this read is seen.
            let answer = client
                .call("/v3/kv/range", &json!({ "key": b64(&key) }))
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            let object = answer["kvs"]
                .as_array()
                .and_then(|kvs| kvs.first())
                .map(|kv| {
                    text(&kv["value"]).ok_or_else(|| {
                        unavailable(format!("an upload binding that is not UTF-8: {key}"))
                    })
                })
                .transpose()?;
            Ok(object)
        })
    }

    fn unbind_upload(&self, upload: &str) -> PersistFuture {
        let client = self.client.clone();
        let key = self.layout.upload(upload);
        Box::pin(async move {
            client
                .call("/v3/kv/deleterange", &json!({ "key": b64(&key) }))
                .await
                .map_err(|e| unavailable(format!("cannot reach etcd: {e}")))?;
            Ok(())
        })
    }

    fn audit(&self, limit: usize) -> AuditFuture {
        let admin = Arc::clone(&self.admin);
        Box::pin(async move { admin.audit(limit).await })
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn close(&self) {
        self.keeper.stop();
        self.watcher.stop();
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        self.keeper.release();
    }

    fn health(&self) -> Result<(), StoreError> {
        match self.keeper.current() {
            Some(lease) if lease.is_live() => Ok(()),
            _ => Err(self.keeper.no_lease()),
        }
    }

    fn stats(&self) -> StoreStats {
        let counters = &self.counters;
        let calls = &self.client.stats;
        let replica_revision = self.watcher.revision();
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
                highest_reads: counters.highest_reads.load(Ordering::Relaxed),
                highest_read_transactions: counters
                    .highest_read_transactions
                    .load(Ordering::Relaxed),
                view_lag: seen.saturating_sub(u64::try_from(replica_revision).unwrap_or(0)),
            }),
        }
    }
}

/// Records the settings under the prefix if none are, else compares.
async fn check_settings(
    client: &Client,
    layout: &Layout,
    settings: &Value,
) -> Result<(), StoreError> {
    check_record(client, &layout.config(), settings, || {
        format!("the instances sharing etcd prefix {} use", layout.prefix())
    })
    .await
    .map_err(|e| match e {
        StoreError::Mismatch(detail) => StoreError::Mismatch(
            format!("{detail}: every instance must use the same settings").into(),
        ),
        other => other,
    })
}

/// Puts `value` under `key` if nothing is there, else compares: a
/// different value is [`StoreError::Mismatch`], said as "`who()` RECORDED,
/// this one MINE".
async fn check_record(
    client: &Client,
    key: &str,
    value: &Value,
    who: impl FnOnce() -> String,
) -> Result<(), StoreError> {
    let key = b64(key);
    let mine = value.to_string();
    let answer = client
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
    if recorded_json == *value {
        return Ok(());
    }
    Err(StoreError::Mismatch(
        format!("{} {recorded}, this one {mine}", who()).into(),
    ))
}
