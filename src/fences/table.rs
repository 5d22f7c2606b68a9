//! The fence table itself, beneath every namespace: the map of fences and
//! the store under it, and what is done to them alike for a namespace's
//! [`Fences`](crate::Fences) and for a shared store's
//! [`FenceView`](super::FenceView): a fence looked up or made, or
//! forgotten; the index of keys that subtree writes read (`many.rs`);
//! waiters woken; and the evictor (its rules: `cache.rs`).

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use dashmap::DashMap;

use super::cache::{Bounded, FenceCache};
use super::limit::NewFenceLimit;
use super::state::{Fence, FROZEN, RETIRED, USED};
use crate::key::subtree_path;
use crate::store::{FenceStore, StoreError};

/// The table every handle on it shares: a namespace's [`Fences`](crate::Fences),
/// a shared store's [`FenceView`](super::FenceView).
pub(super) struct Table {
    /// A sharded map so that admissions on different keys rarely contend.
    /// Guards are only ever held to clone an `Arc<Fence>` out, never across an
    /// `.await` (dashmap issues #79 and #369 show the deadlocks that follow).
    pub(super) fences: DashMap<Box<str>, Arc<Fence>>,
    pub(super) store: Box<dyn FenceStore>,
    pub(super) durable: bool,
    /// Other holders share the store: every new request is claimed in it.
    pub(super) shared: bool,
    /// Admin writes, one at a time: they are rare, and serializing them
    /// means no fence is ever frozen by two of them at once.
    pub(super) admin: tokio::sync::Mutex<()>,
    /// Set (never cleared) once a subtree fence exists: from then on every
    /// admission also looks at the subtrees above its key (`many.rs`).
    /// Until then the plain path pays one load of it, under the fence's
    /// lock, and nothing else.
    pub(super) has_subtrees: AtomicBool,
    /// The store held keys that look like subtree keys when the table was
    /// loaded: what they mean depends on the scope, which the layer knows
    /// ([`Fences::enable_stored_subtrees`](crate::Fences::enable_stored_subtrees)).
    pub(super) stored_subtrees: bool,
    /// Every key in order, for the writes that act on a whole subtree
    /// (`many.rs`): built at the first of them, then kept up to date as
    /// keys come and go. `None` until then, so that a gateway that never
    /// sees such a write keeps no second copy of its keys.
    pub(super) index: Mutex<Option<BTreeSet<Box<str>>>>,
    /// The bound on the fences in memory (`cache.rs`); `None`: every
    /// fence stays in memory.
    pub(super) bounded: Option<Bounded>,
    /// The limit on new fences per client, if the gateway set one
    /// (`limit.rs`).
    pub(super) new_fence_limit: OnceLock<NewFenceLimit>,
    /// Admin lowerings and deletions so far: a chained write's version
    /// learned before one of them may no longer stand (`crate::chain`).
    pub(super) lowerings: AtomicU64,
    /// A fencing layer in `path` or `prefix:N` scope said keys shaped like
    /// subtree keys are subtrees here (`Fences::enable_stored_subtrees`).
    pub(super) subtree_scope: AtomicBool,
}

impl Table {
    /// The fence of `key`, from memory, else made: with the store's highest
    /// over a store that reads on demand, read under the map's lock for the
    /// key (`cache.rs`, rule 1). Fails if that read fails, or if the table
    /// is full and cannot evict.
    pub(super) fn fence(&self, key: &str) -> Result<Arc<Fence>, StoreError> {
        if let Some(fence) = self.fences.get(key) {
            return Ok(Arc::clone(fence.value()));
        }
        let (fence, created) = match self.fences.entry(key.into()) {
            dashmap::Entry::Occupied(entry) => (Arc::clone(entry.get()), false),
            dashmap::Entry::Vacant(entry) => {
                let stored = match &self.bounded {
                    Some(bounded) => bounded.enter(key, &*self.store)?,
                    None => None,
                };
                let fence = Arc::new(Fence::new(stored));
                entry.insert(Arc::clone(&fence));
                (fence, true)
            }
        };
        // After the map's insert and before anyone decides on the fence
        // (see `many.rs`).
        if created {
            self.index(key);
            if let Some(bounded) = &self.bounded {
                bounded.entered(key);
            }
        }
        Ok(fence)
    }

