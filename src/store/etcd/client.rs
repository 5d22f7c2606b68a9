//! etcd's v3 API through its HTTP/JSON gateway (`POST /v3/kv/txn`, ...).
//!
//! Why not the gRPC client (`etcd-client`): it needs `protoc` and a tonic
//! stack at build time, minutes of CI on two cores, for calls that are a few
//! JSON objects each; the gateway speaks the same API (keys and values in
//! base64, 64-bit numbers as strings) over the hyper client the gateway
//! already has. Watches are one long streaming response.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// How long one call to one member may take before the next member is
/// tried. A claim waits at most this long per member.
const CALL_TIMEOUT: Duration = Duration::from_millis(1500);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum CallError {
    /// No member answered (all down, unreachable, or without a leader).
    #[error("no etcd member answered: {0}")]
    Unreachable(String),
    /// A member answered with an error that another member would repeat
    /// (a lease that is gone, a malformed request).
    #[error("etcd refused: {0}")]
    Refused(String),
}

impl CallError {
    /// Whether etcd said the lease is gone (expired or revoked).
    pub(super) fn lease_gone(&self) -> bool {
        matches!(self, CallError::Refused(detail) if detail.contains("lease not found"))
    }
}

/// Counters of calls made, for metrics.
#[derive(Debug, Default)]
pub(super) struct CallStats {
    pub(super) calls: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) micros: AtomicU64,
}

/// A client of the cluster's members, trying them in turn from the last one
/// that answered.
#[derive(Clone)]
pub(super) struct Client {
    endpoints: Arc<[String]>,
    preferred: Arc<AtomicUsize>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    pub(super) stats: Arc<CallStats>,
}

