//! Step 6 of the data path: forwarding an admitted request to the backend and
//! relaying its answer, bodies streamed both ways.
//!
//! The upstream side is HTTP/1.1 connections made with hyper's connection
//! API ([`hyper::client::conn::http1`]) and kept in a small pool of our own
//! (`src/gateway/pool.rs` says why); requests keep their origin-form target, as they came.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{HeaderValue, HOST};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, Version};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tower_service::Service;

use super::hop::strip_hop_by_hop;
use super::pool::Pool;
use super::upstream::Upstream;
use crate::refusal::json_response;

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: http::HeaderName = http::HeaderName::from_static("x-forwarded-proto");

/// Marks a response the proxy made itself because the backend failed
/// (502 or 504), for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamFailure;

/// Marks a request the proxy refused itself (an upgrade, a request it could
/// not rewrite), for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayRefusal;

/// The reverse proxy: a `Service` that sends each request to the backend
/// over a pooled HTTP/1.1 connection.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
    /// The client's address as an `X-Forwarded-For` entry, made once per
    /// connection by [`Proxy::for_peer`]. Without it the address is read
    /// from axum's `ConnectInfo`, if present.
    peer: Option<HeaderValue>,
}

/// What every clone of a [`Proxy`] shares.
struct Shared {
    upstream: Upstream,
    /// `Host` for a request that has none (an HTTP/1.0 client): the
    /// backend's authority, as hyper-util's client would set it.
    default_host: HeaderValue,
    timeout: Duration,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.shared.upstream.to_string())
            .field("timeout", &self.shared.timeout)
            .finish()
    }
}

