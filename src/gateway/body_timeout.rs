//! A body that fails when it makes no progress for a while: a client's
//! request body that stalls past `--client-body-timeout`, or a backend's
//! response body that pauses past `--upstream-timeout`.
//!
//! Written here rather than taken from tower-http's `TimeoutBody`, which
//! creates and registers a timer on every poll: this one arms its timer
//! only when the inner body is not ready, so a body that is already there
//! (most small requests) never touches the timer wheel, and a streaming one
//! re-arms it once per wait rather than once per poll.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

/// The boxed error of a body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which side stopped sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client, sending a request body.
    Client,
    /// The backend, sending a response body.
    Upstream,
}

/// The error a [`StallTimeout`] body fails with; found again in an error's
/// `source()` chain with [`BodyStalled::find`].
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("{} sent no body byte for {after:?}", match side { Side::Client => "the client", Side::Upstream => "the backend" })]
pub(crate) struct BodyStalled {
    pub(crate) side: Side,
    pub(crate) after: Duration,
}

impl BodyStalled {
    /// The stall at the root of `error`, if that is what it is.
    pub(crate) fn find(error: &(dyn std::error::Error + 'static)) -> Option<BodyStalled> {
        find_cause::<BodyStalled>(error).copied()
    }
}

/// The error of type `T` in `error`'s chain of sources, if there is one:
/// hyper hides what a body failed with behind its own error.
pub(crate) fn find_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

pin_project! {
    /// `body`, failing with [`BodyStalled`] when no frame comes for `limit`.
    pub(crate) struct StallTimeout<B> {
        #[pin]
        body: B,
        limit: Duration,
        side: Side,
        // Boxed and created on the first wait only: most bodies never wait.
        timer: Option<Pin<Box<Sleep>>>,
        // A frame came since the timer was last armed.
        progressed: bool,
    }
}

impl<B> StallTimeout<B> {
    pub(crate) fn new(body: B, limit: Duration, side: Side) -> Self {
        StallTimeout {
            body,
            limit,
            side,
            timer: None,
            progressed: false,
        }
    }
}

impl<B> Body for StallTimeout<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.body.poll_frame(cx) {
            *this.progressed = true;
            return Poll::Ready(frame.map(|result| result.map_err(Into::into)));
        }
        let deadline = Instant::now() + *this.limit;
        let timer = match this.timer {
            Some(timer) => {
                if *this.progressed {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => this
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        *this.progressed = false;
        std::task::ready!(timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(BodyStalled {
            side: *this.side,
            after: *this.limit,
        }))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that yields one frame, then nothing for ever.
    struct OneThenSilence(Option<Bytes>);

    impl Body for OneThenSilence {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            match self.0.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fails_after_a_pause_of_the_limit() {
        let body = OneThenSilence(Some(Bytes::from_static(b"abc")));
        let mut body = StallTimeout::new(body, Duration::from_secs(60), Side::Client);
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "abc");
        let start = Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(60));
        let stalled = BodyStalled::find(error.as_ref()).unwrap();
        assert_eq!(stalled.side, Side::Client);
    }

    /// A body that yields `left` frames, one every `every`.
    struct Trickle {
        left: u32,
        every: Duration,
        sleep: Pin<Box<Sleep>>,
    }

    impl Body for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            std::task::ready!(self.sleep.as_mut().poll(cx));
            self.left -= 1;
            let next = Instant::now() + self.every;
            self.sleep.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_that_keeps_coming_never_fails() {
        let every = Duration::from_secs(50);
        let body = Trickle {
            left: 5,
            every,
            sleep: Box::pin(tokio::time::sleep(every)),
        };
        let body = StallTimeout::new(body, Duration::from_secs(60), Side::Upstream);
        let start = Instant::now();
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(collected, "xxxxx");
        assert_eq!(start.elapsed(), Duration::from_secs(250));
    }
}
