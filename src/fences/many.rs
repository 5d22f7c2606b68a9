//! Admission on several keys at once, and on subtrees: for the writes that
//! change more than the object their path names (a WebDAV `MOVE` changes
//! its source and its destination, a collection `DELETE` everything under
//! its path, an S3 `DeleteObjects` every key it lists).
//!
//! # The rules
//!
//! A request admitted on keys `K` with token `t` is admitted on each of them
//! as [the single-key rules](super) say, all or none: refused (409) if `t`
//! is below any key's highest; else every key is raised to `t` together,
//! the request waits until no lower token is in flight on any of them, and
//! holds every key in flight until its response is done.
//!
//! A key may stand for a whole subtree ([`subtree_key`](crate::key::subtree_key): `/dir/` for
//! everything under `/dir`). Its fence is *over* every key under it:
//!
//! - admitting on `/dir/` looks at every fence under `/dir` (refused below
//!   any of their highests, waits for lower tokens in flight on any);
//! - admitting on any key looks at the subtree fences above it
//!   ([`covering_subtrees`]): after a collection `DELETE /dir` with token 36,
//!   `PUT /dir/x` with 35 is refused, and a `PUT /dir/x` with 37 waits for
//!   the `DELETE` to finish.
//!
//! # Why it cannot deadlock or miss a request
//!
//! Every fence mutex a decision needs is taken in key order, so two
//! requests never hold one each of two fences the other wants; and nothing
//! waits for anything while holding a fence mutex (waiting is on a fence's
//! `Notify`, after every guard is released). A request only ever waits for
//! a *lower* token to finish, and requests in flight wait for nothing, so
//! the waits form no cycle.
//!
//! A subtree write looks at the keys under its path through an ordered index
//! of every key, and keys come and go while it looks. What keeps a key
//! created meanwhile from slipping past: every key enters the index before
//! anyone decides on its fence (`Table::fence` indexes a key it makes, and
//! every request here indexes its own keys before it decides, as another
//! request may have found the fence in the map before its maker indexed
//! it; a key leaves the index only if it is not back in the map); the
//! subtree write takes the mutexes of what it found, its own subtree fence
//! among them, then reads the index again and starts over if it changed. A
//! key that entered the index after that second read is decided after the
//! subtree write, and looks at the subtree fences above it (its own
//! decision takes the subtree fence's mutex), so it sees the subtree
//! write's raise and in-flight count. A request that looked for the
//! subtree fences above its keys before one was made checks again, with
//! its mutexes held, that none has entered the index since, and starts over
//! if one has: the subtree write may have decided first, on fences they
//! share. (The property test `overlapping_admissions_keep_token_order`
//! found both holes: a request let through after a higher token.)
//!
//! The plain path (one key, no subtree fence anywhere) does none of this.
//! It reads `has_subtrees` under its own fence's mutex at each decision and
//! moves here once it is set. Set before the first subtree fence is
//! decided on, it orders the two: either the plain decision came first (and
//! its key was in the index, so the subtree write sees it), or the plain
//! decision sees the flag.
//!
//! # What it costs
//!
//! Once the first subtree fence exists, every admission looks up each
//! subtree key above its key (one hash lookup per path segment) and keeps an
//! ordered copy of every key (a `BTreeSet` of boxed strings, about the size
//! of the keys again). A subtree write reads every key under its path from
//! that index, twice, and takes each of their mutexes: proportional to the
//! number of fences under it, never to the whole table.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::task::Poll;

use super::state::changed_or_revoked;
use super::table::under_prefix;
use super::{
    lease_ended, log_raise, Admission, AdmitError, Fence, FenceState, Fences, InFlight, Stale,
    StaleReason, FROZEN, RETIRED,
};
use crate::issuer::TokenIssuer;
use crate::key::{covering_subtrees, subtree_path};
use crate::store::{ClaimHold, LeaseStage, StoreError};

/// Why [`Fences::admit_all`] refused a request: on which key, and what.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{resource}: {error}")]
pub struct AdmitAllError {
    /// The key the refusal is about (the one with the higher token, or the
    /// one whose issuer did not confirm the token).
    pub resource: String,
    /// What was refused.
    pub error: AdmitError,
}

impl AdmitAllError {
    fn on(resource: &str, error: impl Into<AdmitError>) -> Self {
        AdmitAllError {
            resource: resource.to_owned(),
            error: error.into(),
        }
    }
}

/// One fence a decision looks at: a key the request is admitted on
/// (`target`), or one it must not overtake (a subtree above a target, or a
/// key under a subtree target).
struct Member {
    key: Box<str>,
    fence: Arc<Fence>,
    target: bool,
}

