//! Fences in an embedded redb file (`--state disk`): the store
//! ([`RedbStore`]), the file's tables (`schema.rs`) and the writer thread
//! that alone writes it (`writer.rs`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};
use tokio::sync::oneshot;

use super::{
    AuditFuture, Claim, ClaimFuture, FenceChange, FenceStore, MatchesFuture, PersistFuture,
    StoreError, StoreStats, UploadFuture,
};

mod schema;
mod writer;

use self::schema::{create, index_subtrees, AUDIT, FENCES, SUBTREES, UPLOADS};
use self::writer::{publish, write_loop, Counters, Op, Readable};

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

    /// Queues the op `made` makes with the sender of its answer, and the
    /// answer: what every call that goes through the writer thread does.
    fn ask<T: Send + 'static>(
        &self,
        made: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Op,
    ) -> Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'static>> {
        let (done, answer) = oneshot::channel();
        let submitted = self.submit(made(done));
        Box::pin(async move {
            submitted?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl FenceStore for RedbStore {
    fn record_matches(&self, name: &str, matches: &str) -> PersistFuture {
        self.ask(|done| Op::RecordMatches {
            name: name.into(),
            matches: matches.into(),
            done,
        })
    }

    fn namespace_matches(&self) -> MatchesFuture {
        self.ask(|done| Op::ReadMatches { done })
    }

    fn check_namespace(&self, name: &str, shaping: &str) -> PersistFuture {
        self.ask(|done| Op::Namespace {
            name: name.into(),
            shaping: shaping.into(),
            done,
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
        let raised = self.ask(|done| Op::Raise {
            key: key.into(),
            token,
            done,
        });
        Box::pin(async move {
            raised.await?;
            Ok(Claim::granted(token))
        })
    }

    fn claim_all(&self, keys: &[&str], token: u64) -> ClaimFuture {
        let raised = self.ask(|done| Op::RaiseAll {
            keys: keys.iter().map(|key| (*key).into()).collect(),
            token,
            done,
        });
        Box::pin(async move {
            raised.await?;
            Ok(Claim::granted(token))
        })
    }

    fn bind_upload(&self, upload: &str, object: &str) -> PersistFuture {
        self.ask(|done| Op::Upload {
            upload: upload.into(),
            object: Some(object.into()),
            done,
        })
    }

    fn upload_object(&self, upload: &str) -> UploadFuture {
        let read = || -> Result<Option<String>, StoreError> {
            let read = |e: &dyn std::fmt::Display| {
                StoreError::Write(format!("cannot read the fence store: {e}").into())
            };
            let txn = self.begin_read()?;
            let table = match txn.open_table(UPLOADS) {
                Ok(table) => table,
                // No upload was ever bound in this file.
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(read(&e)),
            };
            let object = table.get(upload).map_err(|e| read(&e))?;
            Ok(object.map(|object| object.value().to_owned()))
        };
        Box::pin(std::future::ready(read()))
    }

    fn unbind_upload(&self, upload: &str) -> PersistFuture {
        self.ask(|done| Op::Upload {
            upload: upload.into(),
            object: None,
            done,
        })
    }

    fn record(&self, change: FenceChange) -> PersistFuture {
        self.ask(|done| Op::Change { change, done })
    }

    fn audit(&self, limit: usize) -> AuditFuture {
        self.ask(|done| Op::ReadAudit { limit, done })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn upload_bindings_are_durable_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        // A file that never had one.
        assert_eq!(store.upload_object("b/u1").await.unwrap(), None);
        store.bind_upload("b/u1", "k").await.unwrap();
        store.bind_upload("b/u2", "dir/j/").await.unwrap();
        // With a raise in the same life, which the bindings do not disturb.
        store.claim("/b/k", 7).await.unwrap();
        assert_eq!(
            store.upload_object("b/u1").await.unwrap().as_deref(),
            Some("k")
        );
        store.close();
        drop(store);
        let store = RedbStore::open(dir.path()).unwrap();
        assert_eq!(store.read_stored("/b/k").unwrap(), Some(7));
        assert_eq!(
            store.upload_object("b/u1").await.unwrap().as_deref(),
            Some("k")
        );
        assert_eq!(
            store.upload_object("b/u2").await.unwrap().as_deref(),
            Some("dir/j/")
        );
        store.unbind_upload("b/u1").await.unwrap();
        store.unbind_upload("b/never").await.unwrap();
        store.close();
        drop(store);
        let store = RedbStore::open(dir.path()).unwrap();
        assert_eq!(store.upload_object("b/u1").await.unwrap(), None);
        assert_eq!(
            store.upload_object("b/u2").await.unwrap().as_deref(),
            Some("dir/j/")
        );
    }
}
