//! A backend response's body, read from its connection by whoever polls it
//! (the client connection's task), which it gives back to the pool once the
//! body has been read to its end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::body::{self, BodyError, Decoding};
use super::connection::Connection;
use crate::gateway::pool::Pool;
use crate::http1::framing::BodyLength;

/// The body of a response from the backend.
pub(crate) struct BackendBody {
    /// `None` once given back (or dropped).
    conn: Option<Connection>,
    decoding: Decoding,
    /// Whether the connection may take another request after this body.
    reuse: bool,
    pool: Arc<Pool<Connection>>,
}

impl BackendBody {
    /// The body delimited by `length` on `conn`, which goes back to `pool`
    /// at its end if `reuse`.
    pub(crate) fn new(
        conn: Connection,
        length: BodyLength,
        reuse: bool,
        pool: Arc<Pool<Connection>>,
    ) -> Self {
        BackendBody {
            conn: Some(conn),
            // A close-delimited body leaves nothing to reuse.
            reuse: reuse && length != BodyLength::UntilClose,
            decoding: Decoding::new(length),
            pool,
        }
    }

    /// The body is over: its connection goes back to the pool if it ended
    /// where its framing said, may be reused, and holds no bytes no response
    /// asked for; else it is closed.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reuse && matches!(self.decoding, Decoding::Done) && conn.read.is_empty() {
                Pool::put(&self.pool, conn);
            }
        }
    }
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = std::task::ready!(body::poll_frame(
            &mut this.decoding,
            &mut conn.read,
            &mut conn.stream,
            cx
        ));
        if this.decoding.is_over() {
            this.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.decoding.is_over()
    }

    fn size_hint(&self) -> SizeHint {
        self.decoding.size_hint()
    }
}

impl Drop for BackendBody {
    fn drop(&mut self) {
        // A body read to its end but not polled once more (hyper stops at
        // `is_end_stream`) still gives its connection back.
        self.release();
    }
}
