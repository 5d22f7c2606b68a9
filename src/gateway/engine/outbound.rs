//! Writing one message (a request to the backend, a response to a client):
//! its head, then its body framed as the head said, in as few writes as the
//! data allows: data that is there when the head is written goes in the
//! same write, small chunks are copied behind their framing, large ones are
//! written from where they are.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::Body;
use tokio::io::AsyncWrite;

use super::encode::{self as head, Outgoing};
use crate::gateway::BoxError;

/// Body data up to this size is copied behind the head (or the chunk size
/// line) and written with it in one call; larger data is written from where
/// it is.
const COPY_BELOW: usize = 16 * 1024;

/// The largest buffer a connection keeps for its next message (a client's
/// for its next response, a backend's for its next request).
pub(super) const SPARE_LIMIT: usize = 64 * 1024;

/// Room for a head and, when it is small and its size known, the body
/// that will be copied behind it: one allocation per message, never grown.
pub(super) fn capacity_for(body_size: Option<u64>) -> usize {
    let body = body_size.filter(|&n| n < COPY_BELOW as u64).unwrap_or(0) as usize;
    // Chunk framing of a small body, or the last chunk.
    512 + body + 16
}

/// Why writing a message failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// Writing the connection failed.
    #[error("connection error")]
    Io(#[source] io::Error),
    /// The body being sent failed (for a request, the client's doing: the
    /// backend sees it cut off).
    #[error("the body failed")]
    Body(#[source] BoxError),
    /// The body did not match its `Content-Length`.
    #[error("the body does not match its Content-Length")]
    BodyLength,
}

/// One message on its way out.
pub(crate) struct Outbound<B> {
    /// The head, then framing and small data, not yet written from `at` on.
    pub(super) out: Vec<u8>,
    at: usize,
    pub(super) body: Option<B>,
    pub(super) outgoing: Outgoing,
    /// Data written from where it is, after `out`.
    large: Bytes,
    /// A chunk's CRLF to write after `large`.
    crlf_after_large: bool,
    /// Bytes of the body still expected (`Outgoing::Length`).
    left: u64,
    /// Whether anything was written.
    pub(super) written: bool,
    /// Whether everything was written and flushed.
    pub(super) done: bool,
}

impl<B> Outbound<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// `head` (framing fields included), then `body` framed as `outgoing`
    /// says (no body: `None`).
    pub(crate) fn new(head: Vec<u8>, body: Option<B>, outgoing: Outgoing) -> Self {
        let left = match outgoing {
            Outgoing::Length(n) => n,
            _ => 0,
        };
        Outbound {
            out: head,
            at: 0,
            body,
            outgoing,
            large: Bytes::new(),
            crlf_after_large: false,
            left,
            written: false,
            done: false,
        }
    }

    /// The buffer heads and small data were written from, for another
    /// message.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.out
    }

    /// The buffer, taken for another message: this one must have been
    /// written in full or be given up.
    pub(crate) fn take_buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Writes until done: `Ready(Ok)` once everything was written and
    /// flushed, `Pending` while the socket or the body is not ready.
    pub(crate) fn poll_write_all<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), WriteError>> {
        while !self.done {
            std::task::ready!(self.poll_step(io, cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// One step: `Ready(Ok)` when something moved or everything is done
    /// (see `done`), `Pending` when waiting on the socket or the body.
    pub(crate) fn poll_step<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), WriteError>> {
        self.gather(cx)?;
        let out = &self.out[self.at..];
        if !out.is_empty() || !self.large.is_empty() {
            let slices = [IoSlice::new(out), IoSlice::new(&self.large)];
            let n = match Pin::new(&mut *io).poll_write_vectored(cx, &slices) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(WriteError::Io(io::ErrorKind::WriteZero.into())))
                }
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(WriteError::Io(error))),
                Poll::Pending => return Poll::Pending,
            };
            self.written = true;
            let from_out = n.min(out.len());
            self.at += from_out;
            self.large.advance(n - from_out);
            if self.at == self.out.len() {
                self.out.clear();
                self.at = 0;
            }
            if self.large.is_empty() && self.crlf_after_large {
                self.crlf_after_large = false;
                self.out.extend_from_slice(b"\r\n");
            }
            return Poll::Ready(Ok(()));
        }
        if self.body.is_none() {
            // All written: make sure it left (TLS keeps what it could not
            // write yet).
            std::task::ready!(Pin::new(&mut *io).poll_flush(cx)).map_err(WriteError::Io)?;
            self.done = true;
            return Poll::Ready(Ok(()));
        }
        // Nothing to write and the body has nothing ready (its poll in
        // `gather` will wake this task): what was written so far goes out
        // while the body pauses.
        std::task::ready!(Pin::new(&mut *io).poll_flush(cx)).map_err(WriteError::Io)?;
        Poll::Pending
    }

    /// Takes what the body has ready behind what waits to be written (the
    /// head, a chunk's framing), up to [`COPY_BELOW`] or one large piece, so
    /// that a head and a body that came with it leave in one write, not one
    /// each (a system call saved on each side of the connection).
    fn gather(&mut self, cx: &mut Context<'_>) -> Result<(), WriteError> {
        while self.large.is_empty() && self.out.len() - self.at < COPY_BELOW {
            let Some(body) = self.body.as_mut() else {
                return Ok(());
            };
            let Poll::Ready(frame) = Pin::new(&mut *body).poll_frame(cx) else {
                return Ok(());
            };
            // hyper's bodies say they have ended with their last frame rather
            // than with one more poll.
            let last = frame.is_none() || body.is_end_stream();
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.put_data(data)?,
                    Err(frame) => {
                        if let (Ok(trailers), Outgoing::Chunked) =
                            (frame.into_trailers(), self.outgoing)
                        {
                            head::put_trailers(&mut self.out, &trailers);
                            self.outgoing = Outgoing::Empty;
                        }
                    }
                },
                Some(Err(error)) => return Err(WriteError::Body(error.into())),
                None => {}
            }
            if last {
                self.finish_body()?;
            }
        }
        Ok(())
    }

    fn put_data(&mut self, data: Bytes) -> Result<(), WriteError> {
        if data.is_empty() {
            return Ok(());
        }
        let out = &mut self.out;
        match self.outgoing {
            Outgoing::Length(_) => {
                let len = data.len() as u64;
                if len > self.left {
                    return Err(WriteError::BodyLength);
                }
                self.left -= len;
            }
            Outgoing::Chunked => head::put_chunk_size(out, data.len()),
            Outgoing::UntilClose => {}
            // Data after the trailers, or for a message sent without a body.
            Outgoing::Empty => return Err(WriteError::BodyLength),
        }
        if data.len() < COPY_BELOW {
            out.extend_from_slice(&data);
            if self.outgoing == Outgoing::Chunked {
                out.extend_from_slice(b"\r\n");
            }
        } else {
            self.large = data;
            self.crlf_after_large = self.outgoing == Outgoing::Chunked;
        }
        Ok(())
    }

    /// The body is over: the last chunk, or a check that the length was met.
    /// Dropping the body is what tells the proxy that the request was sent
    /// in full (the upstream timeout starts then).
    fn finish_body(&mut self) -> Result<(), WriteError> {
        self.body = None;
        match self.outgoing {
            Outgoing::Chunked => self.out.extend_from_slice(b"0\r\n\r\n"),
            Outgoing::Length(_) if self.left != 0 => return Err(WriteError::BodyLength),
            _ => {}
        }
        self.outgoing = Outgoing::Empty;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;

    /// A connection that records each write call's bytes.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len();
            self.writes.push(all);
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A body of `chunks`, each ready only after one `Pending` when `slow`.
    struct Chunks {
        chunks: std::collections::VecDeque<&'static [u8]>,
        slow: bool,
        waited: bool,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.slow && !self.waited && !self.chunks.is_empty() {
                self.waited = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.waited = false;
            Poll::Ready(
                self.chunks
                    .pop_front()
                    .map(|c| Ok(Frame::data(Bytes::from_static(c)))),
            )
        }
    }

    async fn written(body: Chunks, outgoing: Outgoing) -> Vec<Vec<u8>> {
        let mut out = Outbound::new(b"PUT /k HTTP/1.1\r\n\r\n".to_vec(), Some(body), outgoing);
        let mut io = Recorder::default();
        std::future::poll_fn(|cx| out.poll_write_all(&mut io, cx))
            .await
            .unwrap();
        io.writes
    }

    #[tokio::test]
    async fn a_head_and_the_body_that_came_with_it_leave_in_one_write() {
        let body = Chunks {
            chunks: [&b"abc"[..], b"def"].into(),
            slow: false,
            waited: false,
        };
        let writes = written(body, Outgoing::Length(6)).await;
        assert_eq!(writes, [b"PUT /k HTTP/1.1\r\n\r\nabcdef".to_vec()]);
    }

    #[tokio::test]
    async fn a_head_does_not_wait_for_a_body_that_is_not_there_yet() {
        let body = Chunks {
            chunks: [&b"abc"[..], b"def"].into(),
            slow: true,
            waited: false,
        };
        let writes = written(body, Outgoing::Chunked).await;
        assert_eq!(
            writes,
            [
                b"PUT /k HTTP/1.1\r\n\r\n".to_vec(),
                b"3\r\nabc\r\n".to_vec(),
                b"3\r\ndef\r\n0\r\n\r\n".to_vec(),
            ]
        );
    }
}
