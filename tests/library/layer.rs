//! The tower middleware, against an axum `Router` and a plain
//! `tower::service_fn`: every refusal with its exact status and JSON, the
//! order of the checks, the policy knobs, and the in-flight guard living
//! until the response body has been read.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use fencegate::refusal::Refusal;
use fencegate::{Fences, FencingLayer, Scope, StaleReason};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

/// An axum app whose every route (and fallback) answers
/// `"<METHOD> <path>"`, behind `layer`, and counts the requests that reach it.
fn app(layer: FencingLayer) -> (Router, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let handler = move |request: axum::extract::Request| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            format!("{} {}", request.method(), request.uri().path())
        }
    };
    let router = Router::new()
        .route("/{*path}", any(handler.clone()))
        .fallback(handler)
        .layer(layer);
    (router, calls)
}

fn request(method: &str, path: &str, headers: &[(&str, &[u8])]) -> Request<Body> {
    let mut builder = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, HeaderValue::from_bytes(value).unwrap());
    }
    builder.body(Body::from("payload")).unwrap()
}

fn put(path: &str, token: &str) -> Request<Body> {
    request("PUT", path, &[("x-fencing-token", token.as_bytes())])
}

/// Awaits `future`, failing the test instead of hanging if it does not
/// finish within an hour of paused (virtual) time: with the clock paused,
/// an idle runtime jumps straight to this deadline.
async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3600), future)
        .await
        .expect("still pending after an hour of virtual time: stuck")
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        assert_eq!(
            self.headers.get(http::header::CONTENT_TYPE).unwrap(),
            "application/json"
        );
        serde_json::from_slice(&self.body).unwrap()
    }

    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = within(app.clone().oneshot(request)).await.unwrap();
    let (parts, body) = response.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: within(body.collect()).await.unwrap().to_bytes(),
    }
}

/// Asserts a 400 with the given `error`, a string `detail`, and nothing else.
fn assert_bad_request(answer: &Answer, error: &str, what: &str) {
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{what}");
    let body = answer.json();
    assert_eq!(body["error"], error, "{what}: {body}");
    assert!(body["detail"].is_string(), "{what}: {body}");
    assert!(answer.headers.get("x-fencing-highest").is_none());
}

fn assert_stale(answer: &Answer, resource: &str, token: u64, highest: u64, reason: &str) {
    assert_eq!(answer.status, StatusCode::CONFLICT, "{}", answer.text());
    assert_eq!(
        answer.json(),
        json!({
            "error": "stale_token",
            "resource": resource,
            "token": token,
            "highest": highest,
            "reason": reason,
        })
    );
    assert!(answer.json()["token"].is_u64() && answer.json()["highest"].is_u64());
    assert_eq!(answer.headers["x-fencing-highest"], highest.to_string());
}

fn assert_missing(answer: &Answer, resource: &str) {
    assert_eq!(
        answer.status,
        StatusCode::PRECONDITION_REQUIRED,
        "{}",
        answer.text()
    );
    assert_eq!(
        answer.json(),
        json!({"error": "missing_token", "resource": resource})
    );
}

fn calls(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn invalid_tokens_are_400_and_never_reach_the_service() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    let bad: &[&[u8]] = &[
        b"",
        b"  \t ",
        b"+1",
        b"-1",
        b"0x1",
        b"1.5",
        b"1,2",
        b"1 2",
        b"1e3",
        b"18446744073709551616",
        b"99999999999999999999",
        b"000000000000000000001",
        "\u{661}".as_bytes(),  // ARABIC-INDIC DIGIT ONE
        "\u{ff11}".as_bytes(), // FULLWIDTH DIGIT ONE
    ];
    for method in ["PUT", "GET", "DELETE", "PROPFIND"] {
        for value in bad {
            let what = format!("{method} {:?}", String::from_utf8_lossy(value));
            let answer = send(&app, request(method, "/b/o", &[("x-fencing-token", value)])).await;
            assert_bad_request(&answer, "invalid_token", &what);
        }
        // The header present twice, even with equal values.
        for (a, b) in [("1", "2"), ("5", "5")] {
            let answer = send(
                &app,
                request(
                    method,
                    "/b/o",
                    &[
                        ("x-fencing-token", a.as_bytes()),
                        ("x-fencing-token", b.as_bytes()),
                    ],
                ),
            )
            .await;
            assert_bad_request(&answer, "invalid_token", "repeated");
        }
    }
    assert_eq!(calls(&counter), 0);
    assert!(fences.is_empty(), "a refused request creates no fence");

    // The largest token and padded values are fine.
    for value in ["18446744073709551615", " \t18446744073709551615 "] {
        let answer = send(&app, put("/b/max", value)).await;
        assert_eq!(answer.status, StatusCode::OK, "{value:?}");
    }
    assert_eq!(fences.highest("/b/max"), Some(u64::MAX));
    assert_eq!(calls(&counter), 2);
}

