//! Forwarding an admitted request to the backend and relaying its answer,
//! bodies streamed both ways.
//!
//! The upstream side is HTTP/1.1 connections, plain or TLS, driven by the
//! gateway's engine (`engine`) in the request's own task and kept in a
//! small pool of our own (`pool.rs` says why); requests keep their target
//! as they came, in origin form.
//!
//! Its deadlines (connecting, the response head, the response body's
//! pauses) are defined in `deadlines.rs`, all from `--upstream-timeout`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::header::{HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Uri};
use tokio_rustls::TlsConnector;

use super::answer::{close_after, gateway_error};
use super::body::request::ToBackend;
use super::body::response::FromProxy;
use super::clock;
use super::custody::sign::{SignError, Signed, UpstreamSigner};
use super::custody::stream::StreamError;
use super::custody::verified::AnswerRewrite;
use super::custody::{dav_locks, upload_ids};
use super::custody::{unix_now, Forwarding};
use super::deadlines::{
    connect_by, find_cause, response_head_within, BodyStalled, SentAt, Side, StallTimeout,
};
use super::engine::{
    self, BackendBody, BackendSendError, Connection, Edits, Failed, Stream, WriteError,
};
use super::hop::end_to_end_map;
use super::inbound::Inbound;
use super::outcome::RequestOutcome;
use super::pool::Pool;
use super::upstream::Upstream;
use crate::dialect::chunked::ChunkedError;
use crate::fencing::Forward;
use crate::head::{visible_str, HeaderFields, RequestView};
use crate::store::{LeaseEnded, LeaseStage};

/// The reverse proxy: a `Service` that sends each request to the backend
/// over a pooled HTTP/1.1 connection.
#[derive(Clone)]
pub(crate) struct Proxy {
    shared: Arc<ProxyShared>,
    /// What one client connection adds, made once per connection by
    /// [`Proxy::with_client`]; behind an `Arc` so that the clone of the proxy
    /// each request takes is one reference count.
    client: Arc<ForwardedHeaders>,
}

/// The forwarding headers of one client connection.
#[derive(Debug)]
pub(crate) struct ForwardedHeaders {
    /// The client's address as an `X-Forwarded-For` entry.
    peer: Option<HeaderValue>,
    /// `X-Forwarded-Proto`: `https` when the client connection is TLS.
    proto: HeaderValue,
}

/// What every clone of a [`Proxy`] shares.
struct ProxyShared {
    upstream: Upstream,
    /// `Host` for a request that has none (an HTTP/1.0 client): the
    /// backend's authority, as hyper-util's client would set it.
    default_host: HeaderValue,
    timeout: Duration,
    pool: Arc<Pool<Connection>>,
    /// `Some` for an `https://` upstream.
    tls: Option<TlsConnector>,
    /// Put a backend's response fields in the response's map (something
    /// above reads them), instead of handing them on as lines.
    fields_in_map: bool,
    /// Credential custody: signs every request for the store.
    signer: Option<Arc<UpstreamSigner>>,
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
    /// A proxy to `upstream`, over TLS with `tls` (which an `https://`
    /// upstream needs). `timeout` bounds connecting, waiting for response
    /// headers once the request was sent, and each pause of a response body.
    /// Pooled connections idle for `idle_timeout` are closed, which must be
    /// shorter than the backend's keep-alive or a request may be sent on a
    /// connection the backend is closing (hyper issues #2136, #2275).
    /// With `fields_in_map`, a backend's answer has its fields in the
    /// response's map (chained writes: the chain reads an answer's `ETag`
    /// there); otherwise they travel as the lines read ([`FromProxy`]).
    pub(crate) fn new(
        upstream: Upstream,
        timeout: Duration,
        idle_timeout: Duration,
        tls: Option<TlsConnector>,
        fields_in_map: bool,
    ) -> Self {
        let default_host = HeaderValue::from_str(upstream.authority().as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        Proxy {
            shared: Arc::new(ProxyShared {
                upstream,
                default_host,
                timeout,
                pool: Arc::new(Pool::new(idle_timeout)),
                tls,
                fields_in_map,
                signer: None,
            }),
            client: Arc::new(ForwardedHeaders {
                peer: None,
                proto: HeaderValue::from_static("http"),
            }),
        }
    }

    /// Signs every request it sends with `signer` (credential custody):
    /// those it forwards, and the gateway's own. Set before the proxy is
    /// cloned.
    pub(crate) fn signed_by(mut self, signer: Arc<UpstreamSigner>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.signer = Some(signer);
        }
        self
    }

