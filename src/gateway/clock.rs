//! One reading of the clock per wake-up of a connection's task.
//!
//! A proxied request looks at the clock about eight times: the first byte
//! of its head (header timeout), its start (latency, access log), the
//! proxy's start (response-head deadline), the pool's idle check, the end
//! of its body, its answer, the pool's put, the connection's idle mark.
//! Nearly all of them fall in the same two wake-ups of the connection's
//! task (the request read and sent; the response read and written), and
//! each reading cost a `clock_gettime` (about 1.3 % of the gateway's time
//! at full speed, docs/BENCHMARKS.md). nginx reads its clock once per turn
//! of its event loop for the same reason.
//!
//! [`OneReading`] marks a poll of a connection's future: within it,
//! [`now`] reads the clock the first time and returns that reading after,
//! so time stands still for the length of one poll. A poll never waits: it
//! does the work that is ready (a few microseconds for a proxied request; a
//! large body written to a fast client may take longer, bounded by tokio's
//! budget of I/O operations per poll), far below any timeout here. Outside
//! such a poll (HTTP/2 streams, which hyper spawns as tasks of their own, the
//! watchdogs, the admin plane), [`now`] reads the clock every time: no
//! reading outlives the poll it was taken in.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
// tokio's clock, so that tests can pause it.
use tokio::time::Instant;

/// This thread's reading: whether a marked poll is in progress, and what
/// it read.
#[derive(Debug, Clone, Copy)]
enum Reading {
    /// No marked poll: every call reads the clock.
    Outside,
    /// In a marked poll that has not read the clock yet.
    Unread,
    /// In a marked poll, which read this.
    Read(Instant),
}

thread_local! {
    static READING: Cell<Reading> = const { Cell::new(Reading::Outside) };
}

/// Now: the clock read at most once per marked poll (see the module docs).
pub(crate) fn now() -> Instant {
    READING.with(|reading| match reading.get() {
        Reading::Outside => Instant::now(),
        Reading::Read(at) => at,
        Reading::Unread => {
            let at = Instant::now();
            reading.set(Reading::Read(at));
            at
        }
    })
}

/// The same as [`now`], as a `std` instant.
pub(crate) fn now_std() -> std::time::Instant {
    now().into_std()
}

pin_project! {
    /// A future whose every poll shares one reading of the clock (see the
    /// module docs).
    pub(crate) struct OneReading<F> {
        #[pin]
        inner: F,
    }
}

impl<F> OneReading<F> {
    pub(crate) fn new(inner: F) -> Self {
        OneReading { inner }
    }
}

impl<F: Future> Future for OneReading<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _poll = Marked::enter();
        self.project().inner.poll(cx)
    }
}

/// A marked poll in progress; what was before it comes back when it ends,
/// also by a panic.
struct Marked(Reading);

impl Marked {
    fn enter() -> Marked {
        Marked(READING.with(|reading| reading.replace(Reading::Unread)))
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        READING.with(|reading| reading.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn every_poll_reads_again_and_outside_every_call_does() {
        let (first, second) = OneReading::new(async {
            let first = now();
            tokio::time::advance(Duration::from_secs(1)).await;
            tokio::task::yield_now().await;
            // Another poll: another reading.
            (first, now())
        })
        .await;
        assert_eq!(second - first, Duration::from_secs(1));
        let outside = now();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(now() - outside, Duration::from_secs(1));
    }

    #[test]
    fn a_poll_shares_its_reading_and_restores_what_was_before() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(OneReading::new(async {
            let first = now();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(now(), first);
            // A marked poll within a marked poll: its own reading, and the
            // outer one's back after it.
            let inner = OneReading::new(async { now() }).await;
            assert!(inner > first);
            assert_eq!(now(), first);
        }));
        let outside = now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now() > outside);
    }
}
