//! A property test of chained writes (`--conditional-writes s3`) through the
//! layer, against a store that checks conditions when it applies a write,
//! under random interleavings of lock holders, fenced `HEAD`s, writes, and
//! requests the layer gives up on that the store applies later (the
//! residual window: held in the network, delivered late).
//!
//! The oracles:
//! - a chained write never reaches the store without a condition;
//! - a write the store applies on a version condition (`If-Match`) carries
//!   a token at least every token applied to the object before it, whatever
//!   was given up on and delivered late: no version the gateway chains a
//!   write to dates from before a higher token was admitted.
//!
//! A write conditioned on the object's absence (`If-None-Match: *`) is not
//! held to the second oracle: *absent* comes back after every delete, so a
//! late create after a newer holder's delete lands (docs/CHAINED.md, A2).
//! The model store's tags never come back.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tokio::sync::oneshot;
use tower::{service_fn, Layer, ServiceExt};

use crate::chain::{Chain, Mode};
use crate::{Fences, FencingLayer};

const OBJECTS: [&str; 2] = ["/b/x", "/b/y"];

/// What the store does with one request when it arrives.
#[derive(Debug, Default)]
struct Store {
    /// Each object's version (`None`: absent); versions never repeat.
    versions: HashMap<String, u64>,
    next: u64,
    /// Applied writes: (object, token, on a version condition), in order.
    applied: Vec<(String, u64, bool)>,
    /// Chained writes that arrived without a condition.
    unconditioned: Vec<String>,
}

impl Store {
    fn handle(&mut self, request: &Request<()>) -> Response<Bytes> {
        let object = request.uri().path().to_owned();
        let token: Option<u64> = request
            .headers()
            .get("x-fencing-token")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let current = self.versions.get(&object).copied();
        let tag = |version: u64| format!("\"v{version}\"");
        let answer = |status: StatusCode, etag: Option<String>| {
            let mut response = Response::new(Bytes::new());
            *response.status_mut() = status;
            if let Some(etag) = etag {
                response
                    .headers_mut()
                    .insert("etag", etag.parse().expect("a tag is a header value"));
            }
            response
        };
        let write = matches!(request.method().as_str(), "PUT" | "DELETE");
        if !write {
            return match current {
                Some(version) => answer(StatusCode::OK, Some(tag(version))),
                None => answer(StatusCode::NOT_FOUND, None),
            };
        }
        let if_match = header("if-match");
        let if_none_match = header("if-none-match");
        if if_match.is_none() && if_none_match.is_none() {
            self.unconditioned
                .push(format!("{} {object}", request.method()));
        }
        // The check, atomic with the commit (as S3's).
        if let Some(expected) = if_match {
            match current {
                None => return answer(StatusCode::NOT_FOUND, None),
                Some(version) if tag(version) != expected => {
                    return answer(StatusCode::PRECONDITION_FAILED, None)
                }
                Some(_) => {}
            }
        }
        if if_none_match.as_deref() == Some("*") && current.is_some() {
            return answer(StatusCode::PRECONDITION_FAILED, None);
        }
        let on_version = header("if-match").is_some();
        self.applied
            .push((object.clone(), token.unwrap_or(0), on_version));
        if request.method() == http::Method::DELETE {
            self.versions.remove(&object);
            return answer(StatusCode::NO_CONTENT, None);
        }
        self.next += 1;
        self.versions.insert(object, self.next);
        answer(StatusCode::OK, Some(tag(self.next)))
    }
}

/// One step of the schedule.
#[derive(Debug, Clone)]
enum ChainStep {
    /// The lock moves on: the next holder's token.
    NextHolder,
    /// The current holder sends a request (0 HEAD, 1 PUT, 2 DELETE), or a
    /// stale one with the previous token (`stale`).
    Send { object: usize, op: u8, stale: bool },
    /// The store answers the oldest request that reached it.
    Deliver,
    /// The client (or the gateway's timeout) gives up on the oldest
    /// request that reached the store; its bytes are still on their way.
    GiveUp,
    /// A request given up on reaches the store now.
    Late(usize),
}

