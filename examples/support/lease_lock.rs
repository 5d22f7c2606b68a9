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

/// An in-process lease lock: one holder at a time, a lease that ends by real
/// elapsed time whatever the holder is doing, and a fencing token that grows
/// with every grant. It stands in for etcd, ZooKeeper, Redis, Chubby...
#[derive(Debug)]
pub struct LeaseLock {
    timeline: Timeline,
    lane: Lane,
    /// The next grant's token, and the live grant with its holder.
    state: Mutex<(u64, Option<(Lease, Lane)>)>,
}

impl LeaseLock {
    /// A free lock, drawn on the `lock` lane, whose first grant carries
    /// `first_token`.
    pub fn new(timeline: &Timeline, first_token: u64) -> Arc<Self> {
        let (timeline, lane) = (timeline.clone(), timeline.lane("lock"));
        let state = Mutex::new((first_token, None));
        Arc::new(LeaseLock {
            timeline,
            lane,
            state,
        })
    }

    /// The state, with a lease that has run out forgotten and the moment it
    /// ran out put on the timeline.
    fn state(&self) -> MutexGuard<'_, (u64, Option<(Lease, Lane)>)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((lease, holder)) = state.1.filter(|(lease, _)| lease.remaining().is_zero()) {
            let (token, who) = (lease.token, self.timeline.name(holder));
            let text = format!("lease of token {token} ({who}) expires");
            self.timeline.note_at(lease.expires, self.lane, text);
            state.1 = None;
        }
        state
    }

    /// Asks for the lock and waits (polling) until it is granted; the
    /// request, the first "busy" and the grant go on the timeline.
    pub async fn acquire(&self, who: Lane, ttl: Duration) -> Lease {
        let (tl, ms) = (&self.timeline, ttl.as_millis());
        tl.msg(who, self.lane, "acquire");
        let mut told_busy = false;
        loop {
            let busy = {
                let mut state = self.state();
                match state.1 {
                    Some((lease, holder)) => (tl.name(holder).to_owned(), lease.remaining()),
                    None => {
                        let lease = Lease {
                            token: state.0,
                            expires: Instant::now() + ttl,
                        };
                        *state = (lease.token + 1, Some((lease, who)));
                        tl.msg(
                            self.lane,
                            who,
                            format!("token {} (lease {ms} ms)", lease.token),
                        );
                        return lease;
                    }
                }
            };
            if !std::mem::replace(&mut told_busy, true) {
                let (holder, left) = (busy.0, busy.1.as_millis());
                tl.msg(self.lane, who, format!("busy ({holder}, {left} ms left)"));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Gives the lock back; returns false (and changes nothing) if `lease`
    /// is no longer the live one.
    pub fn release(&self, who: Lane, lease: &Lease) -> bool {
        let mut state = self.state();
        let live = state.1.is_some_and(|(held, _)| held.token == lease.token);
        if live {
            state.1 = None;
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
