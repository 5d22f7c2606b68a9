//! The table as a shared store sees it: where changes made by other holders
//! arrive.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use super::table::Table;
use crate::key::{covering_subtrees, subtree_path};

/// A handle on the fence table for the store it is built over
/// ([`FenceStore::attach`](crate::store::FenceStore::attach), as a
/// [`FenceEvents`](crate::store::FenceEvents)). A shared store
/// reports through it what other holders changed, so that stale requests
/// are refused from memory and waiters wake up. Holds the table weakly: a
/// store's background tasks do not keep a dropped table alive.
#[derive(Clone)]
pub struct FenceView {
    table: Weak<Table>,
}

impl std::fmt::Debug for FenceView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceView")
            .field("live", &(self.table.strong_count() > 0))
            .finish()
    }
}

impl FenceView {
    pub(super) fn new(table: Weak<Table>) -> Self {
        FenceView { table }
    }

    /// Another holder made `highest` the key's highest (committed in the
    /// store): raise this table's view to it, which refuses lower tokens
    /// from now on and overtakes waiters below it. Never lowers.
    pub fn raised(&self, key: &str, highest: u64) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        if subtree_path(key).is_some() && table.subtree_scope() {
            // Another holder fenced a whole subtree: from now on every
            // admission here looks at the subtrees above its key.
            table.enable_subtrees();
        }
        let Some(fence) = in_memory(&table, key) else {
            return;
        };
        let mut state = fence.lock();
        let durable = state.durable().max(Some(highest));
        state.set_durable(durable);
        if state.highest() < Some(highest) {
            state.set_highest(Some(highest));
            drop(state);
            fence.changed.notify_waiters();
        }
    }

    /// Another holder set the key's highest to exactly `highest`, or
    /// forgot the fence (`None`): an admin write, made while no request was
    /// in flight on the key anywhere.
    pub fn set(&self, key: &str, highest: Option<u64>) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        // A version a chained write learned before may no longer stand.
        table.lowerings.fetch_add(1, Ordering::SeqCst);
        let Some(fence) = in_memory(&table, key) else {
            return;
        };
        {
            let mut state = fence.lock();
            state.set_highest(highest);
            state.set_durable(highest);
        }
        fence.changed.notify_waiters();
        if highest.is_none() {
            table.forget_if_unused(key, &fence);
        }
    }

    /// Something another holder did on `key` may let its waiters go (a
    /// lower claim ended): wake them to look again, and, where subtree
    /// fences are in use, those of the subtrees above it (a collection
    /// write waits for the keys under it) and, for a subtree key, those of
    /// every key under it (each waits for the subtree writes above it).
    pub fn changed(&self, key: &str) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        table.wake(key);
        if !table.has_subtrees.load(Ordering::SeqCst) {
            return;
        }
        for subtree in covering_subtrees(key) {
            table.wake(&subtree);
        }
        if subtree_path(key).is_some() {
            table.wake_under(key);
        }
    }

    /// The table's highest for `key`.
    pub fn highest(&self, key: &str) -> Option<u64> {
        self.table.upgrade()?.highest(key)
    }

    /// Whether the table is still there.
    pub fn is_live(&self) -> bool {
        self.table.strong_count() > 0
    }
}

/// The fence of `key` a change another holder made applies to: in a
/// bounded table, only one in memory, or a subtree fence (kept in memory
/// for good, cache.rs rule 3); a key not in memory reads the store's
/// highest with its next claim. In an unbounded table, every fence (made
/// if it is new).
fn in_memory(table: &Table, key: &str) -> Option<std::sync::Arc<super::state::Fence>> {
    if table.evicts() && subtree_path(key).is_none() {
        return table
            .fences
            .get(key)
            .map(|fence| std::sync::Arc::clone(fence.value()));
    }
    table.fence(key).ok()
}

impl crate::store::FenceEvents for FenceView {
    fn raised(&self, key: &str, highest: u64) {
        FenceView::raised(self, key, highest);
    }

    fn set(&self, key: &str, highest: Option<u64>) {
        FenceView::set(self, key, highest);
    }

    fn changed(&self, key: &str) {
        FenceView::changed(self, key);
    }

    fn highest(&self, key: &str) -> Option<u64> {
        FenceView::highest(self, key)
    }

    fn is_live(&self) -> bool {
        FenceView::is_live(self)
    }
}
