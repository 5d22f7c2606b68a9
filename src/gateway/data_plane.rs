//! The data plane's service stack, made once per client connection:
//! metrics around the fencing layer around the proxy.
//!
//! Written out as two small services rather than an axum `Router` with
//! `from_fn` middleware and `ConnectInfo`: those cost a boxed clone of the
//! inner service, a boxed future and an extensions map per request, and on
//! this path that showed in the profile (docs/BENCHMARKS.md). The client's
//! address is taken once per connection instead.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::serve::{IncomingStream, Listener};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::metrics::Metrics;
use super::proxy::Proxy;
use crate::layer::{Fencing, FencingLayer};

/// Makes one [`Connection`] service per accepted connection (the "make
/// service" given to `axum::serve`).
#[derive(Debug, Clone)]
pub struct DataPlane {
    fencing: FencingLayer,
    proxy: Proxy,
    metrics: Metrics,
}

impl DataPlane {
    /// Requests are counted in `metrics`, fenced by `fencing`, forwarded
    /// by `proxy`.
    pub fn new(fencing: FencingLayer, proxy: Proxy, metrics: Metrics) -> Self {
        DataPlane {
            fencing,
            proxy,
            metrics,
        }
    }
}

impl<L> Service<IncomingStream<'_, L>> for DataPlane
where
    L: Listener<Addr = SocketAddr>,
{
    type Response = Connection;
    type Error = Infallible;
    type Future = Ready<Result<Connection, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'_, L>) -> Self::Future {
        let proxy = self.proxy.for_peer(*stream.remote_addr());
        ready(Ok(Connection {
            inner: self.fencing.layer(proxy),
            metrics: self.metrics.clone(),
        }))
    }
}

/// The service for one client connection.
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Fencing<Proxy>,
    metrics: Metrics,
}

type Inner = <Fencing<Proxy> as Service<Request<Body>>>::Future;

impl Service<Request<Body>> for Connection {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Metered;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Metered {
        Metered {
            started: Instant::now(),
            metrics: self.metrics.clone(),
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// Records the outcome and latency of one request when its response
    /// headers are ready.
    pub struct Metered {
        started: Instant,
        metrics: Metrics,
        #[pin]
        inner: Inner,
    }
}

impl Future for Metered {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match std::task::ready!(this.inner.poll(cx)) {
            Ok(response) => response,
            Err(never) => match never {},
        };
        this.metrics
            .observe_response(&response, this.started.elapsed());
        Poll::Ready(Ok(response.map(Body::new)))
    }
}
