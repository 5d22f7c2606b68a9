//! Every deadline of one request through the data plane, in one place:
//!
//! - **connect**: a new backend connection, TLS included, within
//!   `--upstream-timeout` of the request's start ([`connect_by`]);
//! - **response head**: once the request body has been sent in full (at
//!   once, for a request without one), the response head within
//!   `--upstream-timeout` ([`response_head_within`], reading the moment the
//!   body ended from a [`SentAt`]); sending the body itself is not bounded,
//!   a slow upload goes at the client's pace;
//! - **body stalls, both ways**: a client's request body that pauses past
//!   `--client-body-timeout`, a backend's response body that pauses past
//!   `--upstream-timeout` ([`StallTimeout`], [`Side`]).
//!
//! The deadlines of a client connection rather than of a request (the
//! header timeout, the idle timeout) are in `activity.rs`.
//!
//! [`StallTimeout`] is written here rather than taken from tower-http's
//! `TimeoutBody`, which creates and registers a timer on every poll: this one
//! arms its timer only when the inner body is not ready, so a body that is
//! already there (most small requests) never touches the timer wheel, and a
//! streaming one re-arms it once per wait rather than once per poll.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::clock;
use super::BoxError;
use crate::store::Lease;

/// Runs `connect` (TCP and TLS handshakes to the backend) until
/// `deadline`; `None` when it took longer.
pub(crate) async fn connect_by<F: Future>(
    deadline: std::time::Instant,
    connect: F,
) -> Option<F::Output> {
    tokio::time::timeout_at(deadline.into(), connect).await.ok()
}

/// A timer kept with a backend connection from one request to the next, for
/// [`response_head_within`], where a timer per request was registered in
/// tokio's wheel and removed from it, under its lock, every time. Created
/// on first use.
pub(crate) type HeadTimer = Option<Pin<Box<Sleep>>>;

/// Polls `exchange` (the request sent, its response head awaited) until it
/// completes, or until `limit` has passed since the request body was sent in
/// full (`sent`; `None` for a request without a body, sent at `started`):
/// `None` then. Rather than wake this task when the body ends, `timer` is
/// armed for the earliest possible deadline and, when it fires, moved to the
/// real one if that is later. A timer already set to fire no later than
/// that (the previous request's deadline, on a connection that serves one
/// request after the other) is left as it is: it fires early at worst, once
/// per timeout, where moving it would cost three atomic operations on every
/// request.
///
/// `exchange` is borrowed, pinned where the caller made it: moved in, its
/// state (a few hundred bytes) would be copied on every request.
pub(crate) async fn response_head_within<F: Future>(
    limit: Duration,
    started: std::time::Instant,
    sent: Option<&SentAt>,
    timer: &mut HeadTimer,
    mut exchange: Pin<&mut F>,
) -> Option<F::Output> {
    let deadline = (started + limit).into();
    let timer = match timer {
        Some(timer) if timer.deadline() <= deadline => timer,
        Some(timer) => {
            timer.as_mut().reset(deadline);
            timer
        }
        None => timer.insert(Box::pin(tokio::time::sleep_until(deadline))),
    };
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = exchange.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        while timer.as_mut().poll(cx).is_ready() {
            // Decided against the deadline the timer fired at, by tokio's
            // clock, not against a reading of ours: a timer moved to a time
            // it holds for past fires again at once, and this loop would
            // never end.
            let fired = timer.deadline();
            let due = match sent.map(|sent| sent.at(started)) {
                None => (started + limit).into(),
                // Still uploading: look again one limit from now.
                Some(None) => fired.max(clock::now()) + limit,
                Some(Some(sent_at)) => (sent_at + limit).into(),
            };
            if due <= fired {
                return Poll::Ready(None);
            }
            timer.as_mut().reset(due);
        }
        Poll::Pending
    })
    .await
}

/// When a request body was sent in full, as nanoseconds after the request
/// started (plus one; 0 = not yet): the start of its response-head
/// deadline. Written by the body on its way to the backend, read by
/// [`response_head_within`] when its timer fires; it lives in the
/// forwarding future, which the body borrows it from.
#[derive(Debug, Default)]
pub(crate) struct SentAt {
    nanos: AtomicU64,
    /// With shared fences, the lease the request was admitted under: no
    /// chunk goes to the backend once it has ended. Kept here rather than
    /// in the request body, which every request moves several times: a
    /// larger body type measurably cost every request (docs/BENCHMARKS.md).
    pub(crate) lease: Option<Lease>,
}

impl SentAt {
    pub(crate) fn new(lease: Option<Lease>) -> Self {
        SentAt {
            nanos: AtomicU64::new(0),
            lease,
        }
    }

    /// The body has been sent in full (or failed, or was dropped) now.
    pub(crate) fn mark(&self, started: std::time::Instant) {
        let nanos = clock::now_std()
            .saturating_duration_since(started)
            .as_nanos() as u64
            + 1;
        let _ = self
            .nanos
            .compare_exchange(0, nanos, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn at(&self, started: std::time::Instant) -> Option<std::time::Instant> {
        match self.nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(started + Duration::from_nanos(nanos - 1)),
        }
    }
}

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
        let deadline = clock::now() + *this.limit;
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
    use tokio::time::Instant;

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

    const LIMIT: Duration = Duration::from_secs(60);

    /// How long `response_head_within` waits for an exchange that never
    /// answers, with `timer` as its connection kept it; `upload` says when
    /// the request body ends (`None`: there is none).
    async fn waits_for(timer: &mut HeadTimer, upload: Option<Duration>) -> Duration {
        let started = Instant::now();
        let sent = SentAt::new(None);
        if let Some(upload) = upload {
            let sent = &sent;
            let started = started.into_std();
            let marked = async move {
                tokio::time::sleep(upload).await;
                sent.mark(started);
            };
            let never = std::pin::pin!(std::future::pending::<()>());
            let waited = response_head_within(LIMIT, started, Some(sent), timer, never);
            let (waited, ()) = tokio::join!(waited, marked);
            assert!(waited.is_none());
        } else {
            let never = std::pin::pin!(std::future::pending::<()>());
            let waited = response_head_within(LIMIT, started.into_std(), None, timer, never);
            assert!(waited.await.is_none());
        }
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_head_is_awaited_the_limit_from_the_end_of_the_body() {
        let mut timer = None;
        assert_eq!(waits_for(&mut timer, None).await, LIMIT);
        // The same timer, fired, for the next request: the whole limit again.
        assert_eq!(waits_for(&mut timer, None).await, LIMIT);
        // A body that takes longer than the limit to send: counted from its end.
        let upload = Duration::from_secs(150);
        assert_eq!(waits_for(&mut timer, Some(upload)).await, upload + LIMIT);
        // One that ends within it: the same.
        let upload = Duration::from_secs(10);
        assert_eq!(waits_for(&mut timer, Some(upload)).await, upload + LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_set_earlier_fires_early_and_moves_to_the_deadline() {
        // The previous request's deadline, not passed yet: left as it is.
        let mut timer: HeadTimer = Some(Box::pin(tokio::time::sleep(Duration::from_secs(1))));
        assert_eq!(waits_for(&mut timer, None).await, LIMIT);
        // An answer in time leaves the timer armed, and the next request
        // still gets its whole limit.
        let answer = std::pin::pin!(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            7
        });
        let started = Instant::now().into_std();
        let answered = response_head_within(LIMIT, started, None, &mut timer, answer);
        assert_eq!(answered.await, Some(7));
        assert_eq!(waits_for(&mut timer, None).await, LIMIT);
    }
}
