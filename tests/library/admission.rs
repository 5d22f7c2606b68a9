//! Ordering tests of `Fences::admit` (in memory).
//!
//! Slow requests are modelled with spawned tasks that hold their `InFlight`
//! guard across a `tokio::time::sleep`; the runtime's clock is paused, so the
//! virtual timeline (and therefore every assertion) is deterministic.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fencegate::store::{Claim, ClaimFuture, FenceStore, StoreError};
use fencegate::{AdmitError, Fences, InFlight, Stale, StaleReason};
use proptest::prelude::*;
use tokio::time::{sleep, Instant};

#[path = "../support/mod.rs"]
mod support;
use support::rng::Rng;

/// An ordered log of what happened, shared by the tasks of one test.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl Events {
    fn push(&self, event: impl Into<String>) {
        self.0.lock().unwrap().push(event.into());
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn stale(result: Result<InFlight, AdmitError>) -> Stale {
    match result {
        Ok(guard) => panic!("expected a refusal, got {guard:?}"),
        Err(error) => *error.stale().expect("a stale refusal, not a store error"),
    }
}

fn below(token: u64, highest: u64) -> Stale {
    Stale {
        token,
        highest,
        reason: StaleReason::BelowHighest,
    }
}

fn overtaken(token: u64, highest: u64) -> Stale {
    Stale {
        token,
        highest,
        reason: StaleReason::Overtaken,
    }
}

/// Spawns a request: after `start`, admit `token` on `key`, hold the guard for
/// `hold`, log `"<token> admitted"` / `"<token> done"` or the refusal.
fn request(
    fences: &Fences,
    events: &Events,
    key: &'static str,
    token: u64,
    start: Duration,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<(), Stale>> {
    let fences = fences.clone();
    let events = events.clone();
    tokio::spawn(async move {
        sleep(start).await;
        match within(fences.admit(key, token)).await {
            Ok(guard) => {
                assert_eq!(guard.token(), token);
                events.push(format!("{token} admitted"));
                sleep(hold).await;
                events.push(format!("{token} done"));
                drop(guard);
                Ok(())
            }
            Err(error) => {
                let stale = *error.stale().expect("stale");
                events.push(format!("{token} refused {}", stale.reason.as_str()));
                Err(stale)
            }
        }
    })
}

/// Awaits `future`, failing the test instead of hanging if it does not
/// finish within an hour of paused (virtual) time: with the clock paused,
/// an idle runtime jumps straight to this deadline.
async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3600), future)
        .await
        .expect("still pending after an hour of virtual time: stuck")
}

/// Lets every other task run until the runtime is idle, without advancing
/// the paused clock.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Spawns `admit(key, token)` as a request of its own.
fn spawn_admit(
    fences: &Fences,
    key: &'static str,
    token: u64,
) -> tokio::task::JoinHandle<Result<InFlight, AdmitError>> {
    let fences = fences.clone();
    tokio::spawn(async move { fences.admit(key, token).await })
}

/// [`spawn_admit`], then [`settle`]: the request has been admitted, refused
/// or is waiting by the time this returns.
async fn admit_settled(
    fences: &Fences,
    key: &'static str,
    token: u64,
) -> tokio::task::JoinHandle<Result<InFlight, AdmitError>> {
    let request = spawn_admit(fences, key, token);
    settle().await;
    request
}

/// A fresh in-memory fence set, an empty event log and the start time.
fn timeline() -> (Fences, Events, Instant) {
    (Fences::in_memory(), Events::default(), Instant::now())
}

#[tokio::test(start_paused = true)]
async fn higher_token_waits_for_lower_in_flight() {
    let (fences, events, t0) = timeline();
    let slow = request(&fences, &events, "/k", 30, Duration::ZERO, secs(10));
    let next = request(&fences, &events, "/k", 31, secs(1), secs(1));

    sleep(secs(5)).await;
    assert!(!next.is_finished(), "31 must wait while 30 is in flight");
    assert_eq!(
        fences.highest("/k"),
        Some(31),
        "31 raised the fence already"
    );
    assert_eq!(events.take(), ["30 admitted"]);

    assert_eq!(within(slow).await.unwrap(), Ok(()));
    assert_eq!(within(next).await.unwrap(), Ok(()));
    assert_eq!(events.take(), ["30 done", "31 admitted", "31 done"]);
    // 30 finished at t = 10 s, 31 went right then and held for 1 s.
    assert_eq!(t0.elapsed(), secs(11));

    // 30 is now below the highest.
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));
    assert_eq!(fences.highest("/k"), Some(31));
}

