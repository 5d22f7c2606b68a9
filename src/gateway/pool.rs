//! The proxy's pool of idle HTTP/1.1 connections to the backend.
//!
//! Written here rather than taken from hyper-util's legacy client because,
//! with one backend, that client's pool keys, guards and the task
//! it spawns per request to give a connection back were a large part of a
//! proxied request's cost (docs/BENCHMARKS.md). What it does that matters is
//! kept: an idle timeout (below the backend's keep-alive, hyper issues #2136
//! and #2275), enforced on checkout and by a reaper task; a connection goes
//! back only once its response is over; a closed one is never handed out.
//!
//! Generic over the request body type of the connections it holds, so that
//! it knows nothing of the proxy that fills it; what a response body may do
//! while it is relayed (its stall timeout) is the proxy's to decide.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

/// Idle connections to the backend whose requests have bodies of type `B`,
/// the most recently used last (it is the one reused first, so that surplus
/// connections age out).
pub(crate) struct Pool<B> {
    idle: Mutex<Vec<Idle<B>>>,
    idle_timeout: Duration,
    reaper_started: AtomicBool,
}

struct Idle<B> {
    sender: SendRequest<B>,
    since: Instant,
}

/// A response body and what becomes of its connection.
pub(crate) enum Released<B: Send + 'static> {
    /// The response had no body: the connection is back in the pool.
    Done(Incoming),
    /// The connection goes back once this body has been read to its end.
    Pooled(PooledBody<B>),
}

impl<B: Send + 'static> Pool<B> {
    /// An empty pool whose connections are closed after `idle_timeout` idle.
    pub(crate) fn new(idle_timeout: Duration) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            idle_timeout,
            reaper_started: AtomicBool::new(false),
        }
    }

    /// The response body `body`, which gives `sender`'s connection back to
    /// the pool once it has been read to the end, or at once if it is empty.
    /// A body that fails or is dropped early does not give it back (unless
    /// hyper had read the response to its end anyway).
    pub(crate) fn release_after(
        pool: &Arc<Pool<B>>,
        sender: SendRequest<B>,
        body: Incoming,
    ) -> Released<B> {
        if http_body::Body::is_end_stream(&body) {
            Pool::checkin(pool, sender);
            Released::Done(body)
        } else {
            Released::Pooled(PooledBody {
                body,
                release: Some((sender, Arc::clone(pool))),
            })
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle<B>>> {
        // Held for a push or a pop; the vector stays consistent whatever
        // happens, so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection ready for a request, if one is idle. Connections idle
    /// for too long or closed by the backend are dropped (which closes them).
    pub(crate) fn checkout(&self) -> Option<SendRequest<B>> {
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
    fn checkin(pool: &Arc<Pool<B>>, mut sender: SendRequest<B>) {
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

    fn put(self: &Arc<Pool<B>>, sender: SendRequest<B>) {
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
    fn start_reaper(pool: &Arc<Pool<B>>) {
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
                let expired: Vec<Idle<B>> = {
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
    pub(crate) struct PooledBody<B>
    where
        B: Send,
        B: 'static,
    {
        #[pin]
        body: Incoming,
        release: Option<(SendRequest<B>, Arc<Pool<B>>)>,
    }

    impl<B> PinnedDrop for PooledBody<B>
    where
        B: Send,
        B: 'static,
    {
        fn drop(this: Pin<&mut Self>) {
            if let Some((sender, pool)) = this.project().release.take() {
                Pool::checkin(&pool, sender);
            }
        }
    }
}

impl<B: Send + 'static> http_body::Body for PooledBody<B> {
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
