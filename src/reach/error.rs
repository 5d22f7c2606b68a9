//! Why [`reach`](super::reach) found no keys: plain values, below the
//! readers of a request (`operation.rs`, `gcs.rs`) that refuse it.

use crate::key::{HostError, PathError};

/// A write that reaches beyond its path in a way the gateway cannot read:
/// 400 `unfenceable_write`, never forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unfenceable(pub String);

/// Why [`reach`](super::reach) found no keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReachError {
    /// A path (the request's, a `Destination`'s, an object name's) does not
    /// normalise: 400 `invalid_path`.
    #[error(transparent)]
    Path(#[from] PathError),
    /// In the `host+` scopes, the request names no valid host: 400
    /// `invalid_path`.
    #[error(transparent)]
    Host(#[from] HostError),
    /// 400 `unfenceable_write`.
    #[error(transparent)]
    Unfenceable(#[from] Unfenceable),
}
