//! A backend response's body, read from its connection by whoever polls it
//! (the client connection's task), which it gives back to the pool once the
//! body has been read to its end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::connection::Connection;
use crate::gateway::pool::Pool;
use crate::http1::framing::{BodyLength, ChunkedDecoder, FramingError, Step};
use crate::http1::head::parse_trailers;

/// What an upstream response body failed with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResponseBodyError {
    /// Reading the connection failed.
    #[error("reading the response body failed")]
    Io(#[source] std::io::Error),
    /// The backend closed the connection before the body's end.
    #[error("the backend closed the connection before the end of the response body")]
    Incomplete,
    /// The chunked framing was malformed.
    #[error("response body framing: {0}")]
    Framing(#[from] FramingError),
}

enum Decoding {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// The body of a response from the backend.
pub(crate) struct ResponseBody {
    /// `None` once given back (or dropped).
    conn: Option<Connection>,
    decoding: Decoding,
    /// Whether the connection may take another request after this body.
    reuse: bool,
    pool: Arc<Pool<Connection>>,
}

impl ResponseBody {
    /// The body delimited by `length` on `conn`, which goes back to `pool`
    /// at its end if `reuse`.
    pub(crate) fn new(
        conn: Connection,
        length: BodyLength,
        reuse: bool,
        pool: Arc<Pool<Connection>>,
    ) -> Self {
        let decoding = match length {
            BodyLength::Empty | BodyLength::Length(0) => Decoding::Done,
            BodyLength::Length(n) => Decoding::Length(n),
            BodyLength::Chunked => Decoding::Chunked(ChunkedDecoder::default()),
            BodyLength::UntilClose => Decoding::UntilClose,
        };
        ResponseBody {
            conn: Some(conn),
            decoding,
            reuse,
            pool,
        }
    }

    /// The body is over: its connection goes back to the pool, unless it
    /// may not be reused or holds bytes no response asked for.
    fn end(&mut self) {
        self.decoding = Decoding::Done;
        if let Some(conn) = self.conn.take() {
            if self.reuse && conn.read.is_empty() {
                Pool::put(&self.pool, conn);
            }
        }
    }

    fn fail(
        &mut self,
        error: ResponseBodyError,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        self.conn = None;
        self.decoding = Decoding::Done;
        Poll::Ready(Some(Err(error)))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = ResponseBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut this.decoding {
                Decoding::Done => {
                    this.end();
                    return Poll::Ready(None);
                }
                Decoding::Length(left) => {
                    if !conn.read.is_empty() {
                        let n = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(conn.read.len());
                        let data = conn.read.split_to(n).freeze();
                        *left -= n as u64;
                        if *left == 0 {
                            this.end();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Decoding::UntilClose => {
                    if !conn.read.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(conn.read.split().freeze()))));
                    }
                }
                Decoding::Chunked(decoder) => match decoder.step(&conn.read) {
                    Ok(Step::Framing(n)) => {
                        conn.read.advance(n);
                        continue;
                    }
                    Ok(Step::Data(n)) => {
                        return Poll::Ready(Some(Ok(Frame::data(conn.read.split_to(n).freeze()))));
                    }
                    Ok(Step::Trailers { n, fields }) => {
                        let trailers = if fields.is_empty() {
                            Some(HeaderMap::new())
                        } else {
                            parse_trailers(&conn.read[fields])
                        };
                        conn.read.advance(n);
                        let Some(trailers) = trailers else {
                            return this.fail(FramingError::BadTrailer.into());
                        };
                        this.end();
                        if trailers.is_empty() {
                            return Poll::Ready(None);
                        }
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Step::NeedMore) => {}
                    Err(error) => return this.fail(error.into()),
                },
            }
            if conn.read.capacity() - conn.read.len() < 4096 {
                conn.read.reserve(8192);
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut conn.stream), cx, &mut conn.read) {
                Poll::Ready(Ok(0)) => {
                    if matches!(this.decoding, Decoding::UntilClose) {
                        this.reuse = false;
                        this.end();
                        return Poll::Ready(None);
                    }
                    return this.fail(ResponseBodyError::Incomplete);
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return this.fail(ResponseBodyError::Io(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.decoding, Decoding::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoding {
            Decoding::Done => SizeHint::with_exact(0),
            Decoding::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // A body read to its end but not polled once more (hyper stops at
        // `is_end_stream`) still gives its connection back.
        if matches!(self.decoding, Decoding::Done) {
            self.end();
        }
    }
}