#[tokio::test(start_paused = true)]
async fn waiter_overtaken_promptly_before_in_flight_finishes() {
    let (fences, events, t0) = timeline();
    let slow = request(&fences, &events, "/k", 30, Duration::ZERO, secs(10));
    let waiter = request(&fences, &events, "/k", 31, secs(1), secs(1));
    let winner = request(&fences, &events, "/k", 32, secs(2), secs(1));

    // 31 is refused as soon as 32 is admitted, at t = 2 s, while 30 still runs.
    assert_eq!(within(waiter).await.unwrap(), Err(overtaken(31, 32)));
    assert_eq!(t0.elapsed(), secs(2));
    assert!(!slow.is_finished());
    assert!(!winner.is_finished(), "32 must wait for 30");
    assert_eq!(events.take(), ["30 admitted", "31 refused overtaken"]);

    assert_eq!(within(slow).await.unwrap(), Ok(()));
    assert_eq!(within(winner).await.unwrap(), Ok(()));
    assert_eq!(events.take(), ["30 done", "32 admitted", "32 done"]);
    assert_eq!(t0.elapsed(), secs(11));
    assert_eq!(fences.highest("/k"), Some(32));
    assert_eq!(stale(within(fences.admit("/k", 31)).await), below(31, 32));
}

#[tokio::test(start_paused = true)]
async fn overtaken_waiter_is_refused_without_a_timer_firing() {
    // The same as above without sleeps: 31 must be refused by 32's raise
    // alone, not by some later wake-up.
    let fences = Fences::in_memory();
    let g30 = within(fences.admit("/k", 30)).await.unwrap();
    let w31 = admit_settled(&fences, "/k", 31).await;
    assert!(!w31.is_finished());
    let w32 = admit_settled(&fences, "/k", 32).await;
    assert!(w31.is_finished());
    assert!(!w32.is_finished());
    assert_eq!(
        within(w31).await.unwrap().unwrap_err().stale().copied(),
        Some(overtaken(31, 32))
    );
    drop(g30);
    let g32 = within(w32).await.unwrap().unwrap();
    assert_eq!(g32.token(), 32);
}

#[tokio::test(start_paused = true)]
async fn equal_tokens_fly_together() {
    let (fences, events, t0) = timeline();
    let mut tasks = Vec::new();
    for i in 0..5 {
        // Five 40s, staggered by 1 s, each holding for 10 s.
        tasks.push(request(&fences, &events, "/k", 40, secs(i), secs(10)));
    }
    sleep(secs(5)).await;
    assert_eq!(
        events.take(),
        ["40 admitted"; 5],
        "no 40 waits for another 40"
    );
    // Another 40 arriving while four are in flight also goes at once.
    let late = within(fences.admit("/k", 40)).await.unwrap();
    assert_eq!(t0.elapsed(), secs(5));
    for task in tasks {
        assert_eq!(within(task).await.unwrap(), Ok(()));
    }
    // All five overlapped: the last started at 4 s and ended at 14 s.
    assert_eq!(t0.elapsed(), secs(14));
    assert_eq!(events.take(), ["40 done"; 5]);

    // 41 still waits for the late 40.
    let w41 = admit_settled(&fences, "/k", 41).await;
    assert!(!w41.is_finished());
    drop(late);
    drop(within(w41).await.unwrap().unwrap());
}

