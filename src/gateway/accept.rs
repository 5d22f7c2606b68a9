//! Serving one plane's listener: accepting connections (at most so many at
//! once), the TLS handshake, HTTP/1.1 or HTTP/2 on each connection with the
//! client limits, and a graceful stop.
//!
//! Written on hyper-util's connection builder rather than `axum::serve`,
//! which gives hyper no timer and no way to bound a client: the header and
//! idle timeouts (`activity.rs`), the connection cap and the head size limit
//! live here.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};

use super::activity::{Activity, ClientStream, Expiry, Order};
use super::clock::OneReading;
use super::config::ClientLimits;
use super::engine;
use super::BoxError;
use crate::http1::head::RequestHead;

/// The largest request head accepted: above it HTTP/1.1 clients get 431.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// How one plane serves its connections.
#[derive(Clone)]
pub(crate) struct PlaneOptions {
    /// For logs: "data plane" or "admin plane".
    pub(crate) name: &'static str,
    pub(crate) limits: ClientLimits,
    /// `Some` to speak TLS only.
    pub(crate) tls: Option<TlsAcceptor>,
}

/// A service for one connection, as hyper-util's connection builder takes
/// it; one name for bounds that `serve` and `drive` both need.
pub(crate) trait ConnectionService:
    hyper::service::Service<
        Request<Incoming>,
        Response = Response<Self::Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Send
    + 'static
{
    /// The response body.
    type Body: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> ConnectionService for S
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Body = B;
}

/// Whether a connection's HTTP/1.x requests are served by the gateway's
/// own engine (`http1`), and by which handler; HTTP/2 always goes to hyper.
pub(crate) trait MaybeEngine {
    /// The engine's handler.
    type Engine: engine::Handler<Body: Send> + Send + Sync + 'static;

    /// The handler, if this service's HTTP/1.x requests go to the engine.
    fn engine(&self) -> Option<Self::Engine>;
}

/// Services that the engine never serves (the admin plane's).
impl<S> MaybeEngine for hyper_util::service::TowerToHyperService<S> {
    type Engine = NoEngine;

    fn engine(&self) -> Option<NoEngine> {
        None
    }
}

/// The engine handler of a service without one: no value exists.
pub(crate) enum NoEngine {}

impl engine::Handler for NoEngine {
    type Body = http_body_util::Empty<bytes::Bytes>;

    fn call(
        &self,
        _: RequestHead,
        _: engine::RequestBody,
    ) -> impl Future<Output = Response<Self::Body>> + Send {
        // No value of `NoEngine` exists: this is never called.
        std::future::pending::<Response<Self::Body>>()
    }

    fn refused(&self, _: http::StatusCode, _: &'static str) -> crate::dialect::answer::AnswerStyle {
        match *self {}
    }
}

/// What a service for one connection may know of it.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) peer: SocketAddr,
    pub(crate) tls: bool,
    pub(crate) activity: Arc<Activity>,
}