#[tokio::test(start_paused = true)]
async fn invalid_paths_are_400_and_never_reach_the_service() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    for path in ["/../x", "/a/../../x", "/%2e%2e/x", "/%ff", "/a/%c3%28"] {
        for (method, token) in [("PUT", Some("1")), ("GET", Some("1")), ("DELETE", None)] {
            let headers: &[(&str, &[u8])] = match token {
                Some(t) => &[("x-fencing-token", t.as_bytes())],
                None => &[],
            };
            let answer = send(&app, request(method, path, headers)).await;
            assert_bad_request(&answer, "invalid_path", &format!("{method} {path}"));
        }
    }
    assert_eq!(calls(&counter), 0);
    assert!(fences.is_empty());
    // An unfenced read is forwarded untouched, whatever its path.
    let answer = send(&app, request("GET", "/../x", &[])).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(calls(&counter), 1);
}

#[tokio::test(start_paused = true)]
async fn writes_without_token_are_428_with_the_normalised_resource() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    for (path, resource) in [
        ("/b/o", "/b/o"),
        ("//b/./x/../o/", "/b/o"),
        ("/b/%6f?x=1", "/b/o"),
    ] {
        for method in ["PUT", "POST", "PATCH", "DELETE"] {
            let answer = send(&app, request(method, path, &[])).await;
            assert_missing(&answer, resource);
        }
    }
    assert_eq!(calls(&counter), 0);
    assert!(fences.is_empty());
}

#[tokio::test(start_paused = true)]
async fn stale_tokens_are_409_with_resource_token_highest_reason() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    let ok = send(&app, put("/b/o", "34")).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.text(), "PUT /b/o");
    assert!(ok.headers.get("x-fencing-highest").is_none());
    // Aliases of /b/o share its fence.
    for path in ["/b/o", "//b/o", "/b/./o", "/b/x/../o", "/b/%6f", "/b/o/"] {
        let answer = send(&app, put(path, "33")).await;
        assert_stale(&answer, "/b/o", 33, 34, "below_highest");
    }
    // Any method, reads included, is refused when stale.
    let answer = send(&app, request("GET", "/b/o", &[("x-fencing-token", b"0")])).await;
    assert_stale(&answer, "/b/o", 0, 34, "below_highest");
    assert_eq!(calls(&counter), 1);
    // Equal and higher go through.
    assert_eq!(send(&app, put("/b/o", "34")).await.status, StatusCode::OK);
    assert_eq!(send(&app, put("/b/o", "035")).await.status, StatusCode::OK);
    assert_eq!(fences.highest("/b/o"), Some(35));
    let answer = send(&app, put("/b/o", "34")).await;
    assert_stale(&answer, "/b/o", 34, 35, "below_highest");
    assert_eq!(calls(&counter), 3);
}

