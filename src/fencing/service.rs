use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::chained;
use super::config::{Enforce, Settings, WouldRefuse};
use super::forward::{Called, Forward};
use super::future::{refusal_response, ResponseFuture};
use crate::fences::{self, AdmitError, Fences};
use crate::head::{RequestView, SetHeader};
use crate::issuer::IssuerError;
use crate::key::{lock_name_from_headers, normalize_path, request_host, Scope};
use crate::reach::{self, ReachError};
use crate::refusal::Refusal;
use crate::store::{Lease, LeaseEnded, LeaseStage, MAX_SHARED_KEYS};
use crate::token::token_from_headers;
use crate::InFlight;

/// The fencing middleware: checks each request's token against its fence
/// before the inner service sees it. Built by [`FencingLayer`](super::FencingLayer).
#[derive(Debug, Clone)]
pub struct Fencing<S> {
    inner: S,
    config: Arc<Settings>,
    /// The client's address, named in the log line of each raise.
    client: Option<SocketAddr>,
}

/// What the synchronous checks decided.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Unfenced read, or unfenced write allowed by policy: straight through.
    Pass,
    /// Fenced: admit first.
    Admit(Admit),
    /// Report mode: refused in `On`, forwarded here, marked.
    Report(WouldRefuse),
}

/// What a fenced request is admitted on.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// `token` on fence `key`.
    One { key: String, token: u64 },
    /// `token` on every one of `keys` at once: a write that reaches beyond
    /// its path. `key` is the request's own, for logs.
    All {
        key: String,
        keys: Vec<String>,
        token: u64,
    },
}

/// A request the fencing layer hands on to its inner service: read as a
/// [`RequestView`], given a chained write's condition ([`SetHeader`]), and
/// told the lease it was admitted under (shared fences), which the inner
/// service watches while it forwards it. `http::Request` is one (the lease
/// goes into its extensions); the gateway's HTTP/1.1 engine has its own.
pub(crate) trait Fenced: RequestView<Fields: Sync> + SetHeader + Send + 'static {
    /// The lease this request was admitted under.
    fn hand_lease(&mut self, lease: Lease);

    /// Who the client authenticated as (credential custody), named in the
    /// log line of a raise.
    fn identity(&self) -> Option<&str> {
        None
    }
}

impl<B: Send + 'static> Fenced for Request<B> {
    fn hand_lease(&mut self, lease: Lease) {
        self.extensions_mut().insert(lease);
    }
}

impl<S> Fencing<S> {
    /// Fences `inner` over `fences` with the defaults of
    /// [`FencingLayer::new`](super::FencingLayer::new); build a
    /// [`FencingLayer`](super::FencingLayer) to change them.
    pub fn new(inner: S, fences: Fences) -> Self {
        Self::with_config(inner, Arc::new(Settings::new(fences)))
    }

