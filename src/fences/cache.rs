//! Fences beyond memory: the bound on the fences a table keeps in memory,
//! and what happens at the bound.
//!
//! # The rules
//!
//! Over a store that reads on demand ([`FenceStore::reads_on_demand`]: the
//! redb file of `--state disk`), memory holds the fences in use, up to a
//! bound, and the store holds them all:
//!
//! 1. A key not in memory is read from the store when a request names it
//!    (`Table::fence`), under the map's lock for that key: concurrent
//!    requests on one cold key read it once, and no eviction of the key can
//!    come between the read and its use (eviction takes the same lock).
//! 2. A fence leaves memory only when it is *idle and durable*: nobody holds
//!    it (no request in flight, waiting, or deciding: the map holds its only
//!    reference), no admin write has it frozen, and its highest is the value
//!    the store has confirmed. So the store's value is the fence: nothing is
//!    lowered or lost by eviction, and the read of rule 1 finds it.
//! 3. Subtree fences never leave memory (they are loaded when the table is
//!    built): every admission looks at the subtree fences above its key
//!    without reading the store. A subtree write reads the keys under its
//!    path from the store too, and holds them while it decides (`many.rs`).
//!
//! Eviction runs on a thread of its own (`table.rs`), woken when an insert takes the
//! table over its bound, and frees down to seven eighths of it: a second
//! chance per fence (a fence used since the last sweep is spared once), so
//! keys in use stay.
//!
//! Over a shared store (`--state etcd`) the same bound holds, by another
//! road: every admission there is claimed in the store, whose transaction
//! refuses a token below the stored highest (docs/SHARED.md), so memory
//! never decides alone. A key not in memory enters it fresh, without a
//! read (rule 1's read is the claim itself, which answers the stored
//! highest when it refuses); rule 2 holds as written (a fence's highest is
//! durable once its claim committed); rule 3 holds (subtree fences are
//! loaded at start and kept). The watch raises only the fences in memory,
//! so memory holds what this instance uses, never the whole prefix.
//!
//! Over a store that cannot read on demand (`--state memory`), nothing may
//! leave memory (forgetting a fence would admit a stale token): at the
//! bound, a request for a new key is refused ([`StoreError::Full`]), and
//! the fences already there keep working.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use crate::store::{FenceStore, StoreError};

/// How much memory a fence table's fences may take.
///
/// ```
/// let cache = fencegate::fences::FenceCache::bytes(32 << 20);
/// assert_eq!(cache.bound(), 32 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceCache {
    bytes: usize,
}

impl FenceCache {
    /// The default bound: 64 MiB of fences (about 300,000 fences of short
    /// keys).
    pub const DEFAULT_BYTES: usize = 64 << 20;

    /// A bound of `bytes`, counted as [`FenceCache::cost`] per fence.
    pub fn bytes(bytes: usize) -> Self {
        FenceCache { bytes }
    }

    /// The bound, in bytes.
    pub fn bound(&self) -> usize {
        self.bytes
    }

    /// What one fence of `key` is counted as: its key, and about what the
    /// map's slot, the fence and their allocations take (measured:
    /// docs/BENCHMARKS.md, bytes per fence).
    pub fn cost(key: &str) -> usize {
        key.len() + 160
    }
}

impl Default for FenceCache {
    fn default() -> Self {
        FenceCache::bytes(Self::DEFAULT_BYTES)
    }
}

/// A table's bound, and what it has done.
pub(super) struct Bounded {
    pub(super) bound: usize,
    /// Fences leave memory at the bound (the store reads on demand, or
    /// decides every admission by its claim); else new keys are refused.
    pub(super) evicts: bool,
    /// A key entering memory is read from the store first (`--state
    /// disk`); else it enters fresh and its claim reads the store (a
    /// shared store).
    pub(super) reads: bool,
    /// Bytes counted for the fences in memory.
    pub(super) used: AtomicUsize,
    /// Wakes the evictor; full when it is already woken.
    wake: Option<SyncSender<()>>,
    pub(super) counters: CacheCounters,
}

/// What a bounded table has done, for `/metrics`.
#[derive(Debug, Default)]
pub(super) struct CacheCounters {
    pub(super) cold_reads: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) refusals: AtomicU64,
}

