//! How a fence table comes to be: in memory, over the redb file (bounded
//! in memory), over etcd or any store, and the wiring of its parts (the
//! evictor thread, the view a shared store reports to).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;

use super::cache::{self, FenceCache};
use super::state::Fence;
use super::table::{self, Table};
use super::view::FenceView;
use super::Fences;
use crate::store::{FenceStore, MemoryStore, StoreError};

impl Fences {
    /// A table whose fences live in memory only and are forgotten on restart.
    pub fn in_memory() -> Self {
        Self::from_parts(DashMap::new(), MemoryStore::default(), false, None)
    }

    /// [`Fences::in_memory`] with at most `cache` of fences: at the bound a
    /// new key is refused ([`StoreError::Full`]), never an old fence
    /// forgotten (that would admit a stale token).
    pub fn in_memory_bounded(cache: FenceCache) -> Self {
        Self::from_parts(DashMap::new(), MemoryStore::default(), false, Some(cache))
    }

    /// Opens the durable table in directory `dir` (created if missing),
    /// with the default bound on the fences kept in memory
    /// ([`FenceCache::default`]): the others stay in the file and are read
    /// when a request names them (see [`Fences::open_with_cache`]).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let fences = fencegate::Fences::open(dir.path())?;
    /// # Ok::<(), fencegate::store::StoreError>(())
    /// ```
    #[cfg(feature = "disk")]
    pub fn open(dir: impl AsRef<std::path::Path>) -> Result<Self, StoreError> {
        Self::open_with_cache(dir, FenceCache::default())
    }

    /// Opens the durable table in directory `dir` keeping at most `cache`
    /// of fences in memory: nothing is loaded at start but the subtree
    /// fences, a key not in memory is read from the file when a request
    /// names it, and a fence leaves memory only once it is idle and
    /// durable (the rules: `src/fences/cache.rs`).
    ///
    /// ```
    /// use fencegate::fences::FenceCache;
    /// let dir = tempfile::tempdir().unwrap();
    /// let fences = fencegate::Fences::open_with_cache(dir.path(), FenceCache::bytes(1 << 20))?;
    /// # Ok::<(), fencegate::store::StoreError>(())
    /// ```
    #[cfg(feature = "disk")]
    pub fn open_with_cache(
        dir: impl AsRef<std::path::Path>,
        cache: FenceCache,
    ) -> Result<Self, StoreError> {
        Self::with_store_and_cache(crate::store::RedbStore::open(dir)?, cache)
    }

    /// A table over `store` bounded by `cache`: over a store that reads on
    /// demand ([`FenceStore::reads_on_demand`]) or a shared one
    /// ([`FenceStore::is_shared`]: its claims decide) fences leave memory
    /// at the bound; over any other, the whole store is loaded and new
    /// keys are refused at the bound. A shared store hands the table what
    /// it loaded (build it with [`EtcdStore::connect_bounded`](crate::store::EtcdStore::connect_bounded)
    /// to load only the subtree fences).
    pub fn with_store_and_cache(
        store: impl FenceStore,
        cache: FenceCache,
    ) -> Result<Self, StoreError> {
        if !store.reads_on_demand() {
            return Self::load(store, Some(cache));
        }
        let fences = DashMap::new();
        let mut subtrees = false;
        store.load_subtrees(&mut |key, highest| {
            subtrees = true;
            fences.insert(key.into(), Arc::new(Fence::new(Some(highest))));
        })?;
        Ok(Self::from_parts(fences, store, subtrees, Some(cache)))
    }

    /// A table shared by every holder of an etcd prefix (feature `etcd`):
    /// see [`EtcdStore`](crate::store::EtcdStore).
    #[cfg(feature = "etcd")]
    pub async fn etcd(options: crate::store::EtcdOptions) -> Result<Self, StoreError> {
        Self::with_store(crate::store::EtcdStore::connect(options).await?)
    }

    /// A table shared by every holder of an etcd prefix (feature `etcd`),
    /// bounded in memory by `cache`: only the subtree fences are read at
    /// start, a key enters memory when a request names it (its claim reads
    /// the store's highest) and leaves it idle at the bound
    /// (`src/fences/cache.rs`).
    #[cfg(feature = "etcd")]
    pub async fn etcd_with_cache(
        options: crate::store::EtcdOptions,
        cache: FenceCache,
    ) -> Result<Self, StoreError> {
        let store = crate::store::EtcdStore::connect_bounded(options).await?;
        Self::with_store_and_cache(store, cache)
    }

    /// A table over any [`FenceStore`], loaded from it whole, every fence
    /// kept in memory.
    pub fn with_store(store: impl FenceStore) -> Result<Self, StoreError> {
        Self::load(store, None)
    }

    fn load(store: impl FenceStore, cache: Option<FenceCache>) -> Result<Self, StoreError> {
        let fences = DashMap::new();
        let mut subtrees = false;
        store.load(&mut |key, highest| {
            subtrees |= crate::key::subtree_path(key).is_some();
            fences.insert(key.into(), Arc::new(Fence::new(Some(highest))));
        })?;
        Ok(Self::from_parts(fences, store, subtrees, cache))
    }

    fn from_parts(
        fences: DashMap<Box<str>, Arc<Fence>>,
        store: impl FenceStore,
        stored_subtrees: bool,
        cache: Option<FenceCache>,
    ) -> Self {
        let durable = store.is_durable();
        let shared = store.is_shared();
        let (bounded, woken) = match cache {
            Some(cache) => {
                let (bounded, woken) =
                    cache::Bounded::new(cache, store.reads_on_demand(), store.is_shared());
                let loaded: usize = fences
                    .iter()
                    .map(|entry| FenceCache::cost(entry.key()))
                    .sum();
                bounded.used.store(loaded, Ordering::Relaxed);
                (Some(bounded), woken)
            }
            None => (None, None),
        };
        let table = Arc::new(Table {
            fences,
            store: Box::new(store),
            durable,
            shared,
            admin: tokio::sync::Mutex::new(()),
            has_subtrees: AtomicBool::new(false),
            stored_subtrees,
            lowerings: AtomicU64::new(0),
            subtree_scope: AtomicBool::new(false),
            index: Mutex::new(None),
            bounded,
            new_fence_limit: std::sync::OnceLock::new(),
        });
        if let Some(woken) = woken {
            if let Err(error) = table::spawn_evictor(Arc::downgrade(&table), woken) {
                // Memory then grows past the bound; fences stay correct.
                tracing::error!(%error, "cannot start the fence evictor thread");
            }
        }
        table
            .store
            .attach(Arc::new(FenceView::new(Arc::downgrade(&table))));
        Fences {
            inner: table,
            namespace: None,
        }
    }
}