#[tokio::test(start_paused = true)]
async fn equal_token_joins_while_higher_waits() {
    // 30 in flight, 31 waiting: another 31 also waits, a second 30 is below
    // the highest, and once 30 finishes both 31s go together.
    let fences = Fences::in_memory();
    let g30 = within(fences.admit("/k", 30)).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        waiters.push(spawn_admit(&fences, "/k", 31));
    }
    settle().await;
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));
    assert!(waiters.iter().all(|w| !w.is_finished()));
    drop(g30);
    let mut guards = Vec::new();
    for w in waiters {
        guards.push(within(w).await.unwrap().unwrap());
    }
    assert_eq!(guards.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn cancelled_waiter_leaves_fence_usable() {
    let fences = Fences::in_memory();
    let g30 = within(fences.admit("/k", 30)).await.unwrap();

    // Dropping the admit future (here by a timeout) while 31 waits.
    let timed_out = tokio::time::timeout(secs(1), fences.admit("/k", 31)).await;
    assert!(timed_out.is_err(), "31 must still be waiting after 1 s");
    assert_eq!(
        fences.highest("/k"),
        Some(31),
        "cancellation never rolls back"
    );
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));

    // Aborting a task that waits.
    let aborted = admit_settled(&fences, "/k", 32).await;
    aborted.abort();
    assert!(within(aborted).await.unwrap_err().is_cancelled());
    assert_eq!(fences.highest("/k"), Some(32));

    // The next higher token goes once 30 finishes.
    let events = Events::default();
    let next = request(&fences, &events, "/k", 33, Duration::ZERO, secs(1));
    settle().await;
    assert!(!next.is_finished(), "33 waits for 30");
    drop(g30);
    assert_eq!(within(next).await.unwrap(), Ok(()));
    assert_eq!(events.take(), ["33 admitted", "33 done"]);
    assert_eq!(fences.highest("/k"), Some(33));
}

#[tokio::test(start_paused = true)]
async fn cancelled_waiter_at_highest_then_same_token_goes() {
    // A waiter cancelled at the highest token: a retry with the same token is
    // admitted (equal to highest) once the lower one finishes, and no one is
    // stuck behind the ghost of the cancelled waiter.
    let fences = Fences::in_memory();
    let g30 = within(fences.admit("/k", 30)).await.unwrap();
    assert!(tokio::time::timeout(secs(1), fences.admit("/k", 31))
        .await
        .is_err());
    drop(g30);
    let retry = tokio::time::timeout(secs(1), fences.admit("/k", 31))
        .await
        .expect("the retry goes at once")
        .unwrap();
    assert_eq!(retry.token(), 31);
}

#[tokio::test(start_paused = true)]
async fn cancelled_in_flight_request_releases_waiters() {
    let (fences, events, t0) = timeline();
    // 30 would hold for an hour; it is aborted at t = 2 s.
    let slow = request(&fences, &events, "/k", 30, Duration::ZERO, secs(3600));
    let next = request(&fences, &events, "/k", 31, secs(1), secs(1));
    sleep(secs(2)).await;
    assert!(!next.is_finished());
    slow.abort();
    assert!(within(slow).await.unwrap_err().is_cancelled());
    assert_eq!(within(next).await.unwrap(), Ok(()));
    assert_eq!(events.take(), ["30 admitted", "31 admitted", "31 done"]);
    assert_eq!(t0.elapsed(), secs(3));
}

#[tokio::test(start_paused = true)]
async fn guard_dropped_by_panicking_task_releases() {
    let fences = Fences::in_memory();
    let f = fences.clone();
    let panicking = tokio::spawn(async move {
        let _guard = f.admit("/k", 30).await.unwrap();
        sleep(secs(5)).await;
        panic!("request handler panicked while in flight (expected by the test)");
    });
    settle().await;
    let events = Events::default();
    let next = request(&fences, &events, "/k", 31, secs(1), secs(1));
    sleep(secs(2)).await;
    assert!(!next.is_finished());
    assert!(within(panicking).await.unwrap_err().is_panic());
    assert_eq!(within(next).await.unwrap(), Ok(()));
    assert_eq!(events.take(), ["31 admitted", "31 done"]);
}

#[test]
fn guard_dropped_while_unwinding_releases() {
    // The same without tokio's task boundary: a panic unwinding through a
    // frame that owns the guard.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let fences = Fences::in_memory();
        let guard = within(fences.admit("/k", 1)).await.unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _owned = guard;
            panic!("unwinding with a guard (expected by the test)");
        }));
        assert!(caught.is_err());
        let next = tokio::time::timeout(secs(1), fences.admit("/k", 2)).await;
        assert_eq!(next.expect("not stuck").unwrap().token(), 2);
    });
}

