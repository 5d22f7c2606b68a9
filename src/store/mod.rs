//! Step 4 of the data path: making a new highest token durable before the
//! request it admits is forwarded.
//!
//! The fence table ([`crate::Fences`]) is this process's view of the fences
//! and of its own requests in flight. The [`FenceStore`] is where fences
//! live for everyone who shares them: before a request with a new token is
//! let through, the table *claims* the token in the store
//! ([`FenceStore::claim`]), which is one idea with three implementations:
//!
//! - [`MemoryStore`]: the process is the only holder and nothing outlives
//!   it, so a claim is granted at once.
//! - [`RedbStore`] (feature `disk`): the process is the only holder; a claim
//!   makes `highest >= token` durable in an embedded [redb] database
//!   (fsynced, with group commit so that concurrent claims share an fsync).
//! - `EtcdStore` (feature `etcd`): every gateway sharing an etcd prefix is a
//!   holder; a claim is a compare-and-set of the shared highest plus an
//!   in-flight record on the instance's lease, and answers the stored highest
//!   and whether a lower claim of another instance must finish first
//!   ([`ClaimHold::waits`]). Changes made by other instances reach the table
//!   through the [`FenceEvents`] the store is attached to.
//!
//! Each admin write ([`FenceChange`]) is recorded together with its audit
//! entry.
//!
//! [redb]: https://docs.rs/redb

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::admin::audit::AuditEntry;

#[cfg(feature = "etcd")]
mod etcd;
mod lease;
mod memory;
#[cfg(feature = "disk")]
mod redb;

#[cfg(feature = "etcd")]
pub use self::etcd::{EtcdOptions, EtcdStore};

pub use self::lease::{boot_clock, Lease, LeaseEnded, LeaseStage};
pub use self::memory::MemoryStore;
#[cfg(feature = "disk")]
pub use self::redb::RedbStore;

/// The future returned by [`FenceStore::claim`].
pub type ClaimFuture = Pin<Box<dyn Future<Output = Result<Claim, StoreError>> + Send + 'static>>;

/// The future returned by [`FenceStore::namespace_matches`].
pub type MatchesFuture =
    Pin<Box<dyn Future<Output = Result<Vec<(String, String)>, StoreError>> + Send + 'static>>;

/// The future returned by [`FenceStore::record`].
pub type PersistFuture = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'static>>;

/// The future returned by [`FenceStore::upload_object`]: the object an
/// upload is bound to, if any.
pub type UploadFuture =
    Pin<Box<dyn Future<Output = Result<Option<String>, StoreError>> + Send + 'static>>;

/// What a store answered to a claim of a token on a key.
pub struct Claim {
    /// The store's highest for the key after the claim: the token claimed,
    /// or a higher one claimed by another holder first (then the request is
    /// stale, and nothing was registered for it).
    pub highest: u64,
    /// For a shared store, what keeps the claim registered with the other
    /// holders while the request waits and is in flight. `None` for a store
    /// with a single holder.
    pub hold: Option<Box<dyn ClaimHold>>,
}

impl Claim {
    /// The answer of a store whose only holder is this process: `token` is
    /// the highest, and there is no one else to tell.
    pub fn granted(token: u64) -> Self {
        Claim {
            highest: token,
            hold: None,
        }
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("highest", &self.highest)
            .field("shared", &self.hold.is_some())
            .finish()
    }
}

/// A claim registered in a shared store. Dropped when the request that made
/// it is no longer waiting or in flight.
pub trait ClaimHold: Send + Sync + 'static {
    /// Whether a lower-token claim of another holder is still in flight on
    /// the key: the request must wait. When this changes the store wakes
    /// the key's waiters through its [`FenceEvents`].
    fn waits(&self) -> bool;

    /// The lease the claim lives on: once it is revoked, the request must
    /// not go on (or be forwarded any further).
    fn lease(&self) -> &Lease;
}

/// The future returned by [`FenceStore::read_highests`].
pub type HighestsFuture =
    Pin<Box<dyn Future<Output = Result<Vec<Option<u64>>, StoreError>> + Send + 'static>>;

/// The future returned by [`FenceStore::list_stored`]: keys and highests.
pub type ListFuture =
    Pin<Box<dyn Future<Output = Result<Vec<(String, u64)>, StoreError>> + Send + 'static>>;

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

