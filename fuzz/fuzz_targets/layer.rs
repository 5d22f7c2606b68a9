//! The fencing layer over arbitrary request heads: a method, a URI and
//! headers made of the fuzzer's bytes (whatever `http` accepts), sent
//! through `FencingLayer` to an inner service that records whether it was
//! called. The fences `/a`, `/d/m` and `/bkt/zq9` start at 100. Oracles:
//! - a write (any method but GET, HEAD, OPTIONS, TRACE, PROPFIND) without a
//!   token never reaches the inner service;
//! - a request whose token header does not parse, or whose path does not
//!   normalise, never does;
//! - a request is forwarded only if every object it can change was
//!   admitted: with a token below 100, none that can change a fenced object
//!   does, whether it names it by its path, as a WebDAV `Destination`, as a
//!   collection above it (`DELETE`, `MOVE`, `COPY` without `Depth: 0`,
//!   `PROPPATCH` with a `Depth` other than 0) or by a Google Cloud Storage
//!   JSON API name (`/storage/v1/b/bkt/o/zq9`, `?name=zq9`); and an S3
//!   `DeleteObjects` (`POST ...?delete`), whose keys the layer alone is not
//!   given, never does;
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

/// The fences every run starts with, at 100.
const FENCED: [&str; 3] = ["/a", "/d/m", "/bkt/zq9"];

/// Whether `path` (normalised) is a fenced key or, for a write that acts
/// on a collection, above one.
fn covers_fenced(path: &str, collection: bool) -> bool {
    FENCED.iter().any(|fenced| {
        *fenced == path
            || collection
                && (path == "/"
                    || fenced
                        .strip_prefix(path)
                        .is_some_and(|rest| rest.starts_with('/')))
    })
}

/// The oracle's own reading of what a request can change beyond its own
/// path, written apart from `fencegate::reach`.
fn reaches_fenced(request: &Request<String>) -> bool {
    let method = request.method().as_str();
    let headers = request.headers();
    let depth = headers.get("depth").map(|d| d.as_bytes().trim_ascii());
    let depth_zero = depth == Some(b"0".as_slice());
    let depth_deep = depth.is_some_and(|d| d != b"0");
    let own = normalize_path(request.uri().path()).ok();
    let own_collection = match method {
        "DELETE" | "MOVE" => true,
        "PROPPATCH" => depth_deep,
        _ => false,
    };
    if own
        .as_deref()
        .is_some_and(|own| covers_fenced(own, own_collection))
    {
        return true;
    }
    if matches!(method, "COPY" | "MOVE") {
        for value in headers.get_all("destination") {
            let destination = Uri::try_from(value.as_bytes())
                .ok()
                .and_then(|uri| normalize_path(uri.path()).ok());
            let collection = method == "MOVE" || !depth_zero;
            if destination.is_some_and(|d| covers_fenced(&d, collection)) {
                return true;
            }
        }
    }
    if method == "POST"
        && request.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "delete" || p.starts_with("delete="))
        })
    {
        return true;
    }
    // The JSON API: the object after `/b/bkt/o/`, or `name=` in the query.
    let decoded = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let path = request.uri().path();
    for tree in [
        "/storage/v1/b/bkt/o",
        "/upload/storage/v1/b/bkt/o",
        "/download/storage/v1/b/bkt/o",
    ] {
        if let Some(rest) = path.strip_prefix(tree) {
            let name = rest
                .strip_prefix('/')
                .and_then(|r| r.split('/').next())
                .map(decoded);
            let queried = request.uri().query().is_some_and(|q| {
                q.split('&').any(|p| {
                    p.strip_prefix("name=")
                        .is_some_and(|n| decoded(&n.replace('+', " ")) == "zq9")
                })
            });
            if name.as_deref() == Some("zq9") || queried {
                return true;
            }
        }
    }
    false
}

fuzz_target!(|data: &[u8]| {
    let Some(request) = request(data) else { return };
    RUNTIME.with(|runtime| {
        runtime.block_on(async {
            let fences = Fences::in_memory();
            for key in FENCED {
                drop(fences.admit(key, 100).await.unwrap());
            }
            let called = Arc::new(AtomicBool::new(false));
            let mut service = FencingLayer::new(fences.clone()).layer(Inner(called.clone()));

            let name = HeaderName::from_static("x-fencing-token");
            let token = token_from_headers(request.headers(), &name);
            let key = normalize_path(request.uri().path());
            let highest = key.as_ref().ok().and_then(|key| fences.highest(key));
            let reaches_fenced = reaches_fenced(&request);
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
                    assert!(
                        token >= 100 || !reaches_fenced,
                        "token {token} went through to a fenced object beyond its path: {described}"
                    );
                }
                Err(_) => panic!("a bad token went through: {described}"),
            }
        })
    });
});
