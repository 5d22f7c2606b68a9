//! The data plane's service, made once per client connection: one
//! request's pipeline (`Pipeline::serve`), the fencing layer around the
//! proxy, with the request's [`Exchange`] recording it from arrival to the
//! end of its response body.
//!
//! Written out as small services rather than an axum `Router` with
//! `from_fn` middleware and `ConnectInfo`: those cost a boxed clone of the
//! inner service, a boxed future and an extensions map per request, and on
//! this path that showed in the profile (docs/BENCHMARKS.md). What belongs
//! to the connection (the client's address, TLS or not) is taken once.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderValue, CONNECTION, EXPECT};
use http::{HeaderName, Method, Request, Response, Version};
use hyper::body::Incoming;
use tower_layer::Layer;

use super::accept::ConnInfo;
use super::access_log::AccessLog;
use super::answer::{close_after, gateway_error, in_dialect};
use super::azure_reading::AzureReading;
use super::body::request::{Counted, DrainOnDrop, IncomingBody};
use super::body::response::FromProxy;
use super::cross_route::{cross_route, Crossing};
use super::custody::denied::Denied;
use super::custody::stream::Resigned;
use super::custody::{Custody, Forwarding};
use super::deadlines::{Side, StallTimeout};
use super::engine;
use super::exchange::{ClientConnection, Exchange, Relayed};
use super::generations::{Generation, Generations};
use super::hop::end_to_end_map;
use super::inbound::Inbound;
use super::metrics::{Metrics, RouteCounters};
use super::outcome::RequestOutcome;
use super::proxy::{refuse_unproxyable, ForwardedHeaders, Proxy};
use super::s3_hosts::S3Reading;
use super::s3_uploads;
use crate::dialect::answer::AnswerStyle;
use crate::dialect::plain_operations::{self, PlainDialect};
use crate::fencing::{refusal_response, Fencing, ResponseBody, WouldRefuse};
use crate::head::{HeaderFields, RequestView};
use crate::http1::head::RequestHead;
use crate::key::climbs_above_root;
use crate::misreading::{
    misread_s3_key, misread_separator, names_in_connection, read_head, DecidingFields, Misreading,
};
use crate::reach;
use crate::refusal::{OwnAnswer, Refusal};

/// Makes one [`Pipeline`] service per accepted connection.
#[derive(Debug, Clone)]
pub(crate) struct DataPlane {
    generations: Arc<Generations>,
    metrics: Metrics,
    body_timeout: Duration,
    access_log: Option<AccessLog>,
}

impl DataPlane {
    /// Requests are counted in `metrics`, taken by the route the
    /// generation in force picks, fenced and forwarded by it; a request
    /// body that pauses for `body_timeout` is cut.
    pub(crate) fn new(
        generations: Arc<Generations>,
        metrics: Metrics,
        body_timeout: Duration,
    ) -> Self {
        DataPlane {
            generations,
            metrics,
            body_timeout,
            access_log: None,
        }
    }

    /// Writes one line per request to `log`.
    pub(crate) fn access_log(mut self, log: AccessLog) -> Self {
        self.access_log = Some(log);
        self
    }

    pub(crate) fn connection(&self, info: &ConnInfo) -> Pipeline {
        let proxy_client = Proxy::client_of(info.peer, info.tls);
        let generation = self.generations.current();
        Pipeline {
            shared: Arc::new(PipelineShared {
                routes: routes_for(&generation, &proxy_client, info.peer),
                generation,
                generations: Arc::clone(&self.generations),
                proxy_client,
                tls: info.tls,
                client: Arc::new(ClientConnection {
                    metrics: self.metrics.clone(),
                    body_timeout: self.body_timeout,
                    activity: Arc::clone(&info.activity),
                    access_log: self.access_log.clone(),
                    peer: info.peer,
                }),
            }),
        }
    }
}

/// Each route of `generation` for one client connection.
fn routes_for(
    generation: &Generation,
    proxy_client: &Arc<ForwardedHeaders>,
    peer: std::net::SocketAddr,
) -> Box<[RouteConnection]> {
    generation
        .routes
        .iter()
        .map(|route| RouteConnection {
            inner: route
                .fencing
                .layer(route.proxy.with_client(Arc::clone(proxy_client)))
                .with_client(peer),
            answers: route.answers,
            custody: route.custody.clone(),
            s3_reading: route.s3_reading.clone(),
            plain_dialect: route.plain_dialect,
            azure_reading: route.azure_reading.clone(),
            name: Arc::clone(&route.name),
            counters: route.counters.clone(),
            own_token_header: {
                let header = route.fencing.token_header_name();
                header != "x-fencing-token" && header != "x-ms-fencing-token"
            },
        })
        .collect()
}