    /// The backend it forwards to.
    pub(crate) fn upstream(&self) -> &Upstream {
        &self.shared.upstream
    }

    /// What the proxy says of one client connection, made once for every
    /// route of it: its address goes into `X-Forwarded-For`, formatted
    /// once instead of per request, and `X-Forwarded-Proto` says whether
    /// it is TLS.
    pub(crate) fn client_of(peer: SocketAddr, tls: bool) -> Arc<ForwardedHeaders> {
        Arc::new(ForwardedHeaders {
            peer: HeaderValue::from_str(&peer.ip().to_string()).ok(),
            proto: HeaderValue::from_static(if tls { "https" } else { "http" }),
        })
    }

    /// Whether the upstream puts requests under a base path
    /// (`http://host/base`): a WebDAV `Destination` is forwarded as sent,
    /// so the store would read it outside the base.
    pub(crate) fn has_base(&self) -> bool {
        self.shared.upstream.has_base()
    }

    /// This proxy for requests from `client` ([`Proxy::client_of`]).
    pub(crate) fn with_client(&self, client: Arc<ForwardedHeaders>) -> Self {
        Proxy {
            shared: Arc::clone(&self.shared),
            client,
        }
    }

    /// Forwards `request`, which the data plane has already checked with
    /// [`refuse_unproxyable`].
    async fn send_on(&self, request: Inbound<Body>) -> Response<FromProxy> {
        let shared = &self.shared;
        // The target in origin form, under the upstream's base path.
        let target = match shared.upstream.origin_form(request.sent_uri().clone()) {
            Ok(target) => target,
            Err(e) => {
                return gateway_error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    &format!("cannot build the upstream URI: {e}"),
                    RequestOutcome::OtherRefusal,
                )
                .map(FromProxy::from)
            }
        };
        // Shared fences: the lease the request was admitted under, which the
        // fencing layer handed on with it; the last look at it before the
        // request leaves (its body is looked at chunk by chunk).
        let lease = request.lease.clone();
        if let Some(Err(ended)) = lease.as_ref().map(|l| l.check(LeaseStage::BeforeSending)) {
            return gateway_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "fence_store_unavailable",
                &ended.to_string(),
                RequestOutcome::FenceStoreUnavailable,
            )
            .map(FromProxy::from);
        }
        let started = clock::now_std();
        let has_body = !http_body::Body::is_end_stream(&request.body);
        let sent_at = SentAt::new(lease);
        let sent = has_body.then_some(&sent_at);
        let request = ToBackend::watch(request, started, sent);
        let result = shared
            .send(request, &target, &self.client, started, sent)
            .await;
        if !matches!(result, Err(UpstreamError::HeadTimeout)) {
            let response = shared.answer(result);
            if shared.signer.is_some() && is_credentials_status(response.status()) {
                // Boxed: rare, and its state would otherwise be part of
                // every request's future.
                return Box::pin(credentials_rejected(shared, response)).await;
            }
            return response;
        }
        tracing::warn!(upstream = %shared.upstream, timeout = ?shared.timeout, "upstream timeout");
        gateway_error(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            &format!(
                "no response headers from {} within {:?} of the request being sent; the request may still be applied by the backend",
                shared.upstream, shared.timeout
            ),
            RequestOutcome::UpstreamError,
        )
        .map(FromProxy::from)
    }
}

impl ProxyShared {
    /// The response to relay for the outcome of [`ProxyShared::send`].
    fn answer(&self, result: Result<Response<FromProxy>, UpstreamError>) -> Response<FromProxy> {
        match result {
            Ok(response) => response,
            Err(error) => self.failure(&error).map(FromProxy::from),
        }
    }

