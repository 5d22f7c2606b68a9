//! A fence store that fails: the raise is refused with 503, nothing reaches
//! the inner service, and the failed token is not left behind as "highest".

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use fencegate::store::{Claim, ClaimFuture, FenceStore, StoreError};
use fencegate::{AdmitError, Fences, FencingLayer};
use http::{Request, Response, StatusCode};
use tower::{service_fn, ServiceExt};

/// Durable on paper; fails every raise while `failing` is set.
#[derive(Clone, Default)]
struct FlakyStore {
    failing: Arc<AtomicBool>,
}

impl FenceStore for FlakyStore {
    fn load(&self, _each: &mut dyn FnMut(&str, u64)) -> Result<(), StoreError> {
        Ok(())
    }

    fn claim(&self, _key: &str, token: u64) -> ClaimFuture {
        let result = if self.failing.load(Ordering::SeqCst) {
            Err(StoreError::Write("disk full (simulated)".into()))
        } else {
            Ok(Claim::granted(token))
        };
        Box::pin(std::future::ready(result))
    }

    fn is_durable(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_failed_raise_is_not_admitted_and_not_remembered() {
    let store = FlakyStore::default();
    let fences = Fences::with_store(store.clone()).unwrap();
    drop(fences.admit("/k", 30).await.unwrap());

    store.failing.store(true, Ordering::SeqCst);
    let error = fences.admit("/k", 34).await.unwrap_err();
    assert!(matches!(error, AdmitError::Store(_)), "{error:?}");
    // 34 was never admitted: the highest is still the durable 30.
    assert_eq!(fences.highest("/k"), Some(30));
    // A token already durable needs no write, so it still goes through.
    drop(fences.admit("/k", 30).await.unwrap());
    // A brand-new key fails and leaves nothing behind either.
    assert!(fences.admit("/new", 1).await.is_err());
    assert_eq!(fences.highest("/new"), None);

    store.failing.store(false, Ordering::SeqCst);
    drop(fences.admit("/k", 31).await.unwrap());
    assert_eq!(fences.highest("/k"), Some(31));
    let stale = fences.admit("/k", 30).await.unwrap_err();
    assert_eq!(stale.stale().map(|s| s.highest), Some(31));
}

#[tokio::test]
async fn the_layer_answers_503_and_forwards_nothing() {
    let store = FlakyStore::default();
    store.failing.store(true, Ordering::SeqCst);
    let calls = Arc::new(AtomicUsize::new(0));
    let inner_calls = Arc::clone(&calls);
    let inner = service_fn(move |_request: Request<String>| {
        inner_calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, std::convert::Infallible>(Response::new(String::new())) }
    });
    let service = tower::Layer::layer(
        &FencingLayer::new(Fences::with_store(store).unwrap()),
        inner,
    );

    let request = Request::put("/bucket/obj")
        .header("x-fencing-token", "7")
        .body(String::new())
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"], "fence_store_unavailable");
    assert!(json["detail"].as_str().unwrap().contains("disk full"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
