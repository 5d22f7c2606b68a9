//! Reading a body off a connection, as its framing says, for both sides:
//! a client's request body and a backend's response body. Data is handed
//! on as slices of the read buffer, never copied.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use tokio::io::AsyncRead;

use crate::http1::framing::{BodyLength, ChunkedDecoder, FramingError, Step};
use crate::http1::head::parse_trailers;

/// What a read asks for at least.
const READ_SIZE: usize = 8 * 1024;

/// Reads more of `stream` into `read`: the number of bytes, 0 at its end.
pub(super) fn poll_fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if read.capacity() - read.len() < READ_SIZE / 2 {
        read.reserve(READ_SIZE);
    }
    tokio_util::io::poll_read_buf(Pin::new(stream), cx, read)
}

/// Where a body being read is.
#[derive(Debug)]
pub(super) enum Decoding {
    /// This many bytes left.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the connection closes (responses only).
    UntilClose,
    /// Read to its end.
    Done,
    /// Failed or abandoned: the connection cannot be reused.
    Broken,
}

impl Decoding {
    /// The start of a body delimited by `length`.
    pub(super) fn new(length: BodyLength) -> Self {
        match length {
            BodyLength::Empty | BodyLength::Length(0) => Decoding::Done,
            BodyLength::Length(n) => Decoding::Length(n),
            BodyLength::Chunked => Decoding::Chunked(ChunkedDecoder::default()),
            BodyLength::UntilClose => Decoding::UntilClose,
        }
    }

    /// Nothing more to read (read to its end, or failed).
    pub(super) fn is_over(&self) -> bool {
        matches!(self, Decoding::Done | Decoding::Broken)
    }

    pub(super) fn size_hint(&self) -> SizeHint {
        match self {
            Decoding::Length(n) => SizeHint::with_exact(*n),
            Decoding::Chunked(_) | Decoding::UntilClose => SizeHint::default(),
            Decoding::Done | Decoding::Broken => SizeHint::with_exact(0),
        }
    }
}

/// What a body failed with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Reading the connection failed.
    #[error("reading the body failed")]
    Io(#[source] io::Error),
    /// The connection closed before the body's end.
    #[error("the connection closed before the end of the body")]
    Incomplete,
    /// The chunked framing was malformed.
    #[error("body framing: {0}")]
    Framing(#[from] FramingError),
}

/// The next frame of the body `decoding` describes, from `read` and then
/// `stream`. `decoding` ends `Done` at the body's end, `Broken` on an error.
pub(super) fn poll_frame<S: AsyncRead + Unpin>(
    decoding: &mut Decoding,
    read: &mut BytesMut,
    stream: &mut S,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
    let error = loop {
        match decoding {
            Decoding::Done | Decoding::Broken => return Poll::Ready(None),
            Decoding::Length(left) => {
                if !read.is_empty() {
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(read.len());
                    let data = read.split_to(n).freeze();
                    *left -= n as u64;
                    if *left == 0 {
                        *decoding = Decoding::Done;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
            }
            Decoding::UntilClose => {
                if !read.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(read.split().freeze()))));
                }
            }
            Decoding::Chunked(decoder) => match decoder.step(read) {
                Ok(Step::Framing(n)) => {
                    read.advance(n);
                    continue;
                }
                Ok(Step::Data(n)) => {
                    return Poll::Ready(Some(Ok(Frame::data(read.split_to(n).freeze()))));
                }
                Ok(Step::Trailers { n, fields }) => {
                    let trailers = if fields.is_empty() {
                        Some(HeaderMap::new())
                    } else {
                        parse_trailers(&read[fields])
                    };
                    read.advance(n);
                    let Some(trailers) = trailers else {
                        break FramingError::BadTrailer.into();
                    };
                    *decoding = Decoding::Done;
                    if trailers.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                Ok(Step::NeedMore) => {}
                Err(error) => break error.into(),
            },
        }
        match std::task::ready!(poll_fill(stream, read, cx)) {
            Ok(0) if matches!(decoding, Decoding::UntilClose) => {
                *decoding = Decoding::Done;
                return Poll::Ready(None);
            }
            Ok(0) => break BodyError::Incomplete,
            Ok(_) => {}
            Err(error) => break BodyError::Io(error),
        }
    };
    *decoding = Decoding::Broken;
    Poll::Ready(Some(Err(error)))
}