    /// The gateway's answer when the backend could not be asked.
    fn failure(&self, error: &UpstreamError) -> Response<Body> {
        let detail = error_chain(error);
        match error {
            UpstreamError::Send(BackendSendError::Write(WriteError::Body(cause))) => {
                let cause: &(dyn std::error::Error + 'static) = cause.as_ref();
                if let Some(ended) = find_cause::<LeaseEnded>(cause) {
                    tracing::error!(upstream = %self.upstream, "lease ended during the request body; aborted towards the backend");
                    return close_after(gateway_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "fence_store_unavailable",
                        &ended.to_string(),
                        RequestOutcome::FenceStoreUnavailable,
                    ));
                }
                if let Some(StreamError::Refused(refused)) = find_cause::<StreamError>(cause) {
                    if matches!(
                        refused,
                        ChunkedError::ChunkSignatureMismatch
                            | ChunkedError::TrailerSignatureMismatch
                    ) {
                        return chunk_signature_refused(&self.upstream, refused);
                    }
                }
                // The request body failed: that is the client's doing, not
                // the backend's. The backend saw a cut-off body.
                if let Some(stalled) = BodyStalled::find(cause).filter(|s| s.side == Side::Client) {
                    tracing::info!(upstream = %self.upstream, after = ?stalled.after, "request body stalled; aborted towards the backend");
                    return close_after(gateway_error(
                        StatusCode::REQUEST_TIMEOUT,
                        "client_body_timeout",
                        &format!("the request body paused for longer than {:?}; the backend received it cut off", stalled.after),
                        RequestOutcome::ClientError,
                    ));
                }
                return client_body_error(&self.upstream, &detail);
            }
            UpstreamError::Send(BackendSendError::Write(WriteError::BodyLength)) => {
                return client_body_error(&self.upstream, &detail);
            }
            _ => {}
        }
        tracing::warn!(upstream = %self.upstream, error = %detail, "upstream unavailable");
        gateway_error(
            StatusCode::BAD_GATEWAY,
            "upstream_unavailable",
            &format!("{}: {detail}", self.upstream),
            RequestOutcome::UpstreamError,
        )
    }

    /// Sends `request` on an idle pooled connection, or a new one. A request
    /// that a reused connection could not take at all (the backend had
    /// closed it meanwhile) is sent again on another connection, as
    /// hyper-util's client does; one that may have reached the backend
    /// never is.
    ///
    /// The request started at `started`: a new connection is made, and the
    /// response head comes, within the timeout of it (or of the end of the
    /// request body, `sent`), else [`UpstreamError::HeadTimeout`].
    async fn send(
        &self,
        request: Inbound<ToBackend<'_>>,
        target: &Uri,
        client: &ForwardedHeaders,
        started: Instant,
        sent: Option<&SentAt>,
    ) -> Result<Response<FromProxy>, UpstreamError> {
        let to_head = request.method() == Method::HEAD;
        let (head, body) = request.split_body();
        // Boxed: without custody the future carries one word for it, not
        // the whole of a `Signed`, across every await below.
        let signed: Option<Box<Signed>> = match &self.signer {
            Some(signer) => {
                let forward = head
                    .custody
                    .as_ref()
                    .map_or(&Forwarding::Gateway, |verified| &verified.forward);
                let target = target.path_and_query().map_or("/", |p| p.as_str());
                Some(Box::new(
                    signer
                        .sign(
                            head.method(),
                            target,
                            &head.head,
                            &head.set_names,
                            forward,
                            unix_now(),
                        )
                        .map_err(UpstreamError::Sign)?,
                ))
            }
            None => None,
        };
        let connect_by = started + self.timeout;
        let (mut conn, mut reused) = self.checkout(connect_by).await?;
        let mut timer = conn.take_timer();
        let out = conn.take_buffer();
        let mut request = engine::BackendRequest::new(out, body, to_head, |out, has_body, size| {
            let edits = Edits {
                // A request in absolute form (a client using the gateway as
                // its HTTP proxy) names its host in the target, which
                // replaces any Host field (RFC 9112 §3.2.2); so does an
                // HTTP/2 client's :authority. Otherwise Host goes through
                // exactly as sent, so that signatures over it (S3 SigV4)
                // still verify at the backend.
                host: match signed.as_ref().and_then(|s| s.host.as_ref()) {
                    Some(host) => Some(host.as_bytes()),
                    None => head
                        .sent_uri()
                        .authority()
                        .map(|authority| authority.as_str().as_bytes()),
                },
                default_host: self.default_host.as_bytes(),
                forwarded_for: client.peer.as_ref().map(HeaderValue::as_bytes),
                forwarded_proto: client.proto.as_bytes(),
                set: head.head.set_fields(),
                length: head.head.normalized_length(),
                keep: signed.as_ref().and_then(|s| s.keep.as_deref()),
                signed: signed.as_ref().map_or(&[][..], |s| &s.set),
            };
            let target = match signed.as_ref().and_then(|s| s.target.as_ref()) {
                Some(target) => target.as_str(),
                None => target.path_and_query().map_or("/", |p| p.as_str()),
            };
            // The pooled upstream connections are HTTP/1.1, whatever the
            // client spoke.
            head.head
                .write_for_backend(out, head.method(), target, &edits, has_body, size)
        });
        drop(head);
        loop {
            let sending = std::pin::pin!(conn.send(request));
            let answer = response_head_within(self.timeout, started, sent, &mut timer, sending);
            let Some(answer) = answer.await else {
                return Err(UpstreamError::HeadTimeout);
            };
            match answer {
                Ok((head, mut conn, whole)) => {
                    conn.keep_timer(timer);
                    let reuse = head.keep_alive && whole;
                    let body = BackendBody::new(conn, head.body, reuse, Arc::clone(&self.pool));
                    // A response body that stalls fails, and its
                    // connection is not reused.
                    let body = StallTimeout::new(body, self.timeout, Side::Upstream);
                    // The backend's lines go on with the body, for the
                    // client's server to write; into the map only where
                    // something reads it (chained writes read an ETag).
                    let (headers, fields) = if self.fields_in_map {
                        (end_to_end_map(|| head.fields.iter()), None)
                    } else {
                        (HeaderMap::new(), Some(head.fields))
                    };
                    let mut response = Response::new(FromProxy::backend(body, fields));
                    *response.status_mut() = head.status;
                    *response.headers_mut() = headers;
                    return Ok(response);
                }
                Err(Failed {
                    unsent: Some(unsent),
                    ..
                }) if reused => {
                    request = unsent;
                    (conn, reused) = self.checkout(connect_by).await?;
                }
                Err(failed) => return Err(UpstreamError::Send(failed.error)),
            }
        }
    }

