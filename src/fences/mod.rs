//! Step 3 of the data path: admission. The fence table keeps, per key, the
//! highest token admitted so far and the requests in flight, and decides
//! whether a request may go on.
//!
//! # The rules
//!
//! With `highest` the highest token admitted on the key (none yet: anything
//! is admitted):
//!
//! 1. `token < highest`: refused, [`StaleReason::BelowHighest`].
//! 2. Otherwise `highest := token`, made durable by the [`FenceStore`](crate::store::FenceStore) before
//!    anything else; then the request waits until no request with a *lower*
//!    token on the key is still in flight; then it is let through and holds an
//!    [`InFlight`] guard until its response is done.
//! 3. A waiter whose token is overtaken by a higher admitted token before it
//!    was let through is refused, [`StaleReason::Overtaken`].
//!
//! Equal tokens go through together: one lock holder may issue parallel
//! requests. A consequence of rules 2 and 3 is that every request in flight on
//! a key carries the same token, the current highest, which is why one
//! `(token, count)` pair per key is enough to track them.
//!
//! Without step 2's wait, token 33 could pass the check, be overtaken on the
//! way to the backend by 34, and land last: the lost write fencing exists to
//! prevent.
//!
//! ```
//! # tokio_test_block_on(async {
//! use fencegate::{Fences, StaleReason};
//!
//! let fences = Fences::in_memory();
//! let first = fences.admit("/bucket/report", 33).await.unwrap();
//! drop(first); // the request finished
//! let _second = fences.admit("/bucket/report", 34).await.unwrap();
//! let stale = fences.admit("/bucket/report", 33).await.unwrap_err();
//! assert_eq!(stale.stale().unwrap().reason, StaleReason::BelowHighest);
//! assert_eq!(fences.highest("/bucket/report"), Some(34));
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::key::is_namespaced;
pub use crate::key::NAMESPACE_END;
use crate::store::{ClaimHold, LeaseEnded, LeaseStage, StoreError, StoreStats};

mod admin;
mod admission;
mod cache;
mod limit;
mod many;
mod open;
mod state;
mod table;
mod view;

pub use self::admission::{Admission, AdmitError, InFlight, Stale, StaleReason};
use self::state::{changed_or_revoked, Fence, FenceState, FROZEN, RETIRED, USED};
use self::table::Table;

pub use self::cache::{CacheStats, FenceCache};
pub use self::limit::{Limited, NewFenceLimit};

pub use self::many::AdmitAllError;
pub use self::view::FenceView;

pub use self::admin::{AdminWriteError, FenceWritten, SetFence};

/// The fence table: every fence's highest token, the requests in flight, and
/// the store that makes raises durable. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Fences {
    inner: Arc<Table>,
    /// The namespace's key prefix (`billing§`); `None`: the default
    /// namespace, whose keys are unprefixed ([`Fences::namespace`]).
    namespace: Option<Arc<str>>,
}

/// A key as the table holds it ([`Fences::qualify`]).
#[derive(Debug)]
pub(crate) enum Qualified<'k> {
    /// The default namespace's: the key as given.
    Plain(&'k str),
    /// `name§key`, short enough for the stack.
    Short(arrayvec::ArrayString<SHORT_KEY>),
    /// `name§key`.
    Long(String),
}

/// The longest qualified key kept on the stack.
const SHORT_KEY: usize = 120;

impl std::ops::Deref for Qualified<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Qualified::Plain(key) => key,
            Qualified::Short(key) => key.as_str(),
            Qualified::Long(key) => key,
        }
    }
}

impl std::fmt::Debug for Fences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fences")
            .field("fences", &self.inner.fences.len())
            .field("durable", &self.inner.durable)
            .finish()
    }
}

