//! The test backend: an in-process HTTP/1.1 server that records what reaches it.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;

use super::*;

// ---------------------------------------------------------------------------
// The test backend
// ---------------------------------------------------------------------------

/// One request as the backend received it.
#[derive(Debug, Clone)]
pub struct Record {
    /// Arrival order, from 0.
    pub seq: usize,
    /// When its head arrived.
    pub arrived: Instant,
    pub method: String,
    /// The request target exactly as received (path and query).
    pub target: String,
    pub version: String,
    /// In order, names lower-cased; repeated lines kept.
    pub headers: Vec<(String, String)>,
    /// The `X-Fencing-Token` value, if any.
    pub token: Option<String>,
    /// Bytes of body read; `None` until the body has been read to its end.
    pub body_len: Option<u64>,
    /// The body itself, only for a request with `X-Test-Keep-Body: 1`
    /// (others may be a GiB), once read to its end.
    pub body: Option<Vec<u8>>,
    /// Trailer fields received after the body, names lower-cased.
    pub trailers: Vec<(String, String)>,
    /// Whether the body ended in an error (cut off, malformed) rather than
    /// at its end; `body_len` then counts what came before.
    pub body_failed: bool,
}

impl Record {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_values(&self.headers, name).into_iter().next()
    }

    pub fn header_all(&self, name: &str) -> Vec<&str> {
        header_values(&self.headers, name)
    }

    pub fn token_u64(&self) -> Option<u64> {
        self.token.as_deref().and_then(|t| t.trim().parse().ok())
    }
}

/// What happened at the backend, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Request `seq`'s head arrived.
    Arrived(usize),
    /// Request `seq`'s body was read to its end, or failed (see its
    /// `body_len`): for a write, the moment it would be applied.
    BodyRead(usize),
    /// Request `seq`'s response was handed to the server (headers).
    Responded(usize),
    /// Request `seq`'s body was read to its end, and its precondition
    /// failed: answered 412, not applied ([`Backend::start_conditional`]).
    PreconditionFailed(usize),
}

#[derive(Default)]
struct Log {
    records: Vec<Record>,
    events: Vec<Event>,
}

struct BackendState {
    log: Mutex<Log>,
    changed: Condvar,
    released: tokio::sync::watch::Sender<HashSet<String>>,
    /// A store that checks conditions: the version (`"v<seq>"`, the seq
    /// of the write that made it) of every object that exists, by path.
    /// Checked and changed under the log's lock, at the moment a write is
    /// applied.
    versions: Option<Mutex<HashMap<String, usize>>>,
}

/// An HTTP/1.1 backend on 127.0.0.1:0 in its own tokio runtime. Controlled
/// by request headers (which the gateway forwards):
///
/// - `X-Test-Delay-Ms: N`: answer after N ms.
/// - `X-Test-Hold: NAME`: answer only after [`Backend::release`]`(NAME)`.
/// - `X-Test-Hang: 1`: never answer.
/// - `X-Test-Abort: 1`: close the connection without answering.
/// - `X-Test-Status: N`: answer with status N (default 200).
/// - `X-Test-Response-Header: Name: value` (repeatable): add to the answer.
/// - `X-Test-Response-Bytes: N`: answer with N streamed zero bytes instead
///   of the JSON echo.
/// - `X-Test-Body-Delay-Ms: N`: send the response headers and half of the
///   body at once, the rest after N ms.
/// - `X-Test-Keep-Body: 1`: keep the request body in [`Record::body`].
///
/// The body is read and discarded (counted) unless kept. The default answer is a JSON
/// echo: `{"seq", "method", "target", "headers": [[name, value], ...],
/// "body_len"}`.
pub struct Backend {
    addr: SocketAddr,
    state: Arc<BackendState>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Backend {
    pub fn start() -> Backend {
        Self::start_with(None, false)
    }

    /// A backend that is also a store with versions and RFC 9110
    /// preconditions, as S3, Azure Blob or WebDAV servers are: a `PUT` or
    /// `DELETE` with `If-Match` (a list of tags, or `*`) or
    /// `If-None-Match: *` is applied only if the object's version at the
    /// moment its body has been read meets it, else 412 and
    /// [`Event::PreconditionFailed`]; every applied `PUT` answers its new
    /// `ETag: "v<seq>"`, and a `HEAD` or `GET` the current one (404 for an
    /// object that does not exist). Paths are objects (the query ignored);
    /// a `DELETE` removes only its own path.
    pub fn start_conditional() -> Backend {
        Self::start_with(None, true)
    }

    /// [`Backend::start`] (or [`Backend::start_conditional`] if
    /// `conditional`) listening on `node`'s address, in its network
    /// namespace.
    pub fn start_on(node: &super::netns::Node, conditional: bool) -> Backend {
        node.run_inside(|| Self::start_at(None, conditional, node.addr(0)))
    }

    /// The same backend speaking only TLS (HTTP/1.1), with `leaf`'s
    /// certificate: `https://localhost:PORT` for a leaf issued for localhost.
    pub fn start_tls(leaf: &tls::Leaf) -> Backend {
        use rustls::pki_types::pem::PemObject;
        let chain = vec![rustls::pki_types::CertificateDer::from_pem_file(&leaf.cert).unwrap()];
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&leaf.key).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::start_with(
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            false,
        )
    }

