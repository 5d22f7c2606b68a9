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

use fencegate::gateway::Gateway;

use super::storage::{end_run, Storage};
use super::{call, Lane, Result, Route, Timeline, TwoClients};

/// How often a waiting client asks the lock again.
const POLL: Duration = Duration::from_millis(10);
/// The lease of every grant in the in-process demos.
pub const LEASE: Duration = Duration::from_millis(500);
/// Client 2 shows up a little after client 1.
pub const CLIENT_2_START: Duration = Duration::from_millis(50);
/// The object both clients write in [`two_clients`], and what each writes.
const KEY: &str = "/demo/report";
const VALUES: [&str; 2] = ["from client 1", "from client 2"];

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

/// Runs `play(tl, lock, me)` as the client process `name`, `me` being its
/// lane (see [`spawn_process`]).
pub fn spawn_client<F, Fut, T>(
    name: &'static str,
    tl: &Timeline,
    lock: &Arc<LeaseLock>,
    play: F,
) -> oneshot::Receiver<T>
where
    F: FnOnce(Timeline, Arc<LeaseLock>, Lane) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tl, lock) = (tl.clone(), lock.clone());
    spawn_process(name, move || {
        let me = tl.lane(name);
        play(tl, lock, me)
    })
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

/// The two-client demos' scenario (gc_pause, delayed_write): client 1 takes
/// the lock, checks its lease ("checks its lease: N ms left, `then`"), is
/// frozen for `pause` if any, and writes along `routes[0]`; client 2 shows up
/// [`CLIENT_2_START`] later, takes the lock once the lease has run out,
/// writes along `routes[1]` and releases the lock. Ends the run
/// ([`end_run`]).
pub async fn two_clients(
    tl: &Timeline,
    storage: Storage,
    gateway: Option<Gateway>,
    routes: [Route; 2],
    then: &'static str,
    pause: Option<Duration>,
) -> Result<TwoClients> {
    let lock = LeaseLock::new(tl, 33);
    let client_1 = spawn_client("client 1", tl, &lock, move |tl, lock, me| async move {
        let lease = lock.acquire(me, LEASE).await;
        let left = lease.remaining().as_millis();
        tl.note(me, format!("checks its lease: {left} ms left, {then}"));
        if let Some(pause) = pause {
            freeze(&tl, me, pause, "GC");
        }
        let token = Some(lease.token);
        call(
            &tl,
            me,
            &routes[0],
            Method::PUT,
            KEY,
            token,
            Some(VALUES[0]),
        )
        .await
    });
    let client_2 = spawn_client("client 2", tl, &lock, move |tl, lock, me| async move {
        tokio::time::sleep(CLIENT_2_START).await;
        let lease = lock.acquire(me, LEASE).await;
        let token = Some(lease.token);
        let reply = call(
            &tl,
            me,
            &routes[1],
            Method::PUT,
            KEY,
            token,
            Some(VALUES[1]),
        )
        .await;
        lock.release(me, &lease);
        reply
    });
    let client_1 = client_1.await.map_err(|_| "client 1 panicked")??;
    let client_2 = client_2.await.map_err(|_| "client 2 panicked")??;
    let (stored, highest) = end_run(storage, gateway, KEY).await?;
    Ok(TwoClients {
        key: KEY,
        values: VALUES,
        diagram: tl.render(),
        client_1,
        client_2,
        stored,
        highest,
    })
}
