use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use super::{
    AuditFuture, Claim, ClaimFuture, FenceChange, FenceStore, PersistFuture, StoreError,
    UploadFuture,
};
use crate::admin::audit::AuditEntry;

/// The newest audit entries a memory store keeps; older ones are dropped
/// (they are also on stderr, logged at warn level when made).
const AUDIT_CAPACITY: usize = 10_000;

/// A store that keeps nothing: fences live only as long as the process, and
/// so do the audit log of admin writes (its newest 10,000 entries) and the
/// S3 upload bindings ([`FenceStore::bind_upload`]).
///
/// Fine for tests and for a gateway in front of a backend that checks tokens
/// itself; anywhere else a restart re-opens the door to stale writes.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    audit: Arc<Mutex<VecDeque<AuditEntry>>>,
    /// Upload -> the object it writes.
    uploads: Arc<Mutex<HashMap<Box<str>, Box<str>>>>,
}

impl FenceStore for MemoryStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }

    fn claim(&self, _key: &str, token: u64) -> ClaimFuture {
        Box::pin(std::future::ready(Ok(Claim::granted(token))))
    }

    fn claim_all(&self, _keys: &[&str], token: u64) -> ClaimFuture {
        Box::pin(std::future::ready(Ok(Claim::granted(token))))
    }

    fn record(&self, change: FenceChange) -> PersistFuture {
        let mut audit = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        if audit.len() == AUDIT_CAPACITY {
            audit.pop_front();
        }
        audit.push_back(change.entry);
        Box::pin(std::future::ready(Ok(())))
    }

    fn audit(&self, limit: usize) -> AuditFuture {
        let audit = self.audit.lock().unwrap_or_else(PoisonError::into_inner);
        let newest_first = audit.iter().rev().take(limit).cloned().collect();
        Box::pin(std::future::ready(Ok(newest_first)))
    }

    fn bind_upload(&self, upload: &str, object: &str) -> PersistFuture {
        let mut uploads = self.uploads.lock().unwrap_or_else(PoisonError::into_inner);
        uploads.insert(upload.into(), object.into());
        Box::pin(std::future::ready(Ok(())))
    }

    fn upload_object(&self, upload: &str) -> UploadFuture {
        let uploads = self.uploads.lock().unwrap_or_else(PoisonError::into_inner);
        let object = uploads.get(upload).map(|object| object.to_string());
        Box::pin(std::future::ready(Ok(object)))
    }

    fn unbind_upload(&self, upload: &str) -> PersistFuture {
        let mut uploads = self.uploads.lock().unwrap_or_else(PoisonError::into_inner);
        uploads.remove(upload);
        Box::pin(std::future::ready(Ok(())))
    }

    fn is_durable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn uploads_are_bound_read_and_forgotten() {
        let store = MemoryStore::default();
        assert_eq!(store.upload_object("b/u1").await.unwrap(), None);
        store.bind_upload("b/u1", "k").await.unwrap();
        store.bind_upload("b/u2", "j").await.unwrap();
        assert_eq!(
            store.upload_object("b/u1").await.unwrap().as_deref(),
            Some("k")
        );
        // A clone is the same store.
        let twin = store.clone();
        assert_eq!(
            twin.upload_object("b/u2").await.unwrap().as_deref(),
            Some("j")
        );
        store.unbind_upload("b/u1").await.unwrap();
        store.unbind_upload("b/absent").await.unwrap();
        assert_eq!(twin.upload_object("b/u1").await.unwrap(), None);
        assert_eq!(
            twin.upload_object("b/u2").await.unwrap().as_deref(),
            Some("j")
        );
    }
}