impl Fences {
    /// The same table seen through namespace `name`: every key this handle
    /// is given is `name§key` in the table, so two namespaces never share
    /// a fence; `""` is the default namespace, whose keys are as given
    /// (the fences of a gateway without routes).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let fences = fencegate::Fences::in_memory();
    /// let billing = fences.namespace("billing");
    /// drop(billing.admit("/report", 7).await.unwrap());
    /// assert_eq!(billing.highest("/report"), Some(7));
    /// assert_eq!(fences.highest("/report"), None);
    /// assert_eq!(fences.highest("billing§/report"), Some(7));
    /// # });
    /// ```
    pub fn namespace(&self, name: &str) -> Fences {
        Fences {
            inner: Arc::clone(&self.inner),
            namespace: (!name.is_empty()).then(|| format!("{name}{NAMESPACE_END}").into()),
        }
    }

    /// The namespace's name (`""`: the default).
    pub fn namespace_name(&self) -> &str {
        self.namespace.as_deref().map_or("", |prefix| {
            &prefix[..prefix.len() - NAMESPACE_END.len_utf8()]
        })
    }

    /// `key` as the table holds it.
    pub(crate) fn qualify<'k>(&self, key: &'k str) -> Qualified<'k> {
        let Some(prefix) = &self.namespace else {
            return Qualified::Plain(key);
        };
        // On the stack when it fits: a request in a named namespace then
        // costs no allocation for its key (W1: about 250 instructions).
        let mut short = arrayvec::ArrayString::new();
        if short.try_push_str(prefix).is_ok() && short.try_push_str(key).is_ok() {
            return Qualified::Short(short);
        }
        let mut long = String::with_capacity(prefix.len() + key.len());
        long.push_str(prefix);
        long.push_str(key);
        Qualified::Long(long)
    }

    /// A key of the table as this namespace names it; `None` if it is
    /// another namespace's.
    pub(crate) fn unqualify<'k>(&self, key: &'k str) -> Option<&'k str> {
        match &self.namespace {
            Some(prefix) => key.strip_prefix(&**prefix),
            None => (!is_namespaced(key)).then_some(key),
        }
    }

    /// Records what shapes the keys of namespace `name` in the store, or
    /// checks that it is what is recorded there
    /// ([`FenceStore::check_namespace`]).
    pub async fn check_namespace(&self, name: &str, shaping: &str) -> Result<(), StoreError> {
        self.inner.store.check_namespace(name, shaping).await
    }

    /// Records which requests namespace `name`'s routes take
    /// ([`FenceStore::record_matches`]).
    pub async fn record_matches(&self, name: &str, matches: &str) -> Result<(), StoreError> {
        self.inner.store.record_matches(name, matches).await
    }

    /// Every namespace's recorded matches ([`FenceStore::namespace_matches`]).
    pub async fn namespace_matches(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.inner.store.namespace_matches().await
    }

    /// Records, where the fences live, that the S3 multipart upload
    /// `upload_id` of `bucket` writes `key` (as S3 reads it: decoded, a
    /// trailing `/` kept), durably before it answers `Ok`
    /// ([`FenceStore::bind_upload`](crate::store::FenceStore::bind_upload)):
    /// without credential custody the gateway then refuses the id through
    /// any other key's path, at every instance sharing the store and after
    /// a restart. Per namespace, as fences are.
    pub async fn bind_upload(
        &self,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let upload = self.upload_name(bucket, upload_id);
        self.inner.store.bind_upload(&upload, key).await
    }

    /// The key [`Fences::bind_upload`] recorded for the upload `upload_id`
    /// of `bucket`, if any.
    pub async fn upload_key(
        &self,
        bucket: &str,
        upload_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let upload = self.upload_name(bucket, upload_id);
        self.inner.store.upload_object(&upload).await
    }

    /// Forgets what [`Fences::bind_upload`] recorded for the upload
    /// `upload_id` of `bucket` (completed or aborted).
    pub async fn unbind_upload(&self, bucket: &str, upload_id: &str) -> Result<(), StoreError> {
        let upload = self.upload_name(bucket, upload_id);
        self.inner.store.unbind_upload(&upload).await
    }

    /// The store's name of an upload: `bucket/id` (a bucket has no `/`),
    /// in this namespace.
    fn upload_name(&self, bucket: &str, upload_id: &str) -> String {
        let mut name = String::with_capacity(bucket.len() + upload_id.len() + 1);
        name.push_str(bucket);
        name.push('/');
        name.push_str(upload_id);
        self.qualify(&name).to_string()
    }

    /// How many admin lowerings and deletions this table has made: a
    /// version a chained write learned when it was lower may no longer be
    /// used ([`crate::chain`]).
    pub fn lowerings(&self) -> u64 {
        self.inner.lowerings.load(Ordering::SeqCst)
    }

    /// With a shared store, the highest that bounds `key` as the store
    /// holds it now, read linearizably: the key's own and those of the
    /// subtree fences above it. For chained writes in shared state
    /// ([`crate::chain`]): a version observed before this read may be used
    /// by a write with a token at least this.
    pub async fn shared_highest(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let key = &*self.qualify(key);
        let above: Vec<_> = if self.inner.subtree_scope() {
            crate::key::covering_subtrees(key).collect()
        } else {
            Vec::new()
        };
        let mut keys = vec![key];
        keys.extend(above.iter().map(|subtree| &**subtree));
        let highests = self.inner.store.read_highests(&keys).await?;
        Ok(highests.into_iter().flatten().max())
    }

    /// Whether other holders (gateway instances) share these fences.
    pub fn is_shared(&self) -> bool {
        self.inner.shared
    }

    /// Whether fences survive a restart.
    pub fn is_durable(&self) -> bool {
        self.inner.durable
    }

    /// Admits a request carrying `token` on fence `key`, following the rules
    /// in the [module docs](self). Resolves once the request may be forwarded;
    /// the returned guard must live until its response is complete.
    ///
    /// Cancel-safe: dropping the future at any point leaves the fence
    /// consistent (a raise already made stays made, which is the safe
    /// direction).
    ///
    /// `key` is one fence: a subtree's (everything under a path) is admitted
    /// with [`Fences::admit_all`]. Once a subtree fence exists, this looks
    /// at the subtrees above `key` too.
    pub async fn admit(&self, key: &str, token: u64) -> Result<InFlight, AdmitError> {
        self.admit_with(key, Admission::new(token)).await
    }

    /// [`Fences::admit`] of a request's whole [`Admission`]: its token, the
    /// client named in the log line of a raise (every raise is logged at
    /// info level once it is durable: key, previous highest, new highest,
    /// client), and the issuer that must first confirm a token that would
    /// raise the fence (token trust: tokens at or below the highest are
    /// never checked; a token the issuer does not confirm never raises it).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use fencegate::fences::Admission;
    /// let fences = fencegate::Fences::in_memory();
    /// let client = "10.0.0.7:51234".parse().ok();
    /// let in_flight = fences.admit_with("/reports/q3", Admission::new(34).from_client(client)).await.unwrap();
    /// assert_eq!(in_flight.token(), 34);
    /// # });
    /// ```
    pub async fn admit_with(
        &self,
        key: &str,
        admission: Admission<'_>,
    ) -> Result<InFlight, AdmitError> {
        // The issuer is asked about the key as the namespace names it: a
        // counter per lock (`{key}`) is the lock's, whatever the namespace.
        let asked = key;
        let key = &*self.qualify(key);
        let Admission {
            token,
            client,
            issuer,
            identity,
        } = admission;
        let mut confirmed = issuer.is_none();
        let durable_store = self.inner.durable;
        let shared = self.inner.shared;
        let new_fence_limit = self.inner.new_fence_limit.get();
        let (fence, raised_from, must_claim) = loop {
            let subtrees = &self.inner.has_subtrees;
            let (fence, step) = self
                .with_live_fence(key, |fence, state| match state.highest() {
                    // Read under the fence's lock: see `many.rs` for why.
                    _ if subtrees.load(Ordering::SeqCst) => Step::Divert,
                    Some(highest) if token < highest => Step::Stale(highest),
                    Some(highest) if token == highest => Step::Go {
                        raised_from: None,
                        must_claim: shared || durable_store && state.durable() < Some(token),
                    },
                    // The issuer's cached bound answers most raises at once.
                    _ if !confirmed
                        && !issuer.is_some_and(|issuer| issuer.known_issued(asked, token)) =>
                    {
                        Step::Ask
                    }
                    previous => {
                        if let (None, Some(limit)) = (previous, new_fence_limit) {
                            if let Err(limited) = limit.take(identity, client, 1) {
                                return Step::Limited(Box::new(limited));
                            }
                        }
                        state.set_highest(Some(token));
                        fence.changed.notify_waiters();
                        Step::Go {
                            raised_from: Some(previous),
                            must_claim: shared || durable_store && state.durable() < Some(token),
                        }
                    }
                })
                .await?;
            match step {
                Step::Divert => {
                    drop(fence);
                    // Rebuilt from its parts, not kept whole: the whole
                    // value would be kept in every admission's future.
                    let admission = Admission {
                        token,
                        client,
                        issuer,
                        identity,
                    };
                    return self.admit_diverted(key, admission).await;
                }
                Step::Limited(limited) => {
                    self.inner.forget_if_unused(key, &fence);
                    return Err(AdmitError::Limited(*limited));
                }
                Step::Stale(highest) => {
                    return Err(Stale {
                        token,
                        highest,
                        reason: StaleReason::BelowHighest,
                    }
                    .into())
                }
                Step::Ask => {
                    if let Some(issuer) = issuer {
                        // The fence is held while asking, so that an admin
                        // write sees the key as busy rather than changing it
                        // under the question.
                        if let Err(error) = issuer.check(asked, token).await {
                            self.inner.forget_if_unused(key, &fence);
                            return Err(AdmitError::Issuer { token, error });
                        }
                    }
                    confirmed = true;
                }
                Step::Go {
                    raised_from,
                    must_claim,
                } => break (fence, raised_from, must_claim),
            }
        };
        let mut hold = None;
        if must_claim {
            let claim = self.inner.store.claim(key, token).await;
            let stored = claim.as_ref().map(|claim| claim.highest);
            let stored = self.settle_raise(key, &fence, token, stored.map_err(Clone::clone))?;
            if stored > token {
                // Another holder claimed a higher token first.
                return Err(Stale {
                    token,
                    highest: stored,
                    reason: StaleReason::BelowHighest,
                }
                .into());
            }
            hold = claim.ok().and_then(|claim| claim.hold);
        }
        if let Some(previous) = raised_from {
            log_raise(key, previous, token, client, identity);
        }
        // The common case decides at once, without registering for wake-ups.
        match self.try_enter(&fence, token, &mut hold) {
            Enter::Decided(decided) => decided,
            Enter::Divert => Box::pin(self.enter_diverted(key, fence, token, hold)).await,
            // Boxed, as the diversions: rare paths whose state would
            // otherwise set the size of every admission's future (and of
            // the request's around it), every byte of which is copied.
            Enter::Wait => Box::pin(self.wait_to_enter(key, fence, token, hold)).await,
        }
    }

    /// A subtree fence exists: `key` is admitted as a request on several
    /// fences is (`many.rs`). Boxed with everything it holds, as the other
    /// diversions: a rare path whose state would otherwise set the size of
    /// every admission's future (and of the request's around it), every
    /// byte of which is copied.
    ///
    /// `key` is already qualified: it goes on as the table holds it, never
    /// through [`Fences::admit_all`], which would qualify it a second time
    /// (a key with no history, in a named namespace, that any stale token
    /// would pass).
    fn admit_diverted<'a>(
        &'a self,
        key: &str,
        admission: Admission<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<InFlight, AdmitError>> + Send + 'a>> {
        let key: Box<str> = key.into();
        Box::pin(async move {
            self.admit_all_qualified(vec![&*key], admission)
                .await
                .map_err(|refused| refused.error)
        })
    }

    /// Step 2's wait, once a first look found a lower token in flight.
    async fn wait_to_enter(
        &self,
        key: &str,
        fence: Arc<Fence>,
        token: u64,
        mut hold: Option<Box<dyn ClaimHold>>,
    ) -> Result<InFlight, AdmitError> {
        let revoked = hold.as_ref().map(|hold| hold.lease().revoked());
        let mut revoked = pin!(revoked);
        loop {
            // Register for wake-ups before looking again, so that a change
            // between the look and the await cannot be missed.
            let mut changed = pin!(fence.changed.notified());
            changed.as_mut().enable();
            match self.try_enter(&fence, token, &mut hold) {
                Enter::Decided(decided) => return decided,
                Enter::Divert => {
                    let fence = Arc::clone(&fence);
                    return Box::pin(self.enter_diverted(key, fence, token, hold)).await;
                }
                Enter::Wait => {}
            }
            changed_or_revoked(changed.as_mut(), revoked.as_mut().as_pin_mut()).await;
        }
    }

    /// A subtree fence appeared since the request was admitted on `key`:
    /// it enters as a request on several fences does (`many.rs`).
    async fn enter_diverted(
        &self,
        key: &str,
        fence: Arc<Fence>,
        token: u64,
        hold: Option<Box<dyn ClaimHold>>,
    ) -> Result<InFlight, AdmitError> {
        let targets = vec![(key.into(), fence)];
        self.enter_all(targets, token, hold)
            .await
            .map_err(|refused| refused.error)
    }

    /// Runs `decide` on the fence of `key` under its lock, once the fence
    /// is live: one an admin write is not changing (frozen) and has not
    /// deleted (retired). Returns the fence, held, with what `decide` said.
    async fn with_live_fence<R>(
        &self,
        key: &str,
        mut decide: impl FnMut(&Fence, &mut FenceState) -> R,
    ) -> Result<(Arc<Fence>, R), StoreError> {
        loop {
            let fence = self.inner.fence(key)?;
            let decided = {
                let mut state = fence.lock();
                if state.is(RETIRED) {
                    // Already out of the map: the next look finds its successor.
                    continue;
                }
                state.mark(USED, true);
                (!state.is(FROZEN)).then(|| decide(&fence, &mut state))
            };
            if let Some(decided) = decided {
                return Ok((fence, decided));
            }
            // Frozen: register for the thaw, then look again, so that a thaw
            // between the look above and the registration is not missed.
            let mut thawed = pin!(fence.changed.notified());
            thawed.as_mut().enable();
            let still_frozen = fence.lock().is(FROZEN);
            if still_frozen {
                thawed.await;
            }
        }
    }

    /// The durable half of a raise of `fence` to `token`, already made in
    /// memory: `stored` is what the store answered, the highest it holds
    /// now (`token`, or more if another holder claimed more first), which
    /// becomes the durable value and, if above, the highest. On failure the
    /// raise is given back (unless someone raised further since), so that
    /// `highest` stays "the highest admitted".
    fn settle_raise(
        &self,
        key: &str,
        fence: &Arc<Fence>,
        token: u64,
        stored: Result<u64, StoreError>,
    ) -> Result<u64, StoreError> {
        let mut state = fence.lock();
        match stored {
            Ok(stored) => {
                let stored = stored.max(token);
                let durable = state.durable().max(Some(stored));
                state.set_durable(durable);
                // A failed raise of the same token by another request may
                // have rolled `highest` back meanwhile: raise it again.
                if state.highest() < Some(stored) {
                    state.set_highest(Some(stored));
                    fence.changed.notify_waiters();
                }
                Ok(stored)
            }
            Err(error) => {
                // Requests refused against the raise in the meantime were
                // refused conservatively.
                if state.highest() == Some(token) {
                    let durable = state.durable();
                    state.set_highest(durable);
                }
                let never_admitted = state.highest().is_none() && state.in_flight == 0;
                drop(state);
                if never_admitted {
                    self.inner.forget_if_unused(key, fence);
                }
                Err(error)
            }
        }
    }

    /// Step 2's wait condition and rule 3, checked once: `None` while a
    /// lower token is still in flight, here or (`hold`) at another holder.
    /// On entry the hold moves into the guard.
    fn try_enter(
        &self,
        fence: &Arc<Fence>,
        token: u64,
        hold: &mut Option<Box<dyn ClaimHold>>,
    ) -> Enter {
        if let Some(claim) = hold {
            if let Err(ended) = claim.lease().check(LeaseStage::Waiting) {
                return Enter::Decided(Err(lease_ended(ended)));
            }
        }
        let mut state = fence.lock();
        // Read under the fence's lock: see `many.rs` for why.
        if self.inner.has_subtrees.load(Ordering::SeqCst) {
            return Enter::Divert;
        }
        let highest = state.highest().unwrap_or(token);
        if highest > token {
            return Enter::Decided(Err(Stale {
                token,
                highest,
                reason: StaleReason::Overtaken,
            }
            .into()));
        }
        let others_below = hold.as_ref().is_some_and(|claim| claim.waits());
        if (state.in_flight == 0 || state.in_flight_token == token) && !others_below {
            state.in_flight_token = token;
            state.in_flight += 1;
            return Enter::Decided(Ok(InFlight {
                fence: Arc::clone(fence),
                more: None,
                token,
                hold: hold.take(),
            }));
        }
        Enter::Wait
    }

    /// The highest token admitted on `key`, if any: from memory, or from
    /// the store for a fence that is not in memory (a read that fails
    /// answers `None`, and is logged).
    pub fn highest(&self, key: &str) -> Option<u64> {
        self.inner.highest(&self.qualify(key))
    }

    /// [`Fences::highest`], and for a fence a shared store holds out of
    /// memory (a bounded table over etcd), the store's highest, read
    /// linearizably.
    pub async fn highest_anywhere(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let key = &*self.qualify(key);
        if let Some(highest) = self.inner.highest(key) {
            return Ok(Some(highest));
        }
        if !self.inner.evicts() || self.inner.reads_on_demand() {
            return Ok(None);
        }
        let read = self.inner.store.read_highests(&[key]).await?;
        Ok(read.into_iter().next().flatten())
    }

    /// Up to `limit` fences whose key starts with `prefix`, sorted by key:
    /// those in memory and, over a store that reads on demand, those in
    /// the store (memory's value first: it may be ahead of the store's).
    pub fn list(&self, prefix: &str, limit: usize) -> Vec<(String, u64)> {
        let mut found: std::collections::BTreeMap<String, u64> = self
            .inner
            .fences
            .iter()
            .filter_map(|entry| {
                let key = self.unqualify(entry.key())?;
                if !key.starts_with(prefix) {
                    return None;
                }
                let highest = entry.value().lock().highest()?;
                Some((key.to_owned(), highest))
            })
            .collect();
        if self.inner.reads_on_demand() {
            let qualified = &*self.qualify(prefix);
            let mut stored = Vec::new();
            let read = self
                .inner
                .store
                .read_stored_under(qualified, &mut |key, highest| {
                    stored.push((key.to_owned(), highest));
                    stored.len() < limit.saturating_add(found.len())
                });
            if let Err(error) = read {
                tracing::warn!(prefix, %error, "cannot list fences from the store");
            }
            for (key, highest) in stored {
                if let Some(key) = self.unqualify(&key) {
                    found.entry(key.to_owned()).or_insert(highest);
                }
            }
        }
        found.into_iter().take(limit).collect()
    }

    /// [`Fences::list`], and over a shared store whose table is bounded
    /// (etcd), the fences it holds out of memory too: up to `limit` read
    /// from the store, taken in the store's key order (etcd's, of
    /// percent-encoded keys), merged with memory's (memory's value first),
    /// sorted by key.
    pub async fn list_anywhere(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let mut found: std::collections::BTreeMap<String, u64> =
            self.list(prefix, limit).into_iter().collect();
        if self.inner.evicts() && !self.inner.reads_on_demand() {
            let qualified = &*self.qualify(prefix);
            let stored = self.inner.store.list_stored(qualified, limit).await?;
            for (key, highest) in stored {
                if let Some(key) = self.unqualify(&key) {
                    found.entry(key.to_owned()).or_insert(highest);
                }
            }
        }
        Ok(found.into_iter().take(limit).collect())
    }

    /// How many fences the table holds in memory (over a store that reads
    /// on demand, [`Fences::stored_len`] counts those in the store).
    pub fn len(&self) -> usize {
        self.inner.fences.len()
    }

    /// Whether the table holds no fence in memory.
    pub fn is_empty(&self) -> bool {
        self.inner.fences.is_empty()
    }

    /// How many fences the store holds, when it can tell at once.
    pub fn stored_len(&self) -> Option<u64> {
        self.inner.store.stored_count()
    }

    /// The bound on the fences in memory and what it has done; `None` for
    /// a table without one.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        let bounded = self.inner.bounded.as_ref()?;
        Some(CacheStats {
            bound: bounded.bound,
            used: bounded.used.load(Ordering::Relaxed),
            in_memory: self.inner.fences.len(),
            cold_reads: bounded.counters.cold_reads.load(Ordering::Relaxed),
            evictions: bounded.counters.evictions.load(Ordering::Relaxed),
            refusals: bounded.counters.refusals.load(Ordering::Relaxed),
        })
    }

    /// Limits the new fences each client may make ([`NewFenceLimit`]): set
    /// once, when the gateway starts; `false` if a limit was set already.
    pub fn limit_new_fences(&self, limit: NewFenceLimit) -> bool {
        self.inner.new_fence_limit.set(limit).is_ok()
    }

    /// Closes the store once pending raises are written: later admissions
    /// that need a raise fail with 503-worthy [`StoreError::Closed`]. Used at
    /// shutdown so that the next start finds a cleanly closed database.
    pub fn close(&self) {
        self.inner.store.close();
    }

    /// Whether the store can make raises durable now (see
    /// [`FenceStore::health`]).
    pub fn store_health(&self) -> Result<(), StoreError> {
        self.inner.store.health()
    }

    /// The store's counters (raises persisted, commits made).
    pub fn store_stats(&self) -> StoreStats {
        self.inner.store.stats()
    }
}

