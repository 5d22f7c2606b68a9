//! Step 6 of the data path: forwarding an admitted request to the backend and
//! relaying its answer, bodies streamed both ways.

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
use http::{Method, Request, Response, StatusCode, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::json;
use tower_service::Service;

use super::hop::strip_hop_by_hop;
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
/// over a pooled HTTP/1.1 client.
#[derive(Clone)]
pub struct Proxy {
    client: Client<HttpConnector, Body>,
    upstream: Arc<Upstream>,
    timeout: Duration,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.upstream.to_string())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Proxy {
    /// A proxy to `upstream`: at most `timeout` to response headers; pooled
    /// connections idle for `idle_timeout` are closed, which must be shorter
    /// than the backend's keep-alive or a request may be sent on a
    /// connection the backend is closing (hyper issues #2136, #2275).
    pub fn new(upstream: Upstream, timeout: Duration, idle_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(idle_timeout)
            .timer(TokioTimer::new())
            .build(connector);
        Proxy {
            client,
            upstream: Arc::new(upstream),
            timeout,
        }
    }

    fn prepare(&self, request: Request<Body>) -> Result<Request<Body>, String> {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        let (mut parts, body) = request.into_parts();
        // HTTP/2 clients send :authority instead of Host; HTTP/1.1 needs Host.
        // Otherwise Host goes through exactly as sent, so that signatures
        // over it (S3 SigV4) still verify at the backend.
        if !parts.headers.contains_key(HOST) {
            if let Some(authority) = parts.uri.authority() {
                let host = HeaderValue::from_str(authority.as_str())
                    .map_err(|e| format!("bad authority: {e}"))?;
                parts.headers.insert(HOST, host);
            }
        }
        strip_hop_by_hop(&mut parts.headers);
        if let Some(ip) = peer {
            append_forwarded_for(&mut parts.headers, ip);
        }
        parts
            .headers
            .insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        parts.uri = self
            .upstream
            .uri_for(parts.uri.path_and_query())
            .map_err(|e| format!("cannot build the upstream URI: {e}"))?;
        // The pooled upstream connections are HTTP/1.1, whatever the client spoke.
        parts.version = Version::HTTP_11;
        Ok(Request::from_parts(parts, body))
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
        match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Ok(Err(error)) => {
                tracing::warn!(upstream = %self.upstream, error = %error_chain(&error), "upstream unavailable");
                let mut response = gateway_error(
                    StatusCode::BAD_GATEWAY,
                    "upstream_unavailable",
                    &format!("{}: {}", self.upstream, error_chain(&error)),
                );
                response.extensions_mut().insert(UpstreamFailure);
                response
            }
            Err(_) => {
                tracing::warn!(upstream = %self.upstream, timeout = ?self.timeout, "upstream timeout");
                let mut response = gateway_error(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    &format!(
                        "no response headers from {} within {:?}; the request may still be applied by the backend",
                        self.upstream, self.timeout
                    ),
                );
                response.extensions_mut().insert(UpstreamFailure);
                response
            }
        }
    }
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

fn append_forwarded_for(headers: &mut http::HeaderMap, ip: std::net::IpAddr) {
    // Several inbound lines form one list (RFC 9110 §5.3); keep them all.
    let mut value: Vec<String> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    value.push(ip.to_string());
    let value = value.join(", ");
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, value);
    }
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
