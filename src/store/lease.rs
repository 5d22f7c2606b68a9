//! The right of a holder of a shared store to let its claimed requests go
//! on: granted until a deadline, renewed, and revoked at the deadline.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// What a request was doing when the lease it was admitted under ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStage {
    /// Waiting for a lower token in flight: it never reached the backend.
    Waiting,
    /// Admitted, about to be sent: it was not sent.
    BeforeSending,
    /// Its body was being sent: the backend received it cut off.
    SendingBody,
    /// Sent, its response awaited: the backend may or may not have applied
    /// it.
    AwaitingResponse,
    /// Its response was being relayed: the client received it cut off.
    RelayingResponse,
}

/// The lease a request was admitted under ended (shared fences): the one
/// error for it, whatever the request was doing ([`LeaseStage`]). Every
/// step that reaches the backend or the client checks the lease
/// ([`Lease::is_live`]) and fails with this.
///
/// ```
/// use fencegate::store::{LeaseEnded, LeaseStage};
/// let ended = LeaseEnded { stage: LeaseStage::SendingBody };
/// assert!(ended.to_string().contains("the backend received it cut off"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this instance's lease on the shared fences ended {}", stage.describe())]
pub struct LeaseEnded {
    /// What the request was doing.
    pub stage: LeaseStage,
}

impl LeaseStage {
    fn describe(self) -> &'static str {
        match self {
            LeaseStage::Waiting => "while the request waited; it was not sent",
            LeaseStage::BeforeSending => "before the request was sent; it was not sent",
            LeaseStage::SendingBody => {
                "while the request body was being sent; the backend received it cut off"
            }
            LeaseStage::AwaitingResponse => {
                "before the backend answered; the request was cut and may or may not have been applied"
            }
            LeaseStage::RelayingResponse => {
                "while the response was being relayed; the client received it cut off"
            }
        }
    }
}

/// A holder's lease on a shared store, as this process sees it: live until
/// its deadline unless renewed, revoked for good at the deadline or when the
/// store says it is gone. Cheap to clone; every request admitted under it
/// holds a clone, checks [`is_live`](Lease::is_live) before each step that
/// reaches the backend, and is cut off at [`revoked`](Lease::revoked).
///
/// The deadline is kept on [`boot_clock`], a clock that keeps running while
/// the machine is suspended: a monotonic clock that stops during suspend
/// would let a resumed process believe it still holds a lease the store
/// expired meanwhile.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<LeaseState>,
}

struct LeaseState {
    /// The store's identifier of the lease (etcd's lease ID).
    id: i64,
    /// Nanoseconds on [`boot_clock`]; moved forward by each renewal.
    deadline: AtomicU64,
    revoked: AtomicBool,
    /// Woken once, at revocation.
    gone: Notify,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.inner.id)
            .field("live", &self.is_live())
            .finish()
    }
}

impl Lease {
    /// A lease with identifier `id`, live until `deadline` on [`boot_clock`].
    pub fn new(id: i64, deadline: Duration) -> Self {
        Lease {
            inner: Arc::new(LeaseState {
                id,
                deadline: AtomicU64::new(nanos(deadline)),
                revoked: AtomicBool::new(false),
                gone: Notify::new(),
            }),
        }
    }

    /// The store's identifier of the lease.
    pub fn id(&self) -> i64 {
        self.inner.id
    }

    /// Moves the deadline to `deadline` (never backwards). Does nothing once
    /// revoked: a revoked lease stays revoked.
    pub fn extend(&self, deadline: Duration) {
        self.inner
            .deadline
            .fetch_max(nanos(deadline), Ordering::AcqRel);
    }

    /// The deadline, on [`boot_clock`].
    pub fn deadline(&self) -> Duration {
        Duration::from_nanos(self.inner.deadline.load(Ordering::Acquire))
    }

    /// Whether the lease is neither revoked nor past its deadline. A read of
    /// the clock and two atomics: cheap enough for every body chunk.
    pub fn is_live(&self) -> bool {
        !self.inner.revoked.load(Ordering::Acquire) && boot_clock() < self.deadline()
    }

    /// `Ok` while the lease lives; once it has ended, the one error for it,
    /// [`LeaseEnded`] at `stage`. The check before every step of a request
    /// admitted under a lease that could reach the backend or the client:
    /// each wait, the send, each chunk of its bodies.
    ///
    /// ```
    /// use fencegate::store::{boot_clock, Lease, LeaseStage};
    /// let lease = Lease::new(1, boot_clock() + std::time::Duration::from_secs(60));
    /// assert!(lease.check(LeaseStage::SendingBody).is_ok());
    /// lease.revoke();
    /// let ended = lease.check(LeaseStage::SendingBody).unwrap_err();
    /// assert_eq!(ended.stage, LeaseStage::SendingBody);
    /// ```
    #[inline]
    pub fn check(&self, stage: LeaseStage) -> Result<(), LeaseEnded> {
        if self.is_live() {
            Ok(())
        } else {
            Err(LeaseEnded { stage })
        }
    }

    /// Revokes the lease for good and wakes everyone waiting in
    /// [`revoked`](Lease::revoked).
    pub fn revoke(&self) {
        if !self.inner.revoked.swap(true, Ordering::AcqRel) {
            self.inner.gone.notify_waiters();
        }
    }

    /// Whether [`revoke`](Lease::revoke) was called.
    pub fn is_revoked(&self) -> bool {
        self.inner.revoked.load(Ordering::Acquire)
    }

    /// Resolves once the lease is revoked. The holder revokes it at its
    /// deadline; a future here does not watch the clock itself.
    pub fn revoked(&self) -> impl Future<Output = ()> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move {
            loop {
                // Register before looking, so that a revocation between the
                // look and the await is not missed.
                let mut gone = pin!(inner.gone.notified());
                gone.as_mut().enable();
                if inner.revoked.load(Ordering::Acquire) {
                    return;
                }
                gone.await;
            }
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Time since boot, suspend included (Linux `CLOCK_BOOTTIME`): the clock
/// lease deadlines are measured on.
#[cfg(all(feature = "etcd", target_os = "linux"))]
pub fn boot_clock() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(now) => Duration::new(
            u64::try_from(now.tv_sec()).unwrap_or(0),
            u32::try_from(now.tv_nsec()).unwrap_or(0),
        ),
        // Cannot happen for a clock Linux always has; if it ever did, a
        // time past every deadline makes the lease dead, the safe side.
        Err(_) => Duration::MAX,
    }
}

/// Time since the first call, from the monotonic clock: where no clock that
/// runs through suspend is available (or compiled in), the best there is.
#[cfg(not(all(feature = "etcd", target_os = "linux")))]
pub fn boot_clock() -> Duration {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_dies_at_its_deadline_and_stays_revoked() {
        let lease = Lease::new(7, boot_clock() + Duration::from_secs(60));
        assert!(lease.is_live());
        lease.extend(Duration::ZERO);
        assert!(lease.is_live(), "a deadline never moves backwards");
        let past = Lease::new(8, boot_clock().saturating_sub(Duration::from_millis(1)));
        assert!(!past.is_live());
        lease.revoke();
        lease.extend(boot_clock() + Duration::from_secs(600));
        assert!(!lease.is_live() && lease.is_revoked());
    }

    #[tokio::test]
    async fn revoked_resolves_for_waiters_and_latecomers() {
        let lease = Lease::new(1, boot_clock() + Duration::from_secs(60));
        let waiter = tokio::spawn(lease.revoked());
        tokio::task::yield_now().await;
        lease.revoke();
        waiter.await.unwrap();
        lease.revoked().await;
    }
}
