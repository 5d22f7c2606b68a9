//! One request's record, typed: when it started, its client connection,
//! the connection's busy mark, its access-log entry, its outcome. Made when
//! the request arrives, moved from the response future into the response
//! body, and closed exactly once, whatever ends the request: answered and
//! relayed, cut after its head, or dropped because the client went away.
//!
//! The gateway's own values travel here and in the request itself
//! (`inbound.rs`: the lease it was admitted under, an S3 `DeleteObjects`'
//! listed keys), not in extensions. Only the answers keep one: the refusal
//! or outcome of an answer the gateway made (read once, by
//! [`Exchange::answered`]'s caller, with [`RequestOutcome::of`]).
//!
//! [`Relayed`], the response body that carries the record to its end,
//! lives here with it (as tower-http's trace body lives in `trace/`).

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::fencing::ResponseBody;
use crate::head::RequestView;
use crate::http1::head::FieldLines;
use crate::store::LeaseStage;

use super::access_log::{AccessLog, LogEntry};
use super::activity::{Activity, Busy};
use super::body::response::FromProxy;
use super::clock;
use super::engine::CarriesFields;
use super::metrics::{IdentitySeries, Metrics};
use super::outcome::RequestOutcome;

/// What every request of one client connection shares, taken once per
/// connection.
#[derive(Debug)]
pub(crate) struct ClientConnection {
    pub(crate) metrics: Metrics,
    /// How long a request body may pause (`--client-body-timeout`).
    pub(crate) body_timeout: Duration,
    pub(crate) activity: Arc<Activity>,
    pub(crate) access_log: Option<AccessLog>,
    pub(crate) peer: SocketAddr,
}

/// One request's record (see the module docs).
#[derive(Debug)]
pub(crate) struct Exchange {
    started: Instant,
    // For its metrics: one reference count per request instead of the three
    // a `Metrics` clone takes.
    connection: Arc<ClientConnection>,
    // The connection is busy (not idle) while this lives.
    _busy: Busy,
    // Boxed: the exchange is moved several times per request (into the
    // response future, into the response body), and an entry is a few
    // hundred bytes that most gateways (no access log) never fill.
    entry: Option<Box<LogEntry>>,
    /// Set once the response head is out; `None` at the end means the
    /// client went away before an answer.
    answered: Option<RequestOutcome>,
    /// Credential custody: who the request authenticated as: its series
    /// of the metrics.
    identity: Option<IdentitySeries>,
}

impl Exchange {
    /// The record of `request`, arriving now on `connection`; `fence` is its
    /// fence key and token, for the access log.
    pub(crate) fn begin<R: RequestView>(
        connection: &Arc<ClientConnection>,
        request: &R,
        fence: impl FnOnce() -> (Option<String>, Option<u64>),
    ) -> Self {
        let started = clock::now_std();
        let entry = connection.access_log.as_ref().map(|log| {
            Box::new(LogEntry::new(
                log,
                started,
                connection.peer,
                Some((request.method().clone(), request.uri().clone())),
                fence(),
            ))
        });
        Exchange {
            started,
            connection: Arc::clone(connection),
            _busy: connection.activity.begin(),
            entry,
            answered: None,
            identity: None,
        }
    }

    /// A head the engine refused before it became a request (malformed,
    /// ambiguous framing, too large), answered `status` for `outcome`: counted
    /// and logged like any request, with no method, path or fence.
    pub(crate) fn refused_head(
        connection: &Arc<ClientConnection>,
        outcome: RequestOutcome,
        status: StatusCode,
    ) {
        let started = clock::now_std();
        let entry = connection.access_log.as_ref().map(|log| {
            Box::new(LogEntry::new(
                log,
                started,
                connection.peer,
                None,
                (None, None),
            ))
        });
        let mut exchange = Exchange {
            started,
            connection: Arc::clone(connection),
            _busy: connection.activity.begin(),
            entry,
            answered: None,
            identity: None,
        };
        exchange.answered(outcome, status);
    }

    /// Credential custody: the request authenticated as `identity`, and
    /// its fence (once custody may have made it path-style) is `fence`.
    pub(crate) fn identified(
        &mut self,
        identity: &str,
        fence: impl FnOnce() -> (Option<String>, Option<u64>),
    ) {
        self.identity = Some(self.connection.metrics.identity_series(identity));
        if let Some(entry) = &mut self.entry {
            entry.identity = Some(identity.to_owned());
            entry.fence(fence());
        }
    }

