//! The admission state machine under a fuzzer-chosen schedule of
//! admissions, finished requests, cancelled requests, store writes that
//! complete (or fail) in any order, and admin raises, lowerings and
//! deletions, on three keys.
//!
//! The oracles, per key:
//! - a request is let through only when every request in flight on the key
//!   carries its token, and its token is at least the highest let through
//!   (or set by an admin raise) before, since the last admin lowering or
//!   deletion, which may reset it;
//! - an admin lowering or deletion succeeds only when no request is in
//!   flight on the key;
//! - liveness: once every store write has completed and every request has
//!   finished, no admission and no admin write is still waiting (a lost
//!   wake-up would leave one pending for ever).
//!
//! The schedule runs on a small executor of its own rather than tokio's:
//! it polls a task only when woken, to quiescence after each step, so that
//! a run costs microseconds and the only interleavings are the ones the
//! schedule picks (which store write completes when, which request is
//! dropped when).

#![no_main]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use fencegate::fences::SetFence;
use fencegate::store::{Claim, ClaimFuture, FenceChange, FenceStore, PersistFuture, StoreError};
use fencegate::{Fences, InFlight};
use libfuzzer_sys::fuzz_target;

const KEYS: [&str; 3] = ["/a", "/b", "/c"];

/// A durable store whose every write waits until the schedule completes it,
/// and fails if the schedule said so by then.
#[derive(Clone, Default)]
struct GatedStore {
    state: Arc<Mutex<Gates>>,
}

#[derive(Default)]
struct Gates {
    next: u64,
    /// Writes not completed yet, oldest first.
    open: Vec<u64>,
    done: HashMap<u64, bool>,
    wakers: HashMap<u64, Waker>,
    failing: bool,
}

impl GatedStore {
    fn gates(&self) -> MutexGuard<'_, Gates> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> Gate {
        let mut gates = self.gates();
        gates.next += 1;
        let id = gates.next;
        gates.open.push(id);
        Gate {
            id,
            store: self.clone(),
        }
    }

    /// Completes the open write at `at` (modulo how many are open).
    fn complete(&self, at: usize) {
        let mut gates = self.gates();
        if gates.open.is_empty() {
            return;
        }
        let at = at % gates.open.len();
        let id = gates.open.remove(at);
        let failed = gates.failing;
        gates.done.insert(id, failed);
        if let Some(waker) = gates.wakers.remove(&id) {
            waker.wake();
        }
    }

    fn complete_all(&self) {
        while !self.gates().open.is_empty() {
            self.complete(0);
        }
    }
}

/// One pending store write.
struct Gate {
    id: u64,
    store: GatedStore,
}

impl Future for Gate {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut gates = self.store.gates();
        match gates.done.remove(&self.id) {
            Some(false) => Poll::Ready(Ok(())),
            Some(true) => Poll::Ready(Err(StoreError::Write("simulated".into()))),
            None => {
                gates.wakers.insert(self.id, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let mut gates = self.store.gates();
        gates.open.retain(|id| *id != self.id);
        gates.done.remove(&self.id);
        gates.wakers.remove(&self.id);
    }
}

impl FenceStore for GatedStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }
    fn claim(&self, _key: &str, token: u64) -> ClaimFuture {
        let gate = self.write();
        Box::pin(async move {
            gate.await?;
            Ok(Claim::granted(token))
        })
    }
    fn record(&self, _change: FenceChange) -> PersistFuture {
        Box::pin(self.write())
    }
    fn is_durable(&self) -> bool {
        true
    }
}

/// What the fence table may do, per key.
#[derive(Default)]
struct Model {
    /// Tokens in flight.
    in_flight: HashMap<&'static str, Vec<u64>>,
    /// The lowest token that may still be let through.
    floor: HashMap<&'static str, u64>,
}

impl Model {
    fn let_through(&mut self, key: &'static str, token: u64) {
        let others = self.in_flight.entry(key).or_default();
        assert!(
            others.iter().all(|t| *t == token),
            "{key}: {token} let through with {others:?} in flight"
        );
        others.push(token);
        let floor = self.floor.entry(key).or_insert(0);
        assert!(token >= *floor, "{key}: {token} let through below {floor}");
        *floor = token;
    }

    fn finished(&mut self, key: &'static str, token: u64) {
        let others = self.in_flight.entry(key).or_default();
        let at = others.iter().position(|t| *t == token);
        others.swap_remove(at.expect("a finished request was in flight"));
    }

    fn raised(&mut self, key: &'static str, highest: u64) {
        let floor = self.floor.entry(key).or_insert(0);
        *floor = (*floor).max(highest);
    }