/// A snapshot of a bounded table ([`crate::Fences::cache_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The bound, in bytes.
    pub bound: usize,
    /// Bytes counted for the fences in memory now.
    pub used: usize,
    /// Fences in memory now.
    pub in_memory: usize,
    /// Keys that entered memory after a request named them: read from the
    /// store first (`--state disk`), or fresh for their claim to read it
    /// (`--state etcd`).
    pub cold_reads: u64,
    /// Fences that left memory.
    pub evictions: u64,
    /// New keys refused at the bound (a store that cannot read on demand).
    pub refusals: u64,
}

impl Bounded {
    /// A bound of `cache` over a store that reads on demand (`reads`), or
    /// that decides every admission by its claim (`claims`), or neither;
    /// and the receiver its evictor waits on.
    pub(super) fn new(
        cache: FenceCache,
        reads: bool,
        claims: bool,
    ) -> (Self, Option<Receiver<()>>) {
        let evicts = reads || claims;
        let (wake, woken) = if evicts {
            let (wake, woken) = mpsc::sync_channel(1);
            (Some(wake), Some(woken))
        } else {
            (None, None)
        };
        let bounded = Bounded {
            bound: cache.bytes,
            evicts,
            reads,
            used: AtomicUsize::new(0),
            wake,
            counters: CacheCounters::default(),
        };
        (bounded, woken)
    }

    /// The highest of a key about to enter memory: read from the store if
    /// it reads on demand; none over a store whose claim decides. Refused
    /// at the bound if the table cannot evict. Called under the map's lock
    /// for the key.
    pub(super) fn enter(
        &self,
        key: &str,
        store: &dyn FenceStore,
    ) -> Result<Option<u64>, StoreError> {
        if !self.evicts {
            if self.used.load(Ordering::Relaxed) + FenceCache::cost(key) > self.bound {
                self.counters.refusals.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::Full(
                    format!(
                        "the fence table is full ({} bytes of fences, --fence-cache): a new key \
                         is refused, as forgetting a fence in memory state would admit a stale \
                         token",
                        self.bound
                    )
                    .into(),
                ));
            }
            return Ok(None);
        }
        self.counters.cold_reads.fetch_add(1, Ordering::Relaxed);
        match self.reads {
            true => store.read_stored(key),
            false => Ok(None),
        }
    }

    /// A key entered memory: counted, and the evictor woken past the bound.
    pub(super) fn entered(&self, key: &str) {
        let used = self
            .used
            .fetch_add(FenceCache::cost(key), Ordering::Relaxed);
        if used + FenceCache::cost(key) > self.bound {
            if let Some(wake) = &self.wake {
                match wake.try_send(()) {
                    Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
                }
            }
        }
    }

    /// A key left memory.
    pub(super) fn left(&self, key: &str) {
        self.used
            .fetch_sub(FenceCache::cost(key), Ordering::Relaxed);
    }
}

#[cfg(all(test, feature = "disk"))]
mod tests {
    use super::*;
    use crate::fences::table::evict;
    use crate::{Fences, StaleReason};

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    fn stats(fences: &Fences) -> CacheStats {
        fences.cache_stats().expect("a bounded table")
    }