fn step() -> impl Strategy<Value = ChainStep> {
    prop_oneof![
        1 => Just(ChainStep::NextHolder),
        4 => (0..OBJECTS.len(), 0u8..3, prop::bool::weighted(0.2))
            .prop_map(|(object, op, stale)| ChainStep::Send { object, op, stale }),
        3 => Just(ChainStep::Deliver),
        1 => Just(ChainStep::GiveUp),
        1 => (0usize..4).prop_map(ChainStep::Late),
    ]
}

type Arrival = (Request<()>, oneshot::Sender<Response<Bytes>>);

fn run(schedule: &[ChainStep]) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = Arc::new(Mutex::new(Store::default()));
        let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let inbox = Arc::clone(&arrivals);
        let inner = service_fn(move |request: Request<()>| {
            let (reply, answer) = oneshot::channel();
            inbox.lock().expect("inbox").push((request, reply));
            async move {
                let response = answer.await.unwrap_or_default();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let chain = Chain::new(Mode::S3, NonZeroUsize::new(16).expect("16"));
        let layer = FencingLayer::new(Fences::in_memory())
            .flat_keys(true)
            .chained_writes(Arc::new(chain));
        let service = layer.layer(inner);
        let mut token = 1u64;
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        // Requests that reached the store, oldest first, with their task.
        let mut at_store: Vec<(Arrival, usize)> = Vec::new();
        let mut late: Vec<Arrival> = Vec::new();
        for step in schedule {
            match step {
                ChainStep::NextHolder => token += 1,
                ChainStep::Send { object, op, stale } => {
                    let method = ["HEAD", "PUT", "DELETE"][usize::from(*op)];
                    let sent = if *stale {
                        token.saturating_sub(1)
                    } else {
                        token
                    };
                    let request = Request::builder()
                        .method(method)
                        .uri(OBJECTS[*object])
                        .header("x-fencing-token", sent)
                        .header("x-task", tasks.len())
                        .body(())
                        .expect("a request");
                    let service = service.clone();
                    tasks.push(tokio::spawn(async move {
                        let _ = service.oneshot(request).await;
                    }));
                }
                ChainStep::Deliver | ChainStep::GiveUp => {
                    let Some(((request, reply), task)) =
                        (!at_store.is_empty()).then(|| at_store.remove(0))
                    else {
                        continue;
                    };
                    if matches!(step, ChainStep::Deliver) {
                        let response = store.lock().expect("store").handle(&request);
                        let _ = reply.send(response);
                    } else {
                        tasks[task].abort();
                        late.push((request, reply));
                    }
                }
                ChainStep::Late(index) => {
                    if !late.is_empty() {
                        let (request, _reply) = late.remove(index % late.len());
                        store.lock().expect("store").handle(&request);
                    }
                }
            }
            // Let every task run as far as it can.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            for arrival in arrivals.lock().expect("inbox").drain(..) {
                let task = arrival
                    .0
                    .headers()
                    .get("x-task")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(0);
                at_store.push((arrival, task));
            }
        }
        // Whatever is still on its way arrives in the end.
        for ((request, _), _) in at_store.drain(..) {
            store.lock().expect("store").handle(&request);
        }
        for (request, _) in late.drain(..) {
            store.lock().expect("store").handle(&request);
        }
        let store = store.lock().expect("store");
        prop_assert!(
            store.unconditioned.is_empty(),
            "chained writes without a condition: {:?}",
            store.unconditioned
        );
        let mut highest: HashMap<&str, u64> = HashMap::new();
        for (object, token, on_version) in &store.applied {
            let top = highest.entry(object.as_str()).or_insert(0);
            prop_assert!(
                !on_version || *token >= *top,
                "{object}: token {token} applied after {top}: {:?}",
                store.applied
            );
            *top = (*top).max(*token);
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn chained_writes_are_applied_in_token_order_whatever_arrives_late(
        schedule in prop::collection::vec(step(), 1..60)
    ) {
        run(&schedule)?;
    }
}
