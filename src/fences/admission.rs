//! What an admission is, what it answers, and the guard a request holds
//! while it is in flight.

use std::net::SocketAddr;
use std::sync::Arc;

use super::state::{Fence, USED};
use crate::issuer::{IssuerError, TokenIssuer};
use crate::store::{ClaimHold, Lease, StoreError};

/// Why a request was refused as stale (409 `stale_token`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// The token is below the highest already admitted.
    BelowHighest,
    /// The token was admitted, but a higher one was admitted while this
    /// request waited for a lower one in flight.
    Overtaken,
}

impl StaleReason {
    /// The `reason` field of the 409 body.
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::BelowHighest => "below_highest",
            StaleReason::Overtaken => "overtaken",
        }
    }
}

/// A refusal as stale: which token, against which highest, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("token {token} is stale: highest is {highest} ({})", reason.as_str())]
pub struct Stale {
    /// The token the request carried.
    pub token: u64,
    /// The fence's highest token when the request was refused.
    pub highest: u64,
    /// Why it was refused.
    pub reason: StaleReason,
}

/// Why [`Fences::admit`](crate::Fences::admit) did not let a request through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdmitError {
    /// The token is stale (409).
    #[error(transparent)]
    Stale(#[from] Stale),
    /// The raise could not be made durable, so nothing may be forwarded (503).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The key has no fence yet, and the client made new fences faster
    /// than its limit allows (429); nothing was raised.
    #[error(transparent)]
    Limited(crate::fences::Limited),
    /// The token would raise the fence, and its issuer did not confirm it
    /// (403 not issued, 503 issuer unavailable). The fence was not raised.
    #[error("token {token}: {error}")]
    Issuer {
        /// The token the request carried.
        token: u64,
        /// What the issuer said.
        error: IssuerError,
    },
}

impl AdmitError {
    /// The refusal as stale, if that is what this is.
    pub fn stale(&self) -> Option<&Stale> {
        match self {
            AdmitError::Stale(stale) => Some(stale),
            AdmitError::Store(_) | AdmitError::Issuer { .. } | AdmitError::Limited(_) => None,
        }
    }
}

/// What a request's admission is besides the fences it is admitted on: its
/// token, the client named in the log line of a raise, and the issuer that
/// confirms a token that would raise a fence. One value, taken by
/// [`Fences::admit_with`](crate::Fences::admit_with) (one key) and
/// [`Fences::admit_all`](crate::Fences::admit_all) (several).
#[derive(Clone, Copy)]
pub struct Admission<'a> {
    /// The request's token.
    pub token: u64,
    /// The client, for the log line of a raise.
    pub client: Option<SocketAddr>,
    /// Token trust: asked before a token raises a fence.
    pub issuer: Option<&'a dyn TokenIssuer>,
    /// Who the client authenticated as (credential custody), for the log
    /// line of a raise.
    pub identity: Option<&'a str>,
}

impl<'a> Admission<'a> {
    /// An admission of `token`, from no named client, with no issuer.
    pub fn new(token: u64) -> Self {
        Admission {
            token,
            client: None,
            issuer: None,
            identity: None,
        }
    }

    /// The same, naming the client's `identity` in the log line of a raise.
    pub fn by_identity(self, identity: Option<&'a str>) -> Self {
        Admission { identity, ..self }
    }

    /// The same, naming `client` in the log line of a raise.
    pub fn from_client(self, client: Option<SocketAddr>) -> Self {
        Admission { client, ..self }
    }

    /// The same, with `issuer` confirming a token that would raise a fence.
    pub fn checked_by(self, issuer: Option<&'a dyn TokenIssuer>) -> Self {
        Admission { issuer, ..self }
    }
}

impl std::fmt::Debug for Admission<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("token", &self.token)
            .field("client", &self.client)
            .field("issuer", &self.issuer.is_some())
            .field("identity", &self.identity)
            .finish()
    }
}

/// Proof that a request was admitted and is in flight. Keep it until the
/// request's response is complete; dropping it (also by cancellation or a
/// panic unwinding) lets waiting higher tokens through.
#[must_use = "the request counts as in flight only while this guard lives"]
pub struct InFlight {
    pub(super) fence: Arc<Fence>,
    /// The other fences of a request admitted on several keys at once
    /// ([`Fences::admit_all`](crate::Fences::admit_all)); `None` for one
    /// key. Boxed: two words, where a `Vec` would add three to every
    /// request's future and response body (moved and copied on every
    /// request) for a rare case.
    pub(super) more: Option<Box<[Arc<Fence>]>>,
    pub(super) token: u64,
    /// The claim in a shared store, released after the count above.
    pub(super) hold: Option<Box<dyn ClaimHold>>,
}

impl InFlight {
    /// The admitted token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// With a shared store, the lease the request was admitted under: once
    /// it is no longer live, nothing more of the request may reach the
    /// backend (see [`Lease`]). `None` when this process is the only
    /// holder of its fences.
    pub fn lease(&self) -> Option<&Lease> {
        self.hold.as_ref().map(|hold| hold.lease())
    }
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("token", &self.token)
            .finish()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        leave(&self.fence);
        for fence in self.more.iter().flatten() {
            leave(fence);
        }
    }
}

/// One request in flight on `fence` is done.
pub(super) fn leave(fence: &Fence) {
    let last = {
        let mut state = fence.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.mark(USED, true);
        state.in_flight == 0
    };
    if last {
        fence.changed.notify_waiters();
    }
}