/// What [`Fences::decide_all`] decided.
enum Decided {
    /// Look again (keys came or went, a fence was retired).
    Again,
    /// Look again once this fence thaws.
    Frozen(Arc<Fence>),
    /// Refused: this key's highest is above the token.
    Above(Box<str>, u64),
    /// These targets would be raised: ask the issuer first.
    Ask(Vec<Box<str>>),
    /// The client may not make this many new fences now (the first new
    /// key's name, and why).
    Limited(Box<str>, super::Limited),
    /// Every target raised to the token (`raised`: those it moved, with the
    /// highest before); `to_claim` must be made durable or registered.
    Raised {
        raised: Vec<(Box<str>, Option<u64>)>,
        to_claim: Vec<Box<str>>,
    },
}

/// What [`Fences::try_enter_all`] decided.
enum Entered {
    /// In flight on every target.
    In,
    /// Refused: this key rose above the token.
    Overtaken(Box<str>, u64),
    /// Look again.
    Again,
    /// Look again once this fence thaws.
    Frozen(Arc<Fence>),
    /// Wait for a change of this fence.
    Wait(Arc<Fence>),
    /// Another holder has a lower token in flight: wait for a change of
    /// any target (the store wakes those its changes concern).
    WaitStore,
}

/// Whether a look at every member (all locked) stands.
enum Look {
    /// It does: decide on it.
    Stands,
    /// Start over: a member was retired, or keys came or went under a
    /// subtree target.
    Again,
    /// Start over once this member thaws: an admin write is changing it.
    Frozen(Arc<Fence>),
}

impl Fences {
    /// Admits a request carrying `token` on every key of `keys` at once
    /// (all or none), as the docs of `src/fences/many.rs` say; a key that is a
    /// [`subtree_key`](crate::key::subtree_key) stands for everything under
    /// its path. Resolves once the request may be forwarded; the guard holds
    /// every key in flight until it is dropped.
    ///
    /// With a shared store, the claim of every key is one step of the
    /// store's ([`FenceStore::claim_all`](crate::store::FenceStore::claim_all)).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use fencegate::fences::Admission;
    /// use fencegate::Fences;
    ///
    /// let fences = Fences::in_memory();
    /// drop(fences.admit("/dav/report", 34).await.unwrap());
    /// // A stale MOVE of /dav/tmp onto /dav/report: refused on the destination.
    /// let keys = ["/dav/report".to_owned(), "/dav/tmp".to_owned()];
    /// let refused = fences.admit_all(&keys, Admission::new(33)).await.unwrap_err();
    /// assert_eq!(refused.resource, "/dav/report");
    /// assert_eq!(fences.highest("/dav/tmp"), None); // none: nothing raised
    /// // A collection DELETE of /dav with 35 fences everything under it.
    /// drop(fences.admit_all(&["/dav".into(), "/dav/".into()], Admission::new(35)).await.unwrap());
    /// assert!(fences.admit("/dav/new", 34).await.is_err());
    /// # });
    /// ```
    pub async fn admit_all(
        &self,
        keys: &[String],
        admission: Admission<'_>,
    ) -> Result<InFlight, AdmitAllError> {
        let qualified: Vec<super::Qualified<'_>> =
            keys.iter().map(|key| self.qualify(key)).collect();
        let keys = qualified.iter().map(|key| &**key).collect();
        self.admit_all_qualified(keys, admission)
            .await
            .map_err(|mut error| {
                if let Some(key) = self.unqualify(&error.resource) {
                    error.resource = key.to_owned();
                }
                error
            })
    }

