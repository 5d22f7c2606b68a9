use std::sync::Arc;

use http::{HeaderName, Method};
use tower_layer::Layer;

use super::config::{Enforce, Settings};
use super::service::Fencing;
use crate::chain::Chain;
use crate::fences::Fences;
use crate::issuer::TokenIssuer;
use crate::key::Scope;

/// A [`Layer`] that fences the requests of the service it wraps.
/// See the [module docs](crate::fencing) for what it does.
///
/// ```
/// use fencegate::{Fences, FencingLayer, Scope};
/// use http::{HeaderName, Method};
///
/// let layer = FencingLayer::new(Fences::in_memory())
///     .token_header(HeaderName::from_static("x-lock-token"))
///     .scope("prefix:1".parse::<Scope>().unwrap())
///     .safe_methods([Method::GET, Method::HEAD])
///     .allow_unfenced_writes(false);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct FencingLayer {
    config: Arc<Settings>,
}

impl FencingLayer {
    /// Fences over `fences`, with the defaults: `X-Fencing-Token`, `path`
    /// scope, every method but GET, HEAD, OPTIONS, TRACE and PROPFIND is a
    /// write, and writes without a token are refused (428).
    pub fn new(fences: Fences) -> Self {
        FencingLayer {
            config: Arc::new(Settings::new(fences)),
        }
    }

    /// The header that carries the token.
    pub fn token_header(mut self, name: HeaderName) -> Self {
        Arc::make_mut(&mut self.config).token_header = name;
        self
    }

    /// How a request maps to its fence key.
    pub fn scope(mut self, scope: Scope) -> Self {
        Arc::make_mut(&mut self.config).scope = scope;
        self
    }

    /// The store has no collections (S3, GCS, Azure Blob): a `DELETE`
    /// changes only its own key, and no write is fenced over everything
    /// under its path (see [`crate::reach`]). Off by default: a `DELETE`
    /// may remove a whole WebDAV collection.
    pub fn flat_keys(mut self, flat: bool) -> Self {
        Arc::make_mut(&mut self.config).flat_keys = flat;
        self
    }

    /// The methods that are *not* writes. Every other method is.
    pub fn safe_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        Arc::make_mut(&mut self.config).safe_methods = methods.into_iter().collect();
        self
    }

    /// Whether a write without a token is let through (unfenced) instead of
    /// refused with 428.
    pub fn allow_unfenced_writes(mut self, allow: bool) -> Self {
        Arc::make_mut(&mut self.config).allow_unfenced_writes = allow;
        self
    }

    /// Token trust: a token that would raise a fence is first confirmed by
    /// `issuer` (403 `token_not_issued` if it is above what the issuer
    /// handed out, 503 `token_issuer_unavailable` if it cannot be asked).
    pub fn token_issuer(mut self, issuer: Arc<dyn TokenIssuer>) -> Self {
        Arc::make_mut(&mut self.config).issuer = Some(issuer);
        self
    }

    /// Chained writes: every write that replaces or removes an object
    /// carries a precondition on the version the object had, so that the
    /// store refuses it if it arrives after a newer write
    /// ([`crate::chain`]). Off unless given; a chain in
    /// [`Mode::Off`](crate::chain::Mode::Off) turns it off.
    pub fn chained_writes(mut self, chain: Arc<Chain>) -> Self {
        let on = chain.mode() != crate::chain::Mode::Off;
        Arc::make_mut(&mut self.config).chain = on.then_some(chain);
        self
    }

    /// Whether fencing refuses ([`Enforce::On`], the default), only
    /// reports what it would have refused ([`Enforce::Report`]: admission
    /// runs and raises fences, everything is forwarded, nothing chained),
    /// or is off.
    pub fn enforce(mut self, enforce: Enforce) -> Self {
        Arc::make_mut(&mut self.config).enforce = enforce;
        self
    }

    /// The chain of [`FencingLayer::chained_writes`], if on.
    pub fn chain(&self) -> Option<&Arc<Chain>> {
        self.config.chain.as_ref()
    }

    /// How a request maps to its fence key.
    pub fn key_scope(&self) -> Scope {
        self.config.scope
    }

    /// The header the layer reads the token from.
    pub fn token_header_name(&self) -> &HeaderName {
        &self.config.token_header
    }

    /// The fence table the layer admits against.
    pub fn fences(&self) -> &Fences {
        &self.config.fences
    }
}

impl<S> Layer<S> for FencingLayer {
    type Service = Fencing<S>;

    fn layer(&self, inner: S) -> Self::Service {
        if self.config.scope != Scope::Header {
            self.config.fences.enable_stored_subtrees();
        }
        Fencing::with_config(inner, Arc::clone(&self.config))
    }
}
