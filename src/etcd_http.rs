//! etcd's v3 API through its HTTP/JSON gateway (`POST /v3/kv/txn`, ...):
//! the client of the shared-fence store and of the etcd token issuer.
//!
//! Why not the gRPC client (`etcd-client`): it needs `protoc` and a tonic
//! stack at build time, minutes of CI on two cores, for calls that are a few
//! JSON objects each; the gateway speaks the same API (keys and values in
//! base64, 64-bit numbers as strings) over a hyper client. Watches are one
//! long streaming response.
//!
//! Security, when asked for: `https://` members are verified with rustls
//! (the CA bundle given, else the system's roots) and shown a client
//! certificate if one is given (etcd's `--client-cert-auth`); with a user,
//! every call carries the auth token etcd handed out for the user's
//! password (`/v3/auth/authenticate`), fetched again when etcd says it
//! expired or the auth store changed. etcd's HTTP gateway ignores a client
//! certificate's common name as a user name, and refuses a request whose
//! certificate has one while authentication is on: the client certificate
//! must have no CN (docs/SHARED.md, "Security").
// The token issuer alone uses plain calls, not watches or the stats.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::client_tls::{ClientTls, Credentials, TlsError};

/// How long one call to one member may take before the next member is
/// tried. A claim waits at most this long per member.
const CALL_TIMEOUT: Duration = Duration::from_millis(1500);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum CallError {
    /// No member answered (all down, unreachable, or without a leader).
    #[error("no etcd member answered: {0}")]
    Unreachable(String),
    /// A member answered with an error that another member would repeat
    /// (a lease that is gone, a malformed request, a wrong password, a
    /// permission the user lacks).
    #[error("etcd refused: {0}")]
    Refused(String),
}

impl CallError {
    /// Whether etcd said the lease is gone (expired or revoked).
    pub(crate) fn lease_gone(&self) -> bool {
        matches!(self, CallError::Refused(detail) if detail.contains("lease not found"))
    }
}

/// Counters of calls made, for metrics.
#[derive(Debug, Default)]
pub(crate) struct CallStats {
    pub(crate) calls: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) micros: AtomicU64,
}

type Http = HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client of the cluster's members, trying them in turn from the last one
/// that answered.
#[derive(Clone)]
pub(crate) struct Client {
    endpoints: Arc<[String]>,
    preferred: Arc<AtomicUsize>,
    /// The connection pool and the TLS generation it was built with: a
    /// reloaded certificate gets a new pool, so that new connections show
    /// it (connections already up keep theirs until they close).
    http: Arc<Mutex<(u64, Http)>>,
    tls: Option<Arc<ClientTls>>,
    auth: Option<Arc<Auth>>,
    pub(crate) stats: Arc<CallStats>,
}

/// etcd's authentication: the user's password exchanged for a token that
/// every call carries.
struct Auth {
    credentials: Credentials,
    token: Mutex<Option<Arc<str>>>,
    /// One authentication at a time: calls that find the token missing
    /// wait for the one being fetched instead of each asking etcd (every
    /// authentication is a write through raft).
    fetching: tokio::sync::Mutex<()>,
}

impl Client {
    /// A client of `endpoints` (`http://` or `https://host:port`), over
    /// `tls` for `https://` members, authenticating as `credentials` if
    /// given. An `https://` member without `tls`, or `tls` with an
    /// `http://` member, is an error: a connection asked to be TLS is never
    /// made in plaintext.
    pub(crate) fn new(
        endpoints: &[String],
        tls: Option<Arc<ClientTls>>,
        credentials: Option<Credentials>,
    ) -> Result<Self, TlsError> {
        for endpoint in endpoints {
            let secure = endpoint.starts_with("https://");
            if secure != tls.is_some() {
                return Err(TlsError::Config(if secure {
                    format!("{endpoint} is https:// but no TLS settings were given")
                } else {
                    format!("{endpoint} is not https:// but TLS settings were given: every member must be https://")
                }));
            }
        }
        let http = build_http(tls.as_deref())?;
        Ok(Client {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            preferred: Arc::new(AtomicUsize::new(0)),
            http: Arc::new(Mutex::new(http)),
            tls,
            auth: credentials.map(|credentials| {
                Arc::new(Auth {
                    credentials,
                    token: Mutex::new(None),
                    fetching: tokio::sync::Mutex::new(()),
                })
            }),
            stats: Arc::new(CallStats::default()),
        })
    }

