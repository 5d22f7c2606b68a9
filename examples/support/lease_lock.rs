//! The in-process demos' lock and clients: a lease lock whose every grant
//! carries a growing fencing token (33, 34, ...), and clients that each run
//! on their own OS thread with their own runtime, so that a simulated
//! stop-the-world pause freezes one client and everything it runs, and
//! nothing else.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::Method;
use tokio::sync::oneshot;

use super::{call, Lane, Reply, Result, Route, Timeline};

/// How often a waiting client asks the lock again.
const POLL: Duration = Duration::from_millis(10);

/// A granted lease, as its holder knows it.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    /// The fencing token of this grant.
    pub token: u64,
    /// When it runs out, by the lock's (and here also the client's) clock.
    pub expires: Instant,
}

impl Lease {
    /// Lease time left, as the holder would compute it right now.
    pub fn remaining(&self) -> Duration {
        self.expires.saturating_duration_since(Instant::now())
    }
}

/// The live grant, as the lock knows it.
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: Lease,
    holder: Lane,
}

#[derive(Debug)]
struct LockState {
    next_token: u64,
    held: Option<Held>,
}

/// An in-process lease lock: one holder at a time, a lease that ends by real
/// elapsed time whatever the holder is doing, and a fencing token that grows
/// with every grant. It stands in for etcd, ZooKeeper, Redis, Chubby...
#[derive(Debug)]
pub struct LeaseLock {
    timeline: Timeline,
    lane: Lane,
    state: Mutex<LockState>,
}

impl LeaseLock {
    /// A free lock, drawn on the `lock` lane, whose first grant carries
    /// `first_token`.
    pub fn new(timeline: &Timeline, first_token: u64) -> Arc<Self> {
        let state = LockState {
            next_token: first_token,
            held: None,
        };
        Arc::new(LeaseLock {
            timeline: timeline.clone(),
            lane: timeline.lane("lock"),
            state: Mutex::new(state),
        })
    }

    /// The state with a lease that has run out forgotten, and the moment it
    /// ran out put on the timeline.
    fn state(&self) -> MutexGuard<'_, LockState> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Held { lease, holder }) = state.held {
            if Instant::now() >= lease.expires {
                let who = self.timeline.name(holder);
                let text = format!("lease of token {} ({who}) expires", lease.token);
                self.timeline.note_at(lease.expires, self.lane, text);
                state.held = None;
            }
        }
        state
    }

    /// Asks for the lock and waits (polling) until it is granted; the
    /// request, the first "busy" and the grant go on the timeline.
    pub async fn acquire(&self, who: Lane, ttl: Duration) -> Lease {
        let tl = &self.timeline;
        tl.msg(who, self.lane, "acquire");
        let mut told_busy = false;
        loop {
            let granted = {
                let mut state = self.state();
                match state.held {
                    Some(Held { lease, holder }) => Err((holder, lease.remaining())),
                    None => {
                        let token = state.next_token;
                        state.next_token += 1;
                        let expires = Instant::now() + ttl;
                        let lease = Lease { token, expires };
                        state.held = Some(Held { lease, holder: who });
                        Ok(lease)
                    }
                }
            };
            match granted {
                Ok(lease) => {
                    let text = format!("token {} (lease {} ms)", lease.token, ttl.as_millis());
                    tl.msg(self.lane, who, text);
                    return lease;
                }
                Err((holder, left)) if !told_busy => {
                    told_busy = true;
                    let text = format!("busy ({}, {} ms left)", tl.name(holder), left.as_millis());
                    tl.msg(self.lane, who, text);
                }
                Err(_) => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Gives the lock back; returns false (and changes nothing) if `lease`
    /// is no longer the live one.
    pub fn release(&self, who: Lane, lease: &Lease) -> bool {
        let mut state = self.state();
        let live = state.held.is_some_and(|h| h.lease.token == lease.token);
        if live {
            state.held = None;
        }
        drop(state);
        let ignored = if live { "" } else { " (ignored: not live)" };
        let text = format!("release {}{ignored}", lease.token);
        self.timeline.msg(who, self.lane, text);
        live
    }
}

/// Runs `f` as a separate "process": its own OS thread and its own
/// single-threaded tokio runtime. Await the receiver for its result (an
/// error means the client panicked or could not start).
pub fn spawn_process<F, Fut, T>(name: &str, f: F) -> oneshot::Receiver<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let thread = std::thread::Builder::new().name(name.to_owned());
    // If the thread or its runtime cannot start, `tx` is dropped and the
    // caller's receiver says so.
    _ = thread.spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(runtime) = runtime {
            _ = tx.send(runtime.block_on(f()));
        }
    });
    rx
}

/// A simulated stop-the-world pause of the calling client process: its
/// thread (and so its whole runtime: every task, timer, keep-alive) is
/// blocked with `std::thread::sleep`. Everything else keeps running.
pub fn freeze(tl: &Timeline, lane: Lane, pause: Duration, why: &str) {
    let ms = pause.as_millis();
    tl.pause_begin(
        lane,
        format!("~~ paused ({why}, simulated: thread frozen {ms} ms) ~~"),
    );
    let start = Instant::now();
    std::thread::sleep(pause);
    let ms = start.elapsed().as_millis();
    tl.pause_end(
        lane,
        format!("~~ resumes after {ms} ms, unaware of the pause ~~"),
    );
}

/// Client 2 of the two-client demos, as a process: shows up `after` client
/// 1, takes the lock for `lease`, writes `body` to `key` along `route` and
/// releases the lock.
pub fn spawn_client_2(
    tl: &Timeline,
    lock: &Arc<LeaseLock>,
    route: Route,
    after: Duration,
    lease: Duration,
    key: &'static str,
    body: &'static str,
) -> oneshot::Receiver<Result<Reply>> {
    let (tl, lock) = (tl.clone(), lock.clone());
    spawn_process("client 2", move || async move {
        let me = tl.lane("client 2");
        tokio::time::sleep(after).await;
        let lease = lock.acquire(me, lease).await;
        let token = Some(lease.token);
        let reply = call(&tl, me, &route, Method::PUT, key, token, Some(body)).await;
        lock.release(me, &lease);
        reply
    })
}
