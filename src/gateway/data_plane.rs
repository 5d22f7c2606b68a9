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
use http::header::{HeaderValue, CONNECTION, EXPECT};
use http::{Request, Response, Version};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::accept::ConnInfo;
use super::access_log::{AccessLog, Counted, Entry};
use super::activity::{Activity, Busy};
use super::body_timeout::{BoxError, Side, StallTimeout};
use super::engine;
use super::metrics::Metrics;
use super::outcome::Outcome;
use super::proxy::{close_after, gateway_error, refuse_unproxyable, Proxy};
use crate::fencing::{refusal_response, Fencing, FencingLayer, ResponseBody, ResponseFuture};
use crate::reach;
use crate::refusal::Refusal;
use crate::store::{LeaseEnded, LeaseStage};

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
                metrics: self.metrics.clone(),
                body_timeout: self.body_timeout,
                activity: Arc::clone(&info.activity),
                access_log: self.access_log.clone(),
                peer: info.peer,
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
    metrics: Metrics,
    body_timeout: Duration,
    activity: Arc<Activity>,
    access_log: Option<AccessLog>,
    peer: std::net::SocketAddr,
}

type Inner = <Fencing<Proxy> as Service<Request<Body>>>::Future;

/// A request body as the server of the client's connection gives it:
/// hyper's (HTTP/2) or the HTTP/1.1 engine's.
pub(crate) enum IncomingBody {
    Hyper(Incoming),
    Engine(engine::RequestBody),
}