    pub(crate) fn with_config(inner: S, config: Arc<Settings>) -> Self {
        Fencing {
            inner,
            config,
            client: None,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Names `client` in the log line of every raise this service makes: a
    /// server that makes one service per connection knows who is on it.
    pub fn with_client(mut self, client: SocketAddr) -> Self {
        self.client = Some(client);
        self
    }

    /// The fence key and token this service would admit `request` on, as
    /// far as they can be told: `(None, None)` for an unfenced read, a key
    /// without a token for a write that has none, nothing that is invalid.
    /// For logs; admission itself does not use it.
    pub fn fence_of<R: RequestView + ?Sized>(&self, request: &R) -> (Option<String>, Option<u64>) {
        match self.decide(request) {
            Ok(Decision::Admit(Admit::One { key, token } | Admit::All { key, token, .. })) => {
                (Some(key), Some(token))
            }
            Ok(Decision::Pass | Decision::Report(_)) => {
                if self.config.is_write(request.method()) {
                    (self.path_key(request).ok(), None)
                } else {
                    (None, None)
                }
            }
            Err(Refusal::MissingToken { resource }) => (Some(resource), None),
            Err(_) => (None, None),
        }
    }

    /// The request's own key in the path scopes: its normalised path's key,
    /// and in the `host+` scopes its host in front.
    fn path_key<R: RequestView + ?Sized>(&self, request: &R) -> Result<String, Refusal> {
        let scope = self.config.scope;
        let path = normalize_path(request.uri().path()).map_err(|e| Refusal::InvalidPath {
            detail: e.to_string(),
        })?;
        if !scope.has_host() {
            return Ok(scope.into_key(path));
        }
        let host =
            request_host(request.uri(), request.fields()).map_err(|e| Refusal::InvalidPath {
                detail: e.to_string(),
            })?;
        Ok(scope.key_for(Some(&host), &path))
    }

    /// Everything but admission, in the contract's order: token syntax and
    /// lock header, then the path, then a write without a token.
    fn decide<R: RequestView + ?Sized>(&self, request: &R) -> Result<Decision, Refusal> {
        let config = &self.config;
        let headers = request.fields();
        let token = token_from_headers(headers, &config.token_header).map_err(|e| {
            Refusal::InvalidToken {
                detail: format!("{}: {e}", config.token_header),
            }
        })?;
        let is_write = config.is_write(request.method());
        if token.is_none() && !is_write {
            return Ok(Decision::Pass);
        }
        let lock_name = match (config.scope, token) {
            (Scope::Header, Some(_)) => {
                Some(
                    lock_name_from_headers(headers).map_err(|e| Refusal::InvalidToken {
                        detail: e.to_string(),
                    })?,
                )
            }
            // Only to name the resource in a 428: a write without a token
            // needs no lock name, so a missing or bad one is not an error.
            (Scope::Header, None) => lock_name_from_headers(headers).ok(),
            _ => None,
        };
        let key = match lock_name {
            Some(lock_name) => lock_name,
            None => self.path_key(request)?,
        };
        let Some(token) = token else {
            return if config.allow_unfenced_writes {
                Ok(Decision::Pass)
            } else {
                Err(Refusal::MissingToken { resource: key })
            };
        };
        if config.scope == Scope::Header || reach::is_plain(request) {
            return Ok(Decision::Admit(Admit::One { key, token }));
        }
        let rules = reach::Rules {
            scope: config.scope,
            flat_keys: config.flat_keys,
        };
        let reached =
            reach::reach(request, &rules, request.listed_objects()).map_err(
                |error| match error {
                    ReachError::Path(e) => Refusal::InvalidPath {
                        detail: e.to_string(),
                    },
                    ReachError::Host(e) => Refusal::InvalidPath {
                        detail: e.to_string(),
                    },
                    ReachError::Unfenceable(e) => Refusal::Unfenceable { detail: e.0 },
                },
            )?;
        match <[String; 1]>::try_from(reached.keys) {
            Ok([key]) => Ok(Decision::Admit(Admit::One { key, token })),
            Err(keys) => {
                if config.fences.is_shared() && keys.len() > MAX_SHARED_KEYS {
                    return Err(Refusal::Unfenceable {
                        detail: format!(
                            "this write changes {} fences at once; shared fences (--state etcd) admit at most {MAX_SHARED_KEYS} together",
                            keys.len(),
                        ),
                    });
                }
                Ok(Decision::Admit(Admit::All {
                    key: reached.key,
                    keys,
                    token,
                }))
            }
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Fencing<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let admission = match self.decide_logged(&request) {
            Ok(Decision::Pass) => {
                if let Some(chain) = self.config.chain.as_deref() {
                    chained::forget_unfenced(chain, &request);
                }
                return ResponseFuture::passing(self.inner.call(request));
            }
            Ok(Decision::Report(mark)) => {
                return ResponseFuture::reported(self.inner.call(request), mark)
            }
            Ok(Decision::Admit(admission)) => admission,
            Err(refusal) => return ResponseFuture::refused(refusal),
        };
        // The instance that was polled ready is the one that must be called:
        // take it, and leave a fresh clone behind for the next request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        self.admitting(admission, request, inner)
    }
}

impl<S> Fencing<S> {
    /// Whether `request` is an S3 `DeleteObjects` whose listed keys this
    /// layer must be given (a [`ListedObjects`](reach::ListedObjects) among
    /// its extensions) before it can admit it: the gateway reads its body
    /// first.
    #[cfg(feature = "gateway")]
    pub(crate) fn needs_listing<R: RequestView + ?Sized>(&self, request: &R) -> bool {
        self.config.scope != Scope::Header
            && reach::lists_objects_in_body(request)
            && crate::head::HeaderFields::contains(request.fields(), &self.config.token_header)
    }

    /// Whether this layer refuses what fencing refuses (`enforce = on`),
    /// its path checks among them.
    #[cfg(feature = "gateway")]
    pub(crate) fn enforces(&self) -> bool {
        self.config.enforce == Enforce::On
    }

    /// The header this layer reads the token from.
    #[cfg(feature = "gateway")]
    pub(crate) fn token_header(&self) -> &http::HeaderName {
        &self.config.token_header
    }

    /// Whether this layer's store has collections (`--flat-keys` off): a
    /// `DELETE` may then remove a whole subtree.
    #[cfg(feature = "gateway")]
    pub(crate) fn flat_keys(&self) -> bool {
        self.config.flat_keys
    }

    /// Whether writes without a token go through (`--allow-unfenced-writes`).
    #[cfg(feature = "gateway")]
    pub(crate) fn allows_unfenced_writes(&self) -> bool {
        self.config.allow_unfenced_writes
    }

    /// The fence table this layer admits on (its namespace's view).
    #[cfg(feature = "gateway")]
    pub(crate) fn fences(&self) -> &crate::Fences {
        &self.config.fences
    }

    /// The highest admitted on `key`, as this instance knows it.
    #[cfg(feature = "gateway")]
    pub(crate) fn highest(&self, key: &str) -> Option<u64> {
        self.config.fences.highest(key)
    }

    /// [`Fencing::decide`], with a log line for a refusal.
    fn decide_logged<R: RequestView + ?Sized>(&self, request: &R) -> Result<Decision, Refusal> {
        if self.config.enforce == Enforce::Off {
            return Ok(Decision::Pass);
        }
        let decided =
            self.decide(request)
                .and_then(|decision| match (&decision, self.config.chain()) {
                    (Decision::Admit(_), Some(chain)) => {
                        chained::check_condition(chain, request).map(|()| decision)
                    }
                    _ => Ok(decision),
                });
        match decided {
            Err(refusal) if self.config.enforce == Enforce::Report => {
                match would_refuse(&refusal) {
                    Some(mark) => {
                        log_would_refuse(&refusal, mark, request);
                        Ok(Decision::Report(mark))
                    }
                    None => {
                        log_refusal(&refusal, request);
                        Err(refusal)
                    }
                }
            }
            decided => decided.inspect_err(|refusal| log_refusal(refusal, request)),
        }
    }

    /// Admit as `admission` says, then `inner` called with `request`.
    fn admitting<R, ResBody>(
        &self,
        admission: Admit,
        request: R,
        inner: S,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<R, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        R: Fenced,
        ResBody: Send + 'static,
    {
        ResponseFuture::admitting(Box::pin(admit_and_forward(
            Arc::clone(&self.config),
            self.client,
            admission,
            request,
            Called(inner),
        )))
    }

    /// The gateway's way in: `request` fenced, then forwarded by a clone of
    /// the inner service, as one future without a box of its own
    /// ([`Forward`] says why).
    #[cfg(feature = "gateway")]
    pub(crate) async fn forward_fenced<R>(
        &self,
        request: R,
    ) -> Result<Response<ResponseBody<S::Body>>, S::Error>
    where
        S: Forward<R> + Clone,
        R: Fenced,
    {
        match self.decide_logged(&request) {
            Ok(Decision::Pass) => {
                if let Some(chain) = self.config.chain.as_deref() {
                    chained::forget_unfenced(chain, &request);
                }
                let response = self.inner.clone().forward(request).await?;
                Ok(response.map(|body| ResponseBody::inner(body, None)))
            }
            Ok(Decision::Report(mark)) => {
                let response = self.inner.clone().forward(request).await?;
                Ok(reported(response, mark))
            }
            Ok(Decision::Admit(admission)) => {
                admit_and_forward(
                    Arc::clone(&self.config),
                    self.client,
                    admission,
                    request,
                    self.inner.clone(),
                )
                .await
            }
            Err(refusal) => Ok(refusal_response(&refusal)),
        }
    }
}

/// Admits `request` as `admission` says (on behalf of `client`), then
/// hands it to `inner`; a refused admission is answered here.
async fn admit_and_forward<R, F>(
    config: Arc<Settings>,
    client: Option<SocketAddr>,
    admission: Admit,
    request: R,
    inner: F,
) -> Result<Response<ResponseBody<F::Body>>, F::Error>
where
    R: Fenced,
    F: Forward<R>,
{
    let issuer = config.issuer.as_deref();
    // The request's own key stays in hand (it is borrowed across the
    // admission anyway): a refusal names it, a chain needs it.
    let (resource, token, admitted) = match admission {
        Admit::One { key, token } => {
            let admitted = config
                .fences
                .admit_with(
                    &key,
                    fences::Admission::new(token)
                        .from_client(client)
                        .by_identity(request.identity())
                        .checked_by(issuer),
                )
                .await;
            (key, token, admitted)
        }
        // Boxed: a rare path, whose state would otherwise set the
        // size of every request's future (and push its allocation
        // out of the allocator's fast path).
        Admit::All { key, keys, token } => {
            let admitted = Box::pin(
                config.fences.admit_all(
                    &keys,
                    fences::Admission::new(token)
                        .from_client(client)
                        .by_identity(request.identity())
                        .checked_by(issuer),
                ),
            )
            .await
            .map_err(|refused| (refused.resource, refused.error));
            match admitted {
                Ok(in_flight) => (key, token, Ok(in_flight)),
                Err((on, error)) => (on, token, Err(error)),
            }
        }
    };
    let in_flight = match admitted {
        Ok(in_flight) => in_flight,
        Err(error) => {
            let refusal = refusal_of(resource, token, error);
            if config.enforce == Enforce::Report {
                if let Some(mark) = would_refuse(&refusal) {
                    // Forwarded as if admitted, holding no place in the
                    // order (it would have been refused).
                    log_would_refuse(&refusal, mark, &request);
                    let response = inner.forward(request).await?;
                    return Ok(reported(response, mark));
                }
            }
            log_refusal(&refusal, &request);
            return Ok(refusal_response(&refusal));
        }
    };
    if config.chain().is_some() {
        // Boxed, so that the plain path's future does not carry the
        // chain's state in its size (every byte of it is copied).
        return Box::pin(call_chained(
            config, resource, token, inner, request, in_flight,
        ))
        .await;
    }
    call(inner, request, in_flight).await
}

/// The answer to a request whose admission on `resource` with `token`
/// failed with `error`.
fn refusal_of(resource: String, token: u64, error: AdmitError) -> Refusal {
    match error {
        AdmitError::Stale(stale) => Refusal::Stale { resource, stale },
        AdmitError::Store(error) => Refusal::StoreUnavailable {
            detail: error.to_string(),
        },
        AdmitError::Limited(limited) => Refusal::NewFenceLimit {
            detail: limited.to_string(),
            retry_after: limited.retry_after.as_secs(),
        },
        AdmitError::Issuer {
            error: IssuerError::NotIssued { issued },
            ..
        } => Refusal::TokenNotIssued {
            resource,
            token,
            issued,
        },
        AdmitError::Issuer {
            error: IssuerError::Unavailable(detail),
            ..
        } => Refusal::IssuerUnavailable {
            detail: detail.to_string(),
        },
    }
}

/// Calls `inner` with an admitted request, holding `in_flight` until its
/// response is relayed.
async fn call<F, R>(
    inner: F,
    request: R,
    in_flight: InFlight,
) -> Result<Response<ResponseBody<F::Body>>, F::Error>
where
    F: Forward<R>,
    R: Fenced,
{
    let Some(lease) = in_flight.lease().cloned() else {
        let response = inner.forward(request).await?;
        return Ok(response.map(|body| ResponseBody::inner(body, Some(in_flight))));
    };
    // Boxed, so that the plain path's future (every request without
    // shared fences) does not carry this one's state in its size.
    Box::pin(call_under_lease(inner, request, lease, in_flight)).await
}

/// Chained writes ([`crate::chain`]): the version a request may carry
/// before it is forwarded, and what the store's answer shows after.
async fn call_chained<F, R>(
    config: Arc<Settings>,
    resource: String,
    token: u64,
    inner: F,
    mut request: R,
    in_flight: InFlight,
) -> Result<Response<ResponseBody<F::Body>>, F::Error>
where
    F: Forward<R>,
    R: Fenced,
{
    let Some(chain) = config.chain() else {
        return call(inner, request, in_flight).await;
    };
    let mut plan = chained::before(chain, &config.fences, &resource, &mut request);
    if matches!(plan, Err(Refusal::VersionUnknown { .. })) && chain.reader().is_some() {
        let uri = request.uri().clone();
        let read = chained::read_version(chain, &config.fences, &uri, request.fields()).await;
        plan = match read {
            Ok(()) => chained::before(chain, &config.fences, &resource, &mut request),
            Err(refusal) => Err(refusal),
        };
    }
    if matches!(plan, Err(Refusal::VersionUnknown { .. })) {
        chain.count_unknown();
    }
    if let Ok(Some(observed)) = &plan {
        if observed.needs_shared_read() && config.fences.is_shared() {
            if let Err(refusal) = chained::confirm_observed(&config.fences, &resource, token).await
            {
                plan = Err(refusal);
            }
        }
    }
    let plan = match plan {
        Ok(plan) => plan,
        Err(refusal) => {
            log_refusal(&refusal, &request);
            return Ok(refusal_response(&refusal));
        }
    };
    let head = request_head(&request);
    let response = call(inner, request, in_flight).await?;
    let refused = plan
        .and_then(|plan| chained::after(chain, &config.fences, &resource, token, plan, &response));
    match refused {
        Some(refusal) => {
            log_refusal(&refusal, &head);
            Ok(refusal_response(&refusal))
        }
        None => Ok(response),
    }
}

/// Method and target of `request`, for a log line once it is gone.
fn request_head<R: RequestView + ?Sized>(request: &R) -> Request<()> {
    let mut head = Request::new(());
    *head.method_mut() = request.method().clone();
    *head.uri_mut() = request.uri().clone();
    head
}

/// Shared fences: calls `inner` while this instance's `lease` lives. The
/// inner service finds the lease among the request's extensions, to stop
/// streaming the body to the backend the moment it ends; and the call itself
/// is dropped (cutting the request towards the backend) once it is revoked.
async fn call_under_lease<F, R>(
    inner: F,
    mut request: R,
    lease: Lease,
    in_flight: InFlight,
) -> Result<Response<ResponseBody<F::Body>>, F::Error>
where
    F: Forward<R>,
    R: Fenced,
{
    request.hand_lease(lease.clone());
    let head = request_head(&request);
    let mut call = std::pin::pin!(inner.forward(request));
    let mut revoked = std::pin::pin!(lease.revoked());
    let answered = std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = call.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        revoked.as_mut().poll(cx).map(|()| None)
    })
    .await;
    match answered {
        Some(response) => Ok(response?.map(|body| ResponseBody::inner(body, Some(in_flight)))),
        None => {
            let refusal = Refusal::StoreUnavailable {
                detail: LeaseEnded {
                    stage: LeaseStage::AwaitingResponse,
                }
                .to_string(),
            };
            log_refusal(&refusal, &head);
            Ok(refusal_response(&refusal))
        }
    }
}

/// In report mode, what `On` would have refused that is forwarded with a
/// mark: the fencing reasons; `None` for what is refused in every mode
/// (a path that escapes the root, an unavailable store or issuer).
fn would_refuse(refusal: &Refusal) -> Option<WouldRefuse> {
    let reason = match refusal {
        Refusal::Stale { stale, .. } => stale.reason.as_str(),
        Refusal::MissingToken { .. } => "missing_token",
        Refusal::InvalidToken { .. } => "invalid_token",
        Refusal::Unfenceable { .. } => "unfenceable_write",
        Refusal::TokenNotIssued { .. } => "token_not_issued",
        _ => return None,
    };
    Some(WouldRefuse { reason })
}

/// A response forwarded in report mode, marked with why `On` would have
/// refused its request.
fn reported<B>(response: Response<B>, mark: WouldRefuse) -> Response<ResponseBody<B>> {
    let mut response = response.map(|body| ResponseBody::inner(body, None));
    response.extensions_mut().insert(mark);
    response
}

/// The INFO line of a request report mode let through.
fn log_would_refuse<R: RequestView + ?Sized>(refusal: &Refusal, mark: WouldRefuse, request: &R) {
    tracing::info!(
        reason = mark.reason,
        error = refusal.code(),
        method = request.method().as_str(),
        path = request.uri().path(),
        detail = refusal.message().as_str(),
        "would_refuse"
    );
}

/// One line per refused request, with what an operator needs to find it.
fn log_refusal<R: RequestView + ?Sized>(refusal: &Refusal, request: &R) {
    let method = request.method().as_str();
    let path = request.uri().path();
    match refusal {
        Refusal::Stale { resource, stale } => tracing::info!(
            error = refusal.code(),
            method,
            path,
            resource = resource.as_str(),
            token = stale.token,
            highest = stale.highest,
            reason = stale.reason.as_str(),
            "refused stale request"
        ),
        Refusal::MissingToken { resource } => tracing::info!(
            error = refusal.code(),
            method,
            path,
            resource = resource.as_str(),
            "refused write without a token"
        ),
        Refusal::InvalidToken { detail }
        | Refusal::InvalidPath { detail }
        | Refusal::Unfenceable { detail }
        | Refusal::Unchainable { detail }
        | Refusal::NewFenceLimit { detail, .. }
        | Refusal::PreconditionNotChainable { detail } => {
            tracing::info!(
                error = refusal.code(),
                method,
                path,
                detail = detail.as_str(),
                "refused bad request"
            )
        }
        // What fencing depends on (the store, the issuer) is down: an error,
        // whichever it is (`error` says).
        Refusal::StoreUnavailable { detail }
        | Refusal::IssuerUnavailable { detail }
        | Refusal::VersionUnavailable { detail } => {
            tracing::error!(
                error = refusal.code(),
                method,
                path,
                detail = detail.as_str(),
                "refused: a service fencing depends on is unavailable"
            )
        }
        Refusal::VersionUnknown { resource, object } => tracing::info!(
            error = refusal.code(),
            method,
            path,
            resource = resource.as_str(),
            object = object.as_str(),
            "refused a chained write whose object's version is not known"
        ),
        Refusal::VersionConflict {
            resource,
            object,
            token,
            retry,
        } => tracing::info!(
            error = refusal.code(),
            method,
            path,
            resource = resource.as_str(),
            object = object.as_str(),
            token,
            retry,
            "the store refused a chained write's condition"
        ),
        Refusal::TokenNotIssued {
            resource,
            token,
            issued,
        } => tracing::warn!(
            error = refusal.code(),
            method,
            path,
            resource = resource.as_str(),
            token,
            issued,
            "refused a token its issuer never handed out"
        ),
    }
}