#[tokio::test(start_paused = true)]
async fn different_keys_never_wait_on_each_other() {
    let fences = Fences::in_memory();
    let _a = within(fences.admit("/a", 30)).await.unwrap();
    // A waiter on /a as well, to show it does not block /b either.
    let wait_a = admit_settled(&fences, "/a", 31).await;
    assert!(!wait_a.is_finished());
    let mut held = Vec::new();
    for (key, token) in [("/b", 100), ("/c", 31), ("/a/b", 32), ("/A", 0), ("/a/", 1)] {
        let guard = tokio::time::timeout(secs(1), fences.admit(key, token))
            .await
            .unwrap_or_else(|_| panic!("{key} {token} waited on another key"))
            .unwrap();
        assert_eq!(guard.token(), token);
        // Hold it: still no interference with the next key.
        held.push(guard);
    }
    assert_eq!(fences.highest("/a"), Some(31));
    assert_eq!(fences.highest("/b"), Some(100));
    assert_eq!(fences.highest("/c"), Some(31));
    assert_eq!(fences.highest("/nope"), None);
    wait_a.abort();
}

#[tokio::test(start_paused = true)]
async fn edge_tokens_zero_and_max() {
    let fences = Fences::in_memory();
    // 0 on a fresh key is admitted and recorded.
    drop(within(fences.admit("/z", 0)).await.unwrap());
    assert_eq!(fences.highest("/z"), Some(0));
    let g0 = within(fences.admit("/z", 0)).await.unwrap();
    let g0b = within(fences.admit("/z", 0)).await.unwrap();
    // MAX waits for the 0s in flight.
    let wmax = admit_settled(&fences, "/z", u64::MAX).await;
    assert!(!wmax.is_finished());
    assert_eq!(fences.highest("/z"), Some(u64::MAX));
    assert_eq!(
        stale(within(fences.admit("/z", 0)).await),
        below(0, u64::MAX)
    );
    drop(g0);
    settle().await;
    assert!(!wmax.is_finished(), "one 0 is still in flight");
    drop(g0b);
    let gmax = within(wmax).await.unwrap().unwrap();
    // MAX is never below anything; an equal MAX goes together with it.
    let gmax2 = within(fences.admit("/z", u64::MAX)).await.unwrap();
    assert_eq!(
        stale(within(fences.admit("/z", u64::MAX - 1)).await),
        below(u64::MAX - 1, u64::MAX)
    );
    drop((gmax, gmax2));
    assert_eq!(fences.highest("/z"), Some(u64::MAX));

    // MAX first on a fresh key: everything else is stale for good.
    drop(within(fences.admit("/m", u64::MAX)).await.unwrap());
    assert_eq!(
        stale(within(fences.admit("/m", 0)).await),
        below(0, u64::MAX)
    );
    assert_eq!(
        fences.list("/", 10),
        vec![("/m".to_string(), u64::MAX), ("/z".to_string(), u64::MAX)]
    );
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------------------------------------------------------------------------
// A durable store whose commits the test completes by hand.
// ---------------------------------------------------------------------------

type Pending = Vec<(
    String,
    u64,
    tokio::sync::oneshot::Sender<Result<(), StoreError>>,
)>;

/// Durable on paper; each persist waits until the test answers it.
#[derive(Clone, Default)]
struct GatedStore {
    pending: Arc<Mutex<Pending>>,
}

impl FenceStore for GatedStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }

    fn claim(&self, key: &str, token: u64) -> ClaimFuture {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.pending
            .lock()
            .unwrap()
            .push((key.to_owned(), token, done));
        Box::pin(async move {
            answer.await.unwrap_or(Err(StoreError::Closed))?;
            Ok(Claim::granted(token))
        })
    }

    fn is_durable(&self) -> bool {
        true
    }
}

impl GatedStore {
    /// The raises waiting for the store, in order.
    fn queued(&self) -> Vec<(String, u64)> {
        let pending = self.pending.lock().unwrap();
        pending.iter().map(|(k, t, _)| (k.clone(), *t)).collect()
    }

    /// Answers the oldest pending raise of `token`.
    fn answer(&self, token: u64, result: Result<(), StoreError>) {
        let mut pending = self.pending.lock().unwrap();
        let at = pending
            .iter()
            .position(|(_, t, _)| *t == token)
            .expect("a pending raise");
        let (_, _, done) = pending.remove(at);
        let _ = done.send(result);
    }
}