impl Proxy {
    /// A proxy to `upstream`: at most `timeout` to response headers (connect
    /// included); pooled connections idle for `idle_timeout` are closed, which
    /// must be shorter than the backend's keep-alive or a request may be sent
    /// on a connection the backend is closing (hyper issues #2136, #2275).
    pub fn new(upstream: Upstream, timeout: Duration, idle_timeout: Duration) -> Self {
        let default_host = HeaderValue::from_str(upstream.authority().as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        Proxy {
            shared: Arc::new(Shared {
                upstream,
                default_host,
                timeout,
                pool: Arc::new(Pool::new(idle_timeout)),
            }),
            peer: None,
        }
    }

    /// This proxy for requests from one client connection: its address
    /// goes into `X-Forwarded-For`, formatted once instead of per request.
    pub fn for_peer(&self, peer: SocketAddr) -> Self {
        Proxy {
            shared: Arc::clone(&self.shared),
            peer: HeaderValue::from_str(&peer.ip().to_string()).ok(),
        }
    }

    fn prepare(&self, request: Request<Body>) -> Result<Request<Body>, String> {
        let (mut parts, body) = request.into_parts();
        // HTTP/2 clients send :authority instead of Host; HTTP/1.1 needs Host.
        // Otherwise Host goes through exactly as sent, so that signatures
        // over it (S3 SigV4) still verify at the backend.
        if !parts.headers.contains_key(HOST) {
            let host = match parts.uri.authority() {
                Some(authority) => HeaderValue::from_str(authority.as_str())
                    .map_err(|e| format!("bad authority: {e}"))?,
                None => self.shared.default_host.clone(),
            };
            parts.headers.insert(HOST, host);
        }
        strip_hop_by_hop(&mut parts.headers);
        self.append_forwarded_for(&mut parts);
        parts
            .headers
            .insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        parts.uri = self
            .shared
            .upstream
            .origin_form(parts.uri)
            .map_err(|e| format!("cannot build the upstream URI: {e}"))?;
        // The pooled upstream connections are HTTP/1.1, whatever the client spoke.
        parts.version = Version::HTTP_11;
        Ok(Request::from_parts(parts, body))
    }

    fn append_forwarded_for(&self, parts: &mut Parts) {
        let peer = match &self.peer {
            Some(peer) => peer.clone(),
            None => match parts.extensions.get::<ConnectInfo<SocketAddr>>() {
                Some(info) => match HeaderValue::from_str(&info.0.ip().to_string()) {
                    Ok(peer) => peer,
                    Err(_) => return,
                },
                None => return,
            },
        };
        if !parts.headers.contains_key(X_FORWARDED_FOR) {
            parts.headers.insert(X_FORWARDED_FOR, peer);
            return;
        }
        // Several inbound lines form one list (RFC 9110 §5.3); keep them all.
        let mut value: Vec<&str> = parts
            .headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        value.push(peer.to_str().unwrap_or_default());
        if let Ok(value) = HeaderValue::from_str(&value.join(", ")) {
            parts.headers.insert(X_FORWARDED_FOR, value);
        }
    }

    async fn forward(self, request: Request<Body>) -> Response<Body> {
        if request.method() == Method::CONNECT || demands_upgrade(request.headers()) {
            let mut response = gateway_error(
                StatusCode::NOT_IMPLEMENTED,
                "upgrade_not_supported",
                "protocol upgrades and CONNECT are not proxied",
            );
            response.extensions_mut().insert(GatewayRefusal);
            return response;
        }
        let request = match self.prepare(request) {
            Ok(request) => request,
            Err(detail) => {
                let mut response = gateway_error(StatusCode::BAD_REQUEST, "bad_request", &detail);
                response.extensions_mut().insert(GatewayRefusal);
                return response;
            }
        };
        let shared = &self.shared;
        match tokio::time::timeout(shared.timeout, shared.send(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                tracing::warn!(upstream = %shared.upstream, error = %error_chain(&error), "upstream unavailable");
                let mut response = gateway_error(
                    StatusCode::BAD_GATEWAY,
                    "upstream_unavailable",
                    &format!("{}: {}", shared.upstream, error_chain(&error)),
                );
                response.extensions_mut().insert(UpstreamFailure);
                response
            }
            Err(_) => {
                tracing::warn!(upstream = %shared.upstream, timeout = ?shared.timeout, "upstream timeout");
                let mut response = gateway_error(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    &format!(
                        "no response headers from {} within {:?}; the request may still be applied by the backend",
                        shared.upstream, shared.timeout
                    ),
                );
                response.extensions_mut().insert(UpstreamFailure);
                response
            }
        }
    }
}

impl Shared {
    /// Sends `request` on an idle pooled connection, or a new one. A request
    /// that a reused connection gave back unsent (the backend had closed it
    /// meanwhile) is retried on another connection, as hyper-util's client
    /// does; one that may have reached the backend never is.
    async fn send(&self, mut request: Request<Body>) -> Result<Response<Body>, UpstreamError> {
        loop {
            let (mut sender, reused) = match self.pool.checkout() {
                Some(sender) => (sender, true),
                // Boxed: connecting is rare, and its large future would
                // otherwise be part of (and copied with) every request's.
                None => (Box::pin(self.connect()).await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    let body = Pool::release_after(&self.pool, sender, body);
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(UpstreamError::Send(error.into_error())),
                },
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, UpstreamError> {
        let authority = self.upstream.authority();
        // IPv6 literals come bracketed in an authority, not in a socket address.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(UpstreamError::Connect)?;
        // Small request/response exchanges must not wait on Nagle.
        stream.set_nodelay(true).map_err(UpstreamError::Connect)?;
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Send)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// Why the backend could not be asked (502).
#[derive(Debug, thiserror::Error)]
enum UpstreamError {
    #[error("cannot connect")]
    Connect(#[source] std::io::Error),
    #[error("request failed")]
    Send(#[source] hyper::Error),
}

impl Service<Request<Body>> for Proxy {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let proxy = self.clone();
        Box::pin(async move { Ok(proxy.forward(request).await) })
    }
}

/// Whether the request asks to switch protocols for real (WebSocket and
/// the like), which this proxy does not do. An `h2c` offer is only an offer
/// (`curl --http2` sends it on every request): it is dropped with the other
/// hop-by-hop headers and the request goes on over HTTP/1.1 (RFC 9110 §7.8).
fn demands_upgrade(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::UPGRADE)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("?").split(','))
        .any(|protocol| !protocol.trim().eq_ignore_ascii_case("h2c"))
}

/// A JSON answer made by the gateway, as `Response<Body>`.
pub(crate) fn gateway_error(status: StatusCode, error: &str, detail: &str) -> Response<Body> {
    json_response(status, &json!({ "error": error, "detail": detail })).map(Body::from)
}

/// hyper's errors hide the cause (connection refused, reset) in `source()`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