    fn start_with(tls: Option<tokio_rustls::TlsAcceptor>, conditional: bool) -> Backend {
        Self::start_at(tls, conditional, SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    fn start_at(
        tls: Option<tokio_rustls::TlsAcceptor>,
        conditional: bool,
        bind: SocketAddr,
    ) -> Backend {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(bind))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(BackendState {
            log: Mutex::default(),
            changed: Condvar::new(),
            released: tokio::sync::watch::Sender::new(HashSet::new()),
            versions: conditional.then(Mutex::default),
        });
        let accept_state = Arc::clone(&state);
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&accept_state);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle(Arc::clone(&state), request)
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = builder.serve_connection(io, service).await;
                        }
                        Some(tls) => {
                            // A failed handshake (the gateway refused our
                            // certificate) just ends the connection.
                            let Ok(stream) = tls.accept(stream).await else {
                                return;
                            };
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = builder.serve_connection(io, service).await;
                        }
                    }
                });
            }
        });
        Backend {
            addr,
            state,
            runtime: Some(runtime),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `--upstream`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `https://HOST:PORT`, for a backend started with [`Backend::start_tls`].
    pub fn https_url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.addr.port())
    }

    /// Every request received so far, in arrival order.
    pub fn records(&self) -> Vec<Record> {
        self.state.log.lock().unwrap().records.clone()
    }

    pub fn events(&self) -> Vec<Event> {
        self.state.log.lock().unwrap().events.clone()
    }

    /// Requests received whose target is exactly `target`.
    pub fn records_for(&self, target: &str) -> Vec<Record> {
        self.records()
            .into_iter()
            .filter(|r| r.target == target)
            .collect()
    }

    pub fn count(&self) -> usize {
        self.state.log.lock().unwrap().records.len()
    }

    /// Waits (bounded) until `cond(records)` holds; returns whether it did.
    pub fn wait_for(&self, timeout: Duration, mut cond: impl FnMut(&[Record]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut log = self.state.log.lock().unwrap();
        loop {
            if cond(&log.records) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            log = self
                .state
                .changed
                .wait_timeout(log, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Lets every request held with `X-Test-Hold: name` (now or later) answer.
    pub fn release(&self, name: &str) {
        self.state.released.send_modify(|set| {
            set.insert(name.to_string());
        });
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

type BackendBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// `N` zero bytes, streamed in 64 KiB frames.
struct Zeros {
    remaining: u64,
}

impl http_body::Body for Zeros {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        static CHUNK: [u8; 65536] = [0; 65536];
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(CHUNK.len() as u64);
        self.remaining -= n;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &CHUNK[..n as usize],
        )))))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// Two chunks with a pause between them.
struct SlowBody {
    first: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
    second: Option<Bytes>,
}

impl http_body::Body for SlowBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if self.second.is_none() {
            return Poll::Ready(None);
        }
        std::task::ready!(self.pause.as_mut().poll(cx));
        let second = self.second.take().unwrap();
        Poll::Ready(Some(Ok(http_body::Frame::data(second))))
    }
}

/// Whether an object at `current` (`None`: it does not exist) meets the
/// request's `If-Match` and `If-None-Match` (RFC 9110 13.1.1, 13.1.2:
/// strong comparison; without either header, always).
fn precondition_met(headers: &[(String, String)], current: Option<usize>) -> bool {
    let tag = current.map(|v| format!("\"v{v}\""));
    let lists = |name: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(k, _)| k == name)
            .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_owned()))
            .filter(|t| !t.is_empty())
            .collect()
    };
    let if_match = lists("if-match");
    if !if_match.is_empty() {
        let met = match &tag {
            None => false,
            Some(tag) => if_match.iter().any(|t| t == "*" || t == tag),
        };
        if !met {
            return false;
        }
    }
    let if_none_match = lists("if-none-match");
    if !if_none_match.is_empty() {
        let matched = match &tag {
            None => false,
            Some(tag) => if_none_match.iter().any(|t| t == "*" || t == tag),
        };
        if matched {
            return false;
        }
    }
    true
}