    /// [`Fences::admit_all`] of keys as the table holds them.
    pub(super) async fn admit_all_qualified(
        &self,
        mut keys: Vec<&str>,
        admission: Admission<'_>,
    ) -> Result<InFlight, AdmitAllError> {
        let Admission {
            token,
            client,
            issuer,
            identity,
        } = admission;
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Err(AdmitAllError::on(
                "",
                StoreError::Unsupported("an admission needs at least one key"),
            ));
        }
        if keys.iter().any(|key| subtree_path(key).is_some()) {
            // Before the first look at the index: see the module docs.
            self.enable_subtrees();
        }
        // Over a store that reads on demand, the keys under a subtree
        // target that are only in the store come into memory and stay there
        // (held) while this request decides and waits: the look at the
        // index below then sees every one (`cache.rs`, rule 3).
        let _held_under = self
            .hold_stored_under(&keys)
            .map_err(|(key, error)| AdmitAllError::on(&key, error))?;
        let mut confirmed: Vec<Box<str>> = Vec::new();
        let (targets, raised, to_claim) = loop {
            // Looked up again each time: an admin write may have retired a
            // fence meanwhile (it cannot once this request holds it).
            let mut targets: Vec<(Box<str>, Arc<Fence>)> = Vec::with_capacity(keys.len());
            for key in &keys {
                match self.inner.fence(key) {
                    Ok(fence) => targets.push(((*key).into(), fence)),
                    Err(error) => {
                        self.forget_unraised(targets);
                        return Err(AdmitAllError::on(key, error));
                    }
                }
            }
            match self.decide_all(&targets, token, issuer, &confirmed, (identity, client)) {
                Decided::Limited(key, limited) => {
                    self.forget_unraised(targets);
                    return Err(AdmitAllError::on(&key, AdmitError::Limited(limited)));
                }
                Decided::Again => {}
                Decided::Frozen(fence) => thawed(&fence).await,
                Decided::Above(key, highest) => {
                    self.forget_unraised(targets);
                    return Err(AdmitAllError::on(
                        &key,
                        Stale {
                            token,
                            highest,
                            reason: StaleReason::BelowHighest,
                        },
                    ));
                }
                Decided::Ask(to_ask) => {
                    if let Some(issuer) = issuer {
                        for key in &to_ask {
                            let asked = self.unqualify(key).unwrap_or(key);
                            if let Err(error) = issuer.check(asked, token).await {
                                self.forget_unraised(targets);
                                return Err(AdmitAllError::on(
                                    key,
                                    AdmitError::Issuer { token, error },
                                ));
                            }
                        }
                    }
                    confirmed.extend(to_ask);
                }
                Decided::Raised { raised, to_claim } => break (targets, raised, to_claim),
            }
        };
        let hold = self.claim_all(&targets, &to_claim, token).await?;
        for (key, previous) in raised {
            log_raise(&key, previous, token, client, identity);
        }
        self.enter_all(targets, token, hold).await
    }

    /// One look at every fence admission on `targets` depends on, all
    /// locked: refuse, ask the issuer, or raise every target to `token`.
    fn decide_all(
        &self,
        targets: &[(Box<str>, Arc<Fence>)],
        token: u64,
        issuer: Option<&dyn TokenIssuer>,
        confirmed: &[Box<str>],
        (identity, client): (Option<&str>, Option<std::net::SocketAddr>),
    ) -> Decided {
        let (members, below) = self.members(targets);
        let mut guards = lock_all(&members);
        match self.look(&members, &guards, &below) {
            Look::Stands => {}
            Look::Again => return Decided::Again,
            Look::Frozen(fence) => return Decided::Frozen(fence),
        }
        if let Some((key, highest)) = first_above(&members, &guards, token) {
            return Decided::Above(key.into(), highest);
        }
        if let Some(issuer) = issuer {
            let to_ask: Vec<Box<str>> = members
                .iter()
                .zip(&guards)
                .filter(|(member, state)| {
                    member.target
                        && state.highest() < Some(token)
                        && !confirmed.contains(&member.key)
                        && !issuer
                            .known_issued(self.unqualify(&member.key).unwrap_or(&member.key), token)
                })
                .map(|(member, _)| member.key.clone())
                .collect();
            if !to_ask.is_empty() {
                return Decided::Ask(to_ask);
            }
        }
        if let Some(limit) = self.inner.new_fence_limit.get() {
            let mut new = members
                .iter()
                .zip(&guards)
                .filter(|(member, state)| member.target && state.highest().is_none());
            if let Some((first, _)) = new.next() {
                let wanted = u32::try_from(new.count() + 1).unwrap_or(u32::MAX);
                if let Err(limited) = limit.take(identity, client, wanted) {
                    return Decided::Limited(first.key.clone(), limited);
                }
            }
        }
        let mut raised = Vec::new();
        let mut to_claim = Vec::new();
        for (member, state) in members.iter().zip(guards.iter_mut()) {
            if !member.target {
                continue;
            }
            let previous = state.highest();
            if previous < Some(token) {
                state.set_highest(Some(token));
                raised.push((member.key.clone(), previous));
            }
            if self.inner.shared || self.inner.durable && state.durable() < Some(token) {
                to_claim.push(member.key.clone());
            }
        }
        drop(guards);
        for member in members.iter().filter(|member| member.target) {
            member.fence.changed.notify_waiters();
        }
        Decided::Raised { raised, to_claim }
    }

    /// Makes the raises of `to_claim` durable (or, shared, registered) in
    /// one step; gives them back if that fails.
    async fn claim_all(
        &self,
        targets: &[(Box<str>, Arc<Fence>)],
        to_claim: &[Box<str>],
        token: u64,
    ) -> Result<Option<Box<dyn ClaimHold>>, AdmitAllError> {
        let Some(first) = to_claim.first() else {
            return Ok(None);
        };
        let claim = if to_claim.len() == 1 && subtree_path(first).is_none() {
            self.inner.store.claim(first, token).await
        } else {
            let keys: Vec<&str> = to_claim.iter().map(|key| &**key).collect();
            self.inner.store.claim_all(&keys, token).await
        };
        if let Err(StoreError::Above { key, highest }) = &claim {
            // Nothing was claimed: give every raise back, and refuse on
            // the key that stands above.
            for key in to_claim {
                if let Some((_, fence)) = targets.iter().find(|(k, _)| k == key) {
                    let _ = self.settle_raise(key, fence, token, Err(StoreError::Closed));
                }
            }
            return Err(AdmitAllError::on(
                key,
                Stale {
                    token,
                    highest: *highest,
                    reason: StaleReason::BelowHighest,
                },
            ));
        }
        let stored = claim.as_ref().map(|claim| claim.highest);
        let mut stale = None;
        let mut failed = None;
        for key in to_claim {
            let Some((_, fence)) = targets.iter().find(|(k, _)| k == key) else {
                continue;
            };
            match self.settle_raise(key, fence, token, stored.map_err(Clone::clone)) {
                Ok(stored) if stored > token => stale = stale.or(Some((key, stored))),
                Ok(_) => {}
                Err(error) => failed = failed.or(Some((key, error))),
            }
        }
        if let Some((key, error)) = failed {
            return Err(AdmitAllError::on(key, error));
        }
        if let Some((key, highest)) = stale {
            // Another holder claimed a higher token first.
            return Err(AdmitAllError::on(
                key,
                Stale {
                    token,
                    highest,
                    reason: StaleReason::BelowHighest,
                },
            ));
        }
        Ok(claim.ok().and_then(|claim| claim.hold))
    }

    /// Waits until no lower token is in flight on any of `targets`, the
    /// subtrees above them or (for a subtree target) the keys under it;
    /// then holds every target in flight. Refused as overtaken if any of
    /// them rises above `token` first.
    pub(super) async fn enter_all(
        &self,
        targets: Vec<(Box<str>, Arc<Fence>)>,
        token: u64,
        mut hold: Option<Box<dyn ClaimHold>>,
    ) -> Result<InFlight, AdmitAllError> {
        let revoked = hold.as_ref().map(|hold| hold.lease().revoked());
        let mut revoked = pin!(revoked);
        loop {
            if let Some(Err(ended)) = hold
                .as_ref()
                .map(|hold| hold.lease().check(LeaseStage::Waiting))
            {
                return Err(AdmitAllError::on(&targets[0].0, lease_ended(ended)));
            }
            let others_below = hold.as_ref().is_some_and(|hold| hold.waits());
            let blocker = match self.try_enter_all(&targets, token, others_below) {
                Entered::In => {
                    let mut fences = targets.into_iter().map(|(_, fence)| fence);
                    let Some(fence) = fences.next() else {
                        return Err(AdmitAllError::on(
                            "",
                            StoreError::Unsupported("an admission needs at least one key"),
                        ));
                    };
                    return Ok(InFlight {
                        fence,
                        more: Some(fences.collect()),
                        token,
                        hold: hold.take(),
                    });
                }
                Entered::Overtaken(key, highest) => {
                    return Err(AdmitAllError::on(
                        &key,
                        Stale {
                            token,
                            highest,
                            reason: StaleReason::Overtaken,
                        },
                    ))
                }
                Entered::Again => continue,
                Entered::Frozen(fence) => {
                    thawed(&fence).await;
                    continue;
                }
                Entered::Wait(blocker) => blocker,
                Entered::WaitStore => {
                    store_changed(&targets, hold.as_deref(), revoked.as_mut().as_pin_mut()).await;
                    continue;
                }
            };
            // Register, then look again at what blocked: a change made
            // after that look wakes this wait (changes notify after they
            // are made).
            let mut changed = pin!(blocker.changed.notified());
            changed.as_mut().enable();
            let still_blocked = {
                let state = blocker.lock();
                state.in_flight > 0 && state.in_flight_token != token
            };
            if !still_blocked && !hold.as_ref().is_some_and(|hold| hold.waits()) {
                continue;
            }
            changed_or_revoked(changed.as_mut(), revoked.as_mut().as_pin_mut()).await;
        }
    }

    /// One look at the wait condition of [`Self::enter_all`], every fence
    /// it depends on locked; on entry, every target counts the request in
    /// flight.
    fn try_enter_all(
        &self,
        targets: &[(Box<str>, Arc<Fence>)],
        token: u64,
        others_below: bool,
    ) -> Entered {
        let (members, below) = self.members(targets);
        let mut guards = lock_all(&members);
        match self.look(&members, &guards, &below) {
            Look::Stands => {}
            Look::Again => return Entered::Again,
            Look::Frozen(fence) => return Entered::Frozen(fence),
        }
        if let Some((key, highest)) = first_above(&members, &guards, token) {
            return Entered::Overtaken(key.into(), highest);
        }
        // Every member's highest is at most `token` now, and so is the
        // token of its requests in flight: any other is lower.
        let lower = members
            .iter()
            .zip(&guards)
            .position(|(_, state)| state.in_flight > 0 && state.in_flight_token != token);
        if let Some(blocker) = lower {
            return Entered::Wait(Arc::clone(&members[blocker].fence));
        }
        if others_below {
            return Entered::WaitStore;
        }
        for (member, state) in members.iter().zip(guards.iter_mut()) {
            if member.target {
                state.in_flight_token = token;
                state.in_flight += 1;
            }
        }
        Entered::In
    }

    /// Every fence a decision on `targets` must look at, in key order, and
    /// the keys found under each subtree target (to check, once locked, that
    /// none came or went).
    fn members(&self, targets: &[(Box<str>, Arc<Fence>)]) -> (Vec<Member>, Vec<Vec<Box<str>>>) {
        // Every target in the index before anyone decides on it: the fence
        // may have been found in the map before the request that made it
        // indexed it (`Table::fence` indexes after its insert), and a
        // subtree write that looked at the index in between would miss
        // it. Idempotent, and before any fence's lock is taken.
        for (key, _) in targets {
            self.inner.index(key);
        }
        let mut members: Vec<Member> = targets
            .iter()
            .map(|(key, fence)| Member {
                key: key.clone(),
                fence: Arc::clone(fence),
                target: true,
            })
            .collect();
        let mut below = Vec::new();
        let watch = |key: &str, members: &mut Vec<Member>| {
            if let Some(fence) = self.inner.fences.get(key) {
                members.push(Member {
                    key: key.into(),
                    fence: Arc::clone(fence.value()),
                    target: false,
                });
            }
        };
        for (key, _) in targets {
            for above in covering_subtrees(key) {
                watch(&above, &mut members);
            }
            if subtree_path(key).is_some() {
                let keys = self.inner.keys_under(key);
                for under in &keys {
                    watch(under, &mut members);
                }
                below.push(keys);
            }
        }
        // Targets first among equal keys, so that dedup keeps them.
        members.sort_by(|a, b| a.key.cmp(&b.key).then(b.target.cmp(&a.target)));
        members.dedup_by(|later, earlier| later.key == earlier.key);
        (members, below)
    }

    /// With every member locked: whether the look stands.
    fn look(
        &self,
        members: &[Member],
        guards: &[MutexGuard<'_, FenceState>],
        below: &[Vec<Box<str>>],
    ) -> Look {
        if guards.iter().any(|state| state.is(RETIRED)) {
            return Look::Again;
        }
        if let Some(frozen) = guards.iter().position(|state| state.is(FROZEN)) {
            return Look::Frozen(Arc::clone(&members[frozen].fence));
        }
        // `members` keeps the targets' order (sorted keys), as `below` does.
        let subtrees = members
            .iter()
            .filter(|m| m.target && subtree_path(&m.key).is_some());
        for (member, seen) in subtrees.zip(below) {
            if self.inner.keys_under_indexed(&member.key).as_ref() != Some(seen) {
                return Look::Again;
            }
        }
        // A subtree fence above a target made since `members` looked (a
        // collection write that may have decided first, on fences this
        // request shares with it): look again with it. Read from the
        // index, which holds every key of the map (the map's own locks are
        // never taken with a fence's lock held).
        for member in members.iter().filter(|m| m.target) {
            for above in covering_subtrees(&member.key) {
                if !members.iter().any(|m| *m.key == *above) && self.inner.indexed(&above) {
                    return Look::Again;
                }
            }
        }
        Look::Stands
    }

    /// Over a store that reads on demand: the fences of every stored key
    /// under each subtree key of `keys`, in memory and held.
    fn hold_stored_under(&self, keys: &[&str]) -> Result<Vec<Arc<Fence>>, (String, StoreError)> {
        let mut held = Vec::new();
        if !self.inner.reads_on_demand() {
            return Ok(held);
        }
        for subtree in keys.iter().filter(|key| subtree_path(key).is_some()) {
            let mut stored = Vec::new();
            self.inner
                .store
                .read_stored_under(under_prefix(subtree), &mut |key, _| {
                    stored.push(Box::<str>::from(key));
                    true
                })
                .map_err(|error| ((*subtree).to_owned(), error))?;
            for key in stored.iter().filter(|key| &***key != *subtree) {
                held.push(
                    self.inner
                        .fence(key)
                        .map_err(|error| (key.to_string(), error))?,
                );
            }
        }
        Ok(held)
    }

    /// From now on, keys that end with `/` are subtree keys, over every key
    /// under their path (see the docs of `src/fences/many.rs`). Admitting on one
    /// with [`Fences::admit_all`] does this by itself; a fencing layer in
    /// `path` or `prefix:N` scope does it when it is built if the store
    /// held such keys, and the gateway's admin plane when it sets one. Never
    /// in `header` scope, where a lock name may end with `/` and mean no
    /// more than itself.
    pub fn enable_subtrees(&self) {
        self.inner.enable_subtrees();
    }

    /// Keys shaped like subtree keys are subtrees in this table's scope
    /// (`path` or `prefix:N`; called by a fencing layer in one of them when
    /// it is built): [`Self::enable_subtrees`] if the store held some when
    /// the table was loaded, and a shared store checks the subtree fences
    /// above a key in every claim from now on (another holder may set one
    /// at any time).
    pub fn enable_stored_subtrees(&self) {
        self.inner.subtree_scope.store(true, Ordering::SeqCst);
        self.inner.store.use_subtrees();
        if self.inner.stored_subtrees {
            self.enable_subtrees();
        }
    }

    /// Drops the target fences a refused admission created and never
    /// raised (`forget_if_unused` expects the map's reference and one more:
    /// the caller drops every other first).
    fn forget_unraised(&self, targets: Vec<(Box<str>, Arc<Fence>)>) {
        for (key, fence) in targets {
            self.inner.forget_if_unused(&key, &fence);
        }
    }
}