/// The service for one client connection.
#[derive(Debug, Clone)]
pub(crate) struct Pipeline {
    shared: Arc<PipelineShared>,
}

#[derive(Debug)]
struct PipelineShared {
    /// The generation the connection was accepted under, and its routes
    /// (in the configuration's order) for this connection.
    generation: Arc<Generation>,
    routes: Box<[RouteConnection]>,
    generations: Arc<Generations>,
    /// What the proxy says of this client.
    proxy_client: Arc<ForwardedHeaders>,
    /// The client's connection is TLS.
    tls: bool,
    client: Arc<ClientConnection>,
}

/// One route for one client connection.
#[derive(Debug)]
struct RouteConnection {
    inner: Fencing<Proxy>,
    answers: AnswerStyle,
    custody: Option<Arc<Custody>>,
    s3_reading: Option<S3Reading>,
    plain_dialect: Option<PlainDialect>,
    azure_reading: Option<AzureReading>,
    name: Arc<str>,
    counters: Option<RouteCounters>,
    /// The route's token header has a name of its own (not a default one,
    /// which the rules before routing look at already).
    own_token_header: bool,
}

impl hyper::service::Service<Request<Incoming>> for Pipeline {
    type Response = Response<Relayed>;
    type Error = Infallible;
    // HTTP/2 (hyper's server) names its futures: boxed, as the engine's
    // are not.
    type Future = Pin<Box<dyn Future<Output = Result<Response<Relayed>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let connection = self.clone();
        Box::pin(async move {
            Ok(connection
                .serve(Inbound::from(request.map(IncomingBody::Hyper)))
                .await)
        })
    }
}

impl engine::Handler for Pipeline {
    type Body = Relayed;

    fn call(
        &self,
        head: RequestHead,
        body: engine::RequestBody,
    ) -> impl Future<Output = Response<Relayed>> + Send {
        self.serve(Inbound::http1(head, IncomingBody::Engine(body)))
    }

    fn refused(&self, status: http::StatusCode, error: &'static str) -> AnswerStyle {
        let outcome = if error == RequestOutcome::InvalidPath.as_str() {
            RequestOutcome::InvalidPath
        } else {
            RequestOutcome::OtherRefusal
        };
        Exchange::refused_head(&self.shared.client, outcome, status);
        self.shared.generation.answers
    }
}

impl super::accept::MaybeEngine for Pipeline {
    type Engine = Pipeline;

    fn engine(&self) -> Option<Pipeline> {
        Some(self.clone())
    }
}

impl Pipeline {
    /// One request's pipeline: its [`Exchange`] begun, its body bounded
    /// and counted, refused before fencing if it cannot be proxied, else
    /// fenced (after its listing is read, for an S3 `DeleteObjects`) and
    /// forwarded; once the response head is ready its outcome and latency
    /// are recorded in the exchange, which [`Relayed`] carries to the end
    /// of the response body. A request given up before its answer (the
    /// client left) drops the exchange, which records that.
    async fn serve(&self, request: Inbound<IncomingBody>) -> Response<Relayed> {
        let shared = &self.shared;
        if shared.generation.number != shared.generations.number() {
            // Boxed: once per connection after a reload.
            return Box::pin(self.serve_in_new_generation(request)).await;
        }
        self.serve_on(&shared.generation, &shared.routes, request)
            .await
    }

