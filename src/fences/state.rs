//! One key's fence as the table holds it: its state in a few integers.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// One key's fence.
pub(super) struct Fence {
    /// A std mutex, not tokio's: it guards a few integers for a few
    /// instructions and is never held across an `.await`.
    pub(super) state: Mutex<FenceState>,
    /// Woken when `highest` rises (waiters may be overtaken) and when the last
    /// request in flight finishes (waiters may go).
    pub(super) changed: Notify,
}

/// Kept small on purpose: a table holds one per key, a million keys is a
/// normal size (docs/BENCHMARKS.md: bytes per fence). Two `Option<u64>`
/// would take 16 bytes each; the two "is set" bits share a byte instead.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FenceState {
    /// See [`FenceState::highest`].
    pub(super) highest: u64,
    /// See [`FenceState::durable`].
    pub(super) durable: u64,
    /// The token shared by every request in flight (meaningful when
    /// `in_flight > 0`).
    pub(super) in_flight_token: u64,
    pub(super) in_flight: u32,
    /// [`HAS_HIGHEST`], [`HAS_DURABLE`], [`FROZEN`], [`RETIRED`], [`USED`].
    pub(super) set: u8,
}

pub(super) const HAS_HIGHEST: u8 = 1;
pub(super) const HAS_DURABLE: u8 = 2;
/// An admin write is making a lowering or a deletion durable: admissions
/// wait. Set only while no request holds the fence (see `admin.rs`).
pub(super) const FROZEN: u8 = 4;
/// Deleted by an admin write and already out of the map: whoever still
/// holds it (a request that waited on it while frozen) must look the key up
/// again.
pub(super) const RETIRED: u8 = 8;
/// Used since the evictor last looked (`cache.rs`): spared once.
pub(super) const USED: u8 = 16;

impl FenceState {
    pub(super) fn new(highest: Option<u64>) -> Self {
        let mut state = FenceState {
            set: USED,
            ..FenceState::default()
        };
        state.set_highest(highest);
        state.set_durable(highest);
        state
    }

    /// The highest token admitted on the key; none yet: anything is admitted.
    pub(super) fn highest(&self) -> Option<u64> {
        (self.set & HAS_HIGHEST != 0).then_some(self.highest)
    }

    pub(super) fn set_highest(&mut self, highest: Option<u64>) {
        self.highest = highest.unwrap_or(0);
        self.set = (self.set & !HAS_HIGHEST) | if highest.is_some() { HAS_HIGHEST } else { 0 };
    }

    /// The highest value the store has confirmed durable. A request with
    /// token `t <= durable` need not wait for the store.
    pub(super) fn durable(&self) -> Option<u64> {
        (self.set & HAS_DURABLE != 0).then_some(self.durable)
    }

    pub(super) fn set_durable(&mut self, durable: Option<u64>) {
        self.durable = durable.unwrap_or(0);
        self.set = (self.set & !HAS_DURABLE) | if durable.is_some() { HAS_DURABLE } else { 0 };
    }

    pub(super) fn is(&self, flag: u8) -> bool {
        self.set & flag != 0
    }

    pub(super) fn mark(&mut self, flag: u8, on: bool) {
        self.set = (self.set & !flag) | if on { flag } else { 0 };
    }
}

impl Fence {
    pub(super) fn new(highest: Option<u64>) -> Self {
        Fence {
            state: Mutex::new(FenceState::new(highest)),
            changed: Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, FenceState> {
        // Nothing panics while the lock is held, but if something ever did,
        // the integers inside are still consistent: keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Waits until `changed` (a fence's notification, registered before the
/// caller's last look) fires, or `revoked` (the lease a shared store's
/// claim lives on) resolves: a waiting admission looks again after
/// either. The one wait of `Fences::wait_to_enter` and of a request on
/// several keys (`many.rs`).
pub(super) async fn changed_or_revoked(
    mut changed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    mut revoked: Option<std::pin::Pin<&mut (impl std::future::Future<Output = ()> + ?Sized)>>,
) {
    std::future::poll_fn(|cx| {
        let lease_gone = revoked
            .as_mut()
            .is_some_and(|revoked| revoked.as_mut().poll(cx).is_ready());
        if lease_gone || std::future::Future::poll(changed.as_mut(), cx).is_ready() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}
