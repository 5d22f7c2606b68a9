//! The data plane's service, made once per client connection: one
//! request's pipeline (`Connection::serve`), the fencing layer around the
//! proxy, with the request's [`Exchange`] recording it from arrival to the
//! end of its response body.
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
use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderValue, CONNECTION, EXPECT};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::accept::ConnInfo;
use super::access_log::AccessLog;
use super::body::request::{Counted, DrainOnDrop, IncomingBody};
use super::body::response::{FromProxy, Relayed};
use super::deadlines::{Side, StallTimeout};
use super::engine;
use super::exchange::{ClientConnection, Exchange};
use super::hop::end_to_end_map;
use super::inbound::Inbound;
use super::metrics::Metrics;
use super::outcome::Outcome;
use super::proxy::{close_after, gateway_error, refuse_unproxyable, Proxy};
use crate::fencing::{refusal_response, Fencing, FencingLayer, ResponseBody, ResponseFuture};
use crate::head::{HeaderFields, RequestView};
use crate::http1::head::RequestHead;
use crate::reach;
use crate::refusal::Refusal;

/// Makes one [`Connection`] service per accepted connection.
#[derive(Debug, Clone)]
pub(crate) struct DataPlane {
    fencing: FencingLayer,
    proxy: Proxy,
    metrics: Metrics,
    body_timeout: Duration,
    access_log: Option<AccessLog>,
}

impl DataPlane {
    /// Requests are counted in `metrics`, fenced by `fencing`, forwarded by
    /// `proxy`; a request body that pauses for `body_timeout` is cut.
    pub(crate) fn new(
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
            access_log: None,
        }
    }

    /// Writes one line per request to `log`.
    pub(crate) fn access_log(mut self, log: AccessLog) -> Self {
        self.access_log = Some(log);
        self
    }

    pub(crate) fn connection(&self, info: &ConnInfo) -> Connection {
        let proxy = self.proxy.for_client(info.peer, info.tls);
        Connection {
            shared: Arc::new(ConnectionShared {
                inner: self.fencing.layer(proxy).with_client(info.peer),
                client: Arc::new(ClientConnection {
                    metrics: self.metrics.clone(),
                    body_timeout: self.body_timeout,
                    activity: Arc::clone(&info.activity),
                    access_log: self.access_log.clone(),
                    peer: info.peer,
                }),
            }),
        }
    }
}

/// The service for one client connection.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    shared: Arc<ConnectionShared>,
}

#[derive(Debug)]
struct ConnectionShared {
    inner: Fencing<Proxy>,
    client: Arc<ClientConnection>,
}

type Inner = ResponseFuture<<Proxy as Service<Inbound<Body>>>::Future, FromProxy, Infallible>;

impl hyper::service::Service<Request<Incoming>> for Connection {
    type Response = Response<Relayed>;
    type Error = Infallible;
    type Future = Metered;

    fn call(&self, request: Request<Incoming>) -> Metered {
        self.serve(Inbound::from(request.map(IncomingBody::Hyper)))
    }
}

impl engine::Handler for Connection {
    type Body = Relayed;
    type Future = Metered;

    fn call(&self, head: RequestHead, body: engine::RequestBody) -> Metered {
        self.serve(Inbound::http1(head, IncomingBody::Engine(body)))
    }

    fn refused(&self, status: http::StatusCode, error: &'static str) {
        let outcome = if error == Outcome::InvalidPath.as_str() {
            Outcome::InvalidPath
        } else {
            Outcome::OtherRefusal
        };
        Exchange::refused_head(&self.shared.client, outcome, status);
    }
}

impl super::accept::MaybeEngine for Connection {
    type Engine = Connection;

    fn engine(&self) -> Option<Connection> {
        Some(self.clone())
    }
}