#[tokio::test(start_paused = true)]
async fn order_of_checks() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    // Bad token and bad path: the token is checked first.
    let answer = send(&app, put("/../x", "nope")).await;
    assert_bad_request(&answer, "invalid_token", "bad token + bad path");
    // Bad path and no token on a write: the path comes before the 428.
    let answer = send(&app, request("PUT", "/%ff", &[])).await;
    assert_bad_request(&answer, "invalid_path", "bad path + no token");
    // Bad path and a stale token: the path comes before admission.
    assert_eq!(send(&app, put("/x", "10")).await.status, StatusCode::OK);
    let answer = send(&app, put("/a/../../x", "1")).await;
    assert_bad_request(&answer, "invalid_path", "bad path + stale token");
    assert_eq!(calls(&counter), 1);

    // In header scope: a missing lock header is an invalid token, before the path.
    let (app, counter) = crate::app(FencingLayer::new(fences).scope(Scope::Header));
    let answer = send(&app, put("/../x", "1")).await;
    assert_bad_request(&answer, "invalid_token", "no lock + bad path");
    assert_eq!(calls(&counter), 0);
}

#[tokio::test(start_paused = true)]
async fn unfenced_reads_pass_without_waiting() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    // A write in flight: its response body is not read yet.
    let held = within(app.clone().oneshot(put("/b/o", "7"))).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    for method in ["GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND"] {
        let answer = tokio::time::timeout(
            Duration::from_secs(1),
            send(&app, request(method, "/b/o", &[])),
        )
        .await
        .unwrap_or_else(|_| panic!("unfenced {method} waited"));
        assert_eq!(answer.status, StatusCode::OK, "{method}");
    }
    assert_eq!(calls(&counter), 6);
    // They did not touch the fence either.
    assert_eq!(fences.highest("/b/o"), Some(7));
    assert_eq!(fences.len(), 1);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn fenced_read_advances_the_highest() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    let read = send(&app, request("GET", "/b/o", &[("x-fencing-token", b"34")])).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.text(), "GET /b/o");
    assert_eq!(fences.highest("/b/o"), Some(34));
    // The paused holder of 33 writes after the read of 34: refused.
    let answer = send(&app, put("/b/o", "33")).await;
    assert_stale(&answer, "/b/o", 33, 34, "below_highest");
    assert_eq!(calls(&counter), 1);
}

#[tokio::test(start_paused = true)]
async fn methods_unknown_to_the_layer_are_writes() {
    let (app, counter) = app(FencingLayer::new(Fences::in_memory()));
    for method in [
        "PUT",
        "POST",
        "PATCH",
        "DELETE",
        "MKCOL",
        "COPY",
        "MOVE",
        "PROPPATCH",
        "LOCK",
        "FOO",
        "get",
        "Propfind",
    ] {
        let answer = send(&app, request(method, "/b/o", &[])).await;
        assert_missing(&answer, "/b/o");
    }
    assert_eq!(calls(&counter), 0);
    for method in ["GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND"] {
        let answer = send(&app, request(method, "/b/o", &[])).await;
        assert_eq!(answer.status, StatusCode::OK, "{method}");
    }
    // A fenced unknown method is admitted like any other.
    let answer = send(&app, request("FOO", "/b/o", &[("x-fencing-token", b"3")])).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), "FOO /b/o");
    assert_eq!(calls(&counter), 6);
}

#[tokio::test(start_paused = true)]
async fn allow_unfenced_writes() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()).allow_unfenced_writes(true));
    for method in ["PUT", "DELETE", "MKCOL"] {
        let answer = send(&app, request(method, "/b/o", &[])).await;
        assert_eq!(answer.status, StatusCode::OK, "{method}");
    }
    assert_eq!(calls(&counter), 3);
    assert!(fences.is_empty(), "unfenced writes set no fence");
    // Tokens are still checked when present.
    assert_eq!(send(&app, put("/b/o", "5")).await.status, StatusCode::OK);
    assert_stale(
        &send(&app, put("/b/o", "4")).await,
        "/b/o",
        4,
        5,
        "below_highest",
    );
    assert_bad_request(&send(&app, put("/b/o", "x")).await, "invalid_token", "x");
    // An unfenced write still passes after a fence exists (the policy's price).
    assert_eq!(
        send(&app, request("PUT", "/b/o", &[])).await.status,
        StatusCode::OK
    );
    assert_eq!(calls(&counter), 5);
}

