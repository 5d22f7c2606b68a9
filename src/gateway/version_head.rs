//! The requests the gateway sends the store itself for chained writes,
//! through the same proxy (pool, TLS, timeouts) as those it forwards:
//! `--chain-observe gateway-head`'s `HEAD` that learns an object's version
//! before a write ([`VersionReader`](crate::chain::VersionReader)), and the
//! start-up probe that finds a store ignoring conditions.

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use http::{HeaderMap, Method, Request, Uri};

use super::inbound::Inbound;
use super::proxy::Proxy;
use crate::chain::{Effect, HeadAnswer, Mode, Version, VersionReader};
use crate::fencing::Forward;

/// Reads versions with requests sent through the gateway's proxy: a `HEAD`,
/// or for WebDAV a `PROPFIND` of `getetag` (Apache answers a `HEAD` of a
/// collection 404, while its `PROPFIND` names the version a `DELETE`'s `If`
/// list must carry).
#[derive(Clone)]
pub(crate) struct HeadThroughProxy {
    pub(crate) proxy: Proxy,
    pub(crate) mode: Mode,
}

/// The `PROPFIND` body that asks for the version alone.
const PROPFIND_GETETAG: &str = r#"<?xml version="1.0" encoding="utf-8"?><propfind xmlns="DAV:"><prop><getetag/></prop></propfind>"#;

impl VersionReader for HeadThroughProxy {
    fn head(
        &self,
        uri: &Uri,
        credentials: &HeaderMap,
    ) -> Pin<Box<dyn Future<Output = HeadAnswer> + Send>> {
        let webdav = self.mode == Mode::Webdav;
        let mut head = if webdav {
            let mut propfind = Request::new(Body::from(PROPFIND_GETETAG));
            if let Ok(method) = Method::from_bytes(b"PROPFIND") {
                *propfind.method_mut() = method;
            }
            propfind
                .headers_mut()
                .insert("depth", http::HeaderValue::from_static("0"));
            propfind.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/xml"),
            );
            propfind
        } else {
            let mut head = Request::new(Body::empty());
            *head.method_mut() = Method::HEAD;
            head
        };
        *head.uri_mut() = uri.clone();
        head.headers_mut().extend(credentials.clone());
        let proxy = self.proxy.clone();
        let path = uri.path().to_owned();
        Box::pin(async move {
            let Ok(answer) = proxy.forward(Inbound::from(head)).await;
            let status = answer.status();
            if status.is_server_error() {
                return Err(format!(
                    "the gateway's read of {path} was answered {status}"
                ));
            }
            let (parts, body) = answer.into_parts();
            if !webdav || status != http::StatusCode::MULTI_STATUS {
                return Ok((parts.status, parts.headers));
            }
            // A 207 names the version in `getetag`: answer as a HEAD would.
            let bytes = http_body_util::BodyExt::collect(body)
                .await
                .map_err(|e| format!("reading the PROPFIND answer for {path}: {e}"))?
                .to_bytes();
            let text = String::from_utf8_lossy(&bytes);
            let mut headers = HeaderMap::new();
            if let Some(tag) = getetag(&text) {
                if let Ok(value) = http::HeaderValue::from_str(&tag) {
                    headers.insert(http::header::ETAG, value);
                }
            }
            Ok((http::StatusCode::OK, headers))
        })
    }
}

/// The `DAV:getetag` of a `PROPFIND` answer, if it names one.
fn getetag(multistatus: &str) -> Option<String> {
    let document = roxmltree::Document::parse(multistatus).ok()?;
    let tag = document
        .descendants()
        .find(|node| node.has_tag_name(("DAV:", "getetag")))?
        .text()?
        .trim()
        .to_owned();
    (!tag.is_empty()).then_some(tag)
}

/// What the start-up probe found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The store refused the write whose condition could not match.
    Honoured,
    /// It applied it: chaining in front of it would be a no-op.
    Ignored(http::StatusCode),
    /// It answered something else (no permission, no such collection):
    /// nothing can be concluded.
    Inconclusive(String),
}

/// Writes once to `path` with `mode`'s condition on a version no object
/// has: a store that checks conditions refuses it (412), one that ignores
/// them (nginx's WebDAV) applies it, and the probe object is then removed.
pub(crate) async fn probe(proxy: &Proxy, mode: Mode, path: &str) -> Probe {
    let Ok(uri) = Uri::try_from(path) else {
        return Probe::Inconclusive(format!("{path:?} is not a path"));
    };
    let never = Version::Tag("\"fencegate-probe-never-matches\"".into());
    let mut put = Request::new(Body::from("fencegate conditional-writes probe\n"));
    *put.method_mut() = Method::PUT;
    *put.uri_mut() = uri.clone();
    mode.condition(Effect::Replace, &never, &uri, put.headers_mut());
    let Ok(answer) = proxy.clone().forward(Inbound::from(put)).await;
    let status = answer.status();
    if status == http::StatusCode::PRECONDITION_FAILED {
        return Probe::Honoured;
    }
    if status.is_success() {
        let mut delete = Request::new(Body::empty());
        *delete.method_mut() = Method::DELETE;
        *delete.uri_mut() = uri;
        let _ = proxy.clone().forward(Inbound::from(delete)).await;
        return Probe::Ignored(status);
    }
    Probe::Inconclusive(format!(
        "the store answered the probe's PUT of {path} {status}"
    ))
}
