//! The admission state machine under a fuzzer-chosen schedule of
//! admissions, finished requests, store failures and admin lowerings, on
//! three keys. The invariant, per key: a request is let through only when
//! every request in flight on the key carries its token, and its token is
//! at least the highest let through before (since the last admin write that
//! lowered or forgot the fence, which is allowed to reset it).

#![no_main]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fencegate::fences::SetFence;
use fencegate::store::{Claim, ClaimFuture, FenceChange, FenceStore, PersistFuture, StoreError};
use fencegate::{Fences, InFlight};
use libfuzzer_sys::fuzz_target;

/// Durable on paper; fails every write while `failing` is set.
#[derive(Clone, Default)]
struct FlakyStore {
    failing: Arc<AtomicBool>,
}

impl FlakyStore {
    fn result(&self) -> PersistFuture {
        let result = if self.failing.load(Ordering::SeqCst) {
            Err(StoreError::Write("simulated".into()))
        } else {
            Ok(())
        };
        Box::pin(std::future::ready(result))
    }
}

impl FenceStore for FlakyStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }
    fn claim(&self, _key: &str, token: u64) -> ClaimFuture {
        let result = self.result();
        Box::pin(async move {
            result.await?;
            Ok(Claim::granted(token))
        })
    }
    fn record(&self, _change: FenceChange) -> PersistFuture {
        self.result()
    }
    fn is_durable(&self) -> bool {
        true
    }
}

const KEYS: [&str; 3] = ["/a", "/b", "/c"];

#[derive(Default)]
struct Model {
    /// Tokens in flight, per key.
    in_flight: HashMap<&'static str, Vec<u64>>,
    /// The highest let through since the last admin lowering, per key.
    floor: HashMap<&'static str, u64>,
}

impl Model {
    fn let_through(&mut self, key: &'static str, token: u64) {
        let others = self.in_flight.entry(key).or_default();
        assert!(
            others.iter().all(|t| *t == token),
            "{key}: {token} with {others:?} in flight"
        );
        others.push(token);
        let floor = self.floor.entry(key).or_insert(0);
        assert!(token >= *floor, "{key}: {token} let through below {floor}");
        *floor = token;
    }

    fn finished(&mut self, key: &'static str, token: u64) {
        let others = self.in_flight.get_mut(key).unwrap();
        let at = others.iter().position(|t| *t == token).unwrap();
        others.swap_remove(at);
    }
}

type Admission = Pin<Box<dyn std::future::Future<Output = ()>>>;

thread_local! {
    /// One runtime for every input: building one per input costs more than
    /// the schedule it runs.
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().build().unwrap();
}

fuzz_target!(|ops: &[u8]| {
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let store = FlakyStore::default();
            let fences = Fences::with_store(store.clone()).unwrap();
            let model = Arc::new(Mutex::new(Model::default()));
            let held: Arc<Mutex<Vec<(&'static str, InFlight)>>> = Arc::default();
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    for op in ops.chunks(3) {
                        let (a, b) = (
                            op.get(1).copied().unwrap_or(0),
                            op.get(2).copied().unwrap_or(0),
                        );
                        match op[0] % 5 {
                            0 | 1 => {
                                let key = KEYS[usize::from(a) % KEYS.len()];
                                let token = u64::from(b % 24);
                                let (fences, model, held) =
                                    (fences.clone(), model.clone(), held.clone());
                                let admission: Admission = Box::pin(async move {
                                    if let Ok(guard) = fences.admit(key, token).await {
                                        model.lock().unwrap().let_through(key, token);
                                        held.lock().unwrap().push((key, guard));
                                    }
                                });
                                tokio::task::spawn_local(admission);
                            }
                            2 => {
                                let mut held = held.lock().unwrap();
                                if !held.is_empty() {
                                    let at = usize::from(a) % held.len();
                                    let (key, guard) = held.swap_remove(at);
                                    model.lock().unwrap().finished(key, guard.token());
                                    drop(guard);
                                }
                            }
                            3 => store.failing.store(a % 2 == 1, Ordering::SeqCst),
                            _ => {
                                let key = KEYS[usize::from(a) % KEYS.len()];
                                if let Some(highest) = fences.highest(key) {
                                    let lowered = fences
                                        .set_fence(
                                            key,
                                            SetFence {
                                                highest: u64::from(b % 24),
                                                force: true,
                                                if_highest: Some(highest),
                                                actor: "fuzz".into(),
                                                reason: "fuzz".into(),
                                            },
                                        )
                                        .await;
                                    if let Ok(written) = lowered {
                                        let mut model = model.lock().unwrap();
                                        let floor = model.floor.entry(key).or_insert(0);
                                        *floor = (*floor).min(written.highest.unwrap_or(0));
                                    }
                                }
                            }
                        }
                        for _ in 0..4 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
                .await;
        })
    });
});
