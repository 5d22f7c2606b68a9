//! Where a client's current fencing token comes from.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// The lock is known lost (or not held yet): nothing may be sent with its
/// token. Knowing nothing is no promise: a paused process learns of its
/// loss only once it runs again, which is why the gateway checks the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the lock is lost: {reason}")]
pub struct LockLost {
    /// Why, in words (lease ran out, session expired, refused by the gateway).
    pub reason: String,
}

impl LockLost {
    /// A loss for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        LockLost {
            reason: reason.into(),
        }
    }
}

/// The token to send now, or why none may be sent.
///
/// A `u64` is a source that never learns of a loss (a token held for one
/// task, whose end the caller knows); [`LockToken`] follows a lock across
/// grants.
pub trait TokenSource {
    /// The current grant's token.
    fn token(&self) -> Result<u64, LockLost>;
}

impl TokenSource for u64 {
    fn token(&self) -> Result<u64, LockLost> {
        Ok(*self)
    }
}

impl<T: TokenSource + ?Sized> TokenSource for Arc<T> {
    fn token(&self) -> Result<u64, LockLost> {
        (**self).token()
    }
}

impl<T: TokenSource + ?Sized> TokenSource for &T {
    fn token(&self) -> Result<u64, LockLost> {
        (**self).token()
    }
}

/// A lock's token as the code that holds the lock reports it: set at each
/// grant, kept while the lease is renewed, gone once the lock is lost.
/// Clones share one state, so a lock's keep-alive task and the clients that
/// send the token see the same thing.
///
/// ```
/// use std::time::{Duration, Instant};
/// use fencegate::client::{LockToken, TokenSource};
///
/// let lock = LockToken::new();
/// assert!(lock.token().is_err()); // not granted yet
/// lock.grant(7, Some(Instant::now() + Duration::from_secs(10)));
/// assert_eq!(lock.token(), Ok(7));
/// lock.lose("keep-alive found the lease gone");
/// assert!(lock.token().is_err());
/// lock.grant(9, None); // granted again: a new token
/// assert_eq!(lock.token(), Ok(9));
/// ```
#[derive(Debug, Clone, Default)]
pub struct LockToken {
    state: Arc<Mutex<Grant>>,
}

#[derive(Debug, Default)]
struct Grant {
    token: Option<u64>,
    /// The lease's end as this process counts it, if the lock has one.
    until: Option<Instant>,
    lost: Option<String>,
}

impl LockToken {
    /// A lock not granted yet.
    pub fn new() -> Self {
        LockToken::default()
    }

    /// The lock was granted with `token`; its lease, if it has one, ends at
    /// `until` unless renewed. Count `until` from before the request that
    /// acquired the lock, so that it never lies past the server's.
    pub fn grant(&self, token: u64, until: Option<Instant>) {
        let mut grant = self.lock();
        *grant = Grant {
            token: Some(token),
            until,
            lost: None,
        };
    }

    /// The lease was renewed: it now ends at `until`.
    pub fn renew(&self, until: Instant) {
        self.lock().until = Some(until);
    }

    /// The lock is lost (a failed renewal, an expired session, a
    /// `stale_token` answer): every later [`token`](TokenSource::token) is
    /// refused until the next [`grant`](Self::grant).
    pub fn lose(&self, reason: impl Into<String>) {
        self.lock().lost = Some(reason.into());
    }

    /// Why the lock is known lost, if it is.
    pub fn lost(&self) -> Option<LockLost> {
        self.token().err()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Grant> {
        // A panic while holding this lock leaves a whole `Grant` behind
        // (every write replaces fields), so the state is still meaningful.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TokenSource for LockToken {
    fn token(&self) -> Result<u64, LockLost> {
        let grant = self.lock();
        if let Some(reason) = &grant.lost {
            return Err(LockLost::new(reason.clone()));
        }
        let Some(token) = grant.token else {
            return Err(LockLost::new("the lock was never granted"));
        };
        match grant.until {
            Some(until) if Instant::now() >= until => {
                Err(LockLost::new("the lease ran out before it was renewed"))
            }
            _ => Ok(token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_past_its_end_is_lost_and_a_renewal_keeps_it() {
        let lock = LockToken::new();
        let start = Instant::now();
        lock.grant(3, Some(start));
        assert_eq!(
            lock.token(),
            Err(LockLost::new("the lease ran out before it was renewed"))
        );
        lock.renew(start + Duration::from_secs(3600));
        assert_eq!(lock.token(), Ok(3));
        let shared = lock.clone();
        shared.lose("session expired");
        assert_eq!(lock.lost(), Some(LockLost::new("session expired")));
    }
}