/// Serves `listener` until `stop` turns true, with one service per
/// connection from `make`. Connection tasks are spawned on `tasks`, so that
/// the caller can wait for them to drain.
pub(crate) async fn serve<M, S>(
    listener: TcpListener,
    options: PlaneOptions,
    make: M,
    mut stop: watch::Receiver<bool>,
    tasks: TaskTracker,
) where
    M: Fn(&ConnInfo) -> S,
    S: ConnectionService + MaybeEngine,
{
    let permits = Arc::new(Semaphore::new(options.limits.max_connections));
    let builder = Arc::new(connection_builder());
    loop {
        // Take a permit before accepting: past the cap, connections wait in
        // the kernel's backlog instead of being accepted and starved.
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                // Out of file descriptors, most likely: wait a little rather
                // than spin on an accept that keeps failing.
                tracing::error!(plane = options.name, %error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        // Small request/response exchanges must not wait on Nagle.
        let _ = tcp.set_nodelay(true);
        let activity = Activity::new();
        let info = ConnInfo {
            peer,
            tls: options.tls.is_some(),
            activity: Arc::clone(&activity),
        };
        let service = make(&info);
        let options = options.clone();
        let builder = Arc::clone(&builder);
        let stop = stop.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let stream = match &options.tls {
                None => ClientStream::plain(tcp, Arc::clone(&activity)),
                Some(acceptor) => {
                    let handshake = acceptor.accept(tcp);
                    match tokio::time::timeout(options.limits.header_timeout, handshake).await {
                        Ok(Ok(tls)) => ClientStream::tls(tls, Arc::clone(&activity)),
                        Ok(Err(error)) => {
                            tracing::debug!(plane = options.name, %peer, %error, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(plane = options.name, %peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            drive(&builder, stream, service, &activity, &options, stop, peer).await;
        });
    }
}

/// Runs one connection to its end: the client closes it, it breaks a
/// limit, or a stop drains it.
///
/// The limits and the stop are watched by a task of their own, which tells
/// this one through [`Activity::order`]: polling a timer and a stop signal
/// beside the connection on every wake-up cost hundreds of instructions per
/// request, where reading one atomic costs a few.
async fn drive<S: ConnectionService + MaybeEngine>(
    builder: &auto::Builder<TokioExecutor>,
    stream: ClientStream,
    service: S,
    activity: &Arc<Activity>,
    options: &PlaneOptions,
    mut stop: watch::Receiver<bool>,
    peer: SocketAddr,
) {
    let watchdog = tokio::spawn({
        let activity = Arc::clone(activity);
        let limits = options.limits;
        async move {
            let stopped = async move {
                // An error means the gateway is gone: a stop too.
                let _ = stop.wait_for(|stop| *stop).await;
            };
            tokio::select! {
                expiry = activity.expired(&limits) => activity.order(Order::Close(expiry)),
                () = stopped => {
                    activity.order(Order::Drain);
                    // A draining connection still obeys the limits.
                    let expiry = activity.expired(&limits).await;
                    activity.order(Order::Close(expiry));
                }
            }
        }
    });
    let result = match service.engine() {
        Some(handler) if !stream.negotiated_h2() => {
            engine(builder, stream, service, handler, activity, options).await
        }
        _ => hyper_connection(builder, TokioIo::new(stream), service, activity).await,
    };
    watchdog.abort();
    match result {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::debug!(plane = options.name, %peer, error = %error, "client connection ended with an error");
        }
        Err(expiry) => {
            // Dropping the connection closed it; nothing was in progress.
            tracing::debug!(plane = options.name, %peer, ?expiry, "closed a slow or idle client connection");
        }
    }
}

/// The start of HTTP/2's connection preface (RFC 9113 §3.4): a plaintext
/// client that speaks HTTP/2 from its first byte (h2c with prior knowledge).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Serves a connection with the HTTP/1.1 engine, or with hyper if the
/// client's first bytes are HTTP/2's preface.
async fn engine<S: ConnectionService, H: engine::Handler>(
    builder: &auto::Builder<TokioExecutor>,
    mut stream: ClientStream,
    service: S,
    handler: H,
    activity: &Arc<Activity>,
    options: &PlaneOptions,
) -> Result<Result<(), BoxError>, Expiry> {
    let mut read = bytes::BytesMut::with_capacity(8 * 1024);
    let limits = engine::Limits {
        max_head: MAX_HEAD,
        drain_timeout: options.limits.body_timeout,
    };
    let mut orders = activity.orders();
    // Enough of the first bytes to tell HTTP/2's preface from a request.
    let sniffed = std::future::poll_fn(|cx| {
        if let Some(Order::Close(expiry)) = orders.poll(cx) {
            return Poll::Ready(Err(expiry));
        }
        loop {
            let common = read.len().min(H2_PREFACE.len());
            if read[..common] != H2_PREFACE[..common] || common == H2_PREFACE.len() {
                return Poll::Ready(Ok(true));
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut stream), cx, &mut read) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(Ok(false)),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await?;
    if !sniffed {
        return Ok(Ok(()));
    }
    if read.starts_with(H2_PREFACE) {
        let replayed = Replay {
            first: read.freeze(),
            stream,
        };
        return hyper_connection(builder, TokioIo::new(replayed), service, activity).await;
    }
    let draining = AtomicBool::new(false);
    let serving = engine::serve(stream, read, &handler, &draining, limits);
    let mut serving = pin!(serving);
    // Each wake-up of the connection (a request read and sent, a response
    // read and written) reads the clock once for all its deadlines and
    // measures.
    OneReading::new(std::future::poll_fn(|cx| {
        match orders.poll(cx) {
            Some(Order::Close(expiry)) => return Poll::Ready(Err(expiry)),
            Some(Order::Drain) => draining.store(true, Ordering::Relaxed),
            None => {}
        }
        serving
            .as_mut()
            .poll(cx)
            .map(|result| Ok(result.map_err(BoxError::from)))
    }))
    .await
}

/// A connection served by hyper (HTTP/2, and the admin plane's HTTP/1.1).
async fn hyper_connection<S: ConnectionService, I>(
    builder: &auto::Builder<TokioExecutor>,
    io: TokioIo<I>,
    service: S,
    activity: &Arc<Activity>,
) -> Result<Result<(), BoxError>, Expiry>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let connection = builder.serve_connection(io, service);
    let mut connection = pin!(connection);
    let mut draining = false;
    let mut orders = activity.orders();
    std::future::poll_fn(|cx| {
        match orders.poll(cx) {
            Some(Order::Close(expiry)) => return Poll::Ready(Err(expiry)),
            Some(Order::Drain) if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
            _ => {}
        }
        connection.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// A client stream whose first bytes, already read, are read again.
struct Replay {
    first: bytes::Bytes,
    stream: ClientStream,
}

impl tokio::io::AsyncRead for Replay {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.first.is_empty() {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        }
        let n = this.first.len().min(buf.remaining());
        buf.put_slice(&this.first.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Replay {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // The header timeout is ours (activity.rs): hyper's would also
        // close keep-alive connections idle for that long.
        .header_read_timeout(None)
        // hyper's default, kept on purpose: the read side's EOF ends the
        // connection and cancels its request. A client that half-closes
        // after its request (`nc -N`) gets no answer, but a client that
        // went away stops holding its key at once; the two cannot be told
        // apart until a response is written (README, "Forwarding").
        .half_close(false)
        // A head that does not fit is answered 431. Bodies are read in
        // chunks of at most this size too, which costs nothing measurable.
        .max_buf_size(MAX_HEAD);
    builder.http2().max_header_list_size(MAX_HEAD as u32);
    builder
}

/// Errors of one connection that was being accepted, not of the listener.
fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
