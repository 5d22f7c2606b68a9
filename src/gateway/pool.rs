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
//! Generic over the connection it holds, so that it knows nothing of the
//! protocol spoken on it: a connection says whether it is still open
//! ([`Reusable`]), the one who used it puts it back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::clock;

/// A connection the pool can hold.
pub(crate) trait Reusable: Send + 'static {
    /// Whether it can still take a request (the backend has not closed it).
    fn is_open(&self) -> bool;
}

/// Idle connections to the backend, the most recently used last (it is the
/// one reused first, so that surplus connections age out).
pub(crate) struct Pool<C> {
    idle: Mutex<Vec<Idle<C>>>,
    idle_timeout: Duration,
    reaper_started: AtomicBool,
}

struct Idle<C> {
    conn: C,
    since: Instant,
}

impl<C: Reusable> Pool<C> {
    /// An empty pool whose connections are closed after `idle_timeout` idle.
    pub(crate) fn new(idle_timeout: Duration) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            idle_timeout,
            reaper_started: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle<C>>> {
        // Held for a push or a pop; the vector stays consistent whatever
        // happens, so a poisoned lock is still usable.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection ready for a request, if one is idle. Connections idle
    /// for too long or closed by the backend are dropped (which closes them).
    pub(crate) fn checkout(&self) -> Option<C> {
        let now = clock::now_std();
        let mut idle = self.lock();
        while let Some(entry) = idle.pop() {
            if now.duration_since(entry.since) < self.idle_timeout && entry.conn.is_open() {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Gives back a connection whose exchange is over.
    pub(crate) fn put(pool: &Arc<Pool<C>>, conn: C) {
        pool.lock().push(Idle {
            conn,
            since: clock::now_std(),
        });
        if !pool.reaper_started.load(Ordering::Relaxed) {
            Pool::start_reaper(pool);
        }
    }

    /// Closes connections idle for longer than the idle timeout, also when
    /// no request comes to find them. Ends with the proxy.
    fn start_reaper(pool: &Arc<Pool<C>>) {
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
                let expired: Vec<Idle<C>> = {
                    let mut idle = pool.lock();
                    let (keep, expired) = std::mem::take(&mut *idle).into_iter().partition(|e| {
                        now.duration_since(e.since) < pool.idle_timeout && e.conn.is_open()
                    });
                    *idle = keep;
                    expired
                };
                // Dropped outside the lock: dropping a connection closes it.
                drop(expired);
            }
        });
    }
}