    #[test]
    fn an_evicted_fence_still_refuses_stale_tokens_also_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let tiny = FenceCache::bytes(4 << 10);
        run(async {
            let fences = Fences::open_with_cache(dir.path(), tiny).unwrap();
            for i in 0..200 {
                drop(fences.admit(&format!("/k/{i}"), 10).await.unwrap());
            }
            evict(&fences.inner);
            let after = stats(&fences);
            assert!(after.evictions > 0, "{after:?}");
            assert!(after.in_memory < 200, "{after:?}");
            assert!(after.used <= tiny.bound(), "{after:?}");
            for i in 0..200 {
                let key = format!("/k/{i}");
                let stale = fences.admit(&key, 9).await.unwrap_err();
                let stale = stale.stale().unwrap();
                assert_eq!(
                    (stale.highest, stale.reason),
                    (10, StaleReason::BelowHighest)
                );
                assert_eq!(fences.highest(&key), Some(10));
            }
            assert!(stats(&fences).cold_reads >= 200 - after.in_memory as u64);
            assert_eq!(fences.stored_len(), Some(200));
            assert_eq!(fences.list("/k/", 500).len(), 200);
            fences.close();
        });
        run(async {
            let fences = Fences::open_with_cache(dir.path(), tiny).unwrap();
            assert_eq!(fences.len(), 0, "nothing loaded at start");
            let stale = fences.admit("/k/7", 9).await.unwrap_err();
            assert_eq!(stale.stale().unwrap().highest, 10);
            drop(fences.admit("/k/7", 11).await.unwrap());
            assert_eq!(fences.highest("/k/7"), Some(11));
        });
    }

    #[test]
    fn concurrent_requests_on_one_cold_key_read_it_once() {
        let dir = tempfile::tempdir().unwrap();
        run(async {
            let fences = Fences::open_with_cache(dir.path(), FenceCache::bytes(1 << 20)).unwrap();
            drop(fences.admit("/cold", 20).await.unwrap());
            fences.close();
        });
        run(async {
            let fences = Fences::open_with_cache(dir.path(), FenceCache::bytes(1 << 20)).unwrap();
            let tasks: Vec<_> = (15..30)
                .map(|token| {
                    let fences = fences.clone();
                    tokio::spawn(async move { fences.admit("/cold", token).await.map(drop) })
                })
                .collect();
            for (token, task) in (15..30).zip(tasks) {
                let admitted = task.await.unwrap();
                // Below the stored 20: refused whatever the order.
                if token < 20 {
                    assert!(admitted.is_err(), "{token}");
                }
            }
            assert_eq!(stats(&fences).cold_reads, 1);
            assert_eq!(fences.highest("/cold"), Some(29));
        });
    }

    #[test]
    fn a_subtree_write_sees_the_evicted_fences_under_it() {
        let dir = tempfile::tempdir().unwrap();
        run(async {
            let fences = Fences::open_with_cache(dir.path(), FenceCache::bytes(2 << 10)).unwrap();
            drop(fences.admit("/dir/a", 50).await.unwrap());
            for i in 0..100 {
                drop(fences.admit(&format!("/other/{i}"), 1).await.unwrap());
            }
            evict(&fences.inner);
            evict(&fences.inner);
            assert!(
                fences.inner.fences.get("/dir/a").is_none(),
                "evicted: {:?}",
                stats(&fences)
            );
            let subtree = ["/dir/".to_owned()];
            let admission = crate::fences::Admission::new;
            let refused = fences.admit_all(&subtree, admission(40)).await.unwrap_err();
            assert_eq!(refused.resource, "/dir/a");
            drop(fences.admit_all(&subtree, admission(60)).await.unwrap());
            fences.close();
        });
        // The subtree fence is loaded at start: a key under it is refused
        // below it, though it was never written itself.
        run(async {
            let fences = Fences::open_with_cache(dir.path(), FenceCache::bytes(2 << 10)).unwrap();
            fences.enable_stored_subtrees();
            let stale = fences.admit("/dir/new", 55).await.unwrap_err();
            assert_eq!(stale.stale().unwrap().highest, 60);
        });
    }

    #[test]
    fn a_full_memory_table_refuses_new_keys_and_keeps_the_old() {
        run(async {
            let fences = Fences::in_memory_bounded(FenceCache::bytes(2 << 10));
            let mut admitted = 0;
            let refused = loop {
                match fences.admit(&format!("/m/{admitted}"), 5).await {
                    Ok(in_flight) => drop(in_flight),
                    Err(error) => break error,
                }
                admitted += 1;
                assert!(admitted < 100, "never full");
            };
            assert!(matches!(
                refused,
                crate::fences::AdmitError::Store(StoreError::Full(_))
            ));
            assert!(admitted > 5, "{admitted}");
            assert_eq!(
                fences
                    .admit("/m/0", 4)
                    .await
                    .unwrap_err()
                    .stale()
                    .unwrap()
                    .highest,
                5
            );
            drop(fences.admit("/m/0", 6).await.unwrap());
            assert_eq!(stats(&fences).refusals, 1);
        });
    }
}