async fn handle(
    state: Arc<BackendState>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<BackendBody>, std::io::Error> {
    let (parts, mut body) = request.into_parts();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let seq = {
        let mut log = state.log.lock().unwrap();
        let seq = log.records.len();
        log.records.push(Record {
            seq,
            arrived: Instant::now(),
            method: parts.method.to_string(),
            target: parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.to_string(), |pq| pq.as_str().to_string()),
            version: format!("{:?}", parts.version),
            headers: headers.clone(),
            token: get("x-fencing-token"),
            body_len: None,
            body_failed: false,
            body: None,
            trailers: Vec::new(),
        });
        log.events.push(Event::Arrived(seq));
        seq
    };
    state.changed.notify_all();

    let mut body_len = 0u64;
    let mut kept = get("x-test-keep-body").map(|_| Vec::new());
    let mut trailers = Vec::new();
    let mut body_failed = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => {
                    body_len += data.len() as u64;
                    if let Some(kept) = &mut kept {
                        kept.extend_from_slice(&data);
                    }
                }
                Err(frame) => {
                    if let Ok(map) = frame.into_trailers() {
                        for (k, v) in &map {
                            trailers.push((
                                k.as_str().to_string(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            ));
                        }
                    }
                }
            },
            Err(_) => {
                body_failed = true;
                break;
            }
        }
    }
    let path = parts.uri.path().to_owned();
    let mut version_header = None;
    let applied = {
        let mut log = state.log.lock().unwrap();
        log.records[seq].body_len = Some(body_len);
        log.records[seq].body = kept;
        log.records[seq].trailers = trailers;
        log.records[seq].body_failed = body_failed;
        let applied = match &state.versions {
            None => true,
            Some(versions) => {
                let mut versions = versions.lock().unwrap();
                let current = versions.get(&path).copied();
                version_header = current.map(|v| format!("\"v{v}\""));
                match parts.method.as_str() {
                    "PUT" | "DELETE" => {
                        let met = precondition_met(&headers, current);
                        if met && parts.method == "PUT" {
                            versions.insert(path.clone(), seq);
                            version_header = Some(format!("\"v{seq}\""));
                        } else if met {
                            versions.remove(&path);
                            version_header = None;
                        }
                        met
                    }
                    _ => true,
                }
            }
        };
        log.events.push(if applied {
            Event::BodyRead(seq)
        } else {
            Event::PreconditionFailed(seq)
        });
        applied
    };
    state.changed.notify_all();
    if state.versions.is_some() {
        let status = match parts.method.as_str() {
            _ if !applied => 412,
            "HEAD" | "GET" if version_header.is_none() => 404,
            _ => 200,
        };
        let mut builder = hyper::Response::builder().status(status);
        if let Some(tag) = &version_header {
            builder = builder.header("etag", tag.as_str());
        }
        let echo = serde_json::json!({ "seq": seq, "method": parts.method.as_str() });
        let body = if parts.method == "HEAD" {
            String::new()
        } else {
            echo.to_string()
        };
        let response = builder
            .header("content-type", "application/json")
            .body(BackendBody::new(http_body_util::Full::new(Bytes::from(
                body,
            ))))
            .unwrap();
        state.log.lock().unwrap().events.push(Event::Responded(seq));
        state.changed.notify_all();
        return Ok(response);
    }

    if get("x-test-abort").is_some() {
        return Err(std::io::Error::other("aborted on request"));
    }
    if get("x-test-hang").is_some() {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if let Some(ms) = get("x-test-delay-ms").and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(name) = get("x-test-hold") {
        let mut released = state.released.subscribe();
        let _ = released.wait_for(|set| set.contains(&name)).await;
    }

    let status = get("x-test-status")
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u16);
    let mut builder = hyper::Response::builder().status(status);
    for (k, v) in &headers {
        if k == "x-test-response-header" {
            if let Some((name, value)) = v.split_once(':') {
                builder = builder.header(name.trim(), value.trim());
            }
        }
    }
    let body_delay = get("x-test-body-delay-ms").and_then(|v| v.parse::<u64>().ok());
    let body: BackendBody = match get("x-test-response-bytes").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) if body_delay.is_some() => {
            builder = builder.header("content-length", n.to_string());
            let half = (n / 2) as usize;
            BackendBody::new(SlowBody {
                first: Some(Bytes::from(vec![0u8; half])),
                pause: Box::pin(tokio::time::sleep(Duration::from_millis(
                    body_delay.unwrap(),
                ))),
                second: Some(Bytes::from(vec![0u8; n as usize - half])),
            })
        }
        Some(n) => BackendBody::new(Zeros { remaining: n }),
        None => {
            let echo = serde_json::json!({
                "seq": seq,
                "method": parts.method.as_str(),
                "target": parts.uri.to_string(),
                "headers": headers,
                "body_len": body_len,
            });
            builder = builder.header("content-type", "application/json");
            BackendBody::new(http_body_util::Full::new(Bytes::from(echo.to_string())))
        }
    };
    let response = builder.body(body).unwrap();
    state.log.lock().unwrap().events.push(Event::Responded(seq));
    state.changed.notify_all();
    Ok(response)
}
