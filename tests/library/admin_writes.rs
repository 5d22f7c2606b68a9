//! Admin writes on the fence table itself (`Fences::set_fence`,
//! `Fences::forget_fence`): the invariants of `src/fences/admin.rs` under
//! concurrency, and what a frozen fence does while its change is made
//! durable (also when that fails, or the admin write is dropped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencegate::fences::{AdminWriteError, SetFence};
use fencegate::store::{
    Claim, ClaimFuture, FenceChange, FenceStore, PersistFuture, Setting, StoreError,
};
use fencegate::Fences;

#[path = "../support/mod.rs"]
mod support;
use support::rng::Rng;

fn lower(highest: u64, if_highest: u64) -> SetFence {
    SetFence {
        highest,
        force: true,
        if_highest: Some(if_highest),
        actor: "test".into(),
        reason: "test".into(),
    }
}

fn raise(highest: u64) -> SetFence {
    SetFence {
        highest,
        force: false,
        if_highest: None,
        actor: "test".into(),
        reason: "test".into(),
    }
}

/// Admissions with random tokens race admin lowerings, deletions and raises
/// on two keys. Whenever a request is let through, every request in flight on
/// its key carries its token: a guard detached from the map's fence (a
/// deletion or lowering under a live request) would let a second token in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_writes_never_break_the_in_flight_rule() {
    let fences = Fences::in_memory();
    let in_flight: Arc<Mutex<HashMap<&'static str, Vec<u64>>>> = Arc::default();
    let admitted = Arc::new(AtomicUsize::new(0));
    let keys = ["/a", "/b"];
    let seed = Rng::from_env_or_clock().0;
    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let (fences, in_flight, admitted) = (fences.clone(), in_flight.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_add(worker));
            for _ in 0..300 {
                let key = keys[rng.below(2) as usize];
                let token = 1 + rng.below(40);
                let Ok(guard) = fences.admit(key, token).await else {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    continue;
                };
                {
                    let mut map = in_flight.lock().unwrap();
                    let others = map.entry(key).or_default();
                    assert!(
                        others.iter().all(|t| *t == token),
                        "{key}: token {token} let through while {others:?} in flight"
                    );
                    others.push(token);
                }
                admitted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_micros(100 + rng.below(300))).await;
                {
                    let mut map = in_flight.lock().unwrap();
                    let others = map.get_mut(key).unwrap();
                    let at = others.iter().position(|t| *t == token).unwrap();
                    others.swap_remove(at);
                }
                drop(guard);
                tokio::time::sleep(Duration::from_micros(rng.below(500))).await;
            }
        }));
    }
    let admin = {
        let fences = fences.clone();
        tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_add(99));
            let mut done = 0usize;
            for _ in 0..2000 {
                let key = keys[rng.below(2) as usize];
                let Some(highest) = fences.highest(key) else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let choice = rng.below(3);
                let result = match choice {
                    0 => fences.set_fence(key, lower(highest / 2, highest)).await,
                    1 => fences.forget_fence(key, highest, "test".into(), None).await,
                    _ => fences.set_fence(key, raise(highest + 1)).await,
                };
                match result {
                    Ok(_) => done += 1,
                    Err(AdminWriteError::Busy | AdminWriteError::HighestChanged { .. }) => {}
                    Err(AdminWriteError::Unknown) => {}
                    // An admission raised the fence past `highest + 1` since
                    // it was read: the raise would lower it, and must not.
                    Err(AdminWriteError::WouldLower { highest: now }) if choice == 2 => {
                        assert!(now > highest, "would lower {now}, read {highest}");
                    }
                    Err(other) => panic!("unexpected {other:?}"),
                }
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
            done
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    let admin_writes = admin.await.unwrap();
    assert!(admitted.load(Ordering::Relaxed) > 100);
    assert!(
        admin_writes > 10,
        "only {admin_writes} admin writes went through"
    );
}

/// An admin write waiting for the test's answer.
type Pending = (
    Setting,
    tokio::sync::oneshot::Sender<Result<(), StoreError>>,
);

/// A store whose admin writes wait until the test answers them.
#[derive(Clone, Default)]
struct GatedRecords {
    pending: Arc<Mutex<Vec<Pending>>>,
}

impl FenceStore for GatedRecords {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }

    fn claim(&self, _key: &str, token: u64) -> ClaimFuture {
        Box::pin(std::future::ready(Ok(Claim::granted(token))))
    }

    fn record(&self, change: FenceChange) -> PersistFuture {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.pending.lock().unwrap().push((change.set, done));
        Box::pin(async move { answer.await.unwrap_or(Err(StoreError::Closed)) })
    }

    fn is_durable(&self) -> bool {
        true
    }
}

impl GatedRecords {
    async fn wait_pending(&self) -> Setting {
        loop {
            if let Some((set, _)) = self.pending.lock().unwrap().first() {
                return *set;
            }
            tokio::task::yield_now().await;
        }
    }

