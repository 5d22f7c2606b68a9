//! Admin writes: raising, lowering and forgetting a fence by hand, each
//! recorded in the audit log in the same durable step.
//!
//! # Invariants
//!
//! Admission alone never lowers a fence. Admin writes add two ways down, a
//! forced lowering and a deletion, and keep what the data path relies on:
//!
//! 1. **A live [`InFlight`](super::InFlight) guard is always on the fence the
//!    map holds for its key.** A fence is lowered or removed only after the
//!    admin write has proved, under the map shard's write lock, that the map
//!    holds the *only* reference to it ([`Arc::get_mut`]): no request is in
//!    flight, waiting, persisting a raise or asking an issuer on it. The
//!    compiler checks that proof; no counter can drift from it.
//! 2. **No request enters a fence while it changes.** The proven-exclusive
//!    fence is marked frozen before the shard lock is released; admissions
//!    that find it wait until the change is durable (or failed), then see
//!    the new value. A deleted fence is taken out of the map before it is
//!    marked retired, so whoever waited on it looks the key up again and
//!    finds a fresh fence or none.
//! 3. **Memory follows the store, never the other way.** A lowering or
//!    deletion shows in memory only after the store committed it with its
//!    audit entry. A raise is made like an admission's: in memory first
//!    (waiters below it are overtaken at once), durable before the answer,
//!    given back if the store fails.
//! 4. **Changes reach the store in the order they were made.** The store
//!    applies raises and admin writes in submission order; while a fence is
//!    frozen no raise of it can be submitted.
//!
//! Admin writes run one at a time. Dropping an admin write's future before
//! it resolves leaves the fence as it was in memory (thawed) while the store
//! may still commit the change, which then applies from the next start: the
//! conservative side for a lowering or a deletion. The admin plane runs each
//! write in its own task, so a client that hangs up does not cut it short.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use super::{log_raise, Fence, Fences, FROZEN, RETIRED, USED};
use crate::admin::audit::{AuditAction, AuditEntry};
use crate::store::{FenceChange, Setting, StoreError};

/// An admin's request to set a fence (`PUT /fences/{key}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetFence {
    /// The new highest token.
    pub highest: u64,
    /// Allow lowering the fence.
    pub force: bool,
    /// For a lowering: the highest the admin saw, which must still be
    /// current (compare-and-set).
    pub if_highest: Option<u64>,
    /// Who asks (the admin client's address), for the audit log.
    pub actor: String,
    /// Why, for the audit log.
    pub reason: String,
}

/// What an admin write changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceWritten {
    /// The highest before (`None`: the fence did not exist).
    pub previous: Option<u64>,
    /// The highest after (`None`: the fence was forgotten).
    pub highest: Option<u64>,
}

/// Why an admin write was not made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdminWriteError {
    /// The write would lower the fence and was not forced with
    /// `if_highest` (409 `would_lower`).
    #[error("the fence's highest is {highest}: lowering it needs force and if_highest")]
    WouldLower {
        /// The current highest.
        highest: u64,
    },
    /// `if_highest` is not the current highest (409 `highest_changed`).
    #[error("the fence's highest is no longer the one given in if_highest")]
    HighestChanged {
        /// The current highest (`None`: no fence).
        highest: Option<u64>,
    },
    /// A request is in flight or waiting on the key (409 `fence_busy`).
    #[error("a request is in flight or waiting on the fence")]
    Busy,
    /// No fence for the key (404).
    #[error("no fence for this key")]
    Unknown,
    /// The change could not be made durable (503).
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for AdminWriteError {
    fn from(error: StoreError) -> Self {
        match error {
            // Another holder of a shared store has the fence in use.
            StoreError::Busy(_) => AdminWriteError::Busy,
            error => AdminWriteError::Store(error),
        }
    }
}

