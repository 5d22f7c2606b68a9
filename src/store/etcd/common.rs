//! What every part of the store uses and none of them owns: the counters
//! they all count into, the size of a transaction, and the two helpers for
//! a lock and for an unreachable cluster. Below every part: `mod.rs`
//! composes the parts, and each part imports only this file and the parts
//! it is handed.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::store::StoreError;

/// Claims in one transaction at most. etcd refuses a transaction with more
/// than 128 operations at one level (`--max-txn-ops`); each claim is one
/// nested transaction.
pub(super) const MAX_BATCH: usize = 100;

/// What the store did, for its stats: every part counts into the one set.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) claims_local: AtomicU64,
    pub(super) claims_committed: AtomicU64,
    pub(super) transactions: AtomicU64,
    pub(super) waits: AtomicU64,
    pub(super) lease_losses: AtomicU64,
    pub(super) records_deleted: AtomicU64,
    /// Reads of highests asked for (chained writes' observed versions),
    /// and the transactions that answered them.
    pub(super) highest_reads: AtomicU64,
    pub(super) highest_read_transactions: AtomicU64,
    /// The newest revision etcd reported in a transaction answer; with the
    /// replica's revision, the local view's lag.
    pub(super) seen_revision: AtomicU64,
}

/// `mutex`'s guard, also if a panic poisoned it.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A [`StoreError::Unavailable`] saying `detail`.
pub(super) fn unavailable(detail: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(detail.to_string().into())
}