impl Client {
    pub(super) fn new(endpoints: &[String]) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CALL_TIMEOUT));
        Client {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            preferred: Arc::new(AtomicUsize::new(0)),
            http: HttpClient::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            stats: Arc::new(CallStats::default()),
        }
    }

    /// `POST path` with `body` to the members in turn; the first answer.
    pub(super) async fn call(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        let started = Instant::now();
        let result = self.call_members(path, body).await;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.micros.fetch_add(micros, Ordering::Relaxed);
        if result.is_err() {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn call_members(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        let body = Bytes::from(body.to_string());
        let mut errors = Vec::new();
        let first = self.preferred.load(Ordering::Relaxed);
        for offset in 0..self.endpoints.len() {
            let index = (first + offset) % self.endpoints.len();
            let endpoint = &self.endpoints[index];
            let answer =
                tokio::time::timeout(CALL_TIMEOUT, self.call_one(endpoint, path, body.clone()))
                    .await
                    .unwrap_or_else(|_| Err(Attempt::Retry("timed out".into())));
            match answer {
                Ok(value) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(value);
                }
                Err(Attempt::Final(detail)) => return Err(CallError::Refused(detail)),
                Err(Attempt::Retry(detail)) => errors.push(format!("{endpoint}: {detail}")),
            }
        }
        Err(CallError::Unreachable(errors.join("; ")))
    }

    async fn call_one(&self, endpoint: &str, path: &str, body: Bytes) -> Result<Value, Attempt> {
        let response = self.send(endpoint, path, body).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?
            .to_bytes();
        let json: Value =
            serde_json::from_slice(&bytes).map_err(|e| Attempt::Retry(e.to_string()))?;
        if status.is_success() {
            return Ok(json);
        }
        let detail = json["error"]
            .as_str()
            .or_else(|| json["message"].as_str())
            .unwrap_or("unknown error")
            .to_owned();
        // gRPC codes: 14 unavailable, 4 deadline exceeded (no leader, a
        // member cut off): another member may do better.
        match json["code"].as_u64() {
            Some(14) | Some(4) => Err(Attempt::Retry(detail)),
            _ if status.is_server_error() && !detail.contains("lease not found") => {
                Err(Attempt::Retry(detail))
            }
            _ => Err(Attempt::Final(detail)),
        }
    }

    async fn send(
        &self,
        endpoint: &str,
        path: &str,
        body: Bytes,
    ) -> Result<http::Response<Incoming>, Attempt> {
        let request = http::Request::post(format!("{endpoint}{path}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| Attempt::Final(e.to_string()))?;
        self.http
            .request(request)
            .await
            .map_err(|e| Attempt::Retry(format!("{e:?}")))
    }

    /// Opens a watch of `[key, range_end)` from `start_revision` on one
    /// member (rotating on each call), with the first message (the
    /// creation) already read.
    pub(super) async fn watch(
        &self,
        key: &str,
        range_end: &str,
        start_revision: i64,
    ) -> Result<WatchStream, CallError> {
        let body = serde_json::json!({
            "create_request": {
                "key": b64(key),
                "range_end": b64(range_end),
                "start_revision": start_revision.to_string(),
            }
        });
        let index = self.preferred.load(Ordering::Relaxed) % self.endpoints.len();
        let endpoint = &self.endpoints[index];
        let opened = tokio::time::timeout(
            CALL_TIMEOUT,
            self.send(endpoint, "/v3/watch", Bytes::from(body.to_string())),
        )
        .await;
        let response = match opened {
            Ok(Ok(response)) if response.status().is_success() => response,
            Ok(Ok(response)) => {
                self.rotate(index);
                return Err(CallError::Unreachable(format!(
                    "{endpoint}: watch answered {}",
                    response.status()
                )));
            }
            Ok(Err(Attempt::Retry(detail) | Attempt::Final(detail))) => {
                self.rotate(index);
                return Err(CallError::Unreachable(format!("{endpoint}: {detail}")));
            }
            Err(_) => {
                self.rotate(index);
                return Err(CallError::Unreachable(format!("{endpoint}: timed out")));
            }
        };
        let mut stream = WatchStream {
            body: response.into_body(),
            buffer: BytesMut::new(),
        };
        let created = tokio::time::timeout(CALL_TIMEOUT, stream.next())
            .await
            .map_err(|_| CallError::Unreachable(format!("{endpoint}: watch not created")))??;
        if created["result"]["created"] != Value::Bool(true) {
            return Err(CallError::Refused(format!("watch not created: {created}")));
        }
        Ok(stream)
    }

    /// Makes the member after `index` the first one tried.
    pub(super) fn rotate(&self, index: usize) {
        let next = (index + 1) % self.endpoints.len();
        let _ = self.preferred.compare_exchange(
            index % self.endpoints.len(),
            next,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// One attempt on one member.
enum Attempt {
    /// Try the next member.
    Retry(String),
    /// Every member would say the same.
    Final(String),
}

/// The messages of one watch, as they come.
pub(super) struct WatchStream {
    body: Incoming,
    buffer: BytesMut,
}

impl WatchStream {
    /// The next message; an error when the stream ends or breaks.
    pub(super) async fn next(&mut self) -> Result<Value, CallError> {
        loop {
            if let Some(message) = self.parse_buffered()? {
                return Ok(message);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(CallError::Unreachable(format!("watch broke: {e}"))),
                None => return Err(CallError::Unreachable("watch ended".into())),
            }
        }
    }

    /// One complete JSON message from the front of the buffer, if there is
    /// one (messages come one per line, possibly split across frames).
    fn parse_buffered(&mut self) -> Result<Option<Value>, CallError> {
        let mut values = serde_json::Deserializer::from_slice(&self.buffer).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) => {
                let used = values.byte_offset();
                self.buffer.advance(used);
                Ok(Some(value))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            None => Ok(None),
            Some(Err(e)) => Err(CallError::Refused(format!("watch sent bad JSON: {e}"))),
        }
    }
}

/// Standard base64, as the gateway wants keys and values.
pub(super) fn b64(text: &str) -> String {
    STANDARD.encode(text)
}

/// A key or value from the gateway's JSON, as text (`None` if absent or
/// not base64 of UTF-8).
pub(super) fn text(value: &Value) -> Option<String> {
    let bytes = STANDARD.decode(value.as_str()?).ok()?;
    String::from_utf8(bytes).ok()
}

/// A 64-bit number from the gateway's JSON: a string, a number, or absent
/// (0, as in proto3).
pub(super) fn int(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}