    fn reset(&mut self, key: &'static str, highest: u64) {
        let others = self.in_flight.entry(key).or_default();
        assert!(
            others.is_empty(),
            "{key}: lowered to {highest} with {others:?} in flight"
        );
        self.floor.insert(key, highest);
    }
}

/// Wakes a task by setting its flag; the executor polls flagged tasks.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Task {
    future: Pin<Box<dyn Future<Output = ()>>>,
    woken: Arc<Flag>,
}

#[derive(Default)]
struct Executor {
    tasks: Vec<Task>,
}

impl Executor {
    fn spawn(&mut self, future: impl Future<Output = ()> + 'static) {
        let woken = Arc::new(Flag(AtomicBool::new(true)));
        self.tasks.push(Task {
            future: Box::pin(future),
            woken,
        });
        self.run();
    }

    /// Polls woken tasks until none is woken.
    fn run(&mut self) {
        for _ in 0..10_000 {
            let mut polled = false;
            let mut at = 0;
            while at < self.tasks.len() {
                let task = &mut self.tasks[at];
                if task.woken.0.swap(false, Ordering::SeqCst) {
                    polled = true;
                    let waker = Waker::from(Arc::clone(&task.woken));
                    if task
                        .future
                        .as_mut()
                        .poll(&mut Context::from_waker(&waker))
                        .is_ready()
                    {
                        drop(self.tasks.swap_remove(at));
                        continue;
                    }
                }
                at += 1;
            }
            if !polled {
                return;
            }
        }
        panic!("tasks kept waking each other without end");
    }

    fn cancel(&mut self, at: usize) {
        if !self.tasks.is_empty() {
            let at = at % self.tasks.len();
            drop(self.tasks.swap_remove(at));
            self.run();
        }
    }
}

type Held = Arc<Mutex<Vec<(&'static str, InFlight)>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn finish(model: &Mutex<Model>, held: &Held, at: usize) {
    let mut held = lock(held);
    if !held.is_empty() {
        let at = at % held.len();
        let (key, guard) = held.swap_remove(at);
        lock(model).finished(key, guard.token());
        drop(guard);
    }
}

fuzz_target!(|ops: &[u8]| {
    let store = GatedStore::default();
    let Ok(fences) = Fences::with_store(store.clone()) else {
        return;
    };
    let model = Arc::new(Mutex::new(Model::default()));
    let held: Held = Arc::default();
    let mut executor = Executor::default();
    for op in ops.chunks(3) {
        let a = op.get(1).copied().unwrap_or(0);
        let b = op.get(2).copied().unwrap_or(0);
        let key = KEYS[usize::from(a) % KEYS.len()];
        let (fences, model_, held_) = (fences.clone(), model.clone(), held.clone());
        match op[0] % 8 {
            0 | 1 => {
                let token = u64::from(b % 24);
                executor.spawn(async move {
                    if let Ok(guard) = fences.admit(key, token).await {
                        lock(&model_).let_through(key, token);
                        lock(&held_).push((key, guard));
                    }
                });
            }
            2 => finish(&model, &held, usize::from(a)),
            3 => lock(&store.state).failing = b % 2 == 1,
            4 => {
                let target = u64::from(b % 24);
                executor.spawn(async move {
                    let Some(current) = fences.highest(key) else {
                        return;
                    };
                    let set = SetFence {
                        highest: target,
                        force: true,
                        if_highest: Some(current),
                        actor: "fuzz".into(),
                        reason: "fuzz".into(),
                    };
                    if let Ok(written) = fences.set_fence(key, set).await {
                        let highest = written.highest.unwrap_or(0);
                        if written.previous.is_some_and(|previous| highest < previous) {
                            lock(&model_).reset(key, highest);
                        } else {
                            lock(&model_).raised(key, highest);
                        }
                    }
                });
            }
            5 => executor.spawn(async move {
                let Some(current) = fences.highest(key) else {
                    return;
                };
                if fences
                    .forget_fence(key, current, "fuzz".into(), None)
                    .await
                    .is_ok()
                {
                    lock(&model_).reset(key, 0);
                }
            }),
            6 => {
                store.complete(usize::from(b));
                executor.run();
            }
            _ => executor.cancel(usize::from(b)),
        }
    }
    // Liveness: with every write completed and every request finished, all
    // that waited must have ended.
    let rounds = executor.tasks.len() + 2;
    for _ in 0..rounds {
        store.complete_all();
        executor.run();
        while !lock(&held).is_empty() {
            finish(&model, &held, 0);
        }
        executor.run();
    }
    assert!(
        executor.tasks.is_empty(),
        "{} tasks still waiting with nothing in flight and no write pending",
        executor.tasks.len()
    );
});