/// Where a shared store reports what other holders changed, so that stale
/// requests are refused from memory and waiters wake up: the fence table's
/// view (`fences::FenceView`) implements it, handed to the store by
/// [`FenceStore::attach`]. The store depends on this trait only, not on the
/// table (no link to it either: `store` names nothing of `fences`).
pub trait FenceEvents: Send + Sync + 'static {
    /// Another holder made `highest` the key's highest (committed in the
    /// store): refuse lower tokens from now on, overtake waiters below it.
    /// Never lowers.
    fn raised(&self, key: &str, highest: u64);

    /// An admin write of another holder set the key's highest (`None`: the
    /// fence was deleted).
    fn set(&self, key: &str, highest: Option<u64>);

    /// Something that waiters on the key wait for changed (another holder's
    /// in-flight record came or went): wake them to look again.
    fn changed(&self, key: &str);

    /// The table's highest for `key`.
    fn highest(&self, key: &str) -> Option<u64>;

    /// Whether the table is still there.
    fn is_live(&self) -> bool;
}

/// Where fences' highest tokens live, for every holder that shares them.
///
/// Implementations must guarantee that once the future returned by
/// [`claim`](FenceStore::claim) resolves to `Ok` with a `highest` of
/// `token`, a later [`load`](FenceStore::load) by any holder, also after a
/// crash (for a durable store), reports for `key` a value at least `token`.
/// A claim never decreases a value. Only [`record`](FenceStore::record) of a
/// [`Setting::Exactly`] or [`Setting::Forget`] lowers or removes one, and
/// one holder's changes are applied in the order they were submitted,
/// claims and records alike.
pub trait FenceStore: Send + Sync + 'static {
    /// Calls `each(key, highest)` once for every fence stored. Called once,
    /// when the table is built.
    fn load(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError>;

    /// Whether the store answers [`read_stored`](FenceStore::read_stored)
    /// (and [`load_subtrees`](FenceStore::load_subtrees),
    /// [`read_stored_under`](FenceStore::read_stored_under)): a table over
    /// it may then keep only the fences in use in memory and read the
    /// others when a request names them. Only for a store with a single
    /// holder, whose stored values change through this table alone.
    fn reads_on_demand(&self) -> bool {
        false
    }

    /// Calls `each(key, highest)` for every stored subtree-shaped key
    /// ([`crate::key::subtree_path`]): what a table that reads on demand
    /// loads when it is built.
    fn load_subtrees(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        let _ = each;
        Err(StoreError::Unsupported(
            "this fence store does not read on demand",
        ))
    }

    /// The highest stored for `key` as committed now (every claim and
    /// record that has answered is in it).
    fn read_stored(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let _ = key;
        Err(StoreError::Unsupported(
            "this fence store does not read on demand",
        ))
    }

    /// Calls `each(key, highest)` for the stored keys that start with
    /// `prefix`, in key order, as committed now, until it answers `false`.
    fn read_stored_under(
        &self,
        prefix: &str,
        each: &mut dyn FnMut(&str, u64) -> bool,
    ) -> Result<(), StoreError> {
        let _ = (prefix, each);
        Err(StoreError::Unsupported(
            "this fence store does not read on demand",
        ))
    }

    /// How many fences the store holds, when it can tell at once.
    fn stored_count(&self) -> Option<u64> {
        None
    }

    /// Claims `token` on `key` for a request about to be let through: makes
    /// `highest(key) >= token` hold in the store and, for a shared store,
    /// registers the claim with the other holders (see [`Claim`]).
    fn claim(&self, key: &str, token: u64) -> ClaimFuture;

    /// Claims `token` on every key of `keys` in one step, all or none: for
    /// the writes admitted on several keys at once
    /// ([`Fences::admit_all`](crate::Fences::admit_all)). The answer's
    /// `highest` is the highest of them. Stores that cannot do it in one
    /// step keep this default, which refuses.
    fn claim_all(&self, keys: &[&str], token: u64) -> ClaimFuture {
        match keys {
            [key] => self.claim(key, token),
            _ => Box::pin(std::future::ready(Err(StoreError::Unsupported(
                "this fence store cannot claim several keys in one step",
            )))),
        }
    }

    /// Hands the store the table's view, through which a shared store
    /// reports what other holders changed. Called once, when the table is
    /// built; stores with a single holder ignore it.
    fn attach(&self, view: Arc<dyn FenceEvents>) {
        drop(view);
    }

    /// From now on keys shaped like a [`subtree_key`](crate::key::subtree_key)
    /// stand for whole subtrees (the table's scope is `path` or
    /// `prefix:N`): a shared store then checks the subtree fences above a
    /// key in every claim of it. Stores with a single holder ignore it.
    fn use_subtrees(&self) {}

    /// Whether other holders share the store: then every new request on a
    /// key is claimed (the store answers locally when it can), not only
    /// raises.
    fn is_shared(&self) -> bool {
        false
    }

    /// Makes an admin write and its audit entry durable, in one step.
    /// Stores that do not support admin writes keep this default, which
    /// refuses them.
    fn record(&self, change: FenceChange) -> PersistFuture {
        drop(change);
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store does not support admin writes",
        ))))
    }

    /// Up to `limit` stored fences whose key starts with `prefix`, as the
    /// store holds them now, in the store's key order: for the admin
    /// plane's listing of a shared store's fences that are out of memory.
    /// Stores with a single holder keep this default: their table lists.
    fn list_stored(&self, prefix: &str, limit: usize) -> ListFuture {
        let _ = (prefix, limit);
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store is not shared: read the table",
        ))))
    }

    /// The highest of each of `keys` as the store holds it now, read
    /// linearizably (no holder has committed a higher one that this read
    /// misses): for chained writes, whose observed versions may only be
    /// used once such a read, made after the observation, found the
    /// fence at most the write's token. Stores with a single holder keep
    /// this default: their table is that read.
    fn read_highests(&self, keys: &[&str]) -> HighestsFuture {
        let _ = keys;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store is not shared: read the table",
        ))))
    }

    /// Records what shapes the keys of fence namespace `name` (`""`: the
    /// default) if nothing is recorded for it, else compares: a different
    /// `shaping` is [`StoreError::Mismatch`], so that no start or reload
    /// (of any holder of a shared store) makes the namespace's fences mean
    /// something else. Stores that outlive no process keep this default,
    /// which records nothing.
    fn check_namespace(&self, name: &str, shaping: &str) -> PersistFuture {
        let _ = (name, shaping);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Records which requests the routes of fence namespace `name` take
    /// (JSON, a list of matches), replacing what was recorded: a later
    /// start can then tell a route renamed without `fence_namespace` (its
    /// requests moving to another namespace) from a new one. Stores that
    /// outlive no process keep this default, which records nothing.
    fn record_matches(&self, name: &str, matches: &str) -> PersistFuture {
        let _ = (name, matches);
        Box::pin(std::future::ready(Ok(())))
    }

    /// What [`record_matches`](FenceStore::record_matches) recorded, by
    /// namespace.
    fn namespace_matches(&self) -> MatchesFuture {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Records that the S3 multipart upload `upload` writes `object`,
    /// replacing what was recorded for it: S3 upload ids bound to their
    /// object without credential custody (docs/CUSTODY.md, "S3 upload ids
    /// bound to their object"). `upload` is the gateway's name for it (its
    /// fence namespace, bucket and the store's id), `object` the key the
    /// store writes. Durable as a claim is (for every holder of a shared
    /// store, also after a crash of a durable one) once the future
    /// resolves `Ok`. Stores that keep no bindings keep this default,
    /// which refuses.
    fn bind_upload(&self, upload: &str, object: &str) -> PersistFuture {
        let _ = (upload, object);
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store keeps no upload bindings",
        ))))
    }

    /// The object [`bind_upload`](FenceStore::bind_upload) recorded for
    /// `upload` (by any holder of a shared store), as committed now;
    /// `None` if none is.
    fn upload_object(&self, upload: &str) -> UploadFuture {
        let _ = upload;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store keeps no upload bindings",
        ))))
    }

    /// Forgets what [`bind_upload`](FenceStore::bind_upload) recorded for
    /// `upload` (its upload was completed or aborted); nothing recorded
    /// is not an error.
    fn unbind_upload(&self, upload: &str) -> PersistFuture {
        let _ = upload;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store keeps no upload bindings",
        ))))
    }

    /// Up to `limit` audit entries, newest first.
    fn audit(&self, limit: usize) -> AuditFuture {
        let _ = limit;
        Box::pin(std::future::ready(Err(StoreError::Unsupported(
            "this fence store keeps no audit log",
        ))))
    }

    /// Whether fences survive a restart. Used for the start-up warning and,
    /// with [`is_shared`](FenceStore::is_shared), for the table to skip
    /// claims altogether when neither holds.
    fn is_durable(&self) -> bool;

    /// Finishes pending writes and releases the store (file locks, threads).
    /// Claiming after this fails with [`StoreError::Closed`].
    fn close(&self) {}

    /// `Ok` while claims can be made; after a failed one (or, for a shared
    /// store, while it holds no lease), the error, until a later one
    /// succeeds. Read by `/readyz`.
    fn health(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Counters for monitoring and benchmarks.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}