    /// The request is `route`'s: named in its access-log line.
    pub(crate) fn routed(&mut self, route: &Arc<str>) {
        if let Some(entry) = &mut self.entry {
            entry.route = Some(Arc::clone(route));
        }
    }

    /// `enforce = "report"`: forwarded by `route`, and `on` would have
    /// refused it for `reason`: counted, and named in its access-log line.
    pub(crate) fn would_refuse(&mut self, route: &str, reason: &'static str) {
        self.connection.metrics.would_refuse(route, reason);
        if let Some(entry) = &mut self.entry {
            entry.would_refuse = Some(reason);
        }
    }

    /// Where the request body's bytes are counted for the access log, if it
    /// is kept.
    pub(crate) fn bytes_in(&self) -> Option<Arc<AtomicU64>> {
        self.entry.as_ref().map(|entry| Arc::clone(&entry.bytes_in))
    }

    /// The response head is out, with `status`, for `outcome`: counted, with
    /// its latency.
    pub(crate) fn answered(&mut self, outcome: RequestOutcome, status: StatusCode) {
        match &self.identity {
            Some(identity) => self
                .connection
                .metrics
                .observe_as(outcome, identity, self.elapsed()),
            None => self.connection.metrics.observe(outcome, self.elapsed()),
        }
        if let Some(entry) = &mut self.entry {
            entry.answered(outcome, status);
        }
        self.answered = Some(outcome);
    }

    fn elapsed(&self) -> Duration {
        clock::now_std().saturating_duration_since(self.started)
    }

    /// `bytes` more of the response body went to the client.
    pub(crate) fn relayed(&mut self, bytes: usize) {
        if let Some(entry) = &mut self.entry {
            entry.bytes_out += bytes as u64;
        }
    }

    /// The response body failed after its head was out, for `why`: the
    /// client sees a cut connection; the metrics and the log see the failure.
    pub(crate) fn cut(&mut self, why: RequestOutcome) {
        self.connection.metrics.response_cut();
        if let Some(entry) = &mut self.entry {
            entry.cut(why);
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.answered.is_none() {
            // Dropped before an answer: the client went away while the
            // request waited (for admission, for the backend).
            self.connection
                .metrics
                .observe(RequestOutcome::ClientError, self.elapsed());
        }
        // The entry writes its line as it drops, after this.
    }
}

pin_project! {
    /// A response body on its way to the client, carrying its request's
    /// [`Exchange`] to the end: the connection counts as busy (not idle),
    /// and the access-log line waits, until it is dropped, which the
    /// client's server does once it has been sent or the connection failed.
    pub struct Relayed {
        #[pin]
        body: ResponseBody<FromProxy>,
        exchange: Option<Exchange>,
    }
}

impl Relayed {
    pub(crate) fn new(body: ResponseBody<FromProxy>, exchange: Option<Exchange>) -> Self {
        Relayed { body, exchange }
    }
}

impl CarriesFields for Relayed {
    fn fields(&self) -> Option<&FieldLines> {
        self.body.inner_ref().and_then(FromProxy::fields)
    }
}

impl http_body::Body for Relayed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.body.as_mut().poll_frame(cx));
        // Shared fences: no byte of the response goes out once the lease its
        // request was admitted under has ended (another instance may be
        // serving a higher token by now).
        if matches!(frame, Some(Ok(_))) {
            if let Some(lease) = this.body.as_ref().get_ref().lease() {
                if let Err(ended) = lease.check(LeaseStage::RelayingResponse) {
                    tracing::warn!("lease ended while a response was relayed: the response is cut");
                    if let Some(exchange) = this.exchange.as_mut() {
                        exchange.cut(RequestOutcome::FenceStoreUnavailable);
                    }
                    return Poll::Ready(Some(Err(axum::Error::new(ended))));
                }
            }
        }
        if let Some(exchange) = this.exchange.as_mut() {
            match &frame {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        exchange.relayed(data.len());
                    }
                }
                // The head (and its status) is already out: the client sees
                // a cut connection; the metrics and the log see the failure.
                Some(Err(_)) => exchange.cut(RequestOutcome::UpstreamError),
                None => {}
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
