//! The Rust client kit (`fencegate::client`, feature `client`) against the
//! real gateway: hyper-util's client wrapped in `FencingTokenLayer`, the
//! gateway in front of the recording backend, its refusals read back with
//! `FencingError::from_answer` in each of its dialects.

#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use fencegate::client::{FencingError, FencingTokenLayer, LockToken, Retry, SendError};
use http::header::HeaderName;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use support::{Backend, GatewayProcess};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

type Plain = Client<HttpConnector, Full<Bytes>>;
type Fenced = fencegate::client::FencingToken<Plain, LockToken>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn fenced(lock: &LockToken, header: Option<&'static str>) -> Fenced {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut layer = FencingTokenLayer::new(lock.clone());
    if let Some(name) = header {
        layer = layer.header(HeaderName::from_static(name));
    }
    layer.layer(client)
}

/// Sends `method target` with `body`; the answer's status, head and body.
async fn send(
    client: &mut Fenced,
    gw: &GatewayProcess,
    method: &str,
    target: &str,
    body: &'static [u8],
) -> Result<(StatusCode, http::HeaderMap, Bytes), SendError<hyper_util::client::legacy::Error>> {
    send_with(client, gw, method, target, &[], body).await
}

/// [`send`] with `headers`.
async fn send_with(
    client: &mut Fenced,
    gw: &GatewayProcess,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Result<(StatusCode, http::HeaderMap, Bytes), SendError<hyper_util::client::legacy::Error>> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{}{target}", gw.data_url()));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from_static(body)))
        .expect("a request");
    let answer = client.ready().await?.call(request).await?;
    let (head, body) = answer.into_parts();
    let body = body.collect().await.expect("the answer's body").to_bytes();
    Ok((head.status, head.headers, body))
}

#[test]
fn a_stale_holder_reads_stale_token_and_once_it_knows_its_lock_lost_sends_nothing() {
    let backend = Backend::start();
    let gw = GatewayProcess::in_front_of(&backend, &[]);
    runtime().block_on(async {
        let first = LockToken::new();
        first.grant(5, None);
        let mut first_client = fenced(&first, None);
        let (status, _, _) = send(&mut first_client, &gw, "PUT", "/b/report", b"one")
            .await
            .expect("sent");
        assert!(status.is_success(), "{status}");
        assert_eq!(backend.records_for("/b/report")[0].token_u64(), Some(5));

        // The next holder's grant, then the first holder's late write.
        let second = LockToken::new();
        second.grant(6, None);
        let (status, _, _) = send(&mut fenced(&second, None), &gw, "PUT", "/b/report", b"two")
            .await
            .expect("sent");
        assert!(status.is_success(), "{status}");
        let (status, headers, body) = send(&mut first_client, &gw, "PUT", "/b/report", b"late")
            .await
            .expect("sent");
        let refusal = FencingError::from_answer(status, &headers, &body);
        assert_eq!(
            refusal,
            Some(FencingError::StaleToken {
                token: Some(5),
                highest: Some(6),
                resource: Some("/b/report".into()),
                reason: Some("below_highest".into()),
            })
        );
        assert_eq!(refusal.map(|r| r.retry()), Some(Retry::Never));

        // Told, the holder drops its token: nothing more leaves it.
        first.lose("the gateway answered stale_token");
        let reached = backend.count();
        let refused = send(&mut first_client, &gw, "PUT", "/b/report", b"later").await;
        assert!(
            matches!(refused, Err(SendError::LockLost(_))),
            "{refused:?}"
        );
        // A lease that ran out unrenewed is lost too, before any answer.
        let third = LockToken::new();
        third.grant(7, Some(Instant::now() - Duration::from_millis(1)));
        let refused = send(&mut fenced(&third, None), &gw, "GET", "/b/report", b"").await;
        assert!(
            matches!(refused, Err(SendError::LockLost(_))),
            "{refused:?}"
        );
        assert_eq!(backend.count(), reached, "a lost lock sent a request");
    });
}

#[test]
fn refusals_in_s3s_and_azures_dialects_read_back_as_the_same_errors() {
    let backend = Backend::start();
    let s3 = GatewayProcess::in_front_of(&backend, &["--store", "s3"]);
    let azure = GatewayProcess::in_front_of(
        &backend,
        &["--store", "azure", "--token-header", "x-ms-fencing-token"],
    );
    // An Azure Put Blob, as the table reads one: the account first (the
    // backend is at an IP address, where Azurite reads it from the path)
    // and its selecting header.
    let put_blob: &[(&str, &str)] = &[("x-ms-blob-type", "BlockBlob")];
    runtime().block_on(async {
        for (gw, header, target, fields) in [
            (&s3, None, "/c/blob", &[][..]),
            (&azure, Some("x-ms-fencing-token"), "/acct/c/blob", put_blob),
        ] {
            let new = LockToken::new();
            new.grant(9, None);
            let (status, _, body) =
                send_with(&mut fenced(&new, header), gw, "PUT", target, fields, b"new")
                    .await
                    .expect("sent");
            assert!(status.is_success(), "{status} {body:?}");
            let old = LockToken::new();
            old.grant(8, None);
            let (status, headers, body) =
                send_with(&mut fenced(&old, header), gw, "PUT", target, fields, b"old")
                    .await
                    .expect("sent");
            assert!(body.starts_with(b"<?xml"), "{body:?}");
            assert_eq!(
                FencingError::from_answer(status, &headers, &body),
                Some(FencingError::StaleToken {
                    token: Some(8),
                    highest: Some(9),
                    resource: Some(target.into()),
                    reason: Some("below_highest".into()),
                }),
                "{header:?}: {body:?}"
            );
        }
    });
}

#[test]
fn version_unknown_is_retried_after_a_fenced_head_and_goes_through() {
    let backend = Backend::start_conditional();
    let gw = GatewayProcess::in_front_of(
        &backend,
        &[
            "--conditional-writes",
            "http",
            "--chain-observe",
            "client-head",
        ],
    );
    runtime().block_on(async {
        let lock = LockToken::new();
        lock.grant(3, None);
        let mut client = fenced(&lock, None);
        let (status, headers, body) = send(&mut client, &gw, "PUT", "/b/chained", b"v1")
            .await
            .expect("sent");
        let refusal = FencingError::from_answer(status, &headers, &body).expect("a refusal");
        assert!(
            matches!(&refusal, FencingError::VersionUnknown { object: Some(o), .. } if o == "/b/chained"),
            "{refusal:?}"
        );
        assert_eq!(refusal.retry(), Retry::AfterFencedHead);
        let (status, _, _) = send(&mut client, &gw, "HEAD", "/b/chained", b"")
            .await
            .expect("sent");
        assert_eq!(status, StatusCode::NOT_FOUND, "absent is a version");
        let (status, headers, body) = send(&mut client, &gw, "PUT", "/b/chained", b"v1")
            .await
            .expect("sent");
        assert!(status.is_success(), "{status} {body:?}");
        assert_eq!(FencingError::from_answer(status, &headers, &body), None);
    });
}
