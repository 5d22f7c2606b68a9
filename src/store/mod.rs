//! Step 4 of the data path: making a new highest token durable before the
//! request it admits is forwarded.
//!
//! The fence table ([`crate::Fences`]) keeps every fence in memory and asks a
//! [`FenceStore`] to persist each *raise* of a fence's highest token, and
//! each admin write ([`FenceChange`]) together with its audit entry. A store
//! is small on purpose (load everything once, persist one raise, record one
//! change) so that a shared store (etcd, PostgreSQL) can be added without
//! touching the table or the middleware.
//!
//! - [`MemoryStore`]: persists nothing; every fence is forgotten on restart.
//! - [`RedbStore`] (feature `disk`): an embedded [redb] database, fsynced on
//!   every commit, with group commit so that concurrent raises share an fsync.
//!
//! [redb]: https://docs.rs/redb

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::audit::AuditEntry;

mod memory;
#[cfg(feature = "disk")]
mod redb;

pub use self::memory::MemoryStore;
#[cfg(feature = "disk")]
pub use self::redb::RedbStore;

/// The future returned by [`FenceStore::persist`].
pub type PersistFuture = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'static>>;

/// The future returned by [`FenceStore::audit`].
pub type AuditFuture =
    Pin<Box<dyn Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send + 'static>>;

/// An admin write: one fence set or forgotten, and the audit entry that
/// records it, made durable in one step (both or neither).
#[derive(Debug, Clone)]
pub struct FenceChange {
    /// The fence key.
    pub key: Box<str>,
    /// What to store for it.
    pub set: Setting,
    /// The record of the change.
    pub entry: AuditEntry,
}

/// What a [`FenceChange`] stores for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `highest := max(highest, n)`, as a raise by admission.
    AtLeast(u64),
    /// `highest := n`, also downwards (a forced lowering).
    Exactly(u64),
    /// No fence for the key any more.
    Forget,
}

/// Durable storage for fences' highest tokens.
///
/// Implementations must guarantee that once the future returned by
/// [`persist`](FenceStore::persist) resolves to `Ok`, a later
/// [`load`](FenceStore::load), also after a crash, reports for `key` a value
/// at least `token`. Persisting never decreases a value: persisting a lower
/// token than the stored one keeps the stored one. Only
/// [`record`](FenceStore::record) of a [`Setting::Exactly`] or
/// [`Setting::Forget`] lowers or removes one, and changes are applied in the
/// order they were submitted, raises and records alike.
pub trait FenceStore: Send + Sync + 'static {
    /// Calls `each(key, highest)` once for every fence stored. Called once,
    /// when the table is built.
    fn load(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError>;

    /// Makes `highest(key) >= token` durable.
    fn persist(&self, key: &str, token: u64) -> PersistFuture;

    /// Makes an admin write and its audit entry durable, in one step.
    /// Stores that do not support admin writes keep this default, which
    /// refuses them.
    fn record(&self, change: FenceChange) -> PersistFuture {
        drop(change);
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store does not support admin writes",
        ))))
    }

    /// Up to `limit` audit entries, newest first.
    fn audit(&self, limit: usize) -> AuditFuture {
        let _ = limit;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store keeps no audit log",
        ))))
    }

    /// Whether fences survive a restart. Used for the start-up warning and
    /// for the table to skip persisting altogether when they do not.
    fn is_durable(&self) -> bool;

    /// Finishes pending writes and releases the store (file locks, threads).
    /// Persisting after this fails with [`StoreError::Closed`].
    fn close(&self) {}

    /// `Ok` while raises can be made durable; after a failed one, the error,
    /// until a later write succeeds. Read by `/readyz`.
    fn health(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Counters for monitoring and benchmarks.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}

/// How much work a store has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Raises persisted (one per `persist` call that succeeded).
    pub raises: u64,
    /// Durable commits (fsyncs) those raises took. `raises / commits` is the
    /// average group-commit size.
    pub commits: u64,
}

/// A fence store failure. Cheap to clone, so that one failed group commit can
/// be reported to every request that was waiting on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be opened, or its contents could not be read.
    /// Never answered by starting empty: that would forget fences.
    #[error("cannot open fence store at {}: {detail}", path.display())]
    Open {
        /// Where the store lives.
        path: PathBuf,
        /// What went wrong.
        detail: Arc<str>,
    },
    /// A raise could not be made durable (disk full, I/O error).
    #[error("cannot make the fence durable: {0}")]
    Write(Arc<str>),
    /// The store has been shut down.
    #[error("the fence store is closed")]
    Closed,
    /// The store cannot do what was asked (an admin write on a store
    /// without support for it).
    #[error("{0}")]
    Unsupported(&'static str),
}
