//! What the fencing core hands an admitted request to.
//!
//! The tower layer's inner service is one ([`Called`]); the gateway's proxy
//! is another, whose future is an `async fn`'s: through this trait the
//! gateway's whole request (fencing, then forwarding) is one future that
//! lives inside its connection's, with no allocation of its own, where a
//! tower `Service` would need its future named, which for an `async fn`
//! means a box per request (docs/BENCHMARKS.md, "One future per request").

use std::future::Future;

use http::Response;
use tower_service::Service;

/// Sends a request on (to the backend, or to an inner service) and answers
/// with the response, taken by value as tower's `call` takes the clone
/// that was polled ready.
pub(crate) trait Forward<R>: Send {
    /// The response body.
    type Body;
    /// What the call can fail with (`Infallible` for the gateway's proxy).
    type Error;

    /// Forwards `request`.
    fn forward(
        self,
        request: R,
    ) -> impl Future<Output = Result<Response<Self::Body>, Self::Error>> + Send;
}

/// A tower service that was polled ready, as a [`Forward`].
pub(crate) struct Called<S>(pub(crate) S);

impl<S, R, B> Forward<R> for Called<S>
where
    S: Service<R, Response = Response<B>> + Send,
    S::Future: Send,
{
    type Body = B;
    type Error = S::Error;

    fn forward(mut self, request: R) -> impl Future<Output = Result<Response<B>, S::Error>> + Send {
        self.0.call(request)
    }
}
