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

/// Whether fencing refuses (`--enforce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enforce {
    /// Refuse what fencing refuses (the default).
    #[default]
    On,
    /// Refuse nothing for fencing reasons: admission runs and raises
    /// fences as in `On`, every request is forwarded, no chained condition
    /// is added, and each request `On` would have refused carries a
    /// [`WouldRefuse`] in its response's extensions. For seeing stale
    /// writes in production before refusing them.
    Report,
    /// Forward without fencing (data that needs no fence).
    Off,
}

impl std::str::FromStr for Enforce {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "on" => Ok(Enforce::On),
            "report" => Ok(Enforce::Report),
            "off" => Ok(Enforce::Off),
            other => Err(format!(
                "unknown value {other:?}; expected on, report or off"
            )),
        }
    }
}

/// In [`Enforce::Report`], why `On` would have refused a request that was
/// forwarded: put in its response's extensions for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WouldRefuse {
    /// `below_highest`, `overtaken`, `missing_token`, `invalid_token`,
    /// `unfenceable_write` or `token_not_issued`.
    pub reason: &'static str,
}

/// What the layer was built with; shared by every service it makes.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
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
    /// Whether refusals are made, reported, or fencing is off.
    pub(crate) enforce: Enforce,
}

impl Settings {
    /// The defaults over `fences`: `X-Fencing-Token`, `path` scope, the safe
    /// methods of [`DEFAULT_SAFE_METHODS`], writes without a token refused.
    pub(crate) fn new(fences: Fences) -> Self {
        let safe_methods = DEFAULT_SAFE_METHODS
            .iter()
            .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
            .collect();
        Settings {
            fences,
            token_header: TOKEN_HEADER,
            scope: Scope::Path,
            safe_methods,
            allow_unfenced_writes: false,
            flat_keys: false,
            issuer: None,
            chain: None,
            enforce: Enforce::On,
        }
    }

    /// The chain, when writes are chained: on, and enforcing.
    pub(crate) fn chain(&self) -> Option<&Chain> {
        match self.enforce {
            Enforce::On => self.chain.as_deref(),
            Enforce::Report | Enforce::Off => None,
        }
    }

    pub(crate) fn is_write(&self, method: &Method) -> bool {
        !self.safe_methods.contains(method)
    }
}
