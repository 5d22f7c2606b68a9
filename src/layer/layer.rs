use std::sync::Arc;

use http::{HeaderName, Method};
use tower_layer::Layer;

use super::service::Fencing;
use crate::fences::Fences;
use crate::issuer::TokenIssuer;
use crate::key::Scope;

/// The default token header.
pub const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-fencing-token");

/// The methods that are not writes by default: the safe ones, plus WebDAV's
/// `PROPFIND`. Every other method, known or not, is a write (fail closed).
pub const DEFAULT_SAFE_METHODS: [&str; 5] = ["GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND"];

/// A [`Layer`] that fences the requests of the service it wraps.
/// See the [module docs](crate::layer) for what it does.
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
    config: Arc<Config>,
}

/// What the layer was built with; shared by every service it makes.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) fences: Fences,
    pub(crate) token_header: HeaderName,
    pub(crate) scope: Scope,
    pub(crate) safe_methods: Vec<Method>,
    pub(crate) allow_unfenced_writes: bool,
    pub(crate) issuer: Option<Arc<dyn TokenIssuer>>,
}

impl Config {
    pub(crate) fn is_write(&self, method: &Method) -> bool {
        !self.safe_methods.contains(method)
    }
}

impl FencingLayer {
    /// Fences over `fences`, with the defaults: `X-Fencing-Token`, `path`
    /// scope, every method but GET, HEAD, OPTIONS, TRACE and PROPFIND is a
    /// write, and writes without a token are refused (428).
    pub fn new(fences: Fences) -> Self {
        let safe_methods = DEFAULT_SAFE_METHODS
            .iter()
            .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
            .collect();
        FencingLayer {
            config: Arc::new(Config {
                fences,
                token_header: TOKEN_HEADER,
                scope: Scope::Path,
                safe_methods,
                allow_unfenced_writes: false,
                issuer: None,
            }),
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

    /// The fence table the layer admits against.
    pub fn fences(&self) -> &Fences {
        &self.config.fences
    }
}

impl<S> Layer<S> for FencingLayer {
    type Service = Fencing<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fencing::new(inner, Arc::clone(&self.config))
    }
}
