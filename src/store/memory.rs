use super::{FenceStore, PersistFuture, StoreError};

/// A store that keeps nothing: fences live only as long as the process.
///
/// Fine for tests and for a gateway in front of a backend that checks tokens
/// itself; anywhere else a restart re-opens the door to stale writes.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStore;

impl FenceStore for MemoryStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }

    fn persist(&self, _key: &str, _token: u64) -> PersistFuture {
        Box::pin(std::future::ready(Ok(())))
    }

    fn is_durable(&self) -> bool {
        false
    }
}