    /// Drops a fence that never admitted anything (its first raise failed),
    /// so that it is not counted. Only when nobody else holds it: the map's
    /// write lock is held during the check, so no request can pick it up
    /// meanwhile, and a later request simply creates a fresh one.
    pub(super) fn forget_if_unused(&self, key: &str, fence: &Arc<Fence>) {
        let removed = self.fences.remove_if(key, |_, held| {
            Arc::ptr_eq(held, fence)
                && Arc::strong_count(held) == 2
                && held.lock().highest().is_none()
        });
        if removed.is_some() {
            self.left(key);
        }
    }

    /// A key is out of the map: out of the index and the bound's count.
    pub(super) fn left(&self, key: &str) {
        self.unindex(key);
        if let Some(bounded) = &self.bounded {
            bounded.left(key);
        }
    }

    /// The highest token admitted on `key` (as the table holds it), if
    /// any: from memory, or from the store for a fence that is not in
    /// memory (a read that fails answers `None`, and is logged).
    pub(super) fn highest(&self, key: &str) -> Option<u64> {
        // Read in place, not through a clone of the fence: a clone would
        // count as a holder, and make an admin write see the key as busy.
        if let Some(fence) = self.fences.get(key) {
            let highest = fence.value().lock().highest();
            return highest;
        }
        if !self.reads_on_demand() {
            return None;
        }
        self.store.read_stored(key).unwrap_or_else(|error| {
            tracing::warn!(key, %error, "cannot read a fence from the store");
            None
        })
    }

    /// Whether fences may be out of memory, in the store only, and the
    /// store reads them at once (`--state disk`).
    pub(super) fn reads_on_demand(&self) -> bool {
        self.bounded
            .as_ref()
            .is_some_and(|bounded| bounded.evicts && bounded.reads)
    }

    /// Whether fences may be out of memory, in the store only (read at
    /// once, or by a claim or an asynchronous read of a shared store).
    pub(super) fn evicts(&self) -> bool {
        self.bounded.as_ref().is_some_and(|bounded| bounded.evicts)
    }

    /// From now on, every admission also looks at the subtrees above its
    /// key ([`Fences::enable_subtrees`](crate::Fences::enable_subtrees)).
    pub(super) fn enable_subtrees(&self) {
        self.has_subtrees.store(true, Ordering::SeqCst);
    }

    /// Whether keys shaped like subtree keys are subtrees here.
    pub(super) fn subtree_scope(&self) -> bool {
        self.subtree_scope.load(Ordering::SeqCst)
    }

    /// Wakes the waiters of the fence of `key`, if it is in memory.
    pub(super) fn wake(&self, key: &str) {
        let fence = self.fences.get(key).map(|f| Arc::clone(f.value()));
        if let Some(fence) = fence {
            fence.changed.notify_waiters();
        }
    }

    /// Wakes the waiters of every fence under `subtree` (a shared store
    /// saw a record of it go).
    pub(super) fn wake_under(&self, subtree: &str) {
        for key in self.keys_under(subtree) {
            self.wake(&key);
        }
    }

    /// Adds a new key to the index, if there is one yet.
    pub(super) fn index(&self, key: &str) {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = index.as_mut() {
            if !index.contains(key) {
                index.insert(key.into());
            }
        }
    }

    /// Whether the index (if there is one yet) holds `key`.
    pub(super) fn indexed(&self, key: &str) -> bool {
        let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        index.as_ref().is_some_and(|index| index.contains(key))
    }

