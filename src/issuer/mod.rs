//! Token trust: asking the lock service whether a token was really handed
//! out before it may raise a fence (`--token-issuer`).
//!
//! Any client that reaches the data plane can send any token, and one forged
//! huge token would block its resource for ever. A [`TokenIssuer`] answers
//! whether a token is at or below the highest its lock service has handed
//! out. The fence table asks only when a token would *raise* a fence (a
//! stale token is refused without asking, an equal one was asked about
//! already), which is Chubby's `CheckSequencer` done cheaply.
//!
//! [`CachedIssuer`] (feature `issuer`) makes any [`BoundSource`] (a lock
//! service's counter) into a `TokenIssuer` that caches the confirmed bound,
//! merges concurrent questions into one and gives each question 2 s. The
//! sources for Redis, etcd, PostgreSQL and ZooKeeper sit behind the features
//! `issuer-redis`, `issuer-etcd`, `issuer-postgres` and `issuer-zookeeper`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

#[cfg(feature = "issuer")]
mod access;
#[cfg(feature = "issuer")]
mod cached;
#[cfg(feature = "issuer-etcd")]
pub mod etcd;
#[cfg(feature = "issuer-postgres")]
pub mod postgres;
#[cfg(feature = "issuer-redis")]
pub mod redis;
#[cfg(feature = "issuer")]
mod url;
#[cfg(feature = "issuer-zookeeper")]
pub mod zookeeper;

#[cfg(feature = "issuer")]
pub use self::access::{IssuerAccess, IssuerUrlError};
#[cfg(feature = "issuer")]
pub use self::cached::{
    AskFuture, BoundSource, CachedIssuer, IssuerCounts, IssuerStats, ASK_TIMEOUT,
};
#[cfg(feature = "issuer")]
pub use self::url::{from_url, from_url_with, UrlIssuer};

/// The future returned by [`TokenIssuer::check`].
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<(), IssuerError>> + Send + 'a>>;

/// A lock service that can tell whether it handed out a token.
pub trait TokenIssuer: std::fmt::Debug + Send + Sync + 'static {
    /// Whether `token`, for fence `key`, is known to be issued without
    /// asking (a cached bound). Called on every raise, under the fence's
    /// lock: it must not block. The default knows nothing.
    fn known_issued(&self, key: &str, token: u64) -> bool {
        let _ = (key, token);
        false
    }

    /// `Ok` if `token`, for fence `key`, is at or below the highest token
    /// the issuer has handed out; else why not.
    fn check<'a>(&'a self, key: &'a str, token: u64) -> CheckFuture<'a>;
}

/// Why a token could not be confirmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuerError {
    /// The token is above the highest the issuer has handed out (403
    /// `token_not_issued`).
    #[error("token not issued: the issuer has handed out tokens up to {issued}")]
    NotIssued {
        /// The issuer's bound when asked.
        issued: u64,
    },
    /// The issuer could not be asked in time (503
    /// `token_issuer_unavailable`).
    #[error("token issuer unavailable: {0}")]
    Unavailable(Arc<str>),
}
