//! Request bodies, from the client's server to the backend connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use crate::gateway::deadlines::{SentAt, StallTimeout};
use crate::gateway::engine;
use crate::gateway::inbound::Inbound;
use crate::gateway::BoxError;
use crate::store::LeaseStage;

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

/// The most of an unwanted request body that is read and thrown away.
const DRAIN_LIMIT: u64 = 64 * 1024;

/// A request body that, dropped before its end (the request was refused, or
/// the backend answered early), is read to its end in the background when
/// little is left, instead of being abandoned. An abandoned body costs the
/// client its connection (HTTP/1.1) or gets its stream reset under it
/// (HTTP/2), which some clients report as an error instead of the refusal.
/// Bounded by [`DRAIN_LIMIT`] and by the body's stall timeout.
pub(crate) struct DrainOnDrop {
    body: Option<StallTimeout<IncomingBody>>,
    /// False when the body must be abandoned instead (`Expect: 100-continue`).
    drain: bool,
}

impl DrainOnDrop {
    pub(crate) fn new(body: StallTimeout<IncomingBody>, drain: bool) -> Self {
        DrainOnDrop {
            body: Some(body),
            drain,
        }
    }
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
    /// A request body that counts its bytes into an access-log entry's
    /// `bytes_in`.
    pub(crate) struct Counted<B> {
        #[pin]
        body: B,
        count: Arc<AtomicU64>,
    }
}

impl<B> Counted<B> {
    pub(crate) fn new(body: B, count: Arc<AtomicU64>) -> Self {
        Counted { body, count }
    }
}

impl<B: http_body::Body> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if let Some(Ok(frame)) = &frame {
            if let Some(data) = frame.data_ref() {
                this.count
                    .fetch_add(bytes::Buf::remaining(data) as u64, Ordering::Relaxed);
            }
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

pin_project! {
    /// The body of a request to the backend: the client's, recording when
    /// it has been sent in full (or failed, or was dropped), the moment the
    /// response-head deadline starts. The type of the backend connections'
    /// bodies, so that watching costs no box of its own; the record lives
    /// in the forwarding future, which outlives the body.
    pub(crate) struct ToBackend<'s> {
        #[pin]
        body: Body,
        started: Instant,
        // `None` for a request without a body: nothing to wait for.
        sent: Option<&'s SentAt>,
    }

    impl<'s> PinnedDrop for ToBackend<'s> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(sent) = this.sent {
                sent.mark(*this.started);
            }
        }
    }
}

impl<'s> ToBackend<'s> {
    /// `request` with its body watched into `sent` (and, with shared
    /// fences, checked against `sent`'s lease chunk by chunk); `None` for
    /// a request without a body, which has nothing to record.
    // Inlined: out of line, the request head (a few hundred bytes) is
    // copied in and out of it on every request.
    #[inline]
    pub(crate) fn watch(
        request: Inbound<Body>,
        started: Instant,
        sent: Option<&'s SentAt>,
    ) -> Inbound<ToBackend<'s>> {
        request.map_body(|body| ToBackend {
            body,
            started,
            sent,
        })
    }
}

impl http_body::Body for ToBackend<'_> {
    type Data = Bytes;
    type Error = axum::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if let Some(sent) = *this.sent {
            if let Some(lease) = &sent.lease {
                if let Err(ended) = lease.check(LeaseStage::SendingBody) {
                    return lease_ended(sent, *this.started, ended);
                }
            }
        }
        if !matches!(frame, Some(Ok(_))) {
            if let Some(sent) = this.sent {
                sent.mark(*this.started);
            }
        }
        Poll::Ready(frame)
    }

    // hyper drops a body that says it has ended (its Content-Length
    // reached) without polling it again: the drop signals that end.
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The end of a request body whose lease ended: kept out of line, so that
/// the lease check adds nothing but a branch to the body's hot path.
#[cold]
#[inline(never)]
fn lease_ended(
    sent: &SentAt,
    started: Instant,
    ended: crate::store::LeaseEnded,
) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
    sent.mark(started);
    Poll::Ready(Some(Err(axum::Error::new(ended))))
}
