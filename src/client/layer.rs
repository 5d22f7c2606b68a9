//! A tower layer that sends the token with every request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{HeaderValue, Request};
use tower_layer::Layer;
use tower_service::Service;

use super::token_source::{LockLost, TokenSource};

/// The gateway's default token header (`--token-header`).
const DEFAULT_HEADER: HeaderName = HeaderName::from_static("x-fencing-token");

/// Wraps an HTTP client service so that each request carries the token of
/// `source` in one header field (`X-Fencing-Token` unless
/// [`header`](Self::header) names another, as `x-ms-fencing-token` for a
/// gateway in front of Azure Blob). A field already on the request is
/// replaced: the gateway refuses a token sent twice.
#[derive(Debug, Clone)]
pub struct FencingTokenLayer<T> {
    source: T,
    header: HeaderName,
}

impl<T> FencingTokenLayer<T> {
    /// Tokens from `source` in `X-Fencing-Token`.
    pub fn new(source: T) -> Self {
        FencingTokenLayer {
            source,
            header: DEFAULT_HEADER,
        }
    }

    /// Tokens in `header` instead (the gateway's `--token-header`).
    pub fn header(mut self, header: HeaderName) -> Self {
        self.header = header;
        self
    }
}

impl<S, T: Clone> Layer<S> for FencingTokenLayer<T> {
    type Service = FencingToken<S, T>;

    fn layer(&self, inner: S) -> Self::Service {
        FencingToken {
            inner,
            source: self.source.clone(),
            header: self.header.clone(),
        }
    }
}

/// The service [`FencingTokenLayer`] makes.
#[derive(Debug, Clone)]
pub struct FencingToken<S, T> {
    inner: S,
    source: T,
    header: HeaderName,
}

/// A request this layer did not send, or the inner service's error.
#[derive(Debug, thiserror::Error)]
pub enum SendError<E> {
    /// The token source knows the lock is lost: nothing was sent.
    #[error(transparent)]
    LockLost(LockLost),
    /// The wrapped client's own error.
    #[error(transparent)]
    Service(E),
}

impl<S, T, B> Service<Request<B>> for FencingToken<S, T>
where
    S: Service<Request<B>>,
    T: TokenSource,
{
    type Response = S::Response;
    type Error = SendError<S::Error>;
    type Future = FenceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(SendError::Service)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // Read at the moment of sending, not when the client was built: a
        // source follows its lock across grants and losses.
        match self.source.token() {
            Ok(token) => {
                request
                    .headers_mut()
                    .insert(self.header.clone(), HeaderValue::from(token));
                FenceFuture {
                    state: SendState::Sending {
                        inner: self.inner.call(request),
                    },
                }
            }
            Err(lost) => FenceFuture {
                state: SendState::Refused { lost: Some(lost) },
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a [`FencingToken`] service.
    pub struct FenceFuture<F> {
        #[pin]
        state: SendState<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum SendState<F> {
        Sending { #[pin] inner: F },
        Refused { lost: Option<LockLost> },
    }
}

impl<F, R, E> Future for FenceFuture<F>
where
    F: Future<Output = Result<R, E>>,
{
    type Output = Result<R, SendError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Sending { inner } => inner.poll(cx).map_err(SendError::Service),
            StateProjection::Refused { lost } => Poll::Ready(Err(SendError::LockLost(
                lost.take()
                    .unwrap_or_else(|| LockLost::new("polled after it was refused")),
            ))),
        }
    }
}