    /// An idle pooled connection (reused: `true`), or a new one made by
    /// `deadline`.
    async fn checkout(&self, deadline: Instant) -> Result<(Connection, bool), UpstreamError> {
        match self.pool.checkout() {
            Some(conn) => Ok((conn, true)),
            // Boxed: connecting is rare, and its large future would
            // otherwise be part of (and copied with) every request's.
            None => Ok((Box::pin(self.connect(deadline)).await?, false)),
        }
    }

    /// A new connection to the backend, TLS included, by `deadline` (the
    /// request's: a connection that takes longer is the same timeout as a
    /// response head that does).
    async fn connect(&self, deadline: Instant) -> Result<Connection, UpstreamError> {
        match connect_by(deadline, self.handshake()).await {
            Some(result) => result,
            None => Err(UpstreamError::HeadTimeout),
        }
    }

    async fn handshake(&self) -> Result<Connection, UpstreamError> {
        let host = self.upstream.host();
        let stream = tokio::net::TcpStream::connect((host, self.upstream.port()))
            .await
            .map_err(UpstreamError::Connect)?;
        // Small request/response exchanges must not wait on Nagle.
        stream.set_nodelay(true).map_err(UpstreamError::Connect)?;
        let Some(connector) = &self.tls else {
            return Ok(Connection::new(Stream::Plain(stream)));
        };
        // SNI and verification use the upstream URL's host, whatever Host
        // the client sent.
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| UpstreamError::Tls(std::io::Error::other(e)))?;
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(UpstreamError::Tls)?;
        Ok(Connection::new(Stream::Tls(Box::new(stream))))
    }
}

/// The statuses with which a store refuses credentials: S3's 403, a plain
/// HTTP store's 401.
fn is_credentials_status(status: StatusCode) -> bool {
    status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED
}

/// The S3 (and Azure) error codes that say the gateway's own credentials
/// were refused (expired, rotated, wrong), not the request.
const CREDENTIAL_CODES: [&str; 6] = [
    "AuthenticationFailed",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
];