    /// `POST path` with `body` to the members in turn; the first answer.
    pub(crate) async fn call(&self, path: &str, body: &Value) -> Result<Value, CallError> {
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
                Err(Attempt::Final(detail) | Attempt::TokenRefused(detail)) => {
                    return Err(CallError::Refused(detail))
                }
                Err(Attempt::Retry(detail)) => errors.push(format!("{endpoint}: {detail}")),
            }
        }
        Err(CallError::Unreachable(errors.join("; ")))
    }

    /// One call to one member, with the auth token if there is a user; a
    /// token etcd no longer takes is fetched again once.
    async fn call_one(&self, endpoint: &str, path: &str, body: Bytes) -> Result<Value, Attempt> {
        let token = self.token(endpoint).await?;
        match self
            .exchange(endpoint, path, body.clone(), token.as_deref())
            .await
        {
            Err(Attempt::TokenRefused(_)) if self.auth.is_some() => {
                self.forget_token(token.as_ref());
                let token = self.token(endpoint).await?;
                self.exchange(endpoint, path, body, token.as_deref()).await
            }
            other => other,
        }
    }

    async fn exchange(
        &self,
        endpoint: &str,
        path: &str,
        body: Bytes,
        token: Option<&str>,
    ) -> Result<Value, Attempt> {
        let response = self.send(endpoint, path, body, token).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?
            .to_bytes();
        let json: Value = serde_json::from_slice(&bytes).map_err(|_| {
            // etcd's HTTP gateway answers some refusals in plain text (a
            // client certificate with a common name while auth is on).
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
            Attempt::Final(format!("{status}: {}", text.trim()))
        })?;
        if status.is_success() {
            return Ok(json);
        }
        let detail = json["error"]
            .as_str()
            .or_else(|| json["message"].as_str())
            .unwrap_or("unknown error")
            .to_owned();
        Err(classify(
            json["code"].as_u64(),
            status,
            detail,
            self.auth.is_some(),
        ))
    }

    async fn send(
        &self,
        endpoint: &str,
        path: &str,
        body: Bytes,
        token: Option<&str>,
    ) -> Result<http::Response<Incoming>, Attempt> {
        let mut request = http::Request::post(format!("{endpoint}{path}"))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, token);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Attempt::Final(e.to_string()))?;
        self.http()
            .request(request)
            .await
            .map_err(|e| Attempt::Retry(self.with_hint(describe(&e))))
    }

    /// `detail` with what to do about it, where that is clear: a member
    /// that refused the handshake for want of a client certificate when
    /// none is configured.
    fn with_hint(&self, detail: String) -> String {
        let refused = detail.contains("BadCertificate") || detail.contains("CertificateRequired");
        let without_certificate = self
            .tls
            .as_ref()
            .is_some_and(|tls| tls.files().cert.is_none());
        if refused && without_certificate {
            format!("{detail} (does the cluster require a client certificate? give --etcd-cert and --etcd-key)")
        } else {
            detail
        }
    }

    /// The pool for a new request: rebuilt once after a TLS reload.
    fn http(&self) -> Http {
        let mut http = self.http.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tls) = &self.tls {
            if tls.generation() != http.0 {
                match build_http(Some(tls)) {
                    Ok(fresh) => *http = fresh,
                    Err(error) => tracing::warn!(%error, "etcd: keeping the TLS settings in use"),
                }
            }
        }
        http.1.clone()
    }

    /// The auth token to send: `None` without a user; fetched from
    /// `endpoint` if there is none yet.
    async fn token(&self, endpoint: &str) -> Result<Option<Arc<str>>, Attempt> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        if let Some(token) = auth.current() {
            return Ok(Some(token));
        }
        let _fetching = auth.fetching.lock().await;
        if let Some(token) = auth.current() {
            return Ok(Some(token));
        }
        let body = serde_json::json!({
            "name": auth.credentials.user,
            "password": auth.credentials.password.expose(),
        });
        let answer = self
            .exchange(
                endpoint,
                "/v3/auth/authenticate",
                Bytes::from(body.to_string()),
                None,
            )
            .await
            .map_err(|attempt| match attempt {
                Attempt::TokenRefused(detail) => Attempt::Final(detail),
                other => other,
            })?;
        let token: Arc<str> = answer["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Attempt::Final(
                    "authentication answered no token: is authentication enabled on the cluster?"
                        .into(),
                )
            })?
            .into();
        *auth.token.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&token));
        Ok(Some(token))
    }

    /// Drops `refused` so that the next call authenticates again (unless
    /// another call already did).
    fn forget_token(&self, refused: Option<&Arc<str>>) {
        if let Some(auth) = &self.auth {
            let mut token = auth.token.lock().unwrap_or_else(PoisonError::into_inner);
            if token.as_ref() == refused {
                *token = None;
            }
        }
    }

    /// Opens a watch of `[key, range_end)` from `start_revision` on one
    /// member (rotating on each call), with the first message (the
    /// creation) already read.
    pub(crate) async fn watch(
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
        let failed = |detail: String| {
            self.rotate(index);
            CallError::Unreachable(format!("{endpoint}: {detail}"))
        };
        let token = match self.token(endpoint).await {
            Ok(token) => token,
            Err(Attempt::Retry(detail)) => return Err(failed(detail)),
            Err(Attempt::Final(detail) | Attempt::TokenRefused(detail)) => {
                return Err(CallError::Refused(detail))
            }
        };
        let opened = tokio::time::timeout(
            CALL_TIMEOUT,
            self.send(
                endpoint,
                "/v3/watch",
                Bytes::from(body.to_string()),
                token.as_deref(),
            ),
        )
        .await;
        let response = match opened {
            Ok(Ok(response)) if response.status().is_success() => response,
            Ok(Ok(response)) => {
                if response.status() == http::StatusCode::UNAUTHORIZED {
                    self.forget_token(token.as_ref());
                }
                return Err(failed(format!("watch answered {}", response.status())));
            }
            Ok(Err(
                Attempt::Retry(detail) | Attempt::Final(detail) | Attempt::TokenRefused(detail),
            )) => {
                return Err(failed(detail));
            }
            Err(_) => return Err(failed("timed out".into())),
        };
        let mut stream = WatchStream {
            body: response.into_body(),
            buffer: BytesMut::new(),
        };
        let created = tokio::time::timeout(CALL_TIMEOUT, stream.next())
            .await
            .map_err(|_| CallError::Unreachable(format!("{endpoint}: watch not created")))??;
        if created["result"]["created"] != Value::Bool(true) {
            // The gateway streams a refused creation as a message.
            if is_token_error(None, &created.to_string()) {
                self.forget_token(token.as_ref());
            }
            return Err(CallError::Refused(format!("watch not created: {created}")));
        }
        Ok(stream)
    }

    /// Makes the member after `index` the first one tried.
    pub(crate) fn rotate(&self, index: usize) {
        let next = (index + 1) % self.endpoints.len();
        let _ = self.preferred.compare_exchange(
            index % self.endpoints.len(),
            next,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

impl Auth {
    fn current(&self) -> Option<Arc<str>> {
        self.token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A pool of connections to the members: TLS with `tls`'s current settings,
/// else plaintext. `tls` must offer no ALPN: the connector offers
/// `http/1.1` itself (and panics on a config that already does).
fn build_http(tls: Option<&ClientTls>) -> Result<(u64, Http), TlsError> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(CALL_TIMEOUT));
    connector.enforce_http(false);
    let (generation, config) = match tls {
        Some(tls) => tls.current(),
        // Never used for a handshake: every member is http:// (checked in
        // `Client::new`), and a config without roots verifies nothing.
        None => (
            0,
            Arc::new(
                rustls::ClientConfig::builder_with_provider(crate::client_tls::provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| TlsError::Config(e.to_string()))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
        ),
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(config))
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    let http = HttpClient::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    Ok((generation, http))
}

/// What an error answer means for the call: another member may do better,
/// every member would say the same, or the auth token must be fetched again.
fn classify(
    code: Option<u64>,
    status: http::StatusCode,
    detail: String,
    authenticated: bool,
) -> Attempt {
    if is_token_error(code, &detail) {
        return Attempt::TokenRefused(detail);
    }
    let refused = detail.contains("user name is empty") || detail.contains("permission denied");
    if refused && !authenticated {
        return Attempt::Final(format!(
            "{detail} (is authentication on in the cluster? then give a user and its password)"
        ));
    }
    if refused {
        return Attempt::Final(format!(
            "{detail} (the user's role does not allow this: docs/SHARED.md, \"Security\", lists what it needs)"
        ));
    }
    // gRPC codes: 14 unavailable, 4 deadline exceeded (no leader, a member
    // cut off): another member may do better.
    match code {
        Some(14) | Some(4) => Attempt::Retry(detail),
        _ if status.is_server_error() && !detail.contains("lease not found") => {
            Attempt::Retry(detail)
        }
        _ => Attempt::Final(detail),
    }
}

/// Whether etcd refused the auth token itself (expired, unknown to the
/// member, or issued before the auth store changed), so that a fresh one
/// may do.
fn is_token_error(code: Option<u64>, detail: &str) -> bool {
    code == Some(16)
        || detail.contains("invalid auth token")
        || detail.contains("revision of auth store is old")
}

/// A connection error in one line, with its causes (a TLS handshake's
/// reason is two or three levels down).
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// One attempt on one member.
enum Attempt {
    /// Try the next member.
    Retry(String),
    /// Every member would say the same.
    Final(String),
    /// The auth token was refused: fetch a new one and try again.
    TokenRefused(String),
}

/// The messages of one watch, as they come.
pub(crate) struct WatchStream {
    body: Incoming,
    buffer: BytesMut,
}

impl WatchStream {
    /// The next message; an error when the stream ends or breaks.
    pub(crate) async fn next(&mut self) -> Result<Value, CallError> {
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
pub(crate) fn b64(text: &str) -> String {
    STANDARD.encode(text)
}

/// A key or value from the gateway's JSON, as text (`None` if absent or
/// not base64 of UTF-8).
pub(crate) fn text(value: &Value) -> Option<String> {
    let bytes = STANDARD.decode(value.as_str()?).ok()?;
    String::from_utf8(bytes).ok()
}

/// A 64-bit number from the gateway's JSON: a string, a number, or absent
/// (0, as in proto3).
pub(crate) fn int(value: &Value) -> i64 {
    match value {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}
