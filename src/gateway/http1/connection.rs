//! One HTTP/1.1 connection to the backend, driven by the task of the
//! request that uses it: no task of its own, no channel between the request
//! and its connection (docs/BENCHMARKS.md: hyper's client cost a second task
//! and three channels per request).
//!
//! [`Connection::send`] writes a request head and its body while watching
//! for the response head, so that a backend that answers before it has read
//! the whole body (a 413, a 401) is heard instead of waited on; the
//! response's body is then read by a [`ResponseBody`](super::ResponseBody)
//! that owns the connection and gives it back to the pool at its end.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::head::{self, parse_response, HeadError, Outgoing, Parsed, ResponseHead};
use crate::gateway::body_timeout::BoxError;
use crate::gateway::pool::Reusable;

/// Body data up to this size is copied behind the head (or the chunk size
/// line) and written with it in one call; larger data is written from where
/// it is.
const COPY_BELOW: usize = 16 * 1024;
/// What a read asks for at least.
const READ_SIZE: usize = 8 * 1024;

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
}

impl Reusable for Connection {
    /// Open and quiet: an idle connection with something to read was closed
    /// by the backend (end of stream), or is out of step with it.
    fn is_open(&self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(Waker::noop());
        self.stream.tcp().poll_peek(&mut cx, &mut buf).is_pending()
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Reading or writing the connection failed.
    #[error("connection error")]
    Io(#[source] io::Error),
    /// The backend closed the connection without a (whole) response head.
    #[error("the backend closed the connection before answering")]
    Closed,
    /// The response head was refused.
    #[error(transparent)]
    Head(#[from] HeadError),
    /// The request body failed: the client's doing. The backend saw it cut
    /// off.
    #[error("the request body failed")]
    RequestBody(#[source] BoxError),
    /// The request body did not match its `Content-Length`.
    #[error("the request body does not match its Content-Length")]
    BodyLength,
}

/// A failed exchange, and the request again if none of it was written (so
/// that it may be sent on another connection).
pub(crate) struct Failed<B> {
    pub(crate) error: SendError,
    pub(crate) unsent: Option<Request<B>>,
}

/// A request ready for the backend: its head (framing fields included) and
/// its body.
pub(crate) struct Request<B> {
    out: Vec<u8>,
    body: Option<B>,
    outgoing: Outgoing,
    /// A `HEAD` request, whose response has no body.
    to_head: bool,
}

impl<B: Body<Data = Bytes> + Unpin> Request<B> {
    /// The request of `parts` (prepared for the backend) with `body`.
    pub(crate) fn new(parts: &http::request::Parts, body: B) -> Self {
        let has_body = !body.is_end_stream();
        let mut out = Vec::with_capacity(512);
        let outgoing =
            head::write_request_head(&mut out, parts, has_body, body.size_hint().exact());
        Request {
            out,
            body: has_body.then_some(body),
            outgoing,
            to_head: parts.method == http::Method::HEAD,
        }
    }
}

/// The sending side of one exchange.
struct Sending<B> {
    request: Request<B>,
    /// How much of `request.out` has been written.
    at: usize,
    /// Data written from where it is, after `request.out`.
    large: Bytes,
    /// A chunk's CRLF to write after `large`.
    crlf_after_large: bool,
    /// Bytes of the body still expected (`Outgoing::Length`).
    left: u64,
    /// Whether anything was written.
    written: bool,
    done: bool,
}

impl Connection {
    /// A connection over `stream`.
    pub(crate) fn new(stream: Stream) -> Self {
        Connection {
            stream,
            read: BytesMut::new(),
        }
    }

    /// Sends `request` and reads the response head. The connection comes
    /// back with the head, to read the body from; `whole` says whether the
    /// request was sent in full (if not, the backend answered early and the
    /// connection cannot be reused).
    pub(crate) async fn send<B>(
        mut self,
        request: Request<B>,
    ) -> Result<(ResponseHead, Connection, bool), Failed<B>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let left = match request.outgoing {
            Outgoing::Length(n) => n,
            _ => 0,
        };
        let mut sending = Sending {
            request,
            at: 0,
            large: Bytes::new(),
            crlf_after_large: false,
            left,
            written: false,
            done: false,
        };
        let result = poll_fn(|cx| self.poll_exchange(cx, &mut sending)).await;
        match result {
            Ok(head) => Ok((head, self, sending.done)),
            Err(error) => {
                let unsent = (!sending.written && matches!(error, SendError::Io(_)))
                    .then_some(sending.request);
                Err(Failed { error, unsent })
            }
        }
    }

    fn poll_exchange<B>(
        &mut self,
        cx: &mut Context<'_>,
        sending: &mut Sending<B>,
    ) -> Poll<Result<ResponseHead, SendError>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        loop {
            if !sending.done {
                match self.poll_send(cx, sending) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => {}
                }
            }
            // The write side waits (or is done): listen to the backend.
            if self.read.capacity() - self.read.len() < READ_SIZE / 2 {
                self.read.reserve(READ_SIZE);
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.read) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(SendError::Closed)),
                Poll::Ready(Ok(_)) => loop {
                    match parse_response(&mut self.read, sending.request.to_head)? {
                        Parsed::Final(head) => return Poll::Ready(Ok(head)),
                        Parsed::Interim => continue,
                        Parsed::Partial => break,
                    }
                },
                Poll::Ready(Err(error)) => return Poll::Ready(Err(SendError::Io(error))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// One step of sending: `Ready(Ok)` when something moved (call again),
    /// `Pending` when waiting on the socket or the body, or when done.
    fn poll_send<B>(
        &mut self,
        cx: &mut Context<'_>,
        sending: &mut Sending<B>,
    ) -> Poll<Result<(), SendError>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let out = &sending.request.out[sending.at..];
        if !out.is_empty() || !sending.large.is_empty() {
            let slices = [IoSlice::new(out), IoSlice::new(&sending.large)];
            let n = match Pin::new(&mut self.stream).poll_write_vectored(cx, &slices) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(SendError::Io(io::ErrorKind::WriteZero.into())))
                }
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(SendError::Io(error))),
                Poll::Pending => return Poll::Pending,
            };
            sending.written = true;
            let from_out = n.min(out.len());
            sending.at += from_out;
            sending.large.advance(n - from_out);
            if sending.at == sending.request.out.len() {
                sending.request.out.clear();
                sending.at = 0;
            }
            if sending.large.is_empty() && sending.crlf_after_large {
                sending.crlf_after_large = false;
                sending.request.out.extend_from_slice(b"\r\n");
            }
            return Poll::Ready(Ok(()));
        }
        let Some(body) = sending.request.body.as_mut() else {
            // All written: make sure it left (TLS keeps what it could not
            // write yet), then only the response is left to wait for.
            std::task::ready!(Pin::new(&mut self.stream).poll_flush(cx)).map_err(SendError::Io)?;
            sending.done = true;
            return Poll::Pending;
        };
        let frame = match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                // What was written so far goes out while the client pauses.
                std::task::ready!(Pin::new(&mut self.stream).poll_flush(cx))
                    .map_err(SendError::Io)?;
                return Poll::Pending;
            }
        };
        // hyper's server bodies say they have ended with their last frame
        // rather than with one more poll.
        let last = frame.is_none() || body.is_end_stream();
        match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => sending.put_data(data)?,
                Err(frame) => {
                    if let (Ok(trailers), Outgoing::Chunked) =
                        (frame.into_trailers(), sending.request.outgoing)
                    {
                        head::put_trailers(&mut sending.request.out, &trailers);
                        sending.request.outgoing = Outgoing::Empty;
                    }
                }
            },
            Some(Err(error)) => return Poll::Ready(Err(SendError::RequestBody(error.into()))),
            None => {}
        }
        if last {
            sending.finish_body()?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<B> Sending<B> {
    fn put_data(&mut self, data: Bytes) -> Result<(), SendError> {
        if data.is_empty() {
            return Ok(());
        }
        let out = &mut self.request.out;
        match self.request.outgoing {
            Outgoing::Length(_) => {
                let len = data.len() as u64;
                if len > self.left {
                    return Err(SendError::BodyLength);
                }
                self.left -= len;
            }
            Outgoing::Chunked => head::put_chunk_size(out, data.len()),
            // Data after the trailers, or on a request sent without a body.
            Outgoing::Empty => return Err(SendError::BodyLength),
        }
        if data.len() < COPY_BELOW {
            out.extend_from_slice(&data);
            if self.request.outgoing == Outgoing::Chunked {
                out.extend_from_slice(b"\r\n");
            }
        } else {
            self.large = data;
            self.crlf_after_large = self.request.outgoing == Outgoing::Chunked;
        }
        Ok(())
    }

    /// The body is over: the last chunk, or a check that the length was met.
    /// Dropping the body is what tells the proxy that the request was sent
    /// in full (the upstream timeout starts then).
    fn finish_body(&mut self) -> Result<(), SendError> {
        self.request.body = None;
        match self.request.outgoing {
            Outgoing::Chunked => self.request.out.extend_from_slice(b"0\r\n\r\n"),
            Outgoing::Length(_) if self.left != 0 => return Err(SendError::BodyLength),
            _ => {}
        }
        self.request.outgoing = Outgoing::Empty;
        Ok(())
    }
}
