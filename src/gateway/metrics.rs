//! Request counters and latency for `/metrics`, in Prometheus text format.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::access_log::AccessLog;
use super::outcome::RequestOutcome;
use crate::chain::{Chain, Source};
use crate::issuer::UrlIssuer;
use crate::Fences;

/// The labels of `fencegate_would_refuse_total`: the route (`default`
/// without `[[route]]`) and the reason `on` would have refused for.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WouldRefuseLabels {
    route: String,
    reason: &'static str,
}

/// The labels of `fencegate_route_requests_total`: the `[[route]]` that
/// took a request, and its outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    outcome: &'static str,
}

/// One route's request counters, one per entry of [`RequestOutcome::ALL`], taken
/// from the family once per route and configuration generation.
pub(crate) type RouteCounters = Arc<[Counter; RequestOutcome::ALL.len()]>;

/// The labels of `fencegate_requests_total`: the outcome, and under
/// credential custody the identity (bounded by the identities file), left
/// out for requests of no identity so that a gateway without custody has
/// one series per outcome, with no identity label.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct RequestLabels {
    outcome: &'static str,
    identity: Option<Arc<str>>,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        ("outcome", self.outcome).encode(encoder.encode_label())?;
        if let Some(identity) = &self.identity {
            ("identity", identity.as_ref()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// The gateway's metrics: what happened to each request, how long it took,
/// and the fence table's size and store activity (read at scrape time).
#[derive(Clone)]
pub(crate) struct Metrics {
    /// One handle per entry of [`RequestOutcome::ALL`], taken once, so that
    /// counting a request takes no lock on the family.
    requests: Arc<[Counter; RequestOutcome::ALL.len()]>,
    /// The family, for the series of identified requests (custody).
    by_identity: Family<RequestLabels, Counter>,
    /// Each identity's handles on its series, taken once: the family's
    /// own lookup (SipHash over the labels, and a lock) cost more than the
    /// rest of counting a request. Keyed by identity name, so bounded as
    /// the family is (one entry per name ever configured).
    identity_series: Arc<RwLock<HashMap<Arc<str>, IdentitySeries, foldhash::fast::RandomState>>>,
    /// `--enforce report`'s would-be refusals, by reason.
    would_refuse: Family<WouldRefuseLabels, Counter>,
    /// With `[[route]]` tables: requests by route and outcome.
    by_route: Family<RouteLabels, Counter>,
    latency: Histogram,
    /// Responses whose body failed after their head was relayed.
    responses_cut: Counter,
    registry: Arc<Registry>,
}

/// An identity's request counters, one per entry of
/// [`RequestOutcome::ALL`] (see [`Metrics::identity_series`]).
#[derive(Clone, Debug)]
pub(crate) struct IdentitySeries(Arc<[Counter; RequestOutcome::ALL.len()]>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Reads the fence table (and the access log's drop count) at scrape time,
/// rather than mirroring them in gauges that could drift.
#[derive(Debug)]
struct FenceCollector(Fences, Option<AccessLog>, Option<Arc<UrlIssuer>>);

/// One counter of the exposition, read at scrape time.
fn encode_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let counter = ConstCounter::new(value);
    counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)
}

/// One gauge of the exposition, read at scrape time.
fn encode_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for FenceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stored = self
            .0
            .stored_len()
            .map(|stored| stored.try_into().unwrap_or(usize::MAX));
        encode_gauge(
            &mut encoder,
            "fencegate_fences",
            "Fences (keys with a highest token): in the store when it can tell, else in memory",
            i64::try_from(stored.unwrap_or_else(|| self.0.len())).unwrap_or(i64::MAX),
        )?;
        if let Some(cache) = self.0.cache_stats() {
            for (name, help, value) in [
                (
                    "fencegate_fences_in_memory",
                    "Fences in memory (--fence-cache bounds them)",
                    cache.in_memory,
                ),
                (
                    "fencegate_fence_cache_bytes",
                    "Bytes counted for the fences in memory",
                    cache.used,
                ),
                (
                    "fencegate_fence_cache_bound_bytes",
                    "The bound on them (--fence-cache)",
                    cache.bound,
                ),
            ] {
                encode_gauge(
                    &mut encoder,
                    name,
                    help,
                    i64::try_from(value).unwrap_or(i64::MAX),
                )?;
            }
            for (name, help, value) in [
                (
                    "fencegate_fence_cold_reads",
                    "Fences read from the store because they were not in memory",
                    cache.cold_reads,
                ),
                (
                    "fencegate_fence_evictions",
                    "Fences that left memory (idle and durable; still in the store)",
                    cache.evictions,
                ),
                (
                    "fencegate_fence_cache_refusals",
                    "New keys refused at the bound (--state memory)",
                    cache.refusals,
                ),
            ] {
                encode_counter(&mut encoder, name, help, value)?;
            }
        }
        let stats = self.0.store_stats();
        encode_counter(
            &mut encoder,
            "fencegate_store_raises",
            "New highest tokens made durable",
            stats.raises,
        )?;
        encode_counter(
            &mut encoder,
            "fencegate_store_commits",
            "Durable commits (fsyncs) of the fence store; raises/commits is the group-commit size",
            stats.commits,
        )?;
        if let Some(shared) = stats.shared {
            encode_gauge(
                &mut encoder,
                "fencegate_shared_lease_held",
                "1 while this instance holds a live lease on the shared fences, else 0",
                i64::from(shared.lease_held),
            )?;
            encode_gauge(
                &mut encoder,
                "fencegate_shared_view_lag_revisions",
                "etcd revisions between the newest a claim saw and the one the local view caught up to",
                i64::try_from(shared.view_lag).unwrap_or(i64::MAX),
            )?;
            for (name, help, value) in [
                (
                    "fencegate_shared_lease_losses",
                    "Leases lost (deadline passed or etcd expired them); each cut the requests in flight",
                    shared.lease_losses,
                ),
                (
                    "fencegate_shared_claims_local",
                    "Claims answered from this instance's own in-flight record, with no etcd round trip",
                    shared.claims_local,
                ),
                (
                    "fencegate_shared_etcd_round_trips",
                    "Calls to etcd (claim transactions, renewals, record deletions, reads)",
                    shared.round_trips,
                ),
                (
                    "fencegate_shared_etcd_failures",
                    "Calls to etcd that failed",
                    shared.round_trip_failures,
                ),
                (
                    "fencegate_shared_waits",
                    "Claims that waited for a lower-token request in flight on another instance",
                    shared.waits,
                ),
                (
                    "fencegate_shared_records_deleted",
                    "In-flight records deleted after their last request",
                    shared.records_deleted,
                ),
                (
                    "fencegate_shared_highest_reads",
                    "Linearizable reads of a fence's highest, checking a chained write's observed version",
                    shared.highest_reads,
                ),
                (
                    "fencegate_shared_highest_read_transactions",
                    "etcd transactions that answered those reads (many reads share one)",
                    shared.highest_read_transactions,
                ),
            ] {
                encode_counter(&mut encoder, name, help, value)?;
            }
            let seconds = ConstCounter::new(shared.round_trip_seconds);
            seconds.encode(encoder.encode_descriptor(
                "fencegate_shared_etcd_seconds",
                "Time spent in calls to etcd",
                None,
                seconds.metric_type(),
            )?)?;
        }
        if let Some(log) = &self.1 {
            encode_counter(
                &mut encoder,
                "fencegate_access_log_dropped",
                "Access log lines dropped because the writer fell behind",
                log.dropped(),
            )?;
        }
        if let Some(issuer) = &self.2 {
            let counts = issuer.stats();
            for (name, help, value) in [
                (
                    "fencegate_issuer_checks",
                    "Tokens checked with the issuer (raises above the cached bound or not)",
                    counts.checks,
                ),
                (
                    "fencegate_issuer_cached",
                    "Checks answered by the cached bound",
                    counts.cached,
                ),
                (
                    "fencegate_issuer_merged",
                    "Checks answered by a question another check asked",
                    counts.merged,
                ),
                (
                    "fencegate_issuer_questions",
                    "Questions asked of the token issuer (round trips)",
                    counts.questions,
                ),
                (
                    "fencegate_issuer_failures",
                    "Questions or checks that failed or timed out",
                    counts.failures,
                ),
                (
                    "fencegate_issuer_not_issued",
                    "Tokens refused as never issued",
                    counts.not_issued,
                ),
            ] {
                encode_counter(&mut encoder, name, help, value)?;
            }
            let seconds = ConstCounter::new(counts.question_micros as f64 / 1e6);
            seconds.encode(encoder.encode_descriptor(
                "fencegate_issuer_question_seconds",
                "Time spent in questions to the token issuer",
                None,
                seconds.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// The chains of the routes in force, read at each scrape: written by
/// the start and by each reload, which swap in their routes' chains.
pub(crate) type Chains = Arc<RwLock<Vec<Arc<Chain>>>>;

/// Chained writes' counts (`crate::chain`), read at scrape time: the sum
/// over every route's chain.
#[derive(Debug)]
struct ChainCollector(Chains);

/// One counter per label value of `label`.
fn encode_labelled_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: &[(&str, u64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, count) in values {
        ConstCounter::new(*count).encode(metric.encode_family(&[(label, *value)])?)?;
    }
    Ok(())
}

impl Collector for ChainCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let chains = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = chains.iter().map(|chain| chain.stats()).fold(
            crate::chain::ChainStats::default(),
            |sum, one| crate::chain::ChainStats {
                observed_client_read: sum.observed_client_read + one.observed_client_read,
                observed_client_condition: sum.observed_client_condition
                    + one.observed_client_condition,
                observed_gateway_head: sum.observed_gateway_head + one.observed_gateway_head,
                conflicts_retry: sum.conflicts_retry + one.conflicts_retry,
                conflicts_overtaken: sum.conflicts_overtaken + one.conflicts_overtaken,
                unknown: sum.unknown + one.unknown,
            },
        );
        encode_labelled_counter(
            &mut encoder,
            "fencegate_chain_observations",
            "Object versions observed, by where they came from",
            "source",
            &[
                (Source::ClientRead.as_str(), stats.observed_client_read),
                (
                    Source::ClientCondition.as_str(),
                    stats.observed_client_condition,
                ),
                (Source::GatewayHead.as_str(), stats.observed_gateway_head),
            ],
        )?;
        encode_labelled_counter(
            &mut encoder,
            "fencegate_chain_conflicts",
            "Chained writes whose condition the store refused (retry: no higher token was admitted meanwhile)",
            "retry",
            &[
                ("true", stats.conflicts_retry),
                ("false", stats.conflicts_overtaken),
            ],
        )?;
        encode_counter(
            &mut encoder,
            "fencegate_chain_unknown",
            "Chained writes refused because their object's version was not known",
            stats.unknown,
        )
    }
}

impl Metrics {
    /// Metrics for a gateway over `fences`, writing `access_log`, checking
    /// tokens with `issuer` and chaining writes with `chains` (each
    /// route's), if any.
    pub(crate) fn new(
        fences: Fences,
        access_log: Option<AccessLog>,
        issuer: Option<Arc<UrlIssuer>>,
        chains: Chains,
    ) -> Self {
        let mut registry = Registry::default();
        let family = Family::<RequestLabels, Counter>::default();
        // Every outcome is present from the start, so that a rate over them
        // never misses a series.
        let requests = RequestOutcome::ALL.map(|outcome| {
            family
                .get_or_create(&RequestLabels {
                    outcome: outcome.as_str(),
                    identity: None,
                })
                .clone()
        });
        let by_identity = family.clone();
        registry.register(
            "fencegate_requests",
            "Data plane requests by outcome",
            family,
        );
        // 100 µs to ~52 s.
        let latency = Histogram::new(exponential_buckets(0.0001, 2.0, 20));
        registry.register(
            "fencegate_request_duration_seconds",
            "Data plane latency, request received to response headers sent",
            latency.clone(),
        );
        let would_refuse = Family::<WouldRefuseLabels, Counter>::default();
        registry.register(
            "fencegate_would_refuse",
            "--enforce report: requests forwarded that --enforce on would have refused, by reason",
            would_refuse.clone(),
        );
        let by_route = Family::<RouteLabels, Counter>::default();
        registry.register(
            "fencegate_route_requests",
            "With [[route]] tables: data plane requests by the route that took them and their outcome (requests no route took are fencegate_requests_total{outcome=\"no_route\"})",
            by_route.clone(),
        );
        let responses_cut = Counter::default();
        registry.register(
            "fencegate_responses_cut",
            "Forwarded requests whose response body failed (backend cut, reset or stalled) after its head was relayed: counted as forwarded in fencegate_requests, since the client already had the status",
            responses_cut.clone(),
        );
        registry.register_collector(Box::new(FenceCollector(fences, access_log, issuer)));
        registry.register_collector(Box::new(ChainCollector(chains)));
        Metrics {
            would_refuse,
            by_route,
            by_identity,
            identity_series: Arc::default(),
            requests: Arc::new(requests),
            latency,
            responses_cut,
            registry: Arc::new(registry),
        }
    }

    /// Records one request.
    pub(crate) fn observe(&self, outcome: RequestOutcome, elapsed: Duration) {
        // `ALL` lists the variants in declaration order (a unit test checks).
        self.requests[outcome as usize].inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// The counters of `route`'s requests by outcome (every outcome's
    /// series present from the start); the same counters for the same
    /// name in every generation.
    pub(crate) fn route_counters(&self, route: &str) -> RouteCounters {
        Arc::new(RequestOutcome::ALL.map(|outcome| {
            self.by_route
                .get_or_create(&RouteLabels {
                    route: route.to_owned(),
                    outcome: outcome.as_str(),
                })
                .clone()
        }))
    }

    /// A request of `route` forwarded that `enforce = "on"` would have
    /// refused, for `reason`.
    pub(crate) fn would_refuse(&self, route: &str, reason: &'static str) {
        self.would_refuse
            .get_or_create(&WouldRefuseLabels {
                route: route.to_owned(),
                reason,
            })
            .inc();
    }

    /// The series of requests that authenticated as `identity`
    /// (credential custody), to count them with [`Metrics::observe_as`].
    pub(crate) fn identity_series(&self, identity: &str) -> IdentitySeries {
        if let Ok(known) = self.identity_series.read() {
            if let Some(series) = known.get(identity) {
                return series.clone();
            }
        }
        let name: Arc<str> = Arc::from(identity);
        let counters = RequestOutcome::ALL.map(|outcome| {
            self.by_identity
                .get_or_create(&RequestLabels {
                    outcome: outcome.as_str(),
                    identity: Some(Arc::clone(&name)),
                })
                .clone()
        });
        let series = IdentitySeries(Arc::new(counters));
        if let Ok(mut known) = self.identity_series.write() {
            known.insert(name, series.clone());
        }
        series
    }

    /// As [`Metrics::observe`], for a request that authenticated as the
    /// identity of `series` (credential custody): counted in its series.
    pub(crate) fn observe_as(
        &self,
        outcome: RequestOutcome,
        series: &IdentitySeries,
        elapsed: Duration,
    ) {
        // `ALL` lists the variants in declaration order (a unit test checks).
        series.0[outcome as usize].inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// Records a response body that failed after its head was relayed.
    pub(crate) fn response_cut(&self) {
        self.responses_cut.inc();
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; an encoder error would only mean
        // a partial page, which Prometheus reports as a scrape error.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