    fn answer(&self, result: Result<(), StoreError>) {
        let (_, done) = self.pending.lock().unwrap().remove(0);
        let _ = done.send(result);
    }
}

/// `set_fence(key, lower(10, 100))` in a task of its own.
fn spawn_lowering(
    fences: &Fences,
) -> tokio::task::JoinHandle<Result<fencegate::fences::FenceWritten, AdminWriteError>> {
    let fences = fences.clone();
    tokio::spawn(async move { fences.set_fence("/k", lower(10, 100)).await })
}

/// `admit("/k", token)` in a task of its own: the admitted token.
fn spawn_admission(fences: &Fences, token: u64) -> tokio::task::JoinHandle<Option<u64>> {
    let fences = fences.clone();
    tokio::spawn(async move {
        fences
            .admit("/k", token)
            .await
            .ok()
            .map(|guard| guard.token())
    })
}

/// A table over a [`GatedRecords`] whose fence `/k` is at 100.
async fn gated_at_100() -> (GatedRecords, Fences) {
    let store = GatedRecords::default();
    let fences = Fences::with_store(store.clone()).unwrap();
    drop(fences.admit("/k", 100).await.unwrap());
    (store, fences)
}

#[tokio::test]
async fn admissions_wait_while_a_lowering_is_made_durable() {
    let (store, fences) = gated_at_100().await;
    let admin = spawn_lowering(&fences);
    assert_eq!(store.wait_pending().await, Setting::Exactly(10));
    // Frozen: a token between the old and the new highest neither passes
    // nor is refused until the lowering is durable.
    let waiting = spawn_admission(&fences, 50);
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished());
    assert_eq!(fences.highest("/k"), Some(100), "memory follows the store");
    store.answer(Ok(()));
    let written = admin.await.unwrap().unwrap();
    assert_eq!((written.previous, written.highest), (Some(100), Some(10)));
    assert_eq!(waiting.await.unwrap(), Some(50));
    assert_eq!(fences.highest("/k"), Some(50));
}

#[tokio::test]
async fn a_failed_or_dropped_lowering_leaves_the_fence_as_it_was() {
    let (store, fences) = gated_at_100().await;
    let admin = spawn_lowering(&fences);
    store.wait_pending().await;
    let waiting = spawn_admission(&fences, 50);
    store.answer(Err(StoreError::Write("disk full (simulated)".into())));
    assert!(matches!(
        admin.await.unwrap(),
        Err(AdminWriteError::Store(_))
    ));
    assert_eq!(
        waiting.await.unwrap(),
        None,
        "50 < 100: refused once thawed"
    );
    assert_eq!(fences.highest("/k"), Some(100));

    // Dropped before the store answered: thawed, unchanged in memory.
    let admin = spawn_lowering(&fences);
    store.wait_pending().await;
    admin.abort();
    let _ = admin.await;
    assert!(fences.admit("/k", 100).await.is_ok());
    assert_eq!(fences.highest("/k"), Some(100));
}

#[tokio::test]
async fn a_request_waiting_on_a_deleted_fence_starts_a_fresh_one() {
    let (store, fences) = gated_at_100().await;
    let admin = tokio::spawn({
        let fences = fences.clone();
        async move { fences.forget_fence("/k", 100, "test".into(), None).await }
    });
    assert_eq!(store.wait_pending().await, Setting::Forget);
    let waiting = spawn_admission(&fences, 3);
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished());
    store.answer(Ok(()));
    assert_eq!(admin.await.unwrap().unwrap().previous, Some(100));
    assert_eq!(waiting.await.unwrap(), Some(3));
    assert_eq!(fences.highest("/k"), Some(3));
    assert_eq!(fences.len(), 1);
}

#[tokio::test]
async fn lowering_a_held_fence_is_busy_and_raising_it_is_not() {
    let fences = Fences::in_memory();
    let guard = fences.admit("/k", 5).await.unwrap();
    assert!(matches!(
        fences.set_fence("/k", lower(1, 5)).await,
        Err(AdminWriteError::Busy)
    ));
    assert!(matches!(
        fences.forget_fence("/k", 5, "t".into(), None).await,
        Err(AdminWriteError::Busy)
    ));
    assert!(matches!(
        fences.set_fence("/k", lower(1, 4)).await,
        Err(AdminWriteError::HighestChanged { highest: Some(5) })
    ));
    assert!(matches!(
        fences
            .set_fence(
                "/k",
                SetFence {
                    force: false,
                    ..lower(1, 5)
                }
            )
            .await,
        Err(AdminWriteError::WouldLower { highest: 5 })
    ));
    assert_eq!(
        fences.set_fence("/k", raise(6)).await.unwrap().previous,
        Some(5)
    );
    drop(guard);
    let written = fences.set_fence("/k", lower(1, 6)).await.unwrap();
    assert_eq!(written.highest, Some(1));
    let entries = fences.audit(10).await.unwrap();
    let actions: Vec<_> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["lower", "raise"]);
}