/// Waits until a store's change may let a request held back by another
/// holder's lower token go: any target's fence notified (registered before
/// `hold` is asked again, so no change is missed), or the lease revoked.
async fn store_changed(
    targets: &[(Box<str>, Arc<Fence>)],
    hold: Option<&dyn ClaimHold>,
    mut revoked: Option<std::pin::Pin<&mut (impl Future<Output = ()> + ?Sized)>>,
) {
    let mut changes: Vec<_> = targets
        .iter()
        .map(|(_, fence)| Box::pin(fence.changed.notified()))
        .collect();
    for change in &mut changes {
        change.as_mut().enable();
    }
    if !hold.is_some_and(|hold| hold.waits()) {
        return;
    }
    std::future::poll_fn(|cx| {
        let lease_gone = revoked
            .as_mut()
            .is_some_and(|revoked| revoked.as_mut().poll(cx).is_ready());
        let changed = changes
            .iter_mut()
            .any(|change| change.as_mut().poll(cx).is_ready());
        if lease_gone || changed {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Locks every member's fence, in the members' (key) order.
fn lock_all(members: &[Member]) -> Vec<MutexGuard<'_, FenceState>> {
    members.iter().map(|member| member.fence.lock()).collect()
}

/// The first member whose highest is above `token`.
fn first_above<'a>(
    members: &'a [Member],
    guards: &[MutexGuard<'_, FenceState>],
    token: u64,
) -> Option<(&'a str, u64)> {
    members
        .iter()
        .zip(guards)
        .find_map(|(member, state)| match state.highest() {
            Some(highest) if highest > token => Some((&*member.key, highest)),
            _ => None,
        })
}

/// Resolves once `fence` is no longer frozen by an admin write.
async fn thawed(fence: &Fence) {
    let mut thawed = pin!(fence.changed.notified());
    thawed.as_mut().enable();
    let still_frozen = fence.lock().is(FROZEN);
    if still_frozen {
        thawed.await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::key::subtree_key;

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|key| (*key).to_owned()).collect()
    }

    fn run<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn covering_subtrees_from_the_root_down() {
        let above: Vec<_> = covering_subtrees("/a/b/c").collect();
        assert_eq!(above, ["//", "/a/", "/a/b/"]);
        let above: Vec<_> = covering_subtrees("/a/b/").collect();
        assert_eq!(above, ["//", "/a/"]);
        assert_eq!(covering_subtrees("/").count(), 0);
        assert_eq!(covering_subtrees("//").count(), 0);
        assert_eq!(covering_subtrees("/a").collect::<Vec<_>>(), ["//"]);
        assert_eq!(subtree_key("/"), "//");
    }

    /// Once a subtree fence exists, a plain admission in a named namespace
    /// is decided on the key as the namespace holds it: qualified once, so
    /// that it meets its own history (a stale token stays refused).
    #[test]
    fn a_named_namespace_keeps_its_fences_once_a_subtree_fence_exists() {
        run(async {
            let table = Fences::in_memory();
            let billing = table.namespace("billing");
            drop(billing.admit("/dav/report", 34).await.unwrap());
            // A refused collection DELETE still makes subtree fences count.
            let refused = billing
                .admit_all(&keys(&["/dav/report", "/dav/report/"]), Admission::new(33))
                .await
                .unwrap_err();
            assert_eq!(refused.resource, "/dav/report");
            let stale = billing.admit("/dav/report", 33).await.unwrap_err();
            assert_eq!(stale.stale().map(|s| s.highest), Some(34));
            drop(billing.admit("/dav/report", 35).await.unwrap());
            assert_eq!(billing.highest("/dav/report"), Some(35));
            // Nothing was admitted on a key qualified twice.
            assert_eq!(table.highest("billing\u{a7}billing\u{a7}/dav/report"), None);
            assert_eq!(table.highest("billing\u{a7}/dav/report"), Some(35));
            // A subtree fence of the namespace covers its keys.
            drop(
                billing
                    .admit_all(&keys(&["/dav", "/dav/"]), Admission::new(40))
                    .await
                    .unwrap(),
            );
            let covered = billing.admit("/dav/report", 39).await.unwrap_err();
            assert_eq!(covered.stale().map(|s| s.highest), Some(40));
            // And another namespace's does not.
            drop(
                table
                    .namespace("docs")
                    .admit("/dav/report", 1)
                    .await
                    .unwrap(),
            );
        });
    }

    #[test]
    fn all_or_none() {
        run(async {
            let fences = Fences::in_memory();
            drop(fences.admit("/b", 34).await.unwrap());
            let refused = fences
                .admit_all(&keys(&["/a", "/b", "/c"]), Admission::new(33))
                .await
                .unwrap_err();
            assert_eq!(refused.resource, "/b");
            assert_eq!(refused.error.stale().map(|s| s.highest), Some(34));
            assert_eq!(fences.highest("/a"), None);
            assert_eq!(fences.highest("/c"), None);
            assert_eq!(fences.len(), 1, "no fence left behind by the refusal");
            let admitted = fences
                .admit_all(&keys(&["/c", "/a", "/b"]), Admission::new(35))
                .await
                .unwrap();
            for key in ["/a", "/b", "/c"] {
                assert_eq!(fences.highest(key), Some(35));
            }
            // In flight on every key until dropped: 36 waits on any of them.
            let mut waiting = Box::pin(fences.admit("/c", 36));
            assert!(futures_poll(&mut waiting).is_none());
            drop(admitted);
            assert!(waiting.await.is_ok());
        });
    }

    #[test]
    fn a_subtree_write_is_over_everything_under_it() {
        run(async {
            let fences = Fences::in_memory();
            drop(fences.admit("/d/x/y", 34).await.unwrap());
            // Below a fence under it: refused, naming that fence.
            let refused = fences
                .admit_all(&keys(&["/d", "/d/"]), Admission::new(33))
                .await
                .unwrap_err();
            assert_eq!(refused.resource, "/d/x/y");
            assert!(!fences.list("/d/", 10).iter().any(|(k, _)| k == "/d/"));
            // A current one raises the subtree's fence...
            drop(
                fences
                    .admit_all(&keys(&["/d", "/d/"]), Admission::new(36))
                    .await
                    .unwrap(),
            );
            assert_eq!(fences.highest("/d/"), Some(36));
            // ...which refuses lower tokens on any key under it, new or not.
            for key in ["/d/x/y", "/d/new", "/d/x/"] {
                let refused = fences.admit_all(&keys(&[key]), Admission::new(35)).await;
                assert_eq!(refused.unwrap_err().resource, "/d/", "{key}");
            }
            assert!(fences.admit("/d/x/y", 35).await.is_err());
            // Not beside it.
            assert!(fences.admit("/dx", 1).await.is_ok());
            assert!(fences.admit("/d", 36).await.is_ok());
            // The root subtree covers everything but the root object.
            drop(
                fences
                    .admit_all(&keys(&["//"]), Admission::new(40))
                    .await
                    .unwrap(),
            );
            assert!(fences.admit("/e", 39).await.is_err());
            assert!(fences.admit("/", 39).await.is_ok());
        });
    }

    #[test]
    fn a_write_under_a_subtree_in_flight_waits_for_it() {
        run(async {
            let fences = Fences::in_memory();
            let collection = fences
                .admit_all(&keys(&["/d", "/d/"]), Admission::new(36))
                .await
                .unwrap();
            let mut member = Box::pin(fences.admit("/d/m", 37));
            assert!(futures_poll(&mut member).is_none(), "waits for the subtree");
            drop(collection);
            assert!(member.await.is_ok());
            // And the other way round.
            let member = fences.admit("/d/m", 38).await.unwrap();
            let subtree = keys(&["/d/"]);
            let mut collection = Box::pin(fences.admit_all(&subtree, Admission::new(39)));
            assert!(
                futures_poll(&mut collection).is_none(),
                "waits for a member"
            );
            drop(member);
            assert!(collection.await.is_ok());
        });
    }

    #[test]
    fn a_durable_table_keeps_every_key_of_a_multi_key_raise() {
        let dir = tempfile::tempdir().unwrap();
        run(async {
            let fences = Fences::open(dir.path()).unwrap();
            drop(
                fences
                    .admit_all(&keys(&["/a", "/b", "/d/"]), Admission::new(7))
                    .await
                    .unwrap(),
            );
            fences.close();
        });
        run(async {
            let fences = Fences::open(dir.path()).unwrap();
            // What a fencing layer in path scope does when it is built.
            fences.enable_stored_subtrees();
            assert_eq!(fences.highest("/a"), Some(7));
            assert_eq!(fences.highest("/b"), Some(7));
            assert_eq!(fences.highest("/d/"), Some(7));
            // The subtree fence is in force after the restart.
            assert!(fences.admit("/d/x", 6).await.is_err());
        });
    }

    /// Polls `future` once.
    fn futures_poll<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(future).poll(&mut cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        }
    }

    /// The keys the property test draws from: objects and subtrees that
    /// overlap in every way (`/d/` covers `/d/a`, `/d/e/` and `/d/e/f`).
    const UNIVERSE: &[&str] = &["/d", "/d/", "/d/a", "/d/e/", "/d/e/f", "/g", "//"];

    /// Whether two keys name overlapping sets of objects.
    fn overlap(a: &str, b: &str) -> bool {
        let covers = |outer: &str, inner: &str| {
            subtree_path(outer).is_some_and(|path| {
                let inner_path = subtree_path(inner).unwrap_or(inner);
                let prefix = if path == "/" { "/" } else { outer };
                inner_path != path && inner_path.starts_with(prefix)
            })
        };
        a == b || covers(a, b) || covers(b, a)
    }

    #[derive(Debug, Clone)]
    struct Request {
        keys: Vec<String>,
        token: u64,
        /// The single-key plain path (`admit`) rather than `admit_all`.
        plain: bool,
        /// Yields while in flight.
        hold: u8,
    }

    fn request() -> impl Strategy<Value = Request> {
        (
            proptest::sample::subsequence(UNIVERSE, 1..=3),
            1u64..8,
            any::<bool>(),
            0u8..6,
        )
            .prop_map(|(keys, token, plain, hold)| Request {
                // `admit` knows no subtrees (a lock name may end with `/`).
                plain: plain && keys.len() == 1 && subtree_path(keys[0]).is_none(),
                keys: keys.iter().map(|key| (*key).to_owned()).collect(),
                token,
                hold,
            })
    }

    /// What the property test saw: requests in flight now, and every one
    /// that was let through, in order.
    #[derive(Default)]
    struct Seen {
        in_flight: Vec<(usize, u64, Vec<String>)>,
        entered: Vec<(u64, Vec<String>)>,
    }

    fn overlaps(a: &[String], b: &[String]) -> bool {
        a.iter().any(|x| b.iter().any(|y| overlap(x, y)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Random interleavings of single- and multi-key requests on
        /// overlapping keys, on two threads: none is let through while a
        /// lower token is in flight on any of its keys, none after a higher
        /// one was let through on any of them, and every one finishes.
        #[test]
        fn overlapping_admissions_keep_token_order(requests in proptest::collection::vec(request(), 1..14)) {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            let fences = Fences::in_memory();
            let seen = Arc::new(Mutex::new(Seen::default()));
            let violations = runtime.block_on(async {
                let mut tasks = Vec::new();
                for (id, request) in requests.into_iter().enumerate() {
                    let fences = fences.clone();
                    let seen = Arc::clone(&seen);
                    tasks.push(tokio::spawn(async move {
                        let admitted = if request.plain {
                            fences.admit(&request.keys[0], request.token).await.ok()
                        } else {
                            fences.admit_all(&request.keys, Admission::new(request.token)).await.ok()
                        };
                        let Some(guard) = admitted else { return Vec::new() };
                        let mut violations = Vec::new();
                        {
                            let mut seen = seen.lock().unwrap();
                            for (other, token, keys) in &seen.in_flight {
                                if *token != request.token && overlaps(keys, &request.keys) {
                                    violations.push(format!("{id} {:?}@{} in flight with {other} {keys:?}@{token}", request.keys, request.token));
                                }
                            }
                            for (token, keys) in &seen.entered {
                                if *token > request.token && overlaps(keys, &request.keys) {
                                    violations.push(format!("{id} {:?}@{} let through after {keys:?}@{token}", request.keys, request.token));
                                }
                            }
                            seen.in_flight.push((id, request.token, request.keys.clone()));
                            seen.entered.push((request.token, request.keys.clone()));
                        }
                        for _ in 0..request.hold {
                            tokio::task::yield_now().await;
                        }
                        seen.lock().unwrap().in_flight.retain(|(other, _, _)| *other != id);
                        drop(guard);
                        violations
                    }));
                }
                // A hang guard, not a timing assumption: every request
                // finishes in microseconds unless admission deadlocked.
                tokio::time::timeout(Duration::from_secs(20), async {
                    let mut violations = Vec::new();
                    for task in tasks {
                        violations.extend(task.await.expect("no panic"));
                    }
                    violations
                })
                .await
                .expect("every admission finished: no deadlock")
            });
            prop_assert!(violations.is_empty(), "{:#?}", violations);
        }
    }
}