#[tokio::test(start_paused = true)]
async fn custom_token_header() {
    let fences = Fences::in_memory();
    let layer =
        FencingLayer::new(fences.clone()).token_header(HeaderName::from_static("x-lock-token"));
    let (app, counter) = app(layer);
    // The default header means nothing now.
    assert_missing(&send(&app, put("/b/o", "5")).await, "/b/o");
    let with = |t: &'static str| request("PUT", "/b/o", &[("x-lock-token", t.as_bytes())]);
    assert_eq!(send(&app, with("5")).await.status, StatusCode::OK);
    assert_stale(&send(&app, with("4")).await, "/b/o", 4, 5, "below_highest");
    assert_bad_request(&send(&app, with("0x5")).await, "invalid_token", "0x5");
    let answer = send(
        &app,
        request("GET", "/b/o", &[("x-fencing-token", b"junk")]),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "not the token header any more"
    );
    assert_eq!(calls(&counter), 2);
}

#[tokio::test(start_paused = true)]
async fn prefix_scope_shares_one_fence_per_bucket() {
    let fences = Fences::in_memory();
    let scope = Scope::Prefix(NonZeroUsize::new(1).unwrap());
    let (app, counter) = app(FencingLayer::new(fences.clone()).scope(scope));
    assert_eq!(
        send(&app, put("/bucket/a", "5")).await.status,
        StatusCode::OK
    );
    // Another object in the same bucket: same fence.
    assert_stale(
        &send(&app, put("/bucket/b", "4")).await,
        "/bucket",
        4,
        5,
        "below_highest",
    );
    assert_stale(
        &send(&app, put("//bucket/./deep/er/obj", "4")).await,
        "/bucket",
        4,
        5,
        "below_highest",
    );
    assert_missing(
        &send(&app, request("PUT", "/bucket/c", &[])).await,
        "/bucket",
    );
    // Another bucket: another fence.
    assert_eq!(
        send(&app, put("/other/b", "1")).await.status,
        StatusCode::OK
    );
    assert_eq!(fences.highest("/bucket"), Some(5));
    assert_eq!(fences.highest("/other"), Some(1));
    assert_eq!(fences.highest("/bucket/a"), None);
    assert_eq!(calls(&counter), 2);
}

#[tokio::test(start_paused = true)]
async fn header_scope_keys_fences_by_lock_name() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()).scope(Scope::Header));
    let locked = |path: &str, token: &str, lock: &[u8]| {
        request(
            "PUT",
            path,
            &[
                ("x-fencing-token", token.as_bytes()),
                ("x-fencing-lock", lock),
            ],
        )
    };
    // Fenced without a lock name: invalid token.
    assert_bad_request(
        &send(&app, put("/t/1", "5")).await,
        "invalid_token",
        "no lock",
    );
    let long = "x".repeat(257);
    for bad in [&b""[..], long.as_bytes(), "caf\u{e9}".as_bytes(), b"a\tb"] {
        assert_bad_request(
            &send(&app, locked("/t/1", "5", bad)).await,
            "invalid_token",
            "bad lock",
        );
    }
    let twice = request(
        "PUT",
        "/t/1",
        &[
            ("x-fencing-token", b"5"),
            ("x-fencing-lock", b"a"),
            ("x-fencing-lock", b"a"),
        ],
    );
    assert_bad_request(&send(&app, twice).await, "invalid_token", "lock twice");
    assert_eq!(calls(&counter), 0);

    // With a lock name the fence is the lock's, whatever the path.
    assert_eq!(
        send(&app, locked("/t/1", "5", b"orders")).await.status,
        StatusCode::OK
    );
    assert_eq!(fences.highest("orders"), Some(5));
    assert_stale(
        &send(&app, locked("/t/2", "4", b"orders")).await,
        "orders",
        4,
        5,
        "below_highest",
    );
    // Another lock is another fence, even on the same path.
    assert_eq!(
        send(&app, locked("/t/1", "1", b"invoices")).await.status,
        StatusCode::OK
    );
    let max = "x".repeat(256);
    assert_eq!(
        send(&app, locked("/t/1", "1", max.as_bytes())).await.status,
        StatusCode::OK
    );
    assert_eq!(calls(&counter), 3);
    assert_eq!(fences.highest("/t/1"), None);
    // An unfenced write still needs a token; an unfenced read passes.
    assert_missing(&send(&app, request("PUT", "/t/1", &[])).await, "/t/1");
    let read = send(
        &app,
        request("GET", "/t/1", &[("x-fencing-lock", b"orders")]),
    )
    .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(calls(&counter), 4);
}

