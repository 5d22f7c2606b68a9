use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::oneshot;

use super::{
    AuditFuture, Claim, ClaimFuture, FenceChange, FenceStore, MatchesFuture, PersistFuture,
    Setting, StoreError, StoreStats,
};
use crate::admin::audit::AuditEntry;

const FENCES: TableDefinition<'static, &str, u64> = TableDefinition::new("fences");

/// Admin writes, by a sequence number that grows with each, as JSON
/// ([`AuditEntry`]'s serde form): written in the transaction of the change
/// each records.
const AUDIT: TableDefinition<'static, u64, &str> = TableDefinition::new("audit");

/// What shapes each fence namespace's keys (JSON), by name (`""`: the
/// default namespace): [`FenceStore::check_namespace`].
const NAMESPACES: TableDefinition<'static, &str, &str> = TableDefinition::new("namespaces");

/// Which requests each namespace's routes take (JSON), by name:
/// [`FenceStore::record_matches`].
const NAMESPACE_MATCHES: TableDefinition<'static, &str, &str> =
    TableDefinition::new("namespace_matches");

/// Every subtree-shaped key of [`FENCES`] ([`crate::key::subtree_path`]),
/// kept with it in each transaction: a table that reads fences on demand
/// keeps these in memory, and finds them here without reading every fence.
const SUBTREES: TableDefinition<'static, &str, ()> = TableDefinition::new("subtrees");

/// What the file holds besides fences: `subtrees_indexed` once
/// [`SUBTREES`] lists every subtree key (files written before it existed
/// are indexed once, when first opened).
const META: TableDefinition<'static, &str, u64> = TableDefinition::new("meta");

/// redb's own cache of file pages: the fences read on demand come from
/// it, or from the kernel's page cache below it. Small, so that a gateway
/// at rest stays small whatever the file's size (redb's default is 1 GiB).
const PAGE_CACHE_BYTES: usize = 16 << 20;

/// One row, rewritten by the health probe: a write with an fsync, like a raise.
const PROBE: TableDefinition<'static, &str, u64> = TableDefinition::new("probe");

/// How often the writer tries the store again after a failed commit, when
/// no raise comes to try it: so that `/readyz` turns ready again once the
/// disk has room, without traffic (which a load balancer would withhold).
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// An upper bound on one group commit, so that a flood of raises cannot grow
/// one transaction (and the latency of everyone in it) without limit.
const MAX_BATCH: usize = 4096;

/// Fences in an embedded [redb](https://docs.rs/redb) database, one fsync per
/// commit, with group commit.
///
/// # Group commit
///
/// One writer thread owns the database. [`claim`](FenceStore::claim)
/// queues the raise and returns a future that resolves when the writer reports
/// it committed. The writer takes the first raise in the queue plus every raise
/// that queued up behind it (while the previous fsync was running), writes them
/// all in one transaction, commits it with `Durability::Immediate` (redb's
/// default: fsync before `commit` returns) in two phases (see `commit`), then
/// answers them all. Under load,
/// N concurrent admissions therefore cost one fsync, not N.
///
/// A thread rather than a tokio task because redb's API blocks; keeping it off
/// the runtime means a slow disk never stalls request handling.
pub struct RedbStore {
    /// The database as the writer thread has it open, for reads (`load`,
    /// fences read on demand); `None` while the writer reopens it after an
    /// I/O error (redb locks the file per handle, so readers let go of it
    /// at once: each read clones the handle for one read transaction).
    readable: Readable,
    /// `None` once closed. A std mutex: it is held only to clone-send.
    queue: Mutex<Option<mpsc::Sender<Op>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<Counters>,
    path: PathBuf,
}

