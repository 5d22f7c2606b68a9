use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::body::ResponseBody;
use super::config::WouldRefuse;
use crate::refusal::Refusal;

/// The admission-then-call path, boxed: it awaits the fence table, then the
/// inner service, and its type cannot be named.
pub(crate) type AdmitAndCall<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

pin_project! {
    /// The response future of [`Fencing`](super::Fencing).
    ///
    /// A refused request is answered right away without touching the inner
    /// service; an unfenced read goes straight to it; a fenced request first
    /// waits for admission.
    ///
    /// # Panics
    ///
    /// When polled again after it resolved, like any future that says so.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: FutureKind<F, B, E>,
    }
}

pin_project! {
    #[project = FutureKindProj]
    enum FutureKind<F, B, E> {
        Refused { refusal: Option<Refusal> },
        Passing { #[pin] future: F, mark: Option<WouldRefuse> },
        Admitting { future: AdmitAndCall<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn refused(refusal: Refusal) -> Self {
        ResponseFuture {
            kind: FutureKind::Refused {
                refusal: Some(refusal),
            },
        }
    }

    pub(crate) fn passing(future: F) -> Self {
        ResponseFuture {
            kind: FutureKind::Passing { future, mark: None },
        }
    }

    /// Passing, in report mode, a request `On` would have refused.
    pub(crate) fn reported(future: F, mark: WouldRefuse) -> Self {
        ResponseFuture {
            kind: FutureKind::Passing {
                future,
                mark: Some(mark),
            },
        }
    }

    pub(crate) fn admitting(future: AdmitAndCall<B, E>) -> Self {
        ResponseFuture {
            kind: FutureKind::Admitting { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureKindProj::Refused { refusal } => {
                // Polling after `Ready` is the caller's bug, never a request's:
                // say so, as futures' own `Ready` does, rather than make up an
                // answer that would be counted as something it is not.
                let Some(refusal) = refusal.take() else {
                    panic!("fencegate's ResponseFuture polled after completion");
                };
                Poll::Ready(Ok(refusal_response(&refusal)))
            }
            FutureKindProj::Passing { future, mark } => {
                let mark = *mark;
                future.poll(cx).map_ok(|response| {
                    let mut response = response.map(|body| ResponseBody::inner(body, None));
                    if let Some(mark) = mark {
                        response.extensions_mut().insert(mark);
                    }
                    response
                })
            }
            FutureKindProj::Admitting { future } => future.as_mut().poll(cx),
        }
    }
}

pub(crate) fn refusal_response<B>(refusal: &Refusal) -> Response<ResponseBody<B>> {
    refusal.to_response().map(ResponseBody::refusal)
}
