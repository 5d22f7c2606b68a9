//! The writer thread: the only one that writes the file, in group
//! commits, and that reopens it after an I/O error.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use redb::{Database, ReadableDatabase, ReadableTable};
use tokio::sync::oneshot;

use super::schema::{
    create, AUDIT, FENCES, NAMESPACES, NAMESPACE_MATCHES, PROBE, SUBTREES, UPLOADS,
};
use crate::admin::audit::AuditEntry;
use crate::store::{FenceChange, Setting, StoreError};

/// How often the writer tries the store again after a failed commit, when
/// no raise comes to try it: so that `/readyz` turns ready again once the
/// disk has room, without traffic (which a load balancer would withhold).
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// An upper bound on one group commit, so that a flood of raises cannot grow
/// one transaction (and the latency of everyone in it) without limit.
const MAX_BATCH: usize = 4096;

/// What the writer thread is asked to do, in the order asked.
pub(super) enum Op {
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
    /// An S3 upload bound to the object it writes (`Some`), or its
    /// binding forgotten (`None`): in the batch's transaction.
    Upload {
        upload: Box<str>,
        object: Option<Box<str>>,
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

/// The writer's handle, for reads (`RedbStore`'s `readable`).
pub(super) type Readable = Arc<RwLock<Option<Arc<Database>>>>;

/// Publishes the writer's handle (or its absence) to readers.
pub(super) fn publish(readable: &Readable, db: Option<&Arc<Database>>) {
    *readable.write().unwrap_or_else(PoisonError::into_inner) = db.cloned();
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) raises: AtomicU64,
    pub(super) commits: AtomicU64,
    /// The error of the last commit, `None` when it succeeded.
    pub(super) failure: Mutex<Option<Arc<str>>>,
}

impl Counters {
    pub(super) fn set_failure(&self, failure: Option<Arc<str>>) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }
}

pub(super) fn write_loop(
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
                Op::Raise { done, .. }
                | Op::RaiseAll { done, .. }
                | Op::Change { done, .. }
                | Op::Upload { done, .. } => {
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
                Op::Upload { .. }
                | Op::ReadAudit { .. }
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
    // Bindings of uploads, in the order asked; their table is opened only
    // by a batch that has one (a raise's commit does not pay for it).
    if batch.iter().any(|op| matches!(op, Op::Upload { .. })) {
        let mut uploads = txn.open_table(UPLOADS).map_err(|e| e.to_string())?;
        for op in batch {
            if let Op::Upload { upload, object, .. } = op {
                match object {
                    Some(object) => uploads.insert(&**upload, &**object).map(drop),
                    None => uploads.remove(&**upload).map(drop),
                }
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