// ---------------------------------------------------------------------------
// The in-flight guard lives in the response body.
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn response_body_keeps_the_request_in_flight() {
    let fences = Fences::in_memory();
    let (app, counter) = app(FencingLayer::new(fences.clone()));
    let first = within(app.clone().oneshot(put("/b/o", "1"))).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);

    // Equal tokens fly together: another 1 goes while 1's body is unread.
    let twin = send(&app, put("/b/o", "1")).await;
    assert_eq!(twin.status, StatusCode::OK);
    assert_eq!(calls(&counter), 2);

    let spawn_put = |token: &'static str| {
        let app = app.clone();
        tokio::spawn(async move { app.oneshot(put("/b/o", token)).await.unwrap() })
    };
    let second = spawn_put("2");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !second.is_finished(),
        "2 must wait while 1's body is unread"
    );
    assert_eq!(calls(&counter), 2);
    assert_eq!(fences.highest("/b/o"), Some(2));
    // A lower token is refused at once meanwhile.
    let one_more = send(&app, put("/b/o", "1")).await;
    assert_stale(&one_more, "/b/o", 1, 2, "below_highest");

    // Reading 1's body to the end releases it.
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "PUT /b/o");
    let second = within(second).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(calls(&counter), 3);

    // Dropping an unread body releases too.
    let third = spawn_put("3");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!third.is_finished(), "3 must wait while 2's body is unread");
    drop(second);
    let third = within(third).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);

    // A waiter overtaken while the body is unread gets 409 overtaken.
    let fourth = spawn_put("4");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fifth = spawn_put("5");
    let fourth = within(fourth).await.unwrap();
    let (parts, body) = fourth.into_parts();
    let answer = Answer {
        status: parts.status,
        headers: parts.headers,
        body: within(body.collect()).await.unwrap().to_bytes(),
    };
    assert_stale(&answer, "/b/o", 4, 5, "overtaken");
    assert!(!fifth.is_finished());
    drop(third);
    assert_eq!(within(fifth).await.unwrap().status(), StatusCode::OK);
    assert_eq!(calls(&counter), 5);
}

/// A response body fed through a channel, to read it frame by frame.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

