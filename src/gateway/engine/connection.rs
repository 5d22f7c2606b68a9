//! One HTTP/1.1 connection to the backend, driven by the task of the
//! request that uses it: no task of its own, no channel between the request
//! and its connection (docs/BENCHMARKS.md: hyper's client cost a second task
//! and three channels per request).
//!
//! [`Connection::send`] writes a request head and its body while watching
//! for the response head, so that a backend that answers before it has read
//! the whole body (a 413, a 401) is heard instead of waited on; the
//! response's body is then read by a [`BackendBody`](super::BackendBody)
//! that owns the connection and gives it back to the pool at its end.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::body::poll_fill;
use super::encode;
use super::outbound::{self, Outbound, WriteError, SPARE_LIMIT};
use crate::gateway::deadlines::HeadTimer;
use crate::gateway::pool::Reusable;
use crate::gateway::BoxError;
use crate::http1::head::{parse_response, HeadError, Parsed, ResponseHead};

/// The largest response head.
const MAX_HEAD: usize = 64 * 1024;

/// The byte stream to the backend.
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A connection to the backend and the bytes read from it that no
/// response has used yet.
pub(crate) struct Connection {
    pub(super) stream: Stream,
    pub(super) read: BytesMut,
    /// The buffer the last request head was written from, for the next
    /// request on this connection (one allocation per connection, not per
    /// request).
    spare: Vec<u8>,
    /// The proxy's response-head timer, kept with the connection (see
    /// [`HeadTimer`]).
    timer: HeadTimer,
}

impl Reusable for Connection {
    /// Open and quiet: an idle connection with something to read was closed
    /// by the backend (end of stream), or is out of step with it.
    fn is_open(&self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let tcp = self.stream.tcp();
        // tokio's own record of the socket's readiness first: after a
        // response read to its end (a short read clears it) nothing is
        // pending, and the answer costs no system call. Read without
        // registering a waker (`poll_read_ready` would take the socket's
        // waiter lock, and put a no-op waker in place of the task's). Only
        // a socket marked readable is asked, with a peek, whether that is
        // data or its end.
        if tcp.try_io(Interest::READABLE, || Ok(())).is_err() {
            return true;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        tcp.poll_peek(&mut cx, &mut buf).is_pending()
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendSendError {
    /// Writing the request failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading the connection failed.
    #[error("connection error")]
    Read(#[source] io::Error),
    /// The backend closed the connection without a (whole) response head.
    #[error("the backend closed the connection before answering")]
    Closed,
    /// The response head was refused.
    #[error("bad response head")]
    Head(#[from] HeadError),
}

/// A failed exchange, and the request again if none of it was written (so
/// that it may be sent on another connection).
pub(crate) struct Failed<B> {
    pub(crate) error: BackendSendError,
    pub(crate) unsent: Option<BackendRequest<B>>,
}

/// A request ready for the backend: its head (framing fields included) and
/// its body.
pub(crate) struct BackendRequest<B> {
    outbound: Outbound<B>,
    /// A `HEAD` request, whose response has no body.
    to_head: bool,
}

impl<B> BackendRequest<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// The request whose head `write_head` writes into `out` (emptied
    /// first; told whether there is a body and its size if known, it says
    /// how the body is framed), with `body`; `to_head` for a `HEAD`, whose
    /// response has no body.
    pub(crate) fn new(
        mut out: Vec<u8>,
        body: B,
        to_head: bool,
        write_head: impl FnOnce(&mut Vec<u8>, bool, Option<u64>) -> encode::Outgoing,
    ) -> Self {
        let has_body = !body.is_end_stream();
        let size = body.size_hint().exact();
        out.clear();
        out.reserve(outbound::capacity_for(size));
        let outgoing = write_head(&mut out, has_body, size);
        BackendRequest {
            outbound: Outbound::new(out, has_body.then_some(body), outgoing),
            to_head,
        }
    }
}

impl Connection {
    /// A connection over `stream`.
    pub(crate) fn new(stream: Stream) -> Self {
        Connection {
            stream,
            read: BytesMut::new(),
            spare: Vec::new(),
            timer: None,
        }
    }

    /// The response-head timer kept with this connection, taken for a
    /// request; given back with [`Connection::keep_timer`].
    pub(crate) fn take_timer(&mut self) -> HeadTimer {
        self.timer.take()
    }

    /// Keeps `timer` with this connection for its next request.
    pub(crate) fn keep_timer(&mut self, timer: HeadTimer) {
        self.timer = timer;
    }

    /// A buffer to write a request head into (see [`BackendRequest::new`]).
    pub(crate) fn take_buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.spare)
    }

    /// Sends `request` and reads the response head. The connection comes
    /// back with the head, to read the body from; `whole` says whether the
    /// request was sent in full (if not, the backend answered early and the
    /// connection cannot be reused).
    pub(crate) async fn send<B>(
        mut self,
        mut request: BackendRequest<B>,
    ) -> Result<(ResponseHead, Connection, bool), Failed<B>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let result = poll_fn(|cx| self.poll_exchange(cx, &mut request)).await;
        match result {
            Ok(head) => {
                let whole = request.outbound.done;
                let buffer = request.outbound.take_buffer();
                if buffer.capacity() <= SPARE_LIMIT {
                    self.spare = buffer;
                }
                Ok((head, self, whole))
            }
            Err(error) => {
                let unsent = (!request.outbound.written
                    && matches!(error, BackendSendError::Write(WriteError::Io(_))))
                .then_some(request);
                Err(Failed { error, unsent })
            }
        }
    }

    fn poll_exchange<B>(
        &mut self,
        cx: &mut Context<'_>,
        request: &mut BackendRequest<B>,
    ) -> Poll<Result<ResponseHead, BackendSendError>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        loop {
            if !request.outbound.done {
                if let Poll::Ready(result) = request.outbound.poll_step(&mut self.stream, cx) {
                    result?;
                    continue;
                }
            }
            // The write side waits (or is done): listen to the backend.
            match poll_fill(&mut self.stream, &mut self.read, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(BackendSendError::Closed)),
                Poll::Ready(Ok(_)) => loop {
                    match parse_response(&mut self.read, request.to_head, MAX_HEAD)? {
                        // Hop-by-hop fields go as the head is written
                        // for the client (or put in a map).
                        Parsed::Complete(head) => return Poll::Ready(Ok(head)),
                        Parsed::Interim => continue,
                        Parsed::Partial => break,
                    }
                },
                Poll::Ready(Err(error)) => return Poll::Ready(Err(BackendSendError::Read(error))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