/// What admission decided at its first look at the fence.
enum Step {
    /// Below the highest: refused.
    Stale(u64),
    /// Would raise the fence: ask the issuer first.
    Ask,
    /// Admitted (raised, or equal to the highest): claim in the store if
    /// needed, then wait for lower tokens in flight.
    Go {
        raised_from: Option<Option<u64>>,
        must_claim: bool,
    },
    /// A subtree fence exists: decide with the subtrees above the key
    /// (`many.rs`).
    Divert,
    /// A new fence the client may not make now.
    Limited(Box<Limited>),
}

/// What one look at the wait condition decided.
enum Enter {
    /// Let through, or refused.
    Decided(Result<InFlight, AdmitError>),
    /// A lower token is still in flight.
    Wait,
    /// A subtree fence appeared meanwhile: finish in `many.rs`.
    Divert,
}

/// A request waited past the end of its instance's lease.
fn lease_ended(ended: LeaseEnded) -> AdmitError {
    StoreError::Unavailable(ended.to_string().into()).into()
}

/// The log line of a raise; `previous` is `None` for a new fence, logged
/// as `none` (an absent field would look like a forgotten one); `identity`
/// is who the client authenticated as, under credential custody.
fn log_raise(
    key: &str,
    previous: Option<u64>,
    highest: u64,
    client: Option<SocketAddr>,
    identity: Option<&str>,
) {
    let previous = previous.map_or_else(|| "none".to_owned(), |p| p.to_string());
    match (client, identity) {
        (Some(client), Some(identity)) => {
            tracing::info!(key, %previous, highest, %client, identity, "fence raised")
        }
        (Some(client), None) => {
            tracing::info!(key, %previous, highest, %client, "fence raised")
        }
        (None, _) => tracing::info!(key, %previous, highest, "fence raised"),
    }
}