    /// Takes a removed key out of the index, unless the key is in the map
    /// again: a request may have made a new fence for it since it was
    /// removed (and indexed it before this), and a key in the map must
    /// stay in the index. Looked at under the index's lock, which is
    /// taken before the map's here as where the index is built, never
    /// after.
    pub(super) fn unindex(&self, key: &str) {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = index.as_mut() {
            if !self.fences.contains_key(key) {
                index.remove(key);
            }
        }
    }

    /// The keys under subtree key `subtree` (not itself), from the index,
    /// which is built here the first time.
    pub(super) fn keys_under(&self, subtree: &str) -> Vec<Box<str>> {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        let index = index.get_or_insert_with(|| {
            self.fences
                .iter()
                .map(|entry| entry.key().clone())
                .collect()
        });
        under(index, subtree)
    }

    /// [`Self::keys_under`] from the index as it is, never building it
    /// (called with fence mutexes held; building it takes the map's locks).
    pub(super) fn keys_under_indexed(&self, subtree: &str) -> Option<Vec<Box<str>>> {
        let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        index.as_ref().map(|index| under(index, subtree))
    }
}

/// The keys of `index` strictly under subtree key `subtree`.
fn under(index: &BTreeSet<Box<str>>, subtree: &str) -> Vec<Box<str>> {
    let prefix = under_prefix(subtree);
    index
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(|key| key.starts_with(prefix))
        .filter(|key| &***key != subtree && &***key != "/")
        .cloned()
        .collect()
}

/// What every key under subtree key `subtree` starts with (the root
/// subtree `//` covers every key but the root object `/`).
pub(super) fn under_prefix(subtree: &str) -> &str {
    if subtree == "//" {
        "/"
    } else {
        subtree
    }
}

/// Starts the evictor of `table`: a thread that sweeps it whenever woken,
/// and ends once the table is gone.
pub(super) fn spawn_evictor(table: Weak<Table>, woken: Receiver<()>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("fencegate-evict".into())
        .spawn(move || {
            while woken.recv().is_ok() {
                let Some(table) = table.upgrade() else { break };
                evict(&table);
            }
        })
        .map(drop)
}

/// Whether a fence may leave memory (rule 2), its state locked.
fn idle_and_durable(fence: &Fence) -> Option<bool> {
    let state = fence.lock();
    let idle = state.in_flight == 0 && !state.is(FROZEN) && !state.is(RETIRED);
    (idle && state.durable() == state.highest()).then(|| state.is(USED))
}

/// One sweep: frees down to seven eighths of the bound, sparing once each
/// fence used since the last sweep.
pub(super) fn evict(table: &Table) {
    let Some(bounded) = &table.bounded else {
        return;
    };
    let target = bounded.bound - bounded.bound / 8;
    for _pass in 0..2 {
        let used = bounded.used.load(Ordering::Relaxed);
        if used <= target {
            return;
        }
        let mut to_free = used - target;
        let mut chosen: Vec<Box<str>> = Vec::new();
        for entry in table.fences.iter() {
            if to_free == 0 {
                break;
            }
            let key = entry.key();
            if Arc::strong_count(entry.value()) != 1 || subtree_path(key).is_some() {
                continue;
            }
            match idle_and_durable(entry.value()) {
                Some(true) => entry.value().lock().mark(USED, false),
                Some(false) => {
                    to_free = to_free.saturating_sub(FenceCache::cost(key));
                    chosen.push(key.clone());
                }
                None => {}
            }
        }
        for key in chosen {
            // Looked at again under the key's write lock: a request may
            // have picked the fence up since.
            let removed = table.fences.remove_if(&key, |_, fence| {
                Arc::strong_count(fence) == 1 && idle_and_durable(fence) == Some(false)
            });
            if removed.is_some() {
                bounded.left(&key);
                bounded.counters.evictions.fetch_add(1, Ordering::Relaxed);
                table.unindex(&key);
            }
        }
    }
}
