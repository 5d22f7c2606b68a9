//! The data plane's service, made once per client connection: metrics
//! around the fencing layer around the proxy, with the client's body bounded
//! by `--client-body-timeout`.
//!
//! Written out as small services rather than an axum `Router` with
//! `from_fn` middleware and `ConnectInfo`: those cost a boxed clone of the
//! inner service, a boxed future and an extensions map per request, and on
//! this path that showed in the profile (docs/BENCHMARKS.md). What belongs
//! to the connection (the client's address, TLS or not) is taken once.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::accept::ConnInfo;
use super::activity::{Activity, Busy};
use super::body_timeout::{Side, StallTimeout};
use super::metrics::Metrics;
use super::proxy::{refuse_unproxyable, Proxy};
use crate::layer::{Fencing, FencingLayer, ResponseBody};

/// Makes one [`Connection`] service per accepted connection.
#[derive(Debug, Clone)]
pub struct DataPlane {
    fencing: FencingLayer,
    proxy: Proxy,
    metrics: Metrics,
    body_timeout: Duration,
}

impl DataPlane {
    /// Requests are counted in `metrics`, fenced by `fencing`, forwarded by
    /// `proxy`; a request body that pauses for `body_timeout` is cut.
    pub fn new(
        fencing: FencingLayer,
        proxy: Proxy,
        metrics: Metrics,
        body_timeout: Duration,
    ) -> Self {
        DataPlane {
            fencing,
            proxy,
            metrics,
            body_timeout,
        }
    }

    pub(crate) fn connection(&self, info: &ConnInfo) -> Connection {
        let proxy = self.proxy.for_client(info.peer, info.tls);
        Connection {
            shared: Arc::new(ConnectionShared {
                inner: self.fencing.layer(proxy),
                metrics: self.metrics.clone(),
                body_timeout: self.body_timeout,
                activity: Arc::clone(&info.activity),
            }),
        }
    }
}

/// The service for one client connection.
#[derive(Debug, Clone)]
pub struct Connection {
    shared: Arc<ConnectionShared>,
}

#[derive(Debug)]
struct ConnectionShared {
    inner: Fencing<Proxy>,
    metrics: Metrics,
    body_timeout: Duration,
    activity: Arc<Activity>,
}

type Inner = <Fencing<Proxy> as Service<Request<Body>>>::Future;

impl hyper::service::Service<Request<Incoming>> for Connection {
    type Response = Response<Relayed>;
    type Error = Infallible;
    type Future = Metered;

    fn call(&self, request: Request<Incoming>) -> Metered {
        let shared = &self.shared;
        let busy = shared.activity.begin();
        let timeout = shared.body_timeout;
        let request = request.map(|body| {
            if http_body::Body::is_end_stream(&body) {
                // No body to time (a GET): and `Empty` is a unit, so boxing it
                // allocates nothing.
                Body::empty()
            } else {
                Body::new(StallTimeout::new(body, timeout, Side::Client))
            }
        });
        let stage = match refuse_unproxyable(&request) {
            Some(refusal) => Stage::Refused {
                response: Some(refusal),
            },
            None => {
                // `Proxy` is always ready (its `poll_ready` returns `Ready` at
                // once), and so is `Fencing` around it: a fresh clone may be
                // called directly.
                let mut inner = shared.inner.clone();
                Stage::Fencing {
                    future: inner.call(request),
                }
            }
        };
        Metered {
            started: Instant::now(),
            metrics: shared.metrics.clone(),
            busy: Some(busy),
            stage,
        }
    }
}

pin_project! {
    /// Records the outcome and latency of one request when its response
    /// headers are ready, and hands the connection's busy mark on to the
    /// response body.
    pub struct Metered {
        started: Instant,
        metrics: Metrics,
        busy: Option<Busy>,
        #[pin]
        stage: Stage,
    }
}

pin_project! {
    #[project = StageProj]
    enum Stage {
        /// Through the fencing layer to the proxy.
        Fencing { #[pin] future: Inner },
        /// Refused before fencing: never proxied, so it raises no fence.
        Refused { response: Option<Response<Body>> },
    }
}

impl Future for Metered {
    type Output = Result<Response<Relayed>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.stage.project() {
            StageProj::Fencing { future } => match std::task::ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
            StageProj::Refused { response } => match response.take() {
                Some(response) => response.map(|body| ResponseBody::inner(body, None)),
                // Polled again after completion: a contract breach by the
                // caller, answered rather than panicked on.
                None => Response::new(ResponseBody::inner(Body::empty(), None)),
            },
        };
        this.metrics
            .observe_response(&response, this.started.elapsed());
        let busy = this.busy.take();
        Poll::Ready(Ok(response.map(|body| Relayed { body, _busy: busy })))
    }
}

pin_project! {
    /// A response body on its way to the client. The connection counts as
    /// busy (not idle) until it is dropped, which hyper does once it has
    /// been sent or the connection failed.
    pub struct Relayed {
        #[pin]
        body: ResponseBody<Body>,
        _busy: Option<Busy>,
    }
}

impl http_body::Body for Relayed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
