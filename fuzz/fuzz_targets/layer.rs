//! The fencing layer over arbitrary request heads: a method, a URI and
//! headers made of the fuzzer's bytes (whatever `http` accepts), sent
//! through `FencingLayer` to an inner service that records whether it was
//! called. The fence `/a` starts at 100. Oracles:
//! - a write (any method but GET, HEAD, OPTIONS, TRACE, PROPFIND) without a
//!   token never reaches the inner service;
//! - a request whose token header does not parse, or whose path does not
//!   normalise, never does;
//! - a token below its fence's highest never does;
//! - a refusal is an error status, never 2xx.
//!
//! Input: fields separated by 0x00: method, URI, then header name and value
//! pairs.

#![no_main]

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use fencegate::key::normalize_path;
use fencegate::token::token_from_headers;
use fencegate::{Fences, FencingLayer};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use libfuzzer_sys::fuzz_target;
use tower_layer::Layer;
use tower_service::Service;

/// The inner service: answers 200 and notes that it was called.
#[derive(Clone)]
struct Inner(Arc<AtomicBool>);

impl Service<Request<String>> for Inner {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<String>) -> Self::Future {
        self.0.store(true, Ordering::SeqCst);
        ready(Ok(Response::new(String::new())))
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().build().unwrap();
}

fn request(data: &[u8]) -> Option<Request<String>> {
    let mut fields = data.split(|b| *b == 0);
    let method = Method::from_bytes(fields.next()?).ok()?;
    let uri = Uri::try_from(fields.next()?).ok()?;
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .body(String::new())
        .ok()?;
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let name = HeaderName::from_bytes(name).ok()?;
        let value = HeaderValue::from_bytes(value).ok()?;
        request.headers_mut().append(name, value);
    }
    Some(request)
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = request(data) else { return };
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let fences = Fences::in_memory();
            drop(fences.admit("/a", 100).await.unwrap());
            let called = Arc::new(AtomicBool::new(false));
            let mut service = FencingLayer::new(fences.clone()).layer(Inner(called.clone()));

            let name = HeaderName::from_static("x-fencing-token");
            let token = token_from_headers(request.headers(), &name);
            let key = normalize_path(request.uri().path());
            let highest = key.as_ref().ok().and_then(|key| fences.highest(key));
            let read = matches!(
                request.method().as_str(),
                "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PROPFIND"
            );
            let described = format!(
                "{:?} {:?} {:?}",
                request.method(),
                request.uri(),
                request.headers()
            );

            let response = service.call(request).await.unwrap();
            let forwarded = called.load(Ordering::SeqCst);
            if !forwarded {
                assert!(
                    !response.status().is_success(),
                    "refused with 2xx: {described}"
                );
                return;
            }
            match token {
                Ok(None) => assert!(read, "a write without a token went through: {described}"),
                Ok(Some(token)) => {
                    assert!(key.is_ok(), "a bad path went through: {described}");
                    assert!(
                        highest.is_none_or(|highest| token >= highest),
                        "token {token} below {highest:?} went through: {described}"
                    );
                }
                Err(_) => panic!("a bad token went through: {described}"),
            }
        })
    });
});