/// A gated store and the fences over it.
fn gated() -> (GatedStore, Fences) {
    let store = GatedStore::default();
    (store.clone(), Fences::with_store(store).unwrap())
}

fn q(key: &str, token: u64) -> (String, u64) {
    (key.to_owned(), token)
}

#[tokio::test(start_paused = true)]
async fn nothing_is_let_through_before_the_raise_is_durable() {
    let (store, fences) = gated();
    assert!(fences.is_durable());
    let a = admit_settled(&fences, "/k", 31).await;
    assert!(!a.is_finished(), "31 must wait for its raise to be durable");
    assert_eq!(store.queued(), [q("/k", 31)]);
    // Raised in memory already: a lower token is refused meanwhile.
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));
    store.answer(31, Ok(()));
    let a = within(a).await.unwrap().unwrap();
    // Now durable: an equal token needs no further write.
    let b = within(fences.admit("/k", 31)).await.unwrap();
    assert!(store.queued().is_empty());
    drop((a, b));
}

#[tokio::test(start_paused = true)]
async fn an_equal_token_waits_for_durability_too() {
    let (store, fences) = gated();
    let a = admit_settled(&fences, "/k", 31).await;
    let b = admit_settled(&fences, "/k", 31).await;
    // B must not ride on A's raise before it is durable.
    assert!(!b.is_finished());
    assert_eq!(store.queued(), [q("/k", 31), q("/k", 31)]);
    // B's write lands first: B goes, A still waits for its own.
    store.answer(31, Ok(()));
    settle().await;
    let done = [a.is_finished(), b.is_finished()];
    assert_eq!(done.iter().filter(|d| **d).count(), 1, "{done:?}");
    store.answer(31, Ok(()));
    let a = within(a).await.unwrap().unwrap();
    let b = within(b).await.unwrap().unwrap();
    drop((a, b));
}

#[tokio::test(start_paused = true)]
async fn overtaken_while_the_raise_is_being_written() {
    let (store, fences) = gated();
    let a = admit_settled(&fences, "/k", 31).await;
    let b = admit_settled(&fences, "/k", 32).await;
    assert_eq!(store.queued(), [q("/k", 31), q("/k", 32)]);
    store.answer(31, Ok(()));
    // 31 is durable but 32 was admitted meanwhile: 31 is never let through.
    let error = within(a).await.unwrap().unwrap_err();
    assert_eq!(error.stale().copied(), Some(overtaken(31, 32)));
    assert!(!b.is_finished());
    store.answer(32, Ok(()));
    assert_eq!(within(b).await.unwrap().unwrap().token(), 32);
}

#[tokio::test(start_paused = true)]
async fn a_failed_raise_does_not_block_an_equal_one_that_succeeds() {
    let (store, fences) = gated();
    let first = admit_settled(&fences, "/k", 30).await;
    store.answer(30, Ok(()));
    drop(within(first).await.unwrap().unwrap());
    let a = admit_settled(&fences, "/k", 31).await;
    let b = admit_settled(&fences, "/k", 31).await;
    store.answer(31, Err(StoreError::Write("disk full (simulated)".into())));
    let error = within(a).await.unwrap().unwrap_err();
    assert!(matches!(error, AdmitError::Store(_)), "{error:?}");
    // The failed 31 never went through; 31 still waits for B's own write.
    let highest = fences.highest("/k");
    assert!(matches!(highest, Some(30 | 31)), "{highest:?}");
    assert!(!b.is_finished());
    store.answer(31, Ok(()));
    let b = within(b).await.unwrap().unwrap();
    assert_eq!(b.token(), 31);
    assert_eq!(fences.highest("/k"), Some(31), "B's success is the highest");
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));
    drop(b);
}