impl Connection {
    /// One request's pipeline: its [`Exchange`] begun, its body bounded
    /// and counted, refused before fencing if it cannot be proxied, else
    /// fenced (after its listing is read, for an S3 `DeleteObjects`) and
    /// forwarded; [`Metered`] and [`Relayed`] carry the exchange to its end.
    fn serve(&self, request: Inbound<IncomingBody>) -> Metered {
        let shared = &self.shared;
        let exchange =
            Exchange::begin(&shared.client, &request, || shared.inner.fence_of(&request));
        let counter = exchange.bytes_in();
        let timeout = shared.client.body_timeout;
        // A client that asked `Expect: 100-continue` and gets a refusal
        // instead may never send its body: reading on would take its next
        // request for the body. Such a body is abandoned, never drained, and
        // an HTTP/1 connection is closed after the refusal: hyper itself
        // reads once more "in case a tiny body was included", which can
        // swallow a next request that arrived meanwhile.
        let expects_continue = request.fields().contains(&EXPECT);
        // The engine drains a body itself, after the response, before it
        // reads the next request from the same bytes.
        let drain = !expects_continue && matches!(request.body, IncomingBody::Hyper(_));
        let close_if_refused = expects_continue && request.version() <= Version::HTTP_11;
        let fields_to_map = request.version() >= Version::HTTP_2;
        let request = request.map_body(|body| {
            if http_body::Body::is_end_stream(&body) {
                // No body to time (a GET): and `Empty` is a unit, so boxing it
                // allocates nothing.
                Body::empty()
            } else {
                let body = DrainOnDrop::new(StallTimeout::new(body, timeout, Side::Client), drain);
                match counter {
                    Some(counter) => Body::new(Counted::new(body, counter)),
                    None => Body::new(body),
                }
            }
        });
        let stage = match refuse_unproxyable(&request) {
            Some(refusal) => Stage::Refused {
                response: Some(refusal),
            },
            None if shared.inner.needs_listing(&request) => Stage::Fencing {
                future: ResponseFuture::admitting(Box::pin(read_listing(
                    Arc::clone(shared),
                    request,
                ))),
            },
            // `Proxy` is always ready (its `poll_ready` returns `Ready` at once).
            None => Stage::Fencing {
                future: shared.inner.call_ready(request),
            },
        };
        Metered {
            exchange: Some(exchange),
            close_if_refused,
            fields_to_map,
            stage,
        }
    }
}

/// An S3 `DeleteObjects`: reads its body (at most
/// [`MAX_LISTING_BYTES`](crate::reach::MAX_LISTING_BYTES)), hands the keys
/// it lists to the fencing layer, and forwards the body unchanged (so
/// `Content-MD5` and checksums still verify at the backend).
async fn read_listing(
    shared: Arc<ConnectionShared>,
    request: Inbound<Body>,
) -> Result<Response<ResponseBody<FromProxy>>, Infallible> {
    let (request, body) = request.split_body();
    let limited = http_body_util::Limited::new(body, reach::MAX_LISTING_BYTES);
    let body = match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let refused = if error.is::<http_body_util::LengthLimitError>() {
                let refusal = Refusal::Unfenceable {
                    detail: format!(
                        "the DeleteObjects body is above {} bytes",
                        reach::MAX_LISTING_BYTES
                    ),
                };
                refusal_response(&refusal)
            } else {
                let response = close_after(gateway_error(
                    http::StatusCode::BAD_REQUEST,
                    "client_body_error",
                    &format!("the request body could not be read: {error}"),
                    Outcome::ClientError,
                ));
                response.map(|body| ResponseBody::inner(FromProxy::from(body), None))
            };
            return Ok(refused);
        }
    };
    let listed = match reach::listed_objects(&body) {
        Ok(listed) => listed,
        Err(unfenceable) => {
            let refusal = Refusal::Unfenceable {
                detail: unfenceable.0,
            };
            return Ok(refusal_response(&refusal));
        }
    };
    let mut request = request.map_body(|()| Body::from(body));
    request.set_listed(listed);
    shared.inner.call_ready(request).await
}

pin_project! {
    /// The response future of one request: when the response head is
    /// ready, its outcome and latency are recorded in the request's
    /// [`Exchange`], which goes on with the response body.
    pub struct Metered {
        // `None` once the response is out.
        exchange: Option<Exchange>,
        // An answer made by the gateway closes the connection (see `serve`).
        close_if_refused: bool,
        // The backend's lines go into the map (an HTTP/2 client's answer).
        fields_to_map: bool,
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
                Some(response) => {
                    response.map(|body| ResponseBody::inner(FromProxy::from(body), None))
                }
                // Polled again after completion: a contract breach by the
                // caller, answered rather than panicked on.
                None => Response::new(ResponseBody::inner(FromProxy::from(Body::empty()), None)),
            },
        };
        let mut response = response;
        if *this.fields_to_map {
            // HTTP/2: hyper writes the map alone.
            let fields = response
                .body_mut()
                .inner_mut()
                .and_then(FromProxy::take_fields);
            if let Some(fields) = fields {
                response
                    .headers_mut()
                    .extend(end_to_end_map(|| fields.iter()));
            }
        }
        let outcome = Outcome::of(&response);
        if *this.close_if_refused && outcome != Outcome::Forwarded {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        let mut exchange = this.exchange.take();
        if let Some(exchange) = &mut exchange {
            exchange.answered(outcome, response.status());
        }
        Poll::Ready(Ok(response.map(|body| Relayed::new(body, exchange))))
    }
}
