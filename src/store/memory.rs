use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use super::{AuditFuture, Claim, ClaimFuture, FenceChange, FenceStore, PersistFuture, StoreError};
use crate::admin::audit::AuditEntry;

/// The newest audit entries a memory store keeps; older ones are dropped
/// (they are also on stderr, logged at warn level when made).
const AUDIT_CAPACITY: usize = 10_000;

/// A store that keeps nothing: fences live only as long as the process, and
/// so does the audit log of admin writes (its newest 10,000 entries).
///
/// Fine for tests and for a gateway in front of a backend that checks tokens
/// itself; anywhere else a restart re-opens the door to stale writes.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    audit: Arc<Mutex<VecDeque<AuditEntry>>>,
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

    fn is_durable(&self) -> bool {
        false
    }
}