/// How much work a store has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreStats {
    /// Claims committed (one per `claim` that reached the disk or the
    /// cluster and succeeded).
    pub raises: u64,
    /// Commits (fsyncs, etcd transactions) those claims took.
    /// `raises / commits` is the average group-commit size.
    pub commits: u64,
    /// For a shared store, how sharing goes.
    pub shared: Option<SharedStats>,
}

/// How a shared store is doing, for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SharedStats {
    /// Whether this holder holds a live lease now.
    pub lease_held: bool,
    /// Leases lost (deadline passed, or the store said it was gone).
    pub lease_losses: u64,
    /// Claims answered from this holder's own record, without a round trip.
    pub claims_local: u64,
    /// Calls to the store (claims, renewals, deletions, reads).
    pub round_trips: u64,
    /// Of which failed.
    pub round_trip_failures: u64,
    /// Time spent in them.
    pub round_trip_seconds: f64,
    /// Claims that had to wait for a lower claim of another holder.
    pub waits: u64,
    /// Records deleted after their last request.
    pub records_deleted: u64,
    /// Linearizable reads of highests (a chained write's observed version
    /// checked, SPEC "Chained writes" rule (b)).
    pub highest_reads: u64,
    /// The etcd transactions that answered them: many reads share one.
    pub highest_read_transactions: u64,
    /// Revisions between the newest one a claim saw and the one the local
    /// view has caught up to.
    pub view_lag: u64,
}

