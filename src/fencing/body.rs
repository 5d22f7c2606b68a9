use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::fences::InFlight;

pin_project! {
    /// The response body of [`Fencing`](super::Fencing): either the inner
    /// service's body, which keeps the request in flight until it has been
    /// read to the end (or dropped), or the JSON of a refusal.
    pub struct ResponseBody<B> {
        #[pin]
        kind: BodyKind<B>,
    }
}

pin_project! {
    #[project = BodyKindProj]
    enum BodyKind<B> {
        Refusal { json: Option<Bytes> },
        Inner {
            #[pin]
            body: B,
            // Released when the body ends or errors, or with the body. The
            // contract counts a request in flight until its response has
            // been relayed, not just until its headers arrived.
            in_flight: Option<InFlight>,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn refusal(json: Bytes) -> Self {
        ResponseBody {
            kind: BodyKind::Refusal { json: Some(json) },
        }
    }

    pub(crate) fn inner(body: B, in_flight: Option<InFlight>) -> Self {
        ResponseBody {
            kind: BodyKind::Inner { body, in_flight },
        }
    }

    /// The inner service's body; `None` for a refusal.
    #[cfg(feature = "gateway")]
    pub(crate) fn inner_ref(&self) -> Option<&B> {
        match &self.kind {
            BodyKind::Inner { body, .. } => Some(body),
            BodyKind::Refusal { .. } => None,
        }
    }

    /// The inner service's body, mutably (not yet pinned); `None` for a
    /// refusal.
    #[cfg(feature = "gateway")]
    pub(crate) fn inner_mut(&mut self) -> Option<&mut B> {
        match &mut self.kind {
            BodyKind::Inner { body, .. } => Some(body),
            BodyKind::Refusal { .. } => None,
        }
    }

    /// Shared fences: the lease this response's request was admitted under,
    /// after whose end none of its bytes may be relayed (the gateway cuts
    /// the response; see `docs/SHARED.md`).
    #[cfg(feature = "gateway")]
    pub(crate) fn lease(&self) -> Option<&crate::store::Lease> {
        match &self.kind {
            BodyKind::Inner {
                in_flight: Some(in_flight),
                ..
            } => in_flight.lease(),
            _ => None,
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            BodyKindProj::Refusal { json } => Poll::Ready(json.take().map(|j| Ok(Frame::data(j)))),
            BodyKindProj::Inner { body, in_flight } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    in_flight.take();
                }
                Poll::Ready(frame)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Refusal { json } => json.is_none(),
            BodyKind::Inner { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Refusal { json } => {
                SizeHint::with_exact(json.as_ref().map_or(0, |j| j.len() as u64))
            }
            BodyKind::Inner { body, .. } => body.size_hint(),
        }
    }
}