/// The largest error body read to tell a refusal of the gateway's
/// credentials from another 403.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A WebDAV `LOCK` answer with the gateway's lock tokens in place of the
/// store's, an S3 `CreateMultipartUpload` answer with the gateway's upload
/// id; one that cannot be rewritten (too long, a token that is no
/// Coded-URL, no upload id the gateway can read) is 502
/// `upstream_unavailable`, never relayed with the store's handle in it.
async fn rewrite_answer(
    shared: &ProxyShared,
    response: Response<FromProxy>,
    answer: AnswerRewrite,
) -> Response<FromProxy> {
    let rewritten = match &answer {
        AnswerRewrite::Lock(lock) => dav_locks::bind_answer(response, lock)
            .await
            .map_err(UpstreamError::LockAnswer),
        AnswerRewrite::Upload(upload) => upload_ids::bind_answer(response, upload)
            .await
            .map_err(UpstreamError::UploadAnswer),
    };
    match rewritten {
        Ok(response) => response,
        Err(error) => shared.failure(&error).map(FromProxy::from),
    }
}

/// Under custody, a store's 401 (a plain HTTP store), or its 403 whose S3
/// code says the gateway's credentials were refused, is 502
/// `upstream_credentials_rejected`, without the store's body (it names
/// the gateway's key and string to sign) or its `WWW-Authenticate`. Any
/// other 403 (S3's `AccessDenied` of a bucket policy, say) is relayed as
/// it came.
async fn credentials_rejected(
    shared: &ProxyShared,
    response: Response<FromProxy>,
) -> Response<FromProxy> {
    let rejected = |detail: &str| {
        tracing::error!(upstream = %shared.upstream, detail, "the store refused the gateway's credentials");
        gateway_error(
            StatusCode::BAD_GATEWAY,
            "upstream_credentials_rejected",
            &format!("the store refused the gateway's own credentials ({detail}); check --upstream-credentials"),
            RequestOutcome::UpstreamError,
        )
        .map(FromProxy::from)
    };
    if response.status() == StatusCode::UNAUTHORIZED {
        return rejected("401");
    }
    let (mut parts, mut body) = response.into_parts();
    // The backend's lines go into the map: the body is replaced by the
    // bytes read, which the lines' framing must not contradict.
    if let Some(fields) = body.take_fields() {
        parts.headers.extend(end_to_end_map(|| fields.iter()));
    }
    // Azure names its code in a field too, which a HEAD's answer has
    // without a body.
    let azure_code = parts
        .headers
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .filter(|code| CREDENTIAL_CODES.contains(code));
    if let Some(code) = azure_code {
        return rejected(code);
    }
    let limited = http_body_util::Limited::new(body, MAX_ERROR_BODY);
    let bytes = match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return shared
                .failure(&UpstreamError::ErrorBody(error.to_string()))
                .map(FromProxy::from)
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let code = text
        .split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(code, _)| code.trim());
    if let Some(code) = code.filter(|code| CREDENTIAL_CODES.contains(code)) {
        return rejected(code);
    }
    // Azurite names a signature it cannot verify AuthorizationFailure, a
    // code Azure keeps for firewalls and the like: told apart by its
    // message.
    if code == Some("AuthorizationFailure") && text.contains("failed to authenticate") {
        return rejected("AuthorizationFailure");
    }
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(parts, FromProxy::from(Body::from(bytes)))
}

/// 403 `SignatureDoesNotMatch`, as S3 answers it, for a signed aws-chunked
/// body whose chunk or trailer the client's chain does not verify. The
/// head verified, so the request was under way: the store saw the upload
/// cut off and keeps nothing.
fn chunk_signature_refused(upstream: &Upstream, error: &ChunkedError) -> Response<Body> {
    tracing::info!(upstream = %upstream, %error, "aws-chunked body refused; aborted towards the backend");
    close_after(gateway_error(
        StatusCode::FORBIDDEN,
        "SignatureDoesNotMatch",
        &format!("{error}; the upload was cut off before the store could keep any of it"),
        RequestOutcome::Unauthenticated,
    ))
}