/// What the writer thread is asked to do, in the order asked.
enum Op {
    /// An admission's raise.
    Raise {
        key: Box<str>,
        token: u64,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// The raises of one request admitted on several keys at once: in one
    /// transaction, so that a crash keeps all or none of them.
    RaiseAll {
        keys: Vec<Box<str>>,
        token: u64,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// An admin write and its audit entry.
    Change {
        change: FenceChange,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A namespace's record, checked or made.
    Namespace {
        name: Box<str>,
        shaping: Box<str>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A namespace's matches, recorded.
    RecordMatches {
        name: Box<str>,
        matches: Box<str>,
        done: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Every namespace's matches, read.
    ReadMatches {
        done: oneshot::Sender<Result<Vec<(String, String)>, StoreError>>,
    },
    /// Answered once the writer has the database open (it reopens it at
    /// the start of each batch after an I/O error): a read that found it
    /// closed tries again then, rather than wait for the next probe.
    Reopen { done: mpsc::SyncSender<()> },
    /// A read of the audit log, answered once the writes queued before it
    /// are committed, so that it sees them.
    ReadAudit {
        limit: usize,
        done: oneshot::Sender<Result<Vec<AuditEntry>, StoreError>>,
    },
}

impl Op {
    /// Done beside the batch's transaction, not in it.
    fn is_aside(&self) -> bool {
        matches!(
            self,
            Op::ReadAudit { .. }
                | Op::Namespace { .. }
                | Op::RecordMatches { .. }
                | Op::ReadMatches { .. }
                | Op::Reopen { .. }
        )
    }
}

/// See [`RedbStore::readable`].
type Readable = Arc<RwLock<Option<Arc<Database>>>>;

/// Publishes the writer's handle (or its absence) to readers.
fn publish(readable: &Readable, db: Option<&Arc<Database>>) {
    *readable.write().unwrap_or_else(PoisonError::into_inner) = db.cloned();
}

#[derive(Default)]
struct Counters {
    raises: AtomicU64,
    commits: AtomicU64,
    /// The error of the last commit, `None` when it succeeded.
    failure: Mutex<Option<Arc<str>>>,
}

impl Counters {
    fn set_failure(&self, failure: Option<Arc<str>>) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// The database file inside the store's directory.
    pub const FILE_NAME: &'static str = "fences.redb";

    /// Opens (or creates) the store in directory `dir`, in the file
    /// [`Self::FILE_NAME`]. A file that is not a readable redb database is an error,
    /// never a silent reset to empty.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        let dir = dir.as_ref();
        let path = dir.join(Self::FILE_NAME);
        let open_error = |detail: String| StoreError::Open {
            path: path.clone(),
            detail: detail.into(),
        };
        std::fs::create_dir_all(dir).map_err(|e| open_error(e.to_string()))?;
        let db = create(&path).map_err(|e| open_error(e.to_string()))?;
        // Create the tables up front so that readers never see "no such
        // table" and so that a database we cannot write to fails now, not
        // on the first request.
        let txn = db.begin_write().map_err(|e| open_error(e.to_string()))?;
        txn.open_table(FENCES)
            .map_err(|e| open_error(e.to_string()))?;
        txn.open_table(AUDIT)
            .map_err(|e| open_error(e.to_string()))?;
        index_subtrees(&txn).map_err(|e| open_error(e.to_string()))?;
        txn.commit().map_err(|e| open_error(e.to_string()))?;

        let db = Arc::new(db);
        let readable: Readable = Arc::new(RwLock::new(Some(Arc::clone(&db))));
        let (queue, raises) = mpsc::channel();
        let stats = Arc::new(Counters::default());
        let writer_stats = Arc::clone(&stats);
        let writer = std::thread::Builder::new()
            .name("fencegate-store".into())
            .spawn({
                let path = path.clone();
                let readable = Arc::clone(&readable);
                move || write_loop(db, &path, raises, writer_stats, &readable)
            })
            .map_err(|e| open_error(e.to_string()))?;
        Ok(RedbStore {
            readable,
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(writer)),
            stats,
            path,
        })
    }

    /// Stops the writer after it has committed everything queued, and closes
    /// the database. Raises persisted after this fail with
    /// [`StoreError::Closed`]. Also done on drop.
    pub fn close(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer {
            // The writer never panics on its own; if it did, the join error
            // only tells us so, and there is nothing left to clean up.
            let _ = writer.join();
        }
        // The file's lock goes with the last handle: reads after this fail
        // (and do not reopen: the writer is gone).
        publish(&self.readable, None);
    }
}

impl RedbStore {
    /// A read transaction on the database as committed now. After an I/O
    /// error closed it, the writer is asked to reopen it first (it blocks
    /// this thread for one batch of the writer at most, and only then).
    fn begin_read(&self) -> Result<redb::ReadTransaction, StoreError> {
        let readable = || {
            self.readable
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };
        let db = match readable() {
            Some(db) => db,
            None => {
                let (done, reopened) = mpsc::sync_channel(1);
                self.submit(Op::Reopen { done })?;
                reopened.recv().map_err(|_| StoreError::Closed)?;
                readable().ok_or_else(|| {
                    StoreError::Write(
                        "the fence store could not be reopened after an I/O error".into(),
                    )
                })?
            }
        };
        db.begin_read()
            .map_err(|e| StoreError::Write(format!("cannot read the fence store: {e}").into()))
    }

    /// Queues `op` for the writer thread.
    fn submit(&self, op: Op) -> Result<(), StoreError> {
        match &*self.queue.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(queue) => queue.send(op).map_err(|_| StoreError::Closed),
            None => Err(StoreError::Closed),
        }
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl FenceStore for RedbStore {
    fn record_matches(&self, name: &str, matches: &str) -> PersistFuture {
        let (done, answer) = oneshot::channel();
        let submitted = self.submit(Op::RecordMatches {
            name: name.into(),
            matches: matches.into(),
            done,
        });
        Box::pin(async move {
            submitted?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    fn namespace_matches(&self) -> MatchesFuture {
        let (done, answer) = oneshot::channel();
        let submitted = self.submit(Op::ReadMatches { done });
        Box::pin(async move {
            submitted?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    fn check_namespace(&self, name: &str, shaping: &str) -> PersistFuture {
        let (done, answer) = oneshot::channel();
        let submitted = self.submit(Op::Namespace {
            name: name.into(),
            shaping: shaping.into(),
            done,
        });
        Box::pin(async move {
            submitted?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    fn load(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        let open_error = |e: &dyn std::fmt::Display| StoreError::Open {
            path: self.path.clone(),
            detail: e.to_string().into(),
        };
        let txn = self.begin_read()?;
        let table = txn.open_table(FENCES).map_err(|e| open_error(&e))?;
        for row in table.iter().map_err(|e| open_error(&e))? {
            let (key, token) = row.map_err(|e| open_error(&e))?;
            each(key.value(), token.value());
        }
        Ok(())
    }

    fn reads_on_demand(&self) -> bool {
        true
    }

    fn load_subtrees(&self, each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        let read = |e: &dyn std::fmt::Display| StoreError::Open {
            path: self.path.clone(),
            detail: e.to_string().into(),
        };
        let txn = self.begin_read()?;
        let subtrees = txn.open_table(SUBTREES).map_err(|e| read(&e))?;
        let fences = txn.open_table(FENCES).map_err(|e| read(&e))?;
        for row in subtrees.iter().map_err(|e| read(&e))? {
            let (key, _) = row.map_err(|e| read(&e))?;
            if let Some(highest) = fences.get(key.value()).map_err(|e| read(&e))? {
                each(key.value(), highest.value());
            }
        }
        Ok(())
    }

    fn read_stored(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let read = |e: &dyn std::fmt::Display| {
            StoreError::Write(format!("cannot read the fence store: {e}").into())
        };
        let txn = self.begin_read()?;
        let table = txn.open_table(FENCES).map_err(|e| read(&e))?;
        let highest = table.get(key).map_err(|e| read(&e))?;
        Ok(highest.map(|highest| highest.value()))
    }

    fn read_stored_under(
        &self,
        prefix: &str,
        each: &mut dyn FnMut(&str, u64) -> bool,
    ) -> Result<(), StoreError> {
        let read = |e: &dyn std::fmt::Display| {
            StoreError::Write(format!("cannot read the fence store: {e}").into())
        };
        let txn = self.begin_read()?;
        let table = txn.open_table(FENCES).map_err(|e| read(&e))?;
        for row in table.range(prefix..).map_err(|e| read(&e))? {
            let (key, highest) = row.map_err(|e| read(&e))?;
            if !key.value().starts_with(prefix) || !each(key.value(), highest.value()) {
                break;
            }
        }
        Ok(())
    }

    fn stored_count(&self) -> Option<u64> {
        let txn = self.begin_read().ok()?;
        let table = txn.open_table(FENCES).ok()?;
        table.len().ok()
    }

    fn claim(&self, key: &str, token: u64) -> ClaimFuture {
        let (done, answer) = oneshot::channel();
        let queued = self.submit(Op::Raise {
            key: key.into(),
            token,
            done,
        });
        Box::pin(async move {
            queued?;
            answer.await.map_err(|_| StoreError::Closed)??;
            Ok(Claim::granted(token))
        })
    }

    fn claim_all(&self, keys: &[&str], token: u64) -> ClaimFuture {
        let (done, answer) = oneshot::channel();
        let queued = self.submit(Op::RaiseAll {
            keys: keys.iter().map(|key| (*key).into()).collect(),
            token,
            done,
        });
        Box::pin(async move {
            queued?;
            answer.await.map_err(|_| StoreError::Closed)??;
            Ok(Claim::granted(token))
        })
    }

    fn record(&self, change: FenceChange) -> PersistFuture {
        let (done, answer) = oneshot::channel();
        let queued = self.submit(Op::Change { change, done });
        Box::pin(async move {
            queued?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    fn audit(&self, limit: usize) -> AuditFuture {
        let (done, answer) = oneshot::channel();
        let queued = self.submit(Op::ReadAudit { limit, done });
        Box::pin(async move {
            queued?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn close(&self) {
        RedbStore::close(self);
    }

    fn health(&self) -> Result<(), StoreError> {
        match &*self
            .stats
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            None => Ok(()),
            Some(error) => Err(StoreError::Write(Arc::clone(error))),
        }
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            raises: self.stats.raises.load(Ordering::Relaxed),
            commits: self.stats.commits.load(Ordering::Relaxed),
            shared: None,
        }
    }
}

/// Opens (or creates) the database with the store's settings.
fn create(path: &Path) -> Result<Database, redb::DatabaseError> {
    Database::builder()
        .set_cache_size(PAGE_CACHE_BYTES)
        .create(path)
}

/// Makes sure [`SUBTREES`] lists every subtree key of [`FENCES`]: once per
/// file, reading every fence (a file written before the table existed).
fn index_subtrees(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    let mut meta = txn.open_table(META)?;
    let mut subtrees = txn.open_table(SUBTREES)?;
    if meta.get("subtrees_indexed")?.is_some() {
        return Ok(());
    }
    let fences = txn.open_table(FENCES)?;
    for row in fences.iter()? {
        let (key, _) = row?;
        if crate::key::subtree_path(key.value()).is_some() {
            subtrees.insert(key.value(), ())?;
        }
    }
    meta.insert("subtrees_indexed", 1)?;
    Ok(())
}

fn write_loop(
    db: Arc<Database>,
    path: &Path,
    ops: mpsc::Receiver<Op>,
    stats: Arc<Counters>,
    readable: &Readable,
) {
    // `None` after a failed commit: redb refuses every transaction after an
    // I/O error ("close and re-open"), so the next batch reopens it. A disk
    // that was full and got space back then recovers without a restart;
    // until then every raise fails and the gateway answers 503 (fail closed).
    let mut db = Some(db);
    let mut batch = Vec::new();
    // Ends when every sender is gone (close or drop), after draining the queue.
    loop {
        let first = if db.is_some() {
            match ops.recv() {
                Ok(op) => op,
                Err(_) => break,
            }
        } else {
            match ops.recv_timeout(PROBE_PERIOD) {
                Ok(op) => op,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    db = probe(path, &stats);
                    publish(readable, db.as_ref());
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if db.is_none() {
            // With a probe write: a batch of reads alone (a fence read on
            // demand) must not make the store look healthy untested.
            db = probe(path, &stats);
            publish(readable, db.as_ref());
        }
        let writes = batch.iter().filter(|op| !op.is_aside()).count();
        let result = match &db {
            Some(_) if writes == 0 => Ok(()),
            Some(handle) => commit(handle, &batch),
            None => Err("the fence store could not be reopened after an I/O error".to_owned()),
        };
        if writes > 0 {
            match &result {
                Ok(()) => {
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    let raises: usize = batch
                        .iter()
                        .map(|op| match op {
                            Op::Raise { .. } => 1,
                            Op::RaiseAll { keys, .. } => keys.len(),
                            _ => 0,
                        })
                        .sum();
                    stats.raises.fetch_add(raises as u64, Ordering::Relaxed);
                    stats.set_failure(None);
                }
                Err(error) => {
                    tracing::error!(error = error.as_str(), writes, "fence store commit failed");
                    stats.set_failure(Some(error.as_str().into()));
                    // Readers first: the file stays locked while any
                    // handle is left.
                    publish(readable, None);
                    db = None;
                }
            }
        }
        let result = result.map_err(|e| StoreError::Write(e.into()));
        for op in batch.drain(..) {
            // A requester may have gone away (client hung up); its raise is
            // durable all the same, which is the safe direction.
            match op {
                Op::Raise { done, .. } | Op::RaiseAll { done, .. } | Op::Change { done, .. } => {
                    let _ = done.send(result.clone());
                }
                Op::Namespace {
                    name,
                    shaping,
                    done,
                } => {
                    let checked = match &db {
                        Some(handle) => check_namespace(handle, path, &name, &shaping),
                        None => Err(StoreError::Write(
                            "the fence store could not be reopened after an I/O error".into(),
                        )),
                    };
                    let _ = done.send(checked);
                }
                Op::RecordMatches {
                    name,
                    matches,
                    done,
                } => {
                    let recorded = match &db {
                        Some(handle) => record_matches(handle, &name, &matches),
                        None => Err(StoreError::Write(
                            "the fence store could not be reopened after an I/O error".into(),
                        )),
                    };
                    let _ = done.send(recorded);
                }
                Op::ReadMatches { done } => {
                    let read = match &db {
                        Some(handle) => read_matches(handle),
                        None => Err(StoreError::Write(
                            "the fence store could not be reopened after an I/O error".into(),
                        )),
                    };
                    let _ = done.send(read);
                }
                Op::Reopen { done } => {
                    let _ = done.send(());
                }
                Op::ReadAudit { limit, done } => {
                    let entries = match &db {
                        Some(handle) => {
                            read_audit(handle, limit).map_err(|e| StoreError::Write(e.into()))
                        }
                        None => Err(StoreError::Write(
                            "the fence store could not be reopened after an I/O error".into(),
                        )),
                    };
                    let _ = done.send(entries);
                }
            }
        }
    }
}

/// Records `shaping` for namespace `name`, or compares it with the one
/// recorded.
fn check_namespace(
    db: &Database,
    path: &Path,
    name: &str,
    shaping: &str,
) -> Result<(), StoreError> {
    let write = |e: &dyn std::fmt::Display| StoreError::Write(e.to_string().into());
    let txn = db.begin_write().map_err(|e| write(&e))?;
    let recorded = {
        let mut table = txn.open_table(NAMESPACES).map_err(|e| write(&e))?;
        let recorded = table
            .get(name)
            .map_err(|e| write(&e))?
            .map(|value| value.value().to_owned());
        if recorded.is_none() {
            table.insert(name, shaping).map_err(|e| write(&e))?;
        }
        recorded
    };
    match recorded {
        None => txn.commit().map_err(|e| write(&e)),
        Some(recorded) if recorded == shaping => Ok(()),
        Some(recorded) => Err(StoreError::Mismatch(
            format!(
                "fence namespace {name:?} in {} keys its fences with {recorded}; this configuration would key them with {shaping}: its fences would mean something else (keep the old settings, or name another fence_namespace)",
                path.display()
            )
            .into(),
        )),
    }
}

fn record_matches(db: &Database, name: &str, matches: &str) -> Result<(), StoreError> {
    let write = |e: &dyn std::fmt::Display| StoreError::Write(e.to_string().into());
    let txn = db.begin_write().map_err(|e| write(&e))?;
    {
        let mut table = txn.open_table(NAMESPACE_MATCHES).map_err(|e| write(&e))?;
        table.insert(name, matches).map_err(|e| write(&e))?;
    }
    txn.commit().map_err(|e| write(&e))
}

fn read_matches(db: &Database) -> Result<Vec<(String, String)>, StoreError> {
    let read = |e: &dyn std::fmt::Display| StoreError::Write(e.to_string().into());
    let txn = db.begin_read().map_err(|e| read(&e))?;
    let table = match txn.open_table(NAMESPACE_MATCHES) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(read(&e)),
    };
    let mut all = Vec::new();
    for row in table.iter().map_err(|e| read(&e))? {
        let (name, matches) = row.map_err(|e| read(&e))?;
        all.push((name.value().to_owned(), matches.value().to_owned()));
    }
    Ok(all)
}

/// After a failed commit, with no raise coming: reopens the database and
/// commits a probe write. Healthy again if it worked.
fn probe(path: &Path, stats: &Counters) -> Option<Arc<Database>> {
    let db = reopen(path)?;
    let written = (|| -> Result<(), String> {
        let txn = db.begin_write().map_err(|e| e.to_string())?;
        {
            let mut table = txn.open_table(PROBE).map_err(|e| e.to_string())?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            table.insert("last", now).map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| e.to_string())
    })();
    match written {
        Ok(()) => {
            tracing::info!(path = %path.display(), "fence store writable again");
            stats.set_failure(None);
            Some(db)
        }
        Err(error) => {
            stats.set_failure(Some(error.into()));
            None
        }
    }
}

/// Reopens the database after a failed commit. The old handle must be gone
/// (redb locks the file per handle): readers were told to let go of it
/// ([`publish`]) and hold it for one read at most.
fn reopen(path: &Path) -> Option<Arc<Database>> {
    match create(path) {
        Ok(db) => Some(Arc::new(db)),
        Err(error) => {
            tracing::error!(error = %error, path = %path.display(), "cannot reopen the fence store");
            None
        }
    }
}

/// Writes every raise and change in one transaction, in the order they
/// were queued. A raise never lowers a stored value: raises for one key can
/// reach the queue out of order.
fn commit(db: &Database, batch: &[Op]) -> Result<(), String> {
    let mut txn = db.begin_write().map_err(|e| e.to_string())?;
    // Two-phase: the commit slot is written and flushed before the header
    // byte that makes it the newest flips, so that a power loss can never
    // tear the newest slot. redb then refuses to open a file whose newest
    // slot does not verify ("Primary is corrupted despite 2-phase commit")
    // instead of falling back to the commit before it, which would forget
    // tokens already acknowledged as durable. One more fsync per group
    // commit: about 9 % of W2's throughput here (docs/RELIABILITY.md).
    txn.set_two_phase_commit(true);
    {
        let mut fences = txn.open_table(FENCES).map_err(|e| e.to_string())?;
        let mut subtrees = txn.open_table(SUBTREES).map_err(|e| e.to_string())?;
        let mut audit = txn.open_table(AUDIT).map_err(|e| e.to_string())?;
        for op in batch {
            let (keys, set) = match op {
                Op::Raise { key, token, .. } => {
                    (std::slice::from_ref(key), Setting::AtLeast(*token))
                }
                Op::RaiseAll { keys, token, .. } => (keys.as_slice(), Setting::AtLeast(*token)),
                Op::Change { change, .. } => (std::slice::from_ref(&change.key), change.set),
                Op::ReadAudit { .. }
                | Op::Namespace { .. }
                | Op::RecordMatches { .. }
                | Op::ReadMatches { .. }
                | Op::Reopen { .. } => continue,
            };
            for key in keys {
                let stored = fences
                    .get(&**key)
                    .map_err(|e| e.to_string())?
                    .map(|v| v.value());
                let subtree = crate::key::subtree_path(key).is_some();
                match set {
                    Setting::AtLeast(token) if stored.is_some_and(|stored| stored >= token) => {}
                    Setting::AtLeast(token) | Setting::Exactly(token) => {
                        fences.insert(&**key, token).map_err(|e| e.to_string())?;
                        if subtree && stored.is_none() {
                            subtrees.insert(&**key, ()).map_err(|e| e.to_string())?;
                        }
                    }
                    Setting::Forget => {
                        fences.remove(&**key).map_err(|e| e.to_string())?;
                        if subtree {
                            subtrees.remove(&**key).map_err(|e| e.to_string())?;
                        }
                    }
                }
            }
            if let Op::Change { change, .. } = op {
                let next = audit
                    .last()
                    .map_err(|e| e.to_string())?
                    .map_or(0, |(seq, _)| seq.value() + 1);
                let entry = serde_json::to_string(&change.entry).map_err(|e| e.to_string())?;
                audit
                    .insert(next, entry.as_str())
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    txn.commit().map_err(|e| e.to_string())
}

/// The newest `limit` audit entries, newest first.
fn read_audit(db: &Database, limit: usize) -> Result<Vec<AuditEntry>, String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let table = txn.open_table(AUDIT).map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    for row in table.iter().map_err(|e| e.to_string())?.rev().take(limit) {
        let (_, json) = row.map_err(|e| e.to_string())?;
        let entry = serde_json::from_str(json.value())
            .map_err(|e| format!("unreadable audit entry: {e}"))?;
        entries.push(entry);
    }
    Ok(entries)
}