impl Fences {
    /// Sets the fence of `key` by hand. At or above the current highest (or
    /// on a new fence) this is a raise exactly like an admission's; below
    /// it, a forced lowering, which needs `force` and `if_highest` and no
    /// request on the key. Answers once the change and its audit entry are
    /// durable. See the docs of `src/fences/admin.rs` for the invariants.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use fencegate::fences::{AdminWriteError, SetFence};
    /// use fencegate::Fences;
    ///
    /// let fences = Fences::in_memory();
    /// drop(fences.admit("/k", u64::MAX).await.unwrap()); // a forged token
    /// let set = |highest, if_highest| SetFence {
    ///     highest,
    ///     force: true,
    ///     if_highest,
    ///     actor: "127.0.0.1:9".into(),
    ///     reason: "forged token".into(),
    /// };
    /// let stale = fences.set_fence("/k", set(41, Some(7))).await.unwrap_err();
    /// assert!(matches!(stale, AdminWriteError::HighestChanged { highest: Some(u64::MAX) }));
    /// let written = fences.set_fence("/k", set(41, Some(u64::MAX))).await.unwrap();
    /// assert_eq!(written.previous, Some(u64::MAX));
    /// assert_eq!(fences.highest("/k"), Some(41));
    /// assert!(fences.admit("/k", 42).await.is_ok());
    /// # });
    /// ```
    pub async fn set_fence(
        &self,
        key: &str,
        request: SetFence,
    ) -> Result<FenceWritten, AdminWriteError> {
        let key = &*self.qualify(key);
        let _one_at_a_time = self.inner.admin.lock().await;
        self.warm_shared(key).await?;
        let target = request.highest;
        let (fence, raise) = self
            .with_live_fence(key, |fence, state| {
                let previous = state.highest();
                match previous {
                    Some(highest) if target < highest => Err(highest),
                    _ => {
                        if previous < Some(target) {
                            state.set_highest(Some(target));
                            fence.changed.notify_waiters();
                        }
                        Ok(previous)
                    }
                }
            })
            .await?;
        let previous = match raise {
            Ok(previous) => previous,
            Err(highest) => {
                drop(fence);
                let Some(if_highest) = request.if_highest.filter(|_| request.force) else {
                    return Err(AdminWriteError::WouldLower { highest });
                };
                return self
                    .lower_or_forget(
                        key,
                        Some(target),
                        if_highest,
                        request.actor,
                        Some(request.reason),
                    )
                    .await;
            }
        };
        let entry = AuditEntry {
            time: SystemTime::now(),
            actor: request.actor,
            action: AuditAction::Raise,
            resource: key.to_owned(),
            previous,
            highest: Some(target),
            reason: Some(request.reason),
        };
        let persisted = self.inner.store.record(FenceChange {
            key: key.into(),
            set: Setting::AtLeast(target),
            entry: entry.clone(),
        });
        let persisted = persisted.await.map(|()| target);
        self.settle_raise(key, &fence, target, persisted)?;
        entry.log();
        if previous < Some(target) {
            log_raise(key, previous, target, entry.actor.parse().ok(), None);
        }
        Ok(FenceWritten {
            previous,
            highest: Some(target),
        })
    }

    /// Forgets the fence of `key`, under the conditions of a forced
    /// lowering: its highest is still `if_highest`, and no request is on
    /// it. Answers once the deletion and its audit entry are durable.
    pub async fn forget_fence(
        &self,
        key: &str,
        if_highest: u64,
        actor: String,
        reason: Option<String>,
    ) -> Result<FenceWritten, AdminWriteError> {
        let key = &*self.qualify(key);
        let _one_at_a_time = self.inner.admin.lock().await;
        self.lower_or_forget(key, None, if_highest, actor, reason)
            .await
    }