#[tokio::test(start_paused = true)]
async fn a_failed_raise_never_lowers_a_later_higher_one() {
    let (store, fences) = gated();
    let a = admit_settled(&fences, "/k", 31).await;
    let b = admit_settled(&fences, "/k", 32).await;
    store.answer(31, Err(StoreError::Write("I/O error (simulated)".into())));
    assert!(matches!(
        within(a).await.unwrap().unwrap_err(),
        AdmitError::Store(_)
    ));
    assert_eq!(fences.highest("/k"), Some(32));
    assert_eq!(stale(within(fences.admit("/k", 31)).await), below(31, 32));
    store.answer(32, Ok(()));
    assert_eq!(within(b).await.unwrap().unwrap().token(), 32);
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_raise_leaves_no_fence_behind() {
    let (store, fences) = gated();
    let a = admit_settled(&fences, "/new", 1).await;
    store.answer(1, Err(StoreError::Write("disk full (simulated)".into())));
    assert!(within(a).await.unwrap().is_err());
    assert_eq!(fences.highest("/new"), None);
    assert!(fences.list("", 10).is_empty());
    // The fence count (admin plane, metrics) should agree with list().
    assert_eq!(fences.len(), 0, "len() counts a fence that has no highest");
    assert!(fences.is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancelled_while_the_raise_is_being_written() {
    let (store, fences) = gated();
    let a = admit_settled(&fences, "/k", 31).await;
    a.abort();
    assert!(within(a).await.unwrap_err().is_cancelled());
    // Cancellation never rolls the raise back.
    assert_eq!(fences.highest("/k"), Some(31));
    assert_eq!(stale(within(fences.admit("/k", 30)).await), below(30, 31));
    // A retry of 31 is not admitted on the strength of a write nobody saw
    // finish: it writes again.
    let retry = admit_settled(&fences, "/k", 31).await;
    assert!(!retry.is_finished());
    assert_eq!(store.queued(), [q("/k", 31), q("/k", 31)]);
    store.answer(31, Ok(()));
    store.answer(31, Ok(()));
    assert_eq!(within(retry).await.unwrap().unwrap().token(), 31);
}

// ---------------------------------------------------------------------------
// Randomized stress on a multi-thread runtime.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct KeyLog {
    /// Tokens in the order they were let through.
    let_through: Vec<u64>,
    /// Token and count of the requests in flight, as seen by the test.
    in_flight_token: u64,
    in_flight: usize,
    max_in_flight: usize,
    violations: Vec<String>,
}

/// Records a let-through on creation and the end of flight on drop, *before*
/// the real guard is dropped (the struct's `Drop` runs before its fields'),
/// so the recorded interval always sits inside the real one.
struct Tracked {
    log: Arc<Mutex<KeyLog>>,
    _guard: InFlight,
}

impl Tracked {
    fn enter(log: Arc<Mutex<KeyLog>>, guard: InFlight, highest_before: Option<u64>) -> Self {
        let token = guard.token();
        {
            let mut l = log.lock().unwrap();
            if l.in_flight > 0 && l.in_flight_token != token {
                let msg = format!(
                    "{token} let through while {} x{} in flight",
                    l.in_flight_token, l.in_flight
                );
                l.violations.push(msg);
            }
            if let Some(&last) = l.let_through.last() {
                if token < last {
                    l.violations
                        .push(format!("{token} let through after {last}"));
                }
            }
            if let Some(h) = highest_before {
                if token < h {
                    l.violations.push(format!(
                        "{token} let through although {h} was admitted before it arrived"
                    ));
                }
            }
            l.let_through.push(token);
            l.in_flight_token = token;
            l.in_flight += 1;
            l.max_in_flight = l.max_in_flight.max(l.in_flight);
        }
        Tracked { log, _guard: guard }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
        l.in_flight -= 1;
    }
}

#[derive(Default)]
struct Outcomes {
    admitted: AtomicUsize,
    below: AtomicUsize,
    overtaken: AtomicUsize,
    timed_out: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_stress_keeps_per_key_order() {
    const KEYS: usize = 5;
    const REQUESTS: usize = 4000;
    let mut rng = Rng::from_env_or_clock();
    let fences = Fences::in_memory();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("/stress/{i}")).collect();
    let logs: Vec<Arc<Mutex<KeyLog>>> = (0..KEYS).map(|_| Arc::default()).collect();
    let counters: Vec<Arc<AtomicU64>> = (0..KEYS).map(|_| Arc::new(AtomicU64::new(1))).collect();
    let outcomes = Arc::new(Outcomes::default());

    let run = async {
        let mut handles = Vec::with_capacity(REQUESTS);
        let mut aborters = Vec::new();
        for _ in 0..REQUESTS {
            let k = rng.below(KEYS as u64) as usize;
            let counter = &counters[k];
            let token = match rng.below(100) {
                // Stale: a little below the current counter.
                0..15 => counter
                    .load(Ordering::Relaxed)
                    .saturating_sub(1 + rng.below(3)),
                // Equal to the latest token handed out.
                15..40 => counter.load(Ordering::Relaxed),
                // A new, higher token.
                _ => counter.fetch_add(1, Ordering::Relaxed) + 1,
            };
            let hold_yields = rng.below(20);
            let hold_sleep = rng.below(10) == 0;
            let admit_timeout = (rng.below(20) == 0).then(|| Duration::from_micros(rng.below(300)));
            let abort_after = (rng.below(20) == 0).then(|| rng.below(30));

            let fences = fences.clone();
            let key = keys[k].clone();
            let log = Arc::clone(&logs[k]);
            let outcomes = Arc::clone(&outcomes);
            let handle = tokio::spawn(async move {
                let highest_before = fences.highest(&key);
                let admitted = match admit_timeout {
                    Some(limit) => {
                        match tokio::time::timeout(limit, fences.admit(&key, token)).await {
                            Ok(result) => result,
                            Err(_) => {
                                outcomes.timed_out.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                        }
                    }
                    None => fences.admit(&key, token).await,
                };
                match admitted {
                    Ok(guard) => {
                        let tracked = Tracked::enter(log, guard, highest_before);
                        outcomes.admitted.fetch_add(1, Ordering::Relaxed);
                        for _ in 0..hold_yields {
                            tokio::task::yield_now().await;
                        }
                        if hold_sleep {
                            tokio::time::sleep(Duration::from_micros(200)).await;
                        }
                        drop(tracked);
                    }
                    Err(error) => {
                        let stale = *error.stale().expect("in memory: only stale refusals");
                        assert_eq!(stale.token, token);
                        assert!(stale.highest > token, "{stale:?}");
                        assert!(fences.highest(&key).unwrap() >= stale.highest);
                        match stale.reason {
                            StaleReason::BelowHighest => &outcomes.below,
                            StaleReason::Overtaken => &outcomes.overtaken,
                        }
                        .fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            if let Some(yields) = abort_after {
                let abort = handle.abort_handle();
                aborters.push(tokio::spawn(async move {
                    for _ in 0..yields {
                        tokio::task::yield_now().await;
                    }
                    abort.abort();
                }));
            }
            handles.push(handle);
            // Pace the arrivals so that requests overlap some of the time
            // instead of all arriving at once.
            for _ in 0..rng.below(40) {
                tokio::task::yield_now().await;
            }
            if rng.below(50) == 0 {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
        }
        let mut aborted = 0;
        for handle in handles {
            match handle.await {
                Ok(()) => {}
                Err(e) if e.is_cancelled() => aborted += 1,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        for aborter in aborters {
            aborter.await.unwrap();
        }
        aborted
    };
    let aborted = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every admit call resolves (no hang)");

    let admitted = outcomes.admitted.load(Ordering::Relaxed);
    eprintln!(
        "admitted {admitted}, below_highest {}, overtaken {}, timed out {}, aborted {aborted}",
        outcomes.below.load(Ordering::Relaxed),
        outcomes.overtaken.load(Ordering::Relaxed),
        outcomes.timed_out.load(Ordering::Relaxed),
    );
    assert!(admitted > 0);
    for (k, log) in logs.iter().enumerate() {
        let last = {
            let log = log.lock().unwrap();
            assert!(
                log.violations.is_empty(),
                "key {k}: {:#?}",
                &log.violations[..log.violations.len().min(20)]
            );
            assert!(log.let_through.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(log.in_flight, 0);
            eprintln!(
                "key {k}: {} let through, at most {} in flight together",
                log.let_through.len(),
                log.max_in_flight
            );
            log.let_through.last().copied()
        };
        let highest = fences.highest(&keys[k]);
        assert!(highest >= last);
        // Nothing is left in flight or stuck: the highest goes at once.
        if let Some(h) = highest {
            let guard = tokio::time::timeout(Duration::from_secs(5), fences.admit(&keys[k], h))
                .await
                .expect("fence not stuck")
                .unwrap();
            drop(guard);
        }
    }
}

// ---------------------------------------------------------------------------
// Sequential model check: admissions polled by hand against a reference.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// Call `admit(key, token)` and poll it once.
    Admit { key: usize, token: u64 },
    /// Drop the n-th guard in flight (modulo).
    Release(usize),
    /// Drop the n-th pending admit future (modulo).
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..2, 0u64..6).prop_map(|(key, token)| Op::Admit { key, token }),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
    ]
}

type AdmitFuture = Pin<Box<dyn Future<Output = Result<InFlight, AdmitError>>>>;

#[derive(Default, Clone)]
struct ModelKey {
    highest: Option<u64>,
    in_flight: Vec<u64>,
}

#[derive(Debug, PartialEq)]
enum Expect {
    Pending,
    Admitted,
    Stale(Stale),
}

impl ModelKey {
    /// What a waiter with `token` (already past the first check) does now.
    fn poll_waiter(&mut self, token: u64) -> Expect {
        let highest = self.highest.unwrap_or(token);
        if highest > token {
            return Expect::Stale(overtaken(token, highest));
        }
        if self.in_flight.iter().all(|&t| t == token) {
            self.in_flight.push(token);
            return Expect::Admitted;
        }
        Expect::Pending
    }
}

fn check_poll(
    future: &mut AdmitFuture,
    expect: Expect,
    guards: &mut Vec<(usize, InFlight)>,
    key: usize,
) -> Result<bool, TestCaseError> {
    let mut cx = Context::from_waker(Waker::noop());
    match (future.as_mut().poll(&mut cx), expect) {
        (Poll::Pending, Expect::Pending) => Ok(true),
        (Poll::Ready(Ok(guard)), Expect::Admitted) => {
            guards.push((key, guard));
            Ok(false)
        }
        (Poll::Ready(Err(e)), Expect::Stale(want)) => {
            prop_assert_eq!(e.stale().copied(), Some(want));
            Ok(false)
        }
        (got, want) => Err(TestCaseError::fail(format!(
            "got {:?}, model says {want:?}",
            got.map(|r| r.map(|g| g.token()).map_err(|e| e.to_string()))
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn admission_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let fences = Fences::in_memory();
        let names = ["/m/0", "/m/1"];
        let mut model = vec![ModelKey::default(); 2];
        // (key, token, future), oldest first.
        let mut pending: VecDeque<(usize, u64, AdmitFuture)> = VecDeque::new();
        let mut guards: Vec<(usize, InFlight)> = Vec::new();

        for op in ops {
            match op {
                Op::Admit { key, token } => {
                    let f = fences.clone();
                    let mut future: AdmitFuture =
                        Box::pin(async move { f.admit(names[key], token).await });
                    let m = &mut model[key];
                    let expect = match m.highest {
                        Some(h) if token < h => Expect::Stale(below(token, h)),
                        _ => {
                            m.highest = Some(token);
                            m.poll_waiter(token)
                        }
                    };
                    if check_poll(&mut future, expect, &mut guards, key)? {
                        pending.push_back((key, token, future));
                    }
                }
                Op::Release(n) => {
                    if !guards.is_empty() {
                        let (key, guard) = guards.remove(n % guards.len());
                        let m = &mut model[key];
                        let at = m.in_flight.iter().position(|&t| t == guard.token()).unwrap();
                        m.in_flight.remove(at);
                        drop(guard);
                    }
                }
                Op::Cancel(n) => {
                    if !pending.is_empty() {
                        let at = n % pending.len();
                        pending.remove(at);
                    }
                }
            }
            // Every pending admission re-polled, oldest first.
            let mut still = VecDeque::new();
            while let Some((key, token, mut future)) = pending.pop_front() {
                let expect = model[key].poll_waiter(token);
                if check_poll(&mut future, expect, &mut guards, key)? {
                    still.push_back((key, token, future));
                }
            }
            pending = still;
            for (key, m) in model.iter().enumerate() {
                prop_assert_eq!(fences.highest(names[key]), m.highest);
                // Invariant: everything in flight on a key carries one token.
                prop_assert!(m.in_flight.windows(2).all(|w| w[0] == w[1]));
            }
        }
    }
}
