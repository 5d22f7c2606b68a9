//! The proxy's pool of idle HTTP/1.1 connections to the backend.
//!
//! Written here rather than taken from hyper-util's legacy client because,
//! with one backend, that client's pool keys, guards and the task
//! it spawns per request to give a connection back were a large part of a
//! proxied request's cost (docs/BENCHMARKS.md). What it does that matters is
//! kept: an idle timeout (below the backend's keep-alive, hyper issues #2136
//! and #2275), enforced on checkout and by a reaper task; a connection goes
//! back only once its response is over; a closed one is never handed out.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

use super::body_timeout::{Side, StallTimeout};
use super::proxy::UpstreamBody;

/// Idle connections to the backend, the most recently used last (it is the
/// one reused first, so that surplus connections age out).
pub(crate) struct Pool {
    idle: Mutex<Vec<Idle>>,
    idle_timeout: Duration,
    /// The longest pause allowed within a response body.
    body_timeout: Duration,
    reaper_started: AtomicBool,
}

struct Idle {
    sender: SendRequest<UpstreamBody>,
    since: Instant,
}

impl Pool {
    /// An empty pool whose connections are closed after `idle_timeout` idle,
    /// and whose response bodies fail when they pause for `body_timeout`.
    pub(crate) fn new(idle_timeout: Duration, body_timeout: Duration) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            idle_timeout,
            body_timeout,
            reaper_started: AtomicBool::new(false),
        }
    }

    /// The response body `body`, which gives `sender`'s connection back to
    /// the pool once it has been read to the end, or at once if it is empty.
    /// A body that stalls fails, and its connection is not reused.
    pub(crate) fn release_after(
        pool: &Arc<Pool>,
        sender: SendRequest<UpstreamBody>,
        body: Incoming,
    ) -> Body {
        if http_body::Body::is_end_stream(&body) {
            Pool::checkin(pool, sender);
            Body::new(body)
        } else {
            let pooled = PooledBody {
                body,
                release: Some((sender, Arc::clone(pool))),
            };
            Body::new(StallTimeout::new(pooled, pool.body_timeout, Side::Upstream))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // Held for a push or a pop; the vector stays consistent whatever
        // happens, so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection ready for a request, if one is idle. Connections idle
    /// for too long or closed by the backend are dropped (which closes them).
    pub(crate) fn checkout(&self) -> Option<SendRequest<UpstreamBody>> {
        let now = Instant::now();
        let mut idle = self.lock();
        while let Some(entry) = idle.pop() {
            if now.duration_since(entry.since) < self.idle_timeout && entry.sender.is_ready() {
                return Some(entry.sender);
            }
        }
        None
    }

    /// Returns a connection whose response is done. It takes a new request
    /// once its connection task has finished the previous exchange, which is
    /// normally already the case; otherwise a task waits for that.
    fn checkin(pool: &Arc<Pool>, mut sender: SendRequest<UpstreamBody>) {
        if sender.is_ready() {
            pool.put(sender);
        } else if !sender.is_closed() {
            // Outside a runtime (a body dropped while the runtime shuts
            // down) the connection is simply dropped, which closes it.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let pool = Arc::clone(pool);
                runtime.spawn(async move {
                    if sender.ready().await.is_ok() {
                        pool.put(sender);
                    }
                });
            }
        }
    }

    fn put(self: &Arc<Pool>, sender: SendRequest<UpstreamBody>) {
        self.lock().push(Idle {
            sender,
            since: Instant::now(),
        });
        if !self.reaper_started.load(Ordering::Relaxed) {
            Pool::start_reaper(self);
        }
    }

    /// Closes connections idle for longer than the idle timeout, also when
    /// no request comes to find them. Ends with the proxy.
    fn start_reaper(pool: &Arc<Pool>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if pool.reaper_started.swap(true, Ordering::Relaxed) {
            return;
        }
        let weak = Arc::downgrade(pool);
        let period = (pool.idle_timeout / 2).max(Duration::from_millis(100));
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { break };
                let now = Instant::now();
                let expired: Vec<Idle> = {
                    let mut idle = pool.lock();
                    let (keep, expired) = std::mem::take(&mut *idle).into_iter().partition(|e| {
                        now.duration_since(e.since) < pool.idle_timeout && !e.sender.is_closed()
                    });
                    *idle = keep;
                    expired
                };
                // Dropped outside the lock: dropping a sender ends its connection.
                drop(expired);
            }
        });
    }
}

pin_project_lite::pin_project! {
    /// A response body that gives its connection back to the pool once it
    /// has been read to the end (or dropped: then the connection is only
    /// reused if hyper finished reading the response anyway).
    struct PooledBody {
        #[pin]
        body: Incoming,
        release: Option<(SendRequest<UpstreamBody>, Arc<Pool>)>,
    }

    impl PinnedDrop for PooledBody {
        fn drop(this: Pin<&mut Self>) {
            if let Some((sender, pool)) = this.project().release.take() {
                Pool::checkin(&pool, sender);
            }
        }
    }
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            if let Some((sender, pool)) = this.release.take() {
                Pool::checkin(&pool, sender);
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