impl http_body::Body for IncomingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            IncomingBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            IncomingBody::Engine(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            IncomingBody::Hyper(body) => body.is_end_stream(),
            IncomingBody::Engine(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            IncomingBody::Hyper(body) => body.size_hint(),
            IncomingBody::Engine(body) => body.size_hint(),
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Connection {
    type Response = Response<Relayed>;
    type Error = Infallible;
    type Future = Metered;

    fn call(&self, request: Request<Incoming>) -> Metered {
        self.serve(request.map(IncomingBody::Hyper))
    }
}

impl engine::Handler for Connection {
    type Body = Relayed;
    type Future = Metered;

    fn call(&self, request: Request<engine::RequestBody>) -> Metered {
        self.serve(request.map(IncomingBody::Engine))
    }
}

impl super::accept::MaybeEngine for Connection {
    type Engine = Connection;

    fn engine(&self) -> Option<Connection> {
        Some(self.clone())
    }
}

impl Connection {
    fn serve(&self, request: Request<IncomingBody>) -> Metered {
        let shared = &self.shared;
        let busy = shared.activity.begin();
        let timeout = shared.body_timeout;
        let entry = shared.access_log.as_ref().map(|log| {
            Entry::new(
                log,
                shared.peer,
                request.method().clone(),
                request.uri().clone(),
                shared.inner.fence_of(&request),
            )
        });
        let counter = entry.as_ref().map(|entry| Arc::clone(&entry.bytes_in));
        // A client that asked `Expect: 100-continue` and gets a refusal
        // instead may never send its body: reading on would take its next
        // request for the body. Such a body is abandoned, never drained, and
        // an HTTP/1 connection is closed after the refusal: hyper itself
        // reads once more "in case a tiny body was included", which can
        // swallow a next request that arrived meanwhile.
        let expects_continue = request.headers().contains_key(EXPECT);
        // The engine drains a body itself, after the response, before it
        // reads the next request from the same bytes.
        let drain = !expects_continue && matches!(request.body(), IncomingBody::Hyper(_));
        let close_if_refused = expects_continue && request.version() <= Version::HTTP_11;
        let request = request.map(|body| {
            if http_body::Body::is_end_stream(&body) {
                // No body to time (a GET): and `Empty` is a unit, so boxing it
                // allocates nothing.
                Body::empty()
            } else {
                let body = DrainOnDrop {
                    body: Some(StallTimeout::new(body, timeout, Side::Client)),
                    drain,
                };
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
            started: Instant::now(),
            connection: Some(Arc::clone(shared)),
            busy: Some(busy),
            close_if_refused,
            entry,
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
    request: Request<Body>,
) -> Result<Response<ResponseBody<Body>>, Infallible> {
    let (parts, body) = request.into_parts();
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
                response.map(|body| ResponseBody::inner(body, None))
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
    let mut request = Request::from_parts(parts, Body::from(body));
    request.extensions_mut().insert(listed);
    shared.inner.call_ready(request).await
}

/// The most of an unwanted request body that is read and thrown away.
const DRAIN_LIMIT: u64 = 64 * 1024;

/// A request body that, dropped before its end (the request was refused, or
/// the backend answered early), is read to its end in the background when
/// little is left, instead of being abandoned. An abandoned body costs the
/// client its connection (HTTP/1.1) or gets its stream reset under it
/// (HTTP/2), which some clients report as an error instead of the refusal.
/// Bounded by [`DRAIN_LIMIT`] and by the body's stall timeout.
struct DrainOnDrop {
    body: Option<StallTimeout<IncomingBody>>,
    /// False when the body must be abandoned instead (`Expect: 100-continue`).
    drain: bool,
}

impl http_body::Body for DrainOnDrop {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body
            .as_ref()
            .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map(http_body::Body::size_hint)
            .unwrap_or_default()
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        if !self.drain
            || http_body::Body::is_end_stream(&body)
            || http_body::Body::size_hint(&body)
                .upper()
                .is_some_and(|left| left > DRAIN_LIMIT)
        {
            return;
        }
        // Outside a runtime (shutting down) the body is simply abandoned.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut read = 0u64;
            loop {
                let frame =
                    std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx))
                        .await;
                match frame {
                    Some(Ok(frame)) => {
                        read += frame.data_ref().map_or(0, |data| data.len() as u64);
                        if read > DRAIN_LIMIT {
                            break;
                        }
                    }
                    Some(Err(_)) | None => break,
                }
            }
        });
    }
}

pin_project! {
    /// Records the outcome and latency of one request when its response
    /// headers are ready, and hands the connection's busy mark on to the
    /// response body.
    pub struct Metered {
        started: Instant,
        // For its metrics: one reference count instead of the three a
        // `Metrics` clone takes. Handed on to the response body, which
        // counts a body cut after the head.
        connection: Option<Arc<ConnectionShared>>,
        // An answer made by the gateway closes the connection (see `call`).
        close_if_refused: bool,
        // Both handed on to the response body; `busy` is `None` once the
        // response is out.
        busy: Option<Busy>,
        entry: Option<Entry>,
        #[pin]
        stage: Stage,
    }

    impl PinnedDrop for Metered {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (Some(_), Some(connection)) = (this.busy, this.connection) {
                // Dropped before an answer: the client went away while the
                // request waited (for admission, for the backend).
                connection
                    .metrics
                    .observe(Outcome::ClientError, this.started.elapsed());
            }
        }
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
        let outcome = Outcome::of(&response);
        let mut response = response;
        if *this.close_if_refused && outcome != Outcome::Forwarded {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        let connection = this.connection.take();
        if let Some(connection) = &connection {
            connection.metrics.observe(outcome, this.started.elapsed());
        }
        let busy = this.busy.take();
        let mut entry = this.entry.take();
        if let Some(entry) = &mut entry {
            entry.answered(outcome, response.status());
        }
        Poll::Ready(Ok(response.map(|body| Relayed {
            body,
            _busy: busy,
            entry,
            connection,
        })))
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
        // Written when dropped, with the bytes counted here.
        entry: Option<Entry>,
        connection: Option<Arc<ConnectionShared>>,
    }
}

/// A response whose body failed after its head was relayed, for `why`: into
/// the metrics and the access log.
fn cut(connection: Option<&ConnectionShared>, entry: Option<&mut Entry>, why: Outcome) {
    if let Some(connection) = connection {
        connection.metrics.response_cut();
    }
    if let Some(entry) = entry {
        entry.cut(why);
    }
}

impl http_body::Body for Relayed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.body.as_mut().poll_frame(cx));
        // Shared fences: no byte of the response goes out once the lease its
        // request was admitted under has ended (another instance may be
        // serving a higher token by now).
        if matches!(frame, Some(Ok(_))) && this.body.as_ref().get_ref().lease_ended() {
            tracing::warn!("lease ended while a response was relayed: the response is cut");
            let why = Outcome::FenceStoreUnavailable;
            cut(this.connection.as_deref(), this.entry.as_mut(), why);
            let ended = LeaseEnded {
                stage: LeaseStage::RelayingResponse,
            };
            return Poll::Ready(Some(Err(axum::Error::new(ended))));
        }
        match (&frame, this.entry.as_mut()) {
            (Some(Ok(frame)), Some(entry)) => {
                if let Some(data) = frame.data_ref() {
                    entry.bytes_out += data.len() as u64;
                }
            }
            (Some(Err(_)), entry) => {
                // The head (and its status) is already out: the client sees
                // a cut connection; the metrics and the log see the failure.
                cut(this.connection.as_deref(), entry, Outcome::UpstreamError);
            }
            _ => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