/// At most this many keys in one claim of a shared store (each puts a
/// highest and a record, and etcd refuses more than 128 operations at one
/// level of a transaction): a write admitted on more is refused.
pub const MAX_SHARED_KEYS: usize = 60;

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
    /// This holder's settings differ from those every holder of a shared
    /// store must agree on (the fence key scope, the token header).
    #[error("{0}")]
    Mismatch(Arc<str>),
    /// An admin write found the fence in use by another holder (a request
    /// in flight on it, or a raise since the admin looked): retry.
    #[error("{0}")]
    Busy(Arc<str>),
    /// A raise could not be made durable (disk full, I/O error).
    #[error("cannot make the fence durable: {0}")]
    Write(Arc<str>),
    /// The store has been shut down.
    #[error("the fence store is closed")]
    Closed,
    /// A shared claim of several keys found `key`'s highest above the
    /// token (`key` may be one under a subtree claimed): nothing was
    /// claimed.
    #[error("{key}: a higher token ({highest}) was claimed")]
    Above {
        /// The key with the higher highest.
        key: Arc<str>,
        /// Its highest.
        highest: u64,
    },
    /// A shared store is unreachable, or this holder holds no lease on it
    /// (lost, expired, or not granted yet): nothing that needs the store
    /// may go on.
    #[error("shared fences unavailable: {0}")]
    Unavailable(Arc<str>),
    /// A table bounded in memory over a store that cannot read on demand
    /// (`--state memory` with `--fence-cache`) is full: a new key is
    /// refused rather than an old fence forgotten.
    #[error("{0}")]
    Full(Arc<str>),
    /// The store cannot do what was asked (an admin write on a store
    /// without support for it).
    #[error("{0}")]
    Unsupported(&'static str),
}