/// 400 for a request body that failed or did not match its length.
fn client_body_error(upstream: &Upstream, detail: &str) -> Response<Body> {
    tracing::info!(upstream = %upstream, error = %detail, "request body failed; aborted towards the backend");
    close_after(gateway_error(
        StatusCode::BAD_REQUEST,
        "client_body_error",
        &format!("the request body could not be read: {detail}"),
        RequestOutcome::ClientError,
    ))
}

/// Why the backend could not be asked (502).
#[derive(Debug, thiserror::Error)]
enum UpstreamError {
    #[error("cannot connect")]
    Connect(#[source] std::io::Error),
    /// No connection, or no response head, within the timeout: answered
    /// 504 by [`Proxy::send_on`] rather than through [`ProxyShared::failure`].
    #[error("no response head within the timeout")]
    HeadTimeout,
    #[error("TLS handshake failed")]
    Tls(#[source] std::io::Error),
    #[error("request failed")]
    Send(#[source] BackendSendError),
    /// Credential custody could not sign it.
    #[error(transparent)]
    Sign(SignError),
    /// A store's error body could not be read.
    #[error("the store's error body could not be read: {0}")]
    ErrorBody(String),
    /// A WebDAV `LOCK` answer whose lock token could not be bound.
    #[error(transparent)]
    LockAnswer(dav_locks::LockAnswerError),
    /// An S3 `CreateMultipartUpload` answer whose upload id could not be
    /// bound.
    #[error(transparent)]
    UploadAnswer(upload_ids::UploadAnswerError),
}

impl Forward<Inbound<Body>> for Proxy {
    type Body = FromProxy;
    type Error = Infallible;

    async fn forward(self, mut request: Inbound<Body>) -> Result<Response<FromProxy>, Infallible> {
        // A WebDAV LOCK or an S3 CreateMultipartUpload under custody: its
        // answer hands out the gateway's handles (`custody/dav_locks.rs`,
        // `custody/upload_ids.rs`). Boxed, and decided before the common
        // path's future: rare, and its state would otherwise be part of
        // every request's future (callgrind, W1: 19,684 instructions a
        // request when it was, 19,471 since).
        let answer = request
            .custody
            .as_deref_mut()
            .and_then(|verified| verified.answer.take());
        Ok(match answer {
            None => self.send_on(request).await,
            Some(answer) => {
                Box::pin(async move {
                    let response = self.send_on(request).await;
                    rewrite_answer(&self.shared, response, *answer).await
                })
                .await
            }
        })
    }
}

/// 501 for a request this proxy never forwards: a protocol upgrade (and
/// `CONNECT`, a tunnel, which `crate::misreading` refuses 405 before it
/// gets here). Checked before the fencing layer too, so that such a
/// request raises no fence.
/// `may_upgrade`: whether it may carry `Upgrade` (the misreading pass's
/// [`DecidingFields::may_carry_upgrade`](crate::misreading::DecidingFields::may_carry_upgrade)).
pub(crate) fn refuse_unproxyable<R: RequestView>(
    request: &R,
    may_upgrade: bool,
) -> Option<Response<Body>> {
    if request.method() != Method::CONNECT && !(may_upgrade && demands_upgrade(request.fields())) {
        return None;
    }
    Some(gateway_error(
        StatusCode::NOT_IMPLEMENTED,
        "upgrade_not_supported",
        "protocol upgrades and CONNECT are not proxied",
        RequestOutcome::OtherRefusal,
    ))
}

/// Whether the request asks to switch protocols for real (WebSocket and
/// the like), which this proxy does not do. An `h2c` offer is only an offer
/// (`curl --http2` sends it on every request): it is dropped with the other
/// hop-by-hop headers and the request goes on over HTTP/1.1 (RFC 9110 §7.8).
fn demands_upgrade<H: HeaderFields + ?Sized>(headers: &H) -> bool {
    headers
        .values_of(&http::header::UPGRADE)
        .flat_map(|value| visible_str(value).unwrap_or("?").split(','))
        .any(|protocol| !protocol.trim().eq_ignore_ascii_case("h2c"))
}

/// hyper's errors hide the cause (connection refused, reset) in `source()`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // Some errors show their source in their own text already.
        let shown = cause.to_string();
        if !text.ends_with(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = cause.source();
    }
    text
}
