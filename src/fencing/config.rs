//! What a [`FencingLayer`](super::FencingLayer) was built with, shared by
//! the layer and every [`Fencing`](super::Fencing) service it makes.

use std::sync::Arc;

use http::{HeaderName, Method};

use crate::chain::Chain;
use crate::fences::Fences;
use crate::issuer::TokenIssuer;
use crate::key::Scope;

/// The default token header.
pub const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-fencing-token");

/// The methods that are not writes by default: the safe ones, plus WebDAV's
/// `PROPFIND`. Every other method, known or not, is a write (fail closed).
pub const DEFAULT_SAFE_METHODS: [&str; 5] = ["GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND"];

/// What the layer was built with; shared by every service it makes.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) fences: Fences,
    pub(crate) token_header: HeaderName,
    pub(crate) scope: Scope,
    pub(crate) safe_methods: Vec<Method>,
    pub(crate) allow_unfenced_writes: bool,
    /// The store has no collections: no write acts on a subtree.
    pub(crate) flat_keys: bool,
    pub(crate) issuer: Option<Arc<dyn TokenIssuer>>,
    /// Chained writes (`crate::chain`), when on.
    pub(crate) chain: Option<Arc<Chain>>,
}

impl Config {
    /// The defaults over `fences`: `X-Fencing-Token`, `path` scope, the safe
    /// methods of [`DEFAULT_SAFE_METHODS`], writes without a token refused.
    pub(crate) fn new(fences: Fences) -> Self {
        let safe_methods = DEFAULT_SAFE_METHODS
            .iter()
            .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
            .collect();
        Config {
            fences,
            token_header: TOKEN_HEADER,
            scope: Scope::Path,
            safe_methods,
            allow_unfenced_writes: false,
            flat_keys: false,
            issuer: None,
            chain: None,
        }
    }

    pub(crate) fn is_write(&self, method: &Method) -> bool {
        !self.safe_methods.contains(method)
    }
}