    /// Over a shared store whose table is bounded (`cache.rs`): brings the
    /// store's highest of `key` (qualified) into memory before an admin
    /// write looks at it, so that a fence out of memory is not taken for
    /// a new one. Raises only (a claim may have raised it meanwhile); the
    /// evictor spares the fence once.
    async fn warm_shared(&self, key: &str) -> Result<(), StoreError> {
        if !self.inner.evicts() || self.inner.reads_on_demand() {
            return Ok(());
        }
        let fence = self.inner.fence(key)?;
        if fence.lock().highest().is_some() {
            return Ok(());
        }
        let read = self.inner.store.read_highests(&[key]).await?;
        let mut state = fence.lock();
        state.mark(USED, true);
        if let Some(stored) = read.into_iter().next().flatten() {
            if state.highest() < Some(stored) {
                state.set_highest(Some(stored));
            }
            let durable = state.durable().max(Some(stored));
            state.set_durable(durable);
        }
        Ok(())
    }

    /// Up to `limit` entries of the audit log, newest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        self.inner.store.audit(limit).await
    }

    /// A lowering to `target`, or a deletion (`None`). The caller holds the
    /// admin lock.
    async fn lower_or_forget(
        &self,
        key: &str,
        target: Option<u64>,
        if_highest: u64,
        actor: String,
        reason: Option<String>,
    ) -> Result<FenceWritten, AdminWriteError> {
        if self.inner.reads_on_demand() {
            // In memory for the look below (the evictor spares a fence
            // just read once).
            drop(self.inner.fence(key)?);
        }
        self.warm_shared(key).await?;
        let (fence, previous) = {
            // The shard's write lock: nobody can take a new reference to the
            // fence while we look at who holds one.
            let mut entry = self
                .inner
                .fences
                .get_mut(key)
                .ok_or(AdminWriteError::Unknown)?;
            let current = entry.value().lock().highest();
            let Some(current) = current else {
                // A first admission is still making its raise durable.
                return Err(if target.is_some() {
                    AdminWriteError::Busy
                } else {
                    AdminWriteError::Unknown
                });
            };
            if current != if_highest {
                return Err(AdminWriteError::HighestChanged {
                    highest: Some(current),
                });
            }
            let exclusive = Arc::get_mut(entry.value_mut()).ok_or(AdminWriteError::Busy)?;
            exclusive
                .state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .mark(FROZEN, true);
            (Arc::clone(entry.value()), current)
        };
        let mut frozen = Frozen(Some(Arc::clone(&fence)));
        // Before anything can be admitted under the lower highest.
        self.inner.lowerings.fetch_add(1, Ordering::SeqCst);
        let entry = AuditEntry {
            time: SystemTime::now(),
            actor,
            action: if target.is_some() {
                AuditAction::Lower
            } else {
                AuditAction::Delete
            },
            resource: key.to_owned(),
            previous: Some(previous),
            highest: target,
            reason,
        };
        self.inner
            .store
            .record(FenceChange {
                key: key.into(),
                set: target.map_or(Setting::Forget, Setting::Exactly),
                entry: entry.clone(),
            })
            .await?;
        frozen.0 = None;
        match target {
            Some(target) => {
                let mut state = fence.lock();
                state.set_highest(Some(target));
                state.set_durable(Some(target));
                state.mark(FROZEN, false);
            }
            None => {
                let removed = self
                    .inner
                    .fences
                    .remove_if(key, |_, held| Arc::ptr_eq(held, &fence));
                if removed.is_some() {
                    self.inner.left(key);
                }
                let mut state = fence.lock();
                state.mark(RETIRED, true);
                state.mark(FROZEN, false);
            }
        }
        fence.changed.notify_waiters();
        entry.log();
        Ok(FenceWritten {
            previous: Some(previous),
            highest: target,
        })
    }
}

/// Thaws a frozen fence unchanged if the admin write stops before the store
/// answered (it failed, or its future was dropped).
struct Frozen(Option<Arc<Fence>>);

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Some(fence) = self.0.take() {
            fence.lock().mark(FROZEN, false);
            fence.changed.notify_waiters();
        }
    }
}
