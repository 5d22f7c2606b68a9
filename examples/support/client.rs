//! A tiny HTTP/1.1 client (one TCP connection per request) that can put
//! each request and its answer on a [`Timeline`].

use std::fmt::{Display, Write as _};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{Lane, Result, Timeline, TOKEN_HEADER};

/// A response, reduced to what the demos look at.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `X-Fencing-Highest`, on a gateway's 409.
    pub highest: Option<u64>,
    /// The `error` field of a gateway's JSON answer.
    pub error: Option<String>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// 2xx.
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// fencegate's 409 `stale_token`.
    pub fn is_stale(&self) -> bool {
        self.status == StatusCode::CONFLICT && self.error.as_deref() == Some("stale_token")
    }

    /// A short label for the timeline.
    pub fn label(&self) -> String {
        let code = self.status.as_u16();
        match (&self.error, self.highest) {
            _ if self.status == StatusCode::OK => format!("{code} {:?}", shorten(&self.body, 24)),
            (Some(error), Some(highest)) => format!("{code} {error} (highest {highest})"),
            (Some(error), None) => format!("{code} {error}"),
            (None, _) => code.to_string(),
        }
    }
}

/// `text`, cut to `max` characters with `...` if longer.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(max - 3).collect();
    short.push_str("...");
    short
}

/// One HTTP/1.1 request on a fresh TCP connection to `addr`.
pub async fn http(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<u64>,
    body: Option<&str>,
) -> Result<Reply> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string());
    if let Some(token) = token {
        request = request.header(TOKEN_HEADER, token.to_string());
    }
    let body = Bytes::from(body.unwrap_or_default().to_owned());
    let response = sender.send_request(request.body(Full::new(body))?).await?;
    let status = response.status();
    let highest = response.headers().get("x-fencing-highest");
    let highest = highest.and_then(|v| v.to_str().ok()?.parse().ok());
    let bytes = response.into_body().collect().await?.to_bytes();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str::<serde_json::Value>(&body).ok();
    let error = json.and_then(|v| Some(v.get("error")?.as_str()?.to_owned()));
    Ok(Reply {
        status,
        highest,
        error,
        body,
    })
}

/// Where a client sends its requests: `addr` answers; the request arrow goes
/// to `via` (the first hop) and the reply comes back from `server`.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Address to connect to.
    pub addr: SocketAddr,
    /// The lane the request goes to first.
    pub via: Lane,
    /// The lane that answers.
    pub server: Lane,
}

impl Route {
    /// Straight to `server` at `addr`.
    pub fn direct(addr: SocketAddr, server: Lane) -> Self {
        let via = server;
        Route { addr, via, server }
    }
}

/// The label of a request: method, token, body.
pub fn request_label(method: &Method, token: Option<impl Display>, body: Option<&str>) -> String {
    let mut label = method.to_string();
    match token {
        Some(token) => _ = write!(label, " t={token}"),
        None => label.push_str(" (no token)"),
    }
    if let Some(body) = body.filter(|b| !b.is_empty()) {
        _ = write!(label, " {:?}", shorten(body, 20));
    }
    label
}

/// `who` sends a request along `route`; the request and its reply go on
/// the timeline.
pub async fn call(
    tl: &Timeline,
    who: Lane,
    route: &Route,
    method: Method,
    path: &str,
    token: Option<u64>,
    body: Option<&str>,
) -> Result<Reply> {
    tl.msg(who, route.via, request_label(&method, token, body));
    match http(route.addr, method, path, token, body).await {
        Ok(reply) => {
            let (now, stale) = (Instant::now(), reply.is_stale());
            tl.msg_at(now, route.server, who, reply.label(), stale);
            Ok(reply)
        }
        Err(e) => {
            tl.note(who, format!("request failed: {e}"));
            Err(e)
        }
    }
}