    /// A request that arrived after a reload: served under the new
    /// generation, with routes built for it; an HTTP/1.x connection is
    /// closed after it, so that the next one is built under the new
    /// generation.
    async fn serve_in_new_generation(&self, request: Inbound<IncomingBody>) -> Response<Relayed> {
        let shared = &self.shared;
        let generation = shared.generations.current();
        let routes = routes_for(&generation, &shared.proxy_client, shared.client.peer);
        let http1 = request.version() <= Version::HTTP_11;
        let mut response = self.serve_on(&generation, &routes, request).await;
        if http1 {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }

    async fn serve_on(
        &self,
        generation: &Generation,
        routes: &[RouteConnection],
        mut request: Inbound<IncomingBody>,
    ) -> Response<Relayed> {
        let connection = &self.shared;
        let index = generation.table.pick(&request);
        let picked = index.and_then(|i| routes.get(i));
        // Before anything reads it for what it does: see `misreading`.
        let (deciding, host_field) = match read_head(&request, request.version()) {
            Ok(read) => read,
            Err(found) => {
                let answers = picked.map_or(generation.answers, |route| route.answers);
                return self.misread(picked, answers, &request, &found);
            }
        };
        let (Some(route), Some(index)) = (picked, index) else {
            return self.no_route(&request);
        };
        if let Some(found) = misread_on_route(route, &request) {
            return self.misread(Some(route), route.answers, &request, &found);
        }
        // An S3 store reads the bucket from a virtual-hosted request's
        // host: so does everything after this (keys, reach, the chain).
        if let Some(reading) = &route.s3_reading {
            match reading.read_as(&request, host_field) {
                Ok(Some(target)) => request.read_as(target),
                Ok(None) => {}
                Err(found) => return self.misread(Some(route), route.answers, &request, &found),
            }
            if route.inner.enforces() && !route.inner.allows_unfenced_writes() {
                let read_fields = [route.inner.token_header().clone()];
                if let Some(found) = reading.unknown_write(&request, &read_fields, deciding) {
                    return self.misread(Some(route), route.answers, &request, &found);
                }
            }
        }
        if let Some(dialect) = route.plain_dialect {
            if route.inner.enforces() && !route.inner.allows_unfenced_writes() {
                if let Some(found) = unknown_plain_write(dialect, &request, deciding) {
                    return self.misread(Some(route), route.answers, &request, &found);
                }
            }
        }
        // An Azure store without custody: a write the table does not read
        // cannot be fenced.
        if let Some(reading) = &route.azure_reading {
            if route.inner.enforces() && !route.inner.allows_unfenced_writes() {
                let read_fields = [route.inner.token_header().clone()];
                if let Some(found) = reading.unknown_write(&request, &read_fields) {
                    return self.misread(Some(route), route.answers, &request, &found);
                }
            }
        }
        // S3 upload ids bound to their object without custody
        // (`s3_uploads.rs`): only a request with a query looks.
        let (upload, upload_denied) = match &route.s3_reading {
            // Boxed: the common request carries one word of it across
            // its awaits.
            Some(_) if route.inner.enforces() => match s3_uploads::upload_step(&request) {
                Ok(step) => (step.map(Box::new), None),
                Err(denied) => (None, Some(denied)),
            },
            _ => (None, None),
        };
        let custody = route.custody.as_deref();
        let mut exchange = Exchange::begin(&connection.client, &request, || match custody {
            // Known once custody has read the request.
            Some(_) => (None, None),
            None => route.inner.fence_of(&request),
        });
        exchange.routed(&route.name);
        let denied = match custody {
            Some(custody) => self
                .check_custody(route, custody, &mut request, &mut exchange)
                .err(),
            None => upload_denied,
        };
        if let (Some(denied), Some(_)) = (&denied, custody) {
            // What an operator needs to find a client whose credentials or
            // grants are wrong (the answer itself says little, by design).
            tracing::info!(
                method = request.method().as_str(),
                path = request.uri().path(),
                identity = request.custody.as_deref().map(|v| v.identity.name.as_str()),
                detail = denied.message.as_str(),
                "refused by credential custody"
            );
        }
        // Every object it reaches is its route's (a DeleteObjects' keys are
        // looked at once its body is read).
        let crossing = match denied {
            None if generation.table.is_routed() => cross_route(
                &generation.table,
                index,
                &request,
                route.inner.flat_keys(),
                None,
            ),
            _ => None,
        };
        let counter = exchange.bytes_in();
        let timeout = connection.client.body_timeout;
        // A client that asked `Expect: 100-continue` and gets a refusal
        // instead may never send its body: reading on would take its next
        // request for the body. Such a body is abandoned, never drained, and
        // an HTTP/1 connection is closed after the refusal: hyper itself
        // reads once more "in case a tiny body was included", which can
        // swallow a next request that arrived meanwhile.
        let expects_continue = deciding.may_carry_expect() && request.fields().contains(&EXPECT);
        // The engine drains a body itself, after the response, before it
        // reads the next request from the same bytes.
        let drain = !expects_continue && matches!(request.body, IncomingBody::Hyper(_));
        let close_if_refused = expects_continue && request.version() <= Version::HTTP_11;
        // The backend's lines go into the map for an HTTP/2 client: hyper
        // writes the map alone.
        let fields_to_map = request.version() >= Version::HTTP_2;
        // A signed aws-chunked body under custody: verified and re-signed
        // as it passes.
        let chunked = request
            .custody
            .as_deref()
            .and_then(|verified| match &verified.forward {
                Forwarding::Signed {
                    chunked: Some(chunked),
                    ..
                } => Some((chunked.0.clone(), Arc::clone(&chunked.1))),
                _ => None,
            });
        let request = request.map_body(|body| {
            if http_body::Body::is_end_stream(&body) {
                // No body to time (a GET): and `Empty` is a unit, so boxing it
                // allocates nothing.
                Body::empty()
            } else {
                let body = DrainOnDrop::new(StallTimeout::new(body, timeout, Side::Client), drain);
                let body = match counter {
                    Some(counter) => Body::new(Counted::new(body, counter)),
                    None => Body::new(body),
                };
                match chunked {
                    Some((client, cell)) => Body::new(Resigned::new(body, client, cell)),
                    None => body,
                }
            }
        });
        let answered = match (
            denied,
            refuse_unproxyable(&request, deciding.may_carry_upgrade()),
        ) {
            // Custody refused it: it learns nothing of fences.
            (Some(denied), _) => Ok(denied.to_response(route.answers).map(ResponseBody::refusal)),
            (None, _) if crossing.is_some() => Ok(crossed(generation, index, crossing.as_ref())),
            // Refused before fencing: never proxied, so it raises no fence.
            (None, Some(refusal)) => {
                Ok(refusal.map(|body| ResponseBody::inner(FromProxy::from(body), None)))
            }
            // Boxed: a rare path, whose state would otherwise be part of
            // every request's future.
            (None, None) if upload.is_some() => match upload {
                Some(step) => {
                    Ok(
                        s3_uploads::forward_boxed(&route.inner, *step, request, route.answers)
                            .await,
                    )
                }
                None => route.inner.forward_fenced(request).await,
            },
            // Boxed: a rare path, whose state would otherwise be part of
            // every request's future.
            (None, None)
                if route.inner.needs_listing(&request)
                    || ((custody.is_some() || generation.table.is_routed())
                        && reach::lists_objects_in_body(&request)) =>
            {
                let routing = Routing { generation, index };
                Box::pin(read_listing(route, routing, request)).await
            }
            (None, None) => route.inner.forward_fenced(request).await,
        };
        let mut response = match answered {
            Ok(response) => response,
            Err(never) => match never {},
        };
        if fields_to_map {
            let fields = response
                .body_mut()
                .inner_mut()
                .and_then(FromProxy::take_fields);
            if let Some(fields) = fields {
                response
                    .headers_mut()
                    .extend(end_to_end_map(|| fields.iter()));
            }
        }
        if route.answers != AnswerStyle::Json {
            in_dialect(&mut response, route.answers);
        }
        let outcome = RequestOutcome::of(&response);
        if let Some(counters) = &route.counters {
            counters[outcome as usize].inc();
        }
        if let Some(mark) = response.extensions().get::<WouldRefuse>() {
            exchange.would_refuse(&route.name, mark.reason);
        }
        if close_if_refused && outcome != RequestOutcome::Forwarded {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        exchange.answered(outcome, response.status());
        response.map(|body| Relayed::new(body, Some(exchange)))
    }
}

impl Pipeline {
    /// Credential custody's checks of `request`, before anything else:
    /// authenticated, every object it reaches authorised, a token that
    /// would raise a fence only from an identity that may write there.
    fn check_custody(
        &self,
        route: &RouteConnection,
        custody: &Custody,
        request: &mut Inbound<IncomingBody>,
        exchange: &mut Exchange,
    ) -> Result<(), Denied> {
        let admitted = custody.admit(request, self.shared.tls, self.shared.client.peer.ip());
        let Some(verified) = request.custody.as_deref() else {
            return admitted;
        };
        // The fence it would raise: asked for only when someone reads it
        // (an access log, or an identity that may not raise it), as the
        // fencing layer works it out again anyway.
        let fence_of = || match &admitted {
            Ok(()) => route.inner.fence_of(&*request),
            Err(_) => (None, None),
        };
        let fence = (admitted.is_ok() && !verified.may_raise).then(fence_of);
        exchange.identified(&verified.identity.name, || {
            fence.clone().unwrap_or_else(fence_of)
        });
        admitted?;
        if let Some((Some(key), Some(token))) = &fence {
            verified.check_raise(key, *token, route.inner.highest(key))?;
        }
        Ok(())
    }
}

/// What `route`'s store could read otherwise in `request`, once the route
/// is known: its dialect's path rules, its own token header named in
/// `Connection`, a climbing path where the route does not enforce (with a
/// token, the fencing layer reads the path after the token's syntax), a
/// `Destination` to an upstream with a base path. Kept out of line: the
/// common request finds nothing, and its checks are a few comparisons.
#[inline(never)]
/// Without custody, a write of a `webdav` or `http` store that no row of
/// its table takes (a method of the other dialect, a WebDAV field its row
/// does not read): what the store does with it is not what the gateway
/// fenced (400 `unfenceable_write`, unless `--allow-unfenced-writes`).
/// Reads go on: the client's own credentials reach the store, and nothing
/// fenced changes.
fn unknown_plain_write(
    dialect: PlainDialect,
    request: &Inbound<IncomingBody>,
    deciding: DecidingFields,
) -> Option<Misreading> {
    let method = request.method();
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || method.as_str() == "PROPFIND";
    if reads
        || (deciding.none_of(plain_operations::DAV_FIELDS_MASK)
            && plain_operations::plain_method(dialect, method))
    {
        return None;
    }
    let present: Vec<&str> = deciding
        .names()
        .map(HeaderName::as_str)
        .filter(|name| plain_operations::DAV_FIELDS.contains(name))
        .collect();
    plain_operations::recognise(dialect, method.as_str(), &present)
        .err()
        .map(|refused| Misreading::UnknownWrite { detail: refused.0 })
}

fn misread_on_route(
    route: &RouteConnection,
    request: &Inbound<IncomingBody>,
) -> Option<Misreading> {
    let path = request.uri().path();
    let by_dialect = match route.answers {
        AnswerStyle::S3 => misread_s3_key(path),
        _ => misread_separator(path, route.custody.is_some()),
    };
    if by_dialect {
        return Some(match route.answers {
            AnswerStyle::S3 => Misreading::S3Key,
            _ => Misreading::Separator,
        });
    }
    if route.own_token_header {
        // The default names are looked at before routing already.
        if let Some(found) = names_in_connection(request, route.inner.token_header()) {
            return Some(found);
        }
    }
    if !route.inner.enforces() && climbs_above_root(path) {
        return Some(Misreading::ClimbingPath);
    }
    if route.inner.get_ref().has_base() && request.fields().contains(&reach::DESTINATION) {
        return Some(Misreading::DestinationUnderBase);
    }
    None
}

impl Pipeline {
    /// A request a store could read as another operation (`misreading`):
    /// refused in the route's dialect (the gateway's, with no route), in
    /// every mode; nothing is forwarded and no fence is touched.
    fn misread(
        &self,
        route: Option<&RouteConnection>,
        answers: AnswerStyle,
        request: &Inbound<IncomingBody>,
        found: &Misreading,
    ) -> Response<Relayed> {
        let connection = &self.shared;
        let mut exchange = Exchange::begin(&connection.client, request, || (None, None));
        let outcome = match found.code() {
            "invalid_path" => RequestOutcome::InvalidPath,
            "unfenceable_write" => RequestOutcome::UnfenceableWrite,
            _ => RequestOutcome::OtherRefusal,
        };
        let mut response = gateway_error(found.status(), found.code(), &found.detail(), outcome);
        if let Misreading::MethodNotAllowed { .. } = found {
            // RFC 9110 §15.5.6: a 405 says which methods are.
            response.headers_mut().insert(
                http::header::ALLOW,
                HeaderValue::from_static(
                    "GET, HEAD, OPTIONS, PUT, POST, DELETE, PATCH, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK",
                ),
            );
        }
        let mut response = response.map(|body| ResponseBody::inner(FromProxy::from(body), None));
        if answers != AnswerStyle::Json {
            in_dialect(&mut response, answers);
        }
        if let Some(route) = route {
            exchange.routed(&route.name);
            if let Some(counters) = &route.counters {
                counters[outcome as usize].inc();
            }
        }
        exchange.answered(outcome, response.status());
        response.map(|body| Relayed::new(body, Some(exchange)))
    }

    /// 404 `no_route`: no route takes `request`; it reaches no backend.
    /// Always JSON: no route, so no store's dialect.
    fn no_route(&self, request: &Inbound<IncomingBody>) -> Response<Relayed> {
        let connection = &self.shared;
        let mut exchange = Exchange::begin(&connection.client, request, || (None, None));
        let response = gateway_error(
            http::StatusCode::NOT_FOUND,
            "no_route",
            "no route of the configuration takes this request's host and path",
            RequestOutcome::NoRoute,
        );
        let response = response.map(|body| ResponseBody::inner(FromProxy::from(body), None));
        exchange.answered(RequestOutcome::NoRoute, response.status());
        response.map(|body| Relayed::new(body, Some(exchange)))
    }
}

/// Where a request was routed: its generation's table and names, and its
/// route's index in them.
struct Routing<'g> {
    generation: &'g Generation,
    index: usize,
}

/// 400 `cross_route`: the request reaches an object of another route (or
/// of none); never forwarded.
fn crossed(
    generation: &Generation,
    own: usize,
    crossing: Option<&Crossing>,
) -> Response<ResponseBody<FromProxy>> {
    let name = |route: usize| {
        generation
            .routes
            .get(route)
            .map_or_else(String::new, |route| route.name.to_string())
    };
    let detail = crossing.map_or_else(String::new, |crossing| crossing.detail(&name(own), name));
    let response = gateway_error(
        http::StatusCode::BAD_REQUEST,
        "cross_route",
        &detail,
        RequestOutcome::OtherRefusal,
    );
    response.map(|body| ResponseBody::inner(FromProxy::from(body), None))
}

/// An S3 `DeleteObjects`: reads its body (at most
/// [`MAX_LISTING_BYTES`](crate::reach::MAX_LISTING_BYTES)), hands the keys
/// it lists to the fencing layer, and forwards the body unchanged (so
/// `Content-MD5` and checksums still verify at the backend).
async fn read_listing(
    shared: &RouteConnection,
    routing: Routing<'_>,
    request: Inbound<Body>,
) -> Result<Response<ResponseBody<FromProxy>>, Infallible> {
    let (request, body) = request.split_body();
    let limited = http_body_util::Limited::new(body, reach::MAX_LISTING_BYTES);
    let body = match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let refused = if error.is::<http_body_util::LengthLimitError>() {
                let refusal = Refusal::Unfenceable {
                    detail: format!(
                        "the DeleteObjects body is above {} bytes",
                        reach::MAX_LISTING_BYTES
                    ),
                };
                refusal_response(&refusal)
            } else {
                let response = close_after(gateway_error(
                    http::StatusCode::BAD_REQUEST,
                    "client_body_error",
                    &format!("the request body could not be read: {error}"),
                    RequestOutcome::ClientError,
                ));
                response.map(|body| ResponseBody::inner(FromProxy::from(body), None))
            };
            return Ok(refused);
        }
    };
    let listed = match reach::listed_objects(&body) {
        Ok(listed) => listed,
        Err(unfenceable) => {
            let refusal = Refusal::Unfenceable {
                detail: unfenceable.0,
            };
            let mut response = refusal_response(&refusal);
            if shared.answers == AnswerStyle::S3 {
                // S3 answers every DeleteObjects body it cannot take (more
                // than 1,000 keys, bad XML) MalformedXML: an SDK, and a
                // suite's clean-up, know that code.
                if let Some(own) = response.extensions_mut().get_mut::<OwnAnswer>() {
                    own.json["error"] = serde_json::Value::from("MalformedXML");
                }
            }
            return Ok(response);
        }
    };
    let crossing = cross_route(
        &routing.generation.table,
        routing.index,
        &request,
        shared.inner.flat_keys(),
        Some(&listed),
    );
    if crossing.is_some() {
        return Ok(crossed(
            routing.generation,
            routing.index,
            crossing.as_ref(),
        ));
    }
    if let Some(custody) = &shared.custody {
        if let Err(denied) = custody.authorise_listed(&request, &listed.0) {
            return Ok(denied
                .to_response(shared.answers)
                .map(ResponseBody::refusal));
        }
    }
    let mut request = request.map_body(|()| Body::from(body));
    request.set_listed(listed);
    shared.inner.forward_fenced(request).await
}