#[tokio::test(start_paused = true)]
async fn plain_service_fn_stays_in_flight_until_the_last_frame() {
    let fences = Fences::in_memory();
    let calls = Arc::new(AtomicUsize::new(0));
    let senders = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counter, feeds) = (Arc::clone(&calls), Arc::clone(&senders));
    let inner = tower::service_fn(move |request: Request<String>| {
        counter.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        feeds.lock().unwrap().push(tx);
        async move {
            assert_eq!(request.body(), "payload");
            Ok::<_, Infallible>(Response::new(ChannelBody(rx)))
        }
    });
    let service = FencingLayer::new(fences.clone()).layer(inner);
    let req = |method: &str, token: Option<&str>| {
        let mut builder = Request::builder().method(method).uri("/s/o");
        if let Some(token) = token {
            builder = builder.header("x-fencing-token", token);
        }
        builder.body("payload".to_string()).unwrap()
    };

    // Refusals come back as responses with the JSON body and the refusal in
    // the extensions.
    let refused = within(service.clone().oneshot(req("PUT", None)))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::PRECONDITION_REQUIRED);
    assert_eq!(
        refused.extensions().get::<Refusal>(),
        Some(&Refusal::MissingToken {
            resource: "/s/o".into()
        })
    );
    let body: Value =
        serde_json::from_slice(&refused.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body, json!({"error": "missing_token", "resource": "/s/o"}));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // 10 admitted; its body streams in two chunks.
    let first = within(service.clone().oneshot(req("PUT", Some("10"))))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let mut first_body = first.into_body();
    let waiting = {
        let service = service.clone();
        tokio::spawn(async move { service.oneshot(req("POST", Some("11"))).await.unwrap() })
    };
    let feed = senders.lock().unwrap()[0].clone();
    feed.send(Bytes::from("part 1")).await.unwrap();
    let frame = within(first_body.frame()).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "part 1");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !waiting.is_finished(),
        "one chunk read is not the whole body"
    );
    feed.send(Bytes::from("part 2")).await.unwrap();
    let frame = within(first_body.frame()).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "part 2");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !waiting.is_finished(),
        "the end of the body was not seen yet"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The end of the stream: 11 goes, though `first_body` is still alive.
    drop(feed);
    senders.lock().unwrap().remove(0);
    assert!(within(first_body.frame()).await.is_none());
    let second = within(waiting).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    drop(first_body);

    // Stale on the plain service, refusal in the extensions.
    let stale = within(service.clone().oneshot(req("GET", Some("9"))))
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert_eq!(stale.headers()["x-fencing-highest"], "11");
    match stale.extensions().get::<Refusal>() {
        Some(Refusal::Stale { resource, stale }) => {
            assert_eq!(resource, "/s/o");
            assert_eq!((stale.token, stale.highest), (9, 11));
            assert_eq!(stale.reason, StaleReason::BelowHighest);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // An unfenced read goes straight through, even while 11 is in flight.
    let read = tokio::time::timeout(
        Duration::from_secs(1),
        service.clone().oneshot(req("GET", None)),
    )
    .await
    .expect("no wait")
    .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    drop(second);
}

#[tokio::test(start_paused = true)]
async fn full_body_service_fn_round_trip() {
    // Any `Service<http::Request<B>>` with any body type works.
    let fences = Fences::in_memory();
    let service = FencingLayer::new(fences.clone()).layer(tower::service_fn(
        |request: Request<Full<Bytes>>| async move {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            Ok::<_, Infallible>(Response::new(Full::new(body)))
        },
    ));
    let req = |token: &str| {
        Request::put("/echo")
            .header("x-fencing-token", token)
            .body(Full::new(Bytes::from("echo me")))
            .unwrap()
    };
    let ok = within(service.clone().oneshot(req("2"))).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(ok.extensions().get::<Refusal>().is_none());
    assert_eq!(
        ok.into_body().collect().await.unwrap().to_bytes(),
        "echo me"
    );
    let stale = within(service.clone().oneshot(req("1"))).await.unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert_eq!(
        stale.headers()[http::header::CONTENT_TYPE],
        "application/json"
    );
    let body: Value =
        serde_json::from_slice(&stale.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(
        body,
        json!({"error": "stale_token", "resource": "/echo", "token": 1, "highest": 2, "reason": "below_highest"})
    );
}

/// `Enforce::Report`: the stale write and the write without a token reach
/// the service, marked with why `On` would have refused them; the fence is
/// raised as under `On`.
#[tokio::test]
async fn report_mode_passes_what_on_refuses_with_the_reason_marked() {
    use fencegate::fencing::{Enforce, WouldRefuse};
    let fences = Fences::in_memory();
    let (app, calls) = app(FencingLayer::new(fences.clone()).enforce(Enforce::Report));
    let put = |token: Option<&str>| {
        let mut request = Request::put("/r/a");
        if let Some(token) = token {
            request = request.header("X-Fencing-Token", token);
        }
        request.body(Body::empty()).unwrap()
    };
    let first = app.clone().oneshot(put(Some("34"))).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.extensions().get::<WouldRefuse>().is_none());
    let stale = app.clone().oneshot(put(Some("33"))).await.unwrap();
    assert_eq!(stale.status(), StatusCode::OK);
    assert_eq!(
        stale.extensions().get::<WouldRefuse>(),
        Some(&WouldRefuse {
            reason: "below_highest"
        })
    );
    let missing = app.clone().oneshot(put(None)).await.unwrap();
    assert_eq!(
        missing.extensions().get::<WouldRefuse>().map(|w| w.reason),
        Some("missing_token")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(fences.highest("/r/a"), Some(34));
}
